/**
 * One Capstan per data directory. `capstan serve`, `migrate` and `restore` hold an exclusive lock
 * on `<data dir>/capstan.lock` for as long as they run. A second one on the same directory — on
 * another port, from another unit file, in another container sharing the volume — stops with one
 * line instead of recovering "interrupted" sends the first is still making or releasing its queue
 * a second time.
 *
 * The lock is SQLite's own file lock (a POSIX advisory lock): the kernel drops it when the process
 * ends, however it ends, so a crash never leaves a stale lock behind. `capstan backup` takes no
 * lock: it is meant to run beside a live server.
 */
import { Database } from 'bun:sqlite'
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'

export class DataDirLocked extends Error {}

/**
 * Take the lock; keep the returned handle referenced for as long as the lock must be held.
 * Throws DataDirLocked when another process holds it, and the system's error when the directory
 * cannot be created or written.
 */
export function lockDataDir(dataDir: string): { release(): void } {
  mkdirSync(dataDir, { recursive: true, mode: 0o700 })
  const db = new Database(join(dataDir, 'capstan.lock'), { create: true })
  const busy = (e: unknown) => (e as { code?: string }).code === 'SQLITE_BUSY'
  const locked = () => new DataDirLocked(`${dataDir} is in use by another Capstan process (serve, migrate or restore)`)
  try {
    db.run('PRAGMA busy_timeout = 0')
    // in exclusive locking mode the lock taken by a write is kept until the connection closes
    db.run('PRAGMA locking_mode = EXCLUSIVE')
    db.run('BEGIN EXCLUSIVE')
  } catch (e) {
    db.close()
    // busy is the other process's lock; anything else (a read-only directory or file) is not
    if (busy(e)) throw locked()
    throw e
  }
  try {
    db.run('CREATE TABLE IF NOT EXISTS holder (pid INTEGER NOT NULL, since INTEGER NOT NULL)')
    db.run('DELETE FROM holder')
    db.run('INSERT INTO holder (pid, since) VALUES (?, ?)', [process.pid, Date.now()])
    db.run('COMMIT')
  } catch {
    // the holder row could not be written (a full disk): the lock needs no write — the
    // exclusive transaction, taken again and never ended, holds it as long as the process runs
    try {
      if (!db.inTransaction) db.run('BEGIN EXCLUSIVE')
    } catch (e) {
      db.close()
      if (busy(e)) throw locked()
      throw e
    }
  }
  return { release: () => db.close() }
}
