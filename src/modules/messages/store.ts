/** The message log, the queues and the monthly usage on the store seam (docs/design/two-engines.md). */
import { type Engine, insertStatement, MANY_CALLS, mergeable, pgPlaceholders, type Queries, type Statement, stmt, TURNS, turnOf } from '../../db/engine'
import type { AwaitingReport } from '../../network/driver'

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
  /** On rows read back: 1 for a send a graceful stop handed back before the network had it (migration 0045). */
  resend?: number
}

export type NewMessage = Omit<MessageRow, 'seq' | 'resend'>

const STATUSES = ['queued', 'sending', 'sent', 'delivered', 'read', 'failed'] as const
const DIRECTIONS = ['inbound', 'outbound'] as const
const COLUMNS = [
  'id', 'workspace_id', 'connection_id', 'contact_id', 'group_id', 'campaign_id', 'direction', 'status', 'recipient', 'sender', 'body', 'attachments', 'error_code', 'error_message', 'external_id',
  'created_at', 'updated_at', 'sending_at', 'sent_at', 'delivered_at', 'read_at', 'failed_at', 'network_template', 'opt_in_required', 'reply_to',
] as const satisfies readonly (keyof NewMessage)[]
/** The columns that hold numbers (times in ms, flags): BIGINT on PostgreSQL (resend INTEGER, never inserted). */
const NUMBER_COLUMNS = new Set<string>(['created_at', 'updated_at', 'sending_at', 'sent_at', 'delivered_at', 'read_at', 'failed_at', 'opt_in_required', 'resend'])

/**
 * PostgreSQL's merged form of a write to one message by its id, the calls' parameter `idAt`
 * (see mergeable): `set` and `where` read the calls' other parameters from `calls.v`. The rows are
 * found through the id's index (= ANY of the ids: a join with the calls could walk the table), a
 * message named by several calls is written by the first only (the others then read it again, as
 * after any write that did not land), and each landed row names its call.
 */
const updateManyById = (idAt: number, set: string, where: string) =>
  `WITH calls AS (SELECT DISTINCT ON (calls.v->>${idAt}) calls.v, calls.n FROM ${MANY_CALLS} ORDER BY calls.v->>${idAt}, calls.n)
   UPDATE messages AS m SET ${set}
   FROM calls WHERE m.id = ANY (ARRAY(SELECT calls.v->>${idAt} FROM calls)) AND m.id = calls.v->>${idAt} AND ${where}
   RETURNING calls.n - 1 AS call_`

export type Filter = { direction?: string; status?: string; contactId?: string }

/** The operator's search of the log: a filter, and text in the body and/or a time range of creation. */
export type Search = Filter & { text?: string; from?: number; to?: number }

/** How many messages a search counts at most: as deep as a list can be paged (10,000 items). */
export const SEARCH_COUNT_MAX = 10_000

/**
 * A search's page and its count, newest first. The body is matched without regard to case
 * (ASCII on SQLite's LIKE, Unicode on PostgreSQL's ILIKE), `%`, `_` and `\` in the text taken as
 * themselves; the count stops at SEARCH_COUNT_MAX, so a search never walks a whole long log twice.
 */
function searchStatements(f: Search): { page: Statement; count: Statement } {
  const texts = (mark: string) => {
    let n = 0
    const p = () => (mark === '?' ? '?' : `$${++n}`)
    const where = [`workspace_id = ${p()}`]
    if (f.contactId) where.push(`contact_id = ${p()}`)
    if (f.direction) where.push(`direction = ${p()}`)
    if (f.status) where.push(`status = ${p()}`)
    if (f.from !== undefined) where.push(`created_at >= ${p()}`)
    if (f.to !== undefined) where.push(`created_at < ${p()}`)
    if (f.text) where.push(`body ${mark === '?' ? 'LIKE' : 'ILIKE'} ${p()} ESCAPE '\\'`)
    const key = where.join(' AND ')
    const limit = p()
    const offset = p()
    const count = `SELECT COUNT(*) AS n FROM (SELECT 1 FROM messages WHERE ${key} LIMIT ${SEARCH_COUNT_MAX}) AS found`
    return { page: `SELECT * FROM messages WHERE ${key} ORDER BY seq DESC LIMIT ${limit} OFFSET ${offset}`, count }
  }
  const lite = texts('?')
  const pg = texts('$')
  return { page: stmt(lite.page, pg.page), count: stmt(lite.count, pg.count) }
}

/**
 * The log's query for a filter, newest first, and its count. On SQLite: no filter walks
 * (workspace, seq); a direction or status alone is the union of the (workspace, direction,
 * status, seq) ranges it covers, which SQLite merges in seq order — a page reads only its rows
 * (migration 0008 dropped the indexes these filters once had of their own). PostgreSQL reads the
 * same ranges, of that index ordered by -seq, and a contact's through (contact, workspace, -seq)
 * (migrations/pg/0046_log_pages.sql); with no filter, it walks (workspace, seq). Placeholders:
 * the workspace, then the filter's values in the order direction, status, contact; then limit
 * and offset. (Exported for test/stores-log.test.ts, which reads the plan of a page.)
 */
export function listStatements(filter: Filter): { page: Statement; count: Statement } {
  let n = 0
  const at = { ws: ++n, direction: filter.direction ? ++n : 0, status: filter.status ? ++n : 0, contact: filter.contactId ? ++n : 0 }
  const limit = ++n
  const offset = ++n
  const texts = (mark: string) => {
    const p = (i: number) => `${mark}${i}`
    const where = [`workspace_id = ${p(at.ws)}`]
    if (at.direction) where.push(`direction = ${p(at.direction)}`)
    if (at.status) where.push(`status = ${p(at.status)}`)
    if (at.contact) where.unshift(`contact_id = ${p(at.contact)}`)
    const key = where.join(' AND ')
    const tail = ` ORDER BY seq DESC LIMIT ${p(limit)} OFFSET ${p(offset)}`
    // message_counts is kept by triggers (migration 0003): at most 12 rows per workspace
    // (PostgreSQL's SUM of bigints is a numeric, which would come back as text: cast back)
    const counted = at.contact ? `SELECT COUNT(*) AS n FROM messages${mark === '?' ? ' INDEXED BY messages_contact' : ''} WHERE ${key}` : `SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) AS n FROM message_counts WHERE ${key}`
    if (mark === '$') {
      if (!at.contact && !at.direction && !at.status) return { page: `SELECT * FROM messages WHERE ${key}${tail}`, count: counted }
      // through messages_contact or messages_log_direction_status, which PostgreSQL orders by -seq
      // (its migration 0046): an order no other index gives, so the planner cannot walk seq
      // backwards filtering instead, which reads every newer message when a contact's messages or
      // a status are not spread evenly over the log
      if (at.contact || (at.direction && at.status)) return { page: `SELECT * FROM messages WHERE ${key} ORDER BY -seq LIMIT ${p(limit)} OFFSET ${p(offset)}`, count: counted }
      const ranked = (more: string) => `SELECT * FROM messages WHERE workspace_id = ${p(at.ws)}${more} ORDER BY -seq`
      // one range of the index per direction and status, each as far as the page reaches, merged
      const reach = `LIMIT CAST(${p(limit)} AS BIGINT) + CAST(${p(offset)} AS BIGINT)`
      const ranges = at.direction ? STATUSES.map((s) => ` AND direction = ${p(at.direction)} AND status = '${s}'`) : DIRECTIONS.map((d) => ` AND direction = '${d}' AND status = ${p(at.status)}`)
      return { page: `SELECT * FROM (${ranges.map((r) => `(${ranked(r)} ${reach})`).join(' UNION ALL ')}) AS ranges${tail}`, count: counted }
    }
    const byDs = `SELECT * FROM messages INDEXED BY messages_log_direction_status WHERE workspace_id = ${p(at.ws)}`
    let from: string
    if (at.contact) from = `SELECT * FROM messages INDEXED BY messages_contact WHERE ${key}`
    else if (at.direction && at.status) from = `${byDs} AND direction = ${p(at.direction)} AND status = ${p(at.status)}`
    else if (at.direction) from = STATUSES.map((s) => `${byDs} AND direction = ${p(at.direction)} AND status = '${s}'`).join(' UNION ALL ')
    else if (at.status) from = DIRECTIONS.map((d) => `${byDs} AND direction = '${d}' AND status = ${p(at.status)}`).join(' UNION ALL ')
    else from = `SELECT * FROM messages WHERE ${key}`
    return { page: `${from}${tail}`, count: counted }
  }
  const lite = texts('?')
  const pg = texts('$')
  return { page: stmt(lite.page, pg.page), count: stmt(lite.count, pg.count) }
}

/**
 * Per UTC day (YYYY-MM-DD) the outbound messages that reached a step, one statement per step's
 * time column — or, for `inbound`, the messages received (by when they were written).
 */
const perDayStatement = (col: string, direction: 'outbound' | 'inbound' = 'outbound') =>
  stmt(
    `SELECT strftime('%Y-%m-%d', ${col} / 1000, 'unixepoch') AS day, COUNT(*) AS n FROM messages WHERE workspace_id = ? AND direction = '${direction}' AND ${col} >= ? GROUP BY day`,
    `SELECT to_char(to_timestamp(${col} / 1000.0) AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, COUNT(*) AS n FROM messages WHERE workspace_id = $1 AND direction = '${direction}' AND ${col} >= $2 GROUP BY day`,
  )

const Q = {
  insert: insertStatement('messages', Object.fromEntries(COLUMNS.map((c) => [c, NUMBER_COLUMNS.has(c) ? 'BIGINT' : 'TEXT']))),
  byId: stmt('SELECT * FROM messages WHERE id = ? AND workspace_id = ?'),
  byIdAny: stmt('SELECT * FROM messages WHERE id = ?'),
  head: stmt("SELECT * FROM messages WHERE connection_id = ? AND status = 'queued' ORDER BY seq LIMIT ?"),
  // queued → sending only while it is still queued: on PostgreSQL another instance's write (an
  // erasure, a removal) may have failed it since the release read it
  // (never before the message was made: one queued in the same group commit as the tick that
  // releases it was written after the tick read the clock)
  // (PostgreSQL: the claims made in one turn are one UPDATE — see updateManyById — so that a
  // release's kept counts are added once per statement, migration 0047)
  claim: mergeable(
    stmt(
      "UPDATE messages SET status = 'sending', sending_at = COALESCE(sending_at, MAX(?1, created_at)), updated_at = MAX(?1, created_at) WHERE id = ?2 AND status = 'queued'",
      "UPDATE messages SET status = 'sending', sending_at = COALESCE(sending_at, GREATEST($1, created_at)), updated_at = GREATEST($1, created_at) WHERE id = $2 AND status = 'queued' RETURNING 1 AS yes",
    ),
    updateManyById(
      1,
      "status = 'sending', sending_at = COALESCE(m.sending_at, GREATEST(CAST(calls.v->>0 AS BIGINT), m.created_at)), updated_at = GREATEST(CAST(calls.v->>0 AS BIGINT), m.created_at)",
      "m.status = 'queued'",
    ),
  ),
  markResend: stmt("UPDATE messages SET resend = 1 WHERE id = ? AND status = 'sending'"),
  takeResend: stmt("UPDATE messages SET resend = 0 WHERE id = ? AND status = 'sending' AND resend = 1"),
  // a claim as it was made (its times): still `sending` by it, not handed back, not moved on
  claimed: stmt("SELECT 1 AS yes FROM messages WHERE id = ? AND status = 'sending' AND sending_at = ? AND updated_at = ? AND resend = 0"),
  handBackClaim: stmt("UPDATE messages SET resend = 1 WHERE id = ? AND status = 'sending' AND sending_at = ? AND updated_at = ? AND resend = 0"),
  queuedConnections: stmt("SELECT DISTINCT connection_id FROM messages WHERE status = 'queued'"),
  releases: stmt('SELECT sending_at FROM messages WHERE connection_id = ? AND sending_at >= ? ORDER BY sending_at'),
  // through messages_releases too: the number's one-to-one sends since a time still without their last report
  awaitingReports: stmt("SELECT id, status, sent_at FROM messages WHERE connection_id = ? AND sending_at >= ? AND status IN ('sent', 'delivered') AND group_id IS NULL AND sent_at IS NOT NULL"),
  // through messages_releases as well: the number's sends since a time that failed, and the newest
  failuresSince: stmt("SELECT COUNT(*) AS n FROM messages WHERE connection_id = ? AND sending_at >= ? AND status = 'failed'"),
  lastFailureSince: stmt("SELECT error_code, error_message, failed_at FROM messages WHERE connection_id = ? AND sending_at >= ? AND status = 'failed' ORDER BY sending_at DESC LIMIT 1"),
  inFlight: stmt("SELECT * FROM messages WHERE status = 'sending'"),
  // through the queue's own index: the log's other messages are never read (a walk of the whole
  // table in seq order took 0.4 s a minute with 1,000,000 messages stored)
  expired: stmt("SELECT * FROM messages INDEXED BY messages_queue WHERE status = 'queued' AND created_at <= ? LIMIT ?", "SELECT * FROM messages WHERE status = 'queued' AND created_at <= $1 LIMIT $2"),
  queuedFor: stmt("SELECT * FROM messages WHERE connection_id = ? AND status = 'queued' LIMIT ?"),
  // through messages_in_flight: the few messages in `sending`
  handedBackFor: stmt("SELECT * FROM messages WHERE status = 'sending' AND resend = 1 AND connection_id = ? LIMIT ?"),
  queuedCount: stmt("SELECT COUNT(*) AS n FROM messages WHERE connection_id = ? AND status = 'queued'"),
  byExternal: stmt('SELECT * FROM messages WHERE connection_id = ? AND external_id = ?'),
  byPart: stmt('SELECT m.* FROM message_parts p JOIN messages m ON m.id = p.message_id WHERE p.connection_id = ? AND p.external_id = ?'),
  addPart: stmt('INSERT INTO message_parts (connection_id, external_id, message_id) VALUES (?, ?, ?) ON CONFLICT DO NOTHING'),
  usage: stmt('SELECT CAST(SUM(messages) AS BIGINT) AS messages FROM usage_monthly WHERE workspace_id = ? AND month = ?'),
  // a workspace's allowance is counted by one transaction at a time
  allowanceTurn: turnOf(TURNS.allowance),
  // one row per shard on PostgreSQL (migration 0038): sends on different connections never wait for one row
  countUsage: mergeable(
    stmt(
      'INSERT INTO usage_monthly (workspace_id, month, messages) VALUES (?, ?, 1) ON CONFLICT (workspace_id, month) DO UPDATE SET messages = usage_monthly.messages + 1',
      'INSERT INTO usage_monthly (workspace_id, month, shard, messages) VALUES ($1, $2, capstan_shard(), 1) ON CONFLICT (workspace_id, month, shard) DO UPDATE SET messages = usage_monthly.messages + 1',
    ),
    // merged in a PostgreSQL batch: a row once per month, with its calls added
    `INSERT INTO usage_monthly (workspace_id, month, shard, messages) SELECT calls.v->>0, calls.v->>1, capstan_shard(), COUNT(*) FROM ${MANY_CALLS} GROUP BY 1, 2
     ON CONFLICT (workspace_id, month, shard) DO UPDATE SET messages = usage_monthly.messages + excluded.messages`,
  ),
  // (on PostgreSQL through messages_contact's -seq, backwards: see listStatements)
  ofContact: stmt(
    'SELECT * FROM messages INDEXED BY messages_contact WHERE contact_id = ? AND seq > ? ORDER BY seq LIMIT ?',
    'SELECT * FROM messages WHERE contact_id = $1 AND -seq < -CAST($2 AS BIGINT) ORDER BY -seq DESC LIMIT $3',
  ),
  erasureRows: stmt('SELECT id, direction, status, attachments, resend FROM messages WHERE contact_id = ?'),
  // inside the erasure's write: the rows locked as they are read (PostgreSQL), so a release claiming
  // one waits for the erasure, or has committed and is seen as sending; SQLite's write is alone
  erasureRowsLocked: stmt('SELECT id, direction, status, attachments, resend FROM messages WHERE contact_id = ?', 'SELECT id, direction, status, attachments, resend FROM messages WHERE contact_id = $1 FOR UPDATE'),
  redact: stmt(
    `UPDATE messages SET contact_id = NULL, campaign_id = NULL, body = NULL, attachments = '[]', network_template = NULL, updated_at = ?1,
       recipient = CASE direction WHEN 'outbound' THEN NULL ELSE recipient END,
       sender = CASE direction WHEN 'inbound' THEN NULL ELSE sender END,
       error_message = replace(error_message, ?3, '[erased number]')
     WHERE contact_id = ?2`,
    `UPDATE messages SET contact_id = NULL, campaign_id = NULL, body = NULL, attachments = '[]', network_template = NULL, updated_at = $1,
       recipient = CASE direction WHEN 'outbound' THEN NULL ELSE recipient END,
       sender = CASE direction WHEN 'inbound' THEN NULL ELSE sender END,
       error_message = replace(error_message, $3, '[erased number]')
     WHERE contact_id = $2`,
  ),
  counts: stmt('SELECT workspace_id, direction, status, CAST(SUM(n) AS BIGINT) AS n FROM message_counts GROUP BY workspace_id, direction, status HAVING SUM(n) > 0 ORDER BY workspace_id, direction, status'),
  queuedPerConnection: stmt("SELECT connection_id, COUNT(*) AS n FROM messages WHERE status = 'queued' GROUP BY connection_id"),
  sending: stmt("SELECT COUNT(*) AS n FROM messages WHERE status = 'sending'"),
  outcomes: stmt('SELECT status, code, CAST(SUM(n) AS BIGINT) AS n FROM message_outcome_counts GROUP BY status, code ORDER BY status, code'),
  openWindow: stmt(
    'INSERT INTO service_windows (connection_id, phone, workspace_id, last_inbound_at) VALUES (?, ?, ?, ?) ON CONFLICT (connection_id, phone) DO UPDATE SET last_inbound_at = CASE WHEN excluded.last_inbound_at > service_windows.last_inbound_at THEN excluded.last_inbound_at ELSE service_windows.last_inbound_at END',
  ),
  lastInbound: stmt('SELECT last_inbound_at FROM service_windows WHERE connection_id = ? AND phone = ?'),
  perDay: { sent: perDayStatement('sent_at'), delivered: perDayStatement('delivered_at'), read: perDayStatement('read_at'), failed: perDayStatement('failed_at'), received: perDayStatement('created_at', 'inbound') },
}

export class MessageStore {
  private readonly lists = new Map<string, { page: Statement; count: Statement }>()
  private readonly updates = new Map<string, Statement>()

  /** `db`: the engine, for reads outside a write. */
  constructor(private readonly db: Engine) {}

  /** For /metrics: the kept counts, the queue per number and the sends in flight (through messages_queue and messages_in_flight), and the outcome counts. */
  async gauges() {
    const [counts, queued, sending, outcomes] = await Promise.all([
      this.db.all<{ workspace_id: string; direction: string; status: string; n: number }>(Q.counts),
      this.db.all<{ connection_id: string; n: number }>(Q.queuedPerConnection),
      this.db.get<{ n: number }>(Q.sending),
      this.db.all<{ status: string; code: string; n: number }>(Q.outcomes),
    ])
    return { counts, queued, sending: sending?.n ?? 0, outcomes }
  }

  /** The contact's messages after `afterSeq`, in order, at most `limit` (through messages_contact: each batch starts where the last ended). */
  ofContact(contactId: string, afterSeq: number, limit: number) {
    return this.db.all<MessageRow>(Q.ofContact, contactId, afterSeq, limit)
  }

  /** What an erasure needs of each of the contact's messages (`tx`: inside its write, the rows locked until it commits). */
  erasureRowsOf(contactId: string, tx?: Queries) {
    return (tx ?? this.db).all<{ id: string; direction: 'inbound' | 'outbound'; status: MessageStatus; attachments: string; resend: number }>(tx ? Q.erasureRowsLocked : Q.erasureRows, contactId)
  }

  /**
   * The contact's messages keep their status and times for the counts, and lose everything about
   * the person: contact, campaign, text, files, their number (and in an error message).
   */
  async redactContact(tx: Queries, contactId: string, phone: string, now: number) {
    await tx.run(Q.redact, now, contactId, phone)
  }

  /** How many messages wait in the number's queue. */
  async queuedCount(connectionId: string): Promise<number> {
    return (await this.db.get<{ n: number }>(Q.queuedCount, connectionId))?.n ?? 0
  }

  /** Outbound messages of the workspace that reached `step` since `since` (ms), per UTC day (YYYY-MM-DD). */
  perDay(workspaceId: string, step: 'sent' | 'delivered' | 'read' | 'failed' | 'received', since: number) {
    return this.db.all<{ day: string; n: number }>(Q.perDay[step], workspaceId, since)
  }

  async insert(tx: Queries, row: NewMessage) {
    await tx.run(Q.insert, ...COLUMNS.map((c) => row[c]))
  }
  get(workspaceId: string, id: string) {
    return this.db.get<MessageRow>(Q.byId, id, workspaceId)
  }
  /** A message by the network's id for it. */
  /** `phone` wrote to the number at `at` (ms): its service window runs from then (see service_windows). */
  async openWindow(tx: Queries, connectionId: string, workspaceId: string, phone: string, at: number) {
    await tx.run(Q.openWindow, connectionId, phone, workspaceId, at)
  }
  /** When `phone` last wrote to the number (ms), or null. */
  async lastInbound(connectionId: string, phone: string, q: Queries = this.db): Promise<number | null> {
    return (await q.get<{ last_inbound_at: number }>(Q.lastInbound, connectionId, phone))?.last_inbound_at ?? null
  }
  byExternal(connectionId: string, externalId: string, q: Queries = this.db) {
    return q.get<MessageRow>(Q.byExternal, connectionId, externalId)
  }
  /** A message by the network's id for one of its later parts (see addParts). */
  byLaterPart(connectionId: string, externalId: string) {
    return this.db.get<MessageRow>(Q.byPart, connectionId, externalId)
  }
  /** A message by the network's id for any of its parts. */
  async byAnyPart(connectionId: string, externalId: string) {
    return (await this.byExternal(connectionId, externalId)) ?? (await this.byLaterPart(connectionId, externalId))
  }
  /** Record the network's ids of a message's later parts. */
  async addParts(tx: Queries, connectionId: string, messageId: string, externalIds: string[]) {
    for (const id of externalIds) await tx.run(Q.addPart, connectionId, id, messageId)
  }
  getAny(id: string, q: Queries = this.db) {
    return q.get<MessageRow>(Q.byIdAny, id)
  }
  /** The oldest queued messages of a number (its FIFO head). */
  head(connectionId: string, limit: number, q: Queries = this.db) {
    return q.all<MessageRow>(Q.head, connectionId, limit)
  }
  async connectionsWithQueue(): Promise<string[]> {
    return (await this.db.all<{ connection_id: string }>(Q.queuedConnections)).map((r) => r.connection_id)
  }
  /** Release times of a number since `since` (for the trailing hour/day caps). */
  /** How many of the number's sends since `since` failed, and the newest failure's code, words and time. */
  async failuresSince(connectionId: string, since: number) {
    const [count, last] = await Promise.all([this.db.get<{ n: number }>(Q.failuresSince, connectionId, since), this.db.get<{ error_code: string | null; error_message: string | null; failed_at: number | null }>(Q.lastFailureSince, connectionId, since)])
    return { count: Number(count?.n ?? 0), last: last ?? null }
  }

  async awaitingReports(connectionId: string, since: number): Promise<AwaitingReport[]> {
    return (await this.db.all<{ id: string; status: 'sent' | 'delivered'; sent_at: number }>(Q.awaitingReports, connectionId, since)).map((r) => ({ id: r.id, status: r.status, sentAt: Number(r.sent_at) }))
  }
  async releasesSince(connectionId: string, since: number): Promise<number[]> {
    return (await this.db.all<{ sending_at: number }>(Q.releases, connectionId, since)).map((r) => r.sending_at)
  }
  /** The messages in `sending`, each with its `resend` mark. */
  inFlight() {
    return this.db.all<MessageRow>(Q.inFlight)
  }
  queuedBefore(cutoff: number, limit: number) {
    return this.db.all<MessageRow>(Q.expired, cutoff, limit)
  }
  /** Up to `limit` of a number's queued messages. */
  queuedFor(connectionId: string, limit: number) {
    return this.db.all<MessageRow>(Q.queuedFor, connectionId, limit)
  }
  /** A number's sends a graceful stop handed back (see MessageService.stopping), not yet taken on. */
  handedBackFor(connectionId: string, limit: number) {
    return this.db.all<MessageRow>(Q.handedBackFor, connectionId, limit)
  }
  /** queued → sending, if it is still queued; whether it was. */
  async claim(tx: Queries, id: string, at: number): Promise<boolean> {
    return this.landed(tx, Q.claim, at, id)
  }

  /**
   * Run a write to one message (`claim`, `update`), whether it landed: SQLite by its count;
   * PostgreSQL by the row the statement returns when it does, which its merged form can give
   * each call (a merged statement's count is the whole statement's).
   */
  private async landed(tx: Queries, s: Statement, ...params: (string | number | null)[]): Promise<boolean> {
    if (this.db.kind === 'postgres') return (await tx.get(s, ...params)) !== null
    return (await tx.run(s, ...params)) > 0
  }

  /** Mark a send the network has not got as one to hand over again (migration 0045); whether it is still sending. */
  async markResend(tx: Queries, id: string): Promise<boolean> {
    return (await tx.run(Q.markResend, id)) > 0
  }

  /** Whether the claim `row` describes (markSendingIn's row) is in the table as made. */
  async claimed(tx: Queries, row: Pick<MessageRow, 'id' | 'sending_at' | 'updated_at'>): Promise<boolean> {
    return (await tx.get(Q.claimed, row.id, row.sending_at, row.updated_at)) !== null
  }

  /** The claim `row` describes, where it is in the table as made, marked to hand over again (markResend): whether it was. */
  async handBackClaim(tx: Queries, row: Pick<MessageRow, 'id' | 'sending_at' | 'updated_at'>): Promise<boolean> {
    return (await tx.run(Q.handBackClaim, row.id, row.sending_at, row.updated_at)) > 0
  }

  /** Take a send marked to hand over again: whether this write cleared the mark (only one does). */
  async takeResend(tx: Queries, id: string): Promise<boolean> {
    return (await tx.run(Q.takeResend, id)) > 0
  }

  /**
   * Write the changed columns of a message while its status is still `from` (the one the change was
   * decided from: a status another write set meanwhile — Meta's "read" taken by another instance
   * while this one records "delivered" — is not written over). Whether it was written.
   */
  async update(tx: Queries, id: string, fields: Partial<MessageRow>, from: MessageStatus): Promise<boolean> {
    const keys = Object.keys(fields) as (keyof MessageRow)[]
    const key = keys.join(',')
    let s = this.updates.get(key)
    if (!s) {
      const one = `UPDATE messages SET ${keys.map((k) => `${k} = ?`).join(', ')} WHERE id = ? AND status = ?`
      // PostgreSQL: the writes of one turn that change the same columns (the outcomes of a turn's
      // sends, its receipts) are one UPDATE, as the claims are (see updateManyById)
      const value = (k: string, i: number) => (NUMBER_COLUMNS.has(k) ? `CAST(calls.v->>${i} AS BIGINT)` : `calls.v->>${i}`)
      s = mergeable(
        stmt(one, `${pgPlaceholders(one)} RETURNING 1 AS yes`),
        updateManyById(keys.length, keys.map((k, i) => `${k} = ${value(k, i)}`).join(', '), `m.status = calls.v->>${keys.length + 1}`),
      )
      this.updates.set(key, s)
    }
    return this.landed(tx, s, ...keys.map((k) => fields[k] as string | number | null), id, from)
  }
  async usage(workspaceId: string, month: string, q: Queries = this.db): Promise<number> {
    return (await q.get<{ messages: number }>(Q.usage, workspaceId, month))?.messages ?? 0
  }
  /** Inside a write: wait for the workspace's allowance to be this transaction's to count (see Q.allowanceTurn). */
  async allowanceTurn(tx: Queries, workspaceId: string) {
    await tx.run(Q.allowanceTurn, workspaceId)
  }
  async countUsage(tx: Queries, workspaceId: string, month: string) {
    await tx.run(Q.countUsage, workspaceId, month)
  }

  /** A page of the operator's search (see searchStatements) and its count, at most SEARCH_COUNT_MAX. */
  search(workspaceId: string, f: Search, limit: number, offset: number) {
    const key = `search:${f.contactId ? 'c' : ''}${f.direction ? 'd' : ''}${f.status ? 's' : ''}${f.from !== undefined ? 'f' : ''}${f.to !== undefined ? 't' : ''}${f.text ? 'q' : ''}`
    const params: (string | number)[] = [workspaceId]
    if (f.contactId) params.push(f.contactId)
    if (f.direction) params.push(f.direction)
    if (f.status) params.push(f.status)
    if (f.from !== undefined) params.push(f.from)
    if (f.to !== undefined) params.push(f.to)
    if (f.text) params.push(`%${f.text.replace(/[\\%_]/g, (c) => `\\${c}`)}%`)
    return this.page(key, () => searchStatements(f), params, limit, offset)
  }

  /**
   * A page of the log, newest first, with optional direction/status filters; with a contact, that
   * contact's messages only (read through its index; counted there too).
   */
  list(workspaceId: string, filter: Filter, limit: number, offset: number) {
    const key = `${filter.direction ? 'd' : ''}${filter.status ? 's' : ''}${filter.contactId ? 'c' : ''}`
    const params: (string | number)[] = [workspaceId]
    if (filter.direction) params.push(filter.direction)
    if (filter.status) params.push(filter.status)
    if (filter.contactId) params.push(filter.contactId)
    return this.page(key, () => listStatements(filter), params, limit, offset)
  }

  /** Rows and count by the statements kept under `key` (made by `make` the first time it is asked for). */
  private async page(key: string, make: () => { page: Statement; count: Statement }, params: (string | number)[], limit: number, offset: number) {
    let s = this.lists.get(key)
    if (!s) {
      s = make()
      this.lists.set(key, s)
    }
    const [rows, count] = await Promise.all([this.db.all<MessageRow>(s.page, ...params, limit, offset), this.db.get<{ n: number }>(s.count, ...params)])
    return { rows, total: Number(count?.n ?? 0) }
  }
}
