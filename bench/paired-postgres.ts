/**
 * POST /api/v1/messages on PostgreSQL, this checkout against another (an older commit), in turns
 * on one private PostgreSQL (each side its own database): what BENCHMARKS.md reports for a change
 * to the PostgreSQL send path. `one`: one instance each, `wrk -c50`; `two`: two instances each
 * sharing its database, `wrk -c25` at each, summed. Medians of the rounds, the ratio new/old of
 * the medians, and the median of the rounds' own ratios (each pair seconds apart).
 * Run: git worktree add /tmp/capstan-base <commit> && ln -s "$PWD/node_modules" /tmp/capstan-base/node_modules
 *      bun bench/paired-postgres.ts /tmp/capstan-base [seconds = 5] [rounds = 8] [one | two = one]
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { fmt, median, sendLoad, startCapstan, wrk, type WrkResult } from './support'

const baseRoot = process.argv[2]
if (!baseRoot) throw new Error('usage: bun bench/paired-postgres.ts <checkout of the baseline commit> [seconds] [rounds] [one | two]')
const seconds = Number(process.argv[3] ?? 5)
const turns = Number(process.argv[4] ?? 8)
const mode = process.argv[5] ?? 'one'
if (mode !== 'one' && mode !== 'two') throw new Error('the fourth argument is `one` or `two`')
const reads = process.env.BENCH_PATH === 'get'

const dir = mkdtempSync(join(tmpdir(), 'capstan-bench-pg-paired-'))
const pg = await PrivatePostgres.start(join(dir, 'pg'))
const admin = new Bun.SQL(pg.url, { max: 1 })
const database = async (name: string) => {
  await admin.unsafe(`CREATE DATABASE ${name}`)
  const u = new URL(pg.url)
  u.pathname = `/${name}`
  return u.toString()
}
const env = (url: string) => ({ CAPSTAN_DATABASE_URL: url, CAPSTAN_SECRET_KEY: 'bench-secret-key-0123456789abcdef0123456789', CAPSTAN_LOG_LEVEL: 'warn' })

/** One side: its instances on a database of its own, and the load that sends through them. */
async function side(name: string, root?: string) {
  const url = await database(name)
  const caps: Awaited<ReturnType<typeof startCapstan>>[] = []
  for (let i = 0; i < (mode === 'two' ? 2 : 1); i++) caps.push(await startCapstan(env(url), root))
  const { lua: send, keys } = await sendLoad(caps[0]!)
  const lua = reads ? `local n = 0\nlocal keys = {${keys.map((k) => `"${k}"`).join(',')}}\nrequest = function()\n  n = n + 1\n  return wrk.format("GET", nil, {["Authorization"] = "Bearer " .. keys[(n % #keys) + 1]})\nend` : send
  const run = async (secs: number): Promise<WrkResult> => {
    const rs = await Promise.all(caps.map((c) => wrk(`${c.base}${reads ? '/api/v1/workspace' : '/api/v1/messages'}`, { seconds: secs, connections: 50 / caps.length, lua })))
    return { rps: rs.reduce((n, r) => n + r.rps, 0), p50: rs.reduce((n, r) => n + r.p50, 0) / rs.length, p99: Math.max(...rs.map((r) => r.p99)), errors: rs.reduce((n, r) => n + r.errors, 0) }
  }
  return { caps, run }
}

const now = await side('this_checkout')
const then = await side('baseline', resolve(baseRoot))
try {
  await now.run(2)
  await then.run(2)
  const a: WrkResult[] = []
  const b: WrkResult[] = []
  for (let r = 0; r < turns; r++) {
    // the order alternates, so neither side always runs in the other's wake
    if (r % 2 === 0) {
      b.push(await now.run(seconds))
      a.push(await then.run(seconds))
    } else {
      a.push(await then.run(seconds))
      b.push(await now.run(seconds))
    }
  }
  const med = (rs: WrkResult[]): WrkResult => ({ rps: median(rs.map((r) => r.rps)), p50: median(rs.map((r) => r.p50)), p99: median(rs.map((r) => r.p99)), errors: rs.reduce((n, r) => n + r.errors, 0) })
  const per = b.map((r, i) => r.rps / a[i]!.rps)
  const load = mode === 'two' ? 'two instances on one database each, wrk -c25 at each, summed' : 'one instance each, wrk -c50'
  console.log(`\n${reads ? 'GET /api/v1/workspace' : 'POST /api/v1/messages'} on PostgreSQL, ${load}; ${turns} rounds of ${seconds} s in turns, medians; ${navigator.hardwareConcurrency} cores, Bun ${Bun.version}\n`)
  console.log('| this checkout | baseline | new / old (medians) | median of the rounds\' ratios |\n|---|---|---|---|')
  const pct = (x: number) => `${Math.round(x * 1000) / 10}%`
  console.log(`| ${fmt(med(b))} | ${fmt(med(a))} | ${pct(med(b).rps / med(a).rps)} | ${pct(median(per))} (rounds ${pct(Math.min(...per))}–${pct(Math.max(...per))}) |`)
} finally {
  for (const c of [...now.caps, ...then.caps]) await c.stop()
  await admin.close()
  await pg.stop()
  rmSync(dir, { recursive: true, force: true })
}
