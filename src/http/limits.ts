/**
 * Fixed-window counters kept in memory: the per-key request limit and the per-IP failed-auth
 * limit. A window opens at the first hit of a name and lasts `windowMs`; counts reset when it
 * ends. Memory stays bounded: expired windows are swept once per window.
 */
import { type Engine, stmt } from '../db/engine'

export class WindowCounter implements Windows {
  private windows = new Map<string, { start: number; count: number }>()
  private lastSweep = 0

  constructor(
    readonly limit: number,
    readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  private current(name: string, t: number) {
    if (t - this.lastSweep > this.windowMs) this.sweep(t)
    let w = this.windows.get(name)
    if (!w || t - w.start >= this.windowMs) {
      w = { start: t, count: 0 }
      this.windows.set(name, w)
    }
    return w
  }

  /** Count one hit; returns how many are left in the window (negative once over). */
  hit(name: string): number {
    const w = this.current(name, this.now())
    w.count++
    return this.limit - w.count
  }

  /** Whether any name has a window open (cheap pre-check before computing a name). */
  active(): boolean {
    return this.windows.size > 0
  }

  /** Whether `name` has used up its window, without counting. */
  exceeded(name: string): boolean {
    const w = this.windows.get(name)
    return !!w && this.now() - w.start < this.windowMs && w.count >= this.limit
  }

  private sweep(t: number) {
    this.lastSweep = t
    for (const [k, w] of this.windows) if (t - w.start >= this.windowMs) this.windows.delete(k)
  }
}

/** The request limits' windows: counted in memory (one process), or in the database several instances share. */
export interface Windows {
  readonly limit: number
  /** Count one hit; returns how many are left in the window (negative once over). */
  hit(name: string): number | Promise<number>
  /** Whether `name` has used up its window, without counting. */
  exceeded(name: string): boolean | Promise<boolean>
  /** Whether any name may have a window open (cheap pre-check before computing a name). */
  active(): boolean
}

const SHARED = {
  // a window opens at a name's first hit and lasts windowMs, as in memory; the counts and their
  // starts are read and changed in one statement, so instances hitting at once count each hit
  // once. The hits gathered in one turn go together ($1: [{s: subject, c: hits}], in subject
  // order, so two instances lock the rows they share in the same order).
  hits: stmt(
    `INSERT INTO rate_windows (subject, started_at, n)
     SELECT json_extract(value, '$.s'), ?2, json_extract(value, '$.c') FROM json_each(?1) WHERE true
     ON CONFLICT (subject) DO UPDATE SET
       n = CASE WHEN rate_windows.started_at <= excluded.started_at - ?3 THEN excluded.n ELSE rate_windows.n + excluded.n END,
       started_at = CASE WHEN rate_windows.started_at <= excluded.started_at - ?3 THEN excluded.started_at ELSE rate_windows.started_at END
     RETURNING subject, n`,
    `INSERT INTO rate_windows (subject, started_at, n)
     SELECT h.s, $2, h.c FROM jsonb_to_recordset(CAST($1 AS text)::jsonb) AS h(s text, c int) ORDER BY h.s
     ON CONFLICT (subject) DO UPDATE SET
       n = CASE WHEN rate_windows.started_at <= excluded.started_at - $3 THEN excluded.n ELSE rate_windows.n + excluded.n END,
       started_at = CASE WHEN rate_windows.started_at <= excluded.started_at - $3 THEN excluded.started_at ELSE rate_windows.started_at END
     RETURNING subject, n`,
  ),
  get: stmt('SELECT n FROM rate_windows WHERE subject = ? AND started_at > ?'),
  sweep: stmt('DELETE FROM rate_windows WHERE started_at <= ?'),
}

type Waiting = { resolve: (n: number) => void; reject: (e: unknown) => void }

/**
 * Windows counted in the database (`rate_windows`), for instances that share it: 60 requests a
 * minute means 60 in total, whichever instance each reached. `kind` keeps the per-key and the
 * failed-auth windows apart. The hits of one turn of the event loop are counted by one
 * statement (under load, dozens of requests share it); each learns its own place in its window.
 * Windows that ended are deleted once per window.
 */
export class SharedWindows implements Windows {
  private lastSweep = 0
  private gathered = new Map<string, Waiting[]>()

  constructor(
    private readonly engine: Engine,
    private readonly kind: string,
    readonly limit: number,
    readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  hit(name: string): Promise<number> {
    return new Promise<number>((resolve, reject) => {
      const subject = `${this.kind}:${name}`
      if (this.gathered.size === 0) setImmediate(this.count)
      const waiting = this.gathered.get(subject)
      if (waiting) waiting.push({ resolve, reject })
      else this.gathered.set(subject, [{ resolve, reject }])
    })
  }

  private readonly count = async () => {
    const batch = this.gathered
    this.gathered = new Map()
    try {
      const t = this.now()
      if (t - this.lastSweep > this.windowMs) {
        this.lastSweep = t
        await this.engine.write((tx) => tx.run(SHARED.sweep, t - this.windowMs))
      }
      const hits = [...batch].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([s, w]) => ({ s, c: w.length }))
      const rows = await this.engine.all<{ subject: string; n: number }>(SHARED.hits, JSON.stringify(hits), t, this.windowMs)
      const counted = new Map(rows.map((r) => [r.subject, Number(r.n)]))
      for (const [subject, waiting] of batch) {
        // the window's count after this batch: the batch's hits are its last ones, in arrival order
        const after = counted.get(subject) ?? waiting.length
        waiting.forEach((w, i) => w.resolve(this.limit - (after - waiting.length + i + 1)))
      }
    } catch (e) {
      for (const waiting of batch.values()) for (const w of waiting) w.reject(e)
    }
  }

  async exceeded(name: string): Promise<boolean> {
    const row = await this.engine.get<{ n: number }>(SHARED.get, `${this.kind}:${name}`, this.now() - this.windowMs)
    return !!row && row.n >= this.limit
  }

  active() {
    return true
  }
}
