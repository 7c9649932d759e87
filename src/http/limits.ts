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
     RETURNING subject, n, started_at`,
    `INSERT INTO rate_windows (subject, started_at, n)
     SELECT h.s, $2, h.c FROM jsonb_to_recordset(CAST($1 AS text)::jsonb) AS h(s text, c int) ORDER BY h.s
     ON CONFLICT (subject) DO UPDATE SET
       n = CASE WHEN rate_windows.started_at <= excluded.started_at - $3 THEN excluded.n ELSE rate_windows.n + excluded.n END,
       started_at = CASE WHEN rate_windows.started_at <= excluded.started_at - $3 THEN excluded.started_at ELSE rate_windows.started_at END
     RETURNING subject, n, started_at`,
  ),
  // places taken ahead and not used, handed back to their window (only to the window they were taken in)
  giveBack: stmt('UPDATE rate_windows SET n = n - ? WHERE subject = ? AND started_at = ?'),
  get: stmt('SELECT n FROM rate_windows WHERE subject = ? AND started_at > ?'),
  sweep: stmt('DELETE FROM rate_windows WHERE started_at <= ?'),
}

type Waiting = { resolve: (n: number) => void; reject: (e: unknown) => void }

/**
 * A name's places taken ahead in its window (see SharedWindows' `ahead`): places `next`..`last`
 * are this instance's to hand out, without the database, while the window that started at `start`
 * lasts; `then`, places asked for before those ran out, follow them.
 */
interface Ahead {
  start: number
  next: number
  last: number
  /** How many places the range `next`..`last` had when it came (half used: the next are asked for). */
  span: number
  then: { first: number; last: number } | null
  /** How many places to ask for at the next count (grows while they run out quickly). */
  size: number
  /** When this name was last counted in the database, and when a place was last handed out. */
  countedAt: number
  usedAt: number
  /** A count asking for places ahead is under way (one at a time), and the hits waiting for its places. */
  asking: boolean
  waiting: Waiting[]
  /** The window's count as the last statement left it. */
  n: number
}

/** Places ahead ran out within this long: ask for twice as many next time (else half). */
const AHEAD_QUICK_MS = 1000
/** Places ahead not used for this long go back to their window. */
const AHEAD_IDLE_MS = 1000
/** At most this many places ahead at once, and at most this share of what the window has left. */
const AHEAD_MAX = 1024
const AHEAD_SHARE = 64

/**
 * Windows counted in the database (`rate_windows`), for instances that share it: 60 requests a
 * minute means 60 in total, whichever instance each reached. `kind` keeps the per-key and the
 * failed-auth windows apart. The hits of one turn of the event loop are counted by one
 * statement (under load, dozens of requests share it); each learns its own place in its window.
 * Windows that ended are deleted once per window.
 *
 * `ahead` (the per-key limit): a name hit often counts a few places ahead with its hits and hands
 * them out to its next hits without asking the database — twice as many as last time when those
 * ran out within a second, else half; at most 1,024, at most 1/64 of what the window has left, and
 * none once the window is half full. The next places are asked for when half of those held are
 * used (a hit that finds none left while they are on their way waits for them), so under steady
 * traffic no request waits for a statement. Places are counted before they are handed out, so the total
 * never passes the limit (a place past it is never handed out); places not used for a second, or
 * held at a stop, go back to their window. What this changes: in the first half of a window,
 * another instance may be refused up to the places an idle instance holds (at most 1/64 of the
 * window each, for at most a second; until the window ends if that instance was killed), and each
 * instance's X-RateLimit-Remaining counts the places it holds as taken. From half full on, the count
 * is exact; the default limit (60: 60/64 < 1) never takes places ahead.
 */
export class SharedWindows implements Windows {
  private lastSweep = 0
  private gathered = new Map<string, Waiting[]>()
  private readonly held = new Map<string, Ahead>()
  private readonly timer: ReturnType<typeof setInterval> | null

  constructor(
    private readonly engine: Engine,
    private readonly kind: string,
    readonly limit: number,
    readonly windowMs: number,
    private readonly now: () => number = Date.now,
    private readonly ahead = false,
  ) {
    this.timer = ahead ? setInterval(() => void this.giveBackIdle().catch(() => {}), AHEAD_IDLE_MS) : null
    this.timer?.unref?.()
  }

  hit(name: string): number | Promise<number> {
    const subject = `${this.kind}:${name}`
    const a = this.held.get(subject)
    if (a !== undefined) {
      const t = this.now()
      if (t - a.start < this.windowMs) {
        if (a.next > a.last && a.then !== null) this.follow(a)
        if (a.next <= a.last) {
          a.usedAt = t
          const place = a.next++
          // half of them used: the next are asked for now, so that hits keep not waiting
          if (!a.asking && a.then === null && (a.last - a.next + 1) * 2 <= a.span && a.n < this.limit / 2) this.gather(subject, null)
          return this.limit - place
        }
        // none left, and more on their way: wait for them (in arrival order) rather than count apart
        if (a.asking) return new Promise<number>((resolve, reject) => a.waiting.push({ resolve, reject }))
      }
    }
    return new Promise<number>((resolve, reject) => this.gather(subject, { resolve, reject }))
  }

  /** `waiting` counted at the end of this turn (null: only places ahead asked for). */
  private gather(subject: string, waiting: Waiting | null) {
    if (this.gathered.size === 0) setImmediate(this.count)
    const list = this.gathered.get(subject)
    if (list === undefined) this.gathered.set(subject, waiting ? [waiting] : [])
    else if (waiting) list.push(waiting)
  }

  /** The places asked for ahead become the ones handed out. */
  private follow(a: Ahead) {
    a.next = a.then!.first
    a.last = a.then!.last
    a.span = a.last - a.next + 1
    a.then = null
  }

  /** How many places ahead to ask for with `hits` hits of `subject` at `t`. */
  private askAhead(subject: string, hits: number, t: number): number {
    const a = this.held.get(subject)
    // one ask at a time, and none while the places of the last one wait their turn
    if (a === undefined || a.asking || a.then !== null) return 0
    a.size = t - a.countedAt < AHEAD_QUICK_MS ? Math.min(AHEAD_MAX, Math.max(1, a.size * 2)) : a.size >> 1
    a.countedAt = t
    // what the window had at the last count (nothing if it has ended since)
    const n = t - a.start < this.windowMs ? a.n : 0
    if (n + hits >= this.limit / 2) return 0
    const e = Math.min(a.size, Math.floor((this.limit - n - hits) / AHEAD_SHARE))
    if (e > 0) a.asking = true
    return e
  }

  private readonly count = async () => {
    const batch = this.gathered
    this.gathered = new Map()
    const asked = new Map<string, number>()
    try {
      const t = this.now()
      if (t - this.lastSweep > this.windowMs) {
        this.lastSweep = t
        await this.engine.write((tx) => tx.run(SHARED.sweep, t - this.windowMs))
      }
      const hits: { s: string; c: number }[] = []
      for (const [s, w] of [...batch].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) {
        const e = this.ahead ? this.askAhead(s, w.length, t) : 0
        if (e > 0) asked.set(s, e)
        // (places ahead asked for alone, and none to be had: nothing to count)
        if (w.length + e > 0) hits.push({ s, c: w.length + e })
      }
      if (hits.length === 0) return
      const rows = await this.engine.all<{ subject: string; n: number; started_at: number }>(SHARED.hits, JSON.stringify(hits), t, this.windowMs)
      const counted = new Map(rows.map((r) => [r.subject, r]))
      for (const [subject, waiting] of batch) {
        const row = counted.get(subject)
        const e = asked.get(subject) ?? 0
        // the window's count after this statement: its last places are the ones taken ahead,
        // before them this batch's hits, in arrival order
        const after = row ? Number(row.n) : waiting.length + e
        const first = after - e - waiting.length + 1
        waiting.forEach((w, i) => w.resolve(this.limit - (first + i)))
        if (this.ahead && row) this.took(subject, t, Number(row.started_at), after, e)
      }
      for (const s of asked.keys()) this.answered(s)
    } catch (e) {
      for (const s of asked.keys()) this.answered(s, e)
      for (const waiting of batch.values()) for (const w of waiting) w.reject(e)
    }
  }

  /** After a count of `subject`: note its window, and the places taken ahead (those within the limit). */
  private took(subject: string, t: number, start: number, after: number, ahead: number) {
    let a = this.held.get(subject)
    if (a === undefined) {
      a = { start, next: 1, last: 0, span: 0, then: null, size: 0, countedAt: t, usedAt: t, asking: false, waiting: [], n: after }
      this.held.set(subject, a)
    }
    if (a.start !== start) {
      // a new window: places held in the one that ended are void
      a.start = start
      a.next = 1
      a.last = 0
      a.then = null
    }
    a.n = after
    if (ahead > 0) {
      const first = after - ahead + 1
      const last = Math.min(after, this.limit)
      if (first <= last) {
        // those held still in use: these follow them
        a.then = { first, last }
        if (a.next > a.last) this.follow(a)
      }
      a.usedAt = t
    }
  }

  /** A count that asked for places ahead of `subject` came back (or failed): the hits waiting for them are served, in order. */
  private answered(subject: string, failure?: unknown) {
    const a = this.held.get(subject)
    if (a === undefined || !a.asking) return
    a.asking = false
    const waiting = a.waiting
    a.waiting = []
    for (const w of waiting) {
      if (failure !== undefined) w.reject(failure)
      else {
        if (a.next > a.last && a.then !== null) this.follow(a)
        if (a.next <= a.last) w.resolve(this.limit - a.next++)
        else this.gather(subject, w)
      }
    }
  }

  /** Hand places ahead back to their windows: those not used for a second (`all`: every one, at a stop). */
  async giveBackIdle(all = false) {
    const t = this.now()
    const back: [number, string, number][] = []
    for (const [subject, a] of this.held) {
      const over = t - a.start >= this.windowMs
      if (!over && (a.next <= a.last || a.then !== null) && (all || t - a.usedAt >= AHEAD_IDLE_MS)) {
        const k = Math.max(0, a.last - a.next + 1) + (a.then ? a.then.last - a.then.first + 1 : 0)
        back.push([k, subject, a.start])
        a.next = a.last + 1
        a.then = null
      }
      // a name idle past its window is forgotten (its size starts again from none)
      if (over && !a.asking && t - a.countedAt >= this.windowMs) this.held.delete(subject)
    }
    if (back.length === 0) return
    await this.engine.write(async (tx) => {
      for (const [k, subject, start] of back) await tx.run(SHARED.giveBack, k, subject, start)
    })
  }

  /** Stop handing places ahead out, and give back those not used. */
  async close() {
    if (this.timer) clearInterval(this.timer)
    if (this.ahead) await this.giveBackIdle(true)
  }

  async exceeded(name: string): Promise<boolean> {
    const row = await this.engine.get<{ n: number }>(SHARED.get, `${this.kind}:${name}`, this.now() - this.windowMs)
    return !!row && row.n >= this.limit
  }

  active() {
    return true
  }
}
