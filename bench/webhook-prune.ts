/**
 * Deleting old webhook deliveries (in-process, real SQLite file): `bun bench/webhook-prune.ts [deliveries]`.
 * A backlog of finished deliveries of ~400-byte message events, all past both cutoffs, deleted
 * (1) by the hourly 30-day prune and (2) by message content retention (one day). Prints how long
 * each took and the longest the event loop was held (see timedHold).
 */
import { inProcess } from '../test/support/inproc'
import { copyRow } from '../test/support/rows'
import { timedHold } from './support'

const N = Number(process.argv[2] ?? 300_000)

async function backlog() {
  const env = await inProcess()
  const { svc, db } = env
  const ws = await svc.workspaces.create({ name: 'Prune' })
  await svc.workspaces.patch(ws.id, { settings: { messages: { content_retention_days: 1 } } })
  const hook = await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/hook', undefined)
  svc.webhooks.stop()
  await svc.deps.engine.write((tx) => svc.webhooks.enqueueIn(tx, ws.id, 'message.received', { id: 'x', body: 'x'.repeat(300) } as never))
  db.run("UPDATE webhook_deliveries SET status = 'delivered'")
  copyRow(db, 'webhook_deliveries', (db.query('SELECT id FROM webhook_deliveries').get() as { id: string }).id, N - 1, 'd')
  db.run('PRAGMA wal_checkpoint(TRUNCATE)')
  env.clock.t += 31 * 86_400_000
  return env
}

for (const [name, run] of [
  ['30-day prune', (svc: any) => svc.webhooks.pruneFinished()],
  ['content retention', (svc: any) => svc.messageRetention.run()],
] as const) {
  const env = await backlog()
  const { ms, heldMs } = await timedHold(() => run(env.svc))
  console.log(`${name}: ${N} deliveries deleted in ${ms.toFixed(0)} ms, event loop held at most ${heldMs.toFixed(0)} ms`)
  await env.close()
}
