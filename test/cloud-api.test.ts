/**
 * The WhatsApp Cloud API driver against a local fake of the Graph API and a local sender of
 * signed webhooks, both built from Meta's published request/response shapes (see
 * src/network/cloud-api.ts). No test reaches the internet.
 */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import fc from 'fast-check'
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { EICAR, scanningServer } from './support/clamd'
import { WindowCounter } from '../src/http/limits'
import { handleCloudApiWebhook } from '../src/network/cloud-api-webhook'
import type { Services } from '../src/services'
import { inProcess } from './support/inproc'
import * as files from './support/files'
import { ADMIN_TOKEN, TestServer, hostEnv, newPhone } from './support/server'
import { holdRows } from './support/hold'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)

const TOKEN = 'EAAG-test-access-token-0123456789abcdef'
const APP_SECRET = 'test-app-secret-9f8e7d6c'
const VERIFY = 'capstan-verify-token'
const PNID = '109876543210'
const WABA = '102290129340398'

interface Seen {
  method: string
  path: string
  auth: string | null
  json?: any
  form?: Record<string, string>
  /** the wamid a message POST was answered with */
  wamid?: string
}

/** A fake Graph API: send, media upload and phone number lookup, with scripted failures. */
function fakeGraph() {
  const seen: Seen[] = []
  // failFor: per recipient, what each of its next message POSTs meets (null: accepted; 500; or
  // 'reset': the request is read, then the connection breaks before an answer)
  // inbound: files customers sent, by media id (a status instead of bytes: Meta answers that)
  // 'hang': the request is read and no answer comes until the test ends (or the client goes away)
  const hung: (() => void)[] = []
  // 'hold': the request is read and taken, its answer (the wamid) held back until releaseHeld()
  const held: (() => void)[] = []
  // waIdFor: the WhatsApp id Meta answers a send with, per number sent to (default: the number)
  // templates: what GET /{WABA}/message_templates lists, two to a page; failPage: the page (from 0) whose next answer is Meta's 500
  // numbers: the phone_number_ids Meta knows, with the number each stands for (display_phone_number)
  const state = { numbers: { [PNID]: '15550001234' } as Record<string, string>, templates: [] as unknown[], failPage: -1, rejectTokens: false, throttleNext: 0, waIdFor: {} as Record<string, string>, failFor: {} as Record<string, (null | 500 | 131031 | 131050 | 131053 | 131056 | 132015 | 'reset' | 'hang' | 'hold')[]>, inbound: {} as Record<string, { bytes?: Uint8Array; status?: number; url?: string }> }
  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      const url = new URL(req.url)
      const auth = req.headers.get('authorization')
      const err = (status: number, code: number, message: string, details?: string) =>
        Response.json({ error: { message, type: 'OAuthException', code, ...(details ? { error_data: { messaging_product: 'whatsapp', details } } : {}), fbtrace_id: 'AbCdEf' } }, { status })
      if (auth !== `Bearer ${TOKEN}` || state.rejectTokens) {
        seen.push({ method: req.method, path: url.pathname, auth })
        return err(401, 190, 'Error validating access token: Session has expired.')
      }
      // a customer's file: its details (a URL on this server, the size), then its bytes
      const file = /^\/(v\d+\.\d+|files)\/(in-[\w-]+)$/.exec(url.pathname)
      if (req.method === 'GET' && file) {
        seen.push({ method: 'GET', path: url.pathname, auth })
        const f = state.inbound[file[2]!]
        if (!f || f.status === 404) return err(404, 100, 'Unsupported get request. Object does not exist.')
        if (f.status) return err(f.status, 2, 'Service temporarily unavailable')
        if (file[1] === 'files') return new Response(f.bytes)
        return Response.json({ messaging_product: 'whatsapp', url: f.url ?? `${url.origin}/files/${file[2]}`, mime_type: 'application/octet-stream', sha256: 'x', file_size: f.bytes!.length, id: file[2] })
      }
      // the account's templates, two to a page; each answer names a next page on another host,
      // which a client must not follow with the token (Capstan asks its own Graph URL with the cursor)
      const listing = /^\/v\d+\.\d+\/(\d+)\/message_templates$/.exec(url.pathname)
      if (req.method === 'GET' && listing) {
        seen.push({ method: 'GET', path: `${url.pathname}${url.search}`, auth })
        if (listing[1] !== WABA) return err(400, 100, 'Unsupported get request. Object with ID does not exist.')
        const at = Number(url.searchParams.get('after') ?? 0)
        if (at / 2 === state.failPage) {
          state.failPage = -1
          return err(500, 1, 'An unknown error occurred')
        }
        const more = at + 2 < state.templates.length
        return Response.json({ data: state.templates.slice(at, at + 2), paging: { cursors: { before: String(at), after: String(at + 2) }, ...(more ? { next: `http://127.0.0.1:9/v21.0/${WABA}/message_templates?after=${at + 2}` } : {}) } })
      }
      const m = /^\/v\d+\.\d+\/(\d+)(\/messages|\/media)?$/.exec(url.pathname)
      if (!m || !Object.hasOwn(state.numbers, m[1]!)) return err(400, 100, 'Unsupported get request. Object does not exist.')
      if (req.method === 'GET' && !m[2]) return Response.json({ display_phone_number: state.numbers[m[1]!], verified_name: 'Acme', id: m[1] })
      if (req.method === 'POST' && m[2] === '/media') {
        const fd = await req.formData()
        const file = fd.get('file') as File
        seen.push({ method: 'POST', path: url.pathname, auth, form: { type: String(fd.get('type')), messaging_product: String(fd.get('messaging_product')), filename: file.name, size: String(file.size) } })
        return Response.json({ id: `media-${seen.length}` })
      }
      if (req.method === 'POST' && m[2] === '/messages') {
        const json = (await req.json()) as { to: string }
        seen.push({ method: 'POST', path: url.pathname, auth, json })
        if (state.throttleNext > 0) {
          state.throttleNext--
          return err(400, 130429, 'Rate limit hit')
        }
        // a template whose header is media is refused without a header file of that kind
        const tplSent = (json as { template?: { name: string; components?: { type: string; parameters?: { type: string }[] }[] } }).template
        const listed = tplSent && (state.templates as any[]).find((t) => t.name === tplSent.name)
        const wantedHeader = listed?.components?.find((c: any) => c.type === 'HEADER' && c.format !== 'TEXT')?.format?.toLowerCase()
        if (wantedHeader && tplSent!.components?.find((c) => c.type === 'header')?.parameters?.[0]?.type !== wantedHeader) return err(400, 132012, 'Parameter format does not match format in the created template', `header: Format mismatch, expected ${wantedHeader.toUpperCase()}, received UNKNOWN`)
        // Meta's caption limit: 1,024 characters on an image, video or document
        const media = (json as Record<string, any>)[(json as { type?: string }).type ?? '']
        if (typeof media?.caption === 'string' && media.caption.length > 1024) return err(400, 100, '(#100) Invalid parameter', 'Param image[\'caption\'] must be at most 1024 characters long.')
        const scripted = state.failFor[json.to]?.shift()
        if (scripted === 500) return err(500, 1, 'An unknown error occurred')
        if (scripted === 131053) return err(400, 131053, 'Media upload error')
        if (scripted === 131056) return err(400, 131056, '(Business Account, Consumer Account) pair rate limit hit', 'Too many messages sent from the sender phone number to the same recipient phone number in a short period of time.')
        if (scripted === 131031) return err(400, 131031, 'Business Account locked', 'The WhatsApp Business Account is restricted for violating policy.')
        if (scripted === 132015) return err(400, 132015, 'Template is paused due to low quality so it cannot be sent in a template message.')
        if (scripted === 131050) return err(400, 131050, 'Unable to deliver the message. This recipient has chosen to stop receiving marketing messages.')
        if (scripted === 'hang') {
          await new Promise<void>((resolve) => hung.push(resolve))
          return err(500, 1, 'An unknown error occurred')
        }
        if (scripted === 'hold') await new Promise<void>((resolve) => held.push(resolve))
        if (scripted === 'reset') return new Response(new ReadableStream({ pull: (c) => c.error() /* the connection breaks mid-answer (no error object: nothing printed) */ }))
        if (json.to === '15550009001') return err(400, 131026, 'Message undeliverable')
        if (json.to === '15550009002') return err(400, 100, '(#100) Invalid parameter', 'Parameter value is not valid: text.body is too long for this message type')
        const wamid = `wamid.${crypto.randomUUID()}`
        seen.at(-1)!.wamid = wamid
        return Response.json({ messaging_product: 'whatsapp', contacts: [{ input: json.to, wa_id: state.waIdFor[json.to] ?? json.to }], messages: [{ id: wamid }] })
      }
      return err(400, 100, 'Unsupported request')
    },
  })
  return {
    base: `http://127.0.0.1:${server.port}`,
    seen,
    state,
    releaseHeld: () => {
      for (const release of held.splice(0)) release()
    },
    stop: () => {
      for (const release of [...hung, ...held]) release()
      server.stop(true)
    },
  }
}

/**
 * `phone` writes to the number (Meta's webhook, no profile name): WhatsApp then takes free-form
 * messages to them for 24 hours — a text or media send to anyone else is refused
 * (outside_service_window). Returns the phone, to be sent to.
 */
async function talking(connId: string, phone: string, base = srv.base) {
  expect((await deliver(base, connId, inboundEvent(phone.replace(/^\+/, ''), 'Hello', ''))).status).toBe(200)
  return phone
}

/**
 * In process: a workspace (`policy`: no gaps unless told) with a Cloud API number on the fake Graph
 * API, known there by `pnid`.
 */
async function cloudNumberInProcess(svc: Services, name: string, pnid: string, policy = { hourly_cap: 1000, daily_cap: 10000, min_gap_seconds: 0, max_gap_seconds: 0 }) {
  const ws = await svc.workspaces.create({ name })
  await svc.workspaces.patch(ws.id, { settings: { sending_policy: policy } })
  const phone = newPhone('+1444')
  graph.state.numbers[pnid] = phone.slice(1)
  const conn = await svc.connections.create(ws.id, { phone, driver: 'cloud_api', config: { phone_number_id: pnid, access_token: TOKEN, app_secret: APP_SECRET, verify_token: VERIFY, graph_base_url: graph.base } })
  return { ws, conn }
}

/** In process: `phone` wrote to the number (as Meta's webhook records it); returns the phone. */
async function wrote(svc: { messages: { inbound(connectionId: string, from: string, body: string): Promise<unknown> } }, connId: string, phone: string) {
  await svc.messages.inbound(connId, phone, 'Hello')
  return phone
}

/** Post a webhook the way Meta does: JSON body signed with the app secret. */
/** Each connection's phone_number_id (see setup): the events helpers below name PNID, delivered as the connection's own. */
const pnidOf = new Map<string, string>()

async function deliver(base: string, connId: string, body: unknown, secret = APP_SECRET) {
  const own = pnidOf.get(connId)
  const raw = own ? JSON.stringify(body).replaceAll(`"phone_number_id":"${PNID}"`, `"phone_number_id":"${own}"`) : JSON.stringify(body)
  const sig = `sha256=${new Bun.CryptoHasher('sha256', secret).update(raw).digest('hex')}`
  return fetch(`${base}/hooks/whatsapp/${connId}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-hub-signature-256': sig }, body: raw })
}

/** A status of a message; `ours` is the biz_opaque_callback_data its send carried (Meta returns it in each status). */
/** Now as Meta stamps its events: Unix seconds, as a string. */
const metaNow = (offsetMs = 0) => String(Math.floor((Date.now() + offsetMs) / 1000))
const statusEvent = (wamid: string, status: string, errors?: unknown[], ours?: string) => ({
  object: 'whatsapp_business_account',
  entry: [{ id: 'WABA', changes: [{ field: 'messages', value: { messaging_product: 'whatsapp', metadata: { display_phone_number: '15550001234', phone_number_id: PNID }, statuses: [{ id: wamid, status, timestamp: metaNow(), recipient_id: '15551234567', ...(errors ? { errors } : {}), ...(ours ? { biz_opaque_callback_data: ours } : {}) }] } }] }],
})
const inboundEvent = (from: string, text: string, profileName = 'Ada') => ({
  object: 'whatsapp_business_account',
  entry: [{ id: 'WABA', changes: [{ field: 'messages', value: { messaging_product: 'whatsapp', metadata: { phone_number_id: PNID }, contacts: [{ profile: { name: profileName }, wa_id: from }], messages: [{ from, id: `wamid.in-${crypto.randomUUID()}`, timestamp: metaNow(), type: 'text', text: { body: text } }] } }] }],
})

/** A person's marketing preference as Meta reports it (the user_preferences field). */
const preferenceEvent = (waId: string, value: string, category = 'marketing_messages') => ({
  object: 'whatsapp_business_account',
  entry: [{ id: 'WABA', changes: [{ field: 'user_preferences', value: { messaging_product: 'whatsapp', metadata: { phone_number_id: PNID }, contacts: [{ profile: { name: 'Ann' }, wa_id: waId }], user_preferences: [{ wa_id: waId, detail: 'User requested to stop marketing messages', category, value, timestamp: Number(metaNow()) }] } }] }],
})

let graph: ReturnType<typeof fakeGraph>
let srv: TestServer
let close: () => Promise<void>
beforeAll(async () => {
  graph = fakeGraph()
  ;({ srv, close } = await scanningServer())
})
afterAll(async () => {
  await close()
  graph.stop()
})

let pnids = 0

/** A workspace with a key and a Cloud API number on the fake Graph API (on `on`, the shared server unless given). */
async function setup(config: Record<string, unknown> = {}, on: TestServer = srv) {
  const t = await on.tenant()
  await on.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { hourly_cap: 1000, daily_cap: 10000, min_gap_seconds: 0, max_gap_seconds: 0 } } })
  // a number of its own at Meta: one connection per phone_number_id
  const phone = newPhone('+1444')
  const pnid = String(200_000_000_000 + ++pnids)
  graph.state.numbers[pnid] = phone.slice(1)
  const r = await on.admin('POST', `/workspaces/${t.ws.id}/connections`, {
    phone,
    driver: 'cloud_api',
    config: { phone_number_id: pnid, access_token: TOKEN, app_secret: APP_SECRET, verify_token: VERIFY, graph_base_url: graph.base, graph_version: 'v21.0', ...config },
  })
  if (r.json.data?.id) pnidOf.set(r.json.data.id, (config.phone_number_id as string | undefined) ?? pnid)
  return { ...t, conn: r.json.data, created: r, pnid }
}

const msg = (key: string, id: string, on: TestServer = srv) => on.api(key, 'GET', `/messages/${id}`).then((r) => r.json.data)

/**
 * Send a text (through `on`, the shared server unless given) that Meta reads and then does not
 * answer: its connection breaks (`reset`, the answer lost) or no answer comes (`hang`). Resolves
 * once Meta has it.
 */
async function sendLosingAnswer(key: string, connectionId: string, { on = srv, fate = 'reset' }: { on?: TestServer; fate?: 'reset' | 'hang' } = {}) {
  const to = newPhone()
  graph.state.failFor[to.slice(1)] = [fate]
  const r = await on.api(key, 'POST', '/messages', { json: { connection_id: connectionId, recipient: await talking(connectionId, to, on.base), body: 'Your order shipped' } })
  expect(r.status).toBe(202)
  await waitFor(() => graph.seen.some((s) => s.json?.to === to.slice(1)))
  return { id: r.json.data.id as string, to }
}

/** The wamid Meta returned for a message we sent (stored as its external id; statuses and replies refer to it). */
function wamidOf(messageId: string): string {
  const d = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
  try {
    return (d.query('SELECT external_id FROM messages WHERE id = ?').get(messageId) as { external_id: string }).external_id
  } finally {
    d.close()
  }
}

/** Upload a file through POST /media; its media id. */
async function uploadMedia(key: string, name: string, bytes: Uint8Array): Promise<string> {
  const fd = new FormData()
  fd.set('file', new File([bytes], name))
  return (await srv.api(key, 'POST', '/media', { multipart: fd })).json.data.id
}

describe('connecting a number', () => {
  test('config is validated; secrets are never returned, logged or stored in clear', async () => {
    const ws = await srv.workspace()
    const bad = await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone(), driver: 'cloud_api', config: { phone_number_id: 'abc', graph_base_url: 'ftp://x', confirm_wait_seconds: 3601 } })
    expect(Object.keys(bad.json.errors).sort()).toEqual(['config.access_token', 'config.app_secret', 'config.confirm_wait_seconds', 'config.graph_base_url', 'config.phone_number_id', 'config.verify_token'])
    const { conn, created, pnid } = await setup()
    expect(created.status).toBe(201)
    expect(conn).toMatchObject({ driver: 'cloud_api', status: 'online', status_reason: null })
    expect(conn.config).toMatchObject({ phone_number_id: pnid, access_token: '(set)', app_secret: '(set)', verify_token: '(set)', graph_base_url: graph.base, confirm_wait_seconds: 300 })
    const listed = await srv.admin('GET', `/connections/${conn.id}`)
    expect(listed.text).not.toContain(TOKEN)
    expect(listed.text).not.toContain(APP_SECRET)
    await Bun.sleep(100)
    expect(srv.output).not.toContain(TOKEN)
    const walk = (d: string): string[] => readdirSync(d).flatMap((f) => (statSync(join(d, f)).isDirectory() ? walk(join(d, f)) : [join(d, f)]))
    for (const f of walk(srv.dataDir)) {
      const content = readFileSync(f)
      expect(content.includes(TOKEN)).toBe(false)
      expect(content.includes(APP_SECRET)).toBe(false)
      expect(content.includes(VERIFY)).toBe(false)
    }
  })

  test('a number added without a Graph API version uses v26.0 (v21.0 stops in January 2027); changing its graph_version moves its calls', async () => {
    const { key, conn, pnid } = await setup({ graph_version: undefined })
    expect(conn.config.graph_version).toBe('v26.0')
    const paths = () => graph.seen.filter((x) => x.method === 'POST' && x.path.endsWith('/messages') && x.json?.text?.body === 'which version').map((x) => x.path)
    const send = async () => {
      const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, newPhone()), body: 'which version' } })
      await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    }
    await send()
    expect(paths()).toEqual([`/v26.0/${pnid}/messages`])
    const changed = await srv.admin('PATCH', `/connections/${conn.id}`, { config: { graph_version: 'v25.0' } })
    expect(changed.json.data.config.graph_version).toBe('v25.0')
    await send()
    expect(paths()).toEqual([`/v26.0/${pnid}/messages`, `/v25.0/${pnid}/messages`])
  })

  test('a Graph API answer that redirects is not followed: the access token goes nowhere else', async () => {
    const seen: string[] = []
    const elsewhere = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: (req) => (seen.push(req.headers.get('authorization') ?? ''), Response.json({ id: PNID })) })
    const redirector = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: (req) => Response.redirect(`http://127.0.0.1:${elsewhere.port}${new URL(req.url).pathname}`, 307) })
    try {
      const { conn } = await setup({ graph_base_url: `http://127.0.0.1:${redirector.port}` })
      expect(conn.status).toBe('offline')
      expect(seen).toEqual([])
    } finally {
      redirector.stop(true)
      elsewhere.stop(true)
    }
  })

  test('a rejected token or an unknown number id leaves the number offline with the reason', async () => {
    const a = await setup({ access_token: 'EAAG-wrong-token' })
    expect(a.conn).toMatchObject({ status: 'offline' })
    expect(a.conn.status_reason).toContain('rejected the access token')
    const b = await setup({ phone_number_id: '555000111' })
    expect(b.conn.status).toBe('offline')
    expect(b.conn.status_reason).toContain('not registered')
    const fixed = await srv.admin('PATCH', `/connections/${a.conn.id}`, { config: { access_token: TOKEN }, status: 'online' })
    expect(fixed.json.data).toMatchObject({ status: 'online', status_reason: null })
  })

  test('groups are reported as unsupported for a Cloud API number', async () => {
    const { key, conn } = await setup()
    const numbers = (await srv.api(key, 'POST', '/groups/sync')).json.data.numbers
    expect(numbers).toEqual([{ number: conn.phone, status: 'unsupported', groups: null, error: 'This network cannot report groups.' }])
  })
})

/** A template as Meta's GET /{waba id}/message_templates lists it. */
const metaTemplate = (name: string, language: string, components: unknown[], more: Record<string, unknown> = {}) => ({ name, language, status: 'APPROVED', category: 'UTILITY', parameter_format: 'POSITIONAL', components, id: String(Math.floor(Math.random() * 1e15)), ...more })
const metaBody = (text: string) => ({ type: 'BODY', text })

describe('importing templates from Meta', () => {
  const catalogue = () => [
    metaTemplate('order_shipped', 'en_US', [
      { type: 'HEADER', format: 'TEXT', text: 'Order {{1}}' },
      metaBody('Hi {{1}}, your order {{2}} has shipped.'),
      { type: 'FOOTER', text: 'Acme' },
      { type: 'BUTTONS', buttons: [{ type: 'QUICK_REPLY', text: 'Stop' }, { type: 'URL', text: 'Track', url: 'https://shop.example/track/{{1}}' }] },
    ]),
    metaTemplate('spring_sale', 'es', [{ type: 'HEADER', format: 'IMAGE' }, metaBody('¡Hola! Usa el código {{1}}.')], { category: 'MARKETING' }),
    metaTemplate('welcome', 'en', [metaBody('Welcome to Acme!'), { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Shop', url: 'https://shop.example/' }, { type: 'PHONE_NUMBER', text: 'Call', phone_number: '+15550001234' }] }]),
    metaTemplate('pending_one', 'en', [metaBody('Soon')], { status: 'PENDING' }),
    metaTemplate('login_code', 'en', [metaBody('{{1}} is your code.')], { category: 'AUTHENTICATION' }),
    metaTemplate('autumn_sale', 'en', [{ type: 'HEADER', format: 'TEXT', text: '{{sale_name}} is here' }, metaBody('Hi {{first_name}}, use {{code}} at checkout, {{first_name}}!')], { parameter_format: 'NAMED', category: 'MARKETING' }),
    metaTemplate('coupon', 'en', [metaBody('Take {{1}} off'), { type: 'BUTTONS', buttons: [{ type: 'COPY_CODE', example: 'SAVE10' }] }], { category: 'MARKETING' }),
    metaTemplate('swapped', 'en', [metaBody('Order {{2}} for {{1}}')]),
    metaTemplate('store_visit', 'en', [{ type: 'HEADER', format: 'LOCATION' }, metaBody('See you at the store')]),
    metaTemplate('already_linked', 'en_US', [metaBody('Hello {{1}}')]),
  ]

  test('approved templates become the workspace’s templates, variables numbered for header and buttons; the rest are listed with the reason; a second import creates nothing', async () => {
    graph.state.templates = catalogue()
    const { key, ws, conn } = await setup({ waba_id: WABA })
    expect(conn.config.waba_id).toBe(WABA)
    const linked = (await srv.api(key, 'POST', '/templates', { json: { name: 'Mine', body: 'Hello {{name}}', whatsapp: { name: 'already_linked', language: 'en_US' } } })).json.data
    const before = graph.seen.length
    const r = await srv.admin('POST', `/connections/${conn.id}/import-templates`)
    expect(r.status).toBe(200)
    // five pages of two, each asked for at this number's Graph URL with the cursor (not the answer's "next" address)
    const asked = graph.seen.slice(before).map((x) => x.path)
    expect(asked.map((p) => new URLSearchParams(p.split('?')[1]).get('after'))).toEqual([null, '2', '4', '6', '8'])
    expect(asked.every((p) => p.startsWith(`/v21.0/${WABA}/message_templates?`))).toBe(true)
    expect(graph.seen.slice(before).every((x) => x.auth === `Bearer ${TOKEN}`)).toBe(true)
    const { created, existing, skipped } = r.json.data
    expect(created.map((t: any) => [t.name, t.body, t.category, t.variables, t.whatsapp])).toEqual([
      ['order_shipped (en_US)', 'Hi {{1}}, your order {{2}} has shipped.', 'utility', ['1', '2', '3', '4'], { name: 'order_shipped', language: 'en_US', header_text: '{{3}}', url_buttons: [{ index: 1, value: '{{4}}' }], parameter_names: null, header_parameter_name: null, header_media: null }],
      ['spring_sale (es)', '¡Hola! Usa el código {{1}}.', 'marketing', ['1'], { name: 'spring_sale', language: 'es', header_text: null, url_buttons: [], parameter_names: null, header_parameter_name: null, header_media: 'image' }],
      ['welcome (en)', 'Welcome to Acme!', 'utility', [], { name: 'welcome', language: 'en', header_text: null, url_buttons: [], parameter_names: null, header_parameter_name: null, header_media: null }],
      // named parameters: numbered in order of first appearance, each name kept to be sent with its value
      ['autumn_sale (en)', 'Hi {{1}}, use {{2}} at checkout, {{1}}!', 'marketing', ['1', '2', '3'], { name: 'autumn_sale', language: 'en', header_text: '{{3}}', url_buttons: [], parameter_names: ['first_name', 'code'], header_parameter_name: 'sale_name', header_media: null }],
    ])
    expect(existing.map((t: any) => t.id)).toEqual([linked.id])
    expect(skipped).toEqual([
      { name: 'pending_one', language: 'en', reason: 'Meta has not approved it (status PENDING).' },
      { name: 'login_code', language: 'en', reason: 'Authentication templates (one-time passcodes) are not supported.' },
      { name: 'coupon', language: 'en', reason: 'Its copy-code button is not supported.' },
      { name: 'swapped', language: 'en', reason: 'Its variables do not first appear in the order {{1}}, {{2}}, …; create this template by hand (see "WhatsApp templates" in docs/templates-and-campaigns.md).' },
      { name: 'store_visit', language: 'en', reason: 'Its location header is not supported.' },
    ])
    // they are the workspace's templates like any other; the linked one was left as it was
    const listed = (await srv.api(key, 'GET', '/templates?per_page=100')).json.data
    expect(listed.map((t: any) => t.id).sort()).toEqual([linked.id, ...created.map((t: any) => t.id)].sort())
    expect(listed.find((t: any) => t.id === linked.id).body).toBe('Hello {{name}}')
    // audited, naming the number
    const audit = (await srv.admin('GET', `/workspaces/${ws.id}/audit-log`)).json.data
    expect(audit[0]).toMatchObject({ action: 'templates.imported', subject_id: conn.id })
    // a second import finds them all
    const again = (await srv.admin('POST', `/connections/${conn.id}/import-templates`)).json.data
    expect([again.created, again.existing.length, again.skipped.length]).toEqual([[], 5, 5])
    expect((await srv.api(key, 'GET', '/templates')).json.meta.total).toBe(5)
    // another workspace's number imports into that workspace only
    const other = await setup({ waba_id: WABA })
    expect((await srv.admin('POST', `/connections/${other.conn.id}/import-templates`)).json.data.created).toHaveLength(5)
    expect((await srv.api(key, 'GET', '/templates')).json.meta.total).toBe(5)
  })

  test('importing again brings a template still as imported up to Meta’s changed text; one edited here, or made by hand, is left as it is', async () => {
    graph.state.templates = catalogue()
    const { key, conn } = await setup({ waba_id: WABA })
    const handMade = (await srv.api(key, 'POST', '/templates', { json: { name: 'Mine', body: 'Hello {{name}}', whatsapp: { name: 'already_linked', language: 'en_US' } } })).json.data
    const first = (await srv.admin('POST', `/connections/${conn.id}/import-templates`)).json.data
    const byName = (name: string) => first.created.find((t: any) => t.whatsapp.name === name)
    const [shipped, welcome, sale] = [byName('order_shipped'), byName('welcome'), byName('spring_sale')]
    // renamed here (the text as imported), and edited here
    await srv.api(key, 'PUT', `/templates/${shipped.id}`, { json: { name: 'Shipping update' } })
    await srv.api(key, 'PUT', `/templates/${welcome.id}`, { json: { body: 'Welcome to Acme, {{name}}!' } })
    // Meta's text changes for three of them; the sale stays as it was
    const changed = catalogue().map((t) => {
      if (t.name === 'order_shipped') return { ...t, components: [metaBody('Hi {{1}}, order {{2}} is on its way.'), { type: 'BUTTONS', buttons: [{ type: 'URL', text: 'Track', url: 'https://shop.example/t/{{1}}' }] }] }
      if (t.name === 'welcome') return { ...t, components: [metaBody('Welcome to Acme, friend!')] }
      if (t.name === 'already_linked') return { ...t, components: [metaBody('Hello there {{1}}')] }
      return t
    })
    graph.state.templates = changed
    const second = (await srv.admin('POST', `/connections/${conn.id}/import-templates`)).json.data
    expect(second.created).toEqual([])
    expect(second.updated.map((t: any) => [t.id, t.name, t.body, t.variables, t.whatsapp])).toEqual([
      [shipped.id, 'Shipping update', 'Hi {{1}}, order {{2}} is on its way.', ['1', '2', '3'], { name: 'order_shipped', language: 'en_US', header_text: null, url_buttons: [{ index: 0, value: '{{3}}' }], parameter_names: null, header_parameter_name: null, header_media: null }],
    ])
    expect(second.existing.map((t: any) => t.id).sort()).toEqual([sale.id, byName('autumn_sale').id, handMade.id].sort())
    expect(second.skipped.find((t: any) => t.name === 'welcome')).toEqual({
      name: 'welcome',
      language: 'en',
      reason: `Meta's template has changed since it was imported, and template ${welcome.id} was edited here since: it was left as it is; edit it to match.`,
    })
    const now = async (id: string) => (await srv.api(key, 'GET', `/templates/${id}`)).json.data
    expect((await now(welcome.id)).body).toBe('Welcome to Acme, {{name}}!')
    expect((await now(handMade.id)).body).toBe('Hello {{name}}')
    expect((await now(shipped.id)).body).toBe('Hi {{1}}, order {{2}} is on its way.')
    // the updated one sends as Meta has it now
    const to = newPhone()
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, template_id: shipped.id, variables: { '1': 'Ann', '2': 'A-7', '3': 'A-7' } } })
    expect(r.status).toBe(202)
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    expect(graph.seen.filter((x) => x.json?.to === to.slice(1)).at(-1)!.json.template.components).toEqual([
      { type: 'body', parameters: [{ type: 'text', text: 'Ann' }, { type: 'text', text: 'A-7' }] },
      { type: 'button', sub_type: 'url', index: '0', parameters: [{ type: 'text', text: 'A-7' }] },
    ])
    // edited to match Meta's text again: taken as imported, and kept up to date from then on
    await srv.api(key, 'PUT', `/templates/${welcome.id}`, { json: { body: 'Welcome to Acme, friend!' } })
    const third = (await srv.admin('POST', `/connections/${conn.id}/import-templates`)).json.data
    expect([third.updated, third.existing.map((t: any) => t.id).includes(welcome.id)]).toEqual([[], true])
    graph.state.templates = changed.map((t) => (t.name === 'welcome' ? { ...t, components: [metaBody('Welcome back to Acme!')] } : t))
    const fourth = (await srv.admin('POST', `/connections/${conn.id}/import-templates`)).json.data
    expect(fourth.updated.map((t: any) => [t.id, t.body])).toEqual([[welcome.id, 'Welcome back to Acme!']])
  })

  test('an imported template sends as Meta approved it: header, body and URL button values in place', async () => {
    graph.state.templates = catalogue()
    const { key, conn } = await setup({ waba_id: WABA })
    const created = (await srv.admin('POST', `/connections/${conn.id}/import-templates`)).json.data.created
    const shipped = created.find((t: any) => t.whatsapp.name === 'order_shipped')
    const to = newPhone()
    const missing = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, template_id: shipped.id, variables: { '1': 'Ann', '2': 'A-1001', '3': 'A-1001' } } })
    expect([missing.status, missing.json.errors]).toEqual([422, { variables: ['Values are needed for the numbered placeholders {{4}}.'] }])
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, template_id: shipped.id, variables: { '1': 'Ann', '2': 'A-1001', '3': 'A-1001', '4': 'A-1001?ref=wa' } } })
    expect(r.status).toBe(202)
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    expect(graph.seen.filter((x) => x.json?.to === to.slice(1)).map((x) => x.json.template)).toEqual([
      {
        name: 'order_shipped',
        language: { code: 'en_US' },
        components: [
          { type: 'header', parameters: [{ type: 'text', text: 'A-1001' }] },
          { type: 'body', parameters: [{ type: 'text', text: 'Ann' }, { type: 'text', text: 'A-1001' }] },
          { type: 'button', sub_type: 'url', index: '1', parameters: [{ type: 'text', text: 'A-1001?ref=wa' }] },
        ],
      },
    ])
    expect((await msg(key, r.json.data.id)).body).toBe('Hi Ann, your order A-1001 has shipped.')
    // named parameters go out with their names
    const sale = created.find((t: any) => t.whatsapp.name === 'autumn_sale')
    await srv.api(key, 'POST', '/contacts', { json: { phone: to, consent_status: 'opted_in' } })
    const named = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, template_id: sale.id, variables: { '1': 'Ann', '2': 'FALL10', '3': 'Autumn sale' } } })
    expect(named.status).toBe(202)
    await waitFor(async () => (await msg(key, named.json.data.id)).status === 'sent')
    expect(graph.seen.filter((x) => x.json?.to === to.slice(1)).at(-1)!.json.template.components).toEqual([
      { type: 'header', parameters: [{ type: 'text', parameter_name: 'sale_name', text: 'Autumn sale' }] },
      { type: 'body', parameters: [{ type: 'text', parameter_name: 'first_name', text: 'Ann' }, { type: 'text', parameter_name: 'code', text: 'FALL10' }] },
    ])
    expect((await msg(key, named.json.data.id)).body).toBe('Hi Ann, use FALL10 at checkout, Ann!')
  })

  test('capstan connections import-templates prints what it created, kept and skipped', async () => {
    graph.state.templates = catalogue().slice(2, 4)
    const { conn } = await setup({ waba_id: WABA })
    const p = Bun.spawn(['bun', 'src/main.ts', 'connections', 'import-templates', conn.id], { cwd: join(import.meta.dir, '..'), env: { ...hostEnv(), CAPSTAN_URL: srv.base, CAPSTAN_ADMIN_TOKEN: ADMIN_TOKEN }, stdout: 'pipe', stderr: 'pipe' })
    const out = await new Response(p.stdout).text()
    expect(await p.exited).toBe(0)
    const id = (await srv.api((await srv.key(conn.workspace_id)).key, 'GET', '/templates')).json.data[0].id
    expect(out).toBe(`created 1, updated 0, already there 0, skipped 1\n  created  ${id}  welcome (en)\n  skipped  pending_one (en): Meta has not approved it (status PENDING).\n`)
  })

  test('refusals change nothing: no account id, a number without templates, an unknown account, Meta failing, an unknown number, no admin token', async () => {
    graph.state.templates = catalogue()
    const bad = await srv.admin('POST', `/workspaces/${(await srv.workspace()).id}/connections`, { phone: newPhone(), driver: 'cloud_api', config: { phone_number_id: PNID, access_token: TOKEN, app_secret: APP_SECRET, verify_token: VERIFY, graph_base_url: graph.base, waba_id: 'WABA-1' } })
    expect([bad.status, bad.json.errors]).toEqual([422, { 'config.waba_id': ['The config.waba_id field must be the numeric WhatsApp Business Account id from Meta.'] }])
    const { key, ws, conn } = await setup()
    const importing = () => srv.admin('POST', `/connections/${conn.id}/import-templates`)
    expect((await importing()).json).toEqual({ message: 'Set config.waba_id, the WhatsApp Business Account id, to import its templates.', code: 'waba_id_missing' })
    await srv.admin('PATCH', `/connections/${conn.id}`, { config: { waba_id: '999999999' } })
    const unknown = await importing()
    expect([unknown.status, unknown.json.code]).toEqual([422, 'cloud_api_100'])
    expect((await srv.admin('PATCH', `/connections/${conn.id}`, { config: { waba_id: WABA } })).json.data.config.waba_id).toBe(WABA)
    // Meta failing on a later page: nothing of the earlier pages is imported either
    graph.state.failPage = 3
    const down = await importing()
    expect([down.status, down.json.code, down.json.message]).toEqual([502, 'network_error', 'The network could not list the templates: The Cloud API failed: An unknown error occurred'])
    expect((await srv.api(key, 'GET', '/templates')).json.meta.total).toBe(0)
    const sandbox = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone(), driver: 'sandbox' })).json.data
    const none = await srv.admin('POST', `/connections/${sandbox.id}/import-templates`)
    expect([none.status, none.json]).toEqual([422, { message: 'This number’s network has no templates to import.', code: 'templates_not_supported' }])
    expect((await srv.admin('POST', '/connections/01a1ff63-0299-755f-b4eb-ab8401901800/import-templates')).status).toBe(404)
    expect((await srv.request('POST', `/admin/api/connections/${conn.id}/import-templates`, { bearer: key })).status).toBe(401)
    expect((await srv.api(key, 'GET', '/templates')).json.meta.total).toBe(0)
    // removing the account id: null
    expect((await srv.admin('PATCH', `/connections/${conn.id}`, { config: { waba_id: null } })).json.data.config.waba_id).toBeUndefined()
    expect((await importing()).json.code).toBe('waba_id_missing')
  })
})

describe('sending', () => {
  test('text goes out as a Cloud API text message; the wamid is the external id', async () => {
    const { key, conn, pnid } = await setup()
    const to = newPhone()
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to), body: 'Your order shipped' } })
    const sent = await waitFor(async () => ((await msg(key, r.json.data.id)).status === 'sent' ? msg(key, r.json.data.id) : null))
    const call = graph.seen.filter((s) => s.json?.to === to.slice(1))
    expect(call).toHaveLength(1)
    expect(call[0]).toMatchObject({ path: `/v21.0/${pnid}/messages`, auth: `Bearer ${TOKEN}`, json: { messaging_product: 'whatsapp', recipient_type: 'individual', to: to.slice(1), type: 'text', text: { body: 'Your order shipped' }, biz_opaque_callback_data: r.json.data.id } })
    expect(sent.outcome.state).toBe('sent')
  })

  test('free-form messages go only to people who wrote to the number in the last 24 hours (by Meta\'s time); others get a template or a 422 outside_service_window', async () => {
    const { ws, key, conn } = await setup()
    const to = newPhone()
    const text = () => srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, body: 'Your order shipped' } })
    const before = (await srv.api(key, 'GET', '/messages?per_page=1')).json.meta.total
    const refused = await text()
    expect([refused.status, refused.json.code, refused.json.message]).toEqual([422, 'outside_service_window', 'The recipient has not written to this number in the last 24 hours: WhatsApp delivers only template messages then. Send a template linked to an approved WhatsApp template (template_id).'])
    // nothing was written: no message, no contact
    expect((await srv.api(key, 'GET', '/messages?per_page=1')).json.meta.total).toBe(before)
    expect((await srv.api(key, 'GET', `/contacts?phone=${encodeURIComponent(to)}`)).json.data).toEqual([])
    // a template linked to Meta's goes out (Meta opens the conversation with it)
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Shipped', body: 'Your order {{1}} shipped.', whatsapp: { name: 'order_shipped', language: 'en' } } })).json.data
    expect((await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, template_id: tpl.id, variables: { '1': 'A-5' } } })).status).toBe(202)
    // a message written 25 hours ago (its webhook arriving late) opens no window
    const old = inboundEvent(to.slice(1), 'Where is my order?', '')
    old.entry[0]!.changes[0]!.value.messages[0]!.timestamp = metaNow(-25 * 3600_000)
    expect((await deliver(srv.base, conn.id, old)).status).toBe(200)
    expect((await text()).json.code).toBe('outside_service_window')
    // one written now does: text and media go out
    expect((await deliver(srv.base, conn.id, inboundEvent(to.slice(1), 'Hello?', ''))).status).toBe(200)
    const r = await text()
    expect(r.status).toBe(202)
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    // the window is per number: another number has none with this person
    const other = await setup()
    const elsewhere = await srv.api(other.key, 'POST', '/messages', { json: { connection_id: other.conn.id, recipient: to, body: 'x' } })
    expect(elsewhere.json.code).toBe('outside_service_window')
    // erasing the person forgets when they wrote
    expect((await srv.admin('POST', `/workspaces/${ws.id}/contacts/erase`, { phone: to })).status).toBe(200)
    expect((await text()).json.code).toBe('outside_service_window')
  })

  test('a WebP goes as a sticker only when WhatsApp takes it as one (512×512, small); a WebP photo goes as a document', async () => {
    const { key, conn } = await setup()
    const sticker = await uploadMedia(key, 'thumbs-up.webp', files.webp(512, 512, { size: 30_000 }))
    const photo = await uploadMedia(key, 'shop-front.webp', files.webp(1600, 1200, { size: 300_000 }))
    const heavy = await uploadMedia(key, 'big-sticker.webp', files.webp(512, 512, { size: 150_000 }))
    const moving = await uploadMedia(key, 'wave.webp', files.webp(512, 512, { animated: true, size: 300_000 }))
    const to = await talking(conn.id, newPhone())
    const sent: Record<string, unknown>[] = []
    for (const media_id of [sticker, photo, heavy, moving]) {
      const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, media: { attachments: [{ media_id }] } } })
      expect(r.status).toBe(202)
      await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
      const { messaging_product, recipient_type, to: _to, biz_opaque_callback_data, ...rest } = graph.seen.filter((x) => x.json?.to === to.slice(1)).at(-1)!.json
      sent.push(rest)
    }
    const id = expect.stringMatching(/^media-/)
    expect(sent).toEqual([
      { type: 'sticker', sticker: { id } },
      { type: 'document', document: { id, filename: 'shop-front.webp' } },
      { type: 'document', document: { id, filename: 'big-sticker.webp' } },
      { type: 'sticker', sticker: { id } },
    ])
  })

  test("a file larger than WhatsApp takes of its kind (an image over 5 MB) is refused at 422 on a Cloud API number, not accepted to fail at Meta's upload", async () => {
    const { key, conn } = await setup()
    const big = await uploadMedia(key, 'poster.png', Buffer.concat([files.png(), Buffer.alloc(5 * 1024 * 1024 - 68)])) // 5 MB and a byte
    const small = await uploadMedia(key, 'poster-small.png', files.png())
    const to = await talking(conn.id, newPhone())
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, body: 'Our poster', media: { attachments: [{ media_id: small }, { media_id: big }] } } })
    expect([r.status, r.json.errors]).toEqual([422, { 'media.attachments': ["This number's network takes images up to 5 MB; poster.png is 5,242,881 bytes."] }])
    // the same file goes through a sandbox number (no such limit), and as a document it would fit Meta's 100 MB
    const sandbox = (await srv.admin('POST', `/workspaces/${conn.workspace_id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
    expect((await srv.api(key, 'POST', '/messages', { json: { connection_id: sandbox.id, recipient: to, media: { attachments: [{ media_id: big }] } } })).status).toBe(202)
    // a campaign on the Cloud API number is not scheduled with it
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Poster', body: 'New poster' } })).json.data
    const c = (await srv.api(key, 'POST', '/campaigns', { json: { name: 'Poster', template_id: tpl.id, connection_id: conn.id, media_id: big } })).json.data
    const scheduled = await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })
    expect([scheduled.status, scheduled.json.errors]).toEqual([422, { media_id: ["This campaign's number takes images up to 5 MB; poster.png is 5,242,881 bytes."] }])
  })

  test('a campaign whose template names a WhatsApp template sends it as a template message, filled per recipient', async () => {
    const { key, conn } = await setup()
    const people = [
      { phone: newPhone(), name: 'Ann', metadata: { day: 'Friday' } },
      { phone: newPhone(), name: 'Ben', metadata: {} },
      { phone: newPhone(), name: 'Cy', metadata: { day: 'Friday\n(after  5 pm)' } },
    ]
    for (const p of people) expect((await srv.api(key, 'POST', '/contacts', { json: { ...p, consent_status: 'opted_in' } })).status).toBe(201)
    const run = async (template: Record<string, unknown>) => {
      const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Ships', body: 'Hi {{name}}, order {{1}} ships {{metadata.day}}. Thanks {{name}}!', ...template } })).json.data
      const c = (await srv.api(key, 'POST', '/campaigns', { json: { name: 'Shipping', template_id: tpl.id, connection_id: conn.id, variables: { '1': 'A-1001' } } })).json.data
      expect((await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })).status).toBe(200)
      await waitFor(async () => (await srv.api(key, 'GET', `/campaigns/${c.id}`)).json.data.status === 'completed')
      const recipients = (await srv.api(key, 'GET', `/campaigns/${c.id}/recipients`)).json.data
      return { sent: people.map((p) => graph.seen.filter((x) => x.json?.to === p.phone.slice(1)).at(-1)?.json), recipients }
    }
    // named placeholders fill the template's {{1}}, {{2}}, ... in order of first appearance
    const { sent: [ann, ben, cy], recipients } = await run({ whatsapp: { name: 'order_ships', language: 'en_US' } })
    const body = (...texts: string[]) => ({ components: [{ type: 'body', parameters: texts.map((text) => ({ type: 'text', text })) }] })
    const idOf = new Map((await srv.api(key, 'GET', '/messages?per_page=2')).json.data.map((m: any) => [m.recipient, m.id]))
    expect(ann).toEqual({ messaging_product: 'whatsapp', recipient_type: 'individual', to: people[0]!.phone.slice(1), type: 'template', template: { name: 'order_ships', language: { code: 'en_US' }, ...body('Ann', 'A-1001', 'Friday') }, biz_opaque_callback_data: idOf.get(people[0]!.phone) })
    // WhatsApp refuses a parameter with a line break or a run of spaces: it goes out on one line
    expect(cy.template).toEqual({ name: 'order_ships', language: { code: 'en_US' }, ...body('Cy', 'A-1001', 'Friday (after 5 pm)') })
    expect(cy.biz_opaque_callback_data).toBe(idOf.get(people[2]!.phone))
    // ... and an empty one: Ben has no day, so he is skipped instead of sent a message Meta refuses
    expect(ben).toBeUndefined()
    expect(recipients.find((r: any) => r.phone === people[1]!.phone)).toMatchObject({ status: 'skipped', skipped_reason: 'missing_value', message_id: null })
    // the log keeps the rendered text
    const logged = (await srv.api(key, 'GET', '/messages?per_page=2')).json.data.map((m: any) => m.body).sort()
    expect(logged).toEqual(['Hi Ann, order A-1001 ships Friday. Thanks Ann!', 'Hi Cy, order A-1001 ships Friday\n(after  5 pm). Thanks Cy!'])
    // a template without one goes out as text, as before (a value a contact lacks renders empty) —
    // to those who wrote to the number in the last 24 hours: WhatsApp takes no free-form text
    // to anyone else, so Cy, who never wrote, is skipped
    await talking(conn.id, people[0]!.phone)
    await talking(conn.id, people[1]!.phone)
    const { sent: plain, recipients: plainRecipients } = await run({})
    expect(plain[0]).toMatchObject({ type: 'text', text: { body: 'Hi Ann, order A-1001 ships Friday. Thanks Ann!' } })
    expect(plain[1]).toMatchObject({ type: 'text', text: { body: 'Hi Ben, order A-1001 ships . Thanks Ben!' } })
    expect(plain[0].template).toBeUndefined()
    expect(plainRecipients.find((r: any) => r.phone === people[2]!.phone)).toMatchObject({ status: 'skipped', skipped_reason: 'outside_service_window', message_id: null })
  })

  test('a campaign whose WhatsApp template Meta refuses as such pauses (template_refused) instead of failing every recipient; resumed, it goes on', async () => {
    const { ws, key, conn } = await setup()
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 1000, daily_cap: 10000, min_gap_seconds: 1, max_gap_seconds: 1 } } })
    const people = [newPhone(), newPhone(), newPhone()]
    for (const phone of people) await srv.api(key, 'POST', '/contacts', { json: { phone, name: 'Kim', consent_status: 'opted_in', metadata: { promo: 'paused-template' } } })
    graph.state.failFor[people[0]!.slice(1)] = [132015] // Meta paused the template for low quality
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Promo', body: 'Hi {{name}}!', whatsapp: { name: 'promo_low_quality', language: 'en' } } })).json.data
    const c = (await srv.api(key, 'POST', '/campaigns', { json: { name: 'Promo', template_id: tpl.id, connection_id: conn.id, audience: { metadata: { promo: 'paused-template' } } } })).json.data
    expect((await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })).status).toBe(200)
    const paused = await waitFor(async () => {
      const now = (await srv.api(key, 'GET', `/campaigns/${c.id}`)).json.data
      return now.status === 'paused' ? now : null
    })
    expect(paused.paused_reason).toBe('template_refused')
    await Bun.sleep(2500) // past two more release gaps: nothing else goes out
    const posted = () => people.map((p) => graph.seen.filter((x) => x.json?.to === p.slice(1)).length)
    expect(posted()).toEqual([1, 0, 0])
    const recipients = (await srv.api(key, 'GET', `/campaigns/${c.id}/recipients`)).json.data
    expect(recipients.map((r: any) => r.status)).toEqual(['failed', 'pending', 'pending'])
    // the operator fixed the template at Meta: resumed, it reaches the others
    expect((await srv.api(key, 'POST', `/campaigns/${c.id}/resume`, { json: {} })).status).toBe(200)
    await waitFor(async () => (await srv.api(key, 'GET', `/campaigns/${c.id}`)).json.data.status === 'completed')
    expect(posted()).toEqual([1, 1, 1])
  }, 30_000)

  test('a template refusal Meta reports in a status webhook pauses the campaign too', async () => {
    const { ws, key, conn } = await setup()
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 1000, daily_cap: 10000, min_gap_seconds: 4, max_gap_seconds: 4 } } })
    const people = [newPhone(), newPhone()]
    for (const phone of people) await srv.api(key, 'POST', '/contacts', { json: { phone, name: 'Lee', consent_status: 'opted_in', metadata: { promo: 'disabled-later' } } })
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Promo', body: 'Hi {{name}}!', whatsapp: { name: 'promo_disabled', language: 'en' } } })).json.data
    const c = (await srv.api(key, 'POST', '/campaigns', { json: { name: 'Promo', template_id: tpl.id, connection_id: conn.id, audience: { metadata: { promo: 'disabled-later' } } } })).json.data
    expect((await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })).status).toBe(200)
    const first = await waitFor(() => graph.seen.find((x) => x.json?.to === people[0]!.slice(1))?.json.biz_opaque_callback_data)
    await waitFor(async () => (await msg(key, first)).status === 'sent')
    // Meta took the first message, then failed it: the template was disabled meanwhile
    expect((await deliver(srv.base, conn.id, statusEvent(wamidOf(first), 'failed', [{ code: 132016, title: 'Template is disabled' }]))).status).toBe(200)
    const paused = (await srv.api(key, 'GET', `/campaigns/${c.id}`)).json.data
    expect([paused.status, paused.paused_reason]).toEqual(['paused', 'template_refused'])
    await Bun.sleep(4500) // past the next release gap: the second recipient is not sent to
    expect(graph.seen.filter((x) => x.json?.to === people[1]!.slice(1))).toHaveLength(0)
  }, 30_000)

  test('a one-to-one send of a template that names a WhatsApp template goes out as that template', async () => {
    const { key, conn } = await setup()
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Receipt', body: 'Hi {{name}}, your receipt for order {{1}} is ready.', whatsapp: { name: 'order_receipt', language: 'de' } } })).json.data
    const ada = (await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'Ada' } })).json.data
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, contact_id: ada.id, template_id: tpl.id, variables: { '1': 'A-77' } } })
    expect([r.status, r.json.data.body]).toEqual([202, 'Hi Ada, your receipt for order A-77 is ready.'])
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    // a value the recipient lacks (no name) would reach WhatsApp empty, which it refuses: 422, nothing queued
    const nameless = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), template_id: tpl.id, variables: { '1': 'A-78' } } })
    expect([nameless.status, nameless.json.errors]).toEqual([422, { template_id: ['The WhatsApp template gets no value for {{name}} for this recipient; WhatsApp refuses empty values.'] }])
    const sent = graph.seen.filter((x) => x.json?.to === ada.phone.slice(1))
    expect(sent.map((x) => x.json)).toEqual([
      { messaging_product: 'whatsapp', recipient_type: 'individual', to: ada.phone.slice(1), type: 'template', template: { name: 'order_receipt', language: { code: 'de' }, components: [{ type: 'body', parameters: [{ type: 'text', text: 'Ada' }, { type: 'text', text: 'A-77' }] }] }, biz_opaque_callback_data: r.json.data.id },
    ])
  })

  test('a WhatsApp template with a dynamic URL button gets its value rendered per recipient', async () => {
    const { key, conn } = await setup()
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Track', body: 'Order {{1}} is on its way.', whatsapp: { name: 'order_track', language: 'en', url_buttons: [{ index: 1, value: 'o/{{1}}?c={{metadata.cust}}' }] } } })).json.data
    const ada = (await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'Ada', metadata: { cust: 'C-9' } } })).json.data
    // a numbered placeholder only the button uses still needs its value
    const btnOnly = (await srv.api(key, 'POST', '/templates', { json: { name: 'Btn', body: 'Your order is on its way.', whatsapp: { name: 'order_track2', language: 'en', url_buttons: [{ index: 0, value: '{{1}}' }] } } })).json.data
    const missing = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, contact_id: ada.id, template_id: btnOnly.id } })
    expect([missing.status, missing.json.errors]).toEqual([422, { variables: ['Values are needed for the numbered placeholders {{1}}.'] }])
    // a button whose whole value is one the recipient lacks would reach WhatsApp empty: 422
    const byCustomer = (await srv.api(key, 'POST', '/templates', { json: { name: 'Account', body: 'Your account is ready.', whatsapp: { name: 'account_ready', language: 'en', url_buttons: [{ index: 1, value: '{{metadata.cust}}' }] } } })).json.data
    const bo = (await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'Bo' } })).json.data
    const noCust = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, contact_id: bo.id, template_id: byCustomer.id } })
    expect([noCust.status, noCust.json.errors]).toEqual([422, { template_id: ['The WhatsApp template gets no value for URL button 1 for this recipient; WhatsApp refuses empty values.'] }])
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, contact_id: ada.id, template_id: tpl.id, variables: { '1': 'A-5' } } })
    expect([r.status, r.json.data.body]).toEqual([202, 'Order A-5 is on its way.'])
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    const sent = graph.seen.filter((x) => x.json?.to === ada.phone.slice(1))
    expect(sent.map((x) => x.json.template)).toEqual([
      {
        name: 'order_track',
        language: { code: 'en' },
        components: [
          { type: 'body', parameters: [{ type: 'text', text: 'A-5' }] },
          { type: 'button', sub_type: 'url', index: '1', parameters: [{ type: 'text', text: 'o/A-5?c=C-9' }] },
        ],
      },
    ])
  })

  test('a template send with one attachment sends it as the template header; attachments a header cannot be are refused', async () => {
    const { key, conn } = await setup()
    const upload = (name: string, bytes: Uint8Array) => uploadMedia(key, name, bytes)
    const pdf = await upload('receipt-A-88.pdf', files.pdf())
    const png = await upload('logo.png', files.png())
    const mp3 = await upload('jingle.mp3', files.mp3())
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Receipt doc', body: 'Your receipt for order {{1}}.', whatsapp: { name: 'receipt_doc', language: 'en' } } })).json.data
    const to = newPhone()
    const send = (extra: Record<string, unknown>) => srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, template_id: tpl.id, variables: { '1': 'A-88' }, ...extra } })
    const attach = (...ids: string[]) => ({ media: { attachments: ids.map((media_id) => ({ media_id })) } })

    // refused before anything is written: two attachments, or one that cannot head a template
    const before = (await srv.api(key, 'GET', '/messages?per_page=1')).json.meta.total
    const two = await send(attach(pdf, png))
    expect([two.status, two.json.code, two.json.errors]).toEqual([422, 'validation_failed', { 'media.attachments': ['A WhatsApp template message carries at most one attachment, sent as the template’s header (the file included).'] }])
    const audio = await send(attach(mp3))
    expect([audio.status, audio.json.errors]).toEqual([422, { 'media.attachments': ['A WhatsApp template’s header must be an image (JPEG or PNG), a video or a document.'] }])
    const fd = new FormData()
    for (const [k, v] of Object.entries({ connection_id: conn.id, recipient: to, template_id: tpl.id, 'variables[1]': 'A-88' })) fd.set(k, v)
    fd.set('file', new File([files.ogg()], 'voice.ogg'))
    const audioFile = await srv.api(key, 'POST', '/messages', { multipart: fd })
    expect([audioFile.status, Object.keys(audioFile.json.errors)]).toEqual([422, ['file']])
    expect((await srv.api(key, 'GET', '/messages?per_page=1')).json.meta.total).toBe(before)

    // one document: uploaded to Meta, then one template message with it as the header
    const r = await send(attach(pdf))
    expect(r.status).toBe(202)
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    const sent = graph.seen.filter((x) => x.json?.to === to.slice(1))
    expect(sent).toHaveLength(1)
    const mediaId = sent[0]!.json.template.components[0].parameters[0].document.id
    expect(graph.seen.find((x) => x.path.endsWith('/media') && x.form?.filename === 'receipt-A-88.pdf')?.form?.type).toBe('application/pdf')
    expect(sent[0]!.json).toEqual({
      messaging_product: 'whatsapp',
      recipient_type: 'individual',
      to: to.slice(1),
      type: 'template',
      template: {
        name: 'receipt_doc',
        language: { code: 'en' },
        components: [
          { type: 'header', parameters: [{ type: 'document', document: { id: mediaId, filename: 'receipt-A-88.pdf' } }] },
          { type: 'body', parameters: [{ type: 'text', text: 'A-88' }] },
        ],
      },
      biz_opaque_callback_data: r.json.data.id,
    })
    expect(mediaId).toMatch(/^media-/)

    // an image header has no file name; a template without a WhatsApp link still takes several attachments
    const img = await send(attach(png))
    await waitFor(async () => (await msg(key, img.json.data.id)).status === 'sent')
    expect(graph.seen.filter((x) => x.json?.to === to.slice(1)).at(-1)!.json.template.components[0]).toEqual({ type: 'header', parameters: [{ type: 'image', image: { id: expect.stringMatching(/^media-/) } }] })
    const plain = (await srv.api(key, 'POST', '/templates', { json: { name: 'Receipt text', body: 'Your receipt for order {{1}}.' } })).json.data
    const many = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to), template_id: plain.id, variables: { '1': 'A-88' }, ...attach(pdf, png) } })
    expect(many.status).toBe(202)
  })

  test('a campaign with media sends it as the WhatsApp template header to every recipient; its media is checked', async () => {
    const { key, conn } = await setup()
    const upload = (name: string, bytes: Uint8Array) => uploadMedia(key, name, bytes)
    const png = await upload('spring.png', files.png())
    const mp3 = await upload('jingle.mp3', files.mp3())
    const people = [newPhone(), newPhone()]
    for (const phone of people) await srv.api(key, 'POST', '/contacts', { json: { phone, name: 'Zoe', consent_status: 'opted_in', metadata: { promo: 'spring-media' } } })
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Spring', category: 'marketing', body: 'Hi {{name}}, spring is here.', whatsapp: { name: 'spring_promo', language: 'en' } } })).json.data
    const fields = { name: 'Spring', template_id: tpl.id, connection_id: conn.id, audience: { metadata: { promo: 'spring-media' } } }
    // refused: audio cannot head a template; unknown or another workspace's media is not found
    const audio = await srv.api(key, 'POST', '/campaigns', { json: { ...fields, media_id: mp3 } })
    expect([audio.status, audio.json.errors]).toEqual([422, { media_id: ['The media_id field must name an image (JPEG or PNG), a video or a document.'] }])
    const other = await srv.tenant()
    const foreign = await srv.api(other.key, 'POST', '/campaigns', { json: { ...fields, media_id: png } })
    expect(foreign.status).toBe(404)
    const unknown = await srv.api(key, 'POST', '/campaigns', { json: { ...fields, media_id: crypto.randomUUID() } })
    expect([unknown.status, unknown.json.code]).toEqual([404, 'not_found'])
    // PUT sets it and null removes it
    const draft = (await srv.api(key, 'POST', '/campaigns', { json: fields })).json.data
    expect(draft.media_id).toBeNull()
    expect((await srv.api(key, 'PUT', `/campaigns/${draft.id}`, { json: { media_id: png } })).json.data.media_id).toBe(png)
    expect((await srv.api(key, 'PUT', `/campaigns/${draft.id}`, { json: { media_id: null } })).json.data.media_id).toBeNull()
    expect((await srv.api(key, 'PUT', `/campaigns/${draft.id}`, { json: { media_id: mp3 } })).status).toBe(422)
    expect((await srv.api(key, 'PUT', `/campaigns/${draft.id}`, { json: { media_id: png } })).status).toBe(200)

    expect((await srv.api(key, 'POST', `/campaigns/${draft.id}/schedule`, { json: {} })).status).toBe(200)
    await waitFor(async () => (await srv.api(key, 'GET', `/campaigns/${draft.id}`)).json.data.status === 'completed')
    const headers: string[] = []
    for (const phone of people) {
      const sent = graph.seen.filter((x) => x.json?.to === phone.slice(1))
      expect(sent).toHaveLength(1)
      expect(sent[0]!.json.template).toEqual({
        name: 'spring_promo',
        language: { code: 'en' },
        components: [{ type: 'header', parameters: [{ type: 'image', image: { id: expect.stringMatching(/^media-/) } }] }, { type: 'body', parameters: [{ type: 'text', text: 'Zoe' }] }],
      })
      headers.push(sent[0]!.json.template.components[0].parameters[0].image.id)
    }
    // the file went to Meta once: every recipient's message names the same upload
    expect(graph.seen.filter((x) => x.path.endsWith('/media') && x.form?.filename === 'spring.png')).toHaveLength(1)
    expect(headers[1]).toBe(headers[0])
    const logged = (await srv.api(key, 'GET', '/messages?per_page=2')).json.data
    expect(logged.map((m: any) => m.attachments)).toEqual([[png], [png]])
  })

  test('a template whose Meta header is a document or an image (imported so) needs that file: a send or a campaign without it is refused at 422, not failed at Meta', async () => {
    graph.state.templates = [
      metaTemplate('invoice_ready', 'en', [{ type: 'HEADER', format: 'DOCUMENT' }, metaBody('Your invoice {{1}} is ready.')]),
      metaTemplate('new_arrivals', 'en', [{ type: 'HEADER', format: 'IMAGE' }, metaBody('New in store this week.')], { category: 'MARKETING' }),
    ]
    const { key, conn } = await setup({ waba_id: WABA })
    const imported = (await srv.admin('POST', `/connections/${conn.id}/import-templates`)).json.data.created
    const invoice = imported.find((t: any) => t.whatsapp.name === 'invoice_ready')
    const arrivals = imported.find((t: any) => t.whatsapp.name === 'new_arrivals')
    expect([invoice.whatsapp.header_media, arrivals.whatsapp.header_media]).toEqual(['document', 'image'])
    const pdf = await uploadMedia(key, 'invoice-17.pdf', files.pdf())
    const png = await uploadMedia(key, 'arrivals.png', files.png())
    const to = newPhone()
    const send = (extra: Record<string, unknown>) => srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, template_id: invoice.id, variables: { '1': 'INV-17' }, ...extra } })
    const before = (await srv.api(key, 'GET', '/messages?per_page=1')).json.meta.total
    const bare = await send({})
    expect([bare.status, bare.json.errors]).toEqual([422, { 'media.attachments': ['This template’s WhatsApp header is a document (whatsapp.header_media): attach one (media.attachments or file).'] }])
    const wrong = await send({ media: { attachments: [{ media_id: png }] } })
    expect([wrong.status, wrong.json.errors]).toEqual([422, { 'media.attachments': ['This template’s WhatsApp header is a document (whatsapp.header_media); the attachment is an image.'] }])
    expect((await srv.api(key, 'GET', '/messages?per_page=1')).json.meta.total).toBe(before)
    const r = await send({ media: { attachments: [{ media_id: pdf }] } })
    expect(r.status).toBe(202)
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    expect(graph.seen.filter((x) => x.json?.to === to.slice(1)).at(-1)!.json.template.components[0].parameters[0].type).toBe('document')

    // a campaign: a draft may wait for its file, but it is not scheduled without it, nor with one of another kind
    const person = newPhone()
    await srv.api(key, 'POST', '/contacts', { json: { phone: person, name: 'Ivy', consent_status: 'opted_in', metadata: { promo: 'arrivals' } } })
    const fields = { name: 'Arrivals', template_id: arrivals.id, connection_id: conn.id, audience: { metadata: { promo: 'arrivals' } } }
    expect((await srv.api(key, 'POST', '/campaigns', { json: { ...fields, media_id: pdf } })).json.errors).toEqual({ media_id: ['The template’s WhatsApp header is an image (whatsapp.header_media); this media is a document.'] })
    const draft = (await srv.api(key, 'POST', '/campaigns', { json: fields })).json.data
    const early = await srv.api(key, 'POST', `/campaigns/${draft.id}/schedule`, { json: {} })
    expect([early.status, early.json.errors]).toEqual([422, { media_id: ['The template’s WhatsApp header is an image (whatsapp.header_media): the campaign needs a media_id of that kind.'] }])
    expect((await srv.api(key, 'GET', `/campaigns/${draft.id}`)).json.data.status).toBe('draft')
    expect((await srv.api(key, 'PUT', `/campaigns/${draft.id}`, { json: { media_id: png } })).status).toBe(200)
    expect((await srv.api(key, 'POST', `/campaigns/${draft.id}/schedule`, { json: {} })).status).toBe(200)
    await waitFor(async () => (await srv.api(key, 'GET', `/campaigns/${draft.id}`)).json.data.status === 'completed')
    const recipients = (await srv.api(key, 'GET', `/campaigns/${draft.id}/recipients`)).json.data
    expect(recipients.map((x: any) => x.status)).toEqual(['sent'])

    // by hand: header_media is one header, not beside header_text
    const both = await srv.api(key, 'POST', '/templates', { json: { name: 'Both', body: 'x', whatsapp: { name: 'both', language: 'en', header_text: 'Hi', header_media: 'image' } } })
    expect([both.status, both.json.errors]).toEqual([422, { 'whatsapp.header_media': ['A template has one header: text (header_text) or media (header_media), not both.'] }])
    // a campaign waiting to start without a file keeps its template from gaining a media header
    const plain = (await srv.api(key, 'POST', '/templates', { json: { name: 'Later', body: 'Soon.', whatsapp: { name: 'later', language: 'en' } } })).json.data
    const waiting = (await srv.api(key, 'POST', '/campaigns', { json: { ...fields, template_id: plain.id } })).json.data
    expect((await srv.api(key, 'POST', `/campaigns/${waiting.id}/schedule`, { json: { scheduled_at: new Date(Date.now() + 3_600_000).toISOString() } })).status).toBe(200)
    const gain = await srv.api(key, 'PUT', `/templates/${plain.id}`, { json: { whatsapp: { name: 'later', language: 'en', header_media: 'video' } } })
    expect([gain.status, gain.json.errors]).toEqual([422, { 'whatsapp.header_media': ['A scheduled campaign sends this template without a video (media_id); a template with a video header needs one.'] }])
    expect((await srv.api(key, 'POST', `/campaigns/${waiting.id}/cancel`, { json: {} })).status).toBe(200)
    expect((await srv.api(key, 'PUT', `/templates/${plain.id}`, { json: { whatsapp: { name: 'later', language: 'en', header_media: 'video' } } })).json.data.whatsapp.header_media).toBe('video')
  })

  test('a WhatsApp template with a text header gets its value rendered per recipient; it takes no media', async () => {
    const { key, conn } = await setup()
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Shipped', body: 'Hi {{name}}, it is on its way.', whatsapp: { name: 'order_shipped_h', language: 'en', header_text: '{{1}} from {{metadata.shop}}' } } })).json.data
    expect(tpl.variables).toEqual(['name', '1', 'metadata.shop'])
    const ada = (await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'Ada', metadata: { shop: 'Kiosk' } } })).json.data
    const bob = (await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'Bob' } })).json.data
    const send = (contact: any, extra: Record<string, unknown> = {}) => srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, contact_id: contact.id, template_id: tpl.id, variables: { '1': 'A-9' }, ...extra } })

    // refused before anything is written: media beside a text header, a header that renders
    // empty or past WhatsApp's 60 characters for this recipient
    const before = (await srv.api(key, 'GET', '/messages?per_page=1')).json.meta.total
    const png = await uploadMedia(key, 'logo.png', files.png())
    const withMedia = await send(ada, { media: { attachments: [{ media_id: png }] } })
    expect([withMedia.status, withMedia.json.errors]).toEqual([422, { 'media.attachments': ['This template’s WhatsApp header is text (whatsapp.header_text): it carries no attachment.'] }])
    const onlyShop = (await srv.api(key, 'POST', '/templates', { json: { name: 'Shop', body: 'Hi {{name}}.', whatsapp: { name: 'shop_h', language: 'en', header_text: '{{metadata.shop}}' } } })).json.data
    const empty = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, contact_id: bob.id, template_id: onlyShop.id } })
    expect([empty.status, empty.json.errors]).toEqual([422, { template_id: ['The template’s WhatsApp header text renders empty for this recipient.'] }])
    const long = await send(ada, { variables: { '1': 'x'.repeat(52) } })
    expect([long.status, long.json.errors]).toEqual([422, { template_id: ['The template’s WhatsApp header text renders to more than 60 characters for this recipient.'] }])
    expect((await srv.api(key, 'GET', '/messages?per_page=1')).json.meta.total).toBe(before)

    // 60 characters exactly is fine; the header goes before the body
    const r = await send(ada, { variables: { '1': 'x'.repeat(49) } })
    expect([r.status, r.json.data.body]).toEqual([202, 'Hi Ada, it is on its way.'])
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    expect(graph.seen.filter((x) => x.json?.to === ada.phone.slice(1)).map((x) => x.json.template)).toEqual([
      {
        name: 'order_shipped_h',
        language: { code: 'en' },
        components: [
          { type: 'header', parameters: [{ type: 'text', text: `${'x'.repeat(49)} from Kiosk` }] },
          { type: 'body', parameters: [{ type: 'text', text: 'Ada' }] },
        ],
      },
    ])

    // a campaign: media beside a text header is refused; a recipient whose header renders empty is skipped
    for (const c of [ada, bob]) await srv.api(key, 'POST', '/contacts', { json: { phone: c.phone, consent_status: 'opted_in', metadata: { ...c.metadata, wave: 'h1' } } })
    const fields = { name: 'Shipped wave', template_id: onlyShop.id, connection_id: conn.id, audience: { metadata: { wave: 'h1' } } }
    const refused = await srv.api(key, 'POST', '/campaigns', { json: { ...fields, media_id: png } })
    expect([refused.status, refused.json.errors]).toEqual([422, { media_id: ['The template’s WhatsApp header is text (whatsapp.header_text): the campaign cannot carry media.'] }])
    const plainTpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Plain', body: 'Hi {{name}}.' } })).json.data
    const draft = (await srv.api(key, 'POST', '/campaigns', { json: { ...fields, template_id: plainTpl.id, media_id: png } })).json.data
    expect((await srv.api(key, 'PUT', `/campaigns/${draft.id}`, { json: { template_id: onlyShop.id } })).status).toBe(422)
    expect((await srv.api(key, 'PUT', `/campaigns/${draft.id}`, { json: { template_id: onlyShop.id, media_id: null } })).status).toBe(200)
    expect((await srv.api(key, 'POST', `/campaigns/${draft.id}/schedule`, { json: {} })).status).toBe(200)
    await waitFor(async () => (await srv.api(key, 'GET', `/campaigns/${draft.id}`)).json.data.status === 'completed')
    const recipients = (await srv.api(key, 'GET', `/campaigns/${draft.id}/recipients`)).json.data
    expect(recipients.find((x: any) => x.contact_id === bob.id).skipped_reason).toBe('rendered_empty')
    expect(graph.seen.filter((x) => x.json?.to === bob.phone.slice(1))).toHaveLength(0)
    expect(graph.seen.filter((x) => x.json?.to === ada.phone.slice(1)).at(-1)!.json.template.components[0]).toEqual({ type: 'header', parameters: [{ type: 'text', text: 'Kiosk' }] })
    // a template a scheduled campaign will send with media cannot get a text header meanwhile
    const later = (await srv.api(key, 'POST', '/campaigns', { json: { ...fields, template_id: plainTpl.id, media_id: png, scheduled_at: new Date(Date.now() + 86_400_000).toISOString() } })).json.data
    expect((await srv.api(key, 'POST', `/campaigns/${later.id}/schedule`, { json: {} })).status).toBe(200)
    const textHeader = { whatsapp: { name: 'plain_h', language: 'en', header_text: '{{name}}' } }
    const blocked = await srv.api(key, 'PUT', `/templates/${plainTpl.id}`, { json: textHeader })
    expect([blocked.status, blocked.json.errors]).toEqual([422, { 'whatsapp.header_text': ['A scheduled campaign sends this template with media (media_id); a template with a text header takes none.'] }])
    expect((await srv.api(key, 'POST', `/campaigns/${later.id}/cancel`)).status).toBe(200)
    expect((await srv.api(key, 'PUT', `/templates/${plainTpl.id}`, { json: textHeader })).json.data.whatsapp.header_text).toBe('{{name}}')
  })

  test('media is uploaded to the media endpoint and sent by id with the text as caption', async () => {
    const { key, conn } = await setup()
    const fd = new FormData()
    fd.set('file', new File([files.png()], 'receipt.png'))
    const media = (await srv.api(key, 'POST', '/media', { multipart: fd })).json.data
    const to = newPhone()
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to), body: 'Your receipt', media: { attachments: [{ media_id: media.id }] } } })
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    const upload = graph.seen.find((s) => s.path.endsWith('/media') && s.form?.filename === 'receipt.png')
    expect(upload?.form).toMatchObject({ type: 'image/png', messaging_product: 'whatsapp' })
    const send = graph.seen.find((s) => s.json?.to === to.slice(1))
    expect(send?.json).toMatchObject({ type: 'image', image: { caption: 'Your receipt' } })
    expect(send?.json.image.id).toMatch(/^media-/)
  })

  test('a text longer than a caption may be (1,024) goes as its own message after the photo, whole', async () => {
    const { key, conn } = await setup()
    const fd = new FormData()
    fd.set('file', new File([files.png()], 'label.png'))
    const media = (await srv.api(key, 'POST', '/media', { multipart: fd })).json.data
    const to = newPhone()
    const long = `Your order is on its way. ${'Here is what to expect at delivery. '.repeat(40)}`.slice(0, 1500)
    const atLimit = 'x'.repeat(1024)
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to), body: long, media: { attachments: [{ media_id: media.id }] } } })
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    const parts = graph.seen.filter((s) => s.json?.to === to.slice(1)).map((s) => s.json)
    expect(parts).toHaveLength(2)
    expect(parts[0]).toMatchObject({ type: 'image' })
    expect(parts[0].image.caption).toBeUndefined()
    expect(parts[1]).toMatchObject({ type: 'text', text: { body: long } })
    // 1,024 characters still go as the caption
    const to2 = newPhone()
    const r2 = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to2), body: atLimit, media: { attachments: [{ media_id: media.id }] } } })
    await waitFor(async () => (await msg(key, r2.json.data.id)).status === 'sent')
    const one = graph.seen.filter((s) => s.json?.to === to2.slice(1)).map((s) => s.json)
    expect(one).toHaveLength(1)
    expect(one[0].image.caption).toBe(atLimit)
  })

  test('a file sent again is not uploaded again; after a refusal it is', async () => {
    const { key, conn } = await setup()
    const pdf = await uploadMedia(key, 'terms-v2.pdf', files.pdf())
    const uploads = () => graph.seen.filter((x) => x.path.endsWith('/media') && x.form?.filename === 'terms-v2.pdf').length
    const send = async (scripted: (null | 131053)[]) => {
      const to = newPhone()
      graph.state.failFor[to.slice(1)] = scripted
      const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to), body: 'Our new terms', media: { attachments: [{ media_id: pdf }] } } })
      return waitFor(async () => {
        const m = await msg(key, r.json.data.id)
        return m.status === 'sent' || m.status === 'failed' ? m : null
      })
    }
    expect((await send([null])).status).toBe('sent')
    expect((await send([null])).status).toBe('sent')
    expect(uploads()).toBe(1)
    // Meta refuses the reused upload: that message fails, and the next one uploads the file afresh
    expect((await send([131053])).error.code).toBe('cloud_api_131053')
    expect((await send([null])).status).toBe('sent')
    expect(uploads()).toBe(2)
  })

  test('a Cloud API error fails the message with its code and message', async () => {
    const { key, conn } = await setup()
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, '+15550009001'), body: 'x' } })
    const failed = await waitFor(async () => ((await msg(key, r.json.data.id)).status === 'failed' ? msg(key, r.json.data.id) : null))
    expect(failed.error).toEqual({ code: 'cloud_api_131026', message: 'Message undeliverable' })
  })

  test("Meta's error_data.details is kept with its message, for a refused send and for a failed status", async () => {
    const { key, conn } = await setup()
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, '+15550009002'), body: 'x' } })
    const failed = await waitFor(async () => ((await msg(key, r.json.data.id)).status === 'failed' ? msg(key, r.json.data.id) : null))
    expect(failed.error).toEqual({ code: 'cloud_api_100', message: '(#100) Invalid parameter: Parameter value is not valid: text.body is too long for this message type' })
    const sent = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, newPhone()), body: 'outside the window' } })
    await waitFor(async () => (await msg(key, sent.json.data.id)).status === 'sent')
    const refused = [{ code: 131047, title: 'Re-engagement message', message: 'Re-engagement message', error_data: { details: 'Message failed to send because more than 24 hours have passed since the customer last replied to this number.' } }]
    expect((await deliver(srv.base, conn.id, statusEvent(wamidOf(sent.json.data.id), 'failed', refused))).status).toBe(200)
    const later = await waitFor(async () => ((await msg(key, sent.json.data.id)).status === 'failed' ? msg(key, sent.json.data.id) : null))
    expect(later.error).toEqual({ code: 'cloud_api_131047', message: 'Re-engagement message: Message failed to send because more than 24 hours have passed since the customer last replied to this number.' })
  })

  test('a throughput error is retried instead of failing, and slows the number', async () => {
    const { ws, key, conn } = await setup()
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 1000, daily_cap: 10000, min_gap_seconds: 1, max_gap_seconds: 1 } } })
    graph.state.throttleNext = 1
    const first = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, newPhone()), body: 'one' } })
    const second = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, newPhone()), body: 'two' } })
    await waitFor(async () => (await msg(key, first.json.data.id)).status === 'sent', 15_000)
    // the network asked to slow down: the number holds its next release for a while
    expect((await msg(key, second.json.data.id)).status).toBe('queued')
    const live = (await srv.admin('GET', `/workspaces/${ws.id}/numbers/live`)).json.data[0]
    expect(Date.parse(live.next_release_at)).toBeGreaterThan(Date.now() + 30_000)
  }, 30_000)

  test.concurrent('a part refused after another was accepted: the retry sends only the parts still missing', async () => {
    const { key, conn } = await setup()
    const upload = async (bytes: Uint8Array, name: string) => {
      const fd = new FormData()
      fd.set('file', new File([bytes], name))
      return (await srv.api(key, 'POST', '/media', { multipart: fd })).json.data.id
    }
    const attachments = [{ media_id: await upload(files.png(), 'photo.png') }, { media_id: await upload(files.pdf(), 'invoice.pdf') }]
    const to = newPhone()
    graph.state.failFor[to.slice(1)] = [null, 500] // the photo is accepted, the invoice meets a server error once
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to), body: 'Your order', media: { attachments } } })
    const sent = await waitFor(async () => ((await msg(key, r.json.data.id)).status === 'sent' ? msg(key, r.json.data.id) : null), 10_000)
    expect(sent.outcome.state).toBe('sent')
    // the customer got the photo once: only the invoice was sent again
    const posts = graph.seen.filter((s) => s.json?.to === to.slice(1))
    expect(posts.map((s) => s.json.type)).toEqual(['image', 'document', 'document'])
    // every part names the message, so each part's statuses find it
    expect(posts.map((s) => s.json.biz_opaque_callback_data)).toEqual([r.json.data.id, r.json.data.id, r.json.data.id])
  })

  test.concurrent('a recipient who opts out while a failed send waits for its retry is not sent to again', async () => {
    const { key, conn } = await setup()
    const to = newPhone()
    graph.state.failFor[to.slice(1)] = [500] // the first try meets a server error; the retry follows in 1 s
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to), body: 'Your order shipped' } })
    await waitFor(() => graph.seen.some((s) => s.json?.to === to.slice(1)))
    expect((await deliver(srv.base, conn.id, inboundEvent(to.slice(1), 'STOP'))).status).toBe(200)
    const failed = await waitFor(async () => ((await msg(key, r.json.data.id)).status === 'failed' ? msg(key, r.json.data.id) : null))
    expect(failed.error.code).toBe('recipient_opted_out')
    expect(graph.seen.filter((s) => s.json?.to === to.slice(1))).toHaveLength(1)
  })

  test.concurrent('a send whose connection breaks after the request left waits for Meta to name it; without a word it fails as send_unconfirmed, never sent again', async () => {
    const { key, conn } = await setup({ confirm_wait_seconds: 2 })
    const { id, to } = await sendLosingAnswer(key, conn.id)
    await Bun.sleep(500)
    // the answer was lost: Meta may have it, so it is not failed before Meta had time to say so
    expect((await msg(key, id)).status).toBe('sending')
    const failed = await waitFor(async () => ((await msg(key, id)).status === 'failed' ? msg(key, id) : null))
    expect(failed.error.code).toBe('send_unconfirmed')
    await Bun.sleep(1500) // past the first retry's backoff: nothing more goes out
    expect(graph.seen.filter((s) => s.json?.to === to.slice(1))).toHaveLength(1)
  })

  test.concurrent('a send whose answer was lost is recorded as sent when a status from Meta names it; only its own number can', async () => {
    const { key, conn } = await setup()
    const other = await setup()
    const { id, to } = await sendLosingAnswer(key, conn.id)
    const wamid = `wamid.${crypto.randomUUID()}`
    // a status naming it that arrives for another number (another workspace's) changes nothing
    expect((await deliver(srv.base, other.conn.id, statusEvent(wamid, 'delivered', undefined, id))).status).toBe(200)
    await Bun.sleep(300)
    expect((await msg(key, id)).status).toBe('sending')
    expect((await deliver(srv.base, conn.id, statusEvent(wamid, 'delivered', undefined, id))).status).toBe(200)
    const done = await waitFor(async () => ((await msg(key, id)).status === 'delivered' ? msg(key, id) : null))
    expect(done.timeline.map((e: any) => e.status)).toEqual(['queued', 'sending', 'sent', 'delivered'])
    expect(done.error).toBeNull()
    expect(wamidOf(id)).toBe(wamid)
    expect(graph.seen.filter((s) => s.json?.to === to.slice(1))).toHaveLength(1)
  })

  test.concurrent('a message whose later part lost its answer is sent at once: Meta took its first part; nothing is sent again', async () => {
    const { key, conn } = await setup()
    const to = newPhone()
    graph.state.failFor[to.slice(1)] = [null, 'reset'] // the photo is accepted; the invoice's answer is lost
    const attachments = [{ media_id: await uploadMedia(key, 'photo.png', files.png()) }, { media_id: await uploadMedia(key, 'invoice.pdf', files.pdf()) }]
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to), body: 'Your order', media: { attachments } } })
    const sent = await waitFor(async () => ((await msg(key, r.json.data.id)).status === 'sent' ? msg(key, r.json.data.id) : null), 3000)
    expect(sent.error).toBeNull()
    const posts = graph.seen.filter((s) => s.json?.to === to.slice(1))
    expect(posts.map((s) => s.json.type)).toEqual(['image', 'document'])
    expect(wamidOf(r.json.data.id)).toBe(posts[0]!.wamid!)
    await Bun.sleep(1500) // past the first retry's backoff: nothing more goes out
    expect(graph.seen.filter((s) => s.json?.to === to.slice(1))).toHaveLength(2)
  })

  test.concurrent('a send waiting for Meta to name it fails at once when its number is removed', async () => {
    const { key, conn } = await setup()
    const { id } = await sendLosingAnswer(key, conn.id)
    await Bun.sleep(300)
    expect((await msg(key, id)).status).toBe('sending')
    expect((await srv.admin('DELETE', `/connections/${conn.id}`)).status).toBe(204)
    const failed = await waitFor(async () => ((await msg(key, id)).status === 'failed' ? msg(key, id) : null), 3000)
    expect(failed.error.code).toBe('send_unconfirmed')
  })

  test('a token rejected while sending fails the message and takes the number offline with the reason', async () => {
    const { key, conn } = await setup()
    graph.state.rejectTokens = true
    try {
      const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, newPhone()), body: 'x' } })
      const failed = await waitFor(async () => ((await msg(key, r.json.data.id)).status === 'failed' ? msg(key, r.json.data.id) : null))
      expect(failed.error.code).toBe('connection_offline')
      const c = (await srv.admin('GET', `/connections/${conn.id}`)).json.data
      expect(c.status).toBe('offline')
      expect(c.status_reason).toContain('code 190')
      expect((await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, newPhone()), body: 'x' } })).json.code).toBe('connection_offline')
    } finally {
      graph.state.rejectTokens = false
    }
  })
})

describe('retries (in process, the waits shortened)', () => {
  test("Meta's \"slow down\" answers do not use up the retries of its failures: five throttles, then a 500, then the message is sent", async () => {
    const env = await inProcess()
    try {
      const { svc } = env
      svc.messages.retryDelays = { failed: [5, 5, 5, 5, 5], throttled: [5, 5, 5, 5, 5, 5, 5, 5] }
      const { ws, conn } = await cloudNumberInProcess(svc, 'Retries', '300000000001')
      const to = newPhone()
      graph.state.throttleNext = 5
      graph.state.failFor[to.slice(1)] = [500, null]
      const m = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: await wrote(svc, conn.id, to), body: 'patience', attachments: [] })
      await env.timers.advance(0)
      const done = await waitFor(async () => {
        const row = await svc.messages.get(ws.id, m.id)
        return row.status === 'sent' || row.status === 'failed' ? row : null
      })
      expect([done.status, done.error_code]).toEqual(['sent', null])
      expect(graph.seen.filter((x) => x.json?.text?.body === 'patience')).toHaveLength(7)
    } finally {
      graph.state.throttleNext = 0
      await env.close()
    }
  })
})

describe('the 24-hour window when a message leaves', () => {
  test('a text accepted inside the window but held by the caps until it closed fails as outside_service_window, and Meta never gets it', async () => {
    const env = await inProcess()
    try {
      const { svc, timers } = env
      // one release an hour: the second message waits an hour behind the first
      const { ws, conn } = await cloudNumberInProcess(svc, 'Window at release', '300000000004', { hourly_cap: 1, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 0 })
      const to = await wrote(svc, conn.id, newPhone())
      // 23 h 50 min later, two messages: both inside the window when accepted
      await timers.advance((23 * 60 + 50) * 60_000)
      const first = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: to, body: 'window first', attachments: [] })
      const second = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: to, body: 'window second', attachments: [] })
      await timers.advance(0)
      await waitFor(async () => (await svc.messages.get(ws.id, first.id)).status === 'sent')
      // its turn comes an hour later, 50 minutes after the window closed
      await timers.advance(3600_000)
      const row = await waitFor(async () => {
        const r = await svc.messages.get(ws.id, second.id)
        return r.status !== 'queued' && r.status !== 'sending' ? r : null
      })
      expect([row.status, row.error_code, row.error_message, row.sending_at]).toEqual(['failed', 'outside_service_window', 'The recipient’s 24-hour service window closed before the message was sent: WhatsApp delivers only template messages then.', null])
      expect(graph.seen.filter((x) => x.json?.text?.body === 'window second')).toHaveLength(0)
      expect(graph.seen.filter((x) => x.json?.text?.body === 'window first')).toHaveLength(1)
    } finally {
      await env.close()
    }
  })
})

describe("Meta's times", () => {
  test('a status or a message that arrives late (after an outage) is recorded at the time Meta gives, so the timeline reads in order', async () => {
    const env = await inProcess()
    try {
      const { svc, clock } = env
      const pnid = '300000000003'
      const { ws, conn } = await cloudNumberInProcess(svc, 'Late webhooks', pnid)
      const to = newPhone()
      const m = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: await wrote(svc, conn.id, to), body: 'your parcel', attachments: [] })
      await env.timers.advance(0)
      const sent = await waitFor(async () => {
        const row = await svc.messages.get(ws.id, m.id)
        return row.status === 'sent' ? row : null
      })
      const sentAt = sent.sent_at!
      const wamid = graph.seen.find((x) => x.json?.text?.body === 'your parcel')!.wamid!
      // two hours of outage; then Meta's webhooks arrive, read before delivered
      clock.t += 2 * 3600_000
      const post = (body: unknown) => {
        const raw = JSON.stringify(body).replaceAll(`"phone_number_id":"${PNID}"`, `"phone_number_id":"${pnid}"`)
        const sig = `sha256=${new Bun.CryptoHasher('sha256', APP_SECRET).update(raw).digest('hex')}`
        const request = new Request(`http://capstan.test/hooks/whatsapp/${conn.id}`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-hub-signature-256': sig }, body: raw })
        return handleCloudApiWebhook(request, conn.id, svc, { failures: new WindowCounter(10, 60_000), clientIp: () => '127.0.0.1' })
      }
      const at = (ms: number) => String(Math.floor(ms / 1000))
      const stamped = (status: string, when: number) => {
        const e = statusEvent(wamid, status)
        e.entry[0]!.changes[0]!.value.statuses[0]!.timestamp = at(when)
        return e
      }
      expect((await post(stamped('read', sentAt + 65_000))).status).toBe(200)
      expect((await post(stamped('delivered', sentAt + 5_000))).status).toBe(200)
      const row = await svc.messages.get(ws.id, m.id)
      expect([row.status, row.delivered_at, row.read_at]).toEqual(['read', Math.floor((sentAt + 5_000) / 1000) * 1000, Math.floor((sentAt + 65_000) / 1000) * 1000])
      expect(svc.messages.toPublic(row).timeline.map((x) => x.status)).toEqual(['queued', 'sending', 'sent', 'delivered', 'read'])
      // the customer's answer, written an hour ago, is logged at that time
      const reply = inboundEvent(to.slice(1), 'thanks!')
      reply.entry[0]!.changes[0]!.value.messages[0]!.timestamp = at(clock.t - 3600_000)
      expect((await post(reply)).status).toBe(200)
      const logged = (await svc.messages.list(ws.id, { direction: 'inbound' }, 10, 0)).rows[0]!
      expect([logged.body, logged.created_at, logged.delivered_at]).toEqual(['thanks!', Math.floor((clock.t - 3600_000) / 1000) * 1000, Math.floor((clock.t - 3600_000) / 1000) * 1000])
      // a time Meta cannot mean (ahead of now, or before the message left) is held to what can be
      const n2 = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: await wrote(svc, conn.id, to), body: 'second parcel', attachments: [] })
      await env.timers.advance(0)
      const sent2 = await waitFor(async () => {
        const r = await svc.messages.get(ws.id, n2.id)
        return r.status === 'sent' ? r : null
      })
      const wamid2 = graph.seen.find((x) => x.json?.text?.body === 'second parcel')!.wamid!
      const early = statusEvent(wamid2, 'delivered')
      early.entry[0]!.changes[0]!.value.statuses[0]!.timestamp = at(sent2.sent_at! - 600_000)
      expect((await post(early)).status).toBe(200)
      const ahead = statusEvent(wamid2, 'read')
      ahead.entry[0]!.changes[0]!.value.statuses[0]!.timestamp = at(clock.t + 600_000)
      expect((await post(ahead)).status).toBe(200)
      const row2 = await svc.messages.get(ws.id, n2.id)
      expect([row2.delivered_at, row2.read_at]).toEqual([sent2.sent_at, clock.t])
    } finally {
      await env.close()
    }
  })
})

describe('the pair rate limit (131056)', () => {
  test('Meta asking to slow down messages to one person holds that person only: the number goes on sending to others, and the next message to that person waits too', async () => {
    const env = await inProcess()
    try {
      const { svc } = env
      const hold = 400
      svc.messages.retryDelays = { failed: [5, 5, 5, 5, 5], throttled: [hold, hold, hold] }
      const { ws, conn } = await cloudNumberInProcess(svc, 'Pair limit', '300000000002')
      const busy = newPhone()
      graph.state.failFor[busy.slice(1)] = [131056]
      const status = async (id: string) => (await svc.messages.get(ws.id, id)).status
      const first = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: await wrote(svc, conn.id, busy), body: 'first to busy', attachments: [] })
      await env.timers.advance(0)
      await waitFor(() => graph.seen.some((x) => x.json?.text?.body === 'first to busy'))
      const throttledAt = performance.now()
      // another person on the same number goes out at once: the pacer was not slowed
      const other = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: await wrote(svc, conn.id, newPhone()), body: 'to someone else', attachments: [] })
      const again = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: await wrote(svc, conn.id, busy), body: 'second to busy', attachments: [] })
      await env.timers.advance(0)
      await waitFor(async () => (await status(other.id)) === 'sent')
      expect(await status(first.id)).toBe('sending')
      await waitFor(async () => (await status(first.id)) === 'sent' && (await status(again.id)) === 'sent')
      // the second message to that person waited for the hold, not sent into the limit
      const tries = graph.seen.filter((x) => x.json?.to === busy.slice(1)).map((x) => x.json.text.body)
      expect(tries.sort()).toEqual(['first to busy', 'first to busy', 'second to busy'])
      expect(performance.now() - throttledAt).toBeGreaterThanOrEqual(hold - 50)
      const m = await svc.messages.get(ws.id, first.id)
      expect(m.error_code).toBeNull()
    } finally {
      await env.close()
    }
  })
})

/**
 * On a server of its own: a send Meta refuses twice with "slow down" (it then waits 15 s, longer
 * than a stop waits for a send), the server stopped by `signal` during that wait, and started
 * again. The message's id, its row as the stop left it, and how many times Meta was asked to take it.
 */
/**
 * A text sent through `on` that Meta asks twice to slow down (131056): resolves once both are
 * refused, the sender now waiting 15 s before it tries again. Its id, and how many tries Meta got.
 */
async function waitingOutSlowDown(on: TestServer, key: string, connId: string, body: string) {
  const to = newPhone()
  graph.state.failFor[to.slice(1)] = [131056, 131056]
  const r = await on.api(key, 'POST', '/messages', { json: { connection_id: connId, recipient: await talking(connId, to, on.base), body } })
  expect(r.status).toBe(202)
  const tries = () => graph.seen.filter((s) => s.json?.to === to.slice(1))
  await waitFor(() => tries().length === 2, 10_000)
  return { id: r.json.data.id as string, tries }
}

async function stoppedWhileMetaHolds(own: TestServer, signal: 'SIGTERM' | 'SIGKILL') {
  const { key, conn } = await setup({}, own)
  const { id, tries } = await waitingOutSlowDown(own, key, conn.id, 'Wait for it')
  expect((await msg(key, id, own)).status).toBe('sending')
  // (a moment for the wait's mark to be written)
  await Bun.sleep(200)
  await own.stop(signal)
  const d = new Database(join(own.dataDir, 'capstan.db'), { readonly: true })
  const row = d.query('SELECT status, resend, error_code FROM messages WHERE id = ?').get(id)
  d.close()
  await own.boot()
  return { key, id, row, tries: () => tries().length }
}

describe('a graceful stop while Meta asks to slow down', () => {
  test.concurrent('the send waiting out the hold is handed back, not failed; after the restart it goes out once', async () => {
    const own = await TestServer.start()
    try {
      const { key, id, row, tries } = await stoppedWhileMetaHolds(own, 'SIGTERM')
      // still sending (a status never moves back), marked to go on at the next start
      expect(row).toEqual({ status: 'sending', resend: 1, error_code: null })
      expect(own.output).not.toContain('stopping with sends in flight')
      const sent = await waitFor(async () => {
        const m = await msg(key, id, own)
        return m.status === 'sent' ? m : null
      })
      expect(sent.error).toBeNull()
      expect(tries()).toBe(3)
      expect(sent.timeline.map((t: { status: string }) => t.status)).toEqual(['queued', 'sending', 'sent'])
    } finally {
      await own.close()
    }
  })
})

describe('a crash while Meta asks to slow down', () => {
  test.concurrent('the send marked as waiting before its next try goes on after the restart, not failed as interrupted; once', async () => {
    const own = await TestServer.start()
    try {
      const { key, id, row, tries } = await stoppedWhileMetaHolds(own, 'SIGKILL')
      expect(row).toEqual({ status: 'sending', resend: 1, error_code: null })
      const sent = await waitFor(async () => {
        const m = await msg(key, id, own)
        return m.status === 'sent' || m.status === 'failed' ? m : null
      })
      expect([sent.status, sent.error]).toEqual(['sent', null])
      await Bun.sleep(500)
      expect(tries()).toBe(3)
    } finally {
      await own.close()
    }
  })
})

describe('a crash mid-send', () => {
  test.concurrent('after a restart, a send Meta names in a status is recorded as sent; one it does not name fails as send_interrupted; neither is sent again', async () => {
    const own = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    try {
      const { key, conn } = await setup({ confirm_wait_seconds: 4 }, own)
      const [a, b] = [newPhone(), newPhone()]
      graph.state.failFor[a.slice(1)] = ['hang']
      graph.state.failFor[b.slice(1)] = ['hang']
      const ids: string[] = []
      for (const to of [a, b]) ids.push((await own.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to, own.base), body: 'Your order shipped' } })).json.data.id)
      // both requests reached Meta; no answer came before the process died
      await waitFor(() => [a, b].every((to) => graph.seen.some((s) => s.json?.to === to.slice(1))))
      await own.stop('SIGKILL')
      await own.boot()
      const wamid = `wamid.${crypto.randomUUID()}`
      expect((await deliver(own.base, conn.id, statusEvent(wamid, 'sent', undefined, ids[0]))).status).toBe(200)
      const get = (id: string) => own.api(key, 'GET', `/messages/${id}`).then((r) => r.json.data)
      const sent = await waitFor(async () => ((await get(ids[0]!)).status === 'sent' ? get(ids[0]!) : null))
      expect(sent.error).toBeNull()
      const failed = await waitFor(async () => ((await get(ids[1]!)).status === 'failed' ? get(ids[1]!) : null))
      expect(failed.error.code).toBe('send_interrupted')
      for (const to of [a, b]) expect(graph.seen.filter((s) => s.json?.to === to.slice(1))).toHaveLength(1)
      const d = new Database(join(own.dataDir, 'capstan.db'), { readonly: true })
      expect((d.query('SELECT external_id FROM messages WHERE id = ?').get(ids[0]!) as { external_id: string }).external_id).toBe(wamid)
      d.close()
    } finally {
      await own.close()
    }
  }, 40_000)
})

describe('an account Meta stopped', () => {
  test('a send Meta refuses for the whole account (131031) fails with its code, and the number goes offline with the reason instead of failing message after message', async () => {
    const { key, conn } = await setup()
    const to = newPhone()
    graph.state.failFor[to.slice(1)] = [131031]
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to), body: 'x' } })
    const failed = await waitFor(async () => ((await msg(key, r.json.data.id)).status === 'failed' ? msg(key, r.json.data.id) : null))
    expect(failed.error).toEqual({ code: 'cloud_api_131031', message: 'Business Account locked: The WhatsApp Business Account is restricted for violating policy.' })
    const c = await waitFor(async () => {
      const row = (await srv.admin('GET', `/connections/${conn.id}`)).json.data
      return row.status === 'offline' ? row : null
    })
    expect(c.status_reason).toContain('code 131031')
    expect(c.status_reason).toContain('restricted for violating policy')
    expect((await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, newPhone()), body: 'x' } })).json.code).toBe('connection_offline')
    // cleared in WhatsApp Manager: the operator sets it online and it sends again
    expect((await srv.admin('PATCH', `/connections/${conn.id}`, { status: 'online' })).json.data.status).toBe('online')
    const again = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, newPhone()), body: 'x' } })
    await waitFor(async () => (await msg(key, again.json.data.id)).status === 'sent')
  })

  test('a failed status naming an account block (368) takes the number offline too', async () => {
    const { key, conn } = await setup()
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, newPhone()), body: 'x' } })
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    const blocked = [{ code: 368, title: 'Temporarily blocked for policies violations', message: 'Temporarily blocked for policies violations' }]
    expect((await deliver(srv.base, conn.id, statusEvent(wamidOf(r.json.data.id), 'failed', blocked))).status).toBe(200)
    const c = await waitFor(async () => {
      const row = (await srv.admin('GET', `/connections/${conn.id}`)).json.data
      return row.status === 'offline' ? row : null
    })
    expect(c.status_reason).toContain('code 368')
    expect((await msg(key, r.json.data.id)).error.code).toBe('cloud_api_368')
  })
})

describe('several numbers of one Meta app', () => {
  /** An event as Meta posts it for the number `pnid` (the helpers above name PNID). */
  const about = (pnid: string, body: unknown) => JSON.parse(JSON.stringify(body).replaceAll(`"phone_number_id":"${PNID}"`, `"phone_number_id":"${pnid}"`))

  test("Meta posts every number's events to one callback URL: each change goes to the connection of the number it names", async () => {
    const a = await setup()
    const b = await setup()
    // b sends; Meta's statuses and b's customer's reply arrive at a's URL, naming b's number
    const sent = await srv.api(b.key, 'POST', '/messages', { json: { connection_id: b.conn.id, recipient: await talking(b.conn.id, newPhone()), body: 'Your table is ready' } })
    await waitFor(async () => (await msg(b.key, sent.json.data.id)).status === 'sent')
    expect((await deliver(srv.base, a.conn.id, about(b.pnid, statusEvent(wamidOf(sent.json.data.id), 'delivered')))).status).toBe(200)
    await waitFor(async () => (await msg(b.key, sent.json.data.id)).status === 'delivered')
    const from = newPhone()
    expect((await deliver(srv.base, a.conn.id, about(b.pnid, inboundEvent(from.slice(1), 'On my way')))).status).toBe(200)
    const inB = await waitFor(async () => (await srv.api(b.key, 'GET', '/messages?direction=inbound')).json.data.find((m: any) => m.body === 'On my way') ?? null)
    expect([inB.connection_id, inB.sender]).toEqual([b.conn.id, from])
    expect((await srv.api(a.key, 'GET', '/messages?direction=inbound')).json.data).toEqual([])
    // a's own events still reach a, through b's URL too
    expect((await deliver(srv.base, b.conn.id, about(a.pnid, inboundEvent(newPhone().slice(1), 'Hello a')))).status).toBe(200)
    await waitFor(async () => (await srv.api(a.key, 'GET', '/messages?direction=inbound')).json.data.length === 1)
  })

  test('an event naming a number no connection of that app has is acknowledged, logged, and stored nowhere', async () => {
    const a = await setup()
    const other = await setup({ app_secret: 'another-apps-secret' })
    const unknown = '999000111222'
    expect((await deliver(srv.base, a.conn.id, about(unknown, inboundEvent(newPhone().slice(1), 'Lost')))).status).toBe(200)
    // a number of another app (another app secret): the signature checked was not its app's
    expect((await deliver(srv.base, a.conn.id, about(other.pnid, inboundEvent(newPhone().slice(1), 'Not yours')))).status).toBe(200)
    await waitFor(() => srv.output.split('\n').filter((l) => l.includes('no connection of this app has') && l.includes(a.conn.id)).length === 2)
    expect((await srv.api(a.key, 'GET', '/messages?direction=inbound')).json.data).toEqual([])
    expect((await srv.api(other.key, 'GET', '/messages?direction=inbound')).json.data).toEqual([])
  })

  test('a phone_number_id is connected once; a number Meta knows by another phone goes offline with the reason', async () => {
    const a = await setup()
    const again = await setup({ phone_number_id: a.pnid })
    expect([again.created.status, again.created.json.errors]).toEqual([422, { 'config.phone_number_id': ['Another connection already uses this phone_number_id; each Meta number can be connected once.'] }])
    const b = await setup()
    const moved = await srv.admin('PATCH', `/connections/${b.conn.id}`, { config: { phone_number_id: a.pnid } })
    expect(moved.status).toBe(422)
    expect((await srv.admin('PATCH', `/connections/${a.conn.id}`, { config: { phone_number_id: a.pnid } })).status).toBe(200)
    // Meta's display number for the id is another phone than the one configured
    const pnid = '400000000001'
    graph.state.numbers[pnid] = '15550009999'
    const wrong = await setup({ phone_number_id: pnid })
    expect(wrong.conn.status).toBe('offline')
    expect(wrong.conn.status_reason).toBe(`Meta knows phone_number_id ${pnid} as +15550009999, not as ${wrong.conn.phone}: check the phone or the phone_number_id.`)
  })
})

describe('webhooks from Meta', () => {
  test('GET verification answers the challenge only for the verify token', async () => {
    const { conn } = await setup()
    const ok = await fetch(`${srv.base}/hooks/whatsapp/${conn.id}?hub.mode=subscribe&hub.verify_token=${VERIFY}&hub.challenge=1158201444`)
    expect([ok.status, await ok.text()]).toEqual([200, '1158201444'])
    expect((await fetch(`${srv.base}/hooks/whatsapp/${conn.id}?hub.mode=subscribe&hub.verify_token=nope&hub.challenge=1`)).status).toBe(403)
    expect((await fetch(`${srv.base}/hooks/whatsapp/${crypto.randomUUID()}?hub.mode=subscribe&hub.verify_token=${VERIFY}&hub.challenge=1`)).status).toBe(404)
    // the challenge is text that no browser may take for anything else
    expect([ok.headers.get('content-type'), ok.headers.get('x-content-type-options')]).toEqual(['text/plain; charset=utf-8', 'nosniff'])
    // tokens of any length and any characters are a plain 403, never an error
    for (const token of ['é', '\u{1F600}'.repeat(7), 'x'.repeat(5000), `${VERIFY}\u00e9`, VERIFY.slice(0, -1)]) {
      const r = await fetch(`${srv.base}/hooks/whatsapp/${conn.id}?hub.mode=subscribe&hub.verify_token=${encodeURIComponent(token)}&hub.challenge=1`)
      expect([r.status, ((await r.json()) as any).code]).toEqual([403, 'forbidden'])
    }
    await Bun.sleep(100)
    expect(srv.output).not.toContain('"status":500')
  })

  test('a verify token an older Capstan stored in clear is sealed at the next start and still answers', async () => {
    const own = await TestServer.start()
    try {
      const { conn } = await setup({}, own)
      await own.stop()
      const d = new Database(join(own.dataDir, 'capstan.db'))
      const row = d.query('SELECT config FROM connections WHERE id = ?').get(conn.id) as { config: string }
      d.run('UPDATE connections SET config = ? WHERE id = ?', [JSON.stringify({ ...JSON.parse(row.config), verify_token: VERIFY }), conn.id])
      d.close()
      await own.boot()
      const stored = new Database(join(own.dataDir, 'capstan.db'), { readonly: true })
      const config = JSON.parse((stored.query('SELECT config FROM connections WHERE id = ?').get(conn.id) as { config: string }).config)
      stored.close()
      expect(Object.keys(config.verify_token)).toEqual(['$sealed'])
      const ok = await fetch(`${own.base}/hooks/whatsapp/${conn.id}?hub.mode=subscribe&hub.verify_token=${VERIFY}&hub.challenge=77`)
      expect([ok.status, await ok.text()]).toEqual([200, '77'])
    } finally {
      await own.close()
    }
  })

  test('signed statuses move messages forward; duplicates and out-of-order events change nothing; bad signatures are refused', async () => {
    const { key, conn } = await setup()
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, newPhone()), body: 'track me' } })
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    const sendCall = graph.seen.filter((s) => s.json?.text?.body === 'track me')
    expect(sendCall).toHaveLength(1)
    // the driver stored the wamid Meta returned as the external id; statuses refer to it
    const ext = wamidOf(r.json.data.id)
    expect(ext).toMatch(/^wamid\./)
    const forged = await deliver(srv.base, conn.id, statusEvent(ext, 'read'), 'wrong-secret')
    expect(forged.status).toBe(401)
    expect((await msg(key, r.json.data.id)).status).toBe('sent')
    const readAt = metaNow()
    const readEvent = statusEvent(ext, 'read')
    readEvent.entry[0]!.changes[0]!.value.statuses[0]!.timestamp = readAt
    expect((await deliver(srv.base, conn.id, readEvent)).status).toBe(200)
    await waitFor(async () => (await msg(key, r.json.data.id)).status === 'read')
    // delivered arrives after read, stamped by Meta a second before it
    const deliveredEvent = statusEvent(ext, 'delivered')
    deliveredEvent.entry[0]!.changes[0]!.value.statuses[0]!.timestamp = String(Number(readAt) - 1)
    expect((await deliver(srv.base, conn.id, deliveredEvent)).status).toBe(200)
    expect((await deliver(srv.base, conn.id, statusEvent(ext, 'read'))).status).toBe(200)
    expect((await deliver(srv.base, conn.id, statusEvent(ext, 'failed', [{ code: 131026, title: 'Undeliverable' }]))).status).toBe(200)
    await Bun.sleep(200)
    const final = await msg(key, r.json.data.id)
    expect(final.status).toBe('read')
    // in the order it happened (Meta's times), not in the order the webhooks came
    expect(final.timeline.map((e: any) => e.status)).toEqual(['queued', 'sending', 'sent', 'delivered', 'read'])
  })

  test('a later part of a message sent as several is found by its own wamid or by the id its send carried: its failure fails the message', async () => {
    const { key, conn } = await setup()
    const attachments = [{ media_id: await uploadMedia(key, 'photo.png', files.png()) }, { media_id: await uploadMedia(key, 'invoice.pdf', files.pdf()) }]
    const sendTwoParts = async () => {
      const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, newPhone()), body: 'Your order', media: { attachments } } })
      await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
      return { id: r.json.data.id as string, parts: graph.seen.filter((s) => s.json?.biz_opaque_callback_data === r.json.data.id).map((s) => s.wamid!) }
    }
    const invoiceFailed = [{ code: 131053, title: 'Media upload error' }]
    const one = await sendTwoParts()
    expect(one.parts).toHaveLength(2)
    expect(wamidOf(one.id)).toBe(one.parts[0]!)
    // the invoice's own wamid (recorded with the message): its delivery tells nothing new, the
    // first part's statuses move the message
    expect((await deliver(srv.base, conn.id, statusEvent(one.parts[1]!, 'delivered'))).status).toBe(200)
    await Bun.sleep(300)
    expect((await msg(key, one.id)).status).toBe('sent')
    // Meta could not deliver the invoice: the customer did not get the whole message
    expect((await deliver(srv.base, conn.id, statusEvent(one.parts[1]!, 'failed', invoiceFailed))).status).toBe(200)
    const failed = await waitFor(async () => ((await msg(key, one.id)).status === 'failed' ? msg(key, one.id) : null))
    expect(failed.error).toEqual({ code: 'cloud_api_131053', message: 'Media upload error' })
    // a part whose wamid Capstan never got (its answer was lost) is found by the id it carried
    const two = await sendTwoParts()
    expect((await deliver(srv.base, conn.id, statusEvent(`wamid.${crypto.randomUUID()}`, 'failed', invoiceFailed, two.id))).status).toBe(200)
    expect((await waitFor(async () => ((await msg(key, two.id)).status === 'failed' ? msg(key, two.id) : null))).error.code).toBe('cloud_api_131053')
  })

  test('a flood of bad signatures is cut off per number and address: 429 without reading, one log line per counted failure', async () => {
    const { conn } = await setup()
    const other = await setup()
    const lines = () => srv.output.split('\n').filter((l) => l.includes('bad signature') && l.includes(conn.id)).length
    // the failed-auth limit (120 per 60 s by default) counts bad signatures of this number from this address
    const answers = await Promise.all(Array.from({ length: 150 }, () => deliver(srv.base, conn.id, inboundEvent('15550001111', 'hi'), 'wrong-secret').then((r) => r.status)))
    expect(answers.filter((s) => s === 401)).toHaveLength(120)
    expect(answers.filter((s) => s === 429)).toHaveLength(30)
    // over the limit, even a good signature waits (Meta delivers it again later); the body is not read
    const held = await deliver(srv.base, conn.id, inboundEvent('15550001111', 'hi'))
    expect([held.status, ((await held.json()) as any).code]).toEqual([429, 'auth_rate_limited'])
    // another number's webhooks from the same address are not held up
    expect((await deliver(srv.base, other.conn.id, inboundEvent(newPhone().slice(1), 'hello'))).status).toBe(200)
    await waitFor(() => lines() === 120)
    await Bun.sleep(200)
    expect(lines()).toBe(120)
  })

  test('inbound messages are logged and STOP opts the sender out; unknown payloads are acknowledged', async () => {
    const { key, conn } = await setup()
    const from = newPhone()
    expect((await deliver(srv.base, conn.id, inboundEvent(from.slice(1), 'Hi, where is my order?'))).status).toBe(200)
    expect((await deliver(srv.base, conn.id, inboundEvent(from.slice(1), 'stop'))).status).toBe(200)
    const inbound = (await srv.api(key, 'GET', '/messages?direction=inbound')).json.data
    expect(inbound.map((m: any) => m.body)).toEqual(['stop', 'Hi, where is my order?'])
    expect(inbound[0].sender).toBe(from)
    // a text past 4096 code points is cut at 4096 of them, never inside an emoji
    const long = newPhone()
    expect((await deliver(srv.base, conn.id, inboundEvent(long.slice(1), '😀'.repeat(5000)))).status).toBe(200)
    const cut = (await srv.api(key, 'GET', '/messages?direction=inbound')).json.data.find((m: any) => m.sender === long)
    expect(cut.body).toBe('😀'.repeat(4096))
    expect((await srv.api(key, 'GET', '/contacts')).json.data.find((c: any) => c.phone === from).consent_status).toBe('opted_out')
    // a tapped reply says its title (an interactive "STOP" button opts out too); media says its type and caption
    const tapper = newPhone()
    const withMessage = (m: Record<string, unknown>) => {
      const e = inboundEvent(tapper.slice(1), '') as any
      const base = e.entry[0].changes[0].value.messages[0]
      e.entry[0].changes[0].value.messages[0] = { from: base.from, id: base.id, timestamp: base.timestamp, ...m }
      return e
    }
    for (const m of [
      { type: 'image', image: { id: 'mid-1', mime_type: 'image/jpeg', caption: 'The box arrived broken' } },
      { type: 'audio', audio: { id: 'mid-2', mime_type: 'audio/ogg' } },
      { type: 'interactive', interactive: { type: 'list_reply', list_reply: { id: 'r-2', title: 'Tomorrow morning' } } },
      { type: 'interactive', interactive: { type: 'button_reply', button_reply: { id: 'b-stop', title: 'STOP' } } },
      { type: 'reaction', reaction: { message_id: 'wamid.x', emoji: '👍' } },
      { type: 'reaction', reaction: { message_id: 'wamid.x', emoji: '' } },
      { type: 'location', location: { latitude: 52.52, longitude: 13.405, name: 'Pickup point', address: 'Alexanderplatz 1' } },
      { type: 'location', location: { latitude: -33.86, longitude: 151.2 } },
      { type: 'contacts', contacts: [{ name: { formatted_name: 'Jo Doe' }, phones: [{ phone: '+1 (940) 555-1234', type: 'CELL' }] }, { name: { formatted_name: 'Al' } }] },
      { type: 'system', system: { body: 'Kim changed their phone number to a new number 16505551234', new_wa_id: '16505551234', type: 'user_changed_number' } },
    ]) {
      expect((await deliver(srv.base, conn.id, withMessage(m))).status).toBe(200)
    }
    const tapped = (await srv.api(key, 'GET', '/messages?direction=inbound&per_page=100')).json.data.filter((m: any) => m.sender === tapper)
    expect(tapped.map((m: any) => m.body)).toEqual([
      '[system message] Kim changed their phone number to a new number 16505551234',
      '[contacts message] Jo Doe +1 (940) 555-1234; Al',
      '[location message] (-33.86, 151.2)',
      '[location message] Pickup point, Alexanderplatz 1 (52.52, 13.405)',
      '[reaction removed]',
      '[reaction] 👍',
      'STOP',
      'Tomorrow morning',
      '[audio message]',
      '[image message] The box arrived broken',
    ])
    expect((await srv.api(key, 'GET', '/contacts')).json.data.find((c: any) => c.phone === tapper).consent_status).toBe('opted_out')
    for (const odd of [{ object: 'whatsapp_business_account', entry: [{ changes: [{ field: 'account_update', value: { event: 'VERIFIED_ACCOUNT' } }] }] }, { hello: 'world' }, []]) {
      expect((await deliver(srv.base, conn.id, odd)).status).toBe(200)
    }
    const notJson = await fetch(`${srv.base}/hooks/whatsapp/${conn.id}`, { method: 'POST', headers: { 'x-hub-signature-256': `sha256=${new Bun.CryptoHasher('sha256', APP_SECRET).update('{oops').digest('hex')}` }, body: '{oops' })
    expect(notJson.status).toBe(200)
    expect((await srv.request('GET', '/healthz')).status).toBe(200)
  })

  test('an error Meta reports about the number itself (value.errors) is logged as a warning with its code and words', async () => {
    const { conn } = await setup()
    const problem = { object: 'whatsapp_business_account', entry: [{ id: 'WABA', changes: [{ field: 'messages', value: { messaging_product: 'whatsapp', metadata: { phone_number_id: PNID }, errors: [{ code: 131000, title: 'Something went wrong', message: 'Something went wrong', error_data: { details: 'Webhook delivery paused for this phone number.' } }] } }] }] }
    expect((await deliver(srv.base, conn.id, problem)).status).toBe(200)
    const line = await waitFor(() => srv.output.split('\n').find((l) => l.includes('cloud api reports an error for the number') && l.includes(conn.id)))
    const entry = JSON.parse(line)
    expect(entry).toMatchObject({ level: 'warn', connection_id: conn.id, code: 'cloud_api_131000', error: 'Something went wrong: Webhook delivery paused for this phone number.' })
  })

  test('a sender’s WhatsApp profile name names a contact that has none; a name the team gave is kept', async () => {
    const { key, conn } = await setup()
    const [fresh, named, nameless] = [newPhone(), newPhone(), newPhone()]
    expect((await srv.api(key, 'POST', '/contacts', { json: { phone: named, name: 'Grace Hopper' } })).status).toBe(201)
    expect((await srv.api(key, 'POST', '/contacts', { json: { phone: nameless } })).status).toBe(201)
    for (const [phone, profile] of [[fresh, '  Ada  '], [named, 'Gracie'], [nameless, 'Linus']]) expect((await deliver(srv.base, conn.id, inboundEvent(phone!.slice(1), 'Hello', profile))).status).toBe(200)
    const contacts = (await srv.api(key, 'GET', '/contacts?per_page=100')).json.data
    const nameOf = (phone: string) => contacts.find((c: any) => c.phone === phone)?.name
    expect([nameOf(fresh), nameOf(named), nameOf(nameless)]).toEqual(['Ada', 'Grace Hopper', 'Linus'])
  })

  test('a number WhatsApp knows under another id (its wa_id): replies, STOP and "Stop promotions" from that id are the contact’s', async () => {
    const { key, conn } = await setup()
    const tail = String(Math.floor(Math.random() * 1e8)).padStart(8, '0')
    // Brazilian mobiles with the ninth digit; WhatsApp knows older accounts without it
    const [bia, caio] = [`+55119${tail}`, `+55219${tail}`]
    const waIdOf = (phone: string) => `${phone.slice(1, 5)}${phone.slice(6)}`
    for (const phone of [bia, caio]) {
      expect((await srv.api(key, 'POST', '/contacts', { json: { phone, consent_status: 'opted_in' } })).status).toBe(201)
      graph.state.waIdFor[phone.slice(1)] = waIdOf(phone)
      const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, phone), body: 'Your order shipped' } })
      await waitFor(async () => (await msg(key, r.json.data.id)).status === 'sent')
    }
    for (const event of [inboundEvent(waIdOf(bia), 'Thanks!'), inboundEvent(waIdOf(bia), 'STOP'), preferenceEvent(waIdOf(caio), 'stop')]) expect((await deliver(srv.base, conn.id, event)).status).toBe(200)
    const inbound = (await srv.api(key, 'GET', '/messages?direction=inbound&per_page=100')).json.data.filter((m: any) => m.body === 'Thanks!' || m.body === 'STOP')
    expect(inbound.map((m: any) => m.sender)).toEqual([bia, bia])
    const contacts = (await srv.api(key, 'GET', '/contacts?per_page=100')).json.data
    expect(contacts.find((c: any) => c.phone === bia).consent_status).toBe('opted_out')
    expect(contacts.find((c: any) => c.phone === caio).consent_status).toBe('unknown')
    // no second contact under the WhatsApp ids
    expect(contacts.filter((c: any) => c.phone === `+${waIdOf(bia)}` || c.phone === `+${waIdOf(caio)}`)).toEqual([])
    const again = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, bia), body: 'One more thing' } })
    expect([again.status, again.json.code]).toEqual([422, 'recipient_opted_out'])
    // ... also when addressed by the id WhatsApp knows her under
    const byWaId = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, `+${waIdOf(bia)}`), body: 'One more thing' } })
    expect([byWaId.status, byWaId.json.code]).toEqual([422, 'recipient_opted_out'])
    // a send to Caio's WhatsApp id is a message to Caio (his contact, his number)
    const toCaio = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, `+${waIdOf(caio)}`), body: 'Your order shipped' } })
    expect([toCaio.status, toCaio.json.data.recipient, toCaio.json.data.contact_id]).toEqual([202, caio, contacts.find((c: any) => c.phone === caio).id])
  })

  test('stopping marketing messages in WhatsApp withdraws marketing consent; order updates still reach the person', async () => {
    const { key, conn } = await setup()
    const other = await setup()
    const [ann, ben, dan] = [newPhone(), newPhone(), newPhone()]
    for (const [phone, consent_status] of [[ann, 'opted_in'], [ben, 'opted_out'], [dan, 'opted_in']]) await srv.api(key, 'POST', '/contacts', { json: { phone, consent_status } })
    await srv.api(other.key, 'POST', '/contacts', { json: { phone: ann, consent_status: 'opted_in' } })
    const consent = async (k: string, phone: string) => (await srv.api(k, 'GET', '/contacts?per_page=100')).json.data.find((c: any) => c.phone === phone)?.consent_status
    const preference = (phone: string, value: string, category?: string) => preferenceEvent(phone.slice(1), value, category)
    // "Stop promotions": opted in → unknown, in this number's workspace only; an opted-out
    // contact stays opted out; a number that is no contact is not made one; resuming changes nothing
    const stranger = newPhone()
    for (const event of [preference(ann, 'stop'), preference(ben, 'stop'), preference(stranger, 'stop'), preference(dan, 'stop', 'other_category')]) expect((await deliver(srv.base, conn.id, event)).status).toBe(200)
    expect(await consent(key, ann)).toBe('unknown')
    expect(await consent(key, ben)).toBe('opted_out')
    expect(await consent(key, dan)).toBe('opted_in')
    expect(await consent(key, stranger)).toBeUndefined()
    expect(await consent(other.key, ann)).toBe('opted_in')
    expect((await deliver(srv.base, conn.id, preference(ann, 'resume'))).status).toBe(200)
    expect(await consent(key, ann)).toBe('unknown')
    const d = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
    const ledger = d.query("SELECT l.status, l.source FROM consent_ledger l JOIN contacts c ON c.id = l.contact_id WHERE c.phone = ? AND c.workspace_id = ? ORDER BY l.id").all(ann, conn.workspace_id)
    d.close()
    expect(ledger.at(-1)).toEqual({ status: 'unknown', source: 'cloud_api:marketing_stopped' })
    // marketing is refused now; an order update still goes out
    const promo = (await srv.api(key, 'POST', '/templates', { json: { name: 'Promo', category: 'marketing', body: 'Spring sale!', whatsapp: { name: 'spring_sale', language: 'en' } } })).json.data
    const refused = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: ann, template_id: promo.id } })
    expect([refused.status, refused.json.code]).toEqual([422, 'recipient_not_opted_in'])
    expect((await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, ann), body: 'Your order shipped' } })).status).toBe(202)

    // a marketing send Meta refuses because the person stopped marketing messages (131050)
    // withdraws their consent as well
    const sent = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: dan, template_id: promo.id } })
    await waitFor(async () => (await msg(key, sent.json.data.id)).status === 'sent')
    const wamid = wamidOf(sent.json.data.id)
    expect((await deliver(srv.base, conn.id, statusEvent(wamid, 'failed', [{ code: 131050, title: 'Unable to deliver the message. This recipient has chosen to stop receiving marketing messages.' }]))).status).toBe(200)
    await waitFor(async () => (await msg(key, sent.json.data.id)).status === 'failed')
    expect((await msg(key, sent.json.data.id)).error.code).toBe('cloud_api_131050')
    expect(await consent(key, dan)).toBe('unknown')
    // the same refusal as the answer to the send itself
    const eve = newPhone()
    await srv.api(key, 'POST', '/contacts', { json: { phone: eve, consent_status: 'opted_in' } })
    graph.state.failFor[eve.slice(1)] = [131050]
    const refusedNow = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: eve, template_id: promo.id } })
    await waitFor(async () => (await msg(key, refusedNow.json.data.id)).status === 'failed')
    expect((await msg(key, refusedNow.json.data.id)).error.code).toBe('cloud_api_131050')
    await waitFor(async () => (await consent(key, eve)) === 'unknown')
  })

  test('a photo, voice note or document a customer sends is downloaded, scanned and kept with the message', async () => {
    const { key, conn } = await setup()
    const from = newPhone()
    const now = () => String(Math.floor(Date.now() / 1000))
    const event = (type: string, media: Record<string, unknown>, wamid = `wamid.in-${crypto.randomUUID()}`, timestamp = now()) => {
      const e = inboundEvent(from.slice(1), '') as any
      e.entry[0].changes[0].value.messages[0] = { from: from.slice(1), id: wamid, timestamp, type, [type]: media }
      return e
    }
    const fileId = () => `in-${crypto.randomUUID()}`
    const inbound = async () => (await srv.api(key, 'GET', '/messages?direction=inbound&per_page=100')).json.data.filter((m: any) => m.sender === from)
    const download = async (id: string) => new Uint8Array(await (await fetch(`${srv.base}/api/v1/media/${id}/download`, { headers: { authorization: `Bearer ${key}` } })).arrayBuffer())

    // a photo with a caption and a document keep their files; the message lists them as attachments
    const photo = files.png()
    const [p, d] = [fileId(), fileId()]
    graph.state.inbound[p] = { bytes: photo }
    graph.state.inbound[d] = { bytes: files.pdf() }
    expect((await deliver(srv.base, conn.id, event('image', { id: p, mime_type: 'image/png', caption: 'The box arrived broken' }))).status).toBe(200)
    expect((await deliver(srv.base, conn.id, event('document', { id: d, mime_type: 'application/pdf', filename: 'warranty.pdf' }))).status).toBe(200)
    let logged = await inbound()
    expect(logged.map((m: any) => m.body)).toEqual(['[document message]', '[image message] The box arrived broken'])
    const [docId, photoId] = logged.map((m: any) => m.attachments[0])
    const media = (await srv.api(key, 'GET', `/media/${photoId}`)).json.data
    expect([media.mime_type, media.size]).toEqual(['image/png', photo.length])
    expect(await download(photoId)).toEqual(new Uint8Array(photo))
    expect((await srv.api(key, 'GET', `/media/${docId}`)).json.data).toMatchObject({ filename: 'warranty.pdf', mime_type: 'application/pdf' })
    // the token went to Meta for both the details and the file
    expect(graph.seen.filter((x) => x.path.endsWith(p)).map((x) => [x.path.split('/')[1], x.auth])).toEqual([['v21.0', `Bearer ${TOKEN}`], ['files', `Bearer ${TOKEN}`]])

    // not kept, the message still logged: malware, gone from Meta, over the workspace's limit
    // (not even downloaded), a URL that is not Meta's (the token is not sent there)
    const [bad, gone, big, foreign] = [fileId(), fileId(), fileId(), fileId()]
    graph.state.inbound[bad] = { bytes: EICAR }
    graph.state.inbound[gone] = { status: 404 }
    graph.state.inbound[big] = { bytes: new Uint8Array(17 * 1024 * 1024) }
    graph.state.inbound[foreign] = { bytes: files.png(), url: 'https://files.example.com/in-x' }
    for (const [id, type] of [[bad, 'document'], [gone, 'audio'], [big, 'video'], [foreign, 'image']] as const) {
      expect((await deliver(srv.base, conn.id, event(type, { id, mime_type: 'application/octet-stream' }))).status).toBe(200)
    }
    logged = await inbound()
    expect(logged.slice(0, 4).map((m: any) => [m.body, m.attachments])).toEqual([
      ['[image message]', []],
      ['[video message]', []],
      ['[audio message]', []],
      ['[document message]', []],
    ])
    expect(graph.seen.filter((x) => x.path === `/files/${big}`)).toHaveLength(0)
    await waitFor(() => srv.output.split('\n').filter((l) => l.includes('inbound file not kept') && l.includes(conn.id)).length === 4)

    // Meta failing for now: 500, so Meta delivers it again; then it is logged once, with its file
    const later = fileId()
    const voice = files.ogg()
    graph.state.inbound[later] = { status: 503 }
    const wamid = `wamid.in-${crypto.randomUUID()}`
    expect((await deliver(srv.base, conn.id, event('audio', { id: later, mime_type: 'audio/ogg; codecs=opus', voice: true }, wamid))).status).toBe(500)
    expect((await inbound()).length).toBe(6)
    graph.state.inbound[later] = { bytes: voice }
    expect((await deliver(srv.base, conn.id, event('audio', { id: later, voice: true }, wamid))).status).toBe(200)
    expect((await deliver(srv.base, conn.id, event('audio', { id: later, voice: true }, wamid))).status).toBe(200)
    logged = await inbound()
    expect(logged.length).toBe(7)
    expect(await download(logged[0].attachments[0])).toEqual(new Uint8Array(voice))
    // the copy delivered again was not downloaded again
    expect(graph.seen.filter((x) => x.path === `/files/${later}`)).toHaveLength(1)
    // still failing an hour after it was sent: the message is logged without its file
    const stale = fileId()
    graph.state.inbound[stale] = { status: 503 }
    const hourAgo = String(Math.floor(Date.now() / 1000) - 3601)
    expect((await deliver(srv.base, conn.id, event('image', { id: stale, caption: 'Still broken' }, undefined, hourAgo))).status).toBe(200)
    expect((await inbound())[0]).toMatchObject({ body: '[image message] Still broken', attachments: [] })
  })

  test('a reply, a button tap or a reaction names the message it answers (reply_to)', async () => {
    const { key, conn } = await setup()
    const to = newPhone()
    const out = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: await talking(conn.id, to), body: 'Your order #1001 ships tomorrow. Reply to change the day.' } })).json.data
    await waitFor(async () => (await msg(key, out.id)).status === 'sent')
    const wamid = wamidOf(out.id)
    const replying = (quoted: string | null, m: Record<string, unknown>) => {
      const e = inboundEvent(to.slice(1), '') as any
      const base = e.entry[0].changes[0].value.messages[0]
      e.entry[0].changes[0].value.messages[0] = { from: base.from, id: base.id, timestamp: base.timestamp, ...(quoted ? { context: { from: '15550001234', id: quoted } } : {}), ...m }
      return e
    }
    for (const event of [
      replying(wamid, { type: 'text', text: { body: 'Friday please' } }),
      replying(wamid, { type: 'button', button: { text: 'Change day', payload: 'Change day' } }),
      replying('wamid.not-ours', { type: 'text', text: { body: 'About something else' } }),
      replying(null, { type: 'text', text: { body: 'Hello' } }),
      replying(null, { type: 'reaction', reaction: { message_id: wamid, emoji: '👍' } }),
    ]) expect((await deliver(srv.base, conn.id, event)).status).toBe(200)
    const inbound = (await srv.api(key, 'GET', '/messages?direction=inbound&per_page=100')).json.data.filter((m: any) => m.sender === to)
    expect(inbound.map((m: any) => [m.body, m.reply_to])).toEqual([
      ['[reaction] 👍', out.id],
      ['Hello', null],
      ['About something else', null],
      ['Change day', out.id],
      ['Friday please', out.id],
      ['Hello', null], // (the customer wrote first: see talking)
    ])
    expect((await msg(key, out.id)).reply_to).toBeNull()
    // a reply quoting the second part of a message sent as two (the photo, then the invoice)
    const attachments = [{ media_id: await uploadMedia(key, 'photo.png', files.png()) }, { media_id: await uploadMedia(key, 'invoice.pdf', files.pdf()) }]
    const two = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, body: 'Your receipt', media: { attachments } } })).json.data
    await waitFor(async () => (await msg(key, two.id)).status === 'sent')
    const invoice = graph.seen.filter((s) => s.json?.biz_opaque_callback_data === two.id).at(-1)!.wamid!
    expect((await deliver(srv.base, conn.id, replying(invoice, { type: 'text', text: { body: 'Wrong address on this one' } }))).status).toBe(200)
    const last = (await srv.api(key, 'GET', '/messages?direction=inbound&per_page=1')).json.data[0]
    expect([last.body, last.reply_to]).toEqual(['Wrong address on this one', two.id])
  })

  test('an inbound message Meta delivers again (same wamid) is logged once', async () => {
    const { key, conn } = await setup()
    const from = newPhone()
    const event = inboundEvent(from.slice(1), 'Is my parcel on its way?')
    expect((await deliver(srv.base, conn.id, event)).status).toBe(200)
    // a retry after a timeout, and two copies arriving at once
    expect((await deliver(srv.base, conn.id, event)).status).toBe(200)
    expect((await Promise.all([deliver(srv.base, conn.id, event), deliver(srv.base, conn.id, event)])).map((r) => r.status)).toEqual([200, 200])
    const other = inboundEvent(from.slice(1), 'Is my parcel on its way?') // the same words in a new message
    expect((await deliver(srv.base, conn.id, other)).status).toBe(200)
    const logged = (await srv.api(key, 'GET', '/messages?direction=inbound&per_page=100')).json.data.filter((m: any) => m.sender === from)
    expect(logged.map((m: any) => m.body)).toEqual(['Is my parcel on its way?', 'Is my parcel on its way?'])
  })

  test('an inbound message that cannot be stored is answered 500 so Meta delivers it again; nothing is lost', async () => {
    const { key, conn } = await setup()
    const from = newPhone()
    // fault injection on the real database: inserts of this sender's messages fail until dropped
    const db = new Database(join(srv.dataDir, 'capstan.db'))
    db.run('PRAGMA busy_timeout = 5000') // the server may be committing at this moment
    db.run(`CREATE TRIGGER fail_inbound BEFORE INSERT ON messages WHEN NEW.sender = '${from}' BEGIN SELECT RAISE(ABORT, 'injected write failure'); END`)
    const event = inboundEvent(from.slice(1), 'Where is my order?')
    try {
      const refused = await deliver(srv.base, conn.id, event)
      expect(refused.status).toBe(500)
      expect(await refused.text()).not.toContain('injected')
    } finally {
      db.run('DROP TRIGGER fail_inbound')
      db.close()
    }
    // Meta's retry of the same payload is stored once
    expect((await deliver(srv.base, conn.id, event)).status).toBe(200)
    const logged = (await srv.api(key, 'GET', '/messages?direction=inbound&per_page=100')).json.data.filter((m: any) => m.sender === from)
    expect(logged.map((m: any) => m.body)).toEqual(['Where is my order?'])
  })

  test('a body over the JSON limit is 413 before its signature is checked, also when sent chunked', async () => {
    const { conn } = await setup()
    const big = new Uint8Array(2 * 1024 * 1024).fill(32)
    const declared = await fetch(`${srv.base}/hooks/whatsapp/${conn.id}`, { method: 'POST', headers: { 'x-hub-signature-256': 'sha256=00' }, body: big })
    expect(declared.status).toBe(413)
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < big.length; i += 64 * 1024) c.enqueue(big.subarray(i, i + 64 * 1024))
        c.close()
      },
    })
    const chunked = await fetch(`${srv.base}/hooks/whatsapp/${conn.id}`, { method: 'POST', headers: { 'x-hub-signature-256': 'sha256=00' }, body: stream })
    expect(chunked.status).toBe(413)
    expect(await chunked.json()).toEqual({ message: 'The request body is too large.', code: 'payload_too_large' })
    expect((await srv.request('GET', '/healthz')).status).toBe(200)
  })
})

/**
 * Signed events of any shape — Meta's envelope around messages, statuses, contacts, errors and
 * preferences whose fields are random (types, nesting, NUL characters, ids too long to store) —
 * are never answered 5xx on a healthy database: a 5xx makes Meta deliver the event again for days.
 */
async function signedEventsNeverFail(on: TestServer, connId: string, key: string, runs: number) {
  const text = fc.oneof(fc.string({ maxLength: 20 }), fc.constantFrom('', 'STOP', 'a\u0000b', 'x'.repeat(3000), '\ud800', '15550001111'))
  const leaf = fc.oneof(text, fc.integer(), fc.double(), fc.boolean(), fc.constant(null))
  const anything = fc.oneof(leaf, fc.array(leaf, { maxLength: 3 }), fc.dictionary(text, leaf, { maxKeys: 3 }))
  // mostly the shape Meta sends, now and then anything at all in its place
  const mostly = <T,>(arb: fc.Arbitrary<T>) => fc.oneof({ arbitrary: arb, weight: 6 }, { arbitrary: anything as fc.Arbitrary<unknown>, weight: 1 })
  const from = mostly(fc.constantFrom('15550001111', '+15550002222', '447700900123'))
  const id = mostly(fc.oneof(fc.uuid().map((u) => `wamid.${u}`), fc.constantFrom('wamid.same', 'w'.repeat(300))))
  const message = fc.record(
    {
      from,
      id,
      timestamp: mostly(fc.constant(metaNow())),
      type: mostly(fc.constantFrom('text', 'image', 'reaction', 'location', 'contacts', 'system', 'interactive', 'button', 'unsupported')),
      text: mostly(fc.record({ body: mostly(text) })),
      reaction: mostly(fc.record({ emoji: mostly(text), message_id: anything })),
      location: mostly(fc.record({ latitude: mostly(fc.double()), longitude: mostly(fc.double()), name: mostly(text) })),
      contacts: anything,
      system: mostly(fc.record({ body: mostly(text) })),
      interactive: mostly(fc.record({ button_reply: mostly(fc.record({ title: mostly(text) })) })),
      button: mostly(fc.record({ text: mostly(text) })),
      image: mostly(fc.record({ id: mostly(text), caption: mostly(text) })),
      context: mostly(fc.record({ id: anything })),
    },
    { requiredKeys: ['from', 'id', 'type'] },
  )
  const status = fc.record({ id, status: mostly(fc.constantFrom('sent', 'delivered', 'read', 'failed')), timestamp: anything, errors: anything, biz_opaque_callback_data: anything }, { requiredKeys: ['id', 'status'] })
  const value = fc.record({
    messaging_product: fc.constant('whatsapp'),
    messages: mostly(fc.array(message, { maxLength: 3 })),
    statuses: mostly(fc.array(status, { maxLength: 3 })),
    contacts: mostly(fc.array(fc.record({ wa_id: from, profile: mostly(fc.record({ name: mostly(text) })) }), { maxLength: 2 })),
    errors: anything,
    user_preferences: mostly(fc.array(fc.record({ wa_id: from, category: mostly(fc.constant('marketing_messages')), value: mostly(fc.constantFrom('stop', 'resume')) }), { maxLength: 2 })),
  })
  const event = fc.record({ object: fc.constant('whatsapp_business_account'), entry: mostly(fc.array(fc.record({ id: fc.constant('WABA'), changes: mostly(fc.array(fc.record({ field: fc.constant('messages'), value: mostly(value) }), { maxLength: 2 })) }), { maxLength: 2 })) })
  await fc.assert(
    fc.asyncProperty(event, async (body) => {
      const r = await deliver(on.base, connId, body)
      expect(r.status).toBeLessThan(500)
    }),
    { numRuns: runs },
  )
  // (the events reached the log: not all refused before anything was stored)
  expect((await on.api(key, 'GET', '/messages?direction=inbound&per_page=1')).json.meta.total).toBeGreaterThan(runs / 10)
}

describe('signed events of any shape from Meta', () => {
  test('are never answered 5xx (SQLite)', async () => {
    const { conn, key } = await setup()
    await signedEventsNeverFail(srv, conn.id, key, 300)
  }, 120_000)
})

describe('two instances on one PostgreSQL', () => {
  let dir: string
  let pg: PrivatePostgres
  let databases = 0
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'capstan-cloud-pg-'))
    pg = await PrivatePostgres.start(join(dir, 'pg'))
  })
  afterAll(async () => {
    await pg.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  /** A new database on the private server, and what each instance on it needs (`env` besides). */
  async function installation(env: Record<string, string> = {}) {
    const url = await pg.createDatabase(`cloud${++databases}`)
    // instances of one installation share the key that seals the numbers' secrets
    return { url, env: { CAPSTAN_DATABASE_URL: url, CAPSTAN_SECRET_KEY: 'cloud-test-secret-key-0123456789abcdef012345', CAPSTAN_KEY_RATE_LIMIT: '10000', CAPSTAN_LOG_LEVEL: 'warn', ...env } }
  }

  /**
   * Instances A and B on a new database, and a Cloud API number (`config` besides) that A holds:
   * its lease is A's before B starts, so A sends and waits for Meta's word. Both stop after `body`.
   */
  async function numberOfA(config: Record<string, unknown>, body: (t: { a: TestServer; b: TestServer; db: InstanceType<typeof Bun.SQL>; key: string; connId: string }) => Promise<void>) {
    const { url, env } = await installation()
    const a = await TestServer.start({ env })
    let b: TestServer | null = null
    const db = new Bun.SQL(url, { max: 1 })
    try {
      const { key, conn } = await setup(config, a)
      await waitFor(async () => (await db`SELECT count(*)::int AS n FROM number_leases WHERE connection_id = ${conn.id}`)[0].n === 1)
      b = await TestServer.start({ env })
      await body({ a, b, db, key, connId: conn.id })
    } finally {
      await db.close()
      await b?.close()
      await a.close()
    }
  }

  test.concurrent('a send whose answer was lost is recorded as sent when the status naming it reaches the instance that did not send it', async () => {
    await numberOfA({}, async ({ a, b, db, key, connId }) => {
      const { id, to } = await sendLosingAnswer(key, connId, { on: a })
      await Bun.sleep(300)
      expect((await msg(key, id, a)).status).toBe('sending')
      // Meta's status names it, and the load balancer hands it to B
      const wamid = `wamid.${crypto.randomUUID()}`
      expect((await deliver(b.base, connId, statusEvent(wamid, 'delivered', undefined, id))).status).toBe(200)
      const done = await waitFor(async () => {
        const m = await msg(key, id, b)
        return m.status === 'delivered' ? m : null
      }, 10_000)
      expect(done.timeline.map((e: any) => e.status)).toEqual(['queued', 'sending', 'sent', 'delivered'])
      expect(done.error).toBeNull()
      expect((await db`SELECT external_id FROM messages WHERE id = ${id}`)[0].external_id).toBe(wamid)
      expect(graph.seen.filter((s) => s.json?.to === to.slice(1))).toHaveLength(1)
    })
  }, 60_000)

  test.concurrent('an instance killed while Meta holds its send unanswered: another takes the number over, waits for Meta to name the send, records it sent, and never sends it again', async () => {
    await numberOfA({ confirm_wait_seconds: 60 }, async ({ a, b, db, key, connId }) => {
      const { id, to } = await sendLosingAnswer(key, connId, { on: a, fate: 'hang' })
      const holder = async () => (await db`SELECT owner FROM number_leases WHERE connection_id = ${connId}`)[0].owner as string
      const killed = await holder()
      await a.stop('SIGKILL')
      // the dead instance's lease runs out (at once here: the clock moved on; waiting the real 15 s
      // out is test/cluster.test.ts's), B takes the number over and, not knowing whether Meta has
      // the send, waits for its word
      await db`UPDATE number_leases SET expires_at = 0 WHERE owner = ${killed}`
      await waitFor(async () => (await holder()) !== killed, 15_000)
      await Bun.sleep(500)
      expect((await db`SELECT status FROM messages WHERE id = ${id}`)[0].status).toBe('sending')
      const wamid = `wamid.${crypto.randomUUID()}`
      expect((await deliver(b.base, connId, statusEvent(wamid, 'sent', undefined, id))).status).toBe(200)
      const sent = await waitFor(async () => {
        const m = await msg(key, id, b)
        return m.status === 'sent' ? m : null
      }, 10_000)
      expect(sent.error).toBeNull()
      expect((await db`SELECT external_id FROM messages WHERE id = ${id}`)[0].external_id).toBe(wamid)
      await Bun.sleep(1500) // past a retry's backoff: nothing more goes out
      expect(graph.seen.filter((s) => s.json?.to === to.slice(1))).toHaveLength(1)
    })
  }, 90_000)

  test.concurrent('an instance stopped gracefully while Meta asks to slow down hands its send back: the other takes the number over and sends it, once', async () => {
    await numberOfA({}, async ({ a, b, db, key, connId }) => {
      // refused twice on A, which now waits 15 s before it tries again
      const { id, tries } = await waitingOutSlowDown(a, key, connId, 'Handed over')
      await a.stop('SIGTERM')
      const sent = await waitFor(async () => {
        const m = await msg(key, id, b)
        return m.status === 'sent' ? m : null
      }, 15_000)
      expect(sent.error).toBeNull()
      expect(sent.timeline.map((e: any) => e.status)).toEqual(['queued', 'sending', 'sent'])
      expect((await db`SELECT resend FROM messages WHERE id = ${id}`)[0].resend).toBe(0)
      await Bun.sleep(1000)
      expect(tries()).toHaveLength(3)
    })
  }, 60_000)

  test.concurrent('a message from Meta holding a NUL character (which PostgreSQL cannot store) is taken, the NUL kept as U+FFFD: not refused with 500 for Meta to deliver again for days', async () => {
    const { env } = await installation()
    const a = await TestServer.start({ env })
    try {
      const { key, conn } = await setup({}, a)
      const from = newPhone()
      const event = inboundEvent(from.slice(1), 'Order\u0000 42?', 'A\u0000da')
      expect((await deliver(a.base, conn.id, event)).status).toBe(200)
      const logged = (await a.api(key, 'GET', '/messages?direction=inbound&per_page=100')).json.data.filter((m: any) => m.sender === from)
      expect(logged.map((m: any) => m.body)).toEqual(['Order\uFFFD 42?'])
    } finally {
      await a.close()
    }
  }, 60_000)

  test.concurrent('an instance that stands still (SIGSTOP) while Meta asks it to slow down: the other takes the number and sends the message; woken, the first finds it taken and stands back — Meta gets it once', async () => {
    await numberOfA({}, async ({ a, b, db, key, connId }) => {
      // refused twice on A, which now waits 15 s before it tries again, the send marked as waiting
      const { id, tries } = await waitingOutSlowDown(a, key, connId, 'Still there?')
      await waitFor(async () => (await db`SELECT resend FROM messages WHERE id = ${id}`)[0].resend === 1, 5_000)
      const holder = async () => (await db`SELECT owner FROM number_leases WHERE connection_id = ${connId}`)[0].owner as string
      const stood = await holder()
      const waitEnds = Date.now() + 15_000
      process.kill(a.proc.pid, 'SIGSTOP')
      try {
        // its lease runs out; B takes the number over and, finding the send marked, sends it
        await waitFor(async () => (await holder()) !== stood, 30_000)
        const sent = await waitFor(async () => {
          const m = await msg(key, id, b)
          return m.status === 'sent' ? m : null
        }, 15_000)
        expect(sent.timeline.map((e: any) => e.status)).toEqual(['queued', 'sending', 'sent'])
      } finally {
        process.kill(a.proc.pid, 'SIGCONT')
      }
      // A wakes (past its 15 s wait, or it comes to its end): the send is no longer its to make
      await Bun.sleep(Math.max(0, waitEnds - Date.now()) + 3000)
      expect(tries()).toHaveLength(3)
      const row = (await db`SELECT status, resend, external_id FROM messages WHERE id = ${id}`)[0]
      expect([row.status, row.resend, row.external_id]).toEqual(['sent', 0, tries()[2]!.wamid])
      // A is alive and serves
      expect((await a.api(key, 'GET', `/messages/${id}`)).json.data.status).toBe('sent')
    })
  }, 90_000)

  test('signed events of any shape from Meta are never answered 5xx (PostgreSQL)', async () => {
    const { env } = await installation()
    const a = await TestServer.start({ env })
    try {
      const { conn, key } = await setup({}, a)
      await signedEventsNeverFail(a, conn.id, key, 300)
    } finally {
      await a.close()
    }
  }, 120_000)

  test('an inbound message Meta delivers several times at once, to both instances, is logged once and announced once', async () => {
    const { env } = await installation()
    const a = await TestServer.start({ env })
    const b = await TestServer.start({ env })
    try {
      const { key, conn, ws } = await setup({}, a)
      const received: any[] = []
      const hook = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: async (req) => (received.push(await req.json()), new Response('{}')) })
      expect((await a.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: `http://127.0.0.1:${hook.port}/hook`, events: ['message.received'] })).status).toBe(201)
      for (let round = 0; round < 3; round++) {
        const from = newPhone()
        const event = inboundEvent(from.slice(1), `Where is order ${round}?`)
        const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => deliver((i % 2 ? b : a).base, conn.id, event)))
        expect(answers.map((r) => r.status)).toEqual(Array(8).fill(200))
        const logged = (await a.api(key, 'GET', '/messages?direction=inbound&per_page=100')).json.data.filter((m: any) => m.sender === from)
        expect(logged.map((m: any) => m.body)).toEqual([`Where is order ${round}?`])
        await waitFor(() => received.some((e) => e.data?.sender === from))
        await Bun.sleep(300)
        expect(received.filter((e) => e.data?.sender === from)).toHaveLength(1)
      }
      hook.stop(true)
    } finally {
      await b.close()
      await a.close()
    }
  }, 60_000)

  test("Meta's read and delivered for one message at once, on two instances: the message ends read (the delivered, decided from sent while the read was committing, does not take it back), with both times", async () => {
    await numberOfA({}, async ({ a, b, db, key, connId }) => {
      const to = newPhone()
      const r = await a.api(key, 'POST', '/messages', { json: { connection_id: connId, recipient: await talking(connId, to, a.base), body: 'Your order shipped' } })
      const sent = await waitFor(async () => ((await msg(key, r.json.data.id, a)).status === 'sent' ? msg(key, r.json.data.id, a) : null))
      const wamid = (await db`SELECT external_id FROM messages WHERE id = ${sent.id}`)[0].external_id as string
      // fault injection on the real database: the read holds the message's row half a second before it commits
      await holdRows(db, 'slow_read', 'BEFORE UPDATE ON messages', "NEW.status = 'read'")
      // Meta's times in the order it reports them (delivered, then read), whichever arrives first
      const [deliveredEvent, readEvent] = [statusEvent(wamid, 'delivered'), statusEvent(wamid, 'read')]
      const read = deliver(a.base, connId, readEvent)
      await Bun.sleep(150)
      expect((await deliver(b.base, connId, deliveredEvent)).status).toBe(200)
      expect((await read).status).toBe(200)
      const done = await msg(key, sent.id, b)
      expect(done.status).toBe('read')
      expect(done.timeline.map((e: any) => e.status)).toEqual(['queued', 'sending', 'sent', 'delivered', 'read'])
    })
  }, 60_000)

  test('a database that turns read-only for a while (a failover under way): requests answer 503, Meta is told to deliver again, and a send Meta took meanwhile is recorded sent once it is writable again, once', async () => {
    await numberOfA({}, async ({ a, b, db, key, connId }) => {
      const to = newPhone()
      graph.state.failFor[to.slice(1)] = ['hold']
      const r = await a.api(key, 'POST', '/messages', { json: { connection_id: connId, recipient: await talking(connId, to, a.base), body: 'Your order shipped' } })
      expect(r.status).toBe(202)
      const id = r.json.data.id as string
      await waitFor(() => graph.seen.some((s) => s.json?.to === to.slice(1)))
      // Meta has the send; the database turns read-only (what a primary being demoted, or a standby, answers every write)
      const readOnly = async (on: boolean) => {
        await db.unsafe(on ? 'ALTER SYSTEM SET default_transaction_read_only = on' : 'ALTER SYSTEM RESET default_transaction_read_only')
        await db.unsafe('SELECT pg_reload_conf()')
        await Bun.sleep(300)
      }
      const customer = newPhone()
      const inbound = inboundEvent(customer.slice(1), 'Is my order on its way?')
      await readOnly(true)
      try {
        // (raw requests: the answers of an outage are not the document's)
        const raw = (on: TestServer, method: string, path: string, json?: unknown) =>
          fetch(`${on.base}/api/v1${path}`, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: json === undefined ? undefined : JSON.stringify(json) }).then(async (res) => ({ status: res.status, json: (await res.json()) as { code?: string } }))
        for (const on of [a, b]) {
          const refused = await raw(on, 'POST', '/contacts', { phone: newPhone() })
          expect([refused.status, refused.json.code]).toEqual([503, 'database_unavailable'])
          // and not ready, saying why: a load balancer holds requests back
          const ready = await fetch(`${on.base}/readyz`)
          expect([ready.status, ((await ready.json()) as { database: string }).database]).toEqual([503, 'read_only'])
        }
        // a message Meta brings meanwhile is not acknowledged: Meta delivers it again later
        expect((await deliver(b.base, connId, inbound)).status).toBe(500)
        // Meta answers the send now: its outcome cannot be written yet, and is kept
        graph.releaseHeld()
        await Bun.sleep(1500)
        expect((await db`SELECT status FROM messages WHERE id = ${id}`)[0].status).toBe('sending')
      } finally {
        await readOnly(false)
      }
      const sent = await waitFor(async () => {
        const m = await msg(key, id, a)
        return m.status === 'sent' ? m : null
      }, 15_000)
      expect(sent.error).toBeNull()
      expect((await db`SELECT external_id FROM messages WHERE id = ${id}`)[0].external_id).toBe(graph.seen.find((s) => s.json?.to === to.slice(1))!.wamid)
      expect((await a.api(key, 'POST', '/contacts', { json: { phone: newPhone() } })).status).toBe(201)
      const ready = await fetch(`${a.base}/readyz`)
      expect([ready.status, ((await ready.json()) as { database: string }).database]).toEqual([200, 'ok'])
      // Meta's delivery again is taken now, and logged once
      expect((await deliver(b.base, connId, inbound)).status).toBe(200)
      const logged = (await a.api(key, 'GET', '/messages?direction=inbound&per_page=100')).json.data.filter((m: any) => m.sender === customer)
      expect(logged.map((m: any) => m.body)).toEqual(['Is my order on its way?'])
      await Bun.sleep(1000)
      expect(graph.seen.filter((s) => s.json?.to === to.slice(1))).toHaveLength(1)
    })
  }, 60_000)

  test("bad signatures count against the failed-auth limit in total, whichever instance each reaches", async () => {
    const { env } = await installation({ CAPSTAN_AUTH_FAIL_LIMIT: '6' })
    const a = await TestServer.start({ env })
    const b = await TestServer.start({ env })
    try {
      const { conn } = await setup({}, a)
      const answers: number[] = []
      for (let i = 0; i < 10; i++) answers.push((await deliver((i % 2 ? b : a).base, conn.id, inboundEvent('15550001111', 'hi'), 'wrong-secret')).status)
      expect(answers).toEqual([401, 401, 401, 401, 401, 401, 429, 429, 429, 429])
      // over the limit, a good signature from that address waits too, on either instance
      for (const srv of [a, b]) expect((await deliver(srv.base, conn.id, inboundEvent('15550001111', 'hi'))).status).toBe(429)
    } finally {
      await b.close()
      await a.close()
    }
  }, 60_000)
})
