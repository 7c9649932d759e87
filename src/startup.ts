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
