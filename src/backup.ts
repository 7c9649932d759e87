/**
 * `capstan backup <dir>` and `capstan restore <dir>`.
 *
 * Backup works while the server runs: `VACUUM INTO` writes a transactionally consistent copy of
 * the database (WAL readers never block the server), then the media files that copy refers to
 * are copied — or hard-linked from the newest backup beside it, which has the same file (they are
 * content-addressed and never change) — with the key file that decrypts
 * stored secrets and the sandbox's records. Restore puts a backup into an empty data directory
 * (the server stopped) and checks the database's integrity; forced over an old one, it leaves no
 * media file the restored database does not refer to.
 */
import { Database } from 'bun:sqlite'
import { chmodSync, closeSync, copyFileSync, existsSync, fsyncSync, linkSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { basename, dirname, join } from 'node:path'
import { LATEST_SCHEMA, migrate, openDatabase, schemaVersion } from './db/open'
import { carryOver, JOURNAL } from './modules/contacts/erasure-journal'
import { VERSION } from './version'

export interface BackupResult {
  dir: string
  messages: number
  media: number
  /** Of `media`, the files hard-linked from the backup beside it rather than copied. */
  linked: number
  missing: string[]
}

/**
 * The newest complete Capstan backup in the same directory as `dir` (its manifest.json names
 * Capstan), or null. Its media files can be shared: they are named by their SHA-256, never change,
 * and nothing Capstan does writes into a backup after it is made (an old one is only ever removed).
 */
function newestBeside(dir: string): string | null {
  const parent = dirname(dir)
  let best: { path: string; at: string } | null = null
  let names: string[]
  try {
    names = readdirSync(parent)
  } catch {
    return null
  }
  for (const name of names) {
    if (name === basename(dir)) continue
    try {
      const manifest = JSON.parse(readFileSync(join(parent, name, 'manifest.json'), 'utf8')) as { capstan?: unknown; created_at?: unknown }
      if (typeof manifest.capstan !== 'string' || typeof manifest.created_at !== 'string') continue
      if (!best || manifest.created_at > best.at) best = { path: join(parent, name), at: manifest.created_at }
    } catch {
      // not a backup, or not a complete one
    }
  }
  return best?.path ?? null
}

/**
 * A media file into the backup: a hard link to the same file in the previous backup when it has
 * it (same size), else a copy. A link costs no space, so a daily backup costs its database and the
 * files that are new since the last one. Returns whether it was linked.
 */
function addMedia(from: string, to: string, previous: string | null, sha: string): boolean {
  const before = previous === null ? null : join(previous, 'media', sha.slice(0, 2), sha)
  if (before !== null) {
    try {
      if (statSync(before).size === statSync(from).size) {
        linkSync(before, to)
        chmodSync(to, 0o600)
        return true
      }
    } catch {
      // not there, or on another file system: copied below
    }
  }
  copyPrivate(from, to)
  return false
}

/** The media files a database refers to, by content hash. */
const mediaShas = (db: Database) => db.query<{ blob: string }, []>('SELECT DISTINCT blob FROM media').all().map((r) => r.blob)

/**
 * A copy readable by its owner only. A copy keeps its source's mode, not the umask: a file a
 * server wrote under a looser umask, or one from an older backup, must not come out readable.
 */
function copyPrivate(from: string, to: string) {
  copyFileSync(from, to)
  chmodSync(to, 0o600)
}

/** Copies a directory tree; files that were not there before are listed in `added`. */
function copyDir(from: string, to: string, added: string[] = []) {
  if (!existsSync(from)) return
  mkdirSync(to, { recursive: true, mode: 0o700 })
  for (const f of readdirSync(from, { withFileTypes: true })) {
    if (f.isDirectory()) copyDir(join(from, f.name), join(to, f.name), added)
    else if (f.isFile()) {
      if (!existsSync(join(to, f.name))) added.push(join(to, f.name))
      copyPrivate(join(from, f.name), join(to, f.name))
    }
  }
}

/**
 * `mediaIn`: the bucket the media files live in (CAPSTAN_MEDIA_STORE), or null for the data
 * directory's: with a bucket, the backup holds the database and its keys, and the manifest names
 * the bucket — whose own versioning or replication keeps the files.
 */
export function backup(dataDir: string, dir: string, mediaIn: string | null = null): BackupResult {
  const source = join(dataDir, 'capstan.db')
  if (!existsSync(source)) throw new Error(`no database at ${source}`)
  if (existsSync(join(dir, 'capstan.db'))) throw new Error(`${dir} already holds a backup`)
  // what this backup adds to `dir`, removed again if it cannot be finished (a full disk): a half
  // backup must neither pass for one nor stop the next try as "already holds a backup"
  const added = ['capstan.db', 'media', 'secret.key', JOURNAL, 'sandbox', 'manifest.json'].filter((f) => !existsSync(join(dir, f))).map((f) => join(dir, f))
  const made = !existsSync(dir)
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  try {
    return writeBackup(source, dataDir, dir, mediaIn)
  } catch (e) {
    for (const path of made ? [dir] : added) rmSync(path, { recursive: true, force: true })
    throw new Error(`the backup could not be written and nothing of it was kept: ${(e as Error).message}`)
  }
}

function writeBackup(source: string, dataDir: string, dir: string, mediaIn: string | null): BackupResult {
  const db = new Database(source, { readonly: true })
  db.run('PRAGMA busy_timeout = 10000')
  try {
    db.query('VACUUM INTO ?').run(join(dir, 'capstan.db'))
  } finally {
    db.close()
  }
  const copy = new Database(join(dir, 'capstan.db'), { readonly: true })
  const shas = mediaIn === null ? mediaShas(copy) : []
  const messages = copy.query<{ n: number }, []>('SELECT COUNT(*) AS n FROM messages').get()!.n
  copy.close()
  const missing: string[] = []
  const previous = newestBeside(dir)
  let linked = 0
  for (const sha of shas) {
    const from = join(dataDir, 'media', sha.slice(0, 2), sha)
    if (!existsSync(from)) {
      missing.push(sha) // deleted by retention after the snapshot
      continue
    }
    mkdirSync(join(dir, 'media', sha.slice(0, 2)), { recursive: true, mode: 0o700 })
    if (addMedia(from, join(dir, 'media', sha.slice(0, 2), sha), previous, sha)) linked++
  }
  if (existsSync(join(dataDir, 'secret.key'))) copyPrivate(join(dataDir, 'secret.key'), join(dir, 'secret.key'))
  if (existsSync(join(dataDir, JOURNAL))) copyPrivate(join(dataDir, JOURNAL), join(dir, JOURNAL))
  copyDir(join(dataDir, 'sandbox'), join(dir, 'sandbox'))
  writeFileSync(join(dir, 'manifest.json'), JSON.stringify({ capstan: VERSION, created_at: new Date().toISOString(), messages, media_files: shas.length - missing.length, media_linked: linked, missing_media: missing, ...(mediaIn === null ? {} : { media_kept_in: mediaIn }) }, null, 2))
  return { dir, messages, media: shas.length - missing.length, linked, missing }
}

/**
 * The backup's database must be whole and no newer than this binary before anything in the data
 * directory is touched: a forced restore of a damaged backup, or of one a newer Capstan made, must
 * not replace a working database.
 */
function checkBackup(from: string) {
  let integrity: string
  let version: number
  try {
    const db = new Database(from, { readonly: true })
    try {
      integrity = (db.query('PRAGMA integrity_check').get() as { integrity_check: string }).integrity_check
      version = schemaVersion(db)
    } finally {
      db.close()
    }
  } catch (e) {
    // SQLite's own reason ("file is not a database", …) says what is wrong with the file
    throw new Error(`the backup's database cannot be read: ${(e as Error).message}`)
  }
  if (integrity !== 'ok') throw new Error(`the backup's database failed its integrity check: ${integrity}`)
  if (version > LATEST_SCHEMA) throw new Error(`the backup was made by a newer Capstan (database schema version ${version}; this binary knows up to ${LATEST_SCHEMA})`)
}

export function restore(dir: string, dataDir: string, force = false): { messages: number; erasures: number } {
  const from = join(dir, 'capstan.db')
  if (!existsSync(from)) throw new Error(`no backup at ${dir} (capstan.db missing)`)
  if (existsSync(join(dataDir, 'capstan.db')) && !force) throw new Error(`${dataDir} already holds a database; stop the server and move it away (or pass --force)`)
  checkBackup(from)
  // written last: without it the backup was cut off (killed, power lost) before its media were all copied
  if (!existsSync(join(dir, 'manifest.json'))) throw new Error(`the backup at ${dir} is incomplete (no manifest.json: it was interrupted); make a new one`)
  mkdirSync(dataDir, { recursive: true, mode: 0o700 })
  // The database and key file are copied beside their places and renamed over them only once
  // every copy succeeded: a restore that cannot be finished (a full disk) leaves the data
  // directory's own database — forced over one — as it was, and the media files it added go.
  const staged = ['capstan.db', 'secret.key']
    .filter((name) => existsSync(join(dir, name)))
    .map((name) => ({ source: join(dir, name), to: join(dataDir, name), temp: join(dataDir, `${name}.restoring`) }))
  const addedMedia: string[] = []
  try {
    for (const f of staged) {
      copyPrivate(f.source, f.temp)
      const fd = openSync(f.temp, 'r+')
      fsyncSync(fd)
      closeSync(fd)
    }
    copyDir(join(dir, 'media'), join(dataDir, 'media'), addedMedia)
  } catch (e) {
    for (const path of [...staged.map((f) => f.temp), ...addedMedia]) rmSync(path, { force: true })
    throw new Error(`the restore could not be written; the data directory was left as it was: ${(e as Error).message}`)
  }
  // a forced restore replaces the database whole: its old WAL must not be replayed onto the copy
  for (const f of ['capstan.db-wal', 'capstan.db-shm']) rmSync(join(dataDir, f), { force: true })
  for (const f of staged) renameSync(f.temp, f.to)
  copyDir(join(dir, 'sandbox'), join(dataDir, 'sandbox'))
  const db = openDatabase(join(dataDir, 'capstan.db'))
  try {
    migrate(db)
    removeUnreferencedMedia(join(dataDir, 'media'), new Set(mediaShas(db)))
    // erasures recorded since (in this data directory, in the backup, beside it): done again at the next start
    const erasures = carryOver(dataDir, [join(dir, JOURNAL), join(dirname(dir), JOURNAL)])
    return { messages: db.query<{ n: number }, []>('SELECT COUNT(*) AS n FROM messages').get()!.n, erasures }
  } finally {
    db.close()
  }
}

/**
 * After a forced restore the media directory still holds files uploaded after the backup was
 * made; no row of the restored database refers to them, so retention would never delete them.
 */
function removeUnreferencedMedia(mediaDir: string, referenced: Set<string>) {
  if (!existsSync(mediaDir)) return
  for (const shard of readdirSync(mediaDir, { withFileTypes: true })) {
    if (!shard.isDirectory()) continue
    for (const f of readdirSync(join(mediaDir, shard.name), { withFileTypes: true })) {
      if (f.isFile() && !referenced.has(f.name)) rmSync(join(mediaDir, shard.name, f.name), { force: true })
    }
  }
}
