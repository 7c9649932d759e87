/** Contact and consent ledger SQL. */
import type { Database } from 'bun:sqlite'

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

export class ContactRepo {
  private byPhone
  private byId
  private insertStmt
  private updateStmt
  private touchStmt
  private consentStmt
  private ledgerStmt
  private listStmt
  private countStmt
  private addressGet
  private addressPut

  constructor(private readonly db: Database) {
    this.byPhone = db.query<ContactRow, [string, string]>('SELECT * FROM contacts WHERE workspace_id = ? AND phone = ?')
    this.byId = db.query<ContactRow, [string, string]>('SELECT * FROM contacts WHERE workspace_id = ? AND id = ?')
    this.insertStmt = db.query(
      'INSERT INTO contacts (id, workspace_id, phone, name, consent_status, metadata, created_at, updated_at, last_activity_at) VALUES ($id, $workspace_id, $phone, $name, $consent_status, $metadata, $created_at, $updated_at, $last_activity_at)',
    )
    this.updateStmt = db.query('UPDATE contacts SET name = $name, consent_status = $consent_status, metadata = $metadata, updated_at = $updated_at, last_activity_at = $last_activity_at WHERE id = $id')
    this.touchStmt = db.query('UPDATE contacts SET last_activity_at = MAX(last_activity_at, ?) WHERE id = ?')
    this.consentStmt = db.query('UPDATE contacts SET consent_status = ?, updated_at = ?, last_activity_at = MAX(last_activity_at, ?) WHERE id = ?')
    this.ledgerStmt = db.query('INSERT INTO consent_ledger (workspace_id, contact_id, status, source, at) VALUES (?, ?, ?, ?, ?)')
    this.listStmt = db.query<ContactRow, [string, number, number]>('SELECT * FROM contacts WHERE workspace_id = ? ORDER BY last_activity_at DESC, rowid DESC LIMIT ? OFFSET ?')
    // kept by triggers (migration 0029): counting the rows took 100-130 ms with 1,000,000 contacts
    this.countStmt = db.query<{ n: number }, [string]>('SELECT n FROM contact_counts WHERE workspace_id = ?')
    this.addressGet = db.query<{ phone: string }, [string, string]>('SELECT phone FROM network_addresses WHERE workspace_id = ? AND address = ?')
    this.addressPut = db.query('INSERT INTO network_addresses (workspace_id, address, phone) VALUES (?, ?, ?) ON CONFLICT (workspace_id, address) DO UPDATE SET phone = excluded.phone')
  }

  getByPhone(workspaceId: string, phone: string) {
    return this.byPhone.get(workspaceId, phone)
  }
  /** The number a network address stands for (see network_addresses), or the address itself. */
  phoneOf(workspaceId: string, address: string) {
    return this.addressGet.get(workspaceId, address)?.phone ?? address
  }
  /** The contact whose number the network reported under `address` (network_addresses), if any. */
  viaAddress(workspaceId: string, address: string) {
    const phone = this.addressGet.get(workspaceId, address)?.phone
    return phone === undefined ? null : this.getByPhone(workspaceId, phone)
  }
  /** The network reports `phone` as `address`: its messages from there are that number's. */
  addAddress(workspaceId: string, address: string, phone: string) {
    this.addressPut.run(workspaceId, address, phone)
  }
  /** The contact's row, ledger and network addresses go. */
  erase(contact: { id: string; workspace_id: string; phone: string }) {
    this.db.query('DELETE FROM consent_ledger WHERE contact_id = ?').run(contact.id)
    this.db.query('DELETE FROM network_addresses WHERE workspace_id = ? AND phone = ?').run(contact.workspace_id, contact.phone)
    this.db.query('DELETE FROM contacts WHERE id = ?').run(contact.id)
  }
  /** The workspace's numbers after `after`, in order, at most `limit`, with when each contact was made. */
  numbersAfter(workspaceId: string, after: string, limit: number) {
    return this.db.query<{ phone: string; created_at: number }, [string, string, number]>('SELECT phone, created_at FROM contacts WHERE workspace_id = ? AND phone > ? ORDER BY phone LIMIT ?').all(workspaceId, after, limit)
  }
  /** The contact's consent ledger, oldest first. */
  ledgerOf(contactId: string) {
    return this.db.query<{ status: string; source: string; at: number }, [string]>('SELECT status, source, at FROM consent_ledger WHERE contact_id = ? ORDER BY id').all(contactId)
  }
  /** The addresses a network knows the number by. */
  addressesOf(workspaceId: string, phone: string) {
    return this.db.query<{ address: string }, [string, string]>('SELECT address FROM network_addresses WHERE workspace_id = ? AND phone = ? ORDER BY address').all(workspaceId, phone).map((a) => a.address)
  }
  get(workspaceId: string, id: string) {
    return this.byId.get(workspaceId, id)
  }
  insert(row: ContactRow) {
    this.insertStmt.run(row as any)
  }
  update(row: ContactRow) {
    this.updateStmt.run({ id: row.id, name: row.name, consent_status: row.consent_status, metadata: row.metadata, updated_at: row.updated_at, last_activity_at: row.last_activity_at } as any)
  }
  /** Record activity (a message in or out) without changing the contact's fields. */
  touch(id: string, at: number) {
    this.touchStmt.run(at, id)
  }
  setConsent(id: string, status: string, at: number) {
    this.consentStmt.run(status, at, at, id)
  }
  ledger(workspaceId: string, contactId: string, status: string, source: string, at: number) {
    this.ledgerStmt.run(workspaceId, contactId, status, source, at)
  }
  list(workspaceId: string, limit: number, offset: number) {
    return this.listStmt.all(workspaceId, limit, offset)
  }
  count(workspaceId: string) {
    return this.countStmt.get(workspaceId)?.n ?? 0
  }
}
