/** Message log, queue and usage SQL. */
import type { Database } from 'bun:sqlite'

export type MessageStatus = 'queued' | 'sending' | 'sent' | 'delivered' | 'read' | 'failed'

export interface MessageRow {
  seq: number
  id: string
  workspace_id: string
  connection_id: string
  contact_id: string | null
  group_id: string | null
  direction: 'inbound' | 'outbound'
  status: MessageStatus
  recipient: string | null
  sender: string | null
  body: string | null
  attachments: string
  error_code: string | null
  error_message: string | null
  external_id: string | null
  created_at: number
  updated_at: number
  sending_at: number | null
  sent_at: number | null
  delivered_at: number | null
  read_at: number | null
  failed_at: number | null
  campaign_id: string | null
  /** JSON {name, language, parameters}: a network template to send in place of the text, or null. */
  network_template: string | null
  /** 1 for a marketing template sent one-to-one: it leaves only while the recipient is opted in. */
  opt_in_required: number
  /** Inbound: the id of our message it answers (a reply or a button tap), or null. */
  reply_to: string | null
}

export type NewMessage = Omit<MessageRow, 'seq'>

const STATUSES = ['queued', 'sending', 'sent', 'delivered', 'read', 'failed'] as const
const DIRECTIONS = ['inbound', 'outbound'] as const
const BY_DIRECTION_STATUS = 'SELECT * FROM messages INDEXED BY messages_log_direction_status WHERE workspace_id = $ws'

/**
 * The log's query for a filter, newest first once ORDER BY seq DESC is added. No filter walks
 * (workspace, seq); a direction or status alone is the union of the (workspace, direction,
 * status, seq) ranges it covers, which SQLite merges in seq order — a page reads only its rows
 * (migration 0008 dropped the indexes these filters once had of their own).
 */
function listSql(filter: { direction?: string; status?: string }): string {
  if (filter.direction && filter.status) return `${BY_DIRECTION_STATUS} AND direction = $direction AND status = $status`
  if (filter.direction) return STATUSES.map((s) => `${BY_DIRECTION_STATUS} AND direction = $direction AND status = '${s}'`).join(' UNION ALL ')
  if (filter.status) return DIRECTIONS.map((d) => `${BY_DIRECTION_STATUS} AND direction = '${d}' AND status = $status`).join(' UNION ALL ')
  return 'SELECT * FROM messages WHERE workspace_id = $ws'
}

export class MessageRepo {
  private insertStmt
  private byIdStmt
  private byIdAnyStmt
  private headStmt
  private queuedConnsStmt
  private releasesStmt
  private inFlightStmt
  private expiredStmt
  private queuedForConnStmt
  private byExternalStmt
  private byPartStmt
  private addPartStmt
  private usageGet
  private usageAdd
  private lists = new Map<string, ReturnType<Database['query']>>()
  private counts = new Map<string, ReturnType<Database['query']>>()

  constructor(private readonly db: Database) {
    this.insertStmt = db.query(
      `INSERT INTO messages (id, workspace_id, connection_id, contact_id, group_id, campaign_id, direction, status, recipient, sender, body, attachments, error_code, error_message, external_id, created_at, updated_at, sending_at, sent_at, delivered_at, read_at, failed_at, network_template, opt_in_required, reply_to)
       VALUES ($id, $workspace_id, $connection_id, $contact_id, $group_id, $campaign_id, $direction, $status, $recipient, $sender, $body, $attachments, $error_code, $error_message, $external_id, $created_at, $updated_at, $sending_at, $sent_at, $delivered_at, $read_at, $failed_at, $network_template, $opt_in_required, $reply_to)`,
    )
    this.byIdStmt = db.query<MessageRow, [string, string]>('SELECT * FROM messages WHERE id = ? AND workspace_id = ?')
    this.byIdAnyStmt = db.query<MessageRow, [string]>('SELECT * FROM messages WHERE id = ?')
    this.headStmt = db.query<MessageRow, [string, number]>("SELECT * FROM messages WHERE connection_id = ? AND status = 'queued' ORDER BY seq LIMIT ?")
    this.queuedConnsStmt = db.query<{ connection_id: string }, []>("SELECT DISTINCT connection_id FROM messages WHERE status = 'queued'")
    this.releasesStmt = db.query<{ sending_at: number }, [string, number]>('SELECT sending_at FROM messages WHERE connection_id = ? AND sending_at >= ? ORDER BY sending_at')
    this.inFlightStmt = db.query<MessageRow, []>("SELECT * FROM messages WHERE status = 'sending'")
    // through the queue's own index: the log's other messages are never read (a walk of the whole
    // table in seq order took 0.4 s a minute with 1,000,000 messages stored)
    this.expiredStmt = db.query<MessageRow, [number, number]>("SELECT * FROM messages INDEXED BY messages_queue WHERE status = 'queued' AND created_at <= ? LIMIT ?")
    this.queuedForConnStmt = db.query<MessageRow, [string, number]>("SELECT * FROM messages WHERE connection_id = ? AND status = 'queued' LIMIT ?")
    this.byExternalStmt = db.query<MessageRow, [string, string]>('SELECT * FROM messages WHERE connection_id = ? AND external_id = ?')
    this.byPartStmt = db.query<MessageRow, [string, string]>('SELECT m.* FROM message_parts p JOIN messages m ON m.id = p.message_id WHERE p.connection_id = ? AND p.external_id = ?')
    this.addPartStmt = db.query('INSERT OR IGNORE INTO message_parts (connection_id, external_id, message_id) VALUES (?, ?, ?)')
    this.usageGet = db.query<{ messages: number }, [string, string]>('SELECT messages FROM usage_monthly WHERE workspace_id = ? AND month = ?')
    this.usageAdd = db.query('INSERT INTO usage_monthly (workspace_id, month, messages) VALUES (?, ?, 1) ON CONFLICT (workspace_id, month) DO UPDATE SET messages = messages + 1')
  }

  /** For /metrics: the kept counts, the queue per number and the sends in flight (through messages_queue and messages_in_flight), and the outcome counts. */
  gauges() {
    const db = this.db
    return {
      counts: db.query<{ workspace_id: string; direction: string; status: string; n: number }, []>('SELECT workspace_id, direction, status, n FROM message_counts WHERE n > 0 ORDER BY workspace_id, direction, status').all(),
      queued: db.query<{ connection_id: string; n: number }, []>("SELECT connection_id, COUNT(*) AS n FROM messages WHERE status = 'queued' GROUP BY connection_id").all(),
      sending: db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM messages WHERE status = 'sending'").get()!.n,
      outcomes: db.query<{ status: string; code: string; n: number }, []>('SELECT status, code, n FROM message_outcome_counts ORDER BY status, code').all(),
    }
  }

  /** The contact's messages after `afterSeq`, in order, at most `limit` (through messages_contact: each batch starts where the last ended). */
  ofContact(contactId: string, afterSeq: number, limit: number) {
    return this.db.query<MessageRow, [string, number, number]>('SELECT * FROM messages INDEXED BY messages_contact WHERE contact_id = ? AND seq > ? ORDER BY seq LIMIT ?').all(contactId, afterSeq, limit)
  }

  /** What an erasure needs of each of the contact's messages. */
  erasureRowsOf(contactId: string) {
    return this.db.query<{ id: string; direction: 'inbound' | 'outbound'; status: MessageStatus; attachments: string }, [string]>('SELECT id, direction, status, attachments FROM messages WHERE contact_id = ?').all(contactId)
  }

  /**
   * The contact's messages keep their status and times for the counts, and lose everything about
   * the person: contact, campaign, text, files, their number (and in an error message).
   */
  redactContact(contactId: string, phone: string, now: number) {
    this.db
      .query(
        `UPDATE messages SET contact_id = NULL, campaign_id = NULL, body = NULL, attachments = '[]', network_template = NULL, updated_at = ?1,
           recipient = CASE direction WHEN 'outbound' THEN NULL ELSE recipient END,
           sender = CASE direction WHEN 'inbound' THEN NULL ELSE sender END,
           error_message = replace(error_message, ?3, '[erased number]')
         WHERE contact_id = ?2`,
      )
      .run(now, contactId, phone)
  }

  /** How many messages wait in the number's queue. */
  queuedCount(connectionId: string): number {
    return this.db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM messages WHERE connection_id = ? AND status = 'queued'").get(connectionId)!.n
  }

  /** Outbound messages of the workspace that reached `step` since `since` (ms), per UTC day (YYYY-MM-DD). */
  perDay(workspaceId: string, step: 'sent' | 'delivered' | 'read' | 'failed', since: number) {
    const col = `${step}_at`
    return this.db
      .query<{ day: string; n: number }, [string, number]>(`SELECT strftime('%Y-%m-%d', ${col} / 1000, 'unixepoch') AS day, COUNT(*) AS n FROM messages WHERE workspace_id = ? AND direction = 'outbound' AND ${col} >= ? GROUP BY day`)
      .all(workspaceId, since)
  }

  insert(row: NewMessage) {
    this.insertStmt.run(row as any)
  }
  get(workspaceId: string, id: string) {
    return this.byIdStmt.get(id, workspaceId)
  }
  /** A message by the network's id for it. */
  byExternal(connectionId: string, externalId: string) {
    return this.byExternalStmt.get(connectionId, externalId)
  }
  /** A message by the network's id for one of its later parts (see addParts). */
  byLaterPart(connectionId: string, externalId: string) {
    return this.byPartStmt.get(connectionId, externalId)
  }
  /** A message by the network's id for any of its parts. */
  byAnyPart(connectionId: string, externalId: string) {
    return this.byExternal(connectionId, externalId) ?? this.byLaterPart(connectionId, externalId)
  }
  /** Record the network's ids of a message's later parts. */
  addParts(connectionId: string, messageId: string, externalIds: string[]) {
    for (const id of externalIds) this.addPartStmt.run(connectionId, id, messageId)
  }
  getAny(id: string) {
    return this.byIdAnyStmt.get(id)
  }
  /** The oldest queued messages of a number (its FIFO head). */
  head(connectionId: string, limit: number) {
    return this.headStmt.all(connectionId, limit)
  }
  connectionsWithQueue() {
    return this.queuedConnsStmt.all().map((r) => r.connection_id)
  }
  /** Release times of a number since `since` (for the trailing hour/day caps). */
  releasesSince(connectionId: string, since: number) {
    return this.releasesStmt.all(connectionId, since).map((r) => r.sending_at)
  }
  inFlight() {
    return this.inFlightStmt.all()
  }
  queuedBefore(cutoff: number, limit: number) {
    return this.expiredStmt.all(cutoff, limit)
  }
  /** Up to `limit` of a number's queued messages. */
  queuedFor(connectionId: string, limit: number) {
    return this.queuedForConnStmt.all(connectionId, limit)
  }
  /** Write the changed columns of a message. */
  update(id: string, fields: Partial<MessageRow>) {
    const keys = Object.keys(fields)
    const sql = `UPDATE messages SET ${keys.map((k) => `${k} = $${k}`).join(', ')} WHERE id = $id`
    this.db.query(sql).run({ ...fields, id } as any)
  }
  usage(workspaceId: string, month: string) {
    return this.usageGet.get(workspaceId, month)?.messages ?? 0
  }
  countUsage(workspaceId: string, month: string) {
    this.usageAdd.run(workspaceId, month)
  }

  /**
   * A page of the log, newest first, with optional direction/status filters; with a contact, that
   * contact's messages only (read through its index; counted there too).
   */
  list(workspaceId: string, filter: { direction?: string; status?: string; contactId?: string }, limit: number, offset: number) {
    const where = ['workspace_id = $ws']
    if (filter.direction) where.push('direction = $direction')
    if (filter.status) where.push('status = $status')
    if (filter.contactId) where.unshift('contact_id = $contact')
    const key = where.join(' AND ')
    let q = this.lists.get(key)
    if (!q) {
      const from = filter.contactId ? `SELECT * FROM messages INDEXED BY messages_contact WHERE ${key}` : listSql(filter)
      q = this.db.query(`${from} ORDER BY seq DESC LIMIT $limit OFFSET $offset`)
      this.lists.set(key, q)
    }
    let c = this.counts.get(key)
    if (!c) {
      // message_counts is kept by triggers (migration 0003): at most 12 rows per workspace
      c = this.db.query(filter.contactId ? `SELECT COUNT(*) AS n FROM messages INDEXED BY messages_contact WHERE ${key}` : `SELECT COALESCE(SUM(n), 0) AS n FROM message_counts WHERE ${key}`)
      this.counts.set(key, c)
    }
    const params: Record<string, unknown> = { ws: workspaceId }
    if (filter.direction) params.direction = filter.direction
    if (filter.status) params.status = filter.status
    if (filter.contactId) params.contact = filter.contactId
    const rows = q.all({ ...params, limit, offset } as any) as MessageRow[]
    const total = (c.get(params as any) as { n: number }).n
    return { rows, total }
  }
}
