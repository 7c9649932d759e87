/**
 * The public webhook route of a Cloud API connection: /hooks/whatsapp/{connection id}.
 * GET answers Meta's verification (hub.mode=subscribe, hub.verify_token, hub.challenge). POST is
 * accepted only with a valid X-Hub-Signature-256 over the raw body; statuses update messages
 * (forward only — duplicates and out-of-order events change nothing, and a status that arrives
 * before the send was recorded is tried again shortly), inbound messages are logged once per Meta
 * message id (opt-out keywords apply) with the file a customer sent, if any (downloaded and
 * scanned like an upload), and a person who stopped marketing messages (their preference, or a
 * send refused for it) loses their marketing consent. Payloads it does not know are acknowledged
 * and logged, never an error; an event that could not be stored is answered 500, so Meta
 * delivers it again. Bad signatures
 * count per connection and client address against the failed-auth limit: over it, that address
 * gets 429 for that connection without its body being read (a flood costs neither hashing nor a
 * log line per request, and a misconfigured app secret on one number cannot hold up another's).
 */
import { timingSafeEqual } from 'node:crypto'
import { limitName } from '../http/ip-ranges'
import { E164 } from '../http/phone'
import { readBody, TOO_LARGE } from '../http/body'
import { ApiError, authRateLimited, payloadTooLarge } from '../http/errors'
import type { ClientAddress } from '../http/auth'
import type { Windows } from '../http/limits'
import { clipCodePoints } from '../http/schema'
import type { MediaRow } from '../modules/media/records'
import type { Services } from '../services'
import { ACCOUNT_BLOCKED, CloudApiConnection, MARKETING_STOPPED, metaErrorText, TEMPLATE_REFUSED } from './cloud-api'

const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' } })
const RETRY_UNKNOWN_MS = [1000, 3000, 10000]

function validSignature(secret: string, raw: Uint8Array, header: string | null): boolean {
  if (!header?.startsWith('sha256=')) return false
  const want = Buffer.from(new Bun.CryptoHasher('sha256', secret).update(raw).digest('hex'))
  const got = Buffer.from(header.slice(7).trim().toLowerCase())
  return got.length === want.length && timingSafeEqual(got, want)
}

/** A failed status's code as a message's error code: `cloud_api_<Meta's code>`, or delivery_failed without one. */
const metaCode = (code: unknown) => ((typeof code === 'number' && Number.isInteger(code) && code >= 0) || (typeof code === 'string' && /^[0-9]{1,9}$/.test(code)) ? `cloud_api_${Number(code)}` : 'delivery_failed')

const digest = (text: string) => new Bun.CryptoHasher('sha256').update(text).digest()

/** Counts bad signatures (see above) by connection and client address (with several instances, in the database they share). */
export interface SignatureGuard {
  failures: Windows
  clientIp: ClientAddress
}

export async function handleCloudApiWebhook(request: Request, connectionId: string, svc: Services, guard: SignatureGuard): Promise<Response> {
  const live = await svc.connections.load(connectionId)
  if (!live || !(live.driver instanceof CloudApiConnection)) return json(404, { message: 'The connection was not found.', code: 'not_found' })
  const driver = live.driver
  const url = new URL(request.url)
  if (request.method === 'GET') {
    const mode = url.searchParams.get('hub.mode')
    const token = url.searchParams.get('hub.verify_token') ?? ''
    const challenge = url.searchParams.get('hub.challenge') ?? ''
    // digests of equal length whatever was sent (any length, any characters) compared in constant time
    const ok = mode === 'subscribe' && timingSafeEqual(digest(token), digest(driver.verifyToken))
    return ok ? new Response(challenge, { status: 200, headers: { 'content-type': 'text/plain; charset=utf-8', 'x-content-type-options': 'nosniff', 'cache-control': 'no-store' } }) : json(403, { message: 'The verify token does not match.', code: 'forbidden' })
  }
  if (request.method !== 'POST') return json(405, { message: 'Only GET and POST are accepted here.', code: 'method_not_allowed' })
  const caller = `${connectionId} ${limitName(guard.clientIp(request))}`
  if (await guard.failures.exceeded(caller)) return json(429, authRateLimited().toBody())
  // held to the JSON limit while it is read: a chunked body has no length to check beforehand
  const raw = await readBody(request, svc.deps.config.maxJsonBytes)
  if (raw === TOO_LARGE) {
    // the rest of the body is never read, so the connection cannot carry another request
    const tooLarge = json(413, payloadTooLarge().toBody())
    tooLarge.headers.set('connection', 'close')
    return tooLarge
  }
  if (!validSignature(driver.appSecret, raw, request.headers.get('x-hub-signature-256'))) {
    // past the limit (bad signatures that passed the look above together), the 429 in its place
    if ((await guard.failures.hit(caller)) < 0) return json(429, authRateLimited().toBody())
    svc.log.warn('cloud api webhook refused: bad signature', { connection_id: connectionId })
    return json(401, { message: 'The X-Hub-Signature-256 signature is not valid.', code: 'invalid_signature' })
  }
  let body: unknown
  try {
    const text = Buffer.from(raw).toString('utf8')
    // a NUL character (JSON's \u0000) is kept as U+FFFD: PostgreSQL's text cannot hold it, and an
    // event that could never be stored would be answered 500 and delivered again for days
    body = text.includes('\\u0000') ? JSON.parse(text, (_name, v) => (typeof v === 'string' ? v.replaceAll('\0', '\uFFFD') : v)) : JSON.parse(text)
  } catch {
    // signed but not JSON: delivering it again would not help
    svc.log.warn('cloud api webhook payload not understood; acknowledged', { connection_id: connectionId })
    return json(200, { received: true })
  }
  try {
    await apply(body, connectionId, svc, driver)
  } catch (e) {
    // not stored (e.g. the disk is full): a 5xx makes Meta deliver it again; what was stored
    // before the failure is recognised by its message id then and not logged twice
    svc.log.error('cloud api webhook could not be stored; Meta will deliver it again', { connection_id: connectionId, error: String((e as Error)?.message ?? e).slice(0, 200) })
    return json(500, { message: 'The event could not be stored; deliver it again.', code: 'internal_error' })
  }
  return json(200, { received: true })
}

/**
 * What an inbound message says, as the message log keeps it: a text's body; the words of a tapped
 * reply — a template's quick-reply button (`button.text`) or an interactive button or list row
 * (`interactive.*_reply.title`), so a "STOP" button opts out like the typed word; a reaction as
 * "[reaction] 👍"; a shared location as "[location message] <name, address> (lat, long)";
 * shared contacts as "[contacts message] <name> <numbers>; ..."; a WhatsApp notice (the customer
 * changed their number) as "[system message] <its text>"; otherwise "[<type> message]" followed
 * by the caption a photo, video or document came with.
 */
function inboundText(m: any): string {
  const type = String(m.type ?? 'unknown').slice(0, 30)
  if (type === 'text') return String(m.text?.body ?? '')
  if (typeof m.button?.text === 'string') return m.button.text
  const reply = m.interactive?.button_reply ?? m.interactive?.list_reply
  if (type === 'interactive' && typeof reply?.title === 'string') return reply.title
  // a reaction to one of our messages (an empty emoji takes a reaction back)
  if (type === 'reaction' && typeof m.reaction?.emoji === 'string') return m.reaction.emoji ? `[reaction] ${m.reaction.emoji}` : '[reaction removed]'
  if (type === 'location' && typeof m.location?.latitude === 'number' && typeof m.location?.longitude === 'number') {
    const place = [m.location.name, m.location.address].filter((v) => typeof v === 'string' && v.trim()).join(', ')
    return `[location message] ${place ? `${place} ` : ''}(${m.location.latitude}, ${m.location.longitude})`
  }
  // shared contact cards: each one's name and numbers
  if (type === 'contacts' && Array.isArray(m.contacts)) {
    const text = (v: unknown) => (typeof v === 'string' && v.trim() ? [v.trim()] : [])
    const cards = m.contacts.slice(0, 20).map((c: any) => [...text(c?.name?.formatted_name), ...(Array.isArray(c?.phones) ? c.phones.flatMap((p: any) => text(p?.phone)) : [])].join(' '))
    return `[contacts message] ${cards.filter(Boolean).join('; ')}`.trimEnd()
  }
  // WhatsApp's own notices, e.g. that the customer changed their number (to which one)
  if (type === 'system' && typeof m.system?.body === 'string') return `[system message] ${m.system.body}`.trimEnd()
  const media = Object.hasOwn(m, type) ? m[type] : undefined
  return typeof media?.caption === 'string' && media.caption.trim() ? `[${type} message] ${media.caption}` : `[${type} message]`
}

/** Inbound message types whose file is kept with the message. */
const MEDIA_TYPES = new Set(['image', 'video', 'audio', 'document', 'sticker'])

/** How long after a customer sent a file a failure that may pass still holds up its message. */
const FILE_RETRY_WINDOW_MS = 3_600_000

/**
 * The file of an inbound photo, video, voice note, document or sticker: downloaded from Meta,
 * then checked, scanned and stored like an upload (a row the message inserts), or null when it
 * is not kept — larger than the workspace's media limit, gone from Meta, a type Capstan does not
 * take, or malware (each logged). A failure that may pass (Meta or the network unreachable, the
 * scanner down, the disk full) throws while the message is less than an hour old: the webhook
 * answers 500 and Meta delivers it again. Past that the message is logged without its file, so a
 * scanner that stays away never costs the message itself (Meta stops retrying after some days).
 */
async function inboundFile(m: any, connectionId: string, svc: Services, driver: CloudApiConnection): Promise<MediaRow | null> {
  const type = String(m.type)
  const media = MEDIA_TYPES.has(type) && Object.hasOwn(m, type) ? m[type] : null
  if (typeof media?.id !== 'string' || media.id.length === 0 || media.id.length > 256) return null
  const workspaceId = (await svc.connections.obtainAny(connectionId)).row.workspace_id
  const { max_bytes } = svc.workspaces.settings(svc.workspaces.cached(workspaceId)!).media
  const skip = (reason: string) => {
    svc.log.warn('inbound file not kept', { connection_id: connectionId, type, reason })
    return null
  }
  // Meta's timestamp: seconds since the epoch, as a string
  const sentAt = Number(m.timestamp) * 1000
  const retrying = Number.isFinite(sentAt) && svc.deps.clock.now() - sentAt < FILE_RETRY_WINDOW_MS
  try {
    const got = await driver.downloadMedia(media.id, max_bytes)
    if (got === 'gone') return skip('Meta no longer has the file')
    if (got === 'too_large') return skip(`larger than the workspace's media limit (${max_bytes} bytes)`)
    const name = typeof media.filename === 'string' ? media.filename : undefined
    return await svc.media.prepare(workspaceId, new File([got.bytes], name ?? ''))
  } catch (e) {
    // refused for what the file is; anything else (Meta, the scanner, the disk) may pass
    if (e instanceof ApiError && e.status === 422) return skip(e.message)
    if (retrying) throw e
    return skip(`still failing an hour after it was sent: ${String((e as Error)?.message ?? e).slice(0, 200)}`)
  }
}

/**
 * The number a change is about. Meta posts the events of every number of an app to the app's one
 * callback URL, each change naming its number (`value.metadata.phone_number_id`): the connection
 * with that phone_number_id takes it, whichever connection's URL it reached — if it belongs to the
 * same app (the same app secret, so the signature checked holds for it too). null: no connection
 * of this app has that number (logged, acknowledged: delivering it again would not help).
 */
function routeOf(value: any, connectionId: string, driver: CloudApiConnection, svc: Services): { connectionId: string; driver: CloudApiConnection } | null {
  const named = value?.metadata?.phone_number_id
  if (typeof named !== 'string' || named === driver.phoneNumberId) return { connectionId, driver }
  for (const c of svc.connections.all()) {
    if (c.driver instanceof CloudApiConnection && c.driver.phoneNumberId === named && c.driver.appSecret === driver.appSecret) return { connectionId: c.row.id, driver: c.driver }
  }
  svc.log.warn('cloud api webhook for a number no connection of this app has; acknowledged', { connection_id: connectionId, phone_number_id: named.slice(0, 40) })
  return null
}

async function apply(body: any, reachedId: string, svc: Services, reached: CloudApiConnection) {
  let known = 0
  for (const entry of Array.isArray(body?.entry) ? body.entry : []) {
    for (const change of Array.isArray(entry?.changes) ? entry.changes : []) {
      const value = change?.value ?? {}
      const route = routeOf(value, reachedId, reached, svc)
      if (!route) {
        known++
        continue
      }
      const { connectionId, driver } = route
      // errors Meta reports about the number or the app itself (not about one message): an
      // operator must see them
      for (const err of Array.isArray(value.errors) ? value.errors.slice(0, 10) : []) {
        known++
        svc.log.warn('cloud api reports an error for the number', { connection_id: connectionId, code: metaCode(err?.code), error: metaErrorText(err, 'no message').slice(0, 500) })
      }
      for (const st of Array.isArray(value.statuses) ? value.statuses : []) {
        if (typeof st?.id !== 'string' || typeof st?.status !== 'string') continue
        known++
        const ours = typeof st.biz_opaque_callback_data === 'string' ? st.biz_opaque_callback_data : null
        await applyStatus(connectionId, { wamid: st.id, status: st.status, error: st.errors?.[0], ours, at: metaTime(st.timestamp) }, svc, driver, 0)
      }
      // "Stop promotions" in WhatsApp: marketing consent withdrawn (resuming changes nothing here:
      // consent to marketing is recorded by the business, through the API)
      for (const p of Array.isArray(value.user_preferences) ? value.user_preferences : []) {
        if (p?.category !== 'marketing_messages' || typeof p?.value !== 'string') continue
        known++
        const phone = typeof p.wa_id === 'string' ? (p.wa_id.startsWith('+') ? p.wa_id : `+${p.wa_id}`) : ''
        if (p.value !== 'stop' || !E164.test(phone)) continue
        if (await svc.messages.marketingStopped(connectionId, phone, 'cloud_api:marketing_stopped')) svc.log.info('marketing consent withdrawn: the contact stopped marketing messages in WhatsApp', { connection_id: connectionId })
      }
      // the senders' WhatsApp profile names, by wa_id
      const names = new Map<string, string>()
      for (const c of Array.isArray(value.contacts) ? value.contacts : []) if (typeof c?.wa_id === 'string' && typeof c.profile?.name === 'string') names.set(c.wa_id, c.profile.name)
      for (const m of Array.isArray(value.messages) ? value.messages : []) {
        if (typeof m?.from !== 'string') continue
        known++
        const from = m.from.startsWith('+') ? m.from : `+${m.from}`
        if (!E164.test(from)) continue
        const text = inboundText(m)
        // Meta's message id (wamid): a webhook delivered again logs nothing twice
        const wamid = typeof m.id === 'string' && m.id.length > 0 && m.id.length <= 256 ? m.id : null
        if (wamid !== null && (await svc.messages.byExternal(connectionId, wamid))) continue
        const file = await inboundFile(m, connectionId, svc, driver)
        // a reply or a button tap quotes the wamid of the message it answers, a reaction names the
        // one it reacts to: ours, if we sent it
        const quotedId = m.context?.id ?? (m.type === 'reaction' ? m.reaction?.message_id : undefined)
        const quoted = typeof quotedId === 'string' && quotedId.length <= 256 ? await svc.messages.byAnyPart(connectionId, quotedId) : null
        const replyTo = quoted?.direction === 'outbound' ? quoted.id : null
        await svc.messages.inbound(connectionId, from, clipCodePoints(text, 4096) || '[empty message]', { externalId: wamid, file: file ?? undefined, replyTo, senderName: names.get(m.from) ?? null, at: metaTime(m.timestamp) })
      }
    }
  }
  if (known === 0) svc.log.info('cloud api webhook without statuses or messages; acknowledged', { connection_id: reachedId, field: String(body?.entry?.[0]?.changes?.[0]?.field ?? '').slice(0, 50) })
}

/** One status from Meta: the wamid it is about, and our message id (biz_opaque_callback_data) if it carried one. */
interface StatusReport {
  wamid: string
  status: string
  error: any
  ours: string | null
  /** Meta's time for it (ms). */
  at: number | undefined
}

/** Meta's `timestamp` (Unix seconds, as a string or a number) in ms; undefined when it is not one. */
function metaTime(v: unknown): number | undefined {
  const n = typeof v === 'string' && /^\d{1,12}$/.test(v) ? Number(v) : typeof v === 'number' && Number.isInteger(v) && v >= 0 ? v : NaN
  return Number.isFinite(n) ? n * 1000 : undefined
}

/**
 * Apply one status (its write awaited, so a failure reaches Meta as a 5xx). The message is found
 * by a wamid its send recorded (its first part's, or a later part's) or, failing that, by our id
 * the status carries:
 * - a message still being sent whose wamid Capstan has not recorded (its send's answer is late or
 *   was lost, or a crash interrupted it): the driver learns that Meta has it (`reportedSend`),
 *   which records it as sent; the status is then applied on a retry;
 * - a later part of a message sent as several: that part's failure fails a message not yet
 *   delivered (its first part's statuses tell delivery and reading).
 * A message not yet known is retried shortly.
 */
async function applyStatus(connectionId: string, report: StatusReport, svc: Services, driver: CloudApiConnection, attempt: number): Promise<void> {
  const { wamid, status, error, ours } = report
  let row = await svc.messages.byExternal(connectionId, wamid)
  if (row?.direction === 'inbound') return // statuses describe our sends, never a customer's message
  // a later part of a message sent as several: recorded with it, or named by our id
  let laterPart = false
  if (!row) {
    row = await svc.messages.byLaterPart(connectionId, wamid)
    laterPart = row !== null
  }
  if (!row && ours !== null) {
    const named = ours.length <= 64 ? await svc.messages.getAny(ours) : null
    if (named?.connection_id === connectionId && named.direction === 'outbound') {
      if (named.external_id !== null) {
        row = named
        laterPart = true
      } else if (named.status === 'sending') await svc.connections.reportedSend(connectionId, named.id, wamid)
      else {
        // failed before Meta's word came (e.g. the wait for it ran out): the log cannot go back
        if (status !== 'failed') svc.log.warn('cloud api reports a message recorded as failed as sent', { connection_id: connectionId, message_id: named.id, error_code: named.error_code, status })
        return
      }
    }
  }
  if (!row) {
    const wait = RETRY_UNKNOWN_MS[attempt]
    const again = () => applyStatus(connectionId, report, svc, driver, attempt + 1).catch((e) => svc.log.error('cloud api status could not be stored', { connection_id: connectionId, error: String((e as Error)?.message ?? e).slice(0, 200) }))
    if (wait !== undefined) setTimeout(again, wait)
    return
  }
  if (laterPart && status !== 'failed') return
  if (status === 'delivered' || status === 'read') await svc.messages.receipt(row.id, status, null, report.at)
  else if (status === 'failed') {
    await svc.messages.receipt(row.id, 'failed', { code: metaCode(error?.code), message: metaErrorText(error, 'The Cloud API reported the message as failed.') }, report.at)
    // refused because the person stopped marketing messages: withdraw their marketing consent too
    if (Number(error?.code) === MARKETING_STOPPED && row.recipient !== null) await svc.messages.marketingStopped(connectionId, row.recipient, `cloud_api_${MARKETING_STOPPED}:${row.id}`)
    // the account itself was stopped: the number goes offline rather than fail message after message
    if (ACCOUNT_BLOCKED.has(Number(error?.code))) driver.accountBlocked(Number(error.code), metaErrorText(error, 'The Cloud API reported the message as failed.'))
    // the template itself was refused: a campaign sending it pauses, written before Meta hears 200
    // (a pause that could not be written fails the delivery, and Meta sends it again)
    if (TEMPLATE_REFUSED.has(Number(error?.code))) await svc.messages.onTemplateRefused(row, `cloud_api_${error.code}`)
  }
  // "sent" is recorded when the send call returns (or Meta's word for it arrives); other statuses
  // (e.g. deleted) are ignored
}
