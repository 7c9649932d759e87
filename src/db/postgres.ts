/**
 * Capstan's schema on PostgreSQL: its migrations (migrations/pg/), applied by one instance at a
 * time (an advisory lock held by the migrating transaction), and refused when a newer Capstan has
 * migrated the database. The SQLite list is in migrations.ts; test/migrations-pg.test.ts holds the
 * two to the same tables, columns, indexes and triggers.
 */
import { CHANNEL } from './engine'
import pg0037 from '../../migrations/pg/0037_baseline.sql' with { type: 'text' }
import pg0038 from '../../migrations/pg/0038_cluster.sql' with { type: 'text' }
import pg0039 from '../../migrations/pg/0039_service_windows.sql' with { type: 'text' }
import pg0040 from '../../migrations/pg/0040_send_path.sql' with { type: 'text' }
import pg0041 from '../../migrations/pg/0041_shard_per_session.sql' with { type: 'text' }
import pg0042 from '../../migrations/pg/0042_audit_operator.sql' with { type: 'text' }
import pg0043 from '../../migrations/pg/0043_media_holds.sql' with { type: 'text' }
import pg0044 from '../../migrations/pg/0044_inbound_once.sql' with { type: 'text' }
import pg0045 from '../../migrations/pg/0045_resend.sql' with { type: 'text' }
import pg0046 from '../../migrations/pg/0046_log_pages.sql' with { type: 'text' }
import pg0047 from '../../migrations/pg/0047_status_counts.sql' with { type: 'text' }
import pg0048 from '../../migrations/pg/0048_instances.sql' with { type: 'text' }

/**
 * PostgreSQL starts at the SQLite schema's version 37 in one file (no installation ever ran an
 * earlier one); each later version comes as a pair of files, one per engine.
 */
export const PG_MIGRATIONS: { version: number; name: string; sql: string }[] = [
  { version: 37, name: '0037_baseline', sql: pg0037 },
  { version: 38, name: '0038_cluster', sql: pg0038 },
  { version: 39, name: '0039_service_windows', sql: pg0039 },
  { version: 40, name: '0040_send_path', sql: pg0040 },
  { version: 41, name: '0041_shard_per_session', sql: pg0041 },
  { version: 42, name: '0042_audit_operator', sql: pg0042 },
  { version: 43, name: '0043_media_holds', sql: pg0043 },
  { version: 44, name: '0044_inbound_once', sql: pg0044 },
  { version: 45, name: '0045_resend', sql: pg0045 },
  { version: 46, name: '0046_log_pages', sql: pg0046 },
  { version: 47, name: '0047_status_counts', sql: pg0047 },
  { version: 48, name: '0048_instances', sql: pg0048 },
]

export const PG_LATEST = Math.max(...PG_MIGRATIONS.map((m) => m.version))

/** The advisory lock key migrations take: two instances starting at once migrate one after the other. */
const MIGRATION_LOCK = 0x43415053 // "CAPS"

export class SchemaTooNew extends Error {
  constructor(readonly found: number) {
    super(`database schema version ${found} is newer than this binary (${PG_LATEST})`)
  }
}

type Client = InstanceType<typeof Bun.SQL>

/** Apply what is pending, in one transaction; returns the versions applied. */
export async function migratePostgres(sql: Client): Promise<number[]> {
  return sql.begin(async (tx) => {
    await tx`SELECT pg_advisory_xact_lock(${MIGRATION_LOCK})`
    await tx.unsafe('CREATE TABLE IF NOT EXISTS migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)')
    const [row] = await tx`SELECT COALESCE(MAX(version), 0)::int AS version FROM migrations`
    const current = Number(row.version)
    if (current > PG_LATEST) throw new SchemaTooNew(current)
    const pending = PG_MIGRATIONS.filter((m) => m.version > current)
    for (const m of pending) {
      await tx.unsafe(m.sql)
      await tx`INSERT INTO migrations (version, name, applied_at) VALUES (${m.version}, ${m.name}, ${Date.now()})`
    }
    // told to the instances running (heard at the commit): an older one steps aside (services.ts, SchemaWatch)
    if (pending.length) await tx`SELECT pg_notify(${CHANNEL}, ${`schema:${PG_LATEST}`})`
    return pending.map((m) => m.version)
  })
}
