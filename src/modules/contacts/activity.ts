/**
 * Contacts' last activity, written behind: a message to or from a contact records its time here
 * once the message's write has committed, and one statement writes the times of every contact
 * touched meanwhile a moment later (FLUSH_MS). A send then makes no write of its contact: on
 * PostgreSQL that update was a statement of its own in every send's transaction, and cost POST
 * /messages a tenth of its throughput (BENCHMARKS.md, twenty-eighth session). The contact's view
 * shows the newer of the written time and the one waiting here, so the instance that took a
 * message shows it at once; others read it once written. A graceful stop writes what waits; a
 * crash loses the times not yet written — the last FLUSH_MS of them, longer only while the
 * database cannot take them (never a message) — as the API keys' last use is kept (modules/keys).
 */

/** How long a touch waits to be written with the others (ms). */
export const FLUSH_MS = 200
/** Touches that are written at once, without waiting for FLUSH_MS (bounds the statement and the memory). */
const FLUSH_AT = 5_000
/** After a write that failed (the database away), when to try again (ms). */
const RETRY_MS = 1_000

export class PendingActivity {
  /** Contact id → its newest activity not yet handed to a write (ms). */
  private pending = new Map<string, number>()
  /** The times the write under way carries (still shown until it is done). */
  private writing: Map<string, number> | null = null
  private timer: Timer | null = null
  private last: Promise<void> = Promise.resolve()
  /** The server stops: only `flush` writes now (see stop). */
  private stopped = false

  constructor(
    /**
     * Writes the contacts' times ([id, at]; a time older than the one written changes nothing);
     * false when not now (another instance is writing its own): they wait for the next write.
     */
    private readonly write: (touches: [string, number][]) => Promise<boolean>,
    /** A write failed; it is tried again RETRY_MS later with what came meanwhile. */
    private readonly onError: (e: unknown) => void,
  ) {}

  /** A message to or from the contact at `at` (ms), its write committed. */
  add(contactId: string, at: number) {
    const before = this.pending.get(contactId)
    if (before === undefined || before < at) this.pending.set(contactId, at)
    if (this.pending.size >= FLUSH_AT) this.soon(0)
    else this.soon(FLUSH_MS)
  }

  /** The contact's newest activity not yet written (ms), or 0. */
  of(contactId: string): number {
    return Math.max(this.pending.get(contactId) ?? 0, this.writing?.get(contactId) ?? 0)
  }

  /** Write what waits now (after a write under way); rejects when the write fails (what it carried waits again). */
  flush(): Promise<void> {
    const next = this.last.then(() => this.writeWaiting())
    this.last = next.catch(() => {})
    return next
  }

  /** No more writes of their own (the server stops and writes what waits with `flush`). */
  stop() {
    this.stopped = true
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
  }

  private soon(ms: number) {
    if (this.stopped || (this.timer && ms > 0)) return
    if (this.timer) clearTimeout(this.timer)
    this.timer = setTimeout(() => {
      this.timer = null
      this.flush().catch((e) => {
        this.onError(e)
        this.soon(RETRY_MS)
      })
    }, ms)
  }

  private async writeWaiting() {
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    if (this.pending.size === 0) return
    const batch = this.pending
    this.pending = new Map()
    this.writing = batch
    // kept for the next write, with any newer time that came meanwhile
    const keep = () => {
      for (const [id, at] of batch) if ((this.pending.get(id) ?? 0) < at) this.pending.set(id, at)
    }
    try {
      if (!(await this.write([...batch]))) {
        keep()
        this.soon(FLUSH_MS)
      }
    } catch (e) {
      keep()
      throw e
    } finally {
      this.writing = null
    }
  }
}
