/** Contacts, their consent ledger and network addresses on the store seam (docs/design/two-engines.md). */
import { insertStatement, oneByKey, type Queries, type Statement, stmt } from '../../db/engine'

export interface ContactRow {
  id: string
  workspace_id: string
  phone: string
  name: string | null
  consent_status: 'unknown' | 'opted_in' | 'opted_out'
  metadata: string
  created_at: number
  updated_at: number
  last_activity_at: number
}

/**
 * The operators' search: contacts whose name contains a text (any case: ASCII on SQLite's LIKE,
 * Unicode on PostgreSQL's ILIKE) and/or of one consent, newest activity first; counted at most as
 * deep as a list pages. Placeholders: the workspace, then the name pattern and/or the consent.
 */
function searchStatements(byName: boolean, byConsent: boolean): { page: Statement; count: Statement } {
  const texts = (pg: boolean) => {
    let i = 1
    const p = () => (pg ? `$${++i}` : '?')
    const where = [`workspace_id = ${pg ? '$1' : '?'}`]
    if (byName) where.push(`name ${pg ? 'ILIKE' : 'LIKE'} ${p()} ESCAPE '\\'`)
    if (byConsent) where.push(`consent_status = ${p()}`)
    const key = where.join(' AND ')
    return { page: `SELECT * FROM contacts WHERE ${key} ORDER BY last_activity_at DESC, ${pg ? 'id' : 'rowid'} DESC LIMIT ${p()} OFFSET ${p()}`, count: `SELECT COUNT(*) AS n FROM (SELECT 1 FROM contacts WHERE ${key} LIMIT 10000) AS found` }
  }
  const [lite, pg] = [texts(false), texts(true)]
  return { page: stmt(lite.page, pg.page), count: stmt(lite.count, pg.count) }
}
const SEARCH = { n: searchStatements(true, false), c: searchStatements(false, true), nc: searchStatements(true, true) }

const Q = {
  // the two a send makes are merged in a PostgreSQL batch (see mergeable)
  byPhone: oneByKey('contacts', ['workspace_id', 'phone']),
  byId: stmt('SELECT * FROM contacts WHERE workspace_id = ? AND id = ?'),
  insert: insertStatement('contacts', { id: 'TEXT', workspace_id: 'TEXT', phone: 'TEXT', name: 'TEXT', consent_status: 'TEXT', metadata: 'TEXT', created_at: 'BIGINT', updated_at: 'BIGINT', last_activity_at: 'BIGINT' }),
  // both changes are conditional on what they were decided from (an update: the name, consent and
  // metadata it read; a consent change: the consent): another transaction's change meanwhile (a
  // STOP, or another update, on another instance) is never written over
  update: stmt(
    'UPDATE contacts SET name = ?, consent_status = ?, metadata = ?, updated_at = ?, last_activity_at = ? WHERE id = ? AND name IS ? AND consent_status = ? AND metadata = ?',
    'UPDATE contacts SET name = $1, consent_status = $2, metadata = $3, updated_at = $4, last_activity_at = $5 WHERE id = $6 AND name IS NOT DISTINCT FROM $7 AND consent_status = $8 AND metadata = $9',
  ),
  // the last activity of many contacts at once ($1: [[id, at], …], each id once; see activity.ts):
  // the rows found through the key's index (= ANY of a list: a join with the list took a walk of
  // the whole table once it held some thousands); a time older than the one written changes
  // nothing, and a row that would not change is not written again
  touch: stmt(
    `UPDATE contacts SET last_activity_at = t.at
     FROM (SELECT json_extract(value, '$[0]') AS id, json_extract(value, '$[1]') AS at FROM json_each(?)) AS t
     WHERE contacts.id = t.id AND contacts.last_activity_at < t.at`,
    `WITH t AS (SELECT v->>0 AS id, CAST(v->>1 AS BIGINT) AS at FROM jsonb_array_elements(CAST($1 AS text)::jsonb) AS v)
     UPDATE contacts AS c SET last_activity_at = t.at FROM t WHERE c.id = t.id AND c.id = ANY(ARRAY(SELECT id FROM t)) AND c.last_activity_at < t.at`,
  ),
  // only one instance writes the contacts' last activity at a time (the others try again a moment
  // later): a transaction-level advisory lock, let go at its COMMIT
  activityTurn: stmt('SELECT 1 AS ok', 'SELECT pg_try_advisory_xact_lock(1397244242, 100) AS ok'),
  consent: stmt(
    'UPDATE contacts SET consent_status = ?, updated_at = ?, last_activity_at = MAX(last_activity_at, ?) WHERE id = ? AND consent_status = ?',
    'UPDATE contacts SET consent_status = $1, updated_at = $2, last_activity_at = GREATEST(last_activity_at, $3) WHERE id = $4 AND consent_status = $5',
  ),
  ledger: stmt('INSERT INTO consent_ledger (workspace_id, contact_id, status, source, at) VALUES (?, ?, ?, ?, ?)'),
  // ties (one import's contacts share a time) newest made first: SQLite's rowid, PostgreSQL's
  // time-ordered id (UUIDv7)
  list: stmt(
    'SELECT * FROM contacts WHERE workspace_id = ? ORDER BY last_activity_at DESC, rowid DESC LIMIT ? OFFSET ?',
    'SELECT * FROM contacts WHERE workspace_id = $1 ORDER BY last_activity_at DESC, id DESC LIMIT $2 OFFSET $3',
  ),
  // kept by triggers (migration 0029): counting the rows took 100-130 ms with 1,000,000 contacts
  // summed over its shards (migration 0038: one row per shard on PostgreSQL)
  count: stmt('SELECT CAST(SUM(n) AS BIGINT) AS n FROM contact_counts WHERE workspace_id = ?'),
  address: stmt('SELECT phone FROM network_addresses WHERE workspace_id = ? AND address = ?'),
  viaAddress: stmt('SELECT c.* FROM network_addresses a JOIN contacts c ON c.workspace_id = a.workspace_id AND c.phone = a.phone WHERE a.workspace_id = ? AND a.address = ?'),
  addAddress: stmt('INSERT INTO network_addresses (workspace_id, address, phone) VALUES (?, ?, ?) ON CONFLICT (workspace_id, address) DO UPDATE SET phone = excluded.phone'),
  eraseLedger: stmt('DELETE FROM consent_ledger WHERE contact_id = ?'),
  eraseAddresses: stmt('DELETE FROM network_addresses WHERE workspace_id = ? AND phone = ?'),
  eraseWindows: stmt('DELETE FROM service_windows WHERE workspace_id = ? AND phone = ?'),
  erase: stmt('DELETE FROM contacts WHERE id = ?'),
  after: stmt('SELECT * FROM contacts WHERE workspace_id = ? AND phone > ? ORDER BY phone LIMIT ?'),
  numbersAfter: stmt('SELECT phone, created_at FROM contacts WHERE workspace_id = ? AND phone > ? ORDER BY phone LIMIT ?'),
  ledgerOf: stmt('SELECT status, source, at FROM consent_ledger WHERE contact_id = ? ORDER BY id'),
  addressesOf: stmt('SELECT address FROM network_addresses WHERE workspace_id = ? AND phone = ? ORDER BY address'),
}

export class ContactStore {
  /** `db`: the engine, for reads outside a write. */
  constructor(private readonly db: Queries) {}

  byPhone(workspaceId: string, phone: string, q: Queries = this.db) {
    return q.get<ContactRow>(Q.byPhone, workspaceId, phone)
  }
  /** The number a network address stands for (see network_addresses), or the address itself. */
  async phoneOf(workspaceId: string, address: string, q: Queries = this.db): Promise<string> {
    return (await q.get<{ phone: string }>(Q.address, workspaceId, address))?.phone ?? address
  }
  /** The contact with this number, else the one whose number the network reported under it (network_addresses), or null. */
  async byPhoneOrAddress(workspaceId: string, phoneOrAddress: string, q: Queries = this.db): Promise<ContactRow | null> {
    // (one statement for both would be one read less on a miss, but costs SQLite's every hit ~10% of a send)
    return (await this.byPhone(workspaceId, phoneOrAddress, q)) ?? q.get<ContactRow>(Q.viaAddress, workspaceId, phoneOrAddress)
  }
  /** The network reports `phone` as `address`: its messages from there are that number's. */
  async addAddress(tx: Queries, workspaceId: string, address: string, phone: string) {
    await tx.run(Q.addAddress, workspaceId, address, phone)
  }
  /** The contact's row, ledger, network addresses and service windows go. */
  async erase(tx: Queries, contact: { id: string; workspace_id: string; phone: string }) {
    await tx.run(Q.eraseLedger, contact.id)
    await tx.run(Q.eraseAddresses, contact.workspace_id, contact.phone)
    await tx.run(Q.eraseWindows, contact.workspace_id, contact.phone)
    await tx.run(Q.erase, contact.id)
  }
  /** The workspace's numbers after `after`, in order, at most `limit`, with when each contact was made. */
  numbersAfter(workspaceId: string, after: string, limit: number) {
    return this.db.all<{ phone: string; created_at: number }>(Q.numbersAfter, workspaceId, after, limit)
  }
  /** The workspace's contacts with numbers after `after`, in order, at most `limit`. */
  after(workspaceId: string, after: string, limit: number) {
    return this.db.all<ContactRow>(Q.after, workspaceId, after, limit)
  }
  /** The contact's consent ledger, oldest first. */
  ledgerOf(contactId: string) {
    return this.db.all<{ status: string; source: string; at: number }>(Q.ledgerOf, contactId)
  }
  /** The addresses a network knows the number by. */
  async addressesOf(workspaceId: string, phone: string): Promise<string[]> {
    return (await this.db.all<{ address: string }>(Q.addressesOf, workspaceId, phone)).map((a) => a.address)
  }
  get(workspaceId: string, id: string, q: Queries = this.db) {
    return q.get<ContactRow>(Q.byId, workspaceId, id)
  }
  async insert(tx: Queries, r: ContactRow) {
    await tx.run(Q.insert, r.id, r.workspace_id, r.phone, r.name, r.consent_status, r.metadata, r.created_at, r.updated_at, r.last_activity_at)
  }
  /** Write the row, if its name, consent and metadata are still those of `read` (the row it was made from); whether they were. */
  async update(tx: Queries, r: ContactRow, read: ContactRow): Promise<boolean> {
    return (await tx.run(Q.update, r.name, r.consent_status, r.metadata, r.updated_at, r.last_activity_at, r.id, read.name, read.consent_status, read.metadata)) > 0
  }
  /** Record activity (messages in or out: [contact id, at], each contact once) without changing the contacts' other fields. */
  async touch(tx: Queries, touches: [string, number][]) {
    await tx.run(Q.touch, JSON.stringify(touches))
  }
  /** Whether this write may write the contacts' last activity now (no other instance is): see Q.activityTurn. */
  async activityTurn(tx: Queries): Promise<boolean> {
    return !!(await tx.get<{ ok: boolean | number }>(Q.activityTurn))?.ok
  }
  /** Change the consent from `from` to `status`, if it is still `from`; whether it was. */
  async setConsent(tx: Queries, id: string, from: string, status: string, at: number): Promise<boolean> {
    return (await tx.run(Q.consent, status, at, at, id, from)) > 0
  }
  async ledger(tx: Queries, workspaceId: string, contactId: string, status: string, source: string, at: number) {
    await tx.run(Q.ledger, workspaceId, contactId, status, source, at)
  }
  list(workspaceId: string, limit: number, offset: number) {
    return this.db.all<ContactRow>(Q.list, workspaceId, limit, offset)
  }
  /** The operators' search: contacts whose name contains `name` (any case) and/or of one consent; counted up to 10,000. */
  async search(workspaceId: string, f: { name?: string; consent?: string }, limit: number, offset: number) {
    const s = SEARCH[`${f.name ? 'n' : ''}${f.consent ? 'c' : ''}` as keyof typeof SEARCH]
    const params: string[] = [workspaceId]
    if (f.name) params.push(`%${f.name.replace(/[\\%_]/g, (c) => `\\${c}`)}%`)
    if (f.consent) params.push(f.consent)
    const [rows, count] = await Promise.all([this.db.all<ContactRow>(s.page, ...params, limit, offset), this.db.get<{ n: number }>(s.count, ...params)])
    return { rows, total: Number(count?.n ?? 0) }
  }
  async count(workspaceId: string): Promise<number> {
    return (await this.db.get<{ n: number }>(Q.count, workspaceId))?.n ?? 0
  }
}
