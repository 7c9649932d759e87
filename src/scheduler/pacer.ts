/**
 * Per-number release of queued messages (CONTRACT §3). A number releases its FIFO head when it
 * is online, at least a random gap in [min_gap, max_gap] has passed since its previous release,
 * and fewer than hourly_cap / daily_cap releases happened in the trailing 3,600 / 86,400 s.
 *
 * The database drives it: the queue is the `queued` rows; in memory there is only each number's
 * last release, its next gap and its release times of the last 24 h (rebuilt from the table at
 * start). One timer is armed for the earliest due release; nothing runs while nothing is due.
 */
import type { Clock } from '../clock'
import { transientWriteError } from '../db/writer'
import type { Deps } from '../deps'
import type { Logger } from '../http/log'
import type { ConnectionService } from '../modules/connections/service'
import type { MessageService } from '../modules/messages/service'
import type { MessageRow } from '../modules/messages/store'
import { CommitInDoubt, type Queries } from '../db/engine'
import type { WorkspaceService } from '../modules/workspaces/service'
import { nextWarmupStep } from './warmup'
import { NumberLeases, RENEW_MS } from './leases'
import { OneAtATime, OneAtATimeEach } from './one-at-a-time'

const HOUR = 3_600_000
const DAY = 86_400_000
/** Most messages one number releases in one tick (only reached with a zero gap). */
const BURST = 200
/**
 * The same on PostgreSQL, where the next tick follows at once: a write of PIPELINED_NUMBERS numbers
 * then changes a workspace's kept count at most 640 times (see `release`; 100 numbers with 200
 * queued each released at 3,296 msg/s with 200, 4,540 with 20).
 */
const PG_BURST = 20
/** How many numbers a PostgreSQL tick releases in one write, their statements in flight together on its connection. */
const PIPELINED_NUMBERS = 32

/**
 * Run `fn` over `items`, at most `n` at a time. On a failure no more are started, and it settles
 * only once every started one has — inside a write, no statement may still be on its way when the
 * write ends and its connection goes back to the pool — then throws the first failure.
 */
export async function eachConcurrently<T>(items: readonly T[], n: number, fn: (item: T) => Promise<void>) {
  let at = 0
  let failed = null as { error: unknown } | null
  await Promise.all(
    Array.from({ length: Math.min(n, items.length) }, async () => {
      while (at < items.length && !failed) {
        try {
          await fn(items[at++]!)
        } catch (error) {
          failed ??= { error }
        }
      }
    }),
  )
  if (failed) throw failed.error
}

export interface Timers {
  set(fn: () => void, ms: number): unknown
  clear(handle: unknown): void
}

export const realTimers: Timers = {
  set: (fn, ms) => setTimeout(fn, ms),
  clear: (h) => clearTimeout(h as Timer),
}

interface NumberState {
  /** which lane goes first at the next release */
  campaignNext: boolean
  /** the network asked this number to slow down: nothing is released before this time */
  slowUntil?: number
  last: number | null
  /** seconds, drawn after each release */
  gap: number
  /** release times within the last 24 h, ascending; `start` skips pruned entries */
  times: number[]
  start: number
  /** whether `times` and `last` hold what the table says (read once, when the number is first looked at) */
  loaded: boolean
}

export interface Policy {
  hourly_cap: number
  daily_cap: number
  min_gap_seconds: number
  max_gap_seconds: number
}

/**
 * When a number with this state may release next (ms); prunes releases older than 24 h. After the
 * system clock was set back (a VM restored, a bad NTP step), releases "in the future" count as
 * made now: the number goes on after its gap — still within its caps by real elapsed time —
 * instead of standing still until the clock has caught up with them.
 */
export function dueAt(st: NumberState, p: Policy, now: number): number {
  if (st.last !== null && st.last > now) {
    st.last = now
    for (let i = st.times.length - 1; i >= st.start && st.times[i]! > now; i--) st.times[i] = now
  }
  while (st.start < st.times.length && st.times[st.start]! <= now - DAY) st.start++
  if (st.start > 1024 && st.start * 2 > st.times.length) {
    st.times = st.times.slice(st.start)
    st.start = 0
  }
  const gap = Math.min(Math.max(st.gap, p.min_gap_seconds), p.max_gap_seconds)
  let due = st.last === null ? -Infinity : st.last + gap * 1000
  if (st.slowUntil !== undefined) due = Math.max(due, st.slowUntil)
  const n = st.times.length - st.start
  if (n >= p.daily_cap) due = Math.max(due, st.times[st.times.length - p.daily_cap]! + DAY)
  // hourly: count releases in the trailing hour
  let inHour = 0
  for (let i = st.times.length - 1; i >= st.start && st.times[i]! > now - HOUR; i--) {
    inHour++
    if (inHour >= p.hourly_cap) {
      due = Math.max(due, st.times[st.times.length - p.hourly_cap]! + HOUR)
      break
    }
  }
  return due
}

/** A number's pacing state as it was before a tick, to put back if the tick's write fails. */
interface Saved {
  st: NumberState
  campaignNext: boolean
  last: number | null
  gap: number
  times: number[]
  length: number
  start: number
}

const save = (st: NumberState): Saved => ({ st, campaignNext: st.campaignNext, last: st.last, gap: st.gap, times: st.times, length: st.times.length, start: st.start })

/**
 * Puts a number's state back. Releases are only ever appended, so cutting the array back to its
 * old length removes them — also when pruning replaced the array meanwhile (then the old one,
 * which still holds everything before the tick, comes back).
 */
function restore(s: Saved) {
  s.times.length = s.length
  Object.assign(s.st, { campaignNext: s.campaignNext, last: s.last, gap: s.gap, times: s.times, start: s.start })
}

export class Pacer {
  private states = new Map<string, NumberState>()
  private pending = new Set<string>()
  private timer: unknown = null
  private timerAt = Infinity
  private running = false
  /** The ticks, one at a time: one asked for while one runs runs right after it. */
  private readonly ticks = new OneAtATime(async () => {
    if (!this.running) return
    // claims whose write may have landed are settled before anything more is claimed
    if (this.inDoubt.length > 0 && !(await this.settleInDoubt())) return this.schedule(1000)
    await this.release()
  })
  /** Messages a tick claimed in a write whose COMMIT's answer was lost (see settleInDoubt). */
  private inDoubt: { live: NonNullable<ReturnType<ConnectionService['find']>>; row: MessageRow }[] = []
  /** numbers woken while a tick runs: they stay pending whatever that tick found */
  private readonly rewoken = new Set<string>()

  constructor(
    private readonly deps: Deps,
    private readonly messages: MessageService,
    private readonly connections: ConnectionService,
    private readonly workspaces: WorkspaceService,
    private readonly log: Logger,
    private readonly clock: Clock = deps.clock,
    private readonly timers: Timers = realTimers,
    private readonly random: () => number = Math.random,
  ) {
    this.leases = new NumberLeases(deps.engine)
  }

  async start(extra: string[] = []) {
    this.running = true
    for (const id of [...(await this.messages.connectionsWithQueue()), ...extra]) this.pending.add(id)
    this.schedule(0)
    // the leases of every number known here: renewed, and a dead instance's taken over
    this.renewal = setInterval(() => void this.claimLeases().catch((e) => this.log.errorAtMostEvery(60_000, 'number leases could not be renewed', { error: String((e as Error)?.message ?? e) })), RENEW_MS)
  }

  stop() {
    this.running = false
    if (this.timer !== null) this.timers.clear(this.timer)
    this.timer = null
    this.timerAt = Infinity
    if (this.renewal) clearInterval(this.renewal)
    this.renewal = null
  }

  /** Which instance releases each number (see leases.ts). */
  readonly leases: NumberLeases
  private renewal: Timer | null = null
  /** Numbers whose lease another instance was found to hold, until when (ms, wall clock): asked again after. */
  private elsewhere = new Map<string, number>()

  /**
   * Take or renew the leases of every number known here; for the numbers newly taken (at start,
   * or a dead instance's) `onTakenOver` runs first (its sends cut off are settled), then they are woken.
   */
  async claimLeases(ids = this.connections.all().map((c) => c.row.id)) {
    const fresh = await this.leases.claim(ids)
    if (fresh.length === 0) return fresh
    for (const id of fresh) {
      this.elsewhere.delete(id)
      // what this instance kept of the number is older than the releases another made meanwhile
      // (it looked at the number, or held it before): read again before its first release here.
      // (An engine no other process shares has no other releases: what is kept stays right.)
      if (this.leases.checked) this.states.delete(id)
    }
    try {
      await this.onTakenOver(fresh)
    } catch (e) {
      this.leases.forget(fresh)
      throw e
    }
    for (const id of fresh) this.wakeHere(id)
    return fresh
  }

  /** Numbers this instance has just taken over (set by services: crash recovery of their sends). */
  onTakenOver: (connectionIds: string[]) => Promise<void> = async () => {}

  /** Tells the instance that holds a number's lease to look at it (set by services: an announcement). */
  tellHolder: (connectionId: string) => Promise<void> = async () => {}
  /**
   * Tells a number's holder to look at it, one announcement at a time per number: woken again
   * while one is on its way, the holder is told once more after it, not once per wake. The holder
   * reads the whole queue when it hears, so the announcement made after the last wake is enough
   * (the one on its way may have been committed before that wake's message). Under load from
   * another instance, this is one announcement per round trip instead of one per send; each is a
   * commit of its own, and PostgreSQL commits announcing transactions one at a time.
   */
  private readonly telling = new OneAtATimeEach<string>((connectionId) =>
    this.tellHolder(connectionId).catch((e) => this.log.errorAtMostEvery(60_000, 'telling the instance that releases a number failed', { error: String((e as Error)?.message ?? e) })),
  )
  /** Numbers this instance is trying to take (their wakes meanwhile need nothing more: see wake). */
  private claiming = new Set<string>()

  /**
   * A number may have something to release (new message, came online, policy changed). Its
   * holder looks at it: this instance, or — told through the database — another; a number nobody
   * holds yet (just added) is taken here.
   */
  wake(connectionId: string) {
    if (this.leases.holds(connectionId)) return this.wakeHere(connectionId)
    const until = this.elsewhere.get(connectionId)
    if (until !== undefined && until > Date.now()) return this.telling.ask(connectionId)
    // a claim on its way covers this wake too: taken, the number is woken here after it; held
    // elsewhere, its holder is told after it (both after this wake's message was written)
    if (this.claiming.has(connectionId)) return
    this.claiming.add(connectionId)
    void this.claimLeases([connectionId])
      .then((fresh) => {
        if (fresh.length) return
        this.elsewhere.set(connectionId, Date.now() + RENEW_MS)
        this.telling.ask(connectionId)
      })
      .catch((e) => this.log.errorAtMostEvery(60_000, 'a number lease could not be taken', { error: String((e as Error)?.message ?? e) }))
      .finally(() => this.claiming.delete(connectionId))
  }

  /** `wake` on this instance only (the holder was told; or the number is this instance's). */
  wakeHere(connectionId: string) {
    if (!this.leases.holds(connectionId)) return
    this.pending.add(connectionId)
    if (this.ticks.running) this.rewoken.add(connectionId)
    this.schedule(0)
  }

  /** Resolves once no tick is running (tests that drive the timers wait for each tick's write). */
  async settled() {
    while (this.ticks.running) await new Promise((r) => setImmediate(r))
  }

  /** The network throttled this number: release nothing more from it for `ms`. */
  slowDown(connectionId: string, ms = 60_000) {
    const st = this.state(connectionId)
    st.slowUntil = Math.max(st.slowUntil ?? 0, this.clock.now() + ms)
    this.schedule(ms)
  }

  /** Wake every number of a workspace (its policy or status changed). */
  wakeWorkspace(workspaceId: string) {
    for (const c of this.connections.listForWorkspace(workspaceId)) this.wakeHere(c.row.id)
  }

  /** When a number may release next under its policy (ms), from what the scheduler knows. */
  async nextReleaseAt(connectionId: string, policy: Policy): Promise<number> {
    // a number another instance releases: its releases read afresh, not kept (they change there)
    const st = this.leases.holds(connectionId) ? await this.loaded(connectionId) : await this.fromTable(connectionId)
    return Math.max(dueAt(st, policy, this.clock.now()), this.clock.now())
  }

  /** A number's state as the table says: its releases of the last 24 h (the gap drawn after the last one is not kept: the policy's least). */
  private async fromTable(connectionId: string): Promise<NumberState> {
    const times = await this.messages.releasesSince(connectionId, this.clock.now() - DAY)
    return { campaignNext: false, last: times.length ? times[times.length - 1]! : null, gap: 0, times, start: 0, loaded: true }
  }

  private state(connectionId: string): NumberState {
    let st = this.states.get(connectionId)
    if (!st) {
      st = { campaignNext: false, last: null, gap: 0, times: [], start: 0, loaded: false }
      this.states.set(connectionId, st)
    }
    return st
  }

  /** The number's state with its releases of the last 24 h read from the table (once). */
  private async loaded(connectionId: string): Promise<NumberState> {
    const st = this.state(connectionId)
    if (!st.loaded) {
      const times = await this.messages.releasesSince(connectionId, this.clock.now() - DAY)
      if (!st.loaded) {
        // (releases made here meanwhile are in the table too)
        st.times = times
        st.start = 0
        st.last = times.length ? Math.max(times[times.length - 1]!, st.last ?? -Infinity) : st.last
        st.loaded = true
      }
    }
    return st
  }

  private schedule(delay: number) {
    if (!this.running) return
    const at = this.clock.now() + Math.max(0, delay)
    if (this.timer !== null && this.timerAt <= at) return
    if (this.timer !== null) this.timers.clear(this.timer)
    this.timerAt = at
    this.timer = this.timers.set(() => {
      this.timer = null
      this.timerAt = Infinity
      this.tick()
    }, Math.max(0, delay))
  }

  /**
   * Claims made by a write whose COMMIT's answer was lost (`CommitInDoubt`): where it landed, the
   * message is `sending` with nothing sending it — the network never had it — so it is sent now
   * and counted against its number's caps; where it did not, the message is still queued and is
   * released as any other. Read, with the numbers' leases, before the tick claims anything (a
   * number another instance took over meanwhile is its own to settle, by its crash recovery; one
   * whose lease ran out here with nobody taking it — the database stood still past it — keeps its
   * claims for the tick after this instance takes it again, kept in hand from that taking's crash
   * recovery). False while the database cannot be read: the next tick, a second later, tries again first.
   */
  private async settleInDoubt(): Promise<boolean> {
    const claimed = this.inDoubt
    let landed: typeof claimed
    let kept: typeof claimed
    try {
      ;[landed, kept] = await this.deps.engine.write(async (tx) => {
        const out: typeof claimed = []
        const keep: typeof claimed = []
        for (const c of claimed) {
          const id = c.row.connection_id
          if (this.leases.checked && !(await this.leases.heldIn(tx, id))) {
            if (this.connections.find(id) && !(await this.leases.heldElsewhereIn(tx, id))) keep.push(c)
            continue
          }
          if (await this.messages.claimLandedIn(tx, c.row)) out.push(c)
        }
        return [out, keep]
      })
    } catch (e) {
      this.log.errorAtMostEvery(60_000, 'pacer tick failed', { error: String((e as Error)?.message ?? e) })
      return false
    }
    this.inDoubt = kept
    // (those sent now are in hand again as their dispatch starts)
    const keptIds = new Set(kept.map((k) => k.row.id))
    for (const { row } of claimed) if (!keptIds.has(row.id)) this.messages.letGo(row.id)
    for (const { live, row } of landed) {
      this.counted(row.connection_id, row.updated_at)
      void this.messages.dispatch(live, row)
    }
    if (landed.length > 0) this.log.warn("a tick's write whose answer was lost had claimed messages: they are sent now", { messages: landed.length })
    return true
  }

  /**
   * At a graceful stop (after `stop`): claims whose COMMIT's answer was lost and that no tick has
   * settled yet are handed back where they landed — marked to go on at the next start, or on the
   * instance that takes the number — instead of being left `sending` for crash recovery, which
   * cannot tell them from a send the network may have and fails them. How many had landed.
   */
  async handBackInDoubt(): Promise<number> {
    const claimed = this.inDoubt
    if (claimed.length === 0) return 0
    const landed = await this.deps.engine.write(async (tx) => {
      let n = 0
      for (const { row } of claimed) {
        // (a lease that ran out here with nobody taking it is still this instance's to hand back)
        if (this.leases.checked && !(await this.leases.heldIn(tx, row.connection_id)) && (await this.leases.heldElsewhereIn(tx, row.connection_id))) continue
        if (await this.messages.handBackClaimIn(tx, row)) n++
      }
      return n
    })
    this.inDoubt = []
    for (const { row } of claimed) this.messages.letGo(row.id)
    return landed
  }

  /** A release made at `at` that the number's state in memory does not hold yet. */
  private counted(connectionId: string, at: number) {
    const st = this.states.get(connectionId)
    // (a state not read yet reads it from the table)
    if (!st?.loaded) return
    let i = st.times.length
    while (i > st.start && st.times[i - 1]! > at) i--
    st.times.splice(i, 0, at)
    st.last = Math.max(st.last ?? at, at)
  }

  private drawGap(p: Policy) {
    return p.min_gap_seconds + this.random() * (p.max_gap_seconds - p.min_gap_seconds)
  }

  /**
   * The next message of a number, marked sending (inside the tick's write). Two lanes share the
   * number fairly: one-to-one and group messages (FIFO), and campaign recipients. When both have
   * something waiting they alternate, so an order update waits behind at most one campaign message.
   */
  private async take(tx: Queries, connectionId: string, st: NumberState, now: number): Promise<MessageRow | null> {
    const lanes = st.campaignNext ? [this.campaignLane, this.directLane] : [this.directLane, this.campaignLane]
    for (const lane of lanes) {
      // a head another instance's write failed since it was read is not claimed: the next one is
      for (let tries = 0; tries < 3; tries++) {
        const row = await lane(tx, connectionId, now)
        if (!row) break
        const [claimed] = await this.messages.markSendingIn(tx, [row], now)
        if (claimed) {
          st.campaignNext = lane === this.directLane
          return claimed
        }
      }
    }
    return null
  }

  private directLane = (tx: Queries, connectionId: string, now: number): Promise<MessageRow | null> => this.messages.releasableHeadIn(tx, connectionId, now)

  /** Set by the campaigns module: the next campaign message of a number, queued inside the write. */
  campaignLane: (tx: Queries, connectionId: string, now: number) => Promise<MessageRow | null> = async () => null

  /** Release everything that is due now, then arm the timer for the next due release; one tick at a time. */
  tick() {
    if (this.running) this.ticks.ask()
  }

  private async release() {
    this.rewoken.clear()
    // the numbers to look at — those whose lease is this instance's — with their releases of the
    // last day read first (outside the write)
    for (const id of this.pending) if (!this.leases.holds(id)) this.pending.delete(id)
    const ids = [...this.pending]
    for (const id of ids) if (!this.state(id).loaded) await this.loaded(id)
    // a number that is not due yet (its gap, a cap) is only given its time: no write for it
    const now = this.clock.now()
    let next = Infinity
    const due: string[] = []
    const idle: string[] = []
    for (const id of ids) {
      const look = this.look(id, now)
      if (look === null) idle.push(id)
      else if (look.due <= now) due.push(id)
      else next = Math.min(next, look.next)
    }
    for (const id of idle) if (!this.rewoken.has(id)) this.pending.delete(id)
    // SQLite: one write for the whole tick (its group commit). PostgreSQL: a write per
    // PIPELINED_NUMBERS numbers — each claim changes its workspace's kept count, and PostgreSQL
    // slows down with every change of the same row inside one transaction (20,000 claims took
    // 4.1 s in one, 0.56 s in writes of 640) — each write's messages going to their drivers as
    // soon as it commits
    const chunk = this.deps.engine.kind === 'postgres' ? PIPELINED_NUMBERS : Math.max(due.length, 1)
    for (let at = 0; at < due.length; at += chunk) {
      // a write that fails holds back its own numbers only; they are tried again in a second
      next = Math.min(next, (await this.releaseSome(due.slice(at, at + chunk))) ?? this.clock.now() + 1000)
    }
    if (next < Infinity) this.schedule(next - this.clock.now())
  }

  /**
   * A number as the tick finds it: null when it releases nothing whatever its queue holds (offline
   * — woken again when it comes online — or its workspace inactive — reactivating it wakes its
   * numbers); else its policy (with lower caps while it warms up), its state, when it may release
   * next (`due`) and when to look at it again if it is not due now (`next`).
   */
  private look(id: string, now: number) {
    const live = this.connections.find(id)
    if (!live || live.row.status !== 'online') return null
    const ws = this.workspaces.cached(live.row.workspace_id)
    if (!ws || ws.status !== 'active') return null
    const policy = this.connections.policyFor(live.row, this.workspaces.settings(ws).sending_policy, now)
    const st = this.state(id)
    // not read from the table (taken over while this tick ran): nothing is released from it, and
    // the next tick, right away, reads it first
    if (!st.loaded) return { live, policy, st, due: Infinity, next: now }
    const due = dueAt(st, policy, now)
    return { live, policy, st, due, next: this.lookAgain(live, due, now) }
  }

  /**
   * When to look at a number again: when its next release is due (an emptied queue leaves
   * `pending`), or when a warming-up number's cap rises, if that comes first.
   */
  private lookAgain(live: NonNullable<ReturnType<ConnectionService['find']>>, due: number, now: number) {
    return Math.max(Math.min(due, nextWarmupStep(this.connections.warmupOf(live.row), now)), now)
  }

  /**
   * Release what is due now from these numbers in one write, then hand it to the drivers. Returns
   * when the earliest of them may release again (Infinity: none waits), or null when the write failed.
   */
  private async releaseSome(ids: string[]): Promise<number | null> {
    // (each write reads the clock: a tick of many writes on PostgreSQL takes a while)
    const now = this.clock.now()
    const most = this.deps.engine.kind === 'postgres' ? PG_BURST : BURST
    // each number's state before this write's releases, put back if they do not commit
    const before: Saved[] = []
    let released: { live: NonNullable<ReturnType<ConnectionService['find']>>; row: MessageRow }[] = []
    /** numbers with nothing more to release now: they leave `pending` once the write is made */
    let idle: string[] = []
    let next = Infinity
    try {
      await this.deps.engine.write(async (tx) => {
        // the write may run again (SQLite runs a batch again when another write in it failed
        // half-way): each run starts from the state the tick started from
        for (const saved of before) restore(saved)
        before.length = 0
        released = []
        idle = []
        next = Infinity
        const releaseNumber = async (id: string) => {
          const look = this.look(id, now)
          // the lease went to another instance (this one stood still past it): that one releases
          if (look === null || (this.leases.checked && !(await this.leases.heldIn(tx, id)))) {
            idle.push(id)
            return
          }
          const { live, policy, st } = look
          if (!st.loaded) {
            next = Math.min(next, look.next)
            return
          }
          let due = look.due
          if (due <= now) before.push(save(st))
          let burst = 0
          let empty = false
          while (due <= now && burst < most) {
            const row = await this.take(tx, id, st, now)
            if (!row) {
              empty = true
              idle.push(id)
              break
            }
            released.push({ live, row })
            st.last = now
            st.gap = this.drawGap(policy)
            st.times.push(now)
            // only the last max(caps) releases can ever decide a due time
            if (st.times.length - st.start > Math.max(policy.hourly_cap, policy.daily_cap)) st.start++
            burst++
            due = dueAt(st, policy, now)
          }
          if (!empty) next = Math.min(next, this.lookAgain(live, due, now))
        }
        // on PostgreSQL the numbers' statements go down the write's connection together
        // (pipelined: no round trip waited for per statement); SQLite's are synchronous anyway
        if (this.deps.engine.kind === 'postgres') await eachConcurrently(ids, PIPELINED_NUMBERS, releaseNumber)
        else for (const id of ids) await releaseNumber(id)
      })
    } catch (e) {
      // nothing was released (e.g. the disk is full): releases counted in memory must not count
      // against the caps, or after the fault a number would wait out an hour or a day for nothing
      for (const saved of before) restore(saved)
      // or nobody can tell: the COMMIT went and its answer was lost — settled at the next tick
      if (e instanceof CommitInDoubt) {
        this.inDoubt.push(...released)
        for (const { row } of released) this.messages.keepInHand(row.id)
      }
      // a lasting fault is told once a minute, a storage one without a stack
      this.log.errorAtMostEvery(60_000, 'pacer tick failed', { error: String((transientWriteError(e) ? (e as Error).message : (e as Error)?.stack) ?? e) })
      return null
    }
    // a number woken while the write was made keeps its place (something new may be queued)
    for (const id of idle) if (!this.rewoken.has(id)) this.pending.delete(id)
    for (const r of released) void this.messages.dispatch(r.live, r.row)
    return next
  }
}
