import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { migratePostgres } from '../src/db/postgres'
const dir = mkdtempSync(join(tmpdir(), 'cq-'))
const pg = await PrivatePostgres.start(join(dir, 'pg'))
const db = new Bun.SQL(pg.url, { max: 1 })
await migratePostgres(db)
await db.unsafe(`INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES ('w', 'W', 'w', 'active', '{}', 0, 0)`)
await db.unsafe(`INSERT INTO contacts (id, workspace_id, phone, name, consent_status, metadata, created_at, updated_at, last_activity_at) SELECT 'c' || g, 'w', '+1777' || lpad(g::text, 7, '0'), NULL, 'opted_in', '{}', 0, 0, 0 FROM generate_series(0, 1000) g`)
// contact c0: every 10th message of the oldest 500,000 (50,000 messages), then none; others spread
await db.unsafe(`INSERT INTO messages (id, workspace_id, connection_id, contact_id, direction, status, recipient, sender, body, attachments, created_at, updated_at, opt_in_required)
  SELECT gen_random_uuid()::text, 'w', 'c', CASE WHEN g <= 500000 AND g % 10 = 0 THEN 'c0' ELSE 'c' || (1 + g % 1000) END, 'outbound', 'read', '+1777', '+15550001111', 'Message ' || g, '[]', g, g, 0 FROM generate_series(1, 1000000) g`)
await db.unsafe('VACUUM ANALYZE messages')
const q = `SELECT * FROM messages WHERE contact_id = $1 AND workspace_id = $2 ORDER BY seq DESC LIMIT 50 OFFSET 0`
for (const c of ['c0', 'c5']) {
  const ts: number[] = []
  for (let i = 0; i < 12; i++) { const t = performance.now(); await db.unsafe(q, [c, 'w']); ts.push(performance.now() - t) }
  ts.sort((a, b) => a - b)
  console.log(c, ts[6]!.toFixed(2), 'ms')
  for (const r of await db.unsafe(`EXPLAIN (ANALYZE, COSTS OFF) ${q.replace('$1', `'${c}'`).replace('$2', "'w'")}`)) console.log(r['QUERY PLAN'])
}
await db.close(); await pg.stop(); process.exit(0)
