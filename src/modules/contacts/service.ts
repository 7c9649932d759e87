/** Contacts: upsert by phone, consent changes recorded in the ledger, newest activity first. */
import type { Deps } from '../../deps'
import { notFound } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import type { Consent, PublicContact } from './model'
import { ContactRepo, type ContactRow } from './repo'

export interface UpsertInput {
  phone: string
  name?: string | null
  consent_status?: Consent
  metadata?: Record<string, string | number | boolean>
}

export class ContactService {
  private readonly repo: ContactRepo

  constructor(private readonly deps: Deps) {
    this.repo = new ContactRepo(deps.db)
  }

  /**
   * Called inside every write that changes a contact's consent, after the ledger entry: `from` is
   * the consent before (null for a contact created with one). services.ts turns it into the
   * `contact.consent_changed` webhook event.
   */
  onConsentChanged: (row: ContactRow, from: Consent | null, source: string) => void = () => {}

  /** Change a contact's consent inside a write: the contact, the ledger entry with `source`, the event. */
  setConsentInTx(contact: ContactRow, status: Consent, source: string, now: number) {
    this.repo.setConsent(contact.id, status, now)
    this.consentChangedInTx(this.repo.get(contact.workspace_id, contact.id)!, contact.consent_status as Consent, source, now)
  }

  /** After a row's consent was written (`from` before it; null for a new contact): its ledger entry and event. */
  private consentChangedInTx(row: ContactRow, from: Consent | null, source: string, now: number) {
    this.repo.ledger(row.workspace_id, row.id, row.consent_status, source, now)
    this.onConsentChanged(row, from, source)
  }

  toPublic(row: ContactRow): PublicContact {
    return {
      id: row.id,
      phone: row.phone,
      name: row.name,
      consent_status: row.consent_status,
      metadata: JSON.parse(row.metadata) as PublicContact['metadata'],
      created_at: iso(row.created_at),
      updated_at: iso(row.updated_at),
      last_activity_at: iso(row.last_activity_at),
    }
  }
  /** Inside an erasure's write: the contact, its consent ledger and its network addresses go. */
  eraseInTx(contact: ContactRow) {
    this.repo.erase(contact)
  }

  /** The workspace's numbers after `after` in order, at most `limit`, with when each contact was made. */
  numbersAfter(workspaceId: string, after: string, limit: number) {
    return this.repo.numbersAfter(workspaceId, after, limit)
  }

  /** The contact's consent ledger, oldest first. */
  ledgerOf(contactId: string) {
    return this.repo.ledgerOf(contactId)
  }

  /** The addresses a network knows the number by (WhatsApp ids). */
  addressesOf(workspaceId: string, phone: string): string[] {
    return this.repo.addressesOf(workspaceId, phone)
  }

  /** The workspace's contact by id, or null. */
  find(workspaceId: string, id: string): ContactRow | null {
    return this.repo.get(workspaceId, id)
  }

  /** The contact with this number, or the one a network address (a WhatsApp id) points to; or null. */
  byPhoneOrAddress(workspaceId: string, phoneOrAddress: string): ContactRow | null {
    return this.repo.getByPhone(workspaceId, phoneOrAddress) ?? this.repo.viaAddress(workspaceId, phoneOrAddress)
  }

  /** The workspace's contact with exactly this number, or null. */
  getByPhone(workspaceId: string, phone: string): ContactRow | null {
    return this.repo.getByPhone(workspaceId, phone)
  }

  /** The number a network address stands for (the address itself when none is known). */
  phoneOf(workspaceId: string, address: string): string {
    return this.repo.phoneOf(workspaceId, address)
  }

  /** Remember that the network knows `phone` by `address` (inside a write). */
  addAddressInTx(workspaceId: string, address: string, phone: string) {
    this.repo.addAddress(workspaceId, address, phone)
  }

  /** A message went out to or came in from the contact (inside a write): its last activity. */
  touchInTx(contactId: string, at: number) {
    this.repo.touch(contactId, at)
  }

  /**
   * Create or update the contact with this phone; must run inside a write. Consent changes only
   * when `consent_status` is given, and each change is written to the ledger with `source`.
   */
  upsertInTx(workspaceId: string, input: UpsertInput, source: string, known?: ContactRow | null): { row: ContactRow; created: boolean } {
    const now = this.deps.clock.now()
    // `known`: the caller already looked the phone up in this write (null = it is not there)
    const existing = known !== undefined ? known : this.repo.getByPhone(workspaceId, input.phone)
    if (!existing) {
      const row: ContactRow = {
        id: uuid(),
        workspace_id: workspaceId,
        phone: input.phone,
        name: input.name ?? null,
        consent_status: input.consent_status ?? 'unknown',
        metadata: JSON.stringify(input.metadata ?? {}),
        created_at: now,
        updated_at: now,
        last_activity_at: now,
      }
      this.repo.insert(row)
      if (input.consent_status && input.consent_status !== 'unknown') this.consentChangedInTx(row, null, source, now)
      return { row, created: true }
    }
    const row: ContactRow = {
      ...existing,
      name: input.name !== undefined ? input.name : existing.name,
      consent_status: input.consent_status ?? existing.consent_status,
      metadata: input.metadata !== undefined ? JSON.stringify(input.metadata) : existing.metadata,
      updated_at: now,
      last_activity_at: Math.max(existing.last_activity_at, now),
    }
    this.repo.update(row)
    if (input.consent_status && input.consent_status !== existing.consent_status) this.consentChangedInTx(row, existing.consent_status as Consent, source, now)
    return { row, created: false }
  }

  /** POST /contacts: upsert as one durable write. */
  upsert(workspaceId: string, input: UpsertInput, source: string) {
    return this.deps.writer.write(() => this.upsertInTx(workspaceId, input, source))
  }

  /** The workspace's contact with this number, or with a network address it was seen under; 404 when none. */
  byNumber(workspaceId: string, phone: string): ContactRow {
    const contact = this.repo.getByPhone(workspaceId, phone) ?? this.repo.viaAddress(workspaceId, phone)
    if (!contact) throw notFound('contact')
    return contact
  }

  /** A page of contacts, newest activity first; with `phone`, the one contact with that number (if any). */
  list(workspaceId: string, limit: number, offset: number, phone?: string) {
    if (phone !== undefined) {
      const row = this.repo.getByPhone(workspaceId, phone)
      return { rows: row && offset === 0 ? [row] : [], total: row ? 1 : 0 }
    }
    return { rows: this.repo.list(workspaceId, limit, offset), total: this.repo.count(workspaceId) }
  }
}
