/**
 * Erasing a contact: a person asks to be forgotten, and the operator does it in one call.
 *
 * Every place Capstan keeps something of a contact, and what erasure does with it:
 * - `contacts`: the row (phone, name, metadata) is deleted;
 * - `consent_ledger`, `campaign_recipients` (which hold the phone), `network_addresses`,
 *   `service_windows` (when they last wrote to each number): deleted;
 * - `messages` to and from the contact stay in the log for its counts and timelines, without the
 *   person: no contact, no customer number (recipient of an outbound, sender of an inbound, or
 *   in a network's error text), no body, no attachments, no rendered template, and no campaign (a
 *   campaign's counts lose the person with its recipient row); one still queued fails with
 *   `contact_erased` (its `message.failed` event carries the redacted message);
 * - media the contact sent (their photos, documents): expired and purged with their files;
 * - `webhook_deliveries` whose event names the contact, delivered or not, and stored
 *   Idempotency-Key responses that do: deleted.
 * The suppression list is left alone: a number kept there is the operator's choice, so that
 * it is never messaged again. Nothing is erased from backups already taken, but the erasure is
 * recorded (erasure-journal.ts) and done again after one of them is restored.
 *
 * The database zeroes what it deletes or overwrites (`secure_delete`, see db/open.ts), and the
 * erasure ends with a TRUNCATE checkpoint, which writes the WAL into the database and empties it:
 * no byte of what it removed, nor of older versions of those rows, is left in the database files.
 */
import { type Queries, stmt } from '../../db/engine'
import type { Deps } from '../../deps'
import { ApiError, conflict, notFound } from '../../http/errors'
import type { Logger } from '../../http/log'
import type { AuditRepo, Operator } from '../audit/repo'
import type { Idempotency } from '../../http/idempotency'
import type { CampaignService } from '../campaigns/service'
import type { MediaService } from '../media/service'
import type { MessageService } from '../messages/service'
import type { WebhookService } from '../webhooks/service'
import type { ContactService } from './service'
import { nextTurn } from '../../db/writer'
import type { SecretBox } from '../../secrets'
import { appendRecord, BucketJournal, carryOver, done, type ErasureRecord, JOURNAL, journalDirs, pending, PURPOSE, readRecords } from './erasure-journal'
import { S3MediaStore } from '../media/store'
import { join } from 'node:path'

export interface ErasureReport {
  contact_id: string
  /** Messages to and from the contact, now without the person. */
  messages: number
  /** Of those, still queued: failed with contact_erased. */
  queued_failed: number
  /** Media the contact sent, removed. */
  media: number
  /** Webhook events naming the contact, removed (delivered or not). */
  events: number
}

/** When the newest of these erasures was made (ms; 0 for none). */
const newestOf = (records: ErasureRecord[]) => records.reduce((m, r) => Math.max(m, Date.parse(r.erased_at)), 0)

const ERASED = { error_code: 'contact_erased', error_message: 'The contact was erased before the message was sent.' }

/**
 * The time of the newest erasure this database has seen (ms), kept as a setting: a journal naming a
 * newer one means the database was put back from before it.
 */
const APPLIED = {
  get: stmt("SELECT value FROM system_settings WHERE name = 'erasures_applied_through'"),
  set: stmt(
    "INSERT INTO system_settings (name, value) VALUES ('erasures_applied_through', ?1) ON CONFLICT (name) DO UPDATE SET value = CAST(max(CAST(value AS INTEGER), CAST(?1 AS INTEGER)) AS TEXT)",
    "INSERT INTO system_settings (name, value) VALUES ('erasures_applied_through', $1) ON CONFLICT (name) DO UPDATE SET value = GREATEST(system_settings.value::bigint, $1::bigint)::text",
  ),
}
const setAppliedThrough = async (tx: Queries, at: number) => {
  await tx.run(APPLIED.set, String(at))
}

export class ContactEraser {
  /** Webhook deliveries read per write while looking for events naming the contact. */
  eventSlice = 10_000
  /** A campaign lost a recipient or had one's message failed: it may be complete now. */
  onCampaignChanged: (campaignId: string) => void = () => {}
  /** The contact's number is gone from the database: what the workspace's network drivers keep on disk loses it too. */
  onErased: (workspaceId: string, number: string) => void = () => {}

  constructor(
    private readonly deps: Deps,
    private readonly contacts: ContactService,
    private readonly messages: MessageService,
    private readonly media: MediaService,
    private readonly campaigns: CampaignService,
    private readonly webhooks: WebhookService,
    private readonly idempotency: Idempotency,
    private readonly audit: AuditRepo,
    private readonly log: Logger,
    private readonly box: SecretBox,
  ) {}

  /**
   * Erase the workspace's contact with this number (or the network address it was seen under):
   * 404 when there is none, 409 `contact_busy` while a message to it is being handed to its
   * network (seconds; try again). A message to it that the network does not have — queued, or
   * waiting out a retry or the network's "slow down" (marked, see MessageService.waitOffNetwork) —
   * fails as `contact_erased` instead.
   */
  async erase(workspaceId: string, phone: string, { record = true, by = null }: { record?: boolean; by?: Operator | null } = {}): Promise<ErasureReport> {
    const { engine } = this.deps
    // the contact, and its messages — unless one is being handed to its network right now
    const busy = () => conflict('contact_busy', 'A message to this contact is being handed to its network; try again in a few seconds.')
    const find = async (q?: Queries) => {
      const contact = await this.contacts.byPhoneOrAddress(workspaceId, phone, q)
      if (!contact) throw notFound('contact')
      const rows = await this.messages.erasureRowsOf(contact.id, q)
      if (rows.some((m) => m.status === 'sending' && Number(m.resend) !== 1)) throw busy()
      return { contact, rows }
    }
    // Webhook events are kept for 30 days: reading all of them for the contact's id in one write
    // would hold the server for a second or more (300,000 take ~0.5 s). They go first, in slices
    // between which requests are served; the erasure's write takes any that arrived meanwhile.
    const first = (await find()).contact
    const scanned = await this.webhooks.lastEventSeq()
    let events = 0
    for (let from = 0; from <= scanned; from += this.eventSlice) {
      events += await engine.write((tx) => this.webhooks.dropEventsMentioningIn(tx, from, Math.min(from + this.eventSlice - 1, scanned), workspaceId, first.id))
      await nextTurn()
    }
    // a transaction of its own: its messages' rows locked as it reads them, no other write of the
    // turn (a release claiming one of them) shares it
    const { report, campaigns, number, now } = await engine.writeApart(async (tx) => {
      const { contact, rows } = await find(tx)
      const now = this.deps.clock.now()
      // (a contact made anew under the number meanwhile has had none of its events read yet)
      events += await this.webhooks.dropEventsMentioningIn(tx, contact.id === first.id ? scanned + 1 : 0, Number.MAX_SAFE_INTEGER, workspaceId, contact.id)
      await this.idempotency.forgetMentioningIn(tx, workspaceId, contact.id)
      // the recipient rows go first: each leaves its campaign's counts with its message's status
      // as it is now; then the messages lose their campaign (nothing later is counted for them)
      const campaigns = await this.campaigns.removeRecipientIn(tx, contact.id)
      await this.messages.redactContactIn(tx, contact.id, contact.phone, now)
      // what the network does not have fails: the queued, and the sends waiting to be handed over
      // again (each taken from its sender first; one its sender took on meanwhile makes it busy)
      const queued = rows.filter((m) => m.status === 'queued' || m.status === 'sending')
      for (const m of queued) {
        if (m.status === 'sending' && !(await this.messages.takeResendIn(tx, m.id))) throw busy()
        await this.messages.advanceIn(tx, m.id, 'failed', now, ERASED)
      }
      let media = 0
      for (const m of rows) if (m.direction === 'inbound') for (const id of JSON.parse(m.attachments) as string[]) if (await this.media.expireIn(tx, workspaceId, id, now - 1)) media++
      await this.contacts.eraseIn(tx, contact)
      await this.audit.addIn(tx, workspaceId, 'contact.erased', null, now, null, by)
      await setAppliedThrough(tx, now)
      return { report: { contact_id: contact.id, messages: rows.length, queued_failed: queued.length, media, events } as ErasureReport, campaigns, number: contact.phone, now }
    })
    if (record) await this.record(workspaceId, number, now)
    this.onErased(workspaceId, number)
    for (const id of campaigns) this.onCampaignChanged(id)
    // the expired media goes now (rows and, when no other row shares them, files)
    if (report.media > 0) await this.media.purgeExpired()
    // the WAL holds the pages as they were before; written into the database and emptied now
    if (!(await engine.scrub())) this.log.warn('erased contact: the WAL could not be emptied yet (another process is reading the database); it will be at a later checkpoint', { workspace_id: workspaceId })
    this.log.info('contact erased', { workspace_id: workspaceId, messages: report.messages, queued_failed: report.queued_failed, media: report.media, events: report.events })
    return report
  }

  /** The journal in the media bucket, where media is kept in one (see BucketJournal); else null. */
  private get bucket(): BucketJournal | null {
    const store = this.media.store
    return store instanceof S3MediaStore ? new BucketJournal(store.client, store.prefix) : null
  }

  /** The erasure recorded (the workspace and a keyed digest of the number), so a restore cannot undo it. */
  private async record(workspaceId: string, phone: string, at: number) {
    const entry = { workspace_id: workspaceId, number_digest: this.box.digest(PURPOSE, phone), erased_at: new Date(at).toISOString() }
    for (const dir of journalDirs(this.deps.config)) {
      try {
        appendRecord(dir, entry)
      } catch (e) {
        this.log.error('an erasure could not be recorded; a restore of an older backup would bring the contact back', { directory: dir, error: String((e as Error)?.message ?? e) })
      }
    }
    const bucket = this.bucket
    if (bucket) {
      await bucket.add(entry).catch((e) =>
        this.log.error('an erasure could not be recorded in the media bucket; a database put back from before it would bring the contact back unless this data directory is kept', { error: String((e as Error)?.message ?? e) }),
      )
    }
  }

  /** The bucket's records (none where media is not in a bucket); a listing that fails is logged, and `complete` says so. */
  private async bucketRecords(): Promise<{ records: ErasureRecord[]; complete: boolean }> {
    const bucket = this.bucket
    if (!bucket) return { records: [], complete: true }
    try {
      return { records: await bucket.all(), complete: true }
    } catch (e) {
      this.log.error('the erasures recorded in the media bucket could not be read; those made on other instances are not checked at this start (the next start tries again)', { error: String((e as Error)?.message ?? e) })
      return { records: [], complete: false }
    }
  }

  /**
   * At start, after a restore (`capstan restore` marks it, or the database is older than the
   * newest erasure recorded in the data directory or beside the backups): every contact of the restored database
   * that an erasure record names is erased again, its workspace's numbers walked a slice at a
   * time — if it was made before that erasure: a contact made later under the number (the person
   * wrote again) is a new one and stays. The mark is cleared once all are; a failure leaves it for the next start. Returns how
   * many were erased.
   */
  async reapply(slice = 2_000): Promise<number> {
    const { dataDir, backupDir } = this.deps.config
    const beside = backupDir === null ? [] : [join(backupDir, JOURNAL)]
    const inBucket = await this.bucketRecords()
    let records: ErasureRecord[]
    if (pending(dataDir)) records = readRecords([join(dataDir, JOURNAL)], inBucket.records)
    else {
      // a database put back by hand (its file copied in, not by `capstan restore`; on PostgreSQL
      // a dump or a point in time) is older than the newest erasure recorded beside it or in the
      // media bucket: the same as after a restore
      records = readRecords([join(dataDir, JOURNAL), ...beside], inBucket.records)
      if (newestOf(records) <= Number((await this.deps.engine.get<{ value: string }>(APPLIED.get))?.value ?? 0)) return 0
      carryOver(dataDir, beside, inBucket.records)
      this.log.warn('erasures recorded beside the database are newer than any it has seen (put back from a backup, or its first start with this version): they are done again before serving')
    }
    // per workspace: number digest → when it was last erased
    const byWorkspace = new Map<string, Map<string, number>>()
    for (const r of records) {
      if (!byWorkspace.has(r.workspace_id)) byWorkspace.set(r.workspace_id, new Map())
      const at = Date.parse(r.erased_at)
      const digests = byWorkspace.get(r.workspace_id)!
      if (!(digests.get(r.number_digest)! >= at)) digests.set(r.number_digest, at)
    }
    let erased = 0
    let failed = 0
    for (const [workspaceId, digests] of byWorkspace) {
      const found: string[] = []
      for (let after = ''; ; ) {
        const rows = await this.contacts.numbersAfter(workspaceId, after, slice)
        for (const { phone, created_at } of rows) if (created_at <= (digests.get(this.box.digest(PURPOSE, phone)) ?? -Infinity)) found.push(phone)
        if (rows.length < slice) break
        after = rows.at(-1)!.phone
        await nextTurn()
      }
      for (const phone of found) {
        try {
          await this.erase(workspaceId, phone, { record: false })
          erased++
        } catch (e) {
          // erased meanwhile (another instance doing the same at its start): done
          if (e instanceof ApiError && e.status === 404) continue
          // (a message to them still being handed to a network): the next start tries again
          failed++
          this.log.error('an erasure could not be done again after the restore; the next start tries again', { workspace_id: workspaceId, error: String((e as Error)?.message ?? e) })
        }
      }
    }
    if (failed === 0 && inBucket.complete) {
      await this.deps.engine.write((tx) => setAppliedThrough(tx, newestOf(records)))
      done(dataDir)
    }
    this.log.info('erasures done again after a restore', { contacts: erased })
    return erased
  }
}
