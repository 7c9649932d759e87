import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { migratePostgres } from '../src/db/postgres'
const dir = mkdtempSync(join(tmpdir(), 'mig-'))
const pg = await PrivatePostgres.start(join(dir, 'pg'))
const db = new Bun.SQL(pg.url, { max: 1 })
await migratePostgres(db)
await db.unsafe(`INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES ('w', 'W', 'w', 'active', '{}', 0, 0)`)
await db.unsafe(`INSERT INTO connections (id, workspace_id, phone, name, driver, status, config, created_at, updated_at) VALUES ('c', 'w', '+15550001111', 'S', 'sandbox', 'online', '{}', 0, 0)`).catch((e) => console.log(String(e)))
await db.unsafe(`INSERT INTO messages (id, workspace_id, connection_id, direction, status, recipient, sender, body, attachments, created_at, updated_at, opt_in_required)
  SELECT gen_random_uuid()::text, 'w', 'c', 'outbound', 'read', '+1777' || lpad(g::text, 7, '0'), '+15550001111', 'Message ' || g, '[]', g, g, 0 FROM generate_series(1, 1000000) g`)
await db.unsafe('VACUUM ANALYZE messages')
for (let i = 0; i < 3; i++) {
  const t = performance.now()
  await db.begin(async (tx) => {
    await tx.unsafe('DROP INDEX messages_log_direction_status')
    await tx.unsafe('CREATE INDEX messages_log_direction_status ON messages (workspace_id, direction, status, (-seq))')
  })
  console.log('drop + create on 1,000,000 messages', ((performance.now() - t) / 1000).toFixed(2), 's')
}
await db.close(); await pg.stop(); process.exit(0)
