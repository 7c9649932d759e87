/**
 * A stored file is held from before it is written (or, for a copy of live media, chosen) until
 * the record that uses it is committed, so that removing files no record refers to (retention,
 * an upload refused after its file was written) leaves it alone.
 *
 * One process (SQLite) holds in memory. Instances sharing a database and a bucket hold in the
 * database (`media_holds`), and a file is removed only under its lock, which a new hold waits
 * for: the one removing sees the hold and keeps the file, or has removed it before the holder
 * writes it again. Held in one instance's memory, another instance's retention removed a file
 * between its upload being written and its record committed, and the record named nothing.
 */
import { type Engine, type Queries, stmt, TURNS, turnOf } from '../../db/engine'
import { Tally } from '../../tally'
import type { MediaRecordStore } from './records'

export interface FileHolds {
  /** Hold `blob` for the record `holder` (before its file is written or the record made). */
  hold(blob: string, holder: string): Promise<void>
  /** Inside the write that inserts the record `holder`: its hold ends with that commit. */
  keptIn(tx: Queries, blob: string, holder: string): Promise<void>
  /**
   * After that write, whether it committed or not. Not committed and `remove`: the file goes
   * unless a record refers to it or it is held (without `remove`: its write failed, nothing to remove).
   */
  letGo(blob: string, holder: string, opts: { committed: boolean; remove: boolean }): Promise<void>
  /** Remove the file unless a record refers to it or it is held; whether it was removed. */
  removeIfUnused(blob: string): Promise<boolean>
  /** Holds past their time (their holder died between the file and its record), dropped: the files they held. */
  lapsed(now: number): Promise<string[]>
}

/** How long a hold lasts at most: a file's write and its record's, with room to spare. */
export const HOLD_MS = 3_600_000

/** The files held by this process (one process uses the database). */
export class LocalHolds implements FileHolds {
  private readonly held = new Tally()

  constructor(
    private readonly records: MediaRecordStore,
    private readonly remove: (blob: string) => Promise<void>,
  ) {}

  async hold(blob: string) {
    this.held.add(blob)
  }

  async keptIn() {}

  async letGo(blob: string, _holder: string, opts: { committed: boolean; remove: boolean }) {
    this.held.remove(blob)
    if (!opts.committed && opts.remove) await this.removeIfUnused(blob)
  }

  async removeIfUnused(blob: string) {
    if (this.held.has(blob) || (await this.records.references(blob)) > 0) return false
    await this.remove(blob)
    return true
  }

  async lapsed() {
    return []
  }
}

const Q = {
  // one turn per file: a hold and a removal of the same file take turns
  lock: turnOf(TURNS.mediaFile),
  hold: stmt('INSERT INTO media_holds (blob, holder, until) VALUES (?, ?, ?)'),
  drop: stmt('DELETE FROM media_holds WHERE blob = ? AND holder = ?'),
  held: stmt('SELECT 1 AS held FROM media_holds WHERE blob = ? AND until > ? LIMIT 1'),
  lapsed: stmt('DELETE FROM media_holds WHERE until <= ? RETURNING blob'),
}

/** The files held by any of the instances sharing the database (see the header). */
export class SharedHolds implements FileHolds {
  constructor(
    private readonly engine: Engine,
    private readonly records: MediaRecordStore,
    private readonly remove: (blob: string) => Promise<void>,
    private readonly now: () => number,
  ) {}

  hold(blob: string, holder: string) {
    return this.engine.writeApart(async (tx) => {
      await tx.run(Q.lock, blob)
      await tx.run(Q.hold, blob, holder, this.now() + HOLD_MS)
    })
  }

  async keptIn(tx: Queries, blob: string, holder: string) {
    await tx.run(Q.drop, blob, holder)
  }

  async letGo(blob: string, holder: string, opts: { committed: boolean; remove: boolean }) {
    // committed: the hold went with the record
    if (opts.committed) return
    await this.engine.writeApart(async (tx) => {
      await tx.run(Q.lock, blob)
      await tx.run(Q.drop, blob, holder)
      if (opts.remove) await this.removeUnder(tx, blob)
    })
  }

  removeIfUnused(blob: string) {
    // the file is removed inside the transaction that holds its lock (its own: no other write waits on it)
    return this.engine.writeApart(async (tx) => {
      await tx.run(Q.lock, blob)
      return this.removeUnder(tx, blob)
    })
  }

  private async removeUnder(tx: Queries, blob: string) {
    if ((await tx.get(Q.held, blob, this.now())) || (await this.records.references(blob, tx)) > 0) return false
    await this.remove(blob)
    return true
  }

  async lapsed(now: number) {
    const rows = await this.engine.writeApart((tx) => tx.all<{ blob: string }>(Q.lapsed, now))
    return [...new Set(rows.map((r) => r.blob))]
  }
}
