/**
 * The minute's expiry of messages queued for 24 hours (in-process, real SQLite file):
 * `bun bench/expire-queued.ts [log size] [burst]`. (1) A pass over a log of `log size` messages with
 * none queued — what every minute costs; (2) a burst of `burst` messages queued in the same minute
 * on a number that stayed offline, expiring together 24 hours later: how long it took and the
 * longest the event loop was held (see timedHold).
 */
import { inProcess } from '../test/support/inproc'
import { copyRow } from '../test/support/rows'
import { offlineBacklog, timedHold } from './support'

const LOG = Number(process.argv[2] ?? 1_000_000)
const BURST = Number(process.argv[3] ?? 100_000)

{
  const env = await inProcess()
  const { svc, db } = env
  const ws = await svc.workspaces.create({ name: 'Log' })
  const conn = await svc.connections.create(ws.id, { phone: '+15550007000', driver: 'sandbox' })
  copyRow(db, 'messages', (await svc.messages.inbound(conn.id, '+15550007001', 'x'.repeat(200))).id, LOG - 1, 'log-')
  const took: string[] = []
  for (let i = 0; i < 5; i++) {
    const started = performance.now()
    await svc.messages.expireQueued()
    took.push((performance.now() - started).toFixed(1))
  }
  console.log(`a pass over ${LOG} messages, none queued: ${took.join(', ')} ms`)
  await env.close()
}
{
  const env = await inProcess()
  const { svc, clock } = env
  await offlineBacklog(env, BURST)
  clock.t += 25 * 3_600_000
  const { ms, heldMs } = await timedHold(() => svc.messages.expireQueued())
  console.log(`a burst of ${BURST} queued messages expired in ${ms.toFixed(0)} ms, event loop held at most ${heldMs.toFixed(0)} ms`)
  await env.close()
}
