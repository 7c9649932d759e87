/**
 * Capstan on PostgreSQL (issue #32), each figure beside a ceiling measured in the same run, on a
 * private PostgreSQL (src/cluster/postgres.ts: fsync on, a Unix socket):
 * - POST /api/v1/messages with one instance and with two sharing the database (a wrk per
 *   instance, summed), against a bare Bun + Bun.SQL insert per request (bench/bare-pg-insert.ts) —
 *   and the two instances also against that bare insert as two processes on one database, loaded
 *   the same way (`wrk -c25` each);
 * - release throughput: 1,000 sandbox numbers with 20 queued messages each, released by one
 *   instance with no gaps, from its start until every message is sent;
 * - GET /api/v1/messages with 1,000,000 rows in the workspace's log: p50 of the first page, of a
 *   status filter and of page 100; then with the statuses lying as in a log (the oldest read, the
 *   newest queued), the filtered pages. BENCH_ROOT=<checkout>: another checkout's Capstan serves them.
 * Run: bun bench/postgres.ts [seconds per run = 5] [rounds = 5] [only: post | release | log | curve]
 * `curve` (only when asked): the ceiling, one instance and two sharing a database (half the
 * requests each) at each of BENCH_CONNECTIONS requests in flight (25,50,100,200), in turns — how
 * they answer as more clients wait on them.
 * BENCH_NUMBERS, BENCH_PER_NUMBER: the release run's numbers (1,000, in fifties) and messages queued on
 * each (20). BENCH_PG_WAITS=1: the release run also prints its messages by status every 200 ms and what the
 * database's sessions were doing (pg_stat_activity sampled every 10 ms). BENCH_KEEP_LOGS=<folder>: each
 * instance's log (warnings and errors: the runs set CAPSTAN_LOG_LEVEL=warn) kept there.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { ADMIN, fmt, freePort, median, ROOT, sendLoad, startCapstan, wrk, type WrkResult } from './support'

const seconds = Number(process.argv[2] ?? 5)
const turns = Number(process.argv[3] ?? 5)
const only = process.argv[4] ?? null
const runs = (part: string) => only === null || only === part
const dir = mkdtempSync(join(tmpdir(), 'capstan-bench-pg-'))
const pg = await PrivatePostgres.start(join(dir, 'pg'))
const admin = new Bun.SQL(pg.url, { max: 1 })
const database = async (name: string) => {
  await admin.unsafe(`CREATE DATABASE ${name}`)
  const u = new URL(pg.url)
  u.pathname = `/${name}`
  return u.toString()
}
const SECRET = 'bench-secret-key-0123456789abcdef0123456789'
const out: string[] = []
const say = (line: string) => {
  console.log(line)
  out.push(line)
}

const sum = (a: WrkResult, b: WrkResult): WrkResult => ({ rps: a.rps + b.rps, p50: (a.p50 + b.p50) / 2, p99: Math.max(a.p99, b.p99), errors: a.errors + b.errors, timeouts: (a.timeouts ?? 0) + (b.timeouts ?? 0) })
const env = (url: string) => ({ CAPSTAN_DATABASE_URL: url, CAPSTAN_SECRET_KEY: SECRET, CAPSTAN_LOG_LEVEL: 'warn' })

// --- POST /messages: ceiling, one instance, two instances
if (runs('post')) {
const ceilingPort = await freePort()
const ceilingUrl = await database('ceiling')
const bare = async (port: number) => {
  const p = Bun.spawn(['bun', join(ROOT, 'bench/bare-pg-insert.ts')], { env: { ...process.env, PORT: String(port), DATABASE_URL: ceilingUrl }, stdout: 'ignore', stderr: 'inherit' })
  for (let i = 0; i < 200; i++) {
    if ((await fetch(`http://127.0.0.1:${port}/`, { method: 'POST', body: '{"recipient":"+15550000000","body":"up?"}' }).catch(() => null))?.status === 202) return p
    await Bun.sleep(50)
  }
  throw new Error('the bare insert server did not start')
}
const ceiling = await bare(ceilingPort)
// the same ceiling as two processes on that one database, for the two instances' like-for-like
// figure — started once the first has made the table (two CREATE TABLE IF NOT EXISTS at once race)
const ceilingPortB = await freePort()
const ceilingB = await bare(ceilingPortB)
const oneUrl = await database('one')
const twoUrl = await database('two')
const one = await startCapstan(env(oneUrl))
const twoA = await startCapstan(env(twoUrl))
const twoB = await startCapstan(env(twoUrl))

const { lua: oneLua } = await sendLoad(one)
const { lua: twoLua } = await sendLoad(twoA, '+15550009998')
const ceilingLua = `request = function() return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, '{"recipient":"+15550000000","body":"Your order has shipped"}') end`
const results: Record<'ceiling' | 'ceiling2' | 'one' | 'two', WrkResult[]> = { ceiling: [], ceiling2: [], one: [], two: [] }
const send = `${one.base}/api/v1/messages`
await wrk(`http://127.0.0.1:${ceilingPort}/`, { seconds: 2, lua: ceilingLua })
await wrk(send, { seconds: 2, lua: oneLua })
for (let r = 0; r < turns; r++) {
  results.ceiling.push(await wrk(`http://127.0.0.1:${ceilingPort}/`, { seconds, lua: ceilingLua }))
  results.one.push(await wrk(send, { seconds, lua: oneLua }))
  const [ca, cb] = await Promise.all([ceilingPort, ceilingPortB].map((port) => wrk(`http://127.0.0.1:${port}/`, { seconds, connections: 25, lua: ceilingLua })))
  results.ceiling2.push(sum(ca!, cb!))
  const [a, b] = await Promise.all([wrk(`${twoA.base}/api/v1/messages`, { seconds, connections: 25, lua: twoLua }), wrk(`${twoB.base}/api/v1/messages`, { seconds, connections: 25, lua: twoLua })])
  results.two.push(sum(a, b))
}
const med = (rs: WrkResult[]): WrkResult => ({ rps: median(rs.map((r) => r.rps)), p50: median(rs.map((r) => r.p50)), p99: median(rs.map((r) => r.p99)), errors: rs.reduce((n, r) => n + r.errors, 0), timeouts: rs.reduce((n, r) => n + (r.timeouts ?? 0), 0) })
const [c, c2, o, t] = [med(results.ceiling), med(results.ceiling2), med(results.one), med(results.two)]
say(`\nPOST /api/v1/messages on PostgreSQL, wrk -c50, ${turns} rounds of ${seconds} s in turns, medians; 2 cores, Bun ${Bun.version}\n`)
say('| load | result | of the ceiling |')
say('|---|---|---|')
say(`| bare Bun + Bun.SQL insert (ceiling) | ${fmt(c)} | 100% |`)
say(`| Capstan, one instance | ${fmt(o)} | ${Math.round((o.rps / c.rps) * 100)}% |`)
say(`| Capstan, two instances on one database (wrk -c25 each, summed) | ${fmt(t)} | ${Math.round((t.rps / c.rps) * 100)}% |`)
say(`| bare insert, two processes on one database (wrk -c25 each, summed) | ${fmt(c2)} | ${Math.round((c2.rps / c.rps) * 100)}% (two instances: ${Math.round((t.rps / c2.rps) * 100)}% of it) |`)
// the same rounds as ratios, each load against the ceiling measured in its own round (seconds
// apart): the machine's drift over the run (a tenth within an hour) moves both sides of a pair
const paired = (of: WrkResult[], to: WrkResult[]) => {
  const rs = of.map((r, i) => r.rps / to[i]!.rps)
  const pct = (x: number) => `${Math.round(x * 100)}%`
  return `${pct(median(rs))} (rounds ${pct(Math.min(...rs))}–${pct(Math.max(...rs))}, ${rs.filter((x) => x >= 0.5).length} of ${rs.length} at 50% or more)`
}
say(`
Paired by round, median of the rounds' ratios: one instance ${paired(results.one, results.ceiling)}; two instances ${paired(results.two, results.ceiling)} of the one-process ceiling, ${paired(results.two, results.ceiling2)} of the two-process one.`)
ceiling.kill()
ceilingB.kill()
for (const cap of [one, twoA, twoB]) await cap.stop()
}

// --- POST /messages with more or fewer requests in flight: the ceiling and one instance, in turns
if (only === 'curve') {
  const levels = (process.env.BENCH_CONNECTIONS ?? '25,50,100,200').split(',').map(Number)
  const ceilingPort = await freePort()
  const ceiling = Bun.spawn(['bun', join(ROOT, 'bench/bare-pg-insert.ts')], { env: { ...process.env, PORT: String(ceilingPort), DATABASE_URL: await database('curve_ceiling') }, stdout: 'ignore', stderr: 'inherit' })
  for (let i = 0; i < 200; i++) {
    if ((await fetch(`http://127.0.0.1:${ceilingPort}/`, { method: 'POST', body: '{"recipient":"+15550000000","body":"up?"}' }).catch(() => null))?.status === 202) break
    await Bun.sleep(50)
  }
  const one = await startCapstan(env(await database('curve_one')))
  const { lua } = await sendLoad(one)
  const twoUrl = await database('curve_two')
  const twoA = await startCapstan(env(twoUrl))
  const twoB = await startCapstan(env(twoUrl))
  const { lua: twoLua } = await sendLoad(twoA, '+15550009998')
  const ceilingLua = `request = function() return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, '{"recipient":"+15550000000","body":"Your order has shipped"}') end`
  const bare = `http://127.0.0.1:${ceilingPort}/`
  const send = `${one.base}/api/v1/messages`
  await wrk(bare, { seconds: 2, lua: ceilingLua })
  await wrk(send, { seconds: 2, lua })
  say(`\nPOST /api/v1/messages on PostgreSQL by requests in flight, ${turns} rounds of ${seconds} s in turns, medians; 2 cores, Bun ${Bun.version}\n`)
  say('| wrk -c | ceiling | Capstan, one instance | two instances (half the requests each, summed) |')
  say('|---|---|---|---|')
  for (const connections of levels) {
    const c: WrkResult[] = [], o: WrkResult[] = [], t: WrkResult[] = []
    for (let r = 0; r < turns; r++) {
      c.push(await wrk(bare, { seconds, connections, lua: ceilingLua }))
      o.push(await wrk(send, { seconds, connections, lua }))
      const half = (n: number) => ({ seconds, connections: n, lua: twoLua })
      const [a, b] = await Promise.all([wrk(`${twoA.base}/api/v1/messages`, half(Math.ceil(connections / 2))), wrk(`${twoB.base}/api/v1/messages`, half(Math.floor(connections / 2)))])
      t.push(sum(a, b))
    }
    const cr = median(c.map((r) => r.rps))
    const cell = (rs: WrkResult[]) => `${Math.round(median(rs.map((r) => r.rps))).toLocaleString('en-US')} req/s, p50 ${median(rs.map((r) => r.p50)).toFixed(2)} ms`
    const of = (rs: WrkResult[]) => `${Math.round((median(rs.map((r) => r.rps)) / cr) * 100)}%`
    say(`| ${connections} | ${cell(c)} | ${cell(o)} (${of(o)}) | ${cell(t)} (${of(t)}) |`)
  }
  ceiling.kill()
  for (const cap of [one, twoA, twoB]) await cap.stop()
}

// --- release throughput: 1,000 numbers × 20 queued messages, one instance, no gaps
const NUMBERS = Number(process.env.BENCH_NUMBERS ?? 1000)
const PER_NUMBER = Number(process.env.BENCH_PER_NUMBER ?? 20)
if (runs('release')) {
  const url = await database('release')
  const cap = await startCapstan(env(url))
  const ws = (await cap.admin('POST', '/workspaces', { name: 'Release' })).data
  await cap.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0, hourly_cap: 100_000, daily_cap: 100_000 } } })
  const numbers: string[] = []
  for (let i = 0; i < NUMBERS; i += 50) {
    const made = await Promise.all(Array.from({ length: 50 }, (_, k) => cap.admin('POST', `/workspaces/${ws.id}/connections`, { phone: `+1666${String(i + k).padStart(7, '0')}`, driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })))
    numbers.push(...made.map((m) => m.data.id as string))
  }
  await cap.stop()
  const db = new Bun.SQL(url, { max: 1 })
  const now = Date.now()
  await db.unsafe(
    `INSERT INTO messages (id, workspace_id, connection_id, direction, status, recipient, sender, body, attachments, created_at, updated_at, opt_in_required)
     SELECT gen_random_uuid()::text, $1, c.id, 'outbound', 'queued', '+1777' || lpad(g::text, 7, '0'), c.phone, 'Your order shipped', '[]', $2, $2, 0
     FROM connections c CROSS JOIN generate_series(1, ${PER_NUMBER}) g WHERE c.workspace_id = $1`,
    [ws.id, now],
  )
  const total = Number((await db`SELECT COUNT(*)::int AS n FROM messages WHERE status = 'queued'`)[0].n)
  const started = performance.now()
  const again = await startCapstanOn(url, cap.dir)
  let left = total
  // BENCH_PG_WAITS=1: what the database's sessions were doing, sampled every 10 ms while it ran
  const waits = new Map<string, number>()
  let sampling = process.env.BENCH_PG_WAITS ? true : false
  const sampler = (async () => {
    while (sampling) {
      for (const r of await db`SELECT state || ' ' || coalesce(wait_event_type, 'CPU') || ':' || coalesce(wait_event, '') AS w FROM pg_stat_activity WHERE datname = 'release' AND pid <> pg_backend_pid()`) waits.set(r.w, (waits.get(r.w) ?? 0) + 1)
      await Bun.sleep(10)
    }
  })()
  while (left > 0) {
    await Bun.sleep(200)
    left = Number((await db`SELECT COUNT(*)::int AS n FROM messages WHERE status IN ('queued', 'sending')`)[0].n)
    if (process.env.BENCH_PG_WAITS) console.log(`  ${((performance.now() - started) / 1000).toFixed(1)} s:`, (await db`SELECT status, COUNT(*)::int AS n FROM messages GROUP BY status ORDER BY status`).map((r: { status: string; n: number }) => `${r.status} ${r.n}`).join(', '))
  }
  const ms = performance.now() - started
  sampling = false
  await sampler
  if (waits.size) {
    const all = [...waits.values()].reduce((a, b) => a + b, 0)
    for (const [w, n] of [...waits].sort((a, b) => b[1] - a[1]).slice(0, 12)) console.log(`  ${w}: ${((n / all) * 100).toFixed(1)}%`)
  }
  say(`\nRelease throughput on PostgreSQL: ${total.toLocaleString('en-US')} messages queued on ${NUMBERS.toLocaleString('en-US')} sandbox numbers (no gaps), one instance from its start: all sent in ${(ms / 1000).toFixed(1)} s = ${Math.round(total / (ms / 1000)).toLocaleString('en-US')} msg/s`)
  await again.stop()
  await db.close()
}

// --- GET /messages with 1,000,000 rows: statuses spread evenly, and as a log has them (by age)
if (runs('log')) {
  for (const spread of ['evenly', 'by age'] as const) {
    const url = await database(spread === 'evenly' ? 'log' : 'log_by_age')
    // BENCH_ROOT=<checkout>: the Capstan of another checkout (an older commit) serves the reads
    const cap = await startCapstan(env(url), process.env.BENCH_ROOT ?? ROOT)
    const ws = (await cap.admin('POST', '/workspaces', { name: 'Log' })).data
    const key = (await cap.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'reader' })).data.key
    const conn = (await cap.admin('POST', `/workspaces/${ws.id}/connections`, { phone: '+15550001111', driver: 'sandbox' })).data
    const db = new Bun.SQL(url, { max: 1 })
    const now = Date.now()
    const statuses = ['sent', 'delivered', 'read', 'failed']
    // evenly: every fifth inbound (delivered), the rest cycling through the four statuses; by age:
    // the oldest 600,000 read, then 200,000 delivered, 150,000 sent, the newest 50,000 queued,
    // one in 20 inbound (delivered) and one in 1,000 failed
    const status =
      spread === 'evenly'
        ? `CASE WHEN g % 5 = 0 THEN 'delivered' ELSE ($5::text[])[1 + g % 4] END`
        : `CASE WHEN g % 20 = 0 THEN 'delivered' WHEN g % 1000 = 1 THEN 'failed' WHEN g <= 600000 THEN 'read' WHEN g <= 800000 THEN 'delivered' WHEN g <= 950000 THEN 'sent' ELSE 'queued' END`
    const inbound = spread === 'evenly' ? 'g % 5 = 0' : 'g % 20 = 0'
    // by age, the messages also have contacts: one of long ago (every 10th of the oldest 500,000),
    // and 1,000 others among the rest, evenly
    const contact = (n: number) => new Bun.CryptoHasher('md5').update(`${ws.id}-c${n}`).digest('hex').replace(/^(.{8})(.{4})(.{4})(.{4})/, '$1-$2-$3-$4-')
    if (spread === 'by age')
      await db.unsafe(
        `INSERT INTO contacts (id, workspace_id, phone, consent_status, metadata, created_at, updated_at, last_activity_at)
         SELECT md5($1 || '-c' || g)::uuid::text, $1, '+1777' || lpad(g::text, 7, '0'), 'opted_in', '{}', 0, 0, 0 FROM generate_series(0, 1000) g`,
        [ws.id],
      )
    const contactOf = spread === 'evenly' ? 'NULL' : `md5($1 || '-c' || CASE WHEN g <= 500000 AND g % 10 = 0 THEN 0 ELSE 1 + g % 1000 END)::uuid::text`
    for (let from = 1; from <= 1_000_000; from += 100_000) {
      await db.unsafe(
        `INSERT INTO messages (id, workspace_id, connection_id, contact_id, direction, status, recipient, sender, body, attachments, created_at, updated_at, sent_at, opt_in_required)
         SELECT gen_random_uuid()::text, $1, $2, ${contactOf}, CASE WHEN ${inbound} THEN 'inbound' ELSE 'outbound' END, ${status},
                '+1777' || lpad((g % 100000)::text, 7, '0'), '+15550001111', 'Message ' || g, '[]', $3 + g, $3 + g, $3 + g, 0
         FROM generate_series($4::int, $4::int + 99999) g`,
        // (the statuses, $5, only where the text names them: PostgreSQL refuses a parameter it cannot type)
        [ws.id, conn.id, now, from, ...(spread === 'evenly' ? [`{${statuses.join(',')}}`] : [])],
      )
    }
    // what autovacuum does soon after any bulk load: the rows' visibility settled, the counts' old versions gone
    await db.unsafe('VACUUM (ANALYZE) messages')
    await db.unsafe('VACUUM (ANALYZE) message_counts')
    const headers = { authorization: `Bearer ${key}` }
    say(`\nGET /api/v1/messages on PostgreSQL with 1,000,000 messages in the workspace's log, statuses spread ${spread}, wrk -c1 (one request at a time, as the SQLite figure), ${seconds} s each\n`)
    say('| page | result |')
    say('|---|---|')
    const pages: [string, string][] =
      spread === 'evenly'
        ? [
            ['first page (50)', '/api/v1/messages?per_page=50'],
            ['status=failed, first page', '/api/v1/messages?status=failed&per_page=50'],
            ['direction=inbound, first page', '/api/v1/messages?direction=inbound&per_page=50'],
            ['page 100 (offset 4,950)', '/api/v1/messages?per_page=50&page=100'],
          ]
        : [
            ['status=read (behind 400,000 newer), first page', '/api/v1/messages?status=read&per_page=50'],
            ['status=sent, first page', '/api/v1/messages?status=sent&per_page=50'],
            ['status=failed, first page', '/api/v1/messages?status=failed&per_page=50'],
            ['direction=outbound&status=read, first page', '/api/v1/messages?direction=outbound&status=read&per_page=50'],
            ['direction=outbound, first page', '/api/v1/messages?direction=outbound&per_page=50'],
            ['status=read, page 100 (offset 4,950)', '/api/v1/messages?status=read&per_page=50&page=100'],
            ['contact_id of long ago (50,000 messages), first page', `/api/v1/messages?contact_id=${contact(0)}&per_page=50`],
            ['contact_id of 1,000 messages spread evenly, first page', `/api/v1/messages?contact_id=${contact(5)}&per_page=50`],
          ]
    for (const [name, path] of pages) {
      await wrk(`${cap.base}${path}`, { seconds: 1, connections: 1, headers })
      say(`| ${name} | ${fmt(await wrk(`${cap.base}${path}`, { seconds, connections: 1, headers }))} |`)
    }
    await db.close()
    await cap.stop()
  }
}

/** A Capstan on an existing database and data directory (a restart). */
async function startCapstanOn(url: string, dataDir: string) {
  const port = await freePort()
  // BENCH_CPU_PROF=<dir>: the released instance writes a CPU profile there (markdown) when it stops
  const profile = process.env.BENCH_CPU_PROF ? ['--cpu-prof-md', `--cpu-prof-dir=${process.env.BENCH_CPU_PROF}`] : []
  const proc = Bun.spawn(['bun', ...profile, join(ROOT, 'src/main.ts'), 'serve'], {
    env: { ...process.env, CAPSTAN_HOST: '127.0.0.1', CAPSTAN_PORT: String(port), CAPSTAN_DATA_DIR: dataDir, CAPSTAN_ADMIN_TOKEN: ADMIN, CAPSTAN_CLAMD: `unix:${join(dataDir, 'none.sock')}`, ...env(url) },
    stdout: process.env.BENCH_LOG ? 'inherit' : 'ignore',
    stderr: 'inherit',
  })
  return {
    stop: async () => {
      proc.kill()
      await proc.exited
    },
  }
}

await admin.close()
await pg.stop()
rmSync(dir, { recursive: true, force: true })
