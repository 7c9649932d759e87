/**
 * Meta's WhatsApp Cloud API (the official HTTPS Graph API) behind the driver interface.
 *
 * Shapes follow Meta's published Cloud API reference:
 * - send: POST {base}/{version}/{phone-number-id}/messages with
 *   {messaging_product: "whatsapp", recipient_type: "individual", to, type, text|image|...,
 *   biz_opaque_callback_data}
 *   → {messages: [{id: "wamid..."}]}; errors → {error: {code, message, error_data?}}.
 *   A template message: type "template", template: {name, language: {code}, components:
 *   [{type: "header", parameters: [{type: "document", document: {id, filename}}]}, {type: "body",
 *   parameters: [{type: "text", text}]}]} (free-form text and media reach only people who wrote
 *   within 24 hours; an approved template reaches anyone who opted in). The header component is
 *   there when the message has an attachment: an image, video or document header by media id —
 *   or, for a text header's variable, [{type: "text", text}]; a dynamic URL button gets {type:
 *   "button", sub_type: "url", index: "0", parameters: [{type: "text", text}]}.
 * - media: POST {base}/{version}/{phone-number-id}/media, multipart (file, type,
 *   messaging_product) → {id}; a media message then refers to it by id. A customer's file: GET
 *   {base}/{version}/{media-id} → {url, mime_type, file_size}, then GET url with the token.
 * - probe: GET {base}/{version}/{phone-number-id} (code 190 = the access token was rejected;
 *   100 / 33 = no such phone number id for this token).
 * - webhooks (see handleCloudApiWebhook): GET verification with hub.mode/hub.verify_token/
 *   hub.challenge; POST signed with X-Hub-Signature-256 = "sha256=" + hex HMAC-SHA256 of the raw
 *   body keyed with the app secret; body {object, entry: [{changes: [{field, value: {metadata,
 *   statuses: [{id, status, errors?, biz_opaque_callback_data?}], messages: [{from, id,
 *   timestamp, type, text: {body}, context?: {id}}], user_preferences: [{wa_id, category,
 *   value}]}}]}]}.
 * Throughput errors (130429) are retried and slow the number's pacing; the pair rate limit
 * (131056: too many messages to one recipient) is retried for that recipient alone; the Cloud API
 * cannot list groups, so groups are reported as unsupported.
 *
 * Nothing is sent twice: a message POST whose outcome is unknown (the connection broke or the
 * send's time ran out after the request left) is never retried, and a message of several parts
 * (one per attachment, then the text) that is retried after a refusal goes on from the part that
 * was refused — the parts already accepted are not sent again.
 *
 * Every message POST carries Capstan's message id as `biz_opaque_callback_data`, which Meta
 * returns in each status webhook for it. So a send whose outcome is unknown — including one a
 * crash interrupted — is not failed at once: it waits (`confirm_wait_seconds`, default 300) for
 * a status naming it, and is recorded as sent with Meta's wamid if one comes (see
 * `confirmLater`). It also lets the statuses of a message's later parts find their message.
 */
import { readBody, TOO_LARGE } from '../http/body'
import { readTemplate, TEMPLATE_FIELDS } from './cloud-api-templates'
import type { Accepted, ConnectionDriver, DriverContext, DriverFactory, NetworkTemplate, NetworkTemplateDefinition, OutboundMedia, OutboundMessage } from './driver'
import { isSticker, webpShape } from './webp'
import { DriverError, RecipientThrottled, STOPPED, TemplateRefused, UnconfirmedSend, templateHeaderKind } from './driver'

export const DEFAULT_GRAPH_BASE = 'https://graph.facebook.com'
/**
 * The Graph API version of a number added without one (Meta serves each for about two years;
 * v26.0 came out on 2026-07-29). A number keeps the version it was added with until its config's
 * `graph_version` is changed.
 */
export const DEFAULT_GRAPH_VERSION = 'v26.0'
/** The longest caption Meta takes on an image, video or document (characters; counted here in UTF-16 units, never more than Meta's count). */
const CAPTION_MAX = 1024
/** How long a call that sends nothing to a customer (lookup, media upload) may take. */
const TIMEOUT_MS = 20_000
/** Pages of 100 templates read at most by an import (Meta allows an account a few thousand). */
const TEMPLATE_PAGES = 100
/** How long the parts already accepted of a message that will be retried are remembered. */
const PROGRESS_TTL_MS = 3 * 3_600_000
/** How long a send with an unknown outcome waits for Meta's status by default (config `confirm_wait_seconds`). */
export const DEFAULT_CONFIRM_WAIT_SECONDS = 300
/**
 * How long a file uploaded to Meta is sent again by its Meta media id rather than uploaded again
 * (Meta keeps uploads for 30 days), and how many such ids a number remembers: a campaign with a
 * media header uploads its file once, not once per recipient.
 */
const UPLOAD_REUSE_MS = 24 * 3_600_000
const UPLOADS_KEPT = 10_000
/** How long a status naming a message still being sent is kept for a `confirmLater` to come. */
const REPORTED_TTL_MS = 10 * 60_000
/** fetch failures that mean the request never reached the server: safe to send again. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ENETUNREACH', 'EHOSTUNREACH', 'ConnectionRefused', 'FailedToOpenSocket'])

/** Cloud API error codes that mean "slow down" rather than "this message is wrong". */
const THROTTLE_CODES = new Set([130429, 80007, 4, 613])
/** Meta's pair rate limit: too many messages from this number to one recipient; only that recipient waits. */
const PAIR_RATE_LIMIT = 131056
/**
 * Meta refuses the template itself: parameters not matching it (132000), unknown in that language
 * (132001), against its format policy (132007), a header of the wrong kind (132012), paused for low
 * quality (132015), disabled (132016), its flow blocked or throttled (132068, 132069).
 */
export const TEMPLATE_REFUSED = new Set([132000, 132001, 132007, 132012, 132015, 132016, 132068, 132069])
/** The token is no good: the number cannot send until the operator fixes the config. */
const AUTH_CODES = new Set([190, 0, 10, 200])
/**
 * Meta stopped the whole account, not this message: blocked for a policy violation (368), the
 * account locked (131031), its payment or eligibility in question (131042). Every further send
 * would fail the same way until the business clears it in WhatsApp Manager.
 */
export const ACCOUNT_BLOCKED = new Set([368, 131031, 131042])

interface CloudConfig {
  phone_number_id: string
  access_token: string
  app_secret: string
  verify_token: string
  graph_base_url: string
  graph_version: string
  confirm_wait_seconds: number
  /** The WhatsApp Business Account the number belongs to: only needed to import its templates. */
  waba_id?: string
}

const MEDIA_KIND: Record<string, 'image' | 'audio' | 'video' | 'document' | 'sticker'> = {
  'image/jpeg': 'image',
  'image/png': 'image',
  'audio/aac': 'audio',
  'audio/amr': 'audio',
  'audio/mpeg': 'audio',
  'audio/mp4': 'audio',
  'audio/ogg': 'audio',
  'video/mp4': 'video',
  'video/3gpp': 'video',
}

const MB = 1024 * 1024
/** Meta's size limits per kind of media (a WebP that is no sticker goes as a document). */
const MEDIA_LIMIT: Record<'image' | 'audio' | 'video' | 'document', { bytes: number; what: string }> = {
  image: { bytes: 5 * MB, what: 'images' },
  audio: { bytes: 16 * MB, what: 'audio files' },
  video: { bytes: 16 * MB, what: 'videos' },
  document: { bytes: 100 * MB, what: 'documents' },
}

/** Meta's error for a marketing template sent to someone who stopped marketing messages. */
export const MARKETING_STOPPED = 131050

/** Hosts Meta serves customers' files from; the access token is sent to no other (see downloadMedia). */
const MEDIA_HOSTS = ['fbsbx.com', 'facebook.com', 'fbcdn.net', 'whatsapp.net']

interface GraphError {
  code: number
  message: string
}

/** How much of Meta's words an error keeps. */
const ERROR_TEXT_MAX = 500

/**
 * Meta's words for an error — an API call's `error` or a status's `errors[0]` — with what
 * `error_data.details` adds: "(#100) Invalid parameter" alone does not say which one was wrong.
 */
export function metaErrorText(e: { message?: unknown; title?: unknown; error_data?: { details?: unknown } } | null | undefined, fallback: string): string {
  const said = String(e?.message ?? e?.title ?? fallback).trim()
  const details = typeof e?.error_data?.details === 'string' ? e.error_data.details.trim() : ''
  return (details && !said.includes(details) ? `${said}: ${details}` : said).slice(0, ERROR_TEXT_MAX)
}

export class CloudApiConnection implements ConnectionDriver {
  private config: CloudConfig
  /** Per message id: the wamids of the parts the Cloud API accepted before a retryable refusal. */
  private progress = new Map<string, { at: number; ids: string[] }>()
  /** Sends with an unknown outcome waiting for a status that names them (see confirmLater). */
  private waiting = new Map<string, { resolve: (r: { externalId: string } | null | typeof STOPPED) => void; timer: Timer }>()
  /** Per message id: a wamid a status named while nothing waited for it yet (kept REPORTED_TTL_MS). */
  private reported = new Map<string, { wamid: string; at: number }>()
  /** Per Capstan media id: its upload to Meta (under way or done), reused for UPLOAD_REUSE_MS. */
  private uploads = new Map<string, { id: Promise<string>; at: number }>()

  constructor(private readonly ctx: DriverContext) {
    this.config = ctx.config as unknown as CloudConfig
  }

  configure(config: Record<string, unknown>) {
    this.config = config as unknown as CloudConfig
    this.uploads.clear() // another number or app may not see the old uploads
  }

  /** WhatsApp's customer-service window: free-form messages only within 24 hours of the person's last message. */
  readonly serviceWindowMs = 24 * 3600_000

  mediaLimit(mimeType: string) {
    const kind = MEDIA_KIND[mimeType] ?? 'document'
    return MEDIA_LIMIT[kind === 'sticker' ? 'document' : kind]
  }

  /**
   * How a file goes out: by its type, except a WebP — WhatsApp takes one only as a sticker (512×512,
   * small), so any other WebP (a photo) goes as a document rather than be refused or mangled.
   */
  private async kindOf(m: OutboundMedia): Promise<'image' | 'audio' | 'video' | 'document' | 'sticker'> {
    if (m.mimeType === 'image/webp') return isSticker(webpShape(await m.bytes(32)), m.size) ? 'sticker' : 'document'
    return MEDIA_KIND[m.mimeType] ?? 'document'
  }

  /** The connection's secrets, for the webhook route. */
  get appSecret() {
    return this.config.app_secret
  }
  /** Meta's id for the number: the webhooks of every number of an app name it (value.metadata.phone_number_id). */
  get phoneNumberId() {
    return this.config.phone_number_id
  }
  get verifyToken() {
    return this.config.verify_token
  }

  private url(path: string) {
    return `${this.config.graph_base_url.replace(/\/+$/, '')}/${this.config.graph_version}/${path}`
  }

  /**
   * One Graph API call; resolves with the JSON body or throws a GraphError-shaped DriverError.
   * `send`: the call messages a customer. It runs until the send's own deadline (`signal`, after
   * which the pacer records send_timeout), and once the request may have left, a broken
   * connection or an unreadable answer is not retryable: the Cloud API may have the message.
   */
  private async call(method: string, path: string, body?: unknown, send?: { signal?: AbortSignal }): Promise<any> {
    let res: Response
    let json: any
    try {
      res = await fetch(this.url(path), {
        method,
        headers: { authorization: `Bearer ${this.config.access_token}`, ...(body instanceof FormData || body === undefined ? {} : { 'content-type': 'application/json' }) },
        body: body === undefined ? undefined : body instanceof FormData ? body : JSON.stringify(body),
        signal: send ? send.signal : AbortSignal.timeout(TIMEOUT_MS),
        // the access token goes to the Graph API host and nowhere a redirect would lead
        redirect: 'error',
      })
      json = await res.json().catch((e) => (res.ok ? Promise.reject(e) : null))
    } catch (e) {
      if (send && !NOT_SENT.has((e as { code?: string })?.code ?? '')) {
        throw new UnconfirmedSend('send_unconfirmed', 'The connection to the Cloud API broke before it confirmed the message; it may have been sent, so it was not sent again.')
      }
      throw new DriverError('network_unreachable', 'The Cloud API could not be reached.', true)
    }
    if (res.ok && json) return json
    const given = Number(json?.error?.code)
    const err: GraphError = { code: Number.isInteger(given) && given >= 0 ? given : res.status, message: metaErrorText(json?.error, `HTTP ${res.status}`) }
    throw this.mapError(err, res.status)
  }

  private mapError(err: GraphError, httpStatus: number): DriverError {
    if (err.code === PAIR_RATE_LIMIT) return new RecipientThrottled(`cloud_api_${err.code}`, `The Cloud API asked to slow down messages to this recipient: ${err.message}`, true, true)
    if (THROTTLE_CODES.has(err.code) || httpStatus === 429) return new DriverError(`cloud_api_${err.code}`, `The Cloud API asked to slow down: ${err.message}`, true, true)
    if (AUTH_CODES.has(err.code) || httpStatus === 401) {
      this.ctx.reportStatus('offline', `The Cloud API rejected the access token (code ${err.code}).`)
      return new DriverError('connection_offline', 'The Cloud API rejected the access token; the number is offline until its config is fixed.')
    }
    if (httpStatus >= 500) return new DriverError(`cloud_api_${err.code}`, `The Cloud API failed: ${err.message}`, true)
    if (ACCOUNT_BLOCKED.has(err.code)) this.accountBlocked(err.code, err.message)
    if (TEMPLATE_REFUSED.has(err.code)) return new TemplateRefused(`cloud_api_${err.code}`, err.message)
    return new DriverError(`cloud_api_${err.code}`, err.message)
  }

  /**
   * Meta blocked the number's account (ACCOUNT_BLOCKED; from a send's answer or a status): the
   * number goes offline with Meta's words, its queue waiting, until the operator sets it online.
   */
  accountBlocked(code: number, message: string) {
    this.ctx.reportStatus('offline', `Meta stopped the WhatsApp Business account (code ${code}): ${message}`.slice(0, 500) + ' Clear it in WhatsApp Manager, then set the number online.')
  }

  async probe(): Promise<{ online: boolean; reason: string | null }> {
    try {
      const r = await this.call('GET', `${encodeURIComponent(this.config.phone_number_id)}?fields=display_phone_number,verified_name`)
      // Meta's number for this phone_number_id must be the one configured ("+1 555-000-1234" and the like)
      const shown = typeof r?.display_phone_number === 'string' ? r.display_phone_number.replace(/[^0-9]/g, '') : ''
      if (shown && shown !== this.ctx.phone.replace(/^\+/, '')) return { online: false, reason: `Meta knows phone_number_id ${this.config.phone_number_id} as +${shown}, not as ${this.ctx.phone}: check the phone or the phone_number_id.` }
      return { online: true, reason: null }
    } catch (e) {
      const err = e as DriverError
      if (err.code === 'connection_offline') return { online: false, reason: 'The Cloud API rejected the access token.' }
      if (err.code === 'cloud_api_100' || err.code === 'cloud_api_33') return { online: false, reason: 'The phone number id is not registered for this access token.' }
      if (err.code === 'network_unreachable') return { online: false, reason: 'The Cloud API could not be reached.' }
      return { online: false, reason: err.message }
    }
  }

  /**
   * The templates of the number's WhatsApp Business Account (config `waba_id`), page by page —
   * each next page asked for with its cursor from this number's own Graph URL, never an address
   * from the answer, so the token goes nowhere else.
   */
  async templates(): Promise<NetworkTemplateDefinition[]> {
    if (!this.config.waba_id) throw new DriverError('waba_id_missing', 'Set config.waba_id, the WhatsApp Business Account id, to import its templates.')
    const found: NetworkTemplateDefinition[] = []
    let after: string | null = null
    for (let page = 0; page < TEMPLATE_PAGES; page++) {
      const query = new URLSearchParams({ fields: TEMPLATE_FIELDS, limit: '100', ...(after ? { after } : {}) })
      const r = await this.call('GET', `${encodeURIComponent(this.config.waba_id)}/message_templates?${query}`)
      for (const t of Array.isArray(r?.data) ? r.data : []) {
        const def = readTemplate(t)
        if (def) found.push(def)
      }
      const next = r?.paging?.cursors?.after
      if (!r?.paging?.next || typeof next !== 'string' || !next) return found
      after = next
    }
    throw new DriverError('too_many_templates', `The account lists more than ${TEMPLATE_PAGES * 100} templates; none were imported.`)
  }

  /**
   * A file a customer sent, by the media id in their message: its details from the Cloud API
   * (GET /{media id}: a short-lived URL and the size), then the file from that URL with the token.
   * `too_large` past `maxBytes` (then it is not downloaded), `gone` when Meta does not have it
   * (any more) or its URL is not Meta's. A failure that may pass — the network, Meta's 5xx or
   * throttling — throws a retryable DriverError.
   */
  async downloadMedia(mediaId: string, maxBytes: number): Promise<{ bytes: Uint8Array } | 'too_large' | 'gone'> {
    let info: any
    try {
      info = await this.call('GET', encodeURIComponent(mediaId))
    } catch (e) {
      if (e instanceof DriverError && e.retryable) throw e
      return 'gone'
    }
    if (typeof info?.url !== 'string' || !this.isMetaUrl(info.url)) return 'gone'
    if (Number(info.file_size) > maxBytes) return 'too_large'
    const unreachable = () => new DriverError('network_unreachable', 'The Cloud API could not be reached.', true)
    let res: Response
    try {
      res = await fetch(info.url, { headers: { authorization: `Bearer ${this.config.access_token}` }, signal: AbortSignal.timeout(TIMEOUT_MS), redirect: 'error' })
    } catch {
      throw unreachable()
    }
    if (!res.ok || Number(res.headers.get('content-length')) > maxBytes) {
      await res.body?.cancel().catch(() => {})
      if (res.status >= 500 || res.status === 429) throw unreachable()
      return res.ok ? 'too_large' : 'gone'
    }
    const bytes = await readBody(res, maxBytes).catch(() => Promise.reject(unreachable()))
    return bytes === TOO_LARGE ? 'too_large' : { bytes }
  }

  /** Whether a media URL the Cloud API gave is Meta's (or the configured Graph API's own origin). */
  private isMetaUrl(raw: string): boolean {
    let url: URL
    try {
      url = new URL(raw)
    } catch {
      return false
    }
    if (url.origin === new URL(this.config.graph_base_url).origin) return true
    return url.protocol === 'https:' && MEDIA_HOSTS.some((h) => url.hostname === h || url.hostname.endsWith(`.${h}`))
  }

  /** A file's Meta media id: uploaded once, then reused (see UPLOAD_REUSE_MS); a failed upload is forgotten. */
  private uploadMedia(m: OutboundMedia): Promise<string> {
    const now = Date.now()
    const kept = this.uploads.get(m.id)
    if (kept && now - kept.at < UPLOAD_REUSE_MS) return kept.id
    const id = this.upload(m)
    this.uploads.delete(m.id)
    this.uploads.set(m.id, { id, at: now })
    if (this.uploads.size > UPLOADS_KEPT) this.uploads.delete(this.uploads.keys().next().value!)
    id.catch(() => {
      if (this.uploads.get(m.id)?.id === id) this.uploads.delete(m.id)
    })
    return id
  }

  private async upload(m: OutboundMedia): Promise<string> {
    const form = new FormData()
    form.set('messaging_product', 'whatsapp')
    form.set('type', m.mimeType)
    form.set('file', new File([await m.bytes()], m.filename, { type: m.mimeType }))
    const r = await this.call('POST', `${encodeURIComponent(this.config.phone_number_id)}/media`, form)
    if (typeof r?.id !== 'string') throw new DriverError('cloud_api_bad_response', 'The Cloud API did not return a media id.', true)
    return r.id
  }

  async send(message: OutboundMessage, signal?: AbortSignal): Promise<Accepted> {
    if (!this.ctx.online()) throw new DriverError('connection_offline', 'The number is offline.', true)
    if (message.groupExternalId !== null || !message.recipient) throw new DriverError('unsupported', 'The Cloud API cannot post into groups.')
    const now = Date.now()
    for (const [id, p] of this.progress) if (now - p.at > PROGRESS_TTL_MS) this.progress.delete(id)
    const done = this.progress.get(message.id)?.ids ?? []
    const ids: string[] = []
    // the person's WhatsApp id as Meta answers it (it can differ from the number sent to)
    let waId: string | undefined
    try {
      const to = message.recipient.replace(/^\+/, '')
      // our id comes back in every status of the message (see confirmLater)
      const base = { messaging_product: 'whatsapp', recipient_type: 'individual', to, biz_opaque_callback_data: message.id }
      const path = `${encodeURIComponent(this.config.phone_number_id)}/messages`
      // a part the Cloud API accepted in an earlier attempt is counted, not sent again
      const accepted = () => {
        const id = done[ids.length]
        if (id !== undefined) ids.push(id)
        return id !== undefined
      }
      const post = async (payload: Record<string, unknown>) => {
        const r = await this.call('POST', path, { ...base, ...payload }, { signal })
        const id = r?.messages?.[0]?.id
        if (typeof id !== 'string') throw new DriverError('cloud_api_bad_response', 'The Cloud API did not return a message id.')
        ids.push(id)
        const wa = r?.contacts?.[0]?.wa_id
        if (typeof wa === 'string' && /^[1-9][0-9]{6,14}$/.test(wa)) waId ??= wa
      }
      // a template Meta approved: it reaches people outside the 24-hour window too. Its one
      // attachment, if any, is its media header (uploaded first, referred to by id)
      const head = message.attachments.length === 1 ? message.attachments[0]! : null
      const headKind = head ? templateHeaderKind(head.mimeType) : null
      const template = message.attachments.length === 0 || headKind ? message.template : null
      if (template && !accepted()) {
        const header = head && headKind ? { kind: headKind, id: await this.uploadMedia(head), filename: head.filename } : null
        await post({ type: 'template', template: templatePayload(template, header) })
      }
      // one Cloud API message per attachment, the text as the first one's caption (where allowed:
      // an image, a video or a document, and a text Meta takes as a caption); else the text follows
      let caption = template ? null : message.body
      const fits = caption !== null && caption.length <= CAPTION_MAX
      for (const m of template ? [] : message.attachments) {
        const kind = await this.kindOf(m)
        const captioned = !!caption && fits && (kind === 'image' || kind === 'video' || kind === 'document')
        if (!accepted()) {
          const payload: Record<string, unknown> = { id: await this.uploadMedia(m) }
          if (kind === 'document') payload.filename = m.filename
          if (captioned) payload.caption = caption
          await post({ type: kind, [kind]: payload })
        }
        if (captioned) caption = null
      }
      if (caption && !accepted()) await post({ type: 'text', text: { body: caption, preview_url: false } })
      this.progress.delete(message.id)
      this.reported.delete(message.id)
      if (!ids.length) throw new DriverError('cloud_api_bad_response', 'The message had nothing to send.')
      return { externalId: ids[0]!, partIds: ids.slice(1), recipientAddress: waId === undefined ? undefined : `+${waId}` }
    } catch (e) {
      // retried later: remember what was accepted; otherwise the message fails and is not retried
      if (e instanceof DriverError && e.retryable && ids.length > 0) this.progress.set(message.id, { at: now, ids })
      else this.progress.delete(message.id)
      // a refusal may be of a reused upload Meta no longer takes: the next message uploads afresh
      if (!(e instanceof DriverError && e.retryable)) for (const m of message.attachments) this.uploads.delete(m.id)
      // a later part's answer was lost (or the send's time ran out), but Meta took the first part:
      // the message is out, whatever became of the rest (their statuses still find it)
      if (e instanceof UnconfirmedSend && ids.length > 0) this.reportedSend(message.id, ids[0]!)
      // refused because the person stopped marketing messages (as a status webhook can also say)
      if (e instanceof DriverError && e.code === `cloud_api_${MARKETING_STOPPED}`) this.ctx.events.marketingStopped(this.ctx.connectionId, message.recipient, `cloud_api_${MARKETING_STOPPED}:${message.id}`)
      throw e
    }
  }

  async confirm() {
    // the Cloud API cannot be asked whether it got a send by our id; it tells later (confirmLater)
    return null
  }

  /**
   * Wait for a status webhook naming this message (its `biz_opaque_callback_data`) by a wamid:
   * Meta has it. Null when none came within `confirm_wait_seconds`; STOPPED when the driver closes.
   */
  confirmLater(messageId: string): Promise<{ externalId: string } | null | typeof STOPPED> {
    const seen = this.reported.get(messageId)
    if (seen) {
      this.reported.delete(messageId)
      return Promise.resolve({ externalId: seen.wamid })
    }
    const waitMs = (this.config.confirm_wait_seconds ?? DEFAULT_CONFIRM_WAIT_SECONDS) * 1000
    if (waitMs <= 0) return Promise.resolve(null)
    // one wait per message: an earlier one (there should be none) is answered "no word"
    const earlier = this.waiting.get(messageId)
    if (earlier) {
      clearTimeout(earlier.timer)
      earlier.resolve(null)
    }
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.waiting.delete(messageId)
        resolve(null)
      }, waitMs)
      this.waiting.set(messageId, { resolve, timer })
    })
  }

  /**
   * A status webhook named one of our messages still being sent, by a wamid Capstan has not
   * recorded: a send waiting in confirmLater gets it at once, otherwise it is kept for one that
   * comes soon (the status can overtake the send's own answer, or a crash recovery's wait).
   */
  reportedSend(messageId: string, wamid: string) {
    const w = this.waiting.get(messageId)
    if (w) {
      clearTimeout(w.timer)
      this.waiting.delete(messageId)
      w.resolve({ externalId: wamid })
      return
    }
    const now = Date.now()
    for (const [id, r] of this.reported) {
      if (now - r.at <= REPORTED_TTL_MS) break // kept in arrival order: the rest are younger
      this.reported.delete(id)
    }
    if (!this.reported.has(messageId)) this.reported.set(messageId, { wamid, at: now })
  }

  async listGroups() {
    return null
  }

  close() {
    for (const w of this.waiting.values()) {
      clearTimeout(w.timer)
      w.resolve(STOPPED)
    }
    this.waiting.clear()
  }
}

/**
 * A text parameter as WhatsApp takes it: no line breaks, tabs or runs of more than four spaces
 * (Meta refuses those, error 132018), so each run of whitespace becomes one space. The message
 * log keeps the text as rendered.
 */
const oneLine = (text: string) => text.replace(/\s+/g, ' ').trim()

/**
 * A message template as the Cloud API takes it: name, language, the header (an uploaded media id —
 * a document also keeps its file name — or the value of a text header's variable), the body's
 * text parameters (each with its `parameter_name` for a template with named parameters) and the
 * variable part of each dynamic URL button (by its position among the template's buttons).
 */
function templatePayload(t: NetworkTemplate, header: { kind: 'image' | 'video' | 'document'; id: string; filename: string } | null) {
  const components: Record<string, unknown>[] = []
  if (header) components.push({ type: 'header', parameters: [{ type: header.kind, [header.kind]: header.kind === 'document' ? { id: header.id, filename: header.filename } : { id: header.id } }] })
  else if (t.headerText !== undefined) components.push({ type: 'header', parameters: [{ type: 'text', ...(t.headerParameterName ? { parameter_name: t.headerParameterName } : {}), text: oneLine(t.headerText) }] })
  if (t.parameters.length) components.push({ type: 'body', parameters: t.parameters.map((text, i) => ({ type: 'text', ...(t.parameterNames ? { parameter_name: t.parameterNames[i] } : {}), text: oneLine(text) })) })
  for (const b of t.urlButtons ?? []) components.push({ type: 'button', sub_type: 'url', index: String(b.index), parameters: [{ type: 'text', text: b.text }] })
  return { name: t.name, language: { code: t.language }, ...(components.length ? { components } : {}) }
}

const digits = /^[0-9]{5,30}$/
const str = (v: unknown, max = 1000) => typeof v === 'string' && v.length > 0 && v.length <= max

export const cloudApiDriver: DriverFactory = {
  name: 'cloud_api',
  secretFields: ['access_token', 'app_secret', 'verify_token'],
  networkId: (config) => (typeof config.phone_number_id === 'string' ? config.phone_number_id : null),
  checkConfig(config: unknown, previous?: Record<string, unknown>) {
    if (config !== undefined && config !== null && (typeof config !== 'object' || Array.isArray(config))) return { errors: { config: ['The config field must be an object.'] } }
    const c: Record<string, unknown> = { graph_base_url: DEFAULT_GRAPH_BASE, graph_version: DEFAULT_GRAPH_VERSION, confirm_wait_seconds: DEFAULT_CONFIRM_WAIT_SECONDS, ...previous, ...(config as Record<string, unknown> | undefined) }
    const errors: Record<string, string[]> = {}
    if (typeof c.phone_number_id !== 'string' || !digits.test(c.phone_number_id)) errors['config.phone_number_id'] = ['The config.phone_number_id field must be the numeric phone number id from Meta.']
    if (!str(c.access_token, 4096)) errors['config.access_token'] = ['The config.access_token field is required.']
    if (!str(c.app_secret, 200)) errors['config.app_secret'] = ['The config.app_secret field is required (it verifies webhook signatures).']
    if (!str(c.verify_token, 200)) errors['config.verify_token'] = ['The config.verify_token field is required (Meta sends it when you register the webhook).']
    if (c.waba_id !== undefined && c.waba_id !== null && (typeof c.waba_id !== 'string' || !digits.test(c.waba_id))) errors['config.waba_id'] = ['The config.waba_id field must be the numeric WhatsApp Business Account id from Meta.']
    if (typeof c.graph_base_url !== 'string' || !/^https?:\/\/[^\s/?#]+(\/[^\s?#]*)?$/.test(c.graph_base_url)) errors['config.graph_base_url'] = ['The config.graph_base_url field must be an http or https URL.']
    if (typeof c.graph_version !== 'string' || !/^v[0-9]{1,3}\.[0-9]{1,2}$/.test(c.graph_version)) errors['config.graph_version'] = ['The config.graph_version field must look like v26.0.']
    const wait = c.confirm_wait_seconds
    if (typeof wait !== 'number' || !Number.isInteger(wait) || wait < 0 || wait > 3600) errors['config.confirm_wait_seconds'] = ['The config.confirm_wait_seconds field must be a whole number of seconds from 0 to 3600.']
    if (Object.keys(errors).length) return { errors }
    const { phone_number_id, access_token, app_secret, verify_token, graph_base_url, graph_version, confirm_wait_seconds, waba_id } = c
    // waba_id: null removes it
    return { config: { phone_number_id, access_token, app_secret, verify_token, graph_base_url, graph_version, confirm_wait_seconds, ...(typeof waba_id === 'string' ? { waba_id } : {}) } }
  },
  create: (ctx) => new CloudApiConnection(ctx),
}
