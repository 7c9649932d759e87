/**
 * Group commit: every write of the API goes through `write(fn)`.
 *
 * Writes that arrive while a batch gathers (see `gather`) run one after another inside one
 * `BEGIN IMMEDIATE` transaction, a write that throws being rolled back alone (see `run`), and one
 * COMMIT (one fsync) makes them all durable. Only then are their promises resolved, so a response
 * is never sent for a write that could still be lost. `fn` must be synchronous and must not do
 * slow I/O: it runs while the batch's transaction is open. It may run twice (when another write
 * of its batch fails half-way, the batch is run again), so whatever it does outside the database
 * must be safe to repeat.
 */
import type { Database } from 'bun:sqlite'

/** How long the first write of a batch may wait for others (ms), and the most writes in one. */
const MAX_WAIT_MS = 2
const MAX_BATCH = 1000

interface Result {
  ok: boolean
  value: unknown
}

interface Pending {
  fn: () => unknown
  resolve: (value: any) => void
  reject: (error: unknown) => void
}

export class Writer {
  private queue: Pending[] = []
  private scheduled = false
  private firstAt = 0
  private seen = 0
  private readonly sql

  constructor(private readonly db: Database) {
    // prepared once: a batch runs these for every write it holds
    this.sql = {
      begin: db.prepare('BEGIN IMMEDIATE'),
      commit: db.prepare('COMMIT'),
      savepoint: db.prepare('SAVEPOINT w'),
      release: db.prepare('RELEASE w'),
      rollbackTo: db.prepare('ROLLBACK TO w'),
      rollback: db.prepare('ROLLBACK'),
      totalChanges: db.prepare('SELECT total_changes()'),
    }
  }

  /** Run `fn` in the next batch; resolves with its result once the batch is committed. */
  write<T>(fn: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.queue.push({ fn, resolve, reject })
      if (!this.scheduled) {
        this.scheduled = true
        this.firstAt = performance.now()
        this.seen = 0
        setImmediate(this.gather)
      }
    })
  }

  /**
   * Runs after each turn of the event loop while writes wait: as long as the last turn brought
   * more of them (requests still arriving), give the others one more turn, up to MAX_WAIT_MS
   * after the first or MAX_BATCH writes; then commit them all with one fsync. A lone write
   * waits one extra turn (microseconds); under load a batch grows to the number of concurrent
   * writers instead of splitting them into several smaller commits.
   */
  private readonly gather = () => {
    const n = this.queue.length
    if (n > this.seen && n < MAX_BATCH && performance.now() - this.firstAt < MAX_WAIT_MS) {
      this.seen = n
      setImmediate(this.gather)
      return
    }
    this.flush()
  }

  /** Run `fn` in its own transaction right now (admin paths, jobs). */
  now<T>(fn: () => T): T {
    return this.db.transaction(fn).immediate()
  }

  private flush(): void {
    const batch = this.queue
    this.queue = []
    this.scheduled = false
    if (batch.length === 0) return
    let results: Result[] | null
    try {
      // a write that throws after it has written something cannot be undone on its own in the
      // fast pass: the whole batch is rolled back and run again, each write in a savepoint
      results = this.run(batch, false) ?? this.run(batch, true)
    } catch (error) {
      try {
        this.sql.rollback.run()
      } catch {
        // nothing open to roll back
      }
      for (const item of batch) item.reject(error)
      return
    }
    batch.forEach((item, i) => {
      const r = results![i]!
      if (r.ok) item.resolve(r.value)
      else item.reject(r.value)
    })
  }

  /**
   * One transaction over the batch. Fast pass (`careful` false): no savepoints — a savepoint
   * makes SQLite copy every page a write touches into its sub-journal, ~15% of a send's database
   * time. A write that throws before writing anything (a refusal: most errors are) needs no
   * undo; one that throws after writing makes the fast pass give up (null) after a ROLLBACK.
   * Careful pass: each write in its own savepoint, rolled back alone when it throws.
   */
  private run(batch: Pending[], careful: boolean): Result[] | null {
    const sql = this.sql
    const results: Result[] = []
    sql.begin.run()
    for (const item of batch) {
      if (careful) sql.savepoint.run()
      const before = careful ? 0 : this.changes()
      try {
        const value = item.fn()
        if (careful) sql.release.run()
        results.push({ ok: true, value })
      } catch (error) {
        if (careful) {
          sql.rollbackTo.run()
          sql.release.run()
        } else if (this.changes() !== before) {
          sql.rollback.run()
          return null
        }
        results.push({ ok: false, value: error })
      }
    }
    sql.commit.run()
    return results
  }

  /** Rows written so far on this connection (triggers included; a failed statement's are not). */
  private changes(): number {
    return this.sql.totalChanges.values()[0]![0] as number
  }
}

/**
 * A write SQLite could not make for the storage's sake — the disk full, an I/O error, the file
 * busy, locked or read-only — which can succeed later; not one refused for what it wrote.
 */
export const transientWriteError = (e: unknown) => /^SQLITE_(FULL|IOERR|BUSY|LOCKED|READONLY)/.test(String((e as { code?: unknown } | null)?.code ?? ''))

/**
 * Runs `write` until it succeeds: for an outcome that already happened elsewhere (a network took
 * a message, a receiver took an event), which must be written down, not lost or mistaken for a
 * failure, while writes fail for a while (a full disk). Tries again after 1 s, doubling to 30 s,
 * telling `onError` each time; throws at once for any other error, and once `stopping()` says the
 * server stops.
 */
export async function persist(write: () => unknown, stopping: () => boolean, onError: (e: unknown) => void): Promise<void> {
  for (let wait = 1000; ; wait = Math.min(wait * 2, 30_000)) {
    try {
      await write()
      return
    } catch (e) {
      if (stopping() || !transientWriteError(e)) throw e
      onError(e)
      await Bun.sleep(wait)
    }
  }
}

/**
 * Let the event loop serve what waits (requests, timers, other writes) before a long job's next
 * slice: the jobs that walk many rows write one short slice at a time and call this between.
 */
export const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve))
