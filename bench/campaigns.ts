/**
 * Campaign start with 100,000 opted-in contacts: audience freeze and enqueue, in-process over a
 * real SQLite file. Target: < 5 s, memory flat (no in-memory copy of the audience), and the
 * server not held for it (the freeze goes in slices; the longest hold is what others waited).
 * Run: bun bench/campaigns.ts [contacts]
 */
import { benchServices, rssMiB, timedHold } from './support'
import { storesOf } from '../test/support/stores'

const N = Number(process.argv[2] ?? 100_000)

const { db, svc, close } = await benchServices('campaign-bench')
const ws = await svc.workspaces.create({ name: 'Bench' })
// a slow policy: the release itself is not what is measured here
await svc.workspaces.patch(ws.id, { settings: { sending_policy: { hourly_cap: 60, daily_cap: 500, min_gap_seconds: 3, max_gap_seconds: 12 } } })
const conn = await svc.connections.create(ws.id, { phone: '+15550002000', driver: 'sandbox' })
const ins = db.query("INSERT INTO contacts (id, workspace_id, phone, name, consent_status, metadata, created_at, updated_at, last_activity_at) VALUES (?, ?, ?, ?, ?, ?, 0, 0, 0)")
db.transaction(() => {
  for (let i = 0; i < N; i++) ins.run(Bun.randomUUIDv7(), ws.id, `+1556${String(i).padStart(8, '0')}`, `Customer ${i}`, i % 10 === 9 ? 'unknown' : 'opted_in', JSON.stringify({ plan: i % 2 ? 'pro' : 'free' }))
})()
const tpl = await svc.templates.create(ws.id, { name: 'T', body: 'Hi {{name}}, our spring sale starts today.' })
const c = await svc.campaigns.create(ws.id, { name: 'Spring', template_id: tpl.id, connection_id: conn.id })
// the set-up's own writes checkpointed first: their WAL is not the freeze's to copy
db.run('PRAGMA wal_checkpoint(TRUNCATE)')
Bun.gc(true)
const before = rssMiB()
const { result: started, ms, heldMs } = await timedHold(() => svc.campaigns.schedule(ws.id, c.id, null))
const after = rssMiB()
const counts = await storesOf(svc).campaigns.counts(c.id)
console.log(`\nCampaign start with ${N.toLocaleString('en-US')} contacts (${counts.total.toLocaleString('en-US')} opted in): status ${started.status}`)
console.log(`| freeze + enqueue | ${ms.toFixed(0)} ms |`)
console.log(`| longest the event loop was held meanwhile | ${heldMs.toFixed(0)} ms |`)
console.log(`| RSS before / after start | ${before.toFixed(0)} MiB / ${after.toFixed(0)} MiB (${(after - before).toFixed(1)} MiB) |`)
const t1 = performance.now()
await svc.campaigns.toPublic(started)
console.log(`| GET /campaigns/{id} live counts over ${counts.total.toLocaleString('en-US')} recipients | ${(performance.now() - t1).toFixed(1)} ms |`)
for (const page of [1, 1000]) {
  const took: string[] = []
  for (let i = 0; i < 3; i++) {
    const t2 = performance.now()
    await svc.campaigns.recipients(c.id, 50, (page - 1) * 50)
    took.push((performance.now() - t2).toFixed(1))
  }
  console.log(`| GET /campaigns/{id}/recipients page ${page} (rows and total), three times | ${took.join(', ')} ms |`)
}
close()
process.exit(0)
