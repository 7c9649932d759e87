/**
 * What the commands that open the data directory share: the configuration, the directory's lock
 * and the database, each obtained or the process stopped with one line and exit code 2.
 */
import type { Database } from 'bun:sqlite'
import { type Config, ConfigError, loadConfig } from './config'
import { DataDirLocked, lockDataDir } from './db/lock'
import { existsSync } from 'node:fs'
import { LATEST_SCHEMA, migrate, noRoom, openDatabase, schemaVersion } from './db/open'
import { SecretBox } from './secrets'
import { type Engine, PgEngine, SESSION, stmt } from './db/engine'
import { migratePostgres, PG_LATEST, SchemaTooNew } from './db/postgres'

export function fail(message: string): never {
  console.error(`capstan: ${message}`)
  process.exit(2)
}

export function configOrExit() {
  try {
    return loadConfig()
  } catch (e) {
    if (e instanceof ConfigError) fail(e.message)
    throw e
  }
}

/** A system or SQLite error as one line: its message without the stack. */
export function reasonOf(e: unknown): string {
  return String((e as Error)?.message ?? e).split('\n')[0]!
}

/**
 * The data directory's lock, or one line and exit 2: when another Capstan holds it, and when the
 * directory cannot be created or written (a wrong path, a read-only volume, another owner).
 */
export function lockOrExit(dataDir: string) {
  try {
    return lockDataDir(dataDir)
  } catch (e) {
    if (e instanceof DataDirLocked) fail(e.message)
    fail(`CAPSTAN_DATA_DIR ${dataDir} cannot be used: ${reasonOf(e)}`)
  }
}

/**
 * The database, opened and migrated, or one line and exit 2: a file that is not a database, one
 * that cannot be written, or one migrated by a newer Capstan (nothing is changed in any of them).
 */
export function databaseOrExit(path: string): { db: Database; applied: number[]; fullDisk: boolean } {
  let db: Database | null = null
  try {
    db = openDatabase(path)
    return { db, applied: migrate(db), fullDisk: false }
  } catch (e) {
    db?.close()
    db = null
    // a disk with no room for the WAL's index: opened for this process alone, to serve reads (a
    // database that still needs migrations cannot be used so, and stops the start as before)
    if (noRoom(e) && existsSync(path)) {
      try {
        db = openDatabase(path, { exclusive: true })
        if (schemaVersion(db) === LATEST_SCHEMA) return { db, applied: [], fullDisk: true }
      } catch {
        // reported below, as the first failure
      }
      db?.close()
    }
    fail(`cannot open the database ${path}: ${reasonOf(e)}`)
  }
}

/** The key that opens stored secrets (see SecretBox.load), or one line and exit 2. */
export function secretBoxOrExit(config: Config): SecretBox {
  try {
    return SecretBox.load(config.dataDir, config.secretKey, config.secretKeyFile)
  } catch (e) {
    fail(`the secret key cannot be used: ${reasonOf(e)}`)
  }
}

/** What the secret check holds, sealed (see secretKeyMatchesOrExit). */
const CANARY = 'capstan secret key check'
const SECRET_CHECK = {
  get: stmt("SELECT value FROM system_settings WHERE name = 'secret_check'"),
  put: stmt("INSERT INTO system_settings (name, value) VALUES ('secret_check', ?) ON CONFLICT (name) DO NOTHING"),
}

/**
 * The secret key is the one this database's secrets were sealed with, or one line and exit 2. A
 * value sealed with the key is kept in the database at the first start; an instance given another
 * key (on several machines, each with a key file of its own in its data directory; or a data
 * directory whose key file was replaced) would otherwise start and then fail every number's token
 * and webhook secret it opened, and find no phone number it had kept a digest of.
 */
export async function secretKeyMatchesOrExit(engine: Engine, box: SecretBox) {
  let row = await engine.get<{ value: string }>(SECRET_CHECK.get)
  if (!row) {
    // (written once; a start that cannot write it — a full disk — checks at the next start)
    await engine.write((tx) => tx.run(SECRET_CHECK.put, box.seal(CANARY))).catch(() => {})
    row = await engine.get<{ value: string }>(SECRET_CHECK.get)
    if (!row) return
  }
  let opened: string | null = null
  try {
    opened = box.open(row.value)
  } catch {
    // another key: the seal does not open
  }
  if (opened !== CANARY)
    fail(
      'the secret key is not the one the secrets in this database were sealed with: give every instance the same CAPSTAN_SECRET_KEY (or CAPSTAN_SECRET_KEY_FILE), the one it was first started with — each data directory makes a key file of its own when neither is set',
    )
}

/** Where CAPSTAN_DATABASE_URL points, without its credentials: for the one line a failed start prints. */
export function databaseWhere(url: string): string {
  const u = new URL(url)
  const host = u.searchParams.get('host') ?? u.host
  return `${host}${u.pathname}`
}

/** Why PostgreSQL could not be used, in words an operator acts on (never the URL: it may hold a password). */
export function postgresFailure(e: unknown, where: string): string {
  if (e instanceof SchemaTooNew) return `the database ${where} was migrated by a newer Capstan (schema ${e.found}; this binary knows up to ${PG_LATEST}): run that version or newer`
  const err = e as { errno?: string; code?: string; message?: string }
  const reason = reasonOf(e)
  if (err.errno === '28P01' || err.errno === '28000') return `the database ${where} refused the credentials in CAPSTAN_DATABASE_URL: ${reason}`
  if (err.errno === '3D000') return `the database ${where} does not exist: ${reason} (create it, or correct CAPSTAN_DATABASE_URL)`
  // PostgreSQL 15 and newer let only a database's owner create tables in its public schema
  if (err.errno === '42501') return `the role in CAPSTAN_DATABASE_URL may not create Capstan's tables in the database ${where}: ${reason} (make the role the database's owner: ALTER DATABASE <name> OWNER TO <role>, or CREATE DATABASE capstan OWNER capstan)`
  if (err.errno === '25006') return `the database ${where} takes no writes (a standby, or default_transaction_read_only is on): point CAPSTAN_DATABASE_URL at the primary`
  // TLS (sslmode in the URL): a certificate not verified, the CA file not there, no TLS offered
  if (/CERT|UNABLE_TO_VERIFY|UNABLE_TO_GET_ISSUER/.test(err.code ?? ''))
    return `the PostgreSQL server of CAPSTAN_DATABASE_URL (${where}) has a certificate that could not be verified: ${reason} (name the CA that signed it with sslrootcert=<file> in the URL, e.g. your provider's CA bundle)`
  if (/caFile/.test(err.message ?? '')) return `the CA file named by sslrootcert in CAPSTAN_DATABASE_URL cannot be read (${where})`
  if (err.code === 'ERR_POSTGRES_TLS_NOT_AVAILABLE') return `the PostgreSQL server of CAPSTAN_DATABASE_URL (${where}) does not offer TLS, which the URL's sslmode asks for`
  if (err.code === 'ERR_POSTGRES_CONNECTION_REFUSED' || err.code === 'ERR_POSTGRES_CONNECTION_FAILED' || err.code === 'ERR_POSTGRES_CONNECTION_TIMEOUT')
    return `cannot reach the PostgreSQL server of CAPSTAN_DATABASE_URL (${where}): ${reason}`
  return `cannot use the database ${where}: ${reason}`
}

/**
 * PostgreSQL (CAPSTAN_DATABASE_URL), reachable, version 15 or newer, and migrated — by one
 * instance at a time — or one line and exit 2: unreachable, wrong credentials, no such database,
 * too old a server, a database not in UTF8, or a schema a newer Capstan wrote (nothing is
 * changed then); for an instance that serves, also one whose announcements do not come back
 * (`hearsAnnouncements`).
 */
export async function postgresOrExit(url: string, pool: number, { serving = true } = {}): Promise<{ engine: PgEngine; applied: number[] }> {
  const where = databaseWhere(url)
  const admin = new Bun.SQL(url, { max: 1, connectionTimeout: 10, bigint: true, connection: SESSION })
  try {
    const unfit = await unfitPostgres(admin, where)
    if (unfit) fail(unfit)
    const applied = await migratePostgres(admin)
    // (an instance that serves must hear the others; `capstan migrate` only migrates)
    if (serving && !(await hearsAnnouncements(admin))) fail(NOT_HEARD(where))
    return { engine: PgEngine.connect(url, pool), applied }
  } catch (e) {
    fail(postgresFailure(e, where))
  } finally {
    await admin.close().catch(() => {})
  }
}

/**
 * Why a PostgreSQL database cannot hold Capstan, before anything is made in it: a server older
 * than 15, or a database not encoded in UTF8 — messages, names and templates hold any character
 * (emoji, every script), which another encoding refuses (LATIN1) or keeps unchecked (SQL_ASCII).
 * Null: it can.
 */
export async function unfitPostgres(db: InstanceType<typeof Bun.SQL>, where: string): Promise<string | null> {
  const [row] = await db`SELECT current_setting('server_version_num')::int AS v, current_setting('server_encoding') AS e`
  if (Number(row.v) < 150000) return `the database ${where} runs PostgreSQL ${Math.floor(Number(row.v) / 10000)}; Capstan needs 15 or newer`
  if (row.e !== 'UTF8') return `the database ${where} is encoded ${row.e}, not UTF8: Capstan keeps text of every script and emoji — create it with CREATE DATABASE capstan ENCODING 'UTF8' TEMPLATE template0 (nothing was changed in this one)`
  return null
}

/** How long a start waits to hear its own probe announced (on a direct connection: a few ms). */
export const HEARING_WAIT_MS = 5_000

const NOT_HEARD = (where: string) =>
  `the database ${where} does not pass on what Capstan announces (LISTEN/NOTIFY): a connection pooler in transaction or statement mode in front of it? Capstan needs a direct connection or a pooler in session mode — without it a key revoked on one instance would still work on the others`

/**
 * Whether what is announced on the database reaches this process: instances hear each other's
 * changes (a key revoked, a workspace deactivated) through LISTEN/NOTIFY, which a pooler in
 * transaction or statement mode does not pass on (a LISTEN made on a connection lent out for one
 * statement hears nothing). A probe on a channel of its own, so running instances do not hear it.
 */
export async function hearsAnnouncements(db: InstanceType<typeof Bun.SQL>, waitMs = HEARING_WAIT_MS): Promise<boolean> {
  const probe = crypto.randomUUID()
  let heard!: () => void
  const got = new Promise<true>((done) => (heard = () => done(true)))
  const subscription = await db.listen('capstan_probe', (payload) => {
    if (payload === probe) heard()
  })
  try {
    await db`SELECT pg_notify('capstan_probe', ${probe})`
    return await Promise.race([got, Bun.sleep(waitMs).then(() => false)])
  } finally {
    await subscription.unlisten().catch(() => {})
  }
}
