/**
 * Webhook endpoints and their deliveries (the outbox) on the store seam
 * (docs/design/two-engines.md): each statement once, for SQLite and PostgreSQL.
 */
import { type Queries, stmt } from '../../db/engine'

/**
 * How the reason starts on a delivery its endpoint's disabling held (failed): enabling the endpoint
 * again makes exactly those pending again (`enable`).
 */
export const HELD_REASON = 'endpoint disabled'

export interface EndpointRow {
  id: string
  workspace_id: string
  url: string
  events: string | null
  secret_enc: string
  /** The secret a rotation replaced, still signing beside `secret_enc` until `previous_secret_expires_at`. */
  previous_secret_enc: string | null
  previous_secret_expires_at: number | null
  /** Extra request headers: a sealed JSON object, or null. */
  headers_enc: string | null
  status: 'active' | 'disabled'
  failing_since: number | null
  created_at: number
  updated_at: number
  deleted_at: number | null
}

export interface DeliveryRow {
  seq: number
  id: string
  endpoint_id: string
  workspace_id: string
  type: string
  payload: string
  status: 'pending' | 'delivered' | 'failed'
  attempts: number
  next_attempt_at: number | null
  last_status_code: number | null
  last_error: string | null
  created_at: number
  updated_at: number
  delivered_at: number | null
}

const Q = {
  insertEndpoint: stmt(
    'INSERT INTO webhook_endpoints (id, workspace_id, url, events, secret_enc, headers_enc, status, failing_since, created_at, updated_at, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, NULL)',
  ),
  endpoint: stmt('SELECT * FROM webhook_endpoints WHERE id = ? AND deleted_at IS NULL'),
  endpoints: stmt('SELECT * FROM webhook_endpoints WHERE workspace_id = ? AND deleted_at IS NULL ORDER BY created_at, id'),
  active: stmt("SELECT * FROM webhook_endpoints WHERE workspace_id = ? AND status = 'active' AND deleted_at IS NULL"),
  remove: stmt('UPDATE webhook_endpoints SET deleted_at = ?, updated_at = ? WHERE id = ?'),
  failing: stmt('UPDATE webhook_endpoints SET failing_since = ?, updated_at = ? WHERE id = ?'),
  // each change only over what it was decided from (another instance's change meanwhile is not
  // written over): disabling an active endpoint (the dispatcher's, one still failing since then),
  // enabling a disabled one, a target over the one read, a secret over the one read
  disable: stmt("UPDATE webhook_endpoints SET status = 'disabled', updated_at = ? WHERE id = ? AND status = 'active'"),
  disableFailing: stmt("UPDATE webhook_endpoints SET status = 'disabled', updated_at = ? WHERE id = ? AND status = 'active' AND failing_since <= ?"),
  target: stmt(
    'UPDATE webhook_endpoints SET url = ?, events = ?, headers_enc = ?, updated_at = ? WHERE id = ? AND url = ? AND events IS ? AND headers_enc IS ?',
    'UPDATE webhook_endpoints SET url = $1, events = $2, headers_enc = $3, updated_at = $4 WHERE id = $5 AND url = $6 AND events IS NOT DISTINCT FROM $7 AND headers_enc IS NOT DISTINCT FROM $8',
  ),
  rotate: stmt('UPDATE webhook_endpoints SET secret_enc = ?, previous_secret_enc = ?, previous_secret_expires_at = ?, updated_at = ? WHERE id = ? AND secret_enc = ?'),
  enable: stmt("UPDATE webhook_endpoints SET status = 'active', failing_since = NULL, updated_at = ? WHERE id = ? AND status = 'disabled'"),
  requeueHeld: stmt(`UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?, updated_at = ? WHERE endpoint_id = ? AND status = 'failed' AND last_error LIKE '${HELD_REASON}%'`),
  failedSlice: stmt("SELECT seq FROM webhook_deliveries WHERE endpoint_id = ? AND status = 'failed' AND created_at >= ? AND seq > ? ORDER BY seq LIMIT ?"),
  requeueFailed: stmt(
    "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?1, updated_at = ?1 WHERE endpoint_id = ?2 AND status = 'failed' AND created_at >= ?3 AND seq BETWEEN ?4 AND ?5",
    "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = $1, updated_at = $1 WHERE endpoint_id = $2 AND status = 'failed' AND created_at >= $3 AND seq BETWEEN $4 AND $5",
  ),
  insertDelivery: stmt(
    "INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, type, payload, status, attempts, next_attempt_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?)",
  ),
  activeIds: stmt("SELECT id FROM webhook_endpoints WHERE status = 'active' AND deleted_at IS NULL ORDER BY id"),
  due: stmt("SELECT * FROM webhook_deliveries WHERE endpoint_id = ? AND status = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at, seq LIMIT ?"),
  nextDue: stmt("SELECT MIN(next_attempt_at) AS t FROM webhook_deliveries WHERE endpoint_id = ? AND status = 'pending'"),
  delivered: stmt("UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1, last_status_code = ?, last_error = NULL, delivered_at = ?, updated_at = ?, next_attempt_at = NULL WHERE id = ?"),
  // an attempt's failure is recorded only on a delivery still pending: one held meanwhile (its
  // endpoint disabled or removed while the attempt ran) keeps the reason it was held for
  retry: stmt("UPDATE webhook_deliveries SET attempts = attempts + 1, last_status_code = ?, last_error = ?, next_attempt_at = ?, updated_at = ? WHERE id = ? AND status = 'pending'"),
  // taken only while still due: of two instances reading the same due delivery, one claims it
  claim: stmt("UPDATE webhook_deliveries SET next_attempt_at = ? WHERE id = ? AND status = 'pending' AND next_attempt_at <= ?"),
  fail: stmt("UPDATE webhook_deliveries SET status = 'failed', attempts = attempts + 1, last_status_code = ?, last_error = ?, next_attempt_at = NULL, updated_at = ? WHERE id = ? AND status = 'pending'"),
  failAll: stmt("UPDATE webhook_deliveries SET status = 'failed', last_error = ?, next_attempt_at = NULL, updated_at = ? WHERE endpoint_id = ? AND status = 'pending'"),
  list: stmt('SELECT * FROM webhook_deliveries WHERE endpoint_id = ? ORDER BY seq DESC LIMIT ? OFFSET ?'),
  listOfStatus: stmt('SELECT * FROM webhook_deliveries WHERE endpoint_id = ? AND status = ? ORDER BY seq DESC LIMIT ? OFFSET ?'),
  // bounded: a filtered history is counted at most as deep as it can be paged
  countOfStatus: stmt('SELECT COUNT(*) AS n FROM (SELECT 1 FROM webhook_deliveries WHERE endpoint_id = ? AND status = ? LIMIT 10000) AS found'),
  delivery: stmt('SELECT * FROM webhook_deliveries WHERE endpoint_id = ? AND id = ?'),
  recent: stmt('SELECT * FROM webhook_deliveries WHERE endpoint_id = ? ORDER BY seq DESC LIMIT ?'),
  // once more, whatever became of it: from the first attempt again, with the same webhook-id
  resend: stmt("UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?, delivered_at = NULL, updated_at = ? WHERE endpoint_id = ? AND id = ? AND status != 'pending'"),
  // kept by triggers (migration 0034): counting an endpoint's history took 14-22 ms at 300,000
  count: stmt('SELECT CAST(SUM(n) AS BIGINT) AS n FROM webhook_delivery_counts WHERE endpoint_id = ?'),
  firstNewer: stmt('SELECT seq FROM webhook_deliveries WHERE created_at > ? ORDER BY seq LIMIT 1'),
  prune: stmt("DELETE FROM webhook_deliveries WHERE seq IN (SELECT seq FROM webhook_deliveries WHERE seq < ? AND status != 'pending' ORDER BY seq LIMIT ?)"),
  pruneMessageEvents: stmt(
    "DELETE FROM webhook_deliveries WHERE seq IN (SELECT seq FROM webhook_deliveries WHERE endpoint_id = ? AND seq < ? AND status != 'pending' AND type LIKE 'message.%' ORDER BY seq LIMIT ?)",
  ),
  firstNewerOfEndpoint: stmt('SELECT seq FROM webhook_deliveries WHERE endpoint_id = ? AND created_at > ? ORDER BY seq LIMIT 1'),
  everyEndpoint: stmt('SELECT id FROM webhook_endpoints WHERE workspace_id = ?'),
  lastSeq: stmt('SELECT MAX(seq) AS seq FROM webhook_deliveries'),
  dropMentioning: stmt(
    'DELETE FROM webhook_deliveries WHERE seq BETWEEN ? AND ? AND workspace_id = ? AND instr(payload, ?) > 0',
    'DELETE FROM webhook_deliveries WHERE seq BETWEEN $1 AND $2 AND workspace_id = $3 AND strpos(payload, $4) > 0',
  ),
  pending: stmt("SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM webhook_deliveries WHERE status = 'pending'"),
  pendingPerEndpoint: stmt(
    "SELECT d.endpoint_id, e.workspace_id, COUNT(*) AS n FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id WHERE d.status = 'pending' GROUP BY d.endpoint_id, e.workspace_id ORDER BY d.endpoint_id",
  ),
}

export class WebhookStore {
  /** `db`: the engine, for reads outside a write. */
  constructor(private readonly db: Queries) {}

  /** The newest delivery's seq (0 when none). */
  async lastSeq(): Promise<number> {
    return (await this.db.get<{ seq: number | null }>(Q.lastSeq))?.seq ?? 0
  }

  /** Drop the workspace's deliveries with seq in [from, to] whose payload mentions `text`; returns how many. */
  dropMentioning(tx: Queries, from: number, to: number, workspaceId: string, text: string): Promise<number> {
    return tx.run(Q.dropMentioning, from, to, workspaceId, text)
  }

  /** For /metrics: deliveries not yet delivered, the oldest one's creation, and per endpoint (through webhook_deliveries_due and _endpoint_due). */
  async pendingGauges() {
    const [pending, perEndpoint] = await Promise.all([this.db.get<{ n: number; oldest: number | null }>(Q.pending), this.db.all<{ endpoint_id: string; workspace_id: string; n: number }>(Q.pendingPerEndpoint)])
    return { pending: pending ?? { n: 0, oldest: null }, perEndpoint }
  }

  async createEndpoint(tx: Queries, r: EndpointRow) {
    await tx.run(Q.insertEndpoint, r.id, r.workspace_id, r.url, r.events, r.secret_enc, r.headers_enc, r.status, r.created_at, r.updated_at)
  }
  endpoint(id: string, q: Queries = this.db) {
    return q.get<EndpointRow>(Q.endpoint, id)
  }
  endpoints(workspaceId: string) {
    return this.db.all<EndpointRow>(Q.endpoints, workspaceId)
  }
  activeEndpoints(workspaceId: string, q: Queries = this.db) {
    return q.all<EndpointRow>(Q.active, workspaceId)
  }
  async removeEndpoint(tx: Queries, id: string, at: number) {
    await tx.run(Q.remove, at, at, id)
    await tx.run(Q.failAll, 'endpoint removed', at, id)
  }
  async markFailing(tx: Queries, id: string, since: number | null, at: number) {
    await tx.run(Q.failing, since, at, id)
  }
  /**
   * Disable an endpoint that is active (`failingSince`: and still failing since that time or
   * earlier); its pending deliveries fail with `reason`, which starts with HELD_REASON. Whether it was.
   */
  async disable(tx: Queries, id: string, at: number, reason: string, failingSince: number | null = null): Promise<boolean> {
    if ((await (failingSince === null ? tx.run(Q.disable, at, id) : tx.run(Q.disableFailing, at, id, failingSince))) === 0) return false
    await tx.run(Q.failAll, reason, at, id)
    return true
  }
  /** The target written over `read` (the endpoint it was made from); whether it still was that. */
  async updateTarget(tx: Queries, id: string, url: string, events: string | null, headersEnc: string | null, at: number, read: { url: string; events: string | null; headers_enc: string | null }): Promise<boolean> {
    return (await tx.run(Q.target, url, events, headersEnc, at, id, read.url, read.events, read.headers_enc)) > 0
  }
  /** A new signing secret over `currentEnc` (the one read); `previous` (it, or null) signs beside it until `until`. Whether it was still the one. */
  async rotateSecret(tx: Queries, id: string, secretEnc: string, previous: { enc: string; until: number } | null, at: number, currentEnc: string): Promise<boolean> {
    return (await tx.run(Q.rotate, secretEnc, previous?.enc ?? null, previous?.until ?? null, at, id, currentEnc)) > 0
  }
  /** Enable a disabled endpoint: the deliveries its disabling failed are pending again, due now. How many; null when it was not disabled. */
  async enable(tx: Queries, id: string, at: number): Promise<number | null> {
    if ((await tx.run(Q.enable, at, id)) === 0) return null
    return tx.run(Q.requeueHeld, at, at, id)
  }
  /**
   * The next `limit` failed deliveries (in seq order after `after`) of events written since
   * `since`: pending again, due at `at`. Returns how many, and the seq to go on after (null when
   * none are left).
   */
  async requeueFailedSlice(tx: Queries, endpointId: string, since: number, after: number, limit: number, at: number): Promise<{ requeued: number; last: number | null }> {
    const seqs = await tx.all<{ seq: number }>(Q.failedSlice, endpointId, since, after, limit)
    if (seqs.length === 0) return { requeued: 0, last: null }
    const last = seqs.at(-1)!.seq
    const requeued = await tx.run(Q.requeueFailed, at, endpointId, since, seqs[0]!.seq, last)
    return { requeued, last: seqs.length < limit ? null : last }
  }
  async enqueue(tx: Queries, id: string, endpointId: string, workspaceId: string, type: string, payload: string, at: number) {
    await tx.run(Q.insertDelivery, id, endpointId, workspaceId, type, payload, at, at, at)
  }
  /** Every active endpoint, of every workspace. */
  async activeEndpointIds(): Promise<string[]> {
    return (await this.db.all<{ id: string }>(Q.activeIds)).map((r) => r.id)
  }
  /** An endpoint's pending deliveries due at `now`, the longest due first. */
  due(endpointId: string, now: number, limit: number) {
    return this.db.all<DeliveryRow>(Q.due, endpointId, now, limit)
  }
  /** When an endpoint's next pending delivery is due (null: none). */
  async nextDue(endpointId: string): Promise<number | null> {
    return (await this.db.get<{ t: number | null }>(Q.nextDue, endpointId))?.t ?? null
  }
  async delivered(tx: Queries, id: string, code: number, at: number) {
    await tx.run(Q.delivered, code, at, at, id)
  }
  async retry(tx: Queries, id: string, code: number | null, error: string, next: number, at: number) {
    await tx.run(Q.retry, code, error, next, at, id)
  }
  /**
   * Push the next attempt out to `until` while one is running, so it is not picked twice — only
   * if it is still due at `now` (another instance may have claimed it since it was read).
   * Whether this claim took it.
   */
  async claim(tx: Queries, id: string, now: number, until: number): Promise<boolean> {
    return (await tx.run(Q.claim, until, id, now)) > 0
  }
  async fail(tx: Queries, id: string, code: number | null, error: string, at: number) {
    await tx.run(Q.fail, code, error, at, id)
  }
  /** Delete up to `limit` finished (delivered or failed) deliveries before the delivery `bound` (see firstAfter), oldest first. */
  prune(tx: Queries, bound: number, limit: number): Promise<number> {
    return tx.run(Q.prune, bound, limit)
  }
  /**
   * The first delivery created after `cutoff`: those before it are older. Rows go in `seq` order,
   * which follows creation, so the scan walks the primary key from the start and stops at the
   * first newer row — past every older one that is still there, so it is asked once per prune.
   */
  async firstAfter(cutoff: number): Promise<number> {
    return (await this.db.get<{ seq: number }>(Q.firstNewer, cutoff))?.seq ?? Number.MAX_SAFE_INTEGER
  }
  /** The same for one endpoint's deliveries, through its index (only its own older deliveries are walked). */
  async firstAfterFor(endpointId: string, cutoff: number): Promise<number> {
    return (await this.db.get<{ seq: number }>(Q.firstNewerOfEndpoint, endpointId, cutoff))?.seq ?? Number.MAX_SAFE_INTEGER
  }
  /** Up to `limit` finished deliveries of message events to one endpoint, before the delivery `bound` (see firstAfterFor). */
  pruneMessageEvents(tx: Queries, endpointId: string, bound: number, limit: number): Promise<number> {
    return tx.run(Q.pruneMessageEvents, endpointId, bound, limit)
  }
  /** Every endpoint the workspace has had, removed ones too (their history stays until pruned). */
  async everyEndpoint(workspaceId: string): Promise<string[]> {
    return (await this.db.all<{ id: string }>(Q.everyEndpoint, workspaceId)).map((e) => e.id)
  }
  /** A page of an endpoint's history, newest first; of one status only when given (counted up to 10,000). */
  async deliveries(endpointId: string, limit: number, offset: number, status?: DeliveryRow['status']) {
    if (status) {
      const [rows, count] = await Promise.all([this.db.all<DeliveryRow>(Q.listOfStatus, endpointId, status, limit, offset), this.db.get<{ n: number }>(Q.countOfStatus, endpointId, status)])
      return { rows, total: Number(count?.n ?? 0) }
    }
    const [rows, count] = await Promise.all([this.db.all<DeliveryRow>(Q.list, endpointId, limit, offset), this.db.get<{ n: number }>(Q.count, endpointId)])
    return { rows, total: count?.n ?? 0 }
  }
  /** One delivery of the endpoint, or null. */
  delivery(endpointId: string, id: string, q: Queries = this.db) {
    return q.get<DeliveryRow>(Q.delivery, endpointId, id)
  }
  /** The endpoint's newest `n` deliveries (what its health is read from). */
  recent(endpointId: string, n: number) {
    return this.db.all<DeliveryRow>(Q.recent, endpointId, n)
  }
  /** Make a finished delivery pending again, due at `at`; false when it is pending already. */
  async resend(tx: Queries, endpointId: string, id: string, at: number): Promise<boolean> {
    return (await tx.run(Q.resend, at, at, endpointId, id)) > 0
  }
}
