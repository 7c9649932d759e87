/**
 * Shared benchmark plumbing: start processes on free ports, run wrk (Debian package `wrk`) with
 * latency percentiles, parse its figures. Loads go to 127.0.0.1 only, bounded in time.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Subprocess } from 'bun'
import { systemClock } from '../src/clock'
import { loadConfig } from '../src/config'
import { migrate, openDatabase } from '../src/db/open'
import { SqliteEngine } from '../src/db/engine'
import { Writer } from '../src/db/writer'
import { Logger } from '../src/http/log'
import { SecretBox } from '../src/secrets'
import { buildServices, startServices, stopServices } from '../src/services'
import { copyRow } from '../test/support/rows'
import { hostEnv } from '../test/support/server'

export const ROOT = join(import.meta.dir, '..')
export const ADMIN = 'bench-admin-token-0123456789'

export async function freePort() {
  const s = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('') })
  const p = s.port!
  s.stop(true)
  return p
}

async function waitFor(url: string, proc: Subprocess) {
  for (let i = 0; i < 400; i++) {
    if (proc.exitCode !== null) throw new Error(`process exited ${proc.exitCode}`)
    try {
      if ((await fetch(url)).ok) return
    } catch {
      // not up yet
    }
    await Bun.sleep(50)
  }
  throw new Error(`${url} did not come up`)
}

export async function startBare() {
  const port = await freePort()
  const proc = Bun.spawn(['bun', join(ROOT, 'bench/bare-hello.ts')], { env: { ...process.env, PORT: String(port) }, stdout: 'ignore', stderr: 'inherit' })
  await waitFor(`http://127.0.0.1:${port}/`, proc)
  return { base: `http://127.0.0.1:${port}`, stop: () => proc.kill() }
}

/**
 * The durable-insert ceiling (bench/bare-insert.ts) on its own SQLite file; POST JSON with
 * `recipient` and `body`. `gather`: batch its commits the way Capstan's writer does.
 */
export async function startBareInsert(gather = false) {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), 'bare-insert-'))
  const proc = Bun.spawn(['bun', join(ROOT, 'bench/bare-insert.ts')], { env: { ...process.env, PORT: String(port), DB_PATH: join(dir, 'b.db'), GATHER: gather ? '1' : '0' }, stdout: 'ignore', stderr: 'inherit' })
  for (let i = 0; i < 200; i++) {
    const r = await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body: '{"recipient":"+15550000000","body":"up?"}' }).catch(() => null)
    if (r?.status === 202) break
    await Bun.sleep(50)
  }
  return {
    base: `http://127.0.0.1:${port}`,
    stop: () => {
      proc.kill()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** A Capstan server on a temp data dir, run from `root` (this checkout unless another is given, for a paired run against an older commit). */
export async function startCapstan(env: Record<string, string> = {}, root = ROOT) {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), 'capstan-bench-'))
  const clean = hostEnv()
  const proc = Bun.spawn(['bun', join(root, 'src/main.ts'), 'serve'], {
    cwd: root,
    env: {
      ...clean,
      CAPSTAN_HOST: '127.0.0.1',
      CAPSTAN_PORT: String(port),
      CAPSTAN_DATA_DIR: dir,
      CAPSTAN_ADMIN_TOKEN: ADMIN,
      CAPSTAN_KEY_RATE_LIMIT: '10000000',
      CAPSTAN_CLAMD: `unix:${join(dir, 'none.sock')}`,
      ...env,
    },
    // the request log still runs (default level info), its output discarded — or, with
    // BENCH_KEEP_LOGS set to a folder, kept there (one file per instance, left after it stops)
    stdout: process.env.BENCH_KEEP_LOGS ? Bun.file(join(process.env.BENCH_KEEP_LOGS, `capstan-${port}.log`)) : 'ignore',
    stderr: 'inherit',
  })
  const base = `http://127.0.0.1:${port}`
  await waitFor(`${base}/healthz`, proc)
  const admin = async (method: string, path: string, body?: unknown) => {
    const r = await fetch(`${base}/admin/api${path}`, { method, headers: { authorization: `Bearer ${ADMIN}`, 'content-type': 'application/json' }, body: body === undefined ? undefined : JSON.stringify(body) })
    return (await r.json()) as any
  }
  return {
    base,
    dir,
    proc,
    admin,
    stop: async () => {
      proc.kill()
      await proc.exited
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/**
 * A workspace on `cap` with a sandbox number and 50 API keys, and the wrk script that sends
 * through them (each request with the next key, to a new recipient): the POST /messages load of
 * the paired and the PostgreSQL benchmarks.
 */
export async function sendLoad(cap: Awaited<ReturnType<typeof startCapstan>>, phone = '+15550009999') {
  const ws = (await cap.admin('POST', '/workspaces', { name: `Bench ${crypto.randomUUID().slice(0, 8)}` })).data
  const conn = (await cap.admin('POST', `/workspaces/${ws.id}/connections`, { phone, driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).data
  const keys: string[] = []
  for (let i = 0; i < 50; i++) keys.push((await cap.admin('POST', `/workspaces/${ws.id}/keys`, { name: `k${i}` })).data.key)
  const lua = `
local n = 0
local keys = {${keys.map((k) => `"${k}"`).join(',')}}
local tid = math.random(100, 999)
request = function()
  n = n + 1
  local body = string.format('{"connection_id":"${conn.id}","recipient":"+1555%03d%04d","body":"Your order %d has shipped"}', tid, n % 10000, n)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Authorization"] = "Bearer " .. keys[(n % #keys) + 1]}, body)
end`
  return { keys, lua, connection: conn.id as string }
}

export interface WrkResult {
  rps: number
  p50: number
  p99: number
  errors: number
  /** Of the errors, requests wrk gave up on after 2 s (answered or not later): a stall, not a refusal. */
  timeouts?: number
}

function ms(text: string): number {
  const m = /([\d.]+)(us|ms|s)/.exec(text)
  if (!m) return NaN
  const v = Number(m[1])
  return m[2] === 'us' ? v / 1000 : m[2] === 's' ? v * 1000 : v
}

/** Run wrk against `url`; `lua` is an optional request script. */
export async function wrk(url: string, opts: { seconds?: number; connections?: number; threads?: number; lua?: string; headers?: Record<string, string> } = {}): Promise<WrkResult> {
  const args = ['wrk', `-t${opts.threads ?? 1}`, `-c${opts.connections ?? 50}`, `-d${opts.seconds ?? 8}s`, '--latency']
  for (const [k, v] of Object.entries(opts.headers ?? {})) args.push('-H', `${k}: ${v}`)
  let script: string | null = null
  if (opts.lua) {
    script = join(tmpdir(), `wrk-${crypto.randomUUID()}.lua`)
    writeFileSync(script, opts.lua)
    args.push('-s', script)
  }
  args.push(url)
  const p = Bun.spawn(args, { stdout: 'pipe', stderr: 'pipe' })
  const out = await new Response(p.stdout).text()
  await p.exited
  if (script) rmSync(script, { force: true })
  const rps = Number(/Requests\/sec:\s+([\d.]+)/.exec(out)?.[1] ?? NaN)
  const p50 = ms(/\n\s+50%\s+(\S+)/.exec(out)?.[1] ?? '')
  const p99 = ms(/\n\s+99%\s+(\S+)/.exec(out)?.[1] ?? '')
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(out)?.[1] ?? 0)
  const sockErr = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(out)
  const timeouts = sockErr ? Number(sockErr[4]) : 0
  const errors = non2xx + (sockErr ? sockErr.slice(1).reduce((a, b) => a + Number(b), 0) : 0)
  return { rps, p50, p99, errors, ...(errors ? { timeouts } : {}) }
}

export const fmt = (r: WrkResult) => `${Math.round(r.rps).toLocaleString('en-US')} req/s, p50 ${r.p50.toFixed(2)} ms, p99 ${r.p99.toFixed(2)} ms${r.errors ? `, ${r.errors} errors${r.timeouts ? ` (${r.timeouts} timed out)` : ''}` : ''}`

export interface Load {
  name: string
  url: string
  lua?: string
  headers?: Record<string, string>
}

export interface RoundsResult {
  name: string
  runs: WrkResult[]
  /** Median of the rounds: requests/s, p50 and p99 each taken separately. */
  median: WrkResult
}

export const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}

/**
 * Measure several loads in turns — A, B, C, A, B, C, ... — after one warm-up run each, and take
 * the median of each. These machines are shared and noisy: a single run of each load can land in
 * a fast or a slow minute, while turns put every load through the same minutes.
 */
export async function rounds(loads: Load[], opts: { rounds: number; seconds: number; connections?: number }): Promise<RoundsResult[]> {
  const connections = opts.connections ?? 50
  for (const l of loads) await wrk(l.url, { seconds: 2, connections, lua: l.lua, headers: l.headers })
  const runs: WrkResult[][] = loads.map(() => [])
  for (let r = 0; r < opts.rounds; r++) {
    for (const [i, l] of loads.entries()) runs[i]!.push(await wrk(l.url, { seconds: opts.seconds, connections, lua: l.lua, headers: l.headers }))
  }
  return loads.map((l, i) => {
    const rs = runs[i]!
    return {
      name: l.name,
      runs: rs,
      median: { rps: median(rs.map((r) => r.rps)), p50: median(rs.map((r) => r.p50)), p99: median(rs.map((r) => r.p99)), errors: rs.reduce((a, r) => a + r.errors, 0) },
    }
  })
}

/** "43% (38–51%)": the ratio of medians, then the range of the per-round ratios. */
export function ratio(x: RoundsResult, ceiling: RoundsResult): string {
  const per = x.runs.map((r, i) => r.rps / ceiling.runs[i]!.rps)
  const pct = (v: number) => `${Math.round(v * 100)}%`
  return `${pct(x.median.rps / ceiling.median.rps)} (rounds ${pct(Math.min(...per))}–${pct(Math.max(...per))})`
}

/**
 * Run `work`: how long it took and the longest the event loop was held meanwhile — a 1 ms timer's
 * worst lateness, which is what every other request and send waited. A run that never lets the
 * timer fire is held for all of it.
 */
export async function timedHold<T>(work: () => Promise<T>): Promise<{ result: T; ms: number; heldMs: number }> {
  let last = performance.now()
  let held = 0
  const tick = setInterval(() => {
    const now = performance.now()
    held = Math.max(held, now - last)
    last = now
  }, 1)
  const started = performance.now()
  const result = await work()
  const ms = performance.now() - started
  await Bun.sleep(5) // the timer's turn after a run that never yielded
  clearInterval(tick)
  return { result, ms, heldMs: held }
}

/**
 * A sandbox number that went offline with `count` messages queued on it (~200-byte bodies), in a
 * workspace whose webhook endpoint gets an event for each (not delivered: the dispatcher is stopped).
 */
export async function offlineBacklog(env: Awaited<ReturnType<typeof import('../test/support/inproc').inProcess>>, count: number) {
  const { svc, db } = env
  const ws = await svc.workspaces.create({ name: 'Backlog' })
  await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/hook', undefined)
  svc.webhooks.stop()
  const conn = await svc.connections.create(ws.id, { phone: '+15550007000', driver: 'sandbox' })
  const first = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15550007001', body: 'x'.repeat(200), attachments: [] })
  await svc.connections.patch(conn.id, { status: 'offline' })
  copyRow(db, 'messages', first.id, count - 1, 'queued-', { status: "'queued'" })
  return conn
}

/**
 * Capstan's services in this process over a real SQLite file in a fresh directory, on the real
 * clock, logging nothing; started (drivers, pacer, webhooks) unless `start` is false.
 */
export async function benchServices(name: string, start = true) {
  const dir = mkdtempSync(join(tmpdir(), `capstan-${name}-`))
  const config = loadConfig({ CAPSTAN_DATA_DIR: dir, CAPSTAN_LOG_LEVEL: 'silent' })
  const db = openDatabase(config.dbPath)
  migrate(db)
  const writer = new Writer(db)
  const svc = buildServices({ config, engine: new SqliteEngine(db, writer), clock: systemClock }, new Logger('silent'), SecretBox.load(dir, null))
  if (start) await startServices(svc)
  return {
    dir,
    db,
    svc,
    close: () => {
      stopServices(svc)
      db.close()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** This process's resident memory, in MiB. */
export const rssMiB = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync('/proc/self/status', 'utf8'))![1]) / 1024

/**
 * Time two calls in turns (each awaited), `times` times each, and give each one's median in ms:
 * the new way against the old, in the same database and the same minutes.
 */
export async function pairedMedians(times: number, a: () => unknown, b: () => unknown): Promise<[number, number]> {
  const time = async (f: () => unknown) => {
    const t = performance.now()
    await f()
    return performance.now() - t
  }
  const as: number[] = []
  const bs: number[] = []
  for (let i = 0; i < times; i++) {
    as.push(await time(a))
    bs.push(await time(b))
  }
  return [median(as), median(bs)]
}
