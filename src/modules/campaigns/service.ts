/**
 * Opt-in campaigns. draft → scheduled → running ⇄ paused → completed; any unfinished state →
 * cancelled. Starting freezes the audience (opted in, not suppressed, metadata filters) into
 * recipients and snapshots the template body. Each recipient becomes one message only when its
 * number releases it, after consent and suppression are checked again (an opt-out mid-campaign is
 * skipped). Scheduled starts are croner jobs, re-armed from the table at every start.
 */
import { Cron } from 'croner'
import { nextTurn } from '../../db/writer'
import type { Deps } from '../../deps'
import { conflict, notFound, validationFailed } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import type { Logger } from '../../http/log'
import { templateHeaderKind } from '../../network/driver'
import type { ConnectionService } from '../connections/service'
import type { ContactService } from '../contacts/service'
import { headerFault, renderedFault } from '../messages/model'
import type { MessageRow } from '../messages/store'
import type { MediaService } from '../media/service'
import { type MessageService, tooLargeForNetwork } from '../messages/service'
import type { SuppressionService } from '../suppressions/service'
import { fill } from '../templates/render'
import { type TemplateService, withArticle } from '../templates/service'
import type { WebhookService } from '../webhooks/service'
import type { PublicCampaign } from './model'
import type { Queries } from '../../db/engine'
import { type Audience, CampaignStore, type CampaignRow, type CampaignStatus, type PausedReason } from './store'
import { inSendWindow, knownTimeZone, type SendWindow } from './window'

export interface CampaignInput {
  name?: string
  template_id?: string
  connection_id?: string
  audience?: Audience
  variables?: Record<string, string | number | boolean>
  media_id?: string | null
  scheduled_at?: string | null
  send_window?: SendWindow | null
}

/** The stored send window, checked: 422 for an unknown time zone or an empty window. */
function windowColumn(w: SendWindow | null | undefined): string | null {
  if (!w) return null
  if (!knownTimeZone(w.time_zone)) throw validationFailed({ 'send_window.time_zone': ['The send_window.time_zone field must be an IANA time zone, such as Europe/Berlin.'] })
  if (w.from === w.to) throw validationFailed({ 'send_window.to': ['The send window must not be empty: from and to must differ.'] })
  return JSON.stringify({ from: w.from, to: w.to, time_zone: w.time_zone })
}

/** A campaign's stored send window, or null. */
const windowOf = (row: CampaignRow): SendWindow | null => (row.send_window === null ? null : (JSON.parse(row.send_window) as SendWindow))

const MAX_SKIPS_PER_RELEASE = 200

export class CampaignService {
  private readonly store: CampaignStore
  private jobs = new Map<string, Cron>()
  /** A campaign started or resumed on a number: the pacer should look at it. */
  onRunnable: (connectionId: string) => void = () => {}

  constructor(
    private readonly deps: Deps,
    private readonly templates: TemplateService,
    private readonly connections: ConnectionService,
    private readonly contacts: ContactService,
    private readonly suppressions: SuppressionService,
    private readonly messages: MessageService,
    private readonly media: MediaService,
    private readonly webhooks: WebhookService,
    private readonly log: Logger,
  ) {
    this.store = new CampaignStore(deps.engine)
  }
  /** A page of the workspace's campaigns, newest first. */
  list(workspaceId: string, limit: number, offset: number) {
    return this.store.list(workspaceId, limit, offset)
  }

  /** How many contacts an audience holds now, and a sample of them (creates nothing). */
  preview(workspaceId: string, audience: Audience, sample: number, slice?: number) {
    return this.store.preview(workspaceId, audience, sample, slice)
  }

  /** A page of a campaign's recipients, in the order they were frozen. */
  recipients(campaignId: string, limit: number, offset: number) {
    return this.store.recipients(campaignId, limit, offset)
  }

  /** The campaigns the contact is a recipient of, with its status in each (a contact export). */
  async ofContact(contactId: string) {
    return (await this.store.ofContact(contactId)).map((c) => ({ id: c.id, name: c.name, campaign_status: c.campaign_status, recipient_status: c.status, skipped_reason: c.skipped_reason, message_id: c.message_id }))
  }

  /** Inside an erasure's write: the contact leaves every campaign; returns the ids of those it was in. */
  async removeRecipientIn(tx: Queries, contactId: string): Promise<string[]> {
    const ids = await this.store.campaignIdsOf(contactId, tx)
    await this.store.removeRecipient(tx, contactId)
    return ids
  }

  /** For /metrics: campaigns by status. */
  countByStatus() {
    return this.store.countByStatus()
  }

  /** Recipients still to be released by the number's running campaigns. */
  pendingFor(connectionId: string): Promise<number> {
    return this.store.pendingFor(connectionId)
  }

  /** The numbers some running campaign sends through. */
  connectionsWithRunning(): Promise<string[]> {
    return this.store.connectionsWithRunning()
  }

  /** The campaign as the API shows it, with its counts (`q`: the write it is read in, if any). */
  async toPublic(row: CampaignRow, q?: Queries): Promise<PublicCampaign> {
    return {
      id: row.id,
      name: row.name,
      template_id: row.template_id,
      connection_id: row.connection_id,
      audience: JSON.parse(row.audience) as Audience,
      variables: JSON.parse(row.variables) as Record<string, string>,
      media_id: row.media_id,
      send_window: windowOf(row),
      status: row.status,
      paused_reason: row.paused_reason,
      scheduled_at: iso(row.scheduled_at),
      started_at: iso(row.started_at),
      finished_at: iso(row.finished_at),
      created_at: iso(row.created_at),
      updated_at: iso(row.updated_at),
      counts: await this.store.counts(row.id, q),
    }
  }

  /** The workspace's campaign, or null (no 404). */
  find(workspaceId: string, id: string): Promise<CampaignRow | null> {
    return this.store.get(workspaceId, id)
  }

  async get(workspaceId: string, id: string, q?: Queries): Promise<CampaignRow> {
    const row = await this.store.get(workspaceId, id, q)
    if (!row) throw notFound('campaign')
    return row
  }

  private illegal(row: CampaignRow, action: string) {
    return conflict('invalid_campaign_state', `The campaign is ${row.status}; it cannot be ${action}.`)
  }

  /**
   * Inside a write: change the campaign (`fields`, made from the row as read) if its status is one
   * of `from`, written only over the status it was read with — a change another write made
   * meanwhile (on another instance, or in the same shared transaction) is seen, and the campaign
   * checked again. The row as read (`workspaceId`: of that workspace, else 404) and whether it changed.
   */
  private async changeIn(tx: Queries, id: string, from: readonly CampaignStatus[], fields: (row: CampaignRow) => Partial<CampaignRow>, workspaceId?: string): Promise<{ row: CampaignRow | null; changed: boolean }> {
    for (;;) {
      const row = workspaceId === undefined ? await this.store.getAny(id, tx) : await this.get(workspaceId, id, tx)
      if (!row || !from.includes(row.status)) return { row, changed: false }
      if (await this.store.update(tx, id, fields(row), { status: row.status })) return { row, changed: true }
    }
  }

  private async checkRefs(workspaceId: string, input: CampaignInput) {
    if (input.template_id) await this.templates.get(workspaceId, input.template_id)
    if (input.connection_id) await this.connections.obtain(workspaceId, input.connection_id)
    if (input.media_id) await this.headerMedia(workspaceId, input.media_id)
  }

  /**
   * A campaign's media: live media of the workspace (else 404) that can stand above the text —
   * an image, a video or a document (a WhatsApp template's media header; audio cannot).
   */
  private async headerMedia(workspaceId: string, id: string) {
    const m = await this.media.get(workspaceId, id)
    if (!templateHeaderKind(m.mime_type)) throw validationFailed({ media_id: ['The media_id field must name an image (JPEG or PNG), a video or a document.'] })
  }

  /**
   * 422 for media beside a template whose WhatsApp header is text (Meta's template has no media
   * header then), and for media of another kind than the template's media header takes; when
   * `starting`, also for a template with a media header and no media.
   */
  private async checkHeaderPair(workspaceId: string, templateId: string, mediaId: string | null | undefined, starting = false) {
    const tpl = mediaId || starting ? await this.templates.find(workspaceId, templateId) : null
    if (!tpl) return
    if (mediaId && this.templates.hasTextHeader(tpl)) throw validationFailed({ media_id: ['The template’s WhatsApp header is text (whatsapp.header_text): the campaign cannot carry media.'] })
    const wanted = this.templates.headerMediaOf(tpl)
    if (!wanted) return
    if (!mediaId) {
      if (starting) throw validationFailed({ media_id: [`The template’s WhatsApp header is ${withArticle(wanted)} (whatsapp.header_media): the campaign needs a media_id of that kind.`] })
      return
    }
    // media that is gone is refused by the caller's own check
    const m = await this.media.find(workspaceId, mediaId)
    const kind = m ? templateHeaderKind(m.mime_type) : null
    if (kind && kind !== wanted) throw validationFailed({ media_id: [`The template’s WhatsApp header is ${withArticle(wanted)} (whatsapp.header_media); this media is ${withArticle(kind)}.`] })
  }

  private scheduledTime(at: string | null | undefined): number | null {
    if (!at) return null
    const t = Date.parse(at)
    if (t <= this.deps.clock.now()) throw validationFailed({ scheduled_at: ['The scheduled_at field must be a time in the future.'] })
    return t
  }

  async create(workspaceId: string, input: Required<Pick<CampaignInput, 'name' | 'template_id' | 'connection_id'>> & CampaignInput): Promise<CampaignRow> {
    await this.checkRefs(workspaceId, input)
    await this.checkHeaderPair(workspaceId, input.template_id, input.media_id)
    const now = this.deps.clock.now()
    const row: CampaignRow = {
      id: uuid(),
      workspace_id: workspaceId,
      name: input.name,
      template_id: input.template_id,
      connection_id: input.connection_id,
      audience: JSON.stringify(input.audience ?? {}),
      variables: JSON.stringify(input.variables ?? {}),
      body: null,
      whatsapp: null,
      media_id: input.media_id ?? null,
      send_window: windowColumn(input.send_window),
      status: 'draft',
      paused_reason: null,
      scheduled_at: this.scheduledTime(input.scheduled_at),
      started_at: null,
      finished_at: null,
      created_at: now,
      updated_at: now,
      deleted_at: null,
      freeze_after: null,
    }
    await this.deps.engine.write((tx) => this.store.insert(tx, row))
    return row
  }

  /** PUT: only while draft or scheduled. A scheduled campaign is re-armed with its new time. */
  async update(workspaceId: string, id: string, input: CampaignInput): Promise<CampaignRow> {
    const row = await this.get(workspaceId, id)
    if (row.status !== 'draft' && row.status !== 'scheduled') throw this.illegal(row, 'changed')
    await this.checkRefs(workspaceId, input)
    await this.checkHeaderPair(workspaceId, input.template_id ?? row.template_id, input.media_id === undefined ? row.media_id : input.media_id)
    const fields: Partial<CampaignRow> = { updated_at: this.deps.clock.now() }
    if (input.name !== undefined) fields.name = input.name
    if (input.template_id !== undefined) fields.template_id = input.template_id
    if (input.connection_id !== undefined) fields.connection_id = input.connection_id
    if (input.audience !== undefined) fields.audience = JSON.stringify(input.audience)
    if (input.variables !== undefined) fields.variables = JSON.stringify(input.variables)
    if (input.media_id !== undefined) fields.media_id = input.media_id
    if (input.send_window !== undefined) fields.send_window = windowColumn(input.send_window)
    if (input.scheduled_at !== undefined) {
      fields.scheduled_at = this.scheduledTime(input.scheduled_at)
      if (row.status === 'scheduled' && fields.scheduled_at === null) throw validationFailed({ scheduled_at: ['A scheduled campaign needs a scheduled_at time; cancel it to stop it.'] })
    }
    // checked again in the write: the lookups above waited, and a start may have come meanwhile
    const next = await this.deps.engine.write(async (tx) => {
      const { row: current, changed } = await this.changeIn(tx, id, ['draft', 'scheduled'], () => fields)
      if (!changed) throw this.illegal(current!, 'changed')
      return (await this.store.getAny(id, tx))!
    })
    if (next.status === 'scheduled') this.arm(next)
    return next
  }

  async remove(workspaceId: string, id: string) {
    const now = this.deps.clock.now()
    await this.deps.engine.write(async (tx) => {
      const ended = (status: CampaignStatus) => status === 'completed' || status === 'cancelled'
      const { row, changed } = await this.changeIn(tx, id, ['draft', 'scheduled', 'paused', 'completed', 'cancelled'], (r) => ({ deleted_at: now, updated_at: now, ...(ended(r.status) ? {} : { status: 'cancelled' as CampaignStatus, paused_reason: null, finished_at: now }) }), workspaceId)
      if (!changed) throw this.illegal(row!, 'deleted while running; pause or cancel it first')
      this.disarm(id)
      await this.store.skipAllPending(tx, id, 'cancelled', now)
    })
  }

  /**
   * Schedule at a time, or start now when `at` is omitted or not in the future (answered once the
   * audience is frozen — the row then has its full counts — or, the start written, after
   * `freezeWaitMs`, with the freeze going on: an answer held longer would meet the server's idle
   * timeout).
   */
  async schedule(workspaceId: string, id: string, at: string | null | undefined): Promise<CampaignRow> {
    const row = await this.get(workspaceId, id)
    if (row.status !== 'draft' && row.status !== 'scheduled') throw this.illegal(row, 'scheduled')
    const tpl = await this.templates.get(workspaceId, row.template_id)
    const live = await this.connections.obtain(workspaceId, row.connection_id)
    // a file larger than the number's network takes of its kind would fail every recipient
    const media = row.media_id && live.driver.mediaLimit ? await this.media.find(workspaceId, row.media_id) : null
    const tooLarge = media ? tooLargeForNetwork(live.driver.mediaLimit!.bind(live.driver), media, "This campaign's number") : null
    if (tooLarge) throw validationFailed({ media_id: [tooLarge] })
    this.templates.requireNumbered(tpl, JSON.parse(row.variables) as Record<string, unknown>)
    await this.checkHeaderPair(workspaceId, row.template_id, row.media_id, true)
    // still there: from scheduling on, retention keeps it until the campaign ends (so a campaign
    // scheduled again holds it even past its expiry)
    if (row.media_id && !(row.status === 'scheduled' && (await this.media.find(workspaceId, row.media_id)))) await this.headerMedia(workspaceId, row.media_id)
    const now = this.deps.clock.now()
    const when = at ? Date.parse(at) : (row.scheduled_at ?? now)
    if (when <= now) await this.messages.checkAllowance(workspaceId, now)
    // checked again in the write: the lookups above waited, and a cancel may have come meanwhile
    await this.deps.engine.write(async (tx) => {
      const { row: current, changed } = await this.changeIn(tx, id, ['draft', 'scheduled'], () => ({ status: 'scheduled', scheduled_at: Math.max(when, now), updated_at: now }))
      if (!changed) throw this.illegal(current!, 'scheduled')
    })
    if (when <= now) {
      // the start itself (running, with the first slice of its audience) is written before the
      // answer, whatever the wait: the answer then says running
      let written = () => {}
      const startWritten = new Promise<null>((resolve) => (written = () => resolve(null)))
      const starting = this.start(id, written)
      await Promise.race([starting, startWritten])
      let timer: Timer | undefined
      const waited = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), this.freezeWaitMs)))
      try {
        return (await Promise.race([starting, waited])) ?? (await this.store.getAny(id))!
      } finally {
        clearTimeout(timer)
      }
    }
    const next = (await this.store.getAny(id))!
    this.arm(next)
    return next
  }

  /**
   * Start a scheduled campaign: snapshot the body, freeze the audience, let the number release it.
   * The start and the first slice of the audience are one write; the rest follows in slices with
   * requests served between (see `freezeRest`), the number releasing meanwhile. Resolves when the
   * whole audience is frozen; `written` is called once that first write is made.
   */
  async start(id: string, written: () => void = () => {}): Promise<CampaignRow> {
    this.disarm(id)
    const row = await this.store.getAny(id)
    if (!row || row.deleted_at !== null || row.status !== 'scheduled') return row!
    const now = this.deps.clock.now()
    // moved to a later time (on another instance, whose timer this one's is not): armed for that
    if ((row.scheduled_at ?? now) > now) {
      this.arm(row)
      return row
    }
    const more = await this.deps.engine.write(async (tx) => {
      const current = await this.store.getAny(id, tx)
      // (started meanwhile by another caller: the sweep and the armed job can meet)
      if (current?.status !== 'scheduled') return false
      // (moved later meanwhile)
      if ((current.scheduled_at ?? now) > now) return 'later' as const
      const tpl = await this.templates.find(row.workspace_id, row.template_id, tx)
      // only over the campaign as read: started, cancelled or moved meanwhile (another instance), nothing here
      const still = { status: 'scheduled' as const, scheduled_at: current.scheduled_at }
      if (!tpl) return (await this.store.update(tx, id, { status: 'cancelled', finished_at: now, updated_at: now }, still)) ? null : false
      if (!(await this.store.update(tx, id, { status: 'running', started_at: now, body: tpl.body, whatsapp: tpl.whatsapp, updated_at: now, freeze_after: '' }, still))) return false
      return this.freezeStepIn(tx, id)
    })
    written()
    if (more === null) {
      this.log.warn('campaign cancelled at start: its template is gone', { campaign_id: id })
      return (await this.store.getAny(id))!
    }
    if (more === 'later') {
      const moved = (await this.store.getAny(id))!
      if (moved.status === 'scheduled') this.arm(moved)
      return moved
    }
    this.onRunnable(row.connection_id)
    if (more) await this.freezeRest(id)
    else await this.checkComplete(id)
    return (await this.store.getAny(id))!
  }

  /** Contacts read per slice of an audience freeze (at ~5-8 µs each: ≤ ~40 ms per write). */
  freezeSliceSize = 5_000
  /** How long a start asked for over the API waits for its freeze (a million contacts: ~5 s). */
  freezeWaitMs = 20_000
  /** What a freeze waits for between its slices: a turn of the event loop (tests hold it to look between slices). */
  betweenSlices: () => Promise<void> = nextTurn
  /** Freezes under way, by campaign: one at a time, and a start waits for its own. */
  private freezes = new Map<string, Promise<void>>()
  private stopped = false

  /**
   * The next slice of a campaign's audience (inside its write). Stops — nothing more is added —
   * once the campaign is no longer running or paused (cancelled between slices). Returns whether
   * more is left.
   */
  private async freezeStepIn(tx: Queries, id: string): Promise<boolean> {
    const row = await this.store.getAny(id, tx)
    if (!row || row.freeze_after === null) return false
    const next =
      row.status === 'running' || row.status === 'paused'
        ? await this.store.freezeSlice(tx, id, row.workspace_id, JSON.parse(row.audience) as Audience, row.freeze_after, row.started_at!, this.deps.clock.now(), this.freezeSliceSize)
        : null
    await this.store.update(tx, id, { freeze_after: next })
    return next !== null
  }

  /**
   * The rest of a campaign's audience, a slice per write with a turn of the event loop between.
   * Never rejects: a write that fails (a full disk) is logged and the minute's sweep goes on from
   * the last slice written.
   */
  private freezeRest(id: string): Promise<void> {
    const under = this.freezes.get(id)
    if (under) return under
    const run = (async () => {
      try {
        for (let more = true; more; ) {
          await this.betweenSlices()
          // stopping: the next start goes on from here
          if (this.stopped) return
          more = await this.deps.engine.write((tx) => this.freezeStepIn(tx, id))
        }
      } catch (e) {
        this.log.error('campaign audience freeze failed; the next sweep goes on with it', { campaign_id: id, error: String(e) })
        return
      } finally {
        this.freezes.delete(id)
      }
      const row = await this.store.getAny(id)
      if (row) {
        this.onRunnable(row.connection_id)
        await this.checkComplete(id)
      }
    })()
    this.freezes.set(id, run)
    return run
  }

  /** Freezes cut off by a restart or a failed write go on (at start and from the minute's sweep). */
  async resumeFreezes() {
    for (const row of await this.store.freezing()) void this.freezeRest(row.id)
  }

  pause(workspaceId: string, id: string) {
    return this.transition(workspaceId, id, ['running'], 'paused', 'paused', 'requested')
  }

  async resume(workspaceId: string, id: string) {
    if ((await this.get(workspaceId, id)).status === 'paused') await this.messages.checkAllowance(workspaceId, this.deps.clock.now())
    const row = await this.transition(workspaceId, id, ['paused'], 'running', 'resumed', null)
    this.onRunnable(row.connection_id)
    await this.checkComplete(id)
    return (await this.store.getAny(id))!
  }

  /** Cancel: nothing already sent is touched; nothing more is released. */
  async cancel(workspaceId: string, id: string) {
    const now = this.deps.clock.now()
    return this.deps.engine.write(async (tx) => {
      const { row, changed } = await this.changeIn(tx, id, ['draft', 'scheduled', 'running', 'paused'], () => ({ status: 'cancelled', paused_reason: null, finished_at: now, updated_at: now }), workspaceId)
      if (!changed) throw this.illegal(row!, 'cancelled')
      this.disarm(id)
      await this.store.skipAllPending(tx, id, 'cancelled', now)
      return (await this.store.getAny(id, tx))!
    })
  }

  /** The state checked and changed in one write, only over the state checked (two requests on two instances cannot both pass the check). */
  private transition(workspaceId: string, id: string, from: CampaignStatus[], to: CampaignStatus, verb: string, pausedReason: PausedReason | null) {
    return this.deps.engine.write(async (tx) => {
      const { row, changed } = await this.changeIn(tx, id, from, () => ({ status: to, paused_reason: pausedReason, updated_at: this.deps.clock.now() }), workspaceId)
      if (!changed) throw this.illegal(row!, verb)
      return (await this.store.getAny(id, tx))!
    })
  }

  /**
   * The network refused the campaign's template as such (`code`: Meta's paused, disabled or
   * unknown template, ...): every further recipient would be refused the same way, so a running
   * campaign pauses (`template_refused`) until the operator fixes the template and resumes it.
   * The message that was refused keeps its failure.
   */
  async templateRefused(id: string, code: string) {
    const paused = await this.deps.engine.write(async (tx) => (await this.changeIn(tx, id, ['running'], () => ({ status: 'paused', paused_reason: 'template_refused', updated_at: this.deps.clock.now() }))).changed)
    if (paused) this.log.warn('campaign paused: the network refused its template; fix the template, then resume the campaign', { campaign_id: id, error_code: code })
  }

  /**
   * Campaigns the pacer paused because the monthly allowance ran out go on by themselves once
   * there is room: after a settings change of their workspace (a higher or no allowance), from the
   * hourly job (a new month) and at start. A campaign paused on request is left alone.
   */
  async resumeWhereRoom(workspaceId?: string) {
    const now = this.deps.clock.now()
    const waiting = (await this.store.waitingForAllowance()).filter((c) => !workspaceId || c.workspace_id === workspaceId)
    if (waiting.length === 0) return
    // read again in the write: only a campaign still paused for the allowance goes on
    const resumed = await this.deps.engine.write(async (tx) => {
      const out: CampaignRow[] = []
      for (const c of waiting) {
        const row = await this.store.getAny(c.id, tx)
        if (row?.status !== 'paused' || row.paused_reason !== 'allowance_exhausted' || (await this.messages.allowanceExhausted(c.workspace_id, now, tx))) continue
        if (await this.store.update(tx, c.id, { status: 'running', paused_reason: null, updated_at: now }, { status: 'paused', paused_reason: 'allowance_exhausted' })) out.push(row)
      }
      return out
    })
    for (const c of resumed) {
      this.log.info('campaign resumed: the workspace has message allowance again', { campaign_id: c.id })
      this.onRunnable(c.connection_id)
    }
  }

  /**
   * The pacer's campaign lane (inside its write): the next recipient of a running campaign on
   * this number, re-checked and rendered into a queued message; ineligible recipients are
   * skipped on the way (at most MAX_SKIPS_PER_RELEASE per call; past that it returns null and
   * has the number woken again). null when no running campaign of the number has anyone left.
   */
  async releaseNextIn(tx: Queries, connectionId: string, now: number): Promise<MessageRow | null> {
    const live = this.connections.find(connectionId)
    if (!live) return null
    let skips = 0
    for (const c of await this.store.running(connectionId, tx)) {
      // outside its send window a campaign waits (the sweep wakes its number when the window opens)
      if (!inSendWindow(windowOf(c), now)) continue
      for (;;) {
        const r = await this.store.nextPending(c.id, tx)
        if (!r) {
          queueMicrotask(() => void this.checkComplete(c.id).catch((e) => this.log.error('campaign completion check failed', { campaign_id: c.id, error: String(e) })))
          break
        }
        const contact = await this.contacts.find(c.workspace_id, r.contact_id, tx)
        const reason = !contact ? 'contact_removed' : contact.consent_status !== 'opted_in' ? 'not_opted_in' : (await this.suppressions.isSuppressed(c.workspace_id, contact.phone, tx)) ? 'suppressed' : null
        // rendered for this contact: a text no message may carry (nothing, or past the body
        // limit through long metadata values), or a Meta template WhatsApp would refuse (a header
        // it cannot take, a value the contact lacks), is a skip with its reason, not a send that fails
        const filled = contact && !reason ? fill(c.body ?? '', c.whatsapp, { name: contact.name, phone: contact.phone, metadata: JSON.parse(contact.metadata), numbered: JSON.parse(c.variables) }) : null
        let unfit = filled ? (renderedFault(filled.text) ?? headerFault(filled.headerText) ?? (filled.emptyValue === null ? null : 'missing_value')) : null
        // free-form text through WhatsApp reaches only people who wrote in the last 24 hours
        if (filled && !unfit && !filled.networkTemplate && live.driver.serviceWindowMs && !(await this.messages.inServiceWindow(live, contact!.phone, now, tx))) unfit = 'outside_service_window'
        if (reason || unfit || !contact || !filled) {
          await this.store.skip(tx, r.seq, reason ?? unfit ?? 'contact_removed', now)
          if (++skips >= MAX_SKIPS_PER_RELEASE) {
            // enough for one write: the pacer dropped this number from its round, so ask again
            queueMicrotask(() => this.onRunnable(connectionId))
            return null
          }
          continue
        }
        if (await this.messages.allowanceExhausted(c.workspace_id, now, tx)) {
          // campaign messages count against the allowance like any other: wait for room, lose no one
          await this.store.update(tx, c.id, { status: 'paused', paused_reason: 'allowance_exhausted', updated_at: now }, { status: 'running' })
          this.log.warn('campaign paused until there is allowance again: the workspace has used its message allowance for this month', { campaign_id: c.id })
          break
        }
        // taken from pending first: skipped meanwhile (the campaign cancelled on another instance), no message
        const id = uuid()
        if (!(await this.store.released(tx, r.seq, id, now))) continue
        const msg = await this.messages.queueIn(
          tx,
          {
            id,
            workspace_id: c.workspace_id,
            connection_id: connectionId,
            contact_id: contact.id,
            group_id: null,
            campaign_id: c.id,
            recipient: contact.phone,
            sender: live.row.phone,
            body: filled.text,
            attachments: c.media_id ? JSON.stringify([c.media_id]) : '[]',
            network_template: filled.networkTemplate,
          },
          now,
        )
        await this.contacts.touchIn(tx, contact.id, now)
        return msg
      }
    }
    return null
  }

  /** A running campaign with nobody pending and nothing in flight is completed (and announced). */
  async checkComplete(id: string) {
    const row = await this.store.getAny(id)
    // a campaign whose audience is still being frozen has more to come
    if (!row || row.status !== 'running' || row.freeze_after !== null) return
    if ((await this.store.hasPending(id)) || (await this.store.hasInFlight(id))) return
    const now = this.deps.clock.now()
    await this.deps.engine.write(async (tx) => {
      // looked at again in the write: completed once, whoever asks at the same time
      const current = await this.store.getAny(id, tx)
      if (current?.status !== 'running' || current.freeze_after !== null || (await this.store.hasPending(id, tx)) || (await this.store.hasInFlight(id, tx))) return
      // (announced by the write that completed it: another that completed it first makes this one change nothing)
      if (!(await this.store.update(tx, id, { status: 'completed', finished_at: now, updated_at: now }, { status: 'running' }))) return
      await this.webhooks.enqueueIn(tx, row.workspace_id, 'campaign.completed', await this.toPublic((await this.store.getAny(id, tx))!, tx))
    })
  }

  /** A number is being removed (inside its write): its unfinished campaigns are cancelled. */
  async cancelForConnectionIn(tx: Queries, connectionId: string) {
    const now = this.deps.clock.now()
    for (const c of await this.store.unfinishedFor(connectionId, tx)) {
      if (!(await this.changeIn(tx, c.id, ['draft', 'scheduled', 'running', 'paused'], () => ({ status: 'cancelled', finished_at: now, updated_at: now }))).changed) continue
      this.disarm(c.id)
      await this.store.skipAllPending(tx, c.id, 'connection_removed', now)
    }
  }

  /**
   * Once a minute: a scheduled campaign whose time has come starts, an audience freeze cut off
   * goes on, and a running campaign with nothing left is completed. All happen at once as a rule;
   * this is the second chance for a step whose write failed (a full disk), which would otherwise
   * wait for a restart.
   */
  async sweep() {
    const now = this.deps.clock.now()
    await this.resumeFreezes()
    for (const id of await this.store.runningIds()) await this.checkComplete(id)
    // a send window that has opened: its number may release again
    for (const c of await this.store.runningWithWindow()) if (inSendWindow(windowOf(c), now)) this.onRunnable(c.connection_id)
    for (const row of await this.store.scheduled()) if ((row.scheduled_at ?? now) <= now) await this.start(row.id)
  }

  /** Start-up: freezes cut off go on; every scheduled campaign is re-armed (those already due start now). */
  async armAll() {
    await this.resumeFreezes()
    for (const row of await this.store.scheduled()) this.arm(row)
  }

  stop() {
    this.stopped = true
    for (const j of this.jobs.values()) j.stop()
    this.jobs.clear()
  }

  private arm(row: CampaignRow) {
    this.disarm(row.id)
    const at = row.scheduled_at ?? this.deps.clock.now()
    const start = async () => {
      try {
        await this.start(row.id)
      } catch (e) {
        this.log.error('campaign start failed', { campaign_id: row.id, error: String(e) })
      }
    }
    if (at <= this.deps.clock.now()) {
      queueMicrotask(start)
      return
    }
    this.jobs.set(row.id, new Cron(new Date(at), { maxRuns: 1 }, start))
  }

  private disarm(id: string) {
    this.jobs.get(id)?.stop()
    this.jobs.delete(id)
  }
}
