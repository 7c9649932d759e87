/**
 * Groups benchmark: POST /groups/sync of a number with 5,000 groups, and GET /groups with and
 * without search over 50,000 mirrored groups (10 numbers x 5,000). Target: p50 <= 10 ms.
 * Run: bun bench/groups.ts [seconds]
 */
import { fmt, startCapstan, wrk } from './support'

const seconds = Number(process.argv[2] ?? 5)
const WORDS = ['alpha', 'beta', 'gamma', 'delta', 'orders', 'support', 'family', 'team', 'riders', 'club', 'école', 'market']
const cap = await startCapstan()
try {
  const ws = (await cap.admin('POST', '/workspaces', { name: 'Groups bench' })).data
  const key = (await cap.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'k' })).data.key
  const auth = { authorization: `Bearer ${key}` }
  const groupsFor = (n: number) =>
    Array.from({ length: 5000 }, (_, i) => ({
      external_id: `g-${n}-${i}`,
      name: `${WORDS[i % WORDS.length]} ${WORDS[(i * 7 + n) % WORDS.length]} ${n}-${i}`,
      participants: Array.from({ length: 2 + (i % 10) }, (_, p) => `+4479${String(n * 1e6 + i * 50 + p).padStart(8, '0')}`),
      announce: i % 9 === 0,
      admin: i % 2 === 0,
    }))
  const syncTimes: number[] = []
  for (let n = 0; n < 10; n++) {
    const conn = (await cap.admin('POST', `/workspaces/${ws.id}/connections`, { phone: `+1555000${String(n).padStart(4, '0')}`, driver: 'sandbox' })).data
    const put = await cap.admin('PUT', `/connections/${conn.id}/sandbox/groups`, { groups: groupsFor(n) })
    if (put?.data?.groups !== 5000) throw new Error(`sandbox groups not set: ${JSON.stringify(put).slice(0, 200)}`)
    // each sync re-reads every number: time the first (one number of 5,000 groups)
    const t = performance.now()
    const r = await fetch(`${cap.base}/api/v1/groups/sync`, { method: 'POST', headers: auth })
    if (r.status !== 200) throw new Error(`sync ${r.status}`)
    const entries = ((await r.json()) as any).data.numbers
    if (!entries.every((e: any) => e.status === 'synced' && e.groups === 5000)) throw new Error(`sync incomplete: ${JSON.stringify(entries).slice(0, 300)}`)
    syncTimes.push(performance.now() - t)
  }
  const t = performance.now()
  await fetch(`${cap.base}/api/v1/groups/sync`, { method: 'POST', headers: auth })
  const fullResync = performance.now() - t
  console.log(`\nPOST /groups/sync: first number (5,000 groups, insert) ${syncTimes[0]!.toFixed(0)} ms; all 10 numbers (50,000 groups, update) ${fullResync.toFixed(0)} ms\n`)
  console.log(`GET /groups over 50,000 mirrored groups (wrk -t1 -c1 -d${seconds}s)\n\n| query | result |\n|---|---|`)
  for (const qs of ['', '?search=alpha', '?search=ALPHA%20club', '?search=%C3%89COLE', '?search=nothing-matches', '?search=orders&page=40']) {
    const check = (await (await fetch(`${cap.base}/api/v1/groups${qs}`, { headers: auth })).json()) as any
    const r = await wrk(`${cap.base}/api/v1/groups${qs}`, { seconds, connections: 1, headers: auth })
    if (r.errors) throw new Error(`GET /groups${qs}: ${r.errors} errors`)
    console.log(`| (matches: ${check.meta.total}) |  |`)
    console.log(`| GET /api/v1/groups${qs} | ${fmt(r)} |`)
  }
} finally {
  await cap.stop()
}
process.exit(0)
