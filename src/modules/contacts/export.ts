/**
 * Exporting a contact: everything Capstan keeps about one person, in one JSON document — what a
 * business hands over when someone asks for their data, before (or instead of) erasing them.
 * The same places `erasure.ts` lists: the contact, its consent history, its messages both ways
 * (oldest first, with their outcome and timeline), the files in them, the campaigns it was a
 * recipient of, the network addresses it was seen under and whether the number is suppressed.
 *
 * The document is streamed: a long-standing customer's conversation can be 100,000 messages
 * (~85 MB of JSON), which read and serialised at once held the event loop for over a second —
 * every API request and send waiting — and took ~350 MB. Messages are read MESSAGE_BATCH at a time,
 * each batch written out before the next is read.
 */
import type { Deps } from '../../deps'
import type { AuditRepo, Operator } from '../audit/repo'
import { iso } from '../../http/format'
import type { MediaService } from '../media/service'
import type { MessageService } from '../messages/service'
import type { CampaignService } from '../campaigns/service'
import type { SuppressionService } from '../suppressions/service'
import type { ContactService } from './service'

/** Messages read and written per step of the stream. */
const MESSAGE_BATCH = 500

export class ContactExport {
  constructor(
    private readonly deps: Deps,
    private readonly contacts: ContactService,
    private readonly messages: MessageService,
    private readonly media: MediaService,
    private readonly suppressions: SuppressionService,
    private readonly campaigns: CampaignService,
    private readonly audit: AuditRepo,
  ) {
  }

  /**
   * The document for the workspace's contact with this number (or network address), as a stream
   * of JSON `{"data": {...}}`; 404 (thrown before anything is streamed) when there is none.
   */
  async export(workspaceId: string, phone: string, by: Operator | null = null): Promise<ReadableStream<Uint8Array>> {
    const contact = await this.contacts.byNumber(workspaceId, phone)
    // that the person's data was handed out is recorded; not whose
    await this.deps.engine.write((tx) => this.audit.addIn(tx, workspaceId, 'contact.exported', null, this.deps.clock.now(), null, by))
    const json = (key: string, value: unknown) => `${JSON.stringify(key)}:${JSON.stringify(value)}`
    const ledger = await this.contacts.ledgerOf(contact.id)
    const head = [json('exported_at', iso(this.deps.clock.now())), json('contact', this.contacts.toPublic(contact)), json('consent', ledger.map((e) => ({ status: e.status, source: e.source, at: iso(e.at) })))]
    const mediaIds = new Set<string>()
    let after = -1 // the last message written (seq); -1: nothing written yet
    const encoder = new TextEncoder()
    return new ReadableStream<Uint8Array>({
      pull: async (out) => {
        if (after === -1) {
          after = 0
          return out.enqueue(encoder.encode(`{"data":{${head.join(',')},"messages":[`))
        }
        const batch = await this.messages.ofContact(contact.id, after, MESSAGE_BATCH)
        if (batch.length) {
          for (const m of batch) for (const id of JSON.parse(m.attachments) as string[]) mediaIds.add(id)
          const first = after === 0
          after = batch.at(-1)!.seq
          return out.enqueue(encoder.encode(`${first ? '' : ','}${batch.map((m) => JSON.stringify(this.messages.toPublic(m))).join(',')}`))
        }
        const suppression = await this.suppressions.find(workspaceId, contact.phone)
        // the files of those messages that are still kept (retention may have removed some)
        const media = []
        for (const id of mediaIds) {
          const row = await this.media.find(workspaceId, id)
          if (row) media.push(this.media.toPublic(row))
        }
        const tail = [
          json('media', media),
          json('campaigns', await this.campaigns.ofContact(contact.id)),
          json('network_addresses', await this.contacts.addressesOf(workspaceId, contact.phone)),
          json('suppression', suppression ? this.suppressions.toPublic(suppression) : null),
        ]
        out.enqueue(encoder.encode(`],${tail.join(',')}}}`))
        out.close()
      },
    })
  }
}
