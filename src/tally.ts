/**
 * Counts per key kept in memory, a key dropping out when its count reaches zero: work under way
 * per webhook endpoint, files prepared but not yet committed, upload bytes being scanned.
 */
export class Tally {
  private readonly counts = new Map<string, number>()

  get(key: string): number {
    return this.counts.get(key) ?? 0
  }

  has(key: string): boolean {
    return this.counts.has(key)
  }

  add(key: string, n = 1) {
    this.counts.set(key, this.get(key) + n)
  }

  /** Take `n` back; at zero (or below) the key is gone. */
  remove(key: string, n = 1) {
    const left = this.get(key) - n
    if (left > 0) this.counts.set(key, left)
    else this.counts.delete(key)
  }
}
