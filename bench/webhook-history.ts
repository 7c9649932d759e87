/**
 * A webhook endpoint's delivery history (in-process, real SQLite file):
 * `bun bench/webhook-history.ts [deliveries = 300000]`.
 * (1) A page of the admin history with N deliveries: its meta.total from the kept count
 *     (migration 0034) against counting the endpoint's rows as before.
 * (2) What the count's triggers cost: enqueueing events, and the 30-day prune of N finished
 *     deliveries, with the triggers and with them dropped, in the same run.
 */
import { inProcess } from '../test/support/inproc'
import { copyRow } from '../test/support/rows'
import { pairedMedians, timedHold } from './support'

const N = Number(process.argv[2] ?? 300_000)

async function history(triggers: boolean) {
  const env = await inProcess()
  const { svc, db } = env
  const ws = await svc.workspaces.create({ name: 'History' })
  const hook = await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/hook', undefined)
  svc.webhooks.stop()
  if (!triggers) db.run('DROP TRIGGER webhook_delivery_counts_insert; DROP TRIGGER webhook_delivery_counts_delete')
  await svc.deps.engine.write((tx) => svc.webhooks.enqueueIn(tx, ws.id, 'message.received', { id: 'x', body: 'x'.repeat(300) } as never))
  db.run("UPDATE webhook_deliveries SET status = 'delivered'")
  copyRow(db, 'webhook_deliveries', (db.query('SELECT id FROM webhook_deliveries').get() as { id: string }).id, N - 1, 'd')
  // copyRow writes rows directly: the kept count is set to what they are
  db.run('INSERT OR REPLACE INTO webhook_delivery_counts (endpoint_id, n) SELECT endpoint_id, COUNT(*) FROM webhook_deliveries GROUP BY endpoint_id')
  db.run('PRAGMA wal_checkpoint(TRUNCATE)')
  return { env, svc, db, ws, hook }
}

{
  const { env, svc, db, hook } = await history(true)
  const count = db.query<{ n: number }, [string]>('SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = ?')
  const [kept, counted] = await pairedMedians(
    21,
    () => svc.webhooks.deliveries(hook.id, 50, 0),
    async () => ({ rows: (await svc.webhooks.deliveries(hook.id, 50, 0)).rows, total: count.get(hook.id)!.n }),
  )
  console.log(`a page of 50 of ${N} deliveries, median of 21: kept count ${kept.toFixed(2)} ms, counting the rows ${counted.toFixed(2)} ms`)
  await env.close()
}

const enqueue: Record<string, number[]> = { with: [], without: [] }
const prune: Record<string, string[]> = { with: [], without: [] }
for (let round = 0; round < 2; round++) {
  for (const triggers of [true, false]) {
    const { env, svc, ws } = await history(triggers)
    const name = triggers ? 'with' : 'without'
    // 20,000 events enqueued in writes of 100, as message status changes arrive
    const t = performance.now()
    for (let w = 0; w < 200; w++)
      await svc.deps.engine.write(async (tx) => {
        for (let i = 0; i < 100; i++) await svc.webhooks.enqueueIn(tx, ws.id, 'message.sent', { id: `m${w}-${i}` } as never)
      })
    enqueue[name]!.push((performance.now() - t) / 20_000)
    env.db.run("UPDATE webhook_deliveries SET status = 'delivered'")
    env.clock.t += 31 * 86_400_000
    const { ms, heldMs } = await timedHold(() => svc.webhooks.pruneFinished())
    prune[name]!.push(`${(ms / 1000).toFixed(2)} s (held ≤ ${heldMs.toFixed(0)} ms)`)
    await env.close()
  }
}
for (const name of ['with', 'without']) {
  console.log(`${name} the count's triggers: enqueue ${enqueue[name]!.map((us) => (us * 1000).toFixed(1)).join(', ')} µs per event; 30-day prune of ${N + 20_000}: ${prune[name]!.join(', ')}`)
}
