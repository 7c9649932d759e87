/**
 * Fixed-window counters kept in memory: the per-key request limit and the per-IP failed-auth
 * limit. A window opens at the first hit of a name and lasts `windowMs`; counts reset when it
 * ends. Memory stays bounded: expired windows are swept once per window.
 */
export class WindowCounter {
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
