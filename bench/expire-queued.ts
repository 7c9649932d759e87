/**
 * The minute's expiry of messages queued for 24 hours (in-process, real SQLite file):
 * `bun bench/expire-queued.ts [log size] [burst]`. (1) A pass over a log of `log size` messages with
 * none queued — what every minute costs; (2) a burst of `burst` messages queued in the same minute
 * on a number that stayed offline, expiring together 24 hours later: how long it took and the
 * longest the event loop was held (a 1 ms timer's worst lateness).
 */
import { inProcess } from '../test/support/inproc'

const LOG = Number(process.argv[2] ?? 1_000_000)
const BURST = Number(process.argv[3] ?? 100_000)

/** `n - 1` copies of message `id` (new ids), with `status`. */
function copies(db: import('bun:sqlite').Database, id: string, n: number, status: string) {
  const cols = (db.query("SELECT name FROM pragma_table_info('messages') WHERE name NOT IN ('seq', 'id', 'status')").all() as { name: string }[]).map((c) => c.name).join(', ')
  db.run(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${n - 1}) INSERT INTO messages (id, status, ${cols}) SELECT '${status}-' || i, '${status}', ${cols} FROM messages, n WHERE messages.id = ?`, [id])
}

{
  const env = await inProcess()
  const { svc, db } = env
  const ws = svc.workspaces.create({ name: 'Log' })
  const conn = svc.connections.create(ws.id, { phone: '+15550007000', driver: 'sandbox' })
  copies(db, (await svc.messages.inbound(conn.id, '+15550007001', 'x'.repeat(200))).id, LOG, 'delivered')
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
  const { svc, db, clock } = env
  const ws = svc.workspaces.create({ name: 'Burst' })
  svc.webhooks.create(ws.id, 'http://127.0.0.1:9/hook', undefined)
  svc.webhooks.stop()
  const conn = svc.connections.create(ws.id, { phone: '+15550007000', driver: 'sandbox' })
  const first = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15550007001', body: 'x'.repeat(200), attachments: [] })
  svc.connections.patch(conn.id, { status: 'offline' })
  copies(db, first.id, BURST, 'queued')
  clock.t += 25 * 3_600_000
  let last = performance.now()
  let held = 0
  const tick = setInterval(() => {
    const now = performance.now()
    held = Math.max(held, now - last)
    last = now
  }, 1)
  const started = performance.now()
  await svc.messages.expireQueued()
  const took = performance.now() - started
  await Bun.sleep(5)
  clearInterval(tick)
  console.log(`a burst of ${BURST} queued messages expired in ${took.toFixed(0)} ms, event loop held at most ${held.toFixed(0)} ms`)
  await env.close()
}
