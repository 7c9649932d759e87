/** Emptying SQLite's write-ahead log (its own file: the store seam needs it without the migrations). */
import type { Database } from 'bun:sqlite'

/**
 * Write the WAL into the database and empty it (TRUNCATE checkpoint): after deleting personal
 * data, the WAL still holds the pages as they were before. SQLite answers busy at once, without
 * waiting, while another connection runs a checkpoint — the checkpointer thread does, for moments,
 * ten times a second — so it is tried again every 10 ms for up to `tries` times. False when it
 * still could not be done (another process reading the database, say a backup being taken): then
 * it happens at a later checkpoint.
 */
export async function emptyWal(db: Database, tries = 200): Promise<boolean> {
  const truncate = db.query<{ busy: number }, []>('PRAGMA wal_checkpoint(TRUNCATE)')
  for (let i = 1; ; i++) {
    if (!truncate.get()?.busy) return true
    if (i >= tries) return false
    await Bun.sleep(10)
  }
}
