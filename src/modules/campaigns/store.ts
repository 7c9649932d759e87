/**
 * Campaigns and their recipients on the store seam (docs/design/two-engines.md). The audience is
 * frozen with one INSERT … SELECT per slice (no copy in memory).
 */
import type { MessageStatus } from '../messages/store'
import { SKIPPED_REASONS } from './model'
import { type Param, pgPlaceholders, type Queries, type Statement, stmt } from '../../db/engine'
import type { ContactRow } from '../contacts/store'
import { nextTurn } from '../../db/writer'

export type CampaignStatus = 'draft' | 'scheduled' | 'running' | 'paused' | 'completed' | 'cancelled'
/** Why a campaign is paused: on request, or by the pacer when the monthly allowance ran out. */
export type PausedReason = 'requested' | 'allowance_exhausted' | 'template_refused'

export interface CampaignRow {
  id: string
  workspace_id: string
  name: string
  template_id: string
  connection_id: string
  audience: string
  variables: string
  body: string | null
  /** The template's WhatsApp template (JSON {name, language}), snapshotted with the body at start. */
  whatsapp: string | null
  /** Media sent with every message (a WhatsApp template's media header). */
  media_id: string | null
  /** JSON SendWindow (window.ts), or null: any time. */
  send_window: string | null
  status: CampaignStatus
  paused_reason: PausedReason | null
  scheduled_at: number | null
  started_at: number | null
  finished_at: number | null
  created_at: number
  updated_at: number
  deleted_at: number | null
  /** While the audience is being frozen: the last phone frozen so far ('' before the first slice); else null. */
  freeze_after: string | null
}

export type SkippedReason = (typeof SKIPPED_REASONS)[number]

export interface RecipientRow {
  seq: number
  campaign_id: string
  contact_id: string
  phone: string
  status: 'pending' | 'released' | 'skipped'
  message_id: string | null
  skipped_reason: SkippedReason | null
  updated_at: number
}

export interface Audience {
  metadata?: Record<string, string | number | boolean>
}

export interface Counts {
  total: number
  queued: number
  sent: number
  delivered: number
  read: number
  failed: number
  skipped: number
}

/**
 * The condition selecting the audience's contacts (alias c), in each dialect, and its parameters
 * (the same for both): opted in, not suppressed, and each metadata filter equal in value and JSON
 * type (true ≠ 1 ≠ "1"). A filter's key becomes the JSON path `$."key"` (keys are letters, digits,
 * dots, dashes and underscores only), which both SQLite's JSON functions and PostgreSQL's jsonpath read.
 */
function audienceWhere(workspaceId: string, audience: Audience): { sqlite: string; pg: string; params: Param[] } {
  const lite = ['c.workspace_id = ?', "c.consent_status = 'opted_in'", 'NOT EXISTS (SELECT 1 FROM suppressions s WHERE s.workspace_id = c.workspace_id AND s.phone = c.phone)']
  const pg = [...lite]
  const params: Param[] = [workspaceId]
  const at = 'jsonb_path_query_first(c.metadata::jsonb, ?::jsonpath)'
  for (const [key, value] of Object.entries(audience.metadata ?? {})) {
    const path = `$."${key}"`
    if (typeof value === 'boolean') {
      // SQLite's json_type names a boolean by its value; PostgreSQL's JSON true reads as 'true'
      lite.push('json_type(c.metadata, ?) = ?')
      pg.push(`${at}::text = ?::text`)
      params.push(path, value ? 'true' : 'false')
    } else if (typeof value === 'number') {
      lite.push("json_type(c.metadata, ?) IN ('integer', 'real') AND json_extract(c.metadata, ?) = ?")
      pg.push(`jsonb_typeof(${at}) = 'number' AND ${at}::numeric = ?::numeric`)
      params.push(path, path, value)
    } else {
      lite.push("json_type(c.metadata, ?) = 'text' AND json_extract(c.metadata, ?) = ?")
      pg.push(`jsonb_typeof(${at}) = 'string' AND ${at} #>> '{}' = ?::text`)
      params.push(path, path, value)
    }
  }
  return { sqlite: lite.join(' AND '), pg: pg.join(' AND '), params }
}

/**
 * The running campaigns of a number, oldest start first: the pacer's campaign lane asks on every
 * release. Served by the partial index campaigns_running (migration 0009), whose condition it
 * states word for word — SQLite uses a partial index only then — with no scan and no sort.
 */
export const RUNNING_FOR_CONNECTION = "SELECT * FROM campaigns WHERE connection_id = ? AND status = 'running' AND deleted_at IS NULL ORDER BY started_at, id"

const INSERT_COLUMNS = ['id', 'workspace_id', 'name', 'template_id', 'connection_id', 'audience', 'variables', 'body', 'media_id', 'send_window', 'status', 'scheduled_at', 'started_at', 'finished_at', 'created_at', 'updated_at'] as const

const Q = {
  insert: stmt(`INSERT INTO campaigns (${INSERT_COLUMNS.join(', ')}, deleted_at) VALUES (${INSERT_COLUMNS.map(() => '?').join(', ')}, NULL)`),
  get: stmt('SELECT * FROM campaigns WHERE id = ? AND workspace_id = ? AND deleted_at IS NULL'),
  getAny: stmt('SELECT * FROM campaigns WHERE id = ?'),
  list: stmt('SELECT * FROM campaigns WHERE workspace_id = ? AND deleted_at IS NULL ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?'),
  count: stmt('SELECT COUNT(*) AS n FROM campaigns WHERE workspace_id = ? AND deleted_at IS NULL'),
  running: stmt(RUNNING_FOR_CONNECTION),
  nextPending: stmt("SELECT * FROM campaign_recipients WHERE campaign_id = ? AND status = 'pending' ORDER BY seq LIMIT 1"),
  // a recipient leaves `pending` once: one a cancel on another instance skipped meanwhile is not released
  release: stmt("UPDATE campaign_recipients SET status = 'released', message_id = ?, updated_at = ? WHERE seq = ? AND status = 'pending'"),
  skip: stmt("UPDATE campaign_recipients SET status = 'skipped', skipped_reason = ?, updated_at = ? WHERE seq = ? AND status = 'pending'"),
  skipAll: stmt("UPDATE campaign_recipients SET status = 'skipped', skipped_reason = ?, updated_at = ? WHERE campaign_id = ? AND status = 'pending'"),
  // whether any is left, not how many: counting a campaign's 100,000 pending recipients took ~5 ms,
  // once for every message of it that settled
  pending: stmt("SELECT 1 AS yes FROM campaign_recipients WHERE campaign_id = ? AND status = 'pending' LIMIT 1"),
  inFlight: stmt("SELECT 1 AS yes FROM messages WHERE campaign_id = ? AND status IN ('queued', 'sending') LIMIT 1"),
  // kept by triggers (migration 0031): joining every recipient to its message took 28-55 ms for a campaign of 90,000
  counts: stmt('SELECT bucket, CAST(SUM(n) AS BIGINT) AS n FROM campaign_counts WHERE campaign_id = ? GROUP BY bucket'),
  // in seq order straight from campaign_recipients_order (migration 0030), no sort
  recipients: stmt(
    'SELECT r.*, m.status AS message_status FROM campaign_recipients r INDEXED BY campaign_recipients_order LEFT JOIN messages m ON m.id = r.message_id WHERE r.campaign_id = ? ORDER BY r.seq LIMIT ? OFFSET ?',
    'SELECT r.*, m.status AS message_status FROM campaign_recipients r LEFT JOIN messages m ON m.id = r.message_id WHERE r.campaign_id = $1 ORDER BY r.seq LIMIT $2 OFFSET $3',
  ),
  activeConnections: stmt("SELECT DISTINCT connection_id FROM campaigns WHERE status = 'running' AND deleted_at IS NULL"),
  scheduled: stmt("SELECT * FROM campaigns WHERE status = 'scheduled' AND deleted_at IS NULL"),
  runningIds: stmt("SELECT id FROM campaigns WHERE status = 'running' AND deleted_at IS NULL"),
  windowed: stmt("SELECT * FROM campaigns WHERE status = 'running' AND send_window IS NOT NULL AND deleted_at IS NULL"),
  waiting: stmt("SELECT * FROM campaigns WHERE status = 'paused' AND paused_reason = 'allowance_exhausted' AND deleted_at IS NULL"),
  ofContact: stmt('SELECT c.id, c.name, c.status AS campaign_status, r.status, r.skipped_reason, r.message_id FROM campaign_recipients r JOIN campaigns c ON c.id = r.campaign_id WHERE r.contact_id = ? ORDER BY r.seq'),
  idsOf: stmt('SELECT DISTINCT campaign_id FROM campaign_recipients WHERE contact_id = ?'),
  removeRecipient: stmt('DELETE FROM campaign_recipients WHERE contact_id = ?'),
  byStatus: stmt('SELECT status, COUNT(*) AS n FROM campaigns WHERE deleted_at IS NULL GROUP BY status ORDER BY status'),
  pendingFor: stmt("SELECT COUNT(*) AS n FROM campaign_recipients r JOIN campaigns c ON c.id = r.campaign_id WHERE c.connection_id = ? AND c.status = 'running' AND r.status = 'pending'"),
  unfinishedFor: stmt("SELECT * FROM campaigns WHERE connection_id = ? AND status IN ('draft', 'scheduled', 'running', 'paused') AND deleted_at IS NULL"),
  freezing: stmt('SELECT * FROM campaigns WHERE freeze_after IS NOT NULL'),
  edge: stmt('SELECT phone FROM contacts WHERE workspace_id = ? AND phone > ? ORDER BY phone LIMIT 1 OFFSET ?'),
}

export class CampaignStore {
  private readonly updates = new Map<string, Statement>()

  /** `db`: the engine, for reads outside a write. */
  constructor(private readonly db: Queries) {}

  async insert(tx: Queries, row: CampaignRow) {
    await tx.run(Q.insert, ...INSERT_COLUMNS.map((c) => row[c]))
  }
  /**
   * Write the changed columns of a campaign (one statement per set of columns, made once); with
   * `from`, only while those columns still hold those values (what the change was decided from:
   * a change another write made meanwhile is not written over). Whether it was written.
   */
  async update(tx: Queries, id: string, fields: Partial<CampaignRow>, from: Partial<CampaignRow> = {}): Promise<boolean> {
    const keys = Object.keys(fields) as (keyof CampaignRow)[]
    const checks = Object.keys(from) as (keyof CampaignRow)[]
    const key = `${keys.join(',')}|${checks.join(',')}`
    let s = this.updates.get(key)
    if (!s) {
      const text = (same: string) => `UPDATE campaigns SET ${keys.map((k) => `${k} = ?`).join(', ')} WHERE id = ?${checks.map((k) => ` AND ${k} ${same} ?`).join('')}`
      this.updates.set(key, (s = stmt(text('IS'), pgPlaceholders(text('IS NOT DISTINCT FROM')))))
    }
    return (await tx.run(s, ...keys.map((k) => fields[k] as Param), id, ...checks.map((k) => from[k] as Param))) > 0
  }
  get(workspaceId: string, id: string, q: Queries = this.db) {
    return q.get<CampaignRow>(Q.get, id, workspaceId)
  }
  /** Running campaigns that have a send window. */
  runningWithWindow() {
    return this.db.all<CampaignRow>(Q.windowed)
  }
  getAny(id: string, q: Queries = this.db) {
    return q.get<CampaignRow>(Q.getAny, id)
  }
  async list(workspaceId: string, limit: number, offset: number) {
    const [rows, count] = await Promise.all([this.db.all<CampaignRow>(Q.list, workspaceId, limit, offset), this.db.get<{ n: number }>(Q.count, workspaceId)])
    return { rows, total: count?.n ?? 0 }
  }
  running(connectionId: string, q: Queries = this.db) {
    return q.all<CampaignRow>(Q.running, connectionId)
  }
  nextPending(campaignId: string, q: Queries = this.db) {
    return q.get<RecipientRow>(Q.nextPending, campaignId)
  }
  /** The recipient released as `messageId`, if still pending; whether it was. */
  async released(tx: Queries, seq: number, messageId: string, at: number): Promise<boolean> {
    return (await tx.run(Q.release, messageId, at, seq)) > 0
  }
  async skip(tx: Queries, seq: number, reason: string, at: number) {
    await tx.run(Q.skip, reason, at, seq)
  }
  async skipAllPending(tx: Queries, campaignId: string, reason: string, at: number) {
    await tx.run(Q.skipAll, reason, at, campaignId)
  }
  /** Whether a recipient of the campaign is still pending. */
  async hasPending(campaignId: string, q: Queries = this.db): Promise<boolean> {
    return (await q.get(Q.pending, campaignId)) !== null
  }
  /** Whether a message of the campaign is still queued or being sent. */
  async hasInFlight(campaignId: string, q: Queries = this.db): Promise<boolean> {
    return (await q.get(Q.inFlight, campaignId)) !== null
  }
  /** The campaigns the contact is a recipient of, with its place in each, in the order it was frozen into them. */
  ofContact(contactId: string) {
    return this.db.all<{ id: string; name: string; campaign_status: CampaignStatus; status: RecipientRow['status']; skipped_reason: SkippedReason | null; message_id: string | null }>(Q.ofContact, contactId)
  }
  /** The ids of the campaigns the contact is a recipient of. */
  async campaignIdsOf(contactId: string, q: Queries = this.db): Promise<string[]> {
    return (await q.all<{ campaign_id: string }>(Q.idsOf, contactId)).map((r) => r.campaign_id)
  }
  /** The contact leaves every campaign's recipients (each leaves its campaign's counts as its message's status is now). */
  async removeRecipient(tx: Queries, contactId: string) {
    await tx.run(Q.removeRecipient, contactId)
  }
  /** For /metrics: campaigns by status. */
  countByStatus() {
    return this.db.all<{ status: string; n: number }>(Q.byStatus)
  }
  /** Recipients still to be released by the number's running campaigns. */
  async pendingFor(connectionId: string): Promise<number> {
    return (await this.db.get<{ n: number }>(Q.pendingFor, connectionId))?.n ?? 0
  }
  async counts(campaignId: string, q: Queries = this.db): Promise<Counts> {
    const counts: Counts = { total: 0, queued: 0, sent: 0, delivered: 0, read: 0, failed: 0, skipped: 0 }
    for (const { bucket, n } of await q.all<{ bucket: keyof Counts; n: number }>(Q.counts, campaignId)) {
      counts[bucket] = n
      counts.total += n // every recipient is in one bucket
    }
    return counts
  }
  async recipients(campaignId: string, limit: number, offset: number) {
    const [rows, counts] = await Promise.all([this.db.all<RecipientRow & { message_status: MessageStatus | null }>(Q.recipients, campaignId, limit, offset), this.counts(campaignId)])
    return { rows, total: counts.total }
  }
  async connectionsWithRunning(): Promise<string[]> {
    return (await this.db.all<{ connection_id: string }>(Q.activeConnections)).map((r) => r.connection_id)
  }
  /** Ids of every running campaign. */
  async runningIds(): Promise<string[]> {
    return (await this.db.all<{ id: string }>(Q.runningIds)).map((r) => r.id)
  }
  scheduled() {
    return this.db.all<CampaignRow>(Q.scheduled)
  }
  /** Campaigns the pacer paused for the allowance (all workspaces; a handful at most). */
  waitingForAllowance() {
    return this.db.all<CampaignRow>(Q.waiting)
  }
  /** Unfinished campaigns that send through a number. */
  unfinishedFor(connectionId: string, q: Queries = this.db) {
    return q.all<CampaignRow>(Q.unfinishedFor, connectionId)
  }

  /**
   * Freeze the next slice of the audience into recipients: the workspace's next `slice` contacts
   * after the phone `after`, in phone order through the (workspace_id, phone) index, those of them
   * in the audience and created by `until` (the start). Returns the last phone of the slice, or
   * null when it was the last.
   */
  async freezeSlice(tx: Queries, campaignId: string, workspaceId: string, audience: Audience, after: string, until: number, at: number, slice: number): Promise<string | null> {
    const edge = (await tx.get<{ phone: string }>(Q.edge, workspaceId, after, slice - 1))?.phone ?? null
    const where = audienceWhere(workspaceId, audience)
    const text = (cond: string) =>
      `INSERT INTO campaign_recipients (campaign_id, contact_id, phone, status, updated_at) SELECT ?, c.id, c.phone, 'pending', ? FROM contacts c
       WHERE ${cond} AND c.phone > ?${edge === null ? '' : ' AND c.phone <= ?'} AND c.created_at <= ? ORDER BY c.phone ON CONFLICT DO NOTHING`
    // (made for this call: the audience decides the text; the engine keeps no statement it is not given again)
    await tx.run(stmt(text(where.sqlite), pgPlaceholders(text(where.pg))), campaignId, at, ...where.params, after, ...(edge === null ? [] : [edge]), until)
    return edge
  }

  /** Campaigns whose audience is still being frozen (a start cut off by a restart or a failed write). */
  freezing() {
    return this.db.all<CampaignRow>(Q.freezing)
  }

  /**
   * How many contacts an audience holds now, and a sample of them (the `sample` with the newest
   * activity). One walk over the workspace's contacts in slices of `slice` through its
   * (workspace_id, phone) index, each slice testing the audience's conditions on its rows and
   * keeping its newest matches, with requests served between: counted in one statement, 1,000,000
   * contacts held the server 0.45-0.8 s, and a sample of a filter that matched nobody read them all.
   */
  async preview(workspaceId: string, audience: Audience, sample: number, slice = 50_000) {
    const where = audienceWhere(workspaceId, audience)
    const step = stmt(
      `WITH s AS MATERIALIZED (
         SELECT c.id, c.phone, c.last_activity_at AS at, (${where.sqlite}) AS ok FROM contacts c
         WHERE c.workspace_id = ? AND c.phone > ? ORDER BY c.phone LIMIT ?)
       SELECT (SELECT COUNT(*) FROM s) AS seen, (SELECT COALESCE(SUM(ok), 0) FROM s) AS n, (SELECT MAX(phone) FROM s) AS last,
         (SELECT json_group_array(json_array(id, at)) FROM (SELECT id, at FROM s WHERE ok ORDER BY at DESC LIMIT ?)) AS newest`,
      pgPlaceholders(`WITH s AS MATERIALIZED (
         SELECT c.id, c.phone, c.last_activity_at AS at, (${where.pg}) AS ok FROM contacts c
         WHERE c.workspace_id = ? AND c.phone > ? ORDER BY c.phone LIMIT ?)
       SELECT (SELECT COUNT(*) FROM s) AS seen, (SELECT COUNT(*) FROM s WHERE ok) AS n, (SELECT MAX(phone) FROM s) AS last,
         (SELECT COALESCE(json_agg(json_build_array(id, at))::text, '[]') FROM (SELECT id, at FROM s WHERE ok ORDER BY at DESC LIMIT ?) t) AS newest`),
    )
    let count = 0
    let newest: [string, number][] = []
    for (let after = ''; ; ) {
      const r = (await this.db.get<{ seen: number; n: number; last: string | null; newest: string }>(step, ...where.params, workspaceId, after, slice, sample))!
      count += r.n
      newest = [...newest, ...(JSON.parse(r.newest) as [string, number][])].sort((a, b) => b[1] - a[1]).slice(0, sample)
      if (r.seen < slice || r.last === null) break
      after = r.last
      await nextTurn()
    }
    if (newest.length === 0) return { count, rows: [] }
    const rows = await this.db.all<ContactRow>(stmt(`SELECT * FROM contacts WHERE id IN (${newest.map(() => '?').join(', ')})`), ...newest.map(([id]) => id))
    const order = new Map(newest.map(([id], i) => [id, i]))
    rows.sort((a, b) => order.get(a.id)! - order.get(b.id)!)
    return { count, rows }
  }
}
