/**
 * A workspace's suppression list (in-process, real SQLite file): `bun bench/suppressions.ts [size = 1000000]`.
 * (1) A page of the admin list (50, newest first) with N suppressions: through the page's index and
 *     the kept count (migration 0035), against the plan before it (every row read and sorted, every
 *     row counted), forced with NOT INDEXED in the same database.
 * (2) What the index and the count's triggers cost an import of 100,000 numbers into that list, with
 *     them and with them dropped, in the same run.
 */
import { inProcess } from '../test/support/inproc'
import { pairedMedians } from './support'

const N = Number(process.argv[2] ?? 1_000_000)
const numbers = (from: number, n: number) => Array.from({ length: n }, (_, i) => ({ phone: `+1555${String(from + i).padStart(7, '0')}` }))

async function list(extras: boolean) {
  const env = await inProcess()
  const { svc, db } = env
  const ws = await svc.workspaces.create({ name: 'Suppressions' })
  if (!extras) db.run('DROP INDEX suppressions_newest; DROP TRIGGER suppression_counts_insert; DROP TRIGGER suppression_counts_delete')
  const insert = db.query('INSERT INTO suppressions (workspace_id, phone, reason, created_at) VALUES (?, ?, NULL, ?)')
  db.transaction(() => {
    for (let i = 0; i < N; i++) insert.run(ws.id, `+1444${String(i).padStart(7, '0')}`, 1_000 + Math.floor(i / 1000))
  })()
  db.run('PRAGMA wal_checkpoint(TRUNCATE)')
  return { env, svc, db, ws }
}

{
  const { env, svc, db, ws } = await list(true)
  const oldPage = db.query('SELECT * FROM suppressions NOT INDEXED WHERE workspace_id = ? ORDER BY created_at DESC, phone LIMIT 50 OFFSET 0')
  const oldCount = db.query('SELECT COUNT(*) AS n FROM suppressions WHERE workspace_id = ?')
  const [now, before] = await pairedMedians(
    11,
    () => svc.suppressions.list(ws.id, 50, 0),
    () => ({ rows: oldPage.all(ws.id), total: oldCount.get(ws.id) }),
  )
  console.log(`a page of 50 of ${N} suppressions, median of 11: ${now.toFixed(2)} ms now, ${before.toFixed(2)} ms reading, sorting and counting them all`)
  await env.close()
}

const took: Record<string, string[]> = { with: [], without: [] }
for (let round = 0; round < 2; round++) {
  for (const extras of [true, false]) {
    const { env, svc, ws } = await list(extras)
    const t = performance.now()
    const r = await svc.suppressions.importRows(ws.id, numbers(round * 100_000, 100_000))
    took[extras ? 'with' : 'without']!.push(`${((performance.now() - t) / 1000).toFixed(2)} s (${r.added} added)`)
    await env.close()
  }
}
for (const name of ['with', 'without']) console.log(`import of 100,000 into ${N}, ${name} the index and the count's triggers: ${took[name]!.join(', ')}`)
