/**
 * Opening the database: pragmas (busy_timeout first, then WAL, durable commits, foreign keys,
 * deleted content zeroed)
 * and the forward-only migrations, applied in one transaction and recorded in `migrations`.
 */
import { Database } from 'bun:sqlite'
import { mkdirSync } from 'node:fs'
import { dirname } from 'node:path'
import { MIGRATIONS } from './migrations'

/**
 * Open (creating if needed) the SQLite file with Capstan's pragmas. `exclusive`: for a start on a
 * full disk, where the WAL's shared-memory index (`capstan.db-shm`) cannot be made — this one
 * connection then keeps that index in its own memory, and no other process or thread can open the
 * database while it runs (no checkpointer thread, no backup).
 */
export function openDatabase(path: string, { exclusive = false } = {}): Database {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 })
  const db = new Database(path, { create: true, strict: true })
  try {
    setPragmas(db, exclusive)
  } catch (e) {
    db.close()
    throw e
  }
  return db
}

function setPragmas(db: Database, exclusive: boolean) {
  db.run('PRAGMA busy_timeout = 5000')
  if (exclusive) db.run('PRAGMA locking_mode = EXCLUSIVE')
  db.run('PRAGMA journal_mode = WAL')
  // FULL: a commit is fsynced before it returns, so a 201/202 is only sent for durable writes.
  db.run('PRAGMA synchronous = FULL')
  db.run('PRAGMA foreign_keys = ON')
  db.run('PRAGMA temp_store = MEMORY')
  // what is deleted or overwritten is zeroed, not left in the file's free space: an erased contact
  // (modules/contacts/erasure.ts) — or an older version of any row — cannot be read back from it
  db.run('PRAGMA secure_delete = ON')
  db.run('PRAGMA cache_size = -32000')
  // checkpoint every ~40 MiB of WAL instead of SQLite's ~4 MiB: under a stream of sends the same
  // index pages are rewritten again and again, and a rarer checkpoint copies each of them once
  // (measured: ~7% more sends per second; bench/messages.ts post).
  db.run('PRAGMA wal_autocheckpoint = 10000')
}

/** Whether an error means the disk has no room: SQLite's, or the system's (ENOSPC, EDQUOT). */
export function noRoom(e: unknown): boolean {
  const code = String((e as { code?: unknown } | null)?.code ?? '')
  return code === 'SQLITE_FULL' || code.startsWith('SQLITE_IOERR') || code === 'ENOSPC' || code === 'EDQUOT'
}

/** Whether the database answers a query (readiness and metrics). */
export function databaseOk(db: Database): boolean {
  try {
    return db.query('SELECT 1 AS ok').get() !== null
  } catch {
    return false
  }
}

export { emptyWal } from './wal'

/** The newest migration this binary carries. */
export const LATEST_SCHEMA = Math.max(...MIGRATIONS.map((m) => m.version))

/** The schema version a database records (0 for one never migrated); reads only. */
export function schemaVersion(db: Database): number {
  if (!db.query("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'migrations'").get()) return 0
  return (db.query('SELECT MAX(version) AS v FROM migrations').get() as { v: number | null }).v ?? 0
}

/** Apply every migration newer than the recorded version; returns the versions applied. */
export function migrate(db: Database): number[] {
  const current = schemaVersion(db)
  // checked first: a database a newer Capstan has migrated has nothing pending for this one either
  if (current > LATEST_SCHEMA) throw new Error(`database schema version ${current} is newer than this binary (${LATEST_SCHEMA})`)
  db.run(`CREATE TABLE IF NOT EXISTS migrations (
    version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT`)
  const pending = MIGRATIONS.filter((m) => m.version > current)
  if (pending.length === 0) return []
  db.transaction(() => {
    for (const m of pending) {
      db.run(m.sql)
      db.query('INSERT INTO migrations (version, name, applied_at) VALUES (?, ?, ?)').run(m.version, m.name, Date.now())
    }
  }).immediate()
  return pending.map((m) => m.version)
}
