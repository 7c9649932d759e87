/**
 * Webhooks (Standard Webhooks): operator-registered endpoints, events written to a durable
 * outbox in the same transaction as the change they report, and a dispatcher that signs and
 * delivers them with the contract's retry schedule. Nothing is lost across restarts: a delivery
 * is pending in SQLite until an endpoint answered 2xx or its retries ran out.
 */
import { randomBytes } from 'node:crypto'
import { nextTurn, persist } from '../../db/writer'
import type { Deps } from '../../deps'
import { OneAtATime } from '../../scheduler/one-at-a-time'
import { Tally } from '../../tally'
import { conflict, notFound, validationFailed } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import type { Logger } from '../../http/log'
import type { SecretBox } from '../../secrets'
import type { AuditRepo, Operator } from '../audit/repo'
import type { EventData } from './docs'
import type { AdminEndpoint } from './model'
import { type DeliveryRow, type EndpointRow, HELD_REASON, WebhookStore } from './store'
import type { Queries } from '../../db/engine'

/** How many of an endpoint's newest deliveries its health is read from. */
export const HEALTH_WINDOW = 50

export const EVENT_TYPES = ['message.sent', 'message.delivered', 'message.read', 'message.failed', 'message.received', 'campaign.completed', 'contact.consent_changed', 'connection.status_changed'] as const
export type EventType = (typeof EVENT_TYPES)[number]

/** Seconds after which attempt n+1 follows a failed attempt n (CONTRACT §5). */
export const RETRY_SCHEDULE_S = [5, 300, 1800, 7200, 18000, 36000, 36000]
export const DELIVERY_TIMEOUT_MS = 15_000
/**
 * Several instances on one database: how often an instance looks for due deliveries with nothing
 * of its own to wake it — one another instance wrote and never claimed (it died first) waits at
 * most this long.
 */
export const SHARED_LOOK_MS = 1000
export const DISABLE_AFTER_MS = 3 * 86_400_000
/** Why deliveries failed when their endpoint was disabled: each starts with HELD_REASON, so enabling it again sends them. */
const DISABLED_FAILING = `${HELD_REASON} after failing for 3 days`
const DISABLED_BY_OPERATOR = `${HELD_REASON} by the operator`

/** Finished deliveries (delivered or failed) are kept this long for the history, then deleted. */
export const DELIVERY_RETENTION_MS = 30 * 86_400_000

/** How long, by default, the secret a rotation replaced keeps signing beside the new one. */
export const KEEP_PREVIOUS_HOURS = 24
export const MAX_KEEP_PREVIOUS_HOURS = 168

/**
 * The Standard Webhooks signature header value for one delivery attempt: `v1,<mac>` per secret,
 * space-separated (a receiver accepts the event when one of them verifies with its secret).
 */
export function signature(secrets: string[], id: string, timestamp: number, body: string): string {
  return secrets
    .map((secret) => {
      const key = Buffer.from(secret.slice('whsec_'.length), 'base64')
      return `v1,${new Bun.CryptoHasher('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`
    })
    .join(' ')
}

const newSecret = () => `whsec_${randomBytes(32).toString('base64')}`

/**
 * Headers an endpoint may not set: what Capstan sends itself (the signature headers, the body's
 * type and length) and what belongs to the connection.
 */
const RESERVED_HEADERS = new Set(['content-type', 'content-length', 'content-encoding', 'transfer-encoding', 'connection', 'keep-alive', 'host', 'user-agent', 'te', 'trailer', 'upgrade', 'expect'])
/** Header names: RFC 9110 token characters. Values: visible ASCII, spaces and tabs (no line breaks). */
const HEADER_NAME = /^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$/
const HEADER_VALUE = /^[\t\x20-\x7e]{0,1000}$/

/** An endpoint's extra headers, checked: 422 naming the field for a reserved, malformed or repeated name or a bad value. */
function checkHeaders(headers: Record<string, unknown>): Record<string, string> {
  const out: Record<string, string> = {}
  const seen = new Set<string>()
  const errors: string[] = []
  for (const [name, value] of Object.entries(headers)) {
    const lower = name.toLowerCase()
    if (!HEADER_NAME.test(name)) errors.push('Header names must be 1 to 64 letters, digits or the characters !#$%&\'*+.^_`|~-.')
    else if (RESERVED_HEADERS.has(lower) || lower.startsWith('webhook-')) errors.push('Capstan sets the content, connection, user-agent and webhook-* headers itself; they cannot be given.')
    else if (seen.has(lower)) errors.push('Each header may be given once.')
    else if (typeof value !== 'string' || !HEADER_VALUE.test(value)) errors.push('Header values must be text of at most 1000 visible ASCII characters, without line breaks.')
    else {
      seen.add(lower)
      out[name] = value
    }
  }
  if (errors.length) throw validationFailed({ headers: [...new Set(errors)] })
  return out
}

/** The events column: the subscribed types, or null for every event (none given). */
const eventsColumn = (events: string[] | undefined) => (events && events.length ? JSON.stringify([...new Set(events)]) : null)

export class WebhookService {
  /** Deliveries deleted per write when pruning. */
  pruneSlice = 1000
  private readonly store: WebhookStore
  private timer: Timer | null = null
  /** Deliveries sent whose outcome is not recorded yet, by id (a graceful stop waits for them). */
  private readonly underWay = new Set<string>()
  get inFlight() {
    return this.underWay.size
  }
  private running = false
  /**
   * At most this many deliveries under way at once, and at most `perEndpoint` of them to one
   * endpoint: a receiver that hangs (each attempt waits out the 15 s timeout) or a backlog after
   * an outage holds up only its own endpoint's deliveries, not every other workspace's.
   */
  private readonly maxInFlight = 32
  private readonly perEndpoint = 8
  /** Deliveries under way, per endpoint. */
  private readonly busy = new Tally()
  /** Which endpoint a pass looks at first: each takes its turn at the front. */
  private turn = 0
  private kickQueued = false
  /** Deliveries made pending again per write by `recover`. */
  recoverSlice = 5000

  constructor(
    private readonly deps: Deps,
    private readonly box: SecretBox,
    private readonly log: Logger,
    private readonly audit: AuditRepo,
  ) {
    this.store = new WebhookStore(deps.engine)
  }

  toAdmin(row: EndpointRow, withSecret = false): AdminEndpoint {
    return {
      id: row.id,
      workspace_id: row.workspace_id,
      url: row.url,
      events: row.events ? (JSON.parse(row.events) as EventType[]) : [...EVENT_TYPES],
      status: row.status,
      failing_since: iso(row.failing_since),
      created_at: iso(row.created_at),
      previous_secret_expires_at: iso(this.previousSecretLive(row) ? row.previous_secret_expires_at : null),
      // the names only: values may be credentials, shown with the secret
      headers: Object.keys(this.headersOf(row)),
      ...(withSecret ? { secret: this.box.open(row.secret_enc), header_values: this.headersOf(row) } : {}),
    }
  }

  /** An endpoint's extra request headers (none: {}). */
  private headersOf(row: EndpointRow): Record<string, string> {
    return row.headers_enc === null ? {} : (JSON.parse(this.box.open(row.headers_enc)) as Record<string, string>)
  }

  /** The stored form of extra headers, checked (see checkHeaders): sealed, or null for none. */
  private headersColumn(headers: Record<string, unknown> | null | undefined): string | null {
    return headers && Object.keys(headers).length ? this.box.seal(JSON.stringify(checkHeaders(headers))) : null
  }

  /** Whether the secret a rotation replaced still signs. */
  private previousSecretLive(row: EndpointRow): boolean {
    return row.previous_secret_enc !== null && row.previous_secret_expires_at !== null && row.previous_secret_expires_at > this.deps.clock.now()
  }

  /** The secrets a delivery is signed with now: the current one, then the replaced one while it lasts. */
  private signingSecrets(row: EndpointRow): string[] {
    const current = this.box.open(row.secret_enc)
    return this.previousSecretLive(row) ? [current, this.box.open(row.previous_secret_enc!)] : [current]
  }
  /** The newest event's seq (0 when none): where an erasure's slices of the outbox end. */
  lastEventSeq(): Promise<number> {
    return this.store.lastSeq()
  }

  /** Inside a write: drop the workspace's events with seq in [from, to] that mention `text` (an erased contact's id); returns how many. */
  dropEventsMentioningIn(tx: Queries, from: number, to: number, workspaceId: string, text: string): Promise<number> {
    return this.store.dropMentioning(tx, from, to, workspaceId, text)
  }

  /** For /metrics: pending deliveries, in all and per endpoint. */
  pendingGauges() {
    return this.store.pendingGauges()
  }

  /** The workspace's endpoints. */
  endpoints(workspaceId: string) {
    return this.store.endpoints(workspaceId)
  }

  /** A page of an endpoint's deliveries, newest first; of one status only when given. */
  deliveries(endpointId: string, limit: number, offset: number, status?: DeliveryRow['status']) {
    return this.store.deliveries(endpointId, limit, offset, status)
  }

  /** One delivery of the endpoint (404 when it has none by that id). */
  async delivery(endpointId: string, id: string): Promise<DeliveryRow> {
    const row = id.length <= 64 ? await this.store.delivery(endpointId, id) : null
    if (!row) throw notFound('delivery')
    return row
  }

  /**
   * How an endpoint has been doing, from its newest HEALTH_WINDOW deliveries that were attempted:
   * the share delivered of those finished, how many of the newest failed (or are being retried
   * after failing) in a row, and the last error. `state`: `disabled`; `unknown` before any
   * attempt; `failing` at three failures in a row or more (or failing for a while already, see
   * failing_since); `degraded` with one or two in a row, or under 95% delivered; else `healthy`.
   */
  async health(endpoint: EndpointRow) {
    const rows = (await this.store.recent(endpoint.id, HEALTH_WINDOW)).filter((r) => r.status !== 'pending' || r.attempts > 0)
    const finished = rows.filter((r) => r.status !== 'pending')
    const delivered = finished.filter((r) => r.status === 'delivered').length
    let consecutive = 0
    for (const r of rows) {
      if (r.status === 'delivered') break
      consecutive++
    }
    const lastError = rows.find((r) => r.last_error !== null || (r.last_status_code !== null && r.last_status_code >= 300))
    const lastSuccess = rows.find((r) => r.status === 'delivered')
    const rate = finished.length ? delivered / finished.length : null
    const state =
      endpoint.status === 'disabled' ? 'disabled' : rows.length === 0 ? 'unknown' : consecutive >= 3 || endpoint.failing_since !== null ? 'failing' : consecutive > 0 || (rate !== null && rate < 0.95) ? 'degraded' : 'healthy'
    return {
      state,
      recent: rows.length,
      success_rate: rate === null ? null : Math.round(rate * 1000) / 1000,
      consecutive_failures: consecutive,
      last_error: lastError ? (lastError.last_error ?? `HTTP ${lastError.last_status_code}`) : null,
      last_error_at: lastError ? iso(lastError.updated_at) : null,
      last_success_at: lastSuccess ? iso(lastSuccess.delivered_at ?? lastSuccess.updated_at) : null,
      failing_since: iso(endpoint.failing_since),
    }
  }

  /**
   * Send one delivery again, from its first attempt, with the same webhook-id (a receiver that
   * keeps the ids it handled sees it as the same event): 409 while the endpoint is disabled or the
   * delivery is still pending. Audited as `webhook.resent`.
   */
  async resend(endpointId: string, id: string, by: Operator | null = null): Promise<DeliveryRow> {
    const endpoint = await this.get(endpointId)
    if (endpoint.status !== 'active') throw conflict('endpoint_disabled', 'The endpoint is disabled; enable it first.')
    await this.delivery(endpointId, id)
    const now = this.deps.clock.now()
    const done = await this.deps.engine.write(async (tx) => {
      if (!(await this.store.resend(tx, endpointId, id, now))) return false
      await this.audit.addIn(tx, endpoint.workspace_id, 'webhook.resent', null, now, endpointId, by)
      return true
    })
    if (!done) throw conflict('delivery_pending', 'The delivery is still being attempted; it goes out without being asked.')
    this.kick()
    return (await this.store.delivery(endpointId, id))!
  }

  /** Queue a `webhook.test` event for one endpoint and wake the sender; returns its webhook-id. */
  async sendTest(endpoint: EndpointRow): Promise<string> {
    const now = this.deps.clock.now()
    const payload = JSON.stringify({ type: 'webhook.test', timestamp: new Date(now).toISOString(), data: { endpoint_id: endpoint.id, message: 'A test event from Capstan.' } })
    const id = `msg_${uuid().replaceAll('-', '')}`
    await this.deps.engine.write((tx) => this.store.enqueue(tx, id, endpoint.id, endpoint.workspace_id, 'webhook.test', payload, now))
    this.kick()
    return id
  }

  /** One delivery in full: as in the history, with the event it carries (the signed body). */
  deliveryDetail(row: DeliveryRow) {
    return { ...this.deliveryToAdmin(row), updated_at: iso(row.updated_at), payload: JSON.parse(row.payload) as unknown }
  }

  deliveryToAdmin(row: DeliveryRow) {
    return {
      id: row.id,
      type: row.type,
      status: row.status,
      attempts: row.attempts,
      next_attempt_at: iso(row.next_attempt_at),
      last_status_code: row.last_status_code,
      last_error: row.last_error,
      created_at: iso(row.created_at),
      delivered_at: iso(row.delivered_at),
    }
  }

  async create(workspaceId: string, url: string, events: string[] | undefined, headers?: Record<string, unknown> | null, by: Operator | null = null) {
    const secret = newSecret()
    const now = this.deps.clock.now()
    const row: EndpointRow = {
      id: uuid(),
      workspace_id: workspaceId,
      url,
      events: eventsColumn(events),
      secret_enc: this.box.seal(secret),
      previous_secret_enc: null,
      previous_secret_expires_at: null,
      headers_enc: this.headersColumn(headers),
      status: 'active',
      failing_since: null,
      created_at: now,
      updated_at: now,
      deleted_at: null,
    }
    await this.deps.engine.write(async (tx) => {
      await this.store.createEndpoint(tx, row)
      await this.audit.addIn(tx, workspaceId, 'webhook.created', null, now, row.id, by)
    })
    return { ...this.toAdmin(row), secret }
  }

  /** The endpoint (`q`: the write it is read in, if any); 404 when there is none. */
  async get(id: string, q?: Queries): Promise<EndpointRow> {
    const row = await this.store.endpoint(id, q)
    if (!row) throw notFound('webhook endpoint')
    return row
  }

  async remove(id: string, by: Operator | null = null) {
    const row = await this.get(id)
    await this.deps.engine.write(async (tx) => {
      await this.store.removeEndpoint(tx, id, this.deps.clock.now())
      await this.audit.addIn(tx, row.workspace_id, 'webhook.removed', null, this.deps.clock.now(), id, by)
    })
  }

  /**
   * The operator changes an endpoint: its URL or events (the secret stays), and its status. Disabling
   * holds its pending deliveries (failed with an "endpoint disabled" reason); enabling it again —
   * also one disabled after failing for 3 days — delivers the held ones again (same webhook-id, a
   * fresh retry schedule, to the URL it has then). Events that happened while it was disabled were
   * not written for it. Setting the status it already has changes nothing.
   */
  async patch(id: string, input: { status?: 'active' | 'disabled'; url?: string; events?: string[]; headers?: Record<string, unknown> | null }, by: Operator | null = null) {
    const now = this.deps.clock.now()
    const requeued = await this.deps.engine.write(async (tx) => {
      // each part written only over the endpoint as read: changed meanwhile (another instance),
      // it is read again and the change made over that
      for (;;) {
        const row = await this.get(id, tx)
        if (input.url !== undefined || input.events !== undefined || input.headers !== undefined) {
          const headers = input.headers === undefined ? row.headers_enc : this.headersColumn(input.headers)
          if (!(await this.store.updateTarget(tx, id, input.url ?? row.url, input.events === undefined ? row.events : eventsColumn(input.events), headers, now, row))) continue
        }
        let requeued = 0
        if (input.status !== undefined && input.status !== row.status) {
          const done = input.status === 'disabled' ? ((await this.store.disable(tx, id, now, DISABLED_BY_OPERATOR)) ? 0 : null) : await this.store.enable(tx, id, now)
          if (done === null) continue
          requeued = done
        }
        await this.audit.addIn(tx, row.workspace_id, 'webhook.updated', null, now, id, by)
        return requeued
      }
    })
    if (requeued > 0) this.kick()
    return this.get(id)
  }

  /**
   * A new signing secret for an endpoint (say, the old one leaked or a receiver's staff changed).
   * Every attempt from now on — retries of earlier events too — is signed with the new secret and,
   * for `keepPreviousHours` (0 to drop it at once), also with the one it replaces, so a receiver
   * still configured with that one keeps verifying until it is switched over. Rotating again
   * within that time replaces the older secret: at most two sign at once. Audited
   * (`webhook.secret_rotated`). Returns the endpoint with its new secret.
   */
  async rotateSecret(id: string, keepPreviousHours: number, by: Operator | null = null) {
    const secret = newSecret()
    const now = this.deps.clock.now()
    const row = await this.deps.engine.write(async (tx) => {
      // over the secret read: rotated meanwhile on another instance, the one it made is the one replaced
      for (;;) {
        const current = await this.get(id, tx)
        const previous = keepPreviousHours > 0 ? { enc: current.secret_enc, until: now + keepPreviousHours * 3_600_000 } : null
        if (!(await this.store.rotateSecret(tx, id, this.box.seal(secret), previous, now, current.secret_enc))) continue
        await this.audit.addIn(tx, current.workspace_id, 'webhook.secret_rotated', null, now, id, by)
        return this.get(id, tx)
      }
    })
    this.log.info('webhook signing secret rotated', { endpoint_id: id, previous_signs_hours: keepPreviousHours })
    return { ...this.toAdmin(row), secret }
  }

  /**
   * Sends again what an endpoint did not get: every delivery of an event written since `since`
   * that failed — its retries ran out (a receiver down longer than the schedule, about 28 hours,
   * but not the 3 days that disable it), or it was held by a disabling — with its own webhook-id
   * (receivers that drop duplicates by it stay correct) and a fresh retry schedule. Finished
   * deliveries are kept 30 days, so that is how far back this reaches. 409 for a disabled
   * endpoint (enabling it sends what its disabling held). Written in slices of `recoverSlice`,
   * between which requests are served (a month of a busy endpoint's events is one long write
   * otherwise); the first ones go out while later ones are still being written. Stops early if
   * the endpoint is disabled or removed meanwhile. Returns how many go out again.
   */
  async recover(id: string, since: number, by: Operator | null = null): Promise<number> {
    const endpoint = await this.get(id)
    if (endpoint.status !== 'active') throw conflict('endpoint_disabled', 'The endpoint is disabled; enable it first.')
    await this.deps.engine.write((tx) => this.audit.addIn(tx, endpoint.workspace_id, 'webhook.recovered', null, this.deps.clock.now(), id, by))
    let total = 0
    for (let after = 0; ; ) {
      const { requeued, last } = await this.deps.engine.write(async (tx) => {
        if ((await this.store.endpoint(id, tx))?.status !== 'active') return { requeued: 0, last: null }
        return this.store.requeueFailedSlice(tx, id, since, after, this.recoverSlice, this.deps.clock.now())
      })
      total += requeued
      if (requeued > 0) this.kick()
      if (last === null) break
      after = last
      await nextTurn()
    }
    if (total > 0) this.log.info('webhook deliveries sent again', { endpoint_id: id, deliveries: total })
    return total
  }

  /**
   * Write one event to the outbox of every active endpoint of the workspace that wants it.
   * Must run inside the write that makes the change it reports (`tx`).
   */
  async enqueueIn<K extends EventType>(tx: Queries, workspaceId: string, type: K, data: EventData[K]) {
    const endpoints = await this.store.activeEndpoints(workspaceId, tx)
    if (endpoints.length === 0) return
    const now = this.deps.clock.now()
    const payload = JSON.stringify({ type, timestamp: new Date(now).toISOString(), data })
    let any = false
    for (const e of endpoints) {
      if (e.events && !(JSON.parse(e.events) as string[]).includes(type)) continue
      await this.store.enqueue(tx, `msg_${uuid().replaceAll('-', '')}`, e.id, workspaceId, type, payload, now)
      any = true
    }
    // once the write has committed: a pass before it would not see the delivery (PostgreSQL)
    if (any) this.deps.engine.afterCommit(tx, () => this.kickSoon())
  }

  /**
   * Delete finished deliveries older than DELIVERY_RETENTION_MS, so the outbox does not grow with
   * every event ever sent. Pending ones are never touched.
   */
  async pruneFinished(): Promise<number> {
    const bound = await this.store.firstAfter(this.deps.clock.now() - DELIVERY_RETENTION_MS)
    return this.inSlices((tx, slice) => this.store.prune(tx, bound, slice))
  }

  /**
   * Delete the workspace's finished deliveries of message events created before `cutoff`: their
   * payloads are copies of the messages, content included (message content retention). Pending
   * ones are left to be delivered.
   */
  async pruneMessageEvents(workspaceId: string, cutoff: number): Promise<number> {
    let total = 0
    for (const endpointId of await this.store.everyEndpoint(workspaceId)) {
      // per endpoint: the deliveries older than a short retention are most of the 30 days kept,
      // every workspace's — the endpoint's index walks only its own
      const bound = await this.store.firstAfterFor(endpointId, cutoff)
      total += await this.inSlices((tx, slice) => this.store.pruneMessageEvents(tx, endpointId, bound, slice))
    }
    return total
  }

  /**
   * Run a delete of at most `pruneSlice` rows until it deletes fewer: one short write each, with
   * requests served between. The bound it deletes below is found once, before: finding it walks
   * every delivery older than the cutoff, which per slice made a large backlog quadratic.
   */
  private async inSlices(deleteSlice: (tx: Queries, slice: number) => Promise<number>): Promise<number> {
    const slice = this.pruneSlice
    let total = 0
    for (;;) {
      const n = await this.deps.engine.write((tx) => deleteSlice(tx, slice))
      total += n
      if (n < slice) return total
      await nextTurn()
    }
  }

  /** Start delivering (and pick up whatever was pending before a restart). */
  start() {
    this.running = true
    this.kick()
  }

  stop() {
    this.running = false
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
  }

  /** `kick` once the work at hand is done: a run of events or outcomes makes one pass. */
  private kickSoon() {
    if (this.kickQueued) return
    this.kickQueued = true
    setImmediate(() => {
      this.kickQueued = false
      this.kick()
    })
  }

  /**
   * Deliver what is due now, endpoint by endpoint (each up to its share, see `perEndpoint`), then
   * sleep until the next due attempt of an endpoint that has room. An endpoint at its share, or
   * a full dispatcher, needs no timer: the end of each attempt looks again. One pass at a time:
   * a kick during a pass makes one more pass after it.
   */
  kick() {
    if (this.running) this.passes.ask()
  }

  private readonly passes = new OneAtATime(async () => {
    if (!this.running) return
    await this.pass().catch((e) => {
      // the claims cannot be written (a full disk, the database away): nothing goes out unclaimed; look again soon
      this.log.errorAtMostEvery(60_000, 'webhook deliveries paused: a delivery could not be claimed', { error: String((e as Error)?.message ?? e) })
      if (this.running && !this.timer) this.timer = setTimeout(() => this.kick(), 1000)
    })
  })

  private async pass() {
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    const now = this.deps.clock.now()
    const endpoints = await this.store.activeEndpointIds()
    const picked: DeliveryRow[] = []
    let room = this.maxInFlight - this.inFlight
    let next: number | null = null
    let skipped = false
    for (let k = 0; k < endpoints.length && room > 0; k++) {
      const id = endpoints[(this.turn + k) % endpoints.length]!
      const free = Math.min(this.perEndpoint - this.busy.get(id), room)
      if (free <= 0) continue
      let taken = 0
      for (const d of await this.store.due(id, now, free)) {
        // still under way here (its outcome waits to be written, its claim ran out): not twice
        if (this.underWay.has(d.id)) skipped = true
        else {
          picked.push(d)
          taken++
        }
      }
      room -= taken
      if (taken < free) {
        const t = await this.store.nextDue(id)
        if (t !== null && (next === null || t < next)) next = t
      }
    }
    this.turn = endpoints.length ? (this.turn + 1) % endpoints.length : 0
    if (picked.length) {
      // claim them in one write: each next attempt pushed out past the timeout, so none is picked
      // twice; one another instance claimed since it was read is left to that instance
      const claimed = await this.deps.engine.write(async (tx) => {
        const mine: DeliveryRow[] = []
        for (const d of picked) if (await this.store.claim(tx, d.id, now, now + DELIVERY_TIMEOUT_MS + 5000)) mine.push(d)
        return mine
      })
      if (!this.running) return
      for (const d of claimed) this.send(d)
    }
    if (room <= 0 || !this.running) return
    // (several instances: another's delivery may come due with nothing here to wake this one)
    const bound = this.deps.engine.shared ? SHARED_LOOK_MS : 60_000
    if (next === null && !this.deps.engine.shared) return
    // one skipped above stays due until its outcome is written (then this runs again): no busy loop
    this.timer = setTimeout(() => this.kick(), Math.max(skipped ? 1000 : 10, Math.min(next === null ? bound : next - this.deps.clock.now(), bound)))
  }

  /** One claimed delivery under way; when its outcome is written, look for more. */
  private send(d: DeliveryRow) {
    this.underWay.add(d.id)
    this.busy.add(d.endpoint_id)
    void this.attempt(d)
      .catch((e) => this.log.error('webhook delivery outcome not written (the server is stopping); it is attempted again after the restart', { error: String((e as Error)?.message ?? e) }))
      .finally(() => {
        this.underWay.delete(d.id)
        this.busy.remove(d.endpoint_id)
        this.kickSoon()
      })
  }

  /**
   * Writes what became of an attempt, again while the write fails (see `persist`): a receiver that
   * took the event is not sent it again for a write that could not be made. When the server stops
   * first, the delivery's claim runs out and it is attempted again after the restart.
   */
  private record(fn: (tx: Queries) => Promise<void>) {
    return persist(
      () => this.deps.engine.write(fn),
      () => !this.running,
      (e) => this.log.error('webhook delivery outcome could not be written yet', { error: String((e as Error)?.message ?? e) }),
    )
  }

  /** Each delivery attempt's result, for /metrics. */
  onAttempt: (result: 'delivered' | 'http_error' | 'timeout' | 'connection_failed') => void = () => {}

  private async attempt(d: DeliveryRow) {
    const endpoint = await this.store.endpoint(d.endpoint_id)
    if (!endpoint || endpoint.status !== 'active') {
      await this.record((tx) => this.store.fail(tx, d.id, null, endpoint ? HELD_REASON : 'endpoint removed', this.deps.clock.now()))
      return
    }
    const ts = Math.floor(Date.now() / 1000)
    let code: number | null = null
    let error = ''
    try {
      const res = await fetch(endpoint.url, {
        method: 'POST',
        headers: {
          ...this.headersOf(endpoint),
          'content-type': 'application/json',
          'user-agent': 'Capstan-Webhooks/1',
          'webhook-id': d.id,
          'webhook-timestamp': String(ts),
          'webhook-signature': signature(this.signingSecrets(endpoint), d.id, ts, d.payload),
        },
        body: d.payload,
        redirect: 'manual',
        signal: AbortSignal.timeout(DELIVERY_TIMEOUT_MS),
      })
      code = res.status
      await res.body?.cancel().catch(() => {})
      this.onAttempt(res.status >= 200 && res.status < 300 ? 'delivered' : 'http_error')
      if (res.status >= 200 && res.status < 300) {
        const now = this.deps.clock.now()
        await this.record(async (tx) => {
          await this.store.delivered(tx, d.id, res.status, now)
          if (endpoint.failing_since !== null) await this.store.markFailing(tx, endpoint.id, null, now)
        })
        return
      }
      error = `HTTP ${res.status}`
    } catch (e) {
      const timedOut = (e as Error).name === 'TimeoutError'
      this.onAttempt(timedOut ? 'timeout' : 'connection_failed')
      error = timedOut ? 'timed out after 15 s' : 'connection failed'
    }
    const now = this.deps.clock.now()
    await this.record(async (tx) => {
      const since = endpoint.failing_since ?? now
      if (endpoint.failing_since === null) await this.store.markFailing(tx, endpoint.id, now, now)
      if (now - since >= DISABLE_AFTER_MS) {
        // this attempt is recorded, then the delivery is held with the rest (enabling sends it again)
        await this.store.retry(tx, d.id, code, error, now, now)
        // (enabled meanwhile by an operator, or succeeding again: left as it is)
        if (await this.store.disable(tx, endpoint.id, now, DISABLED_FAILING, now - DISABLE_AFTER_MS)) this.log.warn('webhook endpoint disabled after failing for 3 days', { endpoint_id: endpoint.id })
        return
      }
      const delay = RETRY_SCHEDULE_S[d.attempts]
      if (delay === undefined) await this.store.fail(tx, d.id, code, error, now)
      else await this.store.retry(tx, d.id, code, error, now + delay * 1000, now)
    })
  }
}
