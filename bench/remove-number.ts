/**
 * Removing a number with a long queue (in-process, real SQLite file): `bun bench/remove-number.ts [queued]`.
 * The removal as DELETE /admin/api/connections/{id} does it; how long until every queued message
 * has failed, and the longest the event loop was held (see timedHold).
 */
import { inProcess } from '../test/support/inproc'
import { offlineBacklog, timedHold } from './support'

const N = Number(process.argv[2] ?? 100_000)
const env = await inProcess()
const { svc, db } = env
const conn = await offlineBacklog(env, N)
const remove = async () => {
  await svc.connections.remove(conn.id, (tx) => svc.campaigns.cancelForConnectionIn(tx, conn.id))
  await svc.messages.failQueuedOf(conn.id)
}
const { ms, heldMs } = await timedHold(remove)
const left = (db.query("SELECT COUNT(*) AS n FROM messages WHERE status = 'queued'").get() as { n: number }).n
console.log(`${N} queued messages failed with their number in ${ms.toFixed(0)} ms, event loop held at most ${heldMs.toFixed(0)} ms; ${left} left queued`)
await env.close()
