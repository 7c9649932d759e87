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
  // a window opens at a name's first hit and lasts windowMs, as in memory; the count and its start
  // are read and changed in one statement, so instances hitting at once count each hit once
  hit: stmt(
    `INSERT INTO rate_windows (subject, started_at, n) VALUES (?, ?, 1)
     ON CONFLICT (subject) DO UPDATE SET
       n = CASE WHEN rate_windows.started_at <= excluded.started_at - ? THEN 1 ELSE rate_windows.n + 1 END,
       started_at = CASE WHEN rate_windows.started_at <= excluded.started_at - ? THEN excluded.started_at ELSE rate_windows.started_at END
     RETURNING n`,
  ),
  get: stmt('SELECT n FROM rate_windows WHERE subject = ? AND started_at > ?'),
  sweep: stmt('DELETE FROM rate_windows WHERE started_at <= ?'),
}

/**
 * Windows counted in the database (`rate_windows`), for instances that share it: 60 requests a
 * minute means 60 in total, whichever instance each reached. `kind` keeps the per-key and the
 * failed-auth windows apart. Windows that ended are deleted once per window.
 */
export class SharedWindows implements Windows {
  private lastSweep = 0

  constructor(
    private readonly engine: Engine,
    private readonly kind: string,
    readonly limit: number,
    readonly windowMs: number,
    private readonly now: () => number = Date.now,
  ) {}

  async hit(name: string): Promise<number> {
    const t = this.now()
    if (t - this.lastSweep > this.windowMs) {
      this.lastSweep = t
      await this.engine.write((tx) => tx.run(SHARED.sweep, t - this.windowMs))
    }
    const row = await this.engine.get<{ n: number }>(SHARED.hit, `${this.kind}:${name}`, t, this.windowMs, this.windowMs)
    return this.limit - (row?.n ?? 1)
  }

  async exceeded(name: string): Promise<boolean> {
    const row = await this.engine.get<{ n: number }>(SHARED.get, `${this.kind}:${name}`, this.now() - this.windowMs)
    return !!row && row.n >= this.limit
  }

  active() {
    return true
  }
}
