/** Webhook endpoint and delivery (outbox) SQL. */
import type { Database } from 'bun:sqlite'

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

export class WebhookRepo {
  private insertEndpoint
  private endpointById
  private endpointsForWs
  private activeForWs
  private deleteEndpoint
  private setFailing
  private disableStmt
  private enableStmt
  private targetStmt
  private rotateStmt
  private requeueHeld
  private failedSlice
  private requeueFailed
  private insertDelivery
  private activeIds
  private dueStmt
  private nextDueStmt
  private deliveredStmt
  private retryStmt
  private failStmt
  private claimStmt
  private firstNewer
  private pruneMessageEventsStmt
  private everyEndpointOf
  private firstNewerOfEndpoint
  private pruneStmt
  private failAllForEndpoint
  private listDeliveries
  private countDeliveries

  constructor(private readonly db: Database) {
    this.insertEndpoint = db.query(
      'INSERT INTO webhook_endpoints (id, workspace_id, url, events, secret_enc, headers_enc, status, failing_since, created_at, updated_at, deleted_at) VALUES ($id, $workspace_id, $url, $events, $secret_enc, $headers_enc, $status, NULL, $created_at, $updated_at, NULL)',
    )
    this.endpointById = db.query<EndpointRow, [string]>('SELECT * FROM webhook_endpoints WHERE id = ? AND deleted_at IS NULL')
    this.endpointsForWs = db.query<EndpointRow, [string]>('SELECT * FROM webhook_endpoints WHERE workspace_id = ? AND deleted_at IS NULL ORDER BY created_at, id')
    this.activeForWs = db.query<EndpointRow, [string]>("SELECT * FROM webhook_endpoints WHERE workspace_id = ? AND status = 'active' AND deleted_at IS NULL")
    this.deleteEndpoint = db.query('UPDATE webhook_endpoints SET deleted_at = ?, updated_at = ? WHERE id = ?')
    this.setFailing = db.query('UPDATE webhook_endpoints SET failing_since = ?, updated_at = ? WHERE id = ?')
    this.disableStmt = db.query("UPDATE webhook_endpoints SET status = 'disabled', updated_at = ? WHERE id = ?")
    this.targetStmt = db.query('UPDATE webhook_endpoints SET url = ?, events = ?, headers_enc = ?, updated_at = ? WHERE id = ?')
    this.rotateStmt = db.query('UPDATE webhook_endpoints SET secret_enc = ?, previous_secret_enc = ?, previous_secret_expires_at = ?, updated_at = ? WHERE id = ?')
    this.enableStmt = db.query("UPDATE webhook_endpoints SET status = 'active', failing_since = NULL, updated_at = ? WHERE id = ?")
    this.requeueHeld = db.query(
      `UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?, updated_at = ? WHERE endpoint_id = ? AND status = 'failed' AND last_error LIKE '${HELD_REASON}%'`,
    )
    this.failedSlice = db.query<{ seq: number }, [string, number, number, number]>(
      "SELECT seq FROM webhook_deliveries WHERE endpoint_id = ? AND status = 'failed' AND created_at >= ? AND seq > ? ORDER BY seq LIMIT ?",
    )
    this.requeueFailed = db.query(
      "UPDATE webhook_deliveries SET status = 'pending', attempts = 0, next_attempt_at = ?1, updated_at = ?1 WHERE endpoint_id = ?2 AND status = 'failed' AND created_at >= ?3 AND seq BETWEEN ?4 AND ?5",
    )
    this.insertDelivery = db.query(
      "INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, type, payload, status, attempts, next_attempt_at, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 'pending', 0, ?, ?, ?)",
    )
    this.activeIds = db.query<{ id: string }, []>("SELECT id FROM webhook_endpoints WHERE status = 'active' AND deleted_at IS NULL ORDER BY id")
    this.dueStmt = db.query<DeliveryRow, [string, number, number]>(
      "SELECT * FROM webhook_deliveries WHERE endpoint_id = ? AND status = 'pending' AND next_attempt_at <= ? ORDER BY next_attempt_at, seq LIMIT ?",
    )
    this.nextDueStmt = db.query<{ t: number | null }, [string]>("SELECT MIN(next_attempt_at) AS t FROM webhook_deliveries WHERE endpoint_id = ? AND status = 'pending'")
    this.deliveredStmt = db.query("UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1, last_status_code = ?, last_error = NULL, delivered_at = ?, updated_at = ?, next_attempt_at = NULL WHERE id = ?")
    // an attempt's failure is recorded only on a delivery still pending: one held meanwhile (its
    // endpoint disabled or removed while the attempt ran) keeps the reason it was held for
    this.retryStmt = db.query("UPDATE webhook_deliveries SET attempts = attempts + 1, last_status_code = ?, last_error = ?, next_attempt_at = ?, updated_at = ? WHERE id = ? AND status = 'pending'")
    this.claimStmt = db.query('UPDATE webhook_deliveries SET next_attempt_at = ? WHERE id = ?')
    this.failStmt = db.query("UPDATE webhook_deliveries SET status = 'failed', attempts = attempts + 1, last_status_code = ?, last_error = ?, next_attempt_at = NULL, updated_at = ? WHERE id = ? AND status = 'pending'")
    this.failAllForEndpoint = db.query("UPDATE webhook_deliveries SET status = 'failed', last_error = ?, next_attempt_at = NULL, updated_at = ? WHERE endpoint_id = ? AND status = 'pending'")
    this.listDeliveries = db.query<DeliveryRow, [string, number, number]>('SELECT * FROM webhook_deliveries WHERE endpoint_id = ? ORDER BY seq DESC LIMIT ? OFFSET ?')
    // kept by triggers (migration 0034): counting an endpoint's history took 14-22 ms at 300,000
    this.countDeliveries = db.query<{ n: number }, [string]>('SELECT n FROM webhook_delivery_counts WHERE endpoint_id = ?')
    this.firstNewer = db.query<{ seq: number }, [number]>('SELECT seq FROM webhook_deliveries WHERE created_at > ? ORDER BY seq LIMIT 1')
    this.pruneStmt = db.query("DELETE FROM webhook_deliveries WHERE seq IN (SELECT seq FROM webhook_deliveries WHERE seq < ? AND status != 'pending' ORDER BY seq LIMIT ?)")
    this.pruneMessageEventsStmt = db.query("DELETE FROM webhook_deliveries WHERE seq IN (SELECT seq FROM webhook_deliveries WHERE endpoint_id = ? AND seq < ? AND status != 'pending' AND type LIKE 'message.%' ORDER BY seq LIMIT ?)")
    this.firstNewerOfEndpoint = db.query<{ seq: number }, [string, number]>('SELECT seq FROM webhook_deliveries WHERE endpoint_id = ? AND created_at > ? ORDER BY seq LIMIT 1')
    this.everyEndpointOf = db.query<{ id: string }, [string]>('SELECT id FROM webhook_endpoints WHERE workspace_id = ?')
  }

  /** The newest delivery's seq (0 when none). */
  lastSeq(): number {
    return this.db.query<{ seq: number | null }, []>('SELECT MAX(seq) AS seq FROM webhook_deliveries').get()?.seq ?? 0
  }

  /** Drop the workspace's deliveries with seq in [from, to] whose payload mentions `text`; returns how many. */
  dropMentioning(from: number, to: number, workspaceId: string, text: string): number {
    return this.db.query('DELETE FROM webhook_deliveries WHERE seq BETWEEN ? AND ? AND workspace_id = ? AND instr(payload, ?) > 0').run(from, to, workspaceId, text).changes
  }

  /** For /metrics: deliveries not yet delivered, the oldest one's creation, and per endpoint (through webhook_deliveries_due and _endpoint_due). */
  pendingGauges() {
    const db = this.db
    return {
      pending: db.query<{ n: number; oldest: number | null }, []>("SELECT COUNT(*) AS n, MIN(created_at) AS oldest FROM webhook_deliveries WHERE status = 'pending'").get()!,
      perEndpoint: db
        .query<{ endpoint_id: string; workspace_id: string; n: number }, []>(
          "SELECT d.endpoint_id, e.workspace_id, COUNT(*) AS n FROM webhook_deliveries d JOIN webhook_endpoints e ON e.id = d.endpoint_id WHERE d.status = 'pending' GROUP BY d.endpoint_id ORDER BY d.endpoint_id",
        )
        .all(),
    }
  }

  createEndpoint(row: EndpointRow) {
    const { failing_since: _f, deleted_at: _d, previous_secret_enc: _p, previous_secret_expires_at: _e, ...rest } = row
    this.insertEndpoint.run(rest as any)
  }
  endpoint(id: string) {
    return this.endpointById.get(id)
  }
  endpoints(workspaceId: string) {
    return this.endpointsForWs.all(workspaceId)
  }
  activeEndpoints(workspaceId: string) {
    return this.activeForWs.all(workspaceId)
  }
  removeEndpoint(id: string, at: number) {
    this.deleteEndpoint.run(at, at, id)
    this.failAllForEndpoint.run('endpoint removed', at, id)
  }
  markFailing(id: string, since: number | null, at: number) {
    this.setFailing.run(since, at, id)
  }
  /** Disable an endpoint; its pending deliveries fail with `reason`, which starts with HELD_REASON. */
  disable(id: string, at: number, reason: string) {
    this.disableStmt.run(at, id)
    this.failAllForEndpoint.run(reason, at, id)
  }
  updateTarget(id: string, url: string, events: string | null, headersEnc: string | null, at: number) {
    this.targetStmt.run(url, events, headersEnc, at, id)
  }
  /** A new signing secret; `previous` (the one it replaces, or null) signs beside it until `until`. */
  rotateSecret(id: string, secretEnc: string, previous: { enc: string; until: number } | null, at: number) {
    this.rotateStmt.run(secretEnc, previous?.enc ?? null, previous?.until ?? null, at, id)
  }
  /** Enable it again: the deliveries its disabling failed are pending again, due now. */
  enable(id: string, at: number): number {
    this.enableStmt.run(at, id)
    return this.requeueHeld.run(at, at, id).changes
  }
  /**
   * The next `limit` failed deliveries (in seq order after `after`) of events written since
   * `since`: pending again, due at `at`. Returns how many, and the seq to go on after (null when
   * none are left).
   */
  requeueFailedSlice(endpointId: string, since: number, after: number, limit: number, at: number): { requeued: number; last: number | null } {
    const seqs = this.failedSlice.all(endpointId, since, after, limit)
    if (seqs.length === 0) return { requeued: 0, last: null }
    const last = seqs.at(-1)!.seq
    const requeued = this.requeueFailed.run(at, endpointId, since, seqs[0]!.seq, last).changes
    return { requeued, last: seqs.length < limit ? null : last }
  }
  enqueue(id: string, endpointId: string, workspaceId: string, type: string, payload: string, at: number) {
    this.insertDelivery.run(id, endpointId, workspaceId, type, payload, at, at, at)
  }
  /** Every active endpoint, of every workspace. */
  activeEndpointIds(): string[] {
    return this.activeIds.all().map((r) => r.id)
  }
  /** An endpoint's pending deliveries due at `now`, the longest due first. */
  due(endpointId: string, now: number, limit: number) {
    return this.dueStmt.all(endpointId, now, limit)
  }
  /** When an endpoint's next pending delivery is due (null: none). */
  nextDue(endpointId: string) {
    return this.nextDueStmt.get(endpointId)?.t ?? null
  }
  delivered(id: string, code: number, at: number) {
    this.deliveredStmt.run(code, at, at, id)
  }
  retry(id: string, code: number | null, error: string, next: number, at: number) {
    this.retryStmt.run(code, error, next, at, id)
  }
  /** Push the next attempt out while one is running, so it is not picked twice. */
  claim(id: string, until: number) {
    this.claimStmt.run(until, id)
  }
  fail(id: string, code: number | null, error: string, at: number) {
    this.failStmt.run(code, error, at, id)
  }
  /** Delete up to `limit` finished (delivered or failed) deliveries before the delivery `bound` (see firstAfter), oldest first. */
  prune(bound: number, limit: number): number {
    return this.pruneStmt.run(bound, limit).changes
  }
  /**
   * The first delivery created after `cutoff`: those before it are older. Rows go in `seq` order,
   * which follows creation, so the scan walks the primary key from the start and stops at the
   * first newer row — past every older one that is still there, so it is asked once per prune.
   */
  firstAfter(cutoff: number): number {
    return this.firstNewer.get(cutoff)?.seq ?? Number.MAX_SAFE_INTEGER
  }
  /** The same for one endpoint's deliveries, through its index (only its own older deliveries are walked). */
  firstAfterFor(endpointId: string, cutoff: number): number {
    return this.firstNewerOfEndpoint.get(endpointId, cutoff)?.seq ?? Number.MAX_SAFE_INTEGER
  }
  /** Up to `limit` finished deliveries of message events to one endpoint, before the delivery `bound` (see firstAfterFor). */
  pruneMessageEvents(endpointId: string, bound: number, limit: number): number {
    return this.pruneMessageEventsStmt.run(endpointId, bound, limit).changes
  }
  /** Every endpoint the workspace has had, removed ones too (their history stays until pruned). */
  everyEndpoint(workspaceId: string): string[] {
    return this.everyEndpointOf.all(workspaceId).map((e) => e.id)
  }
  deliveries(endpointId: string, limit: number, offset: number) {
    return { rows: this.listDeliveries.all(endpointId, limit, offset), total: this.countDeliveries.get(endpointId)?.n ?? 0 }
  }
}
