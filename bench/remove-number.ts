/**
 * Removing a number with a long queue (in-process, real SQLite file): `bun bench/remove-number.ts [queued]`.
 * The removal as DELETE /admin/api/connections/{id} does it; how long until every queued message
 * has failed, and the longest the event loop was held (see timedHold).
 */
import { inProcess } from '../test/support/inproc'
import { copyRow } from '../test/support/rows'
import { timedHold } from './support'

const N = Number(process.argv[2] ?? 100_000)
const env = await inProcess()
const { svc, db } = env
const ws = svc.workspaces.create({ name: 'Remove' })
svc.webhooks.create(ws.id, 'http://127.0.0.1:9/hook', undefined)
svc.webhooks.stop()
const conn = svc.connections.create(ws.id, { phone: '+15550007000', driver: 'sandbox' })
const first = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15550007001', body: 'x'.repeat(200), attachments: [] })
svc.connections.patch(conn.id, { status: 'offline' })
copyRow(db, 'messages', first.id, N - 1, 'queued-', { status: "'queued'" })
const remove = async () => {
  svc.connections.remove(conn.id, () => svc.campaigns.cancelForConnectionInTx(conn.id))
  await svc.messages.failQueuedOf(conn.id)
}
const { ms, heldMs } = await timedHold(remove)
const left = (db.query("SELECT COUNT(*) AS n FROM messages WHERE status = 'queued'").get() as { n: number }).n
console.log(`${N} queued messages failed with their number in ${ms.toFixed(0)} ms, event loop held at most ${heldMs.toFixed(0)} ms; ${left} left queued`)
await env.close()
