/**
 * The checkpointer's thread (a Worker; see checkpoint.ts): its own connection to the database,
 * copying the WAL into the database file with PASSIVE checkpoints a few times a second. PASSIVE
 * never waits for the server's writes nor holds them up; the server's own automatic checkpoint
 * stays as the fallback, and with this running has little left to copy.
 */
import { Database } from 'bun:sqlite'

declare const self: Worker

let db: Database | null = null
let timer: Timer | null = null

self.onmessage = (e: MessageEvent<{ start?: { path: string; everyMs: number }; stop?: true }>) => {
  if (e.data.start) {
    db = new Database(e.data.start.path)
    // never wait: a checkpoint that cannot run now (another is under way) runs next time
    db.run('PRAGMA busy_timeout = 0')
    const step = db.query('PRAGMA wal_checkpoint(PASSIVE)')
    timer = setInterval(() => {
      try {
        step.get()
      } catch {
        // busy, or the database going away at shutdown: next time
      }
    }, e.data.start.everyMs)
    postMessage({ started: true })
  }
  if (e.data.stop) {
    if (timer) clearInterval(timer)
    db?.close()
    postMessage({ stopped: true })
  }
}
