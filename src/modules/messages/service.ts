/**
 * The message log and its state machine. Every change of a message happens in one write with
 * the outbox events that report it. Status moves forward only (queued → sending → sent →
 * delivered → read; failed from queued, sending or sent); a late receipt only fills its time.
 * A group message ends at sent.
 */
import type { Queries } from '../../db/engine'
import type { Deps } from '../../deps'
import { nextTurn, persist } from '../../db/writer'
import { notFound, refused, validationFailed } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import type { Accepted, NetworkTemplate, ReceiptStatus } from '../../network/driver'
import { DriverError, type OutboundMedia, RecipientThrottled, STOPPED, TemplateRefused, UnconfirmedSend, templateHeaderKind } from '../../network/driver'
import type { ConnectionService, LiveConnection } from '../connections/service'
import type { ContactService } from '../contacts/service'
import type { MediaRow } from '../media/records'
import { MediaStoreUnavailable } from '../media/store'
import type { MediaService } from '../media/service'
import type { SuppressionService } from '../suppressions/service'
import type { ContactRow } from '../contacts/store'
import { fill } from '../templates/render'
import { type HeaderMedia, type TemplateService, withArticle } from '../templates/service'
import type { EventType, WebhookService } from '../webhooks/service'
import type { WorkspaceService } from '../workspaces/service'
import { clipCodePoints } from '../../http/schema'
import { headerFault, MAX_BODY, MAX_HEADER_TEXT, OPT_OUT_KEYWORDS, type PublicMessage, renderedFault } from './model'
import { MessageStore, type MessageRow, type MessageStatus, type NewMessage, type Search } from './store'

const RANK: Record<MessageStatus, number> = { queued: 0, sending: 1, sent: 2, delivered: 3, read: 4, failed: -1 }
const TIME_COLUMN = { sending: 'sending_at', sent: 'sent_at', delivered: 'delivered_at', read: 'read_at', failed: 'failed_at' } as const

export interface SendInput {
  connection_id: string
  recipient?: string
  contact_id?: string
  body?: string
  attachments: string[]
  /** A template sent in place of body, and the values of its numbered placeholders. */
  template_id?: string
  variables?: Record<string, unknown>
}

const TIMED_OUT = Symbol('timed out')
/**
 * An attachment's bytes could not be read from the media store (a bucket away): the network has
 * not been handed that part, so the send is tried again, as after a network that could not take it.
 */
const storeAway = (e: unknown): never => {
  if (e instanceof MediaStoreUnavailable) throw new DriverError('media_store_unavailable', 'The media store could not be read (is the bucket reachable?); the message was not sent and is tried again.', true)
  throw e
}
/** What a read before the network gives when the server stops (see MessageService.stopping). */
const STOPPING = Symbol('stopping')
/** How a send a crash interrupted fails when the network does not confirm it. */
const INTERRUPTED = { code: 'send_interrupted', message: 'The server stopped while this message was being handed to the network; it was not sent again.' }
/** Queued messages the direct lane fails for a refusal in one release before yielding. */
const MAX_REFUSED_PER_RELEASE = 200
/** Messages expired or failed per write when many go at once (each write short; requests are served between). */
const EXPIRE_BATCH = 500

/** Why a queued message may not leave any more: its failure code and message. */
export interface Refusal {
  code: string
  message: string
}

/** Race a driver call against `ms`; the controller is aborted when time runs out. */
function withTimeout<T>(run: (signal: AbortSignal) => Promise<T>, ms: number): Promise<T> {
  const ctl = new AbortController()
  let timer: Timer
  return Promise.race([
    run(ctl.signal),
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => {
        ctl.abort()
        reject(TIMED_OUT)
      }, ms)
    }),
  ]).finally(() => clearTimeout(timer))
}

/** What an inbound message may carry beyond its text (see MessageService.inbound). */
export interface InboundExtra {
  externalId?: string | null
  file?: MediaRow
  replyTo?: string | null
  /** The name the sender goes by on the network (WhatsApp's profile name): a contact without one takes it. */
  senderName?: string | null
  /** When the network says it was sent (ms); the message is logged at that time (see `eventTime`). */
  at?: number
}

/** How far back a network's own time for an event is believed (Meta retries its webhooks for 7 days). */
const EVENT_TIME_HORIZON_MS = 30 * 24 * 3600_000

/**
 * The time to record for an event the network timed (`told`, ms): its own time — so an event that
 * arrives late (after an outage, a webhook retried) reads when it happened — but never later than
 * `now` nor earlier than `floor`; a missing or implausible time is `now`.
 */
function eventTime(told: number | undefined, now: number, floor: number): number {
  if (told === undefined || !Number.isFinite(told) || told < now - EVENT_TIME_HORIZON_MS) return now
  return Math.min(now, Math.max(floor, told))
}

/** What a caller decides about a new message; the rest starts empty. */
export type MessageFields = Pick<NewMessage, 'id' | 'workspace_id' | 'connection_id' | 'contact_id' | 'group_id' | 'recipient' | 'sender' | 'body' | 'attachments'> & {
  campaign_id?: string | null
  network_template?: string | null
  opt_in_required?: number
  reply_to?: string | null
}

function newMessage(fields: MessageFields, direction: NewMessage['direction'], status: MessageStatus, now: number): NewMessage {
  return {
    campaign_id: null,
    network_template: null,
    opt_in_required: 0,
    reply_to: null,
    ...fields,
    direction,
    status,
    error_code: null,
    error_message: null,
    external_id: null,
    created_at: now,
    updated_at: now,
    sending_at: null,
    sent_at: null,
    delivered_at: null,
    read_at: null,
    failed_at: null,
  }
}

/** The month key of the allowance (UTC calendar month). */
const monthOf = (ms: number) => new Date(ms).toISOString().slice(0, 7)

/**
 * A template that stands for a network template (WhatsApp's) carries at most one attachment, and
 * only one that can be its header: an image (JPEG or PNG), a video or a document; none when its
 * header is text. The uploaded `file`, if any, comes after the listed attachments.
 */
function checkTemplateHeader(listed: MediaRow[], upload: MediaRow | undefined, textHeader: boolean, headerMedia: HeaderMedia | null) {
  const all = upload ? [...listed, upload] : listed
  const field = upload ? 'file' : 'media.attachments'
  if (textHeader && all.length) throw validationFailed({ [field]: ['This template’s WhatsApp header is text (whatsapp.header_text): it carries no attachment.'] })
  if (all.length > 1) throw validationFailed({ 'media.attachments': ['A WhatsApp template message carries at most one attachment, sent as the template’s header (the file included).'] })
  const kind = all.length === 1 ? templateHeaderKind(all[0]!.mime_type) : null
  if (all.length === 1 && !kind) throw validationFailed({ [field]: ['A WhatsApp template’s header must be an image (JPEG or PNG), a video or a document.'] })
  if (headerMedia && !kind) throw validationFailed({ 'media.attachments': [`This template’s WhatsApp header is ${withArticle(headerMedia)} (whatsapp.header_media): attach one (media.attachments or file).`] })
  if (headerMedia && kind !== headerMedia) throw validationFailed({ [field]: [`This template’s WhatsApp header is ${withArticle(headerMedia)} (whatsapp.header_media); the attachment is ${withArticle(kind!)}.`] })
}

/**
 * Why `m` is too large for the number's network (`limitOf`, a driver's mediaLimit), in words
 * beginning with `who` ("This number's network"); null when it fits.
 */
export function tooLargeForNetwork(limitOf: (mimeType: string) => { bytes: number; what: string } | null, m: MediaRow, who: string): string | null {
  const limit = limitOf(m.mime_type)
  return limit && m.size > limit.bytes ? `${who} takes ${limit.what} up to ${limit.bytes / (1024 * 1024)} MB; ${m.filename || 'the file'} is ${m.size.toLocaleString('en-US')} bytes.` : null
}

/** 422 for a file larger than the number's network takes of its kind (WhatsApp: images 5 MB, …). */
function checkNetworkLimits(limitOf: (mimeType: string) => { bytes: number; what: string } | null, listed: MediaRow[], upload: MediaRow | undefined) {
  for (const m of upload ? [...listed, upload] : listed) {
    const fault = tooLargeForNetwork(limitOf, m, "This number's network")
    if (fault) throw validationFailed({ [m === upload ? 'file' : 'media.attachments']: [fault] })
  }
}

/** The key of a number's hold on one recipient (or group) the network asked to slow down for. */
const holdKey = (connectionId: string, row: MessageRow) => `${connectionId} ${row.group_id ?? row.recipient}`

export class MessageService {
  private readonly store: MessageStore
  /** Called after a commit that queued messages on a number. */
  onQueued: (connectionId: string) => void = () => {}

  constructor(
    private readonly deps: Deps,
    private readonly workspaces: WorkspaceService,
    private readonly contacts: ContactService,
    private readonly suppressions: SuppressionService,
    private readonly connections: ConnectionService,
    private readonly webhooks: WebhookService,
    private readonly media: MediaService,
    private readonly templates: TemplateService,
  ) {
    this.store = new MessageStore(deps.engine)
  }
  /** A message by id in any workspace (the network's own callbacks and the sandbox), or null. */
  getAny(id: string, q?: Queries): Promise<MessageRow | null> {
    return this.store.getAny(id, q)
  }

  /** The message a network knows by its own id on this number, or null. */
  byExternal(connectionId: string, externalId: string): Promise<MessageRow | null> {
    return this.store.byExternal(connectionId, externalId)
  }

  /** The message any part of which the network knows by this id (a split send), or null. */
  byAnyPart(connectionId: string, externalId: string): Promise<MessageRow | null> {
    return this.store.byAnyPart(connectionId, externalId)
  }

  /** The message whose later part (not the first) the network knows by this id, or null. */
  byLaterPart(connectionId: string, externalId: string): Promise<MessageRow | null> {
    return this.store.byLaterPart(connectionId, externalId)
  }

  /** The number's sends since `since` that failed: how many, and the newest one's error. */
  failuresSince(connectionId: string, since: number) {
    return this.store.failuresSince(connectionId, since)
  }

  /** The number's one-to-one sends since `since` still without their last report (see ConnectionDriver.resumeReports). */
  awaitingReports(connectionId: string, since: number) {
    return this.store.awaitingReports(connectionId, since)
  }

  /** When the number released its messages since `since` (ms), oldest first: what the pacer counts. */
  releasesSince(connectionId: string, since: number): Promise<number[]> {
    return this.store.releasesSince(connectionId, since)
  }

  /** The contact's messages after `afterSeq` (0: from the first), in order, at most `limit`. */
  ofContact(contactId: string, afterSeq: number, limit: number): Promise<MessageRow[]> {
    return this.store.ofContact(contactId, afterSeq, limit)
  }

  /** What an erasure needs of each of the contact's messages: id, direction, status, attachments (`tx`: inside its write, locked). */
  erasureRowsOf(contactId: string, tx?: Queries) {
    return this.store.erasureRowsOf(contactId, tx)
  }

  /** Inside a write: take a send marked as not with its network (see `waitOffNetwork`) from its sender; whether it was still marked. */
  takeResendIn(tx: Queries, id: string) {
    return this.store.takeResend(tx, id)
  }

  /** Inside an erasure's write: the contact's messages lose everything about the person (see MessageStore.redactContact). */
  redactContactIn(tx: Queries, contactId: string, phone: string, now: number) {
    return this.store.redactContact(tx, contactId, phone, now)
  }

  /** For /metrics (see MessageStore.gauges). */
  gauges() {
    return this.store.gauges()
  }

  /** How many messages wait in the number's queue. */
  queuedCount(connectionId: string): Promise<number> {
    return this.store.queuedCount(connectionId)
  }

  /**
   * The workspace's outbound messages per UTC day since `since` (ms), by when each reached sent,
   * delivered, read or failed; and the messages received per day.
   */
  async perDay(workspaceId: string, since: number) {
    const steps = ['sent', 'delivered', 'read', 'failed', 'received'] as const
    const counts = await Promise.all(steps.map((step) => this.store.perDay(workspaceId, step, since)))
    return Object.fromEntries(steps.map((step, i) => [step, counts[i]!])) as Record<(typeof steps)[number], { day: string; n: number }[]>
  }

  /** The numbers with queued messages. */
  connectionsWithQueue(): Promise<string[]> {
    return this.store.connectionsWithQueue()
  }

  toPublic(row: MessageRow): PublicMessage {
    const timeline: { status: string; at: string }[] = []
    if (row.direction === 'outbound') timeline.push({ status: 'queued', at: iso(row.created_at)! })
    const stamps: [string, number | null][] = [
      ['sending', row.sending_at],
      ['sent', row.sent_at],
      ['delivered', row.delivered_at],
      ['read', row.read_at],
      ['failed', row.failed_at],
    ]
    for (const [status, at] of stamps.filter(([, at]) => at !== null).sort((a, b) => a[1]! - b[1]!)) timeline.push({ status, at: iso(at)! })
    const error = row.error_code ? { code: row.error_code, message: row.error_message ?? '' } : null
    const state: PublicMessage['outcome']['state'] = row.status === 'queued' || row.status === 'sending' ? 'pending' : row.status
    const stateAt = state === 'pending' ? null : row[TIME_COLUMN[row.status as keyof typeof TIME_COLUMN]]
    return {
      id: row.id,
      direction: row.direction,
      status: row.status,
      connection_id: row.connection_id,
      contact_id: row.contact_id,
      recipient: row.recipient,
      sender: row.sender,
      group_id: row.group_id,
      body: row.body,
      attachments: JSON.parse(row.attachments) as string[],
      reply_to: row.reply_to,
      error,
      created_at: iso(row.created_at),
      updated_at: iso(row.updated_at),
      outcome: { state, at: iso(stateAt), error },
      timeline,
    }
  }

  async get(workspaceId: string, id: string): Promise<MessageRow> {
    const row = await this.store.get(workspaceId, id)
    if (!row) throw notFound('message')
    return row
  }

  /**
   * Whether a free-form message may go to `phone` through the number now: its network has no
   * service window, or the person wrote to the number within it.
   */
  async inServiceWindow(live: LiveConnection, phone: string, now: number, q?: Queries): Promise<boolean> {
    if (!live.driver.serviceWindowMs) return true
    const last = await this.store.lastInbound(live.row.id, phone, q)
    return last !== null && last > now - live.driver.serviceWindowMs
  }

  /** 422 outside_service_window: `phone` has not written to the number within its network's service window. */
  private async checkServiceWindow(live: LiveConnection, phone: string, now: number, q: Queries) {
    if (await this.inServiceWindow(live, phone, now, q)) return
    const hours = Math.round(live.driver.serviceWindowMs! / 3600_000)
    throw refused('outside_service_window', `The recipient has not written to this number in the last ${hours} hours: WhatsApp delivers only template messages then. Send a template linked to an approved WhatsApp template (template_id).`)
  }

  /** Refusals shared by one-to-one and group sends: a number that is not online, the allowance. */
  checkSendable(live: LiveConnection, workspaceId: string, now: number, q?: Queries): void | Promise<void> {
    if (live.row.status !== 'online') throw refused('connection_offline', 'The connection is offline.')
    // (no allowance set, the usual case: nothing to read)
    if (this.allowanceOf(workspaceId) !== null) return this.checkAllowance(workspaceId, now, q)
  }

  /** The workspace's monthly message allowance (null: none). */
  private allowanceOf(workspaceId: string): number | null {
    const ws = this.workspaces.cached(workspaceId)
    return ws ? this.workspaces.settings(ws).message_allowance : null
  }

  /**
   * Whether the workspace has used its message allowance for the month of `now` (`q`: the write it
   * is checked in, if any). Where instances share the database, a write first waits for the
   * workspace's allowance to be its own to count (no other transaction counts it until this one
   * commits), and `queueIn` checks again after counting (for the writes that share its transaction).
   */
  async allowanceExhausted(workspaceId: string, now: number, q?: Queries): Promise<boolean> {
    const allowance = this.allowanceOf(workspaceId)
    if (allowance === null) return false
    if (q && this.deps.engine.shared) await this.store.allowanceTurn(q, workspaceId)
    return (await this.store.usage(workspaceId, monthOf(now), q)) >= allowance
  }

  async checkAllowance(workspaceId: string, now: number, q?: Queries) {
    if (await this.allowanceExhausted(workspaceId, now, q)) throw refused('allowance_exhausted', 'The workspace has used its message allowance for this month.')
  }

  /** Insert a queued outbound message and count it against the allowance (inside the write `tx`). */
  async queueIn(tx: Queries, fields: MessageFields, now: number): Promise<MessageRow> {
    const row = newMessage(fields, 'outbound', 'queued', now)
    await Promise.all([this.store.insert(tx, row), this.store.countUsage(tx, row.workspace_id, monthOf(now))])
    // writes sharing a PostgreSQL transaction read the usage before any of them counted: past the
    // allowance now, this one is refused, which runs each of them again in a transaction of its own
    // (where the check before counting holds). SQLite runs its writes one after another.
    const allowance = this.deps.engine.shared ? this.allowanceOf(row.workspace_id) : null
    if (allowance !== null && (await this.store.usage(row.workspace_id, monthOf(now), tx)) > allowance) throw refused('allowance_exhausted', 'The workspace has used its message allowance for this month.')
    return { ...row, seq: 0 }
  }

  /**
   * Accept a one-to-one send: every refusal is decided before anything is written, and the
   * message, a new contact, an uploaded file's media row (`upload`, already scanned and stored)
   * and `alsoIn` (the idempotency record) commit together.
   */
  async send(workspaceId: string, input: SendInput, alsoIn?: (tx: Queries, row: MessageRow) => Promise<void>, upload?: MediaRow): Promise<MessageRow> {
    const row = await this.deps.engine.write(async (tx) => {
      const now = this.deps.clock.now()
      const live = await this.connections.obtain(workspaceId, input.connection_id)
      // a number the network reported for a contact's number (network_addresses) is that contact;
      // the recipient's own entry on the suppression list is read beside it (one round trip on PostgreSQL)
      const [contact, recipientSuppressed] = input.contact_id
        ? [await this.contacts.find(workspaceId, input.contact_id, tx), false]
        : await Promise.all([this.contacts.byPhoneOrAddress(workspaceId, input.recipient!, tx), this.suppressions.isSuppressed(workspaceId, input.recipient!, tx)])
      if (input.contact_id && !contact) throw notFound('contact')
      const media: MediaRow[] = []
      for (const id of input.attachments) media.push(await this.media.get(workspaceId, id, tx))
      const phone = contact ? contact.phone : input.recipient!
      const filled = input.template_id === undefined ? null : await this.fillTemplate(tx, workspaceId, input, contact, phone, upload !== undefined || media.length > 0)
      if (filled?.networkTemplate) checkTemplateHeader(media, upload, filled.headerText !== null, filled.headerMedia)
      if (live.driver.mediaLimit) checkNetworkLimits(live.driver.mediaLimit.bind(live.driver), media, upload)
      if (contact?.consent_status === 'opted_out') throw refused('recipient_opted_out', 'The recipient has opted out.')
      if (recipientSuppressed || (phone !== input.recipient && (await this.suppressions.isSuppressed(workspaceId, phone, tx)))) throw refused('recipient_suppressed', 'The recipient is on the suppression list.')
      if (filled?.marketing && contact?.consent_status !== 'opted_in') throw refused('recipient_not_opted_in', 'A marketing template goes only to contacts who opted in.')
      await this.checkSendable(live, workspaceId, now, tx)
      // WhatsApp takes a free-form message only within 24 hours of the person's last message
      if (live.driver.serviceWindowMs && !filled?.networkTemplate) await this.checkServiceWindow(live, phone, now, tx)
      if (upload) await this.media.insertIn(tx, upload, { quota: true })
      const attachments = upload ? [...input.attachments, upload.id] : input.attachments
      // a number not yet a contact becomes one; the writes go together, in order
      const fresh = contact ? null : this.contacts.fresh(workspaceId, { phone }, now)
      const fields: MessageFields = {
        id: uuid(),
        workspace_id: workspaceId,
        connection_id: live.row.id,
        contact_id: (contact ?? fresh!).id,
        group_id: null,
        recipient: phone,
        sender: live.row.phone,
        body: filled ? filled.body : (input.body ?? null),
        attachments: JSON.stringify(attachments),
        network_template: filled?.networkTemplate ?? null,
        opt_in_required: filled?.marketing ? 1 : 0,
      }
      const [, msg] = await Promise.all([fresh ? this.contacts.insertIn(tx, fresh) : this.contacts.touchIn(tx, contact!.id, now), this.queueIn(tx, fields, now)])
      await alsoIn?.(tx, msg)
      return msg
    })
    this.onQueued(row.connection_id)
    return row
  }

  /**
   * A template sent one-to-one (inside the send's write): its text rendered for the recipient — a
   * number not yet a contact has only its phone — and the Meta template it stands for, if any.
   * Refused like a body would be: a numbered placeholder without a value, or a text that renders
   * empty or past the body limit for this recipient; and a Meta template WhatsApp would refuse for
   * this recipient (its header text empty or too long, a parameter or button value empty).
   */
  private async fillTemplate(tx: Queries, workspaceId: string, input: SendInput, contact: ContactRow | null, phone: string, withMedia: boolean) {
    const tpl = await this.templates.find(workspaceId, input.template_id!, tx)
    if (!tpl) throw notFound('template')
    const numbered = input.variables ?? {}
    this.templates.requireNumbered(tpl, numbered)
    const { text, networkTemplate, headerText, emptyValue } = fill(tpl.body, tpl.whatsapp, { name: contact?.name ?? null, phone, metadata: contact ? (JSON.parse(contact.metadata) as Record<string, unknown>) : {}, numbered })
    const fault = renderedFault(text)
    if (fault === 'rendered_too_long') throw validationFailed({ template_id: [`The template renders to more than ${MAX_BODY} characters for this recipient.`] })
    if (fault === 'rendered_empty' && !withMedia) throw validationFailed({ template_id: ['The template renders to an empty text for this recipient.'] })
    const header = headerFault(headerText)
    if (header === 'rendered_too_long') throw validationFailed({ template_id: [`The template’s WhatsApp header text renders to more than ${MAX_HEADER_TEXT} characters for this recipient.`] })
    if (header === 'rendered_empty') throw validationFailed({ template_id: ['The template’s WhatsApp header text renders empty for this recipient.'] })
    if (emptyValue !== null) throw validationFailed({ template_id: [`The WhatsApp template gets no value for ${emptyValue} for this recipient; WhatsApp refuses empty values.`] })
    return { body: fault === 'rendered_empty' ? null : text, marketing: tpl.category === 'marketing', networkTemplate, headerText, headerMedia: this.templates.headerMediaOf(tpl) }
  }

  /** A page of the operator's search of the log (text in the body, a time range; see MessageStore.search). */
  search(workspaceId: string, f: Search, limit: number, offset: number) {
    return this.store.search(workspaceId, f, limit, offset)
  }

  /** A page of the log (see MessageRepo.list); 404 for a contact that is not the workspace's. */
  async list(workspaceId: string, filter: { direction?: string; status?: string; contactId?: string }, limit: number, offset: number) {
    if (filter.contactId && !(await this.contacts.find(workspaceId, filter.contactId))) throw notFound('contact')
    return this.store.list(workspaceId, filter, limit, offset)
  }

  private emit(tx: Queries, row: MessageRow, type: EventType) {
    return this.webhooks.enqueueIn(tx, row.workspace_id, type, this.toPublic(row))
  }

  /**
   * Move a message forward (inside a write). Returns the new row, or null when nothing changed.
   * Group messages stop at sent; failed only follows queued, sending or sent.
   */
  async advanceIn(tx: Queries, id: string, status: MessageStatus, at: number, extra: Partial<MessageRow> = {}, told?: number): Promise<MessageRow | null> {
    // decided from the message as read and written only over that status: moved meanwhile by
    // another write (two of the network's reports at once, on two instances), decided again
    for (;;) {
      const step = await this.advanceOnce(tx, id, status, at, extra, told)
      if (step !== undefined) return step
    }
  }

  /** `advanceIn` from the message as it is now: the new row, null (nothing to change), or undefined when another write moved it first. */
  private async advanceOnce(tx: Queries, id: string, status: MessageStatus, at: number, extra: Partial<MessageRow>, told?: number): Promise<MessageRow | null | undefined> {
    const row = await this.store.getAny(id, tx)
    if (!row || row.direction !== 'outbound') return null
    if (row.group_id !== null && (status === 'delivered' || status === 'read')) return null
    const fields: Partial<MessageRow> = { ...extra }
    const col = status === 'queued' ? null : TIME_COLUMN[status]
    // `told`: the network's time for it, kept when plausible (not before the message left)
    if (col && row[col] === null) fields[col] = told === undefined ? at : eventTime(told, at, row.sent_at ?? row.sending_at ?? row.created_at)
    let changed = false
    if (status === 'failed') {
      if (row.status === 'queued' || row.status === 'sending' || row.status === 'sent') {
        fields.status = 'failed'
        changed = true
      } else if (row.status === 'failed' || RANK[row.status] >= RANK.delivered) {
        return null
      }
    } else if (row.status !== 'failed' && RANK[status] > RANK[row.status]) {
      fields.status = status
      changed = true
    }
    if (Object.keys(fields).length === 0) return null
    fields.updated_at = at
    if (!changed) {
      delete fields.error_code
      delete fields.error_message
    }
    if (!(await this.store.update(tx, id, fields, row.status))) return undefined
    const next = { ...row, ...fields } as MessageRow
    if (changed && (status === 'sent' || status === 'delivered' || status === 'read' || status === 'failed')) await this.emit(tx, next, `message.${status}`)
    return next
  }

  /**
   * Why a one-to-one message may no longer leave, as the refusal a send would get now: its
   * recipient opted out or was suppressed after the message was accepted; for a group message,
   * what the groups module says (`groupRefusal`). null when it may.
   */
  async refusalFor(row: MessageRow, q?: Queries): Promise<Refusal | null> {
    if (row.direction !== 'outbound') return null
    if (row.group_id !== null) return this.groupRefusal(row, q)
    const contact = row.contact_id ? await this.contacts.find(row.workspace_id, row.contact_id, q) : null
    if (contact?.consent_status === 'opted_out') return { code: 'recipient_opted_out', message: 'The recipient opted out before the message was sent.' }
    // in the order `send` checks them, so a message refused at release gets the code a send would
    if (row.recipient !== null && (await this.suppressions.isSuppressed(row.workspace_id, row.recipient, q))) return { code: 'recipient_suppressed', message: 'The recipient was suppressed before the message was sent.' }
    if (row.opt_in_required === 1 && contact?.consent_status !== 'opted_in') return { code: 'recipient_not_opted_in', message: 'The recipient was no longer opted in when the marketing message was to be sent.' }
    // a free-form message held by the caps past the end of its recipient's 24-hour window would
    // only be refused by WhatsApp (131047): it fails here, as the send would have been refused now
    if (row.network_template === null && row.recipient !== null) {
      const live = this.connections.find(row.connection_id)
      if (live?.driver.serviceWindowMs && !(await this.inServiceWindow(live, row.recipient, this.deps.clock.now(), q))) {
        return { code: 'outside_service_window', message: 'The recipient’s 24-hour service window closed before the message was sent: WhatsApp delivers only template messages then.' }
      }
    }
    return null
  }

  /**
   * The pacer's direct lane (inside its write): the oldest queued one-to-one or group message of
   * a number that may still leave. Consent and suppression are checked again at release, since a
   * message can wait hours behind the caps: one whose recipient opted out or was suppressed in the
   * meantime (or whose group turned admins-only) fails with the refusal code and the next one is
   * looked at. After MAX_REFUSED_PER_RELEASE refusals in one go it returns null and asks to be
   * woken again (the rest is looked at next tick).
   */
  async releasableHeadIn(tx: Queries, connectionId: string, now: number): Promise<MessageRow | null> {
    for (let refused = 0; refused < MAX_REFUSED_PER_RELEASE; refused++) {
      const row = (await this.store.head(connectionId, 1, tx))[0]
      if (!row) return null
      const refusal = await this.refusalFor(row, tx)
      if (!refusal) return row
      await this.advanceIn(tx, row.id, 'failed', now, { error_code: refusal.code, error_message: refusal.message })
    }
    queueMicrotask(() => this.onQueued(connectionId))
    return null
  }

  /**
   * Claim messages for release: queued → sending, in one write; returns those claimed. One no
   * longer queued (failed by another instance's write since it was read) is not: it must not be sent.
   */
  async markSendingIn(tx: Queries, rows: MessageRow[], at: number): Promise<MessageRow[]> {
    const claimed: MessageRow[] = []
    for (const row of rows) {
      const when = Math.max(at, row.created_at)
      if (await this.store.claim(tx, row.id, at)) claimed.push({ ...row, status: 'sending', sending_at: row.sending_at ?? when, updated_at: when })
    }
    return claimed
  }

  /** Whether a claim markSendingIn made (its row) landed: the message is `sending` by it, as made. */
  claimLandedIn(tx: Queries, row: MessageRow): Promise<boolean> {
    return this.store.claimed(tx, row)
  }

  /**
   * Messages whose claim this instance made and has not settled yet (the pacer's claims whose
   * COMMIT's answer was lost): kept in hand, so that the crash recovery of a number this instance
   * takes again does not take them for sends cut off (`letGo` when settled).
   */
  keepInHand(id: string) {
    this.inHand.add(id)
  }

  letGo(id: string) {
    this.inHand.delete(id)
  }

  /** A claim markSendingIn made (its row), where it landed, handed back (see `handBack`): whether it had landed. */
  handBackClaimIn(tx: Queries, row: MessageRow): Promise<boolean> {
    return this.store.handBackClaim(tx, row)
  }

  /**
   * The network accepted a message: its id for it, for its later parts if it took several, and the
   * recipient's address there when that is not the number sent to (see network_addresses).
   */
  markSent(id: string, { externalId, partIds = [], recipientAddress }: Accepted) {
    return this.deps.engine.write(async (tx) => {
      const row = await this.advanceIn(tx, id, 'sent', this.deps.clock.now(), { external_id: externalId })
      if (row && partIds.length) await this.store.addParts(tx, row.connection_id, id, partIds)
      if (row?.recipient && recipientAddress && recipientAddress !== row.recipient) await this.contacts.addAddressIn(tx, row.workspace_id, recipientAddress, row.recipient)
      return row
    })
  }

  markFailed(id: string, code: string, message: string) {
    return this.deps.engine.write((tx) => this.advanceIn(tx, id, 'failed', this.deps.clock.now(), { error_code: code, error_message: message }))
  }

  /**
   * A receipt from the network (driver events or the sandbox admin endpoint); `at`: when the
   * network says it happened (ms), recorded as its time when plausible.
   */
  receipt(id: string, status: ReceiptStatus, error?: { code?: string; message?: string } | null, at?: number) {
    const extra: Partial<MessageRow> = status === 'failed' ? { error_code: error?.code || 'delivery_failed', error_message: error?.message || 'The network reported the message as failed.' } : {}
    return this.deps.engine.write((tx) => this.advanceIn(tx, id, status, this.deps.clock.now(), extra, at))
  }

  /**
   * An inbound message: logged as delivered; opt-out keywords opt the sender out. `externalId` is
   * the network's id for it: a network that delivers the same message again (Meta retries its
   * webhooks) gets the row already logged back, and nothing is logged or announced twice. `file`:
   * what the sender attached, prepared (scanned and stored) and inserted with the message.
   * `replyTo`: the id of our message it answers, when the network says so. `from` is the sender's
   * address on the network: one the network gave for a number Capstan sent to (network_addresses)
   * is logged as that number, so a reply or a STOP from it is that contact's.
   */
  async inbound(connectionId: string, from: string, body: string, extra: InboundExtra = {}): Promise<MessageRow> {
    const live = await this.connections.obtainAny(connectionId)
    const file = extra.file
    let row: MessageRow | undefined
    try {
      let fresh = false
      row = await this.deps.engine.write(async (tx) => {
        const r = await this.inboundIn(tx, live, from, body, extra)
        fresh = r.seq === 0 // (one logged before is read back with its place in the log)
        return r
      })
      if (fresh) this.onInbound(live.row.driver)
      return row
    } finally {
      // a message logged before (the same external id) keeps what it had: this copy's file goes
      if (file) await this.media.settle(file, row !== undefined && row.attachments.includes(file.id))
    }
  }

  private async inboundIn(tx: Queries, live: LiveConnection, address: string, body: string, { externalId = null, file, replyTo = null, senderName = null, at }: InboundExtra): Promise<MessageRow> {
    const connectionId = live.row.id
    if (externalId !== null) {
      const seen = await this.store.byExternal(connectionId, externalId, tx)
      if (seen) return seen
    }
    const now = this.deps.clock.now()
    const ws = live.row.workspace_id
    // the number the network's address for the sender stands for (usually the address itself)
    const from = await this.contacts.phoneOf(ws, address, tx)
    let contact = await this.contacts.getByPhone(ws, from, tx)
    // a name the team gave is kept; a contact without one takes the sender's own
    const name = senderName?.trim() ? clipCodePoints(senderName.trim(), 255) : null
    if (!contact || (name !== null && !contact.name)) contact = (await this.contacts.upsertIn(tx, ws, { phone: from, ...(name !== null ? { name } : {}) }, 'inbound', contact)).row
    else await this.contacts.touchIn(tx, contact.id, now)
    if (file) await this.media.insertIn(tx, file)
    // logged at the time the network says it was sent (after an outage, not at its late arrival)
    const sentAt = eventTime(at, now, 0)
    const row = newMessage({ id: uuid(), workspace_id: ws, connection_id: connectionId, contact_id: contact.id, group_id: null, recipient: live.row.phone, sender: from, body, attachments: JSON.stringify(file ? [file.id] : []), reply_to: replyTo }, 'inbound', 'delivered', sentAt)
    row.updated_at = now
    row.delivered_at = sentAt
    if (live.driver.serviceWindowMs) await this.store.openWindow(tx, connectionId, ws, from, sentAt)
    row.external_id = externalId
    await this.store.insert(tx, row)
    const full = { ...row, seq: 0 }
    await this.emit(tx, full, 'message.received')
    if (OPT_OUT_KEYWORDS.has(body.trim().toUpperCase()) && contact.consent_status !== 'opted_out') await this.contacts.setConsentIn(tx, contact, 'opted_out', `inbound:${row.id}`, now)
    return full
  }

  /**
   * The person at `phone` stopped marketing messages on the network (WhatsApp's "Stop promotions",
   * or a marketing send the network refused for that reason). Their marketing consent is
   * withdrawn: an opted-in contact of the connection's workspace goes back to `unknown` — so
   * campaigns and marketing templates skip them while order updates still reach them — and the
   * change is written to the consent ledger with `source`. An opted-out or unknown contact, or
   * a number that is not a contact, is left as it is. Returns whether the consent changed.
   */
  async marketingStopped(connectionId: string, phone: string, source: string): Promise<boolean> {
    const live = await this.connections.load(connectionId)
    if (!live) return false
    return this.deps.engine.write(async (tx) => {
      const ws = live.row.workspace_id
      const contact = await this.contacts.getByPhone(ws, await this.contacts.phoneOf(ws, phone, tx), tx)
      if (contact?.consent_status !== 'opted_in') return false
      return this.contacts.setConsentIn(tx, contact, 'unknown', source, this.deps.clock.now(), (from) => from === 'opted_in')
    })
  }

  /**
   * After a crash: a message found in `sending` is never sent again blindly. It is sent only if
   * the driver confirms the network has it; otherwise it fails as send_interrupted. A network
   * that tells later (`confirmLater`) is waited for in the background: its report arrives over
   * HTTP, once the server listens. A send a graceful stop handed back (the network never had it)
   * goes on instead. `mine`: the numbers whose sends this instance settles (those it holds the
   * lease of, and removed ones).
   */
  async recoverInterrupted(mine: (connectionId: string) => boolean = () => true) {
    for (const row of await this.store.inFlight()) {
      // (another instance's send, on a number it holds: not this one's to settle; nor a send this
      // process has in hand — released since the number was taken — or is settling already)
      if (!mine(row.connection_id) || this.inHand.has(row.id)) continue
      const live = this.connections.find(row.connection_id)
      if (row.resend === 1) {
        // a send a graceful stop handed back before the network had it (see `stopping`): it goes
        // on where it stopped, by whoever clears its mark first (a removed number's fails)
        if (!live) await this.markFailed(row.id, 'connection_removed', 'The connection was removed before the message was sent.')
        else if (await this.takeOn(row)) void this.dispatch(live, row, true)
        continue
      }
      // settleUnknown asks `confirm` first itself
      if (live?.driver.confirmLater) {
        void this.track(row.id, () => this.settleUnknown(live, row, INTERRUPTED))
        continue
      }
      this.inHand.add(row.id)
      try {
        const confirmed = live ? await this.askNetwork(live, row) : null
        if (confirmed) await this.markSent(row.id, confirmed)
        else await this.markFailed(row.id, INTERRUPTED.code, INTERRUPTED.message)
      } finally {
        this.inHand.delete(row.id)
      }
    }
  }

  /**
   * A send whose outcome is unknown (timed out, its answer lost, or interrupted by a crash): sent
   * if the driver confirms the network has it — at once or, where it can tell later, within its
   * wait — otherwise failed with `why`. Left in `sending` when the server stops first (the next
   * start settles it). Never sent again.
   */
  private async settleUnknown(live: LiveConnection, row: MessageRow, why: { code: string; message: string }) {
    let confirmed = await this.askNetwork(live, row)
    if (!confirmed && live.driver.confirmLater) {
      const later = await live.driver.confirmLater(row.id).catch(() => null)
      // the server is stopping: settled at the next start (a removed number's send fails now)
      if (later === STOPPED && this.connections.stopped) return
      confirmed = later === STOPPED ? null : later
    }
    await this.record(() => (confirmed ? this.markSent(row.id, confirmed) : this.markFailed(row.id, why.code, why.message)))
    this.onSettled(row)
  }

  /** Messages still queued after 24 h (their number never came back) fail as expired. */
  expireQueued(maxAgeMs = 86_400_000) {
    const cutoff = this.deps.clock.now() - maxAgeMs
    // a backlog posted in one burst expires in one burst
    return this.failInBatches(() => this.store.queuedBefore(cutoff, EXPIRE_BATCH), { error_code: 'expired', error_message: 'The message was still queued after 24 hours.' })
  }

  /**
   * Fail what is still queued on a removed number (one write for a queue of 100,000 held the
   * server for seconds), and its sends a graceful stop handed back (the network never had them).
   * Also at start-up, for a removal a crash cut off half-way (`failQueuedOfRemoved`).
   */
  async failQueuedOf(connectionId: string) {
    const why = { error_code: 'connection_removed', error_message: 'The connection was removed before the message was sent.' }
    await this.failInBatches(() => this.store.queuedFor(connectionId, EXPIRE_BATCH), why)
    // each only while still marked: one another instance took on meanwhile is its to finish
    await this.failInBatches(() => this.store.handedBackFor(connectionId, EXPIRE_BATCH), why, (tx, m) => this.store.takeResend(tx, m.id))
  }

  /**
   * Fail the messages `next` gives (each that `only` lets through, in the same write), a batch per
   * write, with requests served between, until it gives none.
   */
  private async failInBatches(next: () => Promise<MessageRow[]>, why: { error_code: string; error_message: string }, only?: (tx: Queries, m: MessageRow) => Promise<boolean>) {
    for (;;) {
      const batch = await next()
      if (batch.length === 0) return
      await this.deps.engine.write(async (tx) => {
        const now = this.deps.clock.now()
        for (const m of batch) if (!only || (await only(tx, m))) await this.advanceIn(tx, m.id, 'failed', now, why)
      })
      await nextTurn()
    }
  }

  /** At start-up: the queued messages of numbers that are removed (`removed` tells which) fail. */
  async failQueuedOfRemoved(removed: (connectionId: string) => boolean) {
    for (const id of await this.store.connectionsWithQueue()) if (removed(id)) await this.failQueuedOf(id)
  }

  /** Sends handed to a driver whose outcome is not recorded yet (a graceful stop waits for them). */
  inFlight = 0
  /** The messages of those sends (and of those being settled after a crash): in `sending`, but not cut off. */
  private readonly inHand = new Set<string>()

  /**
   * Hand one released message to its number's driver and record the outcome. `resumed`: one a
   * graceful stop handed back goes on as after a retry's wait (whether it may still go is read first).
   */
  dispatch(live: LiveConnection, row: MessageRow, resumed = false) {
    return this.track(row.id, async () => this.dispatchOnce(live, row, row.group_id === null ? null : await this.groupExternalId(row).catch(() => null), resumed))
  }

  /** The group's id at the network, for a group message (set by the groups module). */
  groupExternalId: (row: MessageRow) => Promise<string | null> = async () => null

  /** Work that records the outcome of message `id`'s send, counted in `inFlight` and kept in hand. */
  private async track(id: string, work: () => Promise<unknown>) {
    this.inFlight++
    this.inHand.add(id)
    try {
      await work()
    } catch (e) {
      // the outcome could not be written (the server is stopping): the message stays `sending`
      // and is settled by crash recovery at the next start
      this.onDispatchError(e, 'record a send outcome')
    } finally {
      this.inFlight--
      this.inHand.delete(id)
    }
  }

  /** A send's outcome, or a read it needs before it leaves, could not be made (`doing`: which). */
  onDispatchError: (e: unknown, doing: string) => void = () => {}
  /** An inbound message was logged (not a duplicate of one logged before), for /metrics. */
  onInbound: (driver: string) => void = () => {}
  /** A driver threw something other than a DriverError (a bug): the message fails as driver_error. */
  onDriverBug: (row: MessageRow, e: unknown) => void = () => {}
  /** Why a queued group message may no longer leave (set by the groups module). */
  groupRefusal: (row: MessageRow, q?: Queries) => Promise<Refusal | null> = async () => null
  /** Called after a released message reached sent or failed (campaign completion watches it). */
  onSettled: (row: MessageRow) => void = () => {}
  /** The network refused a message's template as such (a campaign sending it pauses); settles once the pause is written. */
  onTemplateRefused: (row: MessageRow, code: string) => Promise<void> = async () => {}
  /** The network asked a number to slow down (the pacer backs off). */
  onThrottled: (connectionId: string) => void = () => {}

  /** The message's attachments as the driver gets them; null when one is gone (expired). */
  private async outboundMedia(row: MessageRow): Promise<OutboundMedia[] | null> {
    const out: OutboundMedia[] = []
    for (const id of JSON.parse(row.attachments) as string[]) {
      const m = await this.media.find(row.workspace_id, id)
      if (!m) return null
      out.push({ id: m.id, mimeType: m.mime_type, filename: m.filename, size: m.size, bytes: (length) => this.media.store.bytes(m.blob, length).catch(storeAway) })
    }
    return out
  }

  private async dispatchOnce(live: LiveConnection, row: MessageRow, groupExternalId: string | null, resumed: boolean): Promise<unknown> {
    const { failed: backoff, throttled: throttleBackoff } = this.retryDelays
    const attachments = await this.beforeNetwork(() => this.readAgain(() => this.outboundMedia(row)))
    if (attachments === STOPPING) return this.handBack(row)
    if (!attachments) {
      await this.record(() => this.markFailed(row.id, 'media_unavailable', 'An attachment expired before the message was sent.'))
      this.onSettled(row)
      return
    }
    const template = row.network_template === null ? null : (JSON.parse(row.network_template) as NetworkTemplate)
    // counted apart: a network's "slow down" answers do not use up the retries of its failures
    let throttles = 0
    let failures = 0
    for (let attempt = 0; ; attempt++) {
      // a retry can come minutes later (a throttled number): the recipient may have opted out since
      const refusal = attempt > 0 || resumed ? await this.beforeNetwork(() => this.readAgain(() => this.refusalFor(row))) : null
      if (refusal === STOPPING) return this.handBack(row)
      if (refusal) {
        await this.record(() => this.markFailed(row.id, refusal.code, refusal.message))
        this.onSettled(row)
        return
      }
      // the network asked to slow down messages to this recipient: this one waits its turn too
      if (this.recipientHolds.size > 0 && !(await this.recipientHeld(live.row.id, row))) return
      // the server stops before this message reached its network: it is handed back instead
      if (this.stopping.signal.aborted) return this.handBack(row)
      let accepted: Accepted
      try {
        accepted = await withTimeout((signal) => live.driver.send({ id: row.id, recipient: row.group_id ? null : row.recipient, groupExternalId, body: row.body, attachments, template }, signal), this.deps.config.driverTimeoutMs)
      } catch (e) {
        // the network may or may not have it: never sent again blindly
        if (e === TIMED_OUT) return this.settleUnknown(live, row, { code: 'send_timeout', message: 'The network did not answer in time; the message was not sent again.' })
        if (e instanceof UnconfirmedSend) return this.settleUnknown(live, row, e)
        if (!(e instanceof DriverError)) this.onDriverBug(row, e)
        const err = e instanceof DriverError ? e : new DriverError('driver_error', 'The network driver failed.', false)
        if (err.throttled && throttles < throttleBackoff.length) {
          const wait = throttleBackoff[throttles++]!
          if (err instanceof RecipientThrottled) this.holdRecipient(live.row.id, row, wait)
          else this.onThrottled(live.row.id)
          if (!(await this.waitOffNetwork(row, wait))) return
          continue
        }
        if (err.retryable && !err.throttled && failures < backoff.length) {
          if (!(await this.waitOffNetwork(row, backoff[failures++]!))) return
          continue
        }
        await this.record(() => this.markFailed(row.id, err.code, err.message))
        // (a pause that could not be written is logged where it is wired; the next refusal pauses it)
        if (err instanceof TemplateRefused) void this.onTemplateRefused(row, err.code).catch(() => {})
        this.onSettled(row)
        return
      }
      // the network has it: a failure to write that down is no failure of the send
      await this.record(() => this.markSent(row.id, accepted))
      this.onSettled(row)
      return
    }
  }

  /** Recipients the network asked to slow down for, per number: until when (ms, this process's clock). */
  private readonly recipientHolds = new Map<string, number>()

  private holdRecipient(connectionId: string, row: MessageRow, ms: number) {
    const key = holdKey(connectionId, row)
    if (this.recipientHolds.size >= 10_000) for (const [k, until] of this.recipientHolds) if (until <= performance.now()) this.recipientHolds.delete(k)
    this.recipientHolds.set(key, Math.max(this.recipientHolds.get(key) ?? 0, performance.now() + ms))
  }

  /** Waits out a hold on the message's recipient (see `waitOffNetwork`); false: not to be handed over here. */
  private async recipientHeld(connectionId: string, row: MessageRow): Promise<boolean> {
    const key = holdKey(connectionId, row)
    const until = this.recipientHolds.get(key)
    if (until === undefined) return true
    const left = until - performance.now()
    if (left > 0) return this.waitOffNetwork(row, left)
    this.recipientHolds.delete(key)
    return true
  }

  /**
   * Waits `ms` before the message is handed to its network (again: after a refusal, a "slow
   * down"), marked meanwhile as not with the network (`resend`, as a graceful stop hands it back):
   * a crash, a stop, or another instance taking the number over while this one stands still, goes
   * on with it instead of failing it. True when this process is to hand it over now: its wait ran
   * out and it took the mark back. False when the server stops (it stays marked), when another
   * instance took it on, or when it was failed meanwhile (a removal, an erasure). Unmarked when the
   * mark cannot be written (the database away): it then waits as it did before the mark.
   */
  private async waitOffNetwork(row: MessageRow, ms: number): Promise<boolean> {
    const marked = await this.handBack(row).catch(() => null)
    if (marked === false) return false
    if (!(await this.pause(ms))) {
      if (marked === null) await this.handBack(row)
      return false
    }
    if (marked === null) return true
    const taken = await this.beforeNetwork(() => this.readAgain(() => this.takeOn(row), 'take a waiting send on again'))
    return taken === true
  }

  /**
   * Aborted at a graceful stop (`stop`). A released message the network has not got yet — its
   * attachments unreadable for now, its retry or the network's "slow down" being waited out, or
   * not handed over yet — then stops waiting and is handed back (`handBack`; one waiting out a
   * retry is marked already, see `waitOffNetwork`): it stays `sending` (a status never moves
   * back), marked to go on at the next start, or on the instance that takes its number. Crash
   * recovery could only fail it, as it cannot tell such a send from one the network may have.
   */
  private readonly stopping = new AbortController()

  stop() {
    this.stopping.abort()
  }

  /** Waits `ms`; false (at once) when the server stops first. */
  private pause(ms: number): Promise<boolean> {
    const signal = this.stopping.signal
    if (signal.aborted) return Promise.resolve(false)
    return new Promise((resolve) => {
      const done = (waited: boolean) => {
        clearTimeout(timer)
        signal.removeEventListener('abort', stopped)
        resolve(waited)
      }
      const stopped = () => done(false)
      const timer = setTimeout(() => done(true), ms)
      signal.addEventListener('abort', stopped)
    })
  }

  /** A read a message needs before it leaves; STOPPING when it failed because the server stops. */
  private async beforeNetwork<T>(read: () => Promise<T>): Promise<T | typeof STOPPING> {
    try {
      return await read()
    } catch (e) {
      if (this.stopping.signal.aborted) return STOPPING
      throw e
    }
  }

  /**
   * Marked to be handed to the network at the next start: the network does not have this message
   * (see `stopping`). Whether it was (false: no longer sending — failed meanwhile).
   */
  private handBack(row: MessageRow): Promise<boolean> {
    return this.deps.engine.write((tx) => this.store.markResend(tx, row.id))
  }

  /** The mark of a send handed back taken off, to hand it over here: whether it was still marked (only one write takes it). */
  private takeOn(row: MessageRow): Promise<boolean> {
    return this.deps.engine.write((tx) => this.store.takeResend(tx, row.id))
  }

  /**
   * How long a send waits before it is tried again (ms, one entry per retry): after a failure the
   * network may recover from (a 5xx, a broken connection), and — about half an hour in all — after
   * the network asked to slow down. Tests shorten them.
   */
  retryDelays = { failed: [1000, 2000, 4000, 8000, 16000], throttled: [5000, 15000, 30000, 60000, 120000, 300000, 600000, 900000] }

  /**
   * Writes a send's outcome, again while the write fails (see `persist`): what the network
   * answered must not be lost, nor leave the message `sending` until a restart. When the server
   * stops first, the message stays `sending` and crash recovery settles it at the next start.
   */
  private record(write: () => Promise<unknown>) {
    return persist(write, () => this.connections.stopped, (e) => this.onDispatchError(e, 'record a send outcome'))
  }

  /**
   * A read a released message needs before it leaves (its attachments; before a retry, whether
   * it may still go), again while the database cannot be reached (see `persist`): an outage must
   * not leave the message `sending` until a restart.
   */
  private readAgain<T>(read: () => Promise<T>, doing = 'read what a released message needs yet') {
    return persist(read, () => this.connections.stopped || this.stopping.signal.aborted, (e) => this.onDispatchError(e, doing), (ms) => this.pause(ms))
  }

  /**
   * Whether the network has a send whose outcome is unknown (null: it cannot tell). Where the
   * answer is kept in the database (the sandbox's record of sends on PostgreSQL), a database away
   * for a moment is asked again, not taken for "not sent"; past a stop, or any other error, null.
   */
  private askNetwork(live: LiveConnection, row: MessageRow) {
    return this.readAgain(() => live.driver.confirm(row.id), 'ask the network whether it has a send').catch(() => null)
  }
}
