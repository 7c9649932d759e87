/**
 * POST /campaigns/audience/preview over a large workspace (in-process, real SQLite file):
 * `bun bench/audience-preview.ts [contacts]`. Half the contacts are on plan "pro"; how long the
 * preview took and the longest the event loop was held (see timedHold).
 */
import { inProcess } from '../test/support/inproc'
import { copyRow } from '../test/support/rows'
import { timedHold } from './support'

const N = Number(process.argv[2] ?? 1_000_000)
const env = await inProcess()
const { svc, db } = env
const ws = await svc.workspaces.create({ name: 'Audience' })
const first = (await svc.contacts.upsert(ws.id, { phone: '+15550000000', name: 'Ann', consent_status: 'opted_in', metadata: { plan: 'pro' } }, 'bench')).row
copyRow(db, 'contacts', first.id, N - 1, 'c', { phone: "'+1' || (5550000000 + i)", metadata: `CASE WHEN i % 2 THEN '{"plan":"pro"}' ELSE '{"plan":"free"}' END` })
for (const audience of [{}, { metadata: { plan: 'pro' } }, { metadata: { plan: 'none' } }]) {
  const { result, ms, heldMs } = await timedHold(() => svc.campaigns.preview(ws.id, audience, 10))
  console.log(`${JSON.stringify(audience)}: ${result.count} of ${N} contacts in ${ms.toFixed(0)} ms, event loop held at most ${heldMs.toFixed(0)} ms`)
}
await env.close()
