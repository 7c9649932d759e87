/**
 * Deleting old webhook deliveries (in-process, real SQLite file): `bun bench/webhook-prune.ts [deliveries]`.
 * A backlog of finished deliveries of ~400-byte message events, all past both cutoffs, deleted
 * (1) by the hourly 30-day prune and (2) by message content retention (one day). Prints how long
 * each took and the longest the event loop was held (a 1 ms timer's worst lateness).
 */
import { inProcess } from '../test/support/inproc'

const N = Number(process.argv[2] ?? 300_000)

async function backlog() {
  const env = await inProcess()
  const { svc, db } = env
  const ws = svc.workspaces.create({ name: 'Prune' })
  svc.workspaces.patch(ws.id, { settings: { messages: { content_retention_days: 1 } } })
  const hook = svc.webhooks.create(ws.id, 'http://127.0.0.1:9/hook', undefined)
  svc.webhooks.stop()
  svc.deps.writer.now(() => svc.webhooks.enqueueInTx(ws.id, 'message.received', { id: 'x', body: 'x'.repeat(300) }))
  db.run("UPDATE webhook_deliveries SET status = 'delivered'")
  const cols = (db.query("SELECT name FROM pragma_table_info('webhook_deliveries') WHERE name NOT IN ('seq', 'id')").all() as { name: string }[]).map((c) => c.name).join(', ')
  db.run(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${N - 1}) INSERT INTO webhook_deliveries (id, ${cols}) SELECT 'd' || i, ${cols} FROM webhook_deliveries, n WHERE endpoint_id = ?`, [hook.id])
  db.run('PRAGMA wal_checkpoint(TRUNCATE)')
  env.clock.t += 31 * 86_400_000
  return env
}

async function timed(name: string, run: () => Promise<unknown>) {
  let last = performance.now()
  let held = 0
  const tick = setInterval(() => {
    const now = performance.now()
    held = Math.max(held, now - last)
    last = now
  }, 1)
  const started = performance.now()
  await run()
  const took = performance.now() - started
  await Bun.sleep(5) // a run that never let the timer fire is held for all of it
  clearInterval(tick)
  console.log(`${name}: ${N} deliveries deleted in ${took.toFixed(0)} ms, event loop held at most ${held.toFixed(0)} ms`)
}

for (const [name, run] of [
  ['30-day prune', (svc: any) => svc.webhooks.pruneFinished()],
  ['content retention', (svc: any) => svc.messageRetention.run()],
] as const) {
  const env = await backlog()
  await timed(name, () => run(env.svc))
  await env.close()
}
