/**
 * Exporting a contact: everything Capstan keeps about one person, in one JSON document — what a
 * business hands over when someone asks for their data, before (or instead of) erasing them.
 * The same places `erasure.ts` lists: the contact, its consent history, its messages both ways
 * (oldest first, with their outcome and timeline), the files in them, the campaigns it was a
 * recipient of, the network addresses it was seen under and whether the number is suppressed.
 */
import type { Database } from 'bun:sqlite'
import type { Deps } from '../../deps'
import type { AuditRepo } from '../audit/repo'
import { iso } from '../../http/format'
import type { MediaService } from '../media/service'
import type { MessageRow } from '../messages/repo'
import type { MessageService } from '../messages/service'
import type { SuppressionService } from '../suppressions/service'
import type { ContactService } from './service'

export class ContactExport {
  private readonly sql

  constructor(
    private readonly deps: Deps,
    private readonly contacts: ContactService,
    private readonly messages: MessageService,
    private readonly media: MediaService,
    private readonly suppressions: SuppressionService,
    private readonly audit: AuditRepo,
  ) {
    const db: Database = deps.db
    this.sql = {
      consent: db.query<{ status: string; source: string; at: number }, [string]>('SELECT status, source, at FROM consent_ledger WHERE contact_id = ? ORDER BY id'),
      messages: db.query<MessageRow, [string]>('SELECT * FROM messages INDEXED BY messages_contact WHERE contact_id = ? ORDER BY seq'),
      campaigns: db.query<{ id: string; name: string; campaign_status: string; status: string; skipped_reason: string | null; message_id: string | null }, [string]>(
        'SELECT c.id, c.name, c.status AS campaign_status, r.status, r.skipped_reason, r.message_id FROM campaign_recipients r JOIN campaigns c ON c.id = r.campaign_id WHERE r.contact_id = ? ORDER BY r.seq',
      ),
      addresses: db.query<{ address: string }, [string, string]>('SELECT address FROM network_addresses WHERE workspace_id = ? AND phone = ? ORDER BY address'),
    }
  }

  /** The document for the workspace's contact with this number (or network address); 404 when there is none. */
  export(workspaceId: string, phone: string) {
    const contact = this.contacts.byNumber(workspaceId, phone)
    // that the person's data was handed out is recorded; not whose
    this.deps.writer.now(() => this.audit.add(workspaceId, 'contact.exported', null, this.deps.clock.now()))
    const messages = this.sql.messages.all(contact.id)
    const mediaIds = [...new Set(messages.flatMap((m) => JSON.parse(m.attachments) as string[]))]
    const suppression = this.suppressions.repo.get(workspaceId, contact.phone)
    return {
      exported_at: iso(this.deps.clock.now()),
      contact: this.contacts.toPublic(contact),
      consent: this.sql.consent.all(contact.id).map((e) => ({ status: e.status, source: e.source, at: iso(e.at) })),
      messages: messages.map((m) => this.messages.toPublic(m)),
      // the files of those messages that are still kept (retention may have removed some)
      media: mediaIds.flatMap((id) => {
        const row = this.media.repo.get(workspaceId, id)
        return row ? [this.media.toPublic(row)] : []
      }),
      campaigns: this.sql.campaigns.all(contact.id).map((c) => ({ id: c.id, name: c.name, campaign_status: c.campaign_status, recipient_status: c.status, skipped_reason: c.skipped_reason, message_id: c.message_id })),
      network_addresses: this.sql.addresses.all(workspaceId, contact.phone).map((a) => a.address),
      suppression: suppression ? this.suppressions.toPublic(suppression) : null,
    }
  }
}
