/**
 * Which instance releases each number's queue (docs/design/two-engines.md): a lease per number in
 * `number_leases`, held by one instance, renewed every RENEW_MS and taken over by another once it
 * has run out (LEASE_MS after its holder's last renewal). A dead instance's numbers move on within
 * LEASE_MS + RENEW_MS = 13 s of its death: its leases run out at most LEASE_MS after it (its last
 * renewal came before), and every other instance tries to take them at each of its renewals. A
 * lease outlasts three renewals: one late or lost write does not hand a live instance's numbers
 * on. A release checks the lease inside the write that marks the message sending, so an
 * instance that lost its lease while it stood still (a long pause) releases nothing. Leases run
 * on the wall clock (they are about instances being alive, not about pacing). On an engine no
 * other process shares (SQLite) this one process holds every lease: nothing is written or checked.
 */
import { type Engine, type Queries, stmt } from '../db/engine'

export const LEASE_MS = 10_000
export const RENEW_MS = 3_000

const Q = {
  // a free number, one whose lease ran out, or one this instance holds already (renewed)
  take: stmt(
    `INSERT INTO number_leases (connection_id, owner, expires_at) VALUES (?, ?, ?)
     ON CONFLICT (connection_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
     WHERE number_leases.owner = excluded.owner OR number_leases.expires_at <= ?`,
  ),
  held: stmt('SELECT 1 AS yes FROM number_leases WHERE connection_id = ? AND owner = ? AND expires_at > ?'),
  // PostgreSQL: every number of a claim in one statement (a renewal of a thousand numbers is one
  // round trip, not a thousand), the ids as a JSON array in one order on every instance (so two
  // claims that overlap lock their rows in the same order)
  takeAll: stmt(
    '',
    `INSERT INTO number_leases (connection_id, owner, expires_at)
     SELECT id, $2::text, $3::bigint FROM jsonb_array_elements_text(CAST($1 AS text)::jsonb) AS ids(id)
     ON CONFLICT (connection_id) DO UPDATE SET owner = excluded.owner, expires_at = excluded.expires_at
     WHERE number_leases.owner = excluded.owner OR number_leases.expires_at <= $4::bigint
     RETURNING connection_id`,
  ),
  heldElsewhere: stmt('SELECT 1 AS yes FROM number_leases WHERE connection_id = ? AND owner <> ? AND expires_at > ?'),
  release: stmt('DELETE FROM number_leases WHERE owner = ?'),
  // this instance is alive (see `owner`); the rows of instances gone an hour are cleared by a job
  seen: stmt('INSERT INTO instances (name, seen_at) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET seen_at = excluded.seen_at'),
  forgetGone: stmt('DELETE FROM instances WHERE seen_at < ?'),
  gone: stmt('DELETE FROM instances WHERE name = ?'),
}

/** How long an instance's row outlives its last renewal before it is cleared (its name is never used again). */
const GONE_MS = 3_600_000

export class NumberLeases {
  /** The numbers this instance holds, as far as it knows (checked again at each release). */
  private readonly mine = new Set<string>()
  /**
   * This instance's name in the table (a new one each start), and in `instances`: written at each
   * renewal, so an instance not seen for LEASE_MS is taken for dead by the others — what it held
   * besides its numbers (a request's Idempotency-Key) is taken over then.
   */
  readonly owner = crypto.randomUUID()

  constructor(
    private readonly engine: Engine,
    private readonly now: () => number = Date.now,
  ) {}

  /** Whether a release must check its lease in its write (other instances may hold numbers). */
  get checked() {
    return this.engine.shared
  }

  /** Whether this instance believes it holds the number's lease. */
  holds(connectionId: string): boolean {
    return !this.engine.shared || this.mine.has(connectionId)
  }

  /**
   * Take or renew the leases of these numbers, in one write; those held by another live instance
   * stay theirs. Returns the numbers newly taken (a start, or a dead instance's numbers).
   */
  async claim(connectionIds: string[]): Promise<string[]> {
    if (this.closed) return []
    if (!this.engine.shared) {
      // one process holds every number: what it takes over is what its own last run left, once,
      // at its start (or again, when that failed); a number added since has nothing left behind
      const fresh = this.startedHere ? [] : connectionIds.filter((id) => !this.mine.has(id))
      for (const id of connectionIds) this.mine.add(id)
      this.startedHere = true
      return fresh
    }
    const now = this.now()
    const ids = [...new Set(connectionIds)].sort()
    // (also with no numbers: the renewal is how the other instances know this one is alive)
    const claiming = this.engine.write(async (tx) => {
      await tx.run(Q.seen, this.owner, now)
      return ids.length ? (await tx.all<{ connection_id: string }>(Q.takeAll, JSON.stringify(ids), this.owner, now + LEASE_MS, now)).map((r) => r.connection_id) : []
    })
    this.claiming.add(claiming)
    const taken = await claiming.finally(() => this.claiming.delete(claiming))
    if (this.closed) return []
    const fresh = taken.filter((id) => !this.mine.has(id))
    const kept = new Set(taken)
    for (const id of connectionIds) if (!kept.has(id)) this.mine.delete(id)
    for (const id of taken) this.mine.add(id)
    return fresh
  }

  /** Treat these as not held here (their taking over did not finish): the next claim takes them afresh. */
  forget(connectionIds: string[]) {
    for (const id of connectionIds) this.mine.delete(id)
    if (!this.engine.shared && connectionIds.length) this.startedHere = false
  }

  /** Unshared: the start's claim is made (see `claim`). */
  private startedHere = false

  /** Inside a release's write: whether the lease is still this instance's (if not, it is forgotten). */
  async heldIn(tx: Queries, connectionId: string): Promise<boolean> {
    if (!this.engine.shared || (await tx.get(Q.held, connectionId, this.owner, this.now())) !== null) return true
    this.mine.delete(connectionId)
    return false
  }

  /** Inside a write: whether another instance holds the number's lease now (not one that ran out, nor none). */
  async heldElsewhereIn(tx: Queries, connectionId: string): Promise<boolean> {
    return this.engine.shared && (await tx.get(Q.heldElsewhere, connectionId, this.owner, this.now())) !== null
  }

  /**
   * Whether this instance runs a run of the housekeeping job `name` (expiry, retention, pruning):
   * the first instance to ask takes it for `ms` (shorter than the job's period), the others skip
   * that run — once per schedule, not once per instance. Always on an unshared engine.
   */
  async runsJob(name: string, ms: number): Promise<boolean> {
    if (!this.engine.shared) return true
    const now = this.now()
    // a job's lease is its own row in the same table, told apart by its prefix; another owner's
    // run is never renewed by this one (a fresh owner name each time)
    return (await this.engine.write((tx) => tx.run(Q.take, `job:${name}`, crypto.randomUUID(), now + ms, now))) > 0
  }

  /** Clear the rows of instances not seen for an hour (a housekeeping job; nothing to clear on an unshared engine). */
  async forgetGone() {
    if (this.engine.shared) await this.engine.write((tx) => tx.run(Q.forgetGone, this.now() - GONE_MS))
  }

  /** Claims on their way to the database (a graceful stop lets them land before it lets go). */
  private readonly claiming = new Set<Promise<string[]>>()
  /** Let go at a graceful stop: nothing more is claimed. */
  private closed = false

  /**
   * At a graceful stop: every lease goes at once (the others need not wait for it to run out) —
   * also one a claim still on its way takes (a number woken just before the stop): it is let go
   * after that claim lands, not left to run out.
   */
  async releaseAll() {
    this.closed = true
    this.mine.clear()
    await Promise.allSettled([...this.claiming])
    if (this.engine.shared)
      await this.engine.write(async (tx) => {
        await tx.run(Q.release, this.owner)
        await tx.run(Q.gone, this.owner)
      })
  }
}
