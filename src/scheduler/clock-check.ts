/**
 * Instances sharing a database compare times that different machines wrote: a number's lease, the
 * limits' windows, a webhook delivery's claim. Their clocks must be in step (NTP). Each instance
 * compares its clock with the database server's — the one clock every instance reaches — at its
 * start and every ten minutes, says so in the log when the two are more than CLOCK_TOLERANCE_MS
 * apart, and keeps the last offset for /metrics. On an engine no other process shares (SQLite)
 * there is nothing to compare.
 */
import { type Engine, stmt } from '../db/engine'

/** How far this machine's clock may be from the database's before the log says so. */
export const CLOCK_TOLERANCE_MS = 2_000
/** Readings taken per check; the one with the shortest round trip is kept (the narrowest bounds). */
const READINGS = 3

const DATABASE_NOW = stmt('SELECT 0 AS t', 'SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint AS t')

export class ClockCheck {
  /** This machine's clock minus the database's at the last check (ms); null before one, or on SQLite. */
  offsetMs: number | null = null

  constructor(
    private readonly engine: Engine,
    private readonly log: { warn(msg: string, fields?: Record<string, unknown>): void },
    /** The clock the leases and windows run on. */
    private readonly now: () => number = Date.now,
  ) {}

  /** Compare the clocks once; a warning when they are too far apart. */
  async run(): Promise<void> {
    if (!this.engine.shared) return
    let best: { offset: number; spread: number } | null = null
    for (let i = 0; i < READINGS; i++) {
      const before = this.now()
      const row = await this.engine.get<{ t: number }>(DATABASE_NOW)
      const after = this.now()
      // the database read its clock somewhere between before and after
      const reading = { offset: (before + after) / 2 - Number(row!.t), spread: (after - before) / 2 }
      if (best === null || reading.spread < best.spread) best = reading
    }
    this.offsetMs = Math.round(best!.offset)
    // (only what is surely past the tolerance: a slow round trip alone is no offset)
    if (Math.abs(best!.offset) - best!.spread <= CLOCK_TOLERANCE_MS) return
    const seconds = Math.abs(best!.offset) / 1000
    this.log.warn(
      `this machine's clock is ${seconds.toFixed(1)} s ${best!.offset > 0 ? 'ahead of' : 'behind'} the database server's: instances sharing a database need their clocks in step (run NTP) — one far ahead takes numbers over from live instances and opens limit windows early`,
      { offset_seconds: Math.round(best!.offset / 100) / 10 },
    )
  }
}
