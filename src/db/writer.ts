/**
 * Group commit: every write of the API goes through `write(fn)`.
 *
 * Writes that arrive while a batch gathers (see `gather`) run one after another inside one
 * `BEGIN IMMEDIATE` transaction, a write that throws being rolled back alone (see `run`), and one
 * COMMIT (one fsync) makes them all durable. Only then are their promises resolved, so a response
 * is never sent for a write that could still be lost. `fn` must not do slow I/O: it runs while
 * the batch's transaction is open. It may run twice (when another write of its batch fails
 * half-way, the batch is run again), so whatever it does outside the database must be safe to
 * repeat.
 *
 * `fn` may be async — the form the store seam's `write(async (tx) => …)` takes, so one module's
 * code serves SQLite and PostgreSQL — as long as everything it awaits is the database itself,
 * which on SQLite settles at once (microtasks, within the same turn of the event loop): the batch
 * stays one transaction and nothing else runs inside it. A callback that waits for anything else
 * (a timer, the network) would hold the transaction open across turns; it is refused with
 * `AwaitedOutsideWrite` and its batch is run again without it. A batch of synchronous writes
 * runs exactly as before (no promise is made for it).
 */
import type { Database } from 'bun:sqlite'
import { databaseAway } from './engine'

/** How long the first write of a batch may wait for others (ms), and the most writes in one. */
const MAX_WAIT_MS = 2
const MAX_BATCH = 1000

interface Result {
  ok: boolean
  value: unknown
}

/** An async write callback waited for something that is not the database (see the header). */
export class AwaitedOutsideWrite extends Error {
  constructor() {
    super('a write callback awaited something outside the database; its transaction would have stayed open across turns of the event loop')
  }
}

const isThenable = (v: unknown): v is PromiseLike<unknown> => v !== null && typeof v === 'object' && typeof (v as { then?: unknown }).then === 'function'

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
  /** A batch with async writes is running (its transaction is open): the next one waits. */
  private busy = false
  /** Bumped by a timer each turn a batch stays open: an await that saw it move left the turn. */
  private turn = 0
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
  write<T>(fn: () => T | Promise<T>): Promise<T> {
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
    if (this.busy) {
      setImmediate(this.gather)
      return
    }
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
    const settle = (results: Result[]) =>
      batch.forEach((item, i) => {
        const r = results[i]!
        if (r.ok) item.resolve(r.value)
        else item.reject(r.value)
      })
    const fail = (error: unknown) => {
      try {
        this.sql.rollback.run()
      } catch {
        // nothing open to roll back
      }
      for (const item of batch) item.reject(error)
    }
    let results: Result[] | null | Promise<Result[] | null>
    try {
      // a write that throws after it has written something cannot be undone on its own in the
      // fast pass: the whole batch is rolled back and run again, each write in a savepoint
      results = this.run(batch, false)
      if (results === null) results = this.run(batch, true)
    } catch (error) {
      fail(error)
      return
    }
    if (!(results instanceof Promise)) return settle(results!)
    // a batch with async writes: the next waits until this one has committed
    this.busy = true
    // the turn counter moves with each pass of the event loop (its check phase and its timers)
    // while the batch is open: best effort — it catches a timer and most I/O
    const tick = () => {
      this.turn++
      if (this.busy) setImmediate(tick)
    }
    setImmediate(tick)
    const ticker = setInterval(() => this.turn++, 1)
    results
      .then((r) => r ?? this.run(batch, true))
      .then((r) => settle(r!), fail)
      .finally(() => {
        clearInterval(ticker)
        this.busy = false
      })
  }

  /**
   * One transaction over the batch. Fast pass (`careful` false): no savepoints — a savepoint
   * makes SQLite copy every page a write touches into its sub-journal, ~15% of a send's database
   * time. A write that throws before writing anything (a refusal: most errors are) needs no
   * undo; one that throws after writing makes the fast pass give up (null) after a ROLLBACK.
   * Careful pass: each write in its own savepoint, rolled back alone when it throws.
   */
  private run(batch: Pending[], careful: boolean): Result[] | null | Promise<Result[] | null> {
    const sql = this.sql
    const results: Result[] = []
    sql.begin.run()
    for (let i = 0; i < batch.length; i++) {
      if (careful) sql.savepoint.run()
      const before = careful ? 0 : this.changes()
      let value: unknown
      try {
        value = batch[i]!.fn()
      } catch (error) {
        if (this.undo(careful, before)) return null
        results.push({ ok: false, value: error })
        continue
      }
      // the first async write: the rest of the batch goes on in `runAsync`
      if (isThenable(value)) return this.runAsync(batch, careful, i, results, value, before)
      if (careful) sql.release.run()
      results.push({ ok: true, value })
    }
    sql.commit.run()
    return results
  }

  /** `run` from the write at `from`, whose callback gave `pending`: each async write awaited in turn. */
  private async runAsync(batch: Pending[], careful: boolean, from: number, results: Result[], pending: PromiseLike<unknown>, before: number): Promise<Result[] | null> {
    const sql = this.sql
    for (let i = from; i < batch.length; i++) {
      if (i > from) {
        if (careful) sql.savepoint.run()
        before = careful ? 0 : this.changes()
      }
      const turn = this.turn
      try {
        const value = i === from ? pending : batch[i]!.fn()
        const settled = isThenable(value) ? await value : value
        if (this.turn !== turn) throw new AwaitedOutsideWrite()
        if (careful) sql.release.run()
        results.push({ ok: true, value: settled })
      } catch (error) {
        const e = this.turn !== turn && !(error instanceof AwaitedOutsideWrite) ? new AwaitedOutsideWrite() : error
        // what it wrote cannot be trusted: roll back and run the batch again, it refused alone
        if (e instanceof AwaitedOutsideWrite && !careful) {
          sql.rollback.run()
          return null
        }
        if (this.undo(careful, before)) return null
        results.push({ ok: false, value: e })
      }
    }
    sql.commit.run()
    return results
  }

  /**
   * After a write threw: in the careful pass roll back its savepoint (false: go on); in the fast
   * pass, when it had written something, roll the batch back (true: run it again carefully).
   */
  private undo(careful: boolean, before: number): boolean {
    const sql = this.sql
    if (careful) {
      sql.rollbackTo.run()
      sql.release.run()
      return false
    }
    if (this.changes() !== before) {
      sql.rollback.run()
      return true
    }
    return false
  }

  /** Rows written so far on this connection (triggers included; a failed statement's are not). */
  private changes(): number {
    return this.sql.totalChanges.values()[0]![0] as number
  }
}

/**
 * A write SQLite could not make for the storage's sake — the disk full, an I/O error, the file
 * busy, locked or read-only — or PostgreSQL could not be reached for (databaseAway): one that can
 * succeed later; not one refused for what it wrote.
 */
export const transientWriteError = (e: unknown) => /^SQLITE_(FULL|IOERR|BUSY|LOCKED|READONLY)/.test(String((e as { code?: unknown } | null)?.code ?? '')) || databaseAway(e)

/**
 * Runs `write` until it succeeds: for an outcome that already happened elsewhere (a network took
 * a message, a receiver took an event), which must be written down, not lost or mistaken for a
 * failure, while writes fail for a while (a full disk) — or for a read a job cannot go on without
 * while the database is away. Returns what `write` returned. Tries again after 1 s, doubling to 30 s,
 * telling `onError` each time (`pause` waits between tries: one a stop cuts short); throws at once
 * for any other error, and once `stopping()` says the server stops.
 */
export async function persist<T>(write: () => T | Promise<T>, stopping: () => boolean, onError: (e: unknown) => void, pause: (ms: number) => Promise<unknown> = Bun.sleep): Promise<T> {
  for (let wait = 1000; ; wait = Math.min(wait * 2, 30_000)) {
    try {
      return await write()
    } catch (e) {
      if (stopping() || !transientWriteError(e)) throw e
      onError(e)
      await pause(wait)
    }
  }
}

/**
 * Let the event loop serve what waits (requests, timers, other writes) before a long job's next
 * slice: the jobs that walk many rows write one short slice at a time and call this between.
 */
export const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve))
