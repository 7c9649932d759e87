/**
 * GET /contacts' page with a large workspace (in-process, real SQLite file):
 * `bun bench/contacts-list.ts [contacts]`. Times the page's two reads — the 50 rows and the total
 * for meta.total — five times each.
 */
import { inProcess } from '../test/support/inproc'
import { copyRow } from '../test/support/rows'
import { storesOf } from '../test/support/stores'

const N = Number(process.argv[2] ?? 1_000_000)
const env = await inProcess()
const { svc, db } = env
const ws = await svc.workspaces.create({ name: 'Contacts' })
const first = (await svc.contacts.upsert(ws.id, { phone: '+15550000000', name: 'Ann' }, 'bench')).row
copyRow(db, 'contacts', first.id, N - 1, 'c', { phone: "'+1' || (5550000000 + i)", last_activity_at: 'last_activity_at + i' })
const rows: string[] = []
const totals: string[] = []
for (let i = 0; i < 5; i++) {
  let started = performance.now()
  await storesOf(svc).contacts.list(ws.id, 50, 0)
  rows.push((performance.now() - started).toFixed(2))
  started = performance.now()
  storesOf(svc).contacts.count(ws.id)
  totals.push((performance.now() - started).toFixed(2))
}
console.log(`${N} contacts: the page's rows ${rows.join(', ')} ms; its total ${totals.join(', ')} ms`)
await env.close()
