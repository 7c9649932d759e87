/** Contacts: upsert by phone, consent changes recorded in the ledger, newest activity first. */
import type { Deps } from '../../deps'
import { notFound } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import type { Consent, PublicContact } from './model'
import type { Queries } from '../../db/engine'
import { PendingActivity } from './activity'
import { ContactStore, type ContactRow } from './store'

export interface UpsertInput {
  phone: string
  name?: string | null
  consent_status?: Consent
  metadata?: Record<string, string | number | boolean>
}

export class ContactService {
  private readonly store: ContactStore

  /** Contacts' last activity not yet written (see activity.ts). */
  private readonly activity: PendingActivity

  constructor(private readonly deps: Deps) {
    this.store = new ContactStore(deps.engine)
    this.activity = new PendingActivity(
      (touches) => this.writeActivity(touches),
      (e) => this.onActivityError(e),
    )
  }

  /**
   * The contacts' last activity (see activity.ts), in a transaction of its own and by one instance
   * at a time: two instances' writes of the same contacts, each in an order of its own, would wait
   * for each other. False when another instance is writing its own (nothing written).
   */
  private writeActivity(touches: [string, number][]): Promise<boolean> {
    return this.deps.engine.writeApart(async (tx) => {
      if (!(await this.store.activityTurn(tx))) return false
      await this.store.touch(tx, touches)
      return true
    })
  }

  /** Writing the contacts' last activity failed (it is tried again a second later). */
  onActivityError: (e: unknown) => void = () => {}

  /** Write the contacts' last activity that waits (a graceful stop, after `stop`; tests). */
  flushActivity() {
    return this.activity.flush()
  }

  /** The server stops: the last activity that waits is written only by `flushActivity`. */
  stop() {
    this.activity.stop()
  }

  /**
   * Called inside every write that changes a contact's consent, after the ledger entry: `from` is
   * the consent before (null for a contact created with one). services.ts turns it into the
   * `contact.consent_changed` webhook event.
   */
  onConsentChanged: (tx: Queries, row: ContactRow, from: Consent | null, source: string) => Promise<void> = async () => {}

  /**
   * Change a contact's consent inside a write: the contact, the ledger entry with `source`, the
   * event — if `may` allows it from the consent it has (by default: any other than `status`).
   * Changed meanwhile by another transaction (a STOP and an update at once, on two instances),
   * the contact is read again and the change decided again from what it has now. Whether it changed.
   */
  async setConsentIn(tx: Queries, contact: ContactRow, status: Consent, source: string, now: number, may: (from: Consent) => boolean = (from) => from !== status): Promise<boolean> {
    let from = contact.consent_status as Consent
    for (;;) {
      if (!may(from)) return false
      if (await this.store.setConsent(tx, contact.id, from, status, now)) break
      const again = await this.store.get(contact.workspace_id, contact.id, tx)
      if (!again) return false
      from = again.consent_status as Consent
    }
    await this.consentChangedIn(tx, (await this.store.get(contact.workspace_id, contact.id, tx))!, from, source, now)
    return true
  }

  /** After a row's consent was written (`from` before it; null for a new contact): its ledger entry and event. */
  private async consentChangedIn(tx: Queries, row: ContactRow, from: Consent | null, source: string, now: number) {
    await this.store.ledger(tx, row.workspace_id, row.id, row.consent_status, source, now)
    await this.onConsentChanged(tx, row, from, source)
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
      // a message's activity may not be written yet (see activity.ts)
      last_activity_at: iso(Math.max(row.last_activity_at, this.activity.of(row.id))),
    }
  }
  /** Inside an erasure's write: the contact, its consent ledger and its network addresses go. */
  eraseIn(tx: Queries, contact: ContactRow) {
    return this.store.erase(tx, contact)
  }

  /** The workspace's numbers after `after` in order, at most `limit`, with when each contact was made. */
  numbersAfter(workspaceId: string, after: string, limit: number) {
    return this.store.numbersAfter(workspaceId, after, limit)
  }

  /** The workspace's contacts with numbers after `after`, in order of number, at most `limit`. */
  pageByPhone(workspaceId: string, after: string, limit: number) {
    return this.store.after(workspaceId, after, limit)
  }

  /** The contact's consent ledger, oldest first. */
  ledgerOf(contactId: string) {
    return this.store.ledgerOf(contactId)
  }

  /** The addresses a network knows the number by (WhatsApp ids). */
  addressesOf(workspaceId: string, phone: string): Promise<string[]> {
    return this.store.addressesOf(workspaceId, phone)
  }

  /** The workspace's contact by id, or null (`q`: the write it is read in, if any). */
  find(workspaceId: string, id: string, q?: Queries): Promise<ContactRow | null> {
    return this.store.get(workspaceId, id, q)
  }

  /** The contact with this number, or the one a network address (a WhatsApp id) points to; or null. */
  byPhoneOrAddress(workspaceId: string, phoneOrAddress: string, q?: Queries): Promise<ContactRow | null> {
    return this.store.byPhoneOrAddress(workspaceId, phoneOrAddress, q)
  }

  /** The workspace's contact with exactly this number, or null. */
  getByPhone(workspaceId: string, phone: string, q?: Queries): Promise<ContactRow | null> {
    return this.store.byPhone(workspaceId, phone, q)
  }

  /** The number a network address stands for (the address itself when none is known). */
  phoneOf(workspaceId: string, address: string, q?: Queries): Promise<string> {
    return this.store.phoneOf(workspaceId, address, q)
  }

  /** Remember that the network knows `phone` by `address` (inside a write). */
  addAddressIn(tx: Queries, workspaceId: string, address: string, phone: string) {
    return this.store.addAddress(tx, workspaceId, address, phone)
  }

  /**
   * A message went out to or came in from the contact (inside its write): its last activity, once
   * the write commits, written a moment later with others (see activity.ts). On SQLite, whose
   * commit hooks run at once, also when the write then fails (only a disk that refuses writes).
   */
  touchIn(tx: Queries, contactId: string, at: number) {
    this.deps.engine.afterCommit(tx, () => this.activity.add(contactId, at))
  }

  /**
   * Create or update the contact with this phone inside the write `tx`. Consent changes only
   * when `consent_status` is given, and each change is written to the ledger with `source`.
   */
  async upsertIn(tx: Queries, workspaceId: string, input: UpsertInput, source: string, known?: ContactRow | null): Promise<{ row: ContactRow; created: boolean }> {
    const now = this.deps.clock.now()
    // `known`: the caller already looked the phone up in this write (null = it is not there)
    let existing = known !== undefined ? known : await this.store.byPhone(workspaceId, input.phone, tx)
    for (;;) {
      if (!existing) {
        const row = this.fresh(workspaceId, input, now)
        await this.store.insert(tx, row)
        if (input.consent_status && input.consent_status !== 'unknown') await this.consentChangedIn(tx, row, null, source, now)
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
      // written only over what it was read with: changed meanwhile by another transaction (a STOP
      // or another update, on another instance), the contact is read again and the update made over that
      if (await this.store.update(tx, row, existing)) {
        if (input.consent_status && input.consent_status !== existing.consent_status) await this.consentChangedIn(tx, row, existing.consent_status as Consent, source, now)
        return { row, created: false }
      }
      existing = await this.store.byPhone(workspaceId, input.phone, tx)
    }
  }

  /** A new contact's row (not yet written): consent as given, else unknown. */
  fresh(workspaceId: string, input: UpsertInput, now: number): ContactRow {
    return {
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
  }

  /** Write a `fresh` contact with unknown consent (inside a write): nothing for the ledger. */
  insertIn(tx: Queries, row: ContactRow) {
    return this.store.insert(tx, row)
  }

  /** POST /contacts: upsert as one durable write. */
  upsert(workspaceId: string, input: UpsertInput, source: string) {
    return this.deps.engine.write((tx) => this.upsertIn(tx, workspaceId, input, source))
  }

  /** The workspace's contact with this number, or with a network address it was seen under; 404 when none. */
  async byNumber(workspaceId: string, phone: string): Promise<ContactRow> {
    const contact = await this.byPhoneOrAddress(workspaceId, phone)
    if (!contact) throw notFound('contact')
    return contact
  }

  /** A page of contacts, newest activity first; with `phone`, the one contact with that number (if any). */
  /** The operators' search by name and/or consent (see ContactStore.search). */
  search(workspaceId: string, f: { name?: string; consent?: string }, limit: number, offset: number) {
    return this.store.search(workspaceId, f, limit, offset)
  }

  async list(workspaceId: string, limit: number, offset: number, phone?: string) {
    if (phone !== undefined) {
      const row = await this.store.byPhone(workspaceId, phone)
      return { rows: row && offset === 0 ? [row] : [], total: row ? 1 : 0 }
    }
    const [rows, total] = await Promise.all([this.store.list(workspaceId, limit, offset), this.store.count(workspaceId)])
    return { rows, total }
  }
}
