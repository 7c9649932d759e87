/**
 * Webhooks (Standard Webhooks): operator-registered endpoints, events written to a durable
 * outbox in the same transaction as the change they report, and a dispatcher that signs and
 * delivers them with the contract's retry schedule. Nothing is lost across restarts: a delivery
 * is pending in SQLite until an endpoint answered 2xx or its retries ran out.
 */
import { randomBytes } from 'node:crypto'
import { nextTurn, persist } from '../../db/writer'
import type { Deps } from '../../deps'
import { Tally } from '../../tally'
import { conflict, notFound, validationFailed } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import type { Logger } from '../../http/log'
import type { SecretBox } from '../../secrets'
import type { AuditRepo } from '../audit/repo'
import type { EventData } from './docs'
import type { AdminEndpoint } from './model'
import { type DeliveryRow, type EndpointRow, HELD_REASON, WebhookRepo } from './repo'

export const EVENT_TYPES = ['message.sent', 'message.delivered', 'message.read', 'message.failed', 'message.received', 'campaign.completed', 'contact.consent_changed', 'connection.status_changed'] as const
export type EventType = (typeof EVENT_TYPES)[number]

/** Seconds after which attempt n+1 follows a failed attempt n (CONTRACT §5). */
export const RETRY_SCHEDULE_S = [5, 300, 1800, 7200, 18000, 36000, 36000]
export const DELIVERY_TIMEOUT_MS = 15_000
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
  private readonly repo: WebhookRepo
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
    this.repo = new WebhookRepo(deps.db)
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
  lastEventSeq(): number {
    return this.repo.lastSeq()
  }

  /** Inside a write: drop the workspace's events with seq in [from, to] that mention `text` (an erased contact's id); returns how many. */
  dropEventsMentioningInTx(from: number, to: number, workspaceId: string, text: string): number {
    return this.repo.dropMentioning(from, to, workspaceId, text)
  }

  /** For /metrics: pending deliveries, in all and per endpoint. */
  pendingGauges() {
    return this.repo.pendingGauges()
  }

  /** The workspace's endpoints. */
  endpoints(workspaceId: string) {
    return this.repo.endpoints(workspaceId)
  }

  /** A page of an endpoint's deliveries, newest first. */
  deliveries(endpointId: string, limit: number, offset: number) {
    return this.repo.deliveries(endpointId, limit, offset)
  }

  /** Queue a `webhook.test` event for one endpoint and wake the sender; returns its webhook-id. */
  sendTest(endpoint: EndpointRow): string {
    const now = this.deps.clock.now()
    const payload = JSON.stringify({ type: 'webhook.test', timestamp: new Date(now).toISOString(), data: { endpoint_id: endpoint.id, message: 'A test event from Capstan.' } })
    const id = `msg_${uuid().replaceAll('-', '')}`
    this.deps.writer.now(() => this.repo.enqueue(id, endpoint.id, endpoint.workspace_id, 'webhook.test', payload, now))
    this.kick()
    return id
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

  create(workspaceId: string, url: string, events: string[] | undefined, headers?: Record<string, unknown> | null) {
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
    this.deps.writer.now(() => {
      this.repo.createEndpoint(row)
      this.audit.add(workspaceId, 'webhook.created', null, now, row.id)
    })
    return { ...this.toAdmin(row), secret }
  }

  get(id: string) {
    const row = this.repo.endpoint(id)
    if (!row) throw notFound('webhook endpoint')
    return row
  }

  remove(id: string) {
    const row = this.get(id)
    this.deps.writer.now(() => {
      this.repo.removeEndpoint(id, this.deps.clock.now())
      this.audit.add(row.workspace_id, 'webhook.removed', null, this.deps.clock.now(), id)
    })
  }

  /**
   * The operator changes an endpoint: its URL or events (the secret stays), and its status. Disabling
   * holds its pending deliveries (failed with an "endpoint disabled" reason); enabling it again —
   * also one disabled after failing for 3 days — delivers the held ones again (same webhook-id, a
   * fresh retry schedule, to the URL it has then). Events that happened while it was disabled were
   * not written for it. Setting the status it already has changes nothing.
   */
  patch(id: string, input: { status?: 'active' | 'disabled'; url?: string; events?: string[]; headers?: Record<string, unknown> | null }) {
    const now = this.deps.clock.now()
    const requeued = this.deps.writer.now(() => {
      const row = this.get(id)
      this.audit.add(row.workspace_id, 'webhook.updated', null, now, id)
      if (input.url !== undefined || input.events !== undefined || input.headers !== undefined) {
        const headers = input.headers === undefined ? row.headers_enc : this.headersColumn(input.headers)
        this.repo.updateTarget(id, input.url ?? row.url, input.events === undefined ? row.events : eventsColumn(input.events), headers, now)
      }
      if (input.status === undefined || input.status === row.status) return 0
      if (input.status === 'disabled') {
        this.repo.disable(id, now, DISABLED_BY_OPERATOR)
        return 0
      }
      return this.repo.enable(id, now)
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
  rotateSecret(id: string, keepPreviousHours: number) {
    const secret = newSecret()
    const now = this.deps.clock.now()
    const row = this.deps.writer.now(() => {
      const current = this.get(id)
      const previous = keepPreviousHours > 0 ? { enc: current.secret_enc, until: now + keepPreviousHours * 3_600_000 } : null
      this.repo.rotateSecret(id, this.box.seal(secret), previous, now)
      this.audit.add(current.workspace_id, 'webhook.secret_rotated', null, now, id)
      return this.get(id)
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
  async recover(id: string, since: number): Promise<number> {
    const endpoint = this.get(id)
    if (endpoint.status !== 'active') throw conflict('endpoint_disabled', 'The endpoint is disabled; enable it first.')
    this.deps.writer.now(() => this.audit.add(endpoint.workspace_id, 'webhook.recovered', null, this.deps.clock.now(), id))
    let total = 0
    for (let after = 0; ; ) {
      const { requeued, last } = this.deps.writer.now(() => {
        if (this.repo.endpoint(id)?.status !== 'active') return { requeued: 0, last: null }
        return this.repo.requeueFailedSlice(id, since, after, this.recoverSlice, this.deps.clock.now())
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
   * Must run inside the write that makes the change it reports.
   */
  enqueueInTx<K extends EventType>(workspaceId: string, type: K, data: EventData[K]) {
    const endpoints = this.repo.activeEndpoints(workspaceId)
    if (endpoints.length === 0) return
    const now = this.deps.clock.now()
    const payload = JSON.stringify({ type, timestamp: new Date(now).toISOString(), data })
    let any = false
    for (const e of endpoints) {
      if (e.events && !(JSON.parse(e.events) as string[]).includes(type)) continue
      this.repo.enqueue(`msg_${uuid().replaceAll('-', '')}`, e.id, workspaceId, type, payload, now)
      any = true
    }
    if (any) this.kickSoon()
  }

  /**
   * Delete finished deliveries older than DELIVERY_RETENTION_MS, so the outbox does not grow with
   * every event ever sent. Pending ones are never touched.
   */
  pruneFinished(): Promise<number> {
    const bound = this.repo.firstAfter(this.deps.clock.now() - DELIVERY_RETENTION_MS)
    return this.inSlices((slice) => this.repo.prune(bound, slice))
  }

  /**
   * Delete the workspace's finished deliveries of message events created before `cutoff`: their
   * payloads are copies of the messages, content included (message content retention). Pending
   * ones are left to be delivered.
   */
  async pruneMessageEvents(workspaceId: string, cutoff: number): Promise<number> {
    let total = 0
    for (const endpointId of this.repo.everyEndpoint(workspaceId)) {
      // per endpoint: the deliveries older than a short retention are most of the 30 days kept,
      // every workspace's — the endpoint's index walks only its own
      const bound = this.repo.firstAfterFor(endpointId, cutoff)
      total += await this.inSlices((slice) => this.repo.pruneMessageEvents(endpointId, bound, slice))
    }
    return total
  }

  /**
   * Run a delete of at most `pruneSlice` rows until it deletes fewer: one short write each, with
   * requests served between. The bound it deletes below is found once, before: finding it walks
   * every delivery older than the cutoff, which per slice made a large backlog quadratic.
   */
  private async inSlices(deleteSlice: (slice: number) => number): Promise<number> {
    const slice = this.pruneSlice
    let total = 0
    for (;;) {
      const n = this.deps.writer.now(() => deleteSlice(slice))
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
   * a full dispatcher, needs no timer: the end of each attempt looks again.
   */
  kick() {
    if (!this.running) return
    if (this.timer) clearTimeout(this.timer)
    this.timer = null
    const now = this.deps.clock.now()
    const endpoints = this.repo.activeEndpointIds()
    const picked: DeliveryRow[] = []
    let room = this.maxInFlight - this.inFlight
    let next: number | null = null
    let skipped = false
    for (let k = 0; k < endpoints.length && room > 0; k++) {
      const id = endpoints[(this.turn + k) % endpoints.length]!
      const free = Math.min(this.perEndpoint - this.busy.get(id), room)
      if (free <= 0) continue
      let taken = 0
      for (const d of this.repo.due(id, now, free)) {
        // still under way here (its outcome waits to be written, its claim ran out): not twice
        if (this.underWay.has(d.id)) skipped = true
        else {
          picked.push(d)
          taken++
        }
      }
      room -= taken
      if (taken < free) {
        const t = this.repo.nextDue(id)
        if (t !== null && (next === null || t < next)) next = t
      }
    }
    this.turn = endpoints.length ? (this.turn + 1) % endpoints.length : 0
    if (picked.length) {
      // claim them in one write: each next attempt pushed out past the timeout, so none is picked twice
      try {
        this.deps.writer.now(() => {
          for (const d of picked) this.repo.claim(d.id, now + DELIVERY_TIMEOUT_MS + 5000)
        })
      } catch (e) {
        // the claims cannot be written (a full disk): nothing goes out unclaimed; look again soon
        this.log.errorAtMostEvery(60_000, 'webhook deliveries paused: a delivery could not be claimed', { error: String((e as Error)?.message ?? e) })
        this.timer = setTimeout(() => this.kick(), 1000)
        return
      }
      for (const d of picked) this.send(d)
    }
    if (room <= 0 || next === null) return
    // one skipped above stays due until its outcome is written (then this runs again): no busy loop
    this.timer = setTimeout(() => this.kick(), Math.max(skipped ? 1000 : 10, Math.min(next - this.deps.clock.now(), 60_000)))
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
  private record(fn: () => void) {
    return persist(
      () => this.deps.writer.write(fn),
      () => !this.running,
      (e) => this.log.error('webhook delivery outcome could not be written yet', { error: String((e as Error)?.message ?? e) }),
    )
  }

  /** Each delivery attempt's result, for /metrics. */
  onAttempt: (result: 'delivered' | 'http_error' | 'timeout' | 'connection_failed') => void = () => {}

  private async attempt(d: DeliveryRow) {
    const endpoint = this.repo.endpoint(d.endpoint_id)
    if (!endpoint || endpoint.status !== 'active') {
      await this.record(() => this.repo.fail(d.id, null, endpoint ? HELD_REASON : 'endpoint removed', this.deps.clock.now()))
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
        await this.record(() => {
          this.repo.delivered(d.id, res.status, now)
          if (endpoint.failing_since !== null) this.repo.markFailing(endpoint.id, null, now)
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
    await this.record(() => {
      const since = endpoint.failing_since ?? now
      if (endpoint.failing_since === null) this.repo.markFailing(endpoint.id, now, now)
      if (now - since >= DISABLE_AFTER_MS) {
        // this attempt is recorded, then the delivery is held with the rest (enabling sends it again)
        this.repo.retry(d.id, code, error, now, now)
        this.repo.disable(endpoint.id, now, DISABLED_FAILING)
        this.log.warn('webhook endpoint disabled after failing for 3 days', { endpoint_id: endpoint.id })
        return
      }
      const delay = RETRY_SCHEDULE_S[d.attempts]
      if (delay === undefined) this.repo.fail(d.id, code, error, now)
      else this.repo.retry(d.id, code, error, now + delay * 1000, now)
    })
  }
}
