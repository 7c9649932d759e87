/**
 * `capstan migrate-to-postgres`: an installation on the embedded SQLite file moves to PostgreSQL
 * (CAPSTAN_DATABASE_URL) — and its media to the bucket CAPSTAN_MEDIA_STORE names, when it names
 * one — so that several instances can serve it (docs/several-machines.md).
 *
 * The server must be stopped (the data directory's lock). The target database must hold no
 * Capstan data yet. Every table is copied in one PostgreSQL transaction, in an order its foreign
 * keys allow, with the rows' own ids; the counts the triggers keep are then set to the SQLite
 * file's own; identity sequences continue after the copied ids. Each table's rows are counted on
 * both sides before the transaction commits: any difference rolls it all back. The SQLite file is
 * only read, and stays as it was (start the old way again if anything goes wrong).
 */
import type { Database } from 'bun:sqlite'
import type { Config } from './config'
import { migratePostgres } from './db/postgres'
import { SESSION } from './db/engine'
import { join } from 'node:path'
import { BucketJournal, JOURNAL, journalDirs, readRecords } from './modules/contacts/erasure-journal'
import { LocalMediaStore, S3MediaStore } from './modules/media/store'
import { databaseOrExit, databaseWhere, fail, lockOrExit, postgresFailure, unfitPostgres } from './startup'

/** Tables in an order their foreign keys allow; the ephemeral coordination tables are not copied. */
const TABLES = [
  'system_settings',
  'workspaces',
  'api_keys',
  'audit_log',
  'contacts',
  'consent_ledger',
  'suppressions',
  'connections',
  'templates',
  'media',
  'campaigns',
  'campaign_recipients',
  'messages',
  'message_parts',
  'network_addresses',
  'service_windows',
  'usage_monthly',
  'idempotency_keys',
  'webhook_endpoints',
  'webhook_deliveries',
  'groups',
  'dashboard_sessions',
  'sandbox_sends',
  'sandbox_groups',
]
/** Counts the triggers keep as rows are inserted: set to the SQLite file's once the rows are in. */
const KEPT_COUNTS = ['message_counts', 'contact_counts', 'suppression_counts', 'webhook_delivery_counts', 'campaign_counts', 'message_outcome_counts']
/** Identity columns, continued after the copied values. */
const IDENTITIES: [string, string][] = [
  ['audit_log', 'id'],
  ['consent_ledger', 'id'],
  ['messages', 'seq'],
  ['webhook_deliveries', 'seq'],
  ['campaign_recipients', 'seq'],
]
/** Rows per INSERT (PostgreSQL takes at most 65,535 parameters in one statement). */
const BATCH = 1000

type Pg = InstanceType<typeof Bun.SQL>
type Tx = Pick<Pg, 'unsafe'>

/**
 * Copy one table's rows. A text holding the NUL character — which an earlier Capstan took into
 * SQLite, and PostgreSQL's text cannot hold — is copied with U+FFFD in its place, and counted in
 * `nul` (JSON texts never hold one: JSON writes it as the escape \u0000).
 */
async function copyTable(db: Database, tx: Tx, table: string, nul: { texts: number }): Promise<number> {
  const columns = (db.query(`PRAGMA table_info(${table})`).all() as { name: string }[]).map((c) => c.name)
  const list = columns.map((c) => `"${c}"`).join(', ')
  const insert = (n: number) => `INSERT INTO ${table} (${list}) VALUES ${Array.from({ length: n }, (_, r) => `(${columns.map((_, c) => `$${r * columns.length + c + 1}`).join(', ')})`).join(', ')}`
  let copied = 0
  let batch: unknown[] = []
  // one pass over the table (the lock keeps anyone else from writing meanwhile)
  for (const row of db.query(`SELECT ${list} FROM ${table}`).iterate() as IterableIterator<Record<string, unknown>>) {
    for (const c of columns) {
      const v = row[c]
      if (typeof v === 'string' && v.includes('\0')) {
        nul.texts++
        batch.push(v.replaceAll('\0', '\uFFFD'))
      } else batch.push(v)
    }
    if (batch.length === BATCH * columns.length) {
      await tx.unsafe(insert(BATCH), batch as never[])
      copied += BATCH
      batch = []
    }
  }
  if (batch.length) {
    await tx.unsafe(insert(batch.length / columns.length), batch as never[])
    copied += batch.length / columns.length
  }
  return copied
}

export async function migrateToPostgres(config: Config) {
  if (!config.databaseUrl) fail('set CAPSTAN_DATABASE_URL to the PostgreSQL database to move to (and CAPSTAN_MEDIA_STORE to the bucket for the media)')
  const lock = lockOrExit(config.dataDir)
  const { db } = databaseOrExit(config.dbPath)
  const where = databaseWhere(config.databaseUrl)
  const pg = new Bun.SQL(config.databaseUrl, { max: 1, bigint: true, connection: SESSION })
  try {
    const unfit = await unfitPostgres(pg, where).catch((e) => fail(postgresFailure(e, where)))
    if (unfit) fail(unfit)
    await migratePostgres(pg).catch((e) => fail(postgresFailure(e, where)))
    const [existing] = await pg`SELECT (SELECT COUNT(*) FROM workspaces)::int AS workspaces, (SELECT COUNT(*) FROM messages)::int AS messages`
    if (existing.workspaces > 0 || existing.messages > 0) fail(`the database ${where} already holds Capstan data (${existing.workspaces} workspaces); move into an empty one`)
    // the media first (a file in the bucket with no row is harmless; a row without its file is not)
    const blobs = (db.query('SELECT DISTINCT blob FROM media').all() as { blob: string }[]).map((r) => r.blob)
    let files = 0
    let erasures = 0
    if (config.mediaStore.kind === 's3') {
      const from = new LocalMediaStore(config.mediaDir)
      const to = new S3MediaStore(config.mediaStore)
      const why = await to.check()
      if (why) fail(`CAPSTAN_MEDIA_STORE: ${why}`)
      for (const blob of blobs) {
        if (!(await from.has(blob))) continue // deleted by retention with its rows on their way out
        if (!(await to.has(blob))) await to.put(blob, await from.bytes(blob))
        files++
      }
      // the erasures recorded so far go to the bucket too, where every instance's start reads them
      // (a database put back from before one then does it again; see modules/contacts/erasure-journal.ts)
      const bucket = new BucketJournal(to.client, to.prefix)
      for (const r of readRecords(journalDirs(config).map((dir) => join(dir, JOURNAL)))) {
        await bucket.add(r)
        erasures++
      }
    }
    const counts: Record<string, number> = {}
    const nul = { texts: 0 }
    await pg.begin(async (tx) => {
      nul.texts = 0
      for (const table of TABLES) counts[table] = await copyTable(db, tx, table, nul)
      for (const table of KEPT_COUNTS) {
        await tx.unsafe(`DELETE FROM ${table}`)
        counts[table] = await copyTable(db, tx, table, nul)
      }
      for (const [table, column] of IDENTITIES) await tx.unsafe(`SELECT setval(pg_get_serial_sequence('${table}', '${column}'), GREATEST((SELECT MAX(${column}) FROM ${table}), 1))`)
      // verified before it commits: every table holds as many rows as the file
      for (const table of [...TABLES, ...KEPT_COUNTS]) {
        const [row] = await tx.unsafe(`SELECT COUNT(*)::int AS n FROM ${table}`)
        const source = (db.query(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n
        if (row.n !== source) throw new Error(`${table}: ${row.n} rows copied of ${source}`)
      }
    })
    const replaced = nul.texts ? ` (${nul.texts} texts held the NUL character, which PostgreSQL cannot store: each was copied with U+FFFD in its place)` : ''
    const summary = `moved to PostgreSQL ${where}: ${counts.workspaces} workspaces, ${counts.contacts} contacts, ${counts.messages} messages, ${counts.webhook_deliveries} webhook deliveries, every table's rows counted on both sides${replaced}`
    console.log(config.mediaStore.kind === 's3' ? `${summary}; ${files} media files and ${erasures} erasure records copied to s3://${config.mediaStore.bucket}/${config.mediaStore.prefix}` : `${summary}; media files stay in ${config.mediaDir} (set CAPSTAN_MEDIA_STORE to move them to a bucket, which several instances need)`)
    console.log(`start the instances with CAPSTAN_DATABASE_URL (and CAPSTAN_MEDIA_STORE) and this installation's secret key (${config.secretKey ? 'the same CAPSTAN_SECRET_KEY' : `a copy of ${config.secretKeyFile} as CAPSTAN_SECRET_KEY_FILE`}): the stored secrets are sealed with it. The SQLite file is left as it was`)
  } catch (e) {
    fail(`nothing was moved: ${(e as Error)?.message ?? e}`)
  } finally {
    await pg.close().catch(() => {})
    db.close()
    lock.release()
  }
}
