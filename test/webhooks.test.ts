/** Webhooks (CONTRACT §5): Standard Webhooks signing, outbox retries, restarts, disabling. */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { migrate } from '../src/db/open'
import { databaseAtSchema } from './support/schema'
import { Webhook } from 'standardwebhooks'
import { EVENT_TYPES, RETRY_SCHEDULE_S } from '../src/modules/webhooks/service'
import { eachTurn, inProcess } from './support/inproc'
import { TestServer, newPhone } from './support/server'
import { waitFor } from './support/wait'
import { storesOf } from './support/stores'

setDefaultTimeout(60_000)

interface Received {
  headers: Record<string, string>
  body: string
  json: any
  at: number
}

/**
 * A real HTTP receiver on 127.0.0.1 that records requests (as they arrive) and answers planned
 * statuses, `answerAfterMs` later.
 */
function receiver(answerAfterMs = 0) {
  const got: Received[] = []
  const plan: number[] = []
  const server = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      const body = await req.text()
      got.push({ headers: Object.fromEntries(req.headers), body, json: JSON.parse(body), at: Date.now() })
      if (answerAfterMs) await Bun.sleep(answerAfterMs)
      return new Response('{}', { status: plan.shift() ?? 200 })
    },
  })
  return { url: `http://127.0.0.1:${server.port}/hook`, got, plan, stop: () => server.stop(true) }
}


/**
 * In-process services (controlled clock) with a real receiver subscribed to `events` through one
 * workspace's endpoint, and a sandbox number (`connection` adds to it); both closed after `run`.
 */
type InProcess = Awaited<ReturnType<typeof inProcess>>
type Hooked = { env: InProcess; svc: InProcess['svc']; clock: InProcess['clock']; rx: ReturnType<typeof receiver>; ws: { id: string }; hook: Awaited<ReturnType<InProcess['svc']['webhooks']['create']>>; conn: { id: string } }
async function hooked(events: string[], connection: Record<string, unknown>, run: (t: Hooked) => Promise<void>) {
  const env = await inProcess()
  const rx = receiver()
  try {
    const { svc } = env
    const ws = await svc.workspaces.create({ name: 'Hooked' })
    const hook = await svc.webhooks.create(ws.id, rx.url, events)
    const conn = await svc.connections.create(ws.id, { phone: '+15550000099', driver: 'sandbox', ...connection } as any)
    await run({ env, svc, clock: env.clock, rx, ws, hook, conn })
  } finally {
    rx.stop()
    await env.close()
  }
}

/** The Standard Webhooks headers of a received request, as the library's verify takes them. */
const signedHeaders = (r: Received) => ({ 'webhook-id': r.headers['webhook-id']!, 'webhook-timestamp': r.headers['webhook-timestamp']!, 'webhook-signature': r.headers['webhook-signature']! })

/** Whether the standardwebhooks library accepts a received request with `secret`. */
function verifies(secret: string, r: Received): boolean {
  try {
    new Webhook(secret).verify(r.body, signedHeaders(r))
    return true
  } catch {
    return false
  }
}


const FAST = { hourly_cap: 1000, daily_cap: 10000, min_gap_seconds: 0, max_gap_seconds: 0 }

let srv: TestServer
beforeAll(async () => {
  srv = await TestServer.start()
})
afterAll(() => srv.close())

async function setup(config: Record<string, unknown>, events?: string[]) {
  const rx = receiver()
  const t = await srv.tenant()
  await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: FAST } })
  const hook = await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: rx.url, ...(events ? { events } : {}) })
  expect(hook.status).toBe(201)
  const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config })).json.data
  return { ...t, rx, hook: hook.json.data, conn }
}

describe('delivery', () => {
  test('events arrive signed; the standardwebhooks library verifies them', async () => {
    const { key, rx, hook, conn } = await setup({ delivered_after_ms: 50, read_after_ms: 100, fail_recipients: [] })
    expect(hook.secret).toMatch(/^whsec_[A-Za-z0-9+/]+={0,2}$/)
    expect(Buffer.from(hook.secret.slice(6), 'base64')).toHaveLength(32)
    const msg = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'hook me' } })).json.data
    await waitFor(() => rx.got.length >= 3)
    const wh = new Webhook(hook.secret)
    const types = rx.got.map((r) => r.json.type)
    expect(types).toEqual(['message.sent', 'message.delivered', 'message.read'])
    for (const r of rx.got) {
      const verified = wh.verify(r.body, signedHeaders(r)) as any
      expect(verified.data.id).toBe(msg.id)
      expect(r.headers['content-type']).toContain('application/json')
      expect(typeof r.json.timestamp).toBe('string')
    }
    expect(rx.got.map((r) => r.json.data.status)).toEqual(['sent', 'delivered', 'read'])
    expect(new Set(rx.got.map((r) => r.headers['webhook-id'])).size).toBe(3)
    // a tampered body does not verify
    expect(() => wh.verify(rx.got[0]!.body.replace('hook me', 'hook you'), signedHeaders(rx.got[0]!))).toThrow()
    rx.stop()
  })

  test('an endpoint gets only the events it subscribed to; failed and received are reported', async () => {
    const bad = newPhone()
    const { key, rx, conn } = await setup({ delivered_after_ms: 20, read_after_ms: null, fail_recipients: [bad] }, ['message.failed', 'message.received'])
    await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'ok' } })
    const failed = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: bad, body: 'nope' } })).json.data
    const inbound = (await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'hi' })).json.data
    await waitFor(() => rx.got.length >= 2)
    await Bun.sleep(300)
    const byType = Object.fromEntries(rx.got.map((r) => [r.json.type, r.json.data]))
    expect(Object.keys(byType).sort()).toEqual(['message.failed', 'message.received'])
    expect(byType['message.failed'].id).toBe(failed.id)
    expect(byType['message.failed'].error.code).toBe('recipient_unreachable')
    expect(byType['message.received'].id).toBe(inbound.id)
    rx.stop()
  })

  test('contact.consent_changed: an opt-in through the API and a STOP reply each arrive with from, to and source; no change, no event', async () => {
    const { ws, key, keyId, rx, conn } = await setup({ delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }, ['contact.consent_changed', 'message.received'])
    const phone = newPhone()
    const created = await srv.api(key, 'POST', '/contacts', { json: { phone, name: 'Ada', consent_status: 'opted_in' } })
    await waitFor(() => rx.got.length === 1)
    // the source names the key by its public id (the part of its prefix after cap_)
    const prefix: string = (await srv.admin('GET', `/workspaces/${ws.id}/keys`)).json.data.find((k: any) => k.id === keyId).prefix
    expect(rx.got[0]!.json).toMatchObject({
      type: 'contact.consent_changed',
      data: { id: created.json.data.id, phone, name: 'Ada', consent_status: 'opted_in', consent_change: { from: null, to: 'opted_in', source: `api_key:${prefix.slice('cap_'.length)}` } },
    })
    // the same consent again, or a name alone: nothing changed, nothing sent
    await srv.api(key, 'POST', '/contacts', { json: { phone, consent_status: 'opted_in' } })
    await srv.api(key, 'POST', '/contacts', { json: { phone, name: 'Ada L.' } })
    // the customer replies STOP: the message, then the opt-out it made
    const stop = (await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: phone, body: ' stop ' })).json.data
    await waitFor(() => rx.got.length === 3)
    expect(rx.got.map((r) => r.json.type)).toEqual(['contact.consent_changed', 'message.received', 'contact.consent_changed'])
    expect(rx.got[2]!.json.data).toMatchObject({ phone, name: 'Ada L.', consent_status: 'opted_out', consent_change: { from: 'opted_in', to: 'opted_out', source: `inbound:${stop.id}` } })
    // a second STOP changes nothing
    await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: phone, body: 'STOP' })
    await waitFor(() => rx.got.length === 4)
    await Bun.sleep(300)
    expect(rx.got.map((r) => r.json.type).slice(3)).toEqual(['message.received'])
    // the contact list and the events agree
    expect((await srv.api(key, 'GET', `/contacts?phone=${encodeURIComponent(phone)}`)).json.data[0].consent_status).toBe('opted_out')
    rx.stop()
  })

  test('contact.consent_changed for stopped promotions (controlled clock, real receiver)', async () => {
    await hooked(['contact.consent_changed'], { phone: '+15550000399' }, async ({ svc, rx, ws, conn }) => {
      await svc.contacts.upsert(ws.id, { phone: '+15550000400', consent_status: 'opted_in' }, 'test')
      await waitFor(() => rx.got.length === 1)
      expect(await svc.messages.marketingStopped(conn.id, '+15550000400', 'cloud_api:marketing_stopped')).toBe(true)
      await waitFor(() => rx.got.length === 2)
      expect(rx.got[1]!.json.data).toMatchObject({ phone: '+15550000400', consent_status: 'unknown', consent_change: { from: 'opted_in', to: 'unknown', source: 'cloud_api:marketing_stopped' } })
      expect(await svc.messages.marketingStopped(conn.id, '+15550000400', 'cloud_api:marketing_stopped')).toBe(false)
      await Bun.sleep(200)
      expect(rx.got).toHaveLength(2)
    })
  })

  test('the OpenAPI document describes each event type (webhooks), field for field as the events are sent', async () => {
    const doc = (await srv.request('GET', '/openapi.json')).json
    expect(Object.keys(doc.webhooks)).toEqual([...EVENT_TYPES])
    const bad = newPhone()
    const { key, rx, conn } = await setup({ delivered_after_ms: 20, read_after_ms: 40, fail_recipients: [bad] })
    await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'documented' } })
    await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: bad, body: 'refused' } })
    const phone = newPhone()
    await srv.api(key, 'POST', '/contacts', { json: { phone, consent_status: 'opted_in' } })
    await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: phone, body: 'STOP' })
    await waitFor(() => rx.got.some((r) => r.json.type === 'message.read'))
    await srv.admin('PATCH', `/connections/${conn.id}`, { status: 'offline' })
    const types = ['message.sent', 'message.delivered', 'message.read', 'message.failed', 'message.received', 'contact.consent_changed', 'connection.status_changed']
    await waitFor(() => types.every((t) => rx.got.some((r) => r.json.type === t)))
    for (const t of types) {
      const event = rx.got.find((r) => r.json.type === t)!.json
      const op = doc.webhooks[t].post
      const schema = op.requestBody.content['application/json'].schema
      expect([t, schema.properties.type.const]).toEqual([t, t])
      expect([t, Object.keys(event).sort()]).toEqual([t, Object.keys(schema.properties).sort()])
      expect([t, Object.keys(event.data).sort()]).toEqual([t, Object.keys(schema.properties.data.properties).sort()])
      expect(op.parameters.map((p: any) => p.name)).toEqual(['webhook-id', 'webhook-timestamp', 'webhook-signature'])
    }
    const change = rx.got.find((r) => r.json.type === 'contact.consent_changed')!.json.data.consent_change
    expect(Object.keys(change).sort()).toEqual(Object.keys(doc.webhooks['contact.consent_changed'].post.requestBody.content['application/json'].schema.properties.data.properties.consent_change.properties).sort())
    rx.stop()
  })

  test('a receiver that hangs holds up only its own endpoint: at most 8 of its deliveries under way, another workspace\'s events go out at once', async () => {
    const hanging = receiver(20_000)
    const a = await srv.tenant()
    const hookA = (await srv.admin('POST', `/workspaces/${a.ws.id}/webhooks`, { url: hanging.url, events: ['message.received'] })).json.data
    const connA = (await srv.admin('POST', `/workspaces/${a.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
    for (let i = 0; i < 40; i++) await srv.admin('POST', `/connections/${connA.id}/sandbox/inbound`, { from: newPhone(), body: `backlog ${i}` })
    await waitFor(() => hanging.got.length >= 8)
    // another workspace's event, written after all forty
    const { rx, ws, conn } = await setup({ delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }, ['message.received'])
    const t0 = Date.now()
    const inbound = (await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'not held up' })).json.data
    await waitFor(() => rx.got.length === 1, 3000)
    expect(rx.got[0]!.json.data.id).toBe(inbound.id)
    expect(Date.now() - t0).toBeLessThan(3000)
    expect(ws.id).not.toBe(a.ws.id)
    // the hanging receiver never had more than its share
    await Bun.sleep(300)
    expect(hanging.got.length).toBe(8)
    // removing it fails what it still had pending
    expect((await srv.admin('DELETE', `/webhooks/${hookA.id}`)).status).toBe(204)
    hanging.stop()
    rx.stop()
  }, 30_000)

  test('connection.status_changed: a number taken offline by its network or the operator, and back online; no config in it; a reason alone changing sends nothing', async () => {
    await hooked(['connection.status_changed'], { phone: '+15550000499', name: 'Shop', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } }, async ({ svc, rx, conn }) => {
      // the network refuses its token
      await svc.connections.setStatus(conn.id, 'offline', 'the access token was rejected')
      await waitFor(() => rx.got.length === 1)
      expect(rx.got[0]!.json).toMatchObject({
        type: 'connection.status_changed',
        data: { id: conn.id, phone: '+15550000499', name: 'Shop', driver: 'sandbox', status: 'offline', previous_status: 'online', status_reason: 'the access token was rejected' },
      })
      expect(Object.keys(rx.got[0]!.json.data)).not.toContain('config')
      // a new reason while still offline: no event
      await svc.connections.setStatus(conn.id, 'offline', 'still rejected')
      // the operator takes it online again
      await svc.connections.patch(conn.id, { status: 'online' })
      await waitFor(() => rx.got.length === 2)
      await Bun.sleep(200)
      expect(rx.got.map((r) => [r.json.data.previous_status, r.json.data.status, r.json.data.status_reason])).toEqual([
        ['online', 'offline', 'the access token was rejected'],
        ['offline', 'online', null],
      ])
      // a change that leaves the status as it was: nothing
      await svc.connections.patch(conn.id, { name: 'Shop 2' })
      await Bun.sleep(200)
      expect(rx.got).toHaveLength(2)
    })
  })

  test.concurrent('a failed delivery is retried after 5 s with the same webhook-id; history shows the attempts', async () => {
    const { key, rx, hook, conn } = await setup({ delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }, ['message.sent'])
    rx.plan.push(500)
    await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'retry' } })
    await waitFor(() => rx.got.length >= 2, 20_000)
    expect(rx.got[1]!.headers['webhook-id']).toBe(rx.got[0]!.headers['webhook-id'])
    const gap = rx.got[1]!.at - rx.got[0]!.at
    expect(gap).toBeGreaterThanOrEqual(4_500)
    expect(gap).toBeLessThan(9_000)
    // the receiver counts the request before Capstan has read its answer and recorded it
    const deliveries = await waitFor(async () => {
      const d = (await srv.admin('GET', `/webhooks/${hook.id}/deliveries`)).json.data
      return d[0]?.status === 'delivered' ? d : null
    }, 2000)
    expect(deliveries).toHaveLength(1)
    expect(deliveries[0]).toMatchObject({ type: 'message.sent', status: 'delivered', attempts: 2, last_status_code: 200 })
    rx.stop()
  }, 30_000)
})

/**
 * On `server`: a workspace with a webhook for message.received to `rx`, a sandbox number and one
 * inbound message; resolves with the message once `rx` has its first delivery.
 */
async function inboundDelivered(server: TestServer, rx: ReturnType<typeof receiver>) {
  const t = await server.tenant()
  await server.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: rx.url, events: ['message.received'] })
  const conn = (await server.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
  const inbound = (await server.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'hello' })).json.data
  await waitFor(() => rx.got.length >= 1)
  return inbound
}

/** The delivery rows in a stopped server's database file. */
function deliveryRows(server: TestServer, columns: string) {
  const db = new Database(join(server.dataDir, 'capstan.db'), { readonly: true })
  const rows = db.query(`SELECT ${columns} FROM webhook_deliveries`).all()
  db.close()
  return rows
}

describe('durability and administration', () => {
  test.concurrent('pending deliveries survive a restart', async () => {
    const dataSrv = await TestServer.start()
    try {
      const rx = receiver()
      rx.plan.push(503)
      const inbound = await inboundDelivered(dataSrv, rx)
      await dataSrv.stop('SIGKILL')
      await dataSrv.boot()
      // if the kill came before the 503 was recorded, the attempt's claim (timeout + 5 s = 20 s
      // from the first attempt) still holds the delivery back after the restart
      await waitFor(() => rx.got.length >= 2, 30_000)
      expect(rx.got[1]!.json.data.id).toBe(inbound.id)
      expect(rx.got[1]!.headers['webhook-id']).toBe(rx.got[0]!.headers['webhook-id'])
      rx.stop()
    } finally {
      await dataSrv.close()
    }
  }, 40_000)

  test.concurrent('SIGTERM lets a delivery under way finish and records it, so the next start does not send it again', async () => {
    const dataSrv = await TestServer.start()
    try {
      const rx = receiver(1500)
      await inboundDelivered(dataSrv, rx)
      // the receiver holds its 200 for 1.5 s: the delivery is in flight when the stop begins
      await dataSrv.stop('SIGTERM')
      expect(dataSrv.proc.exitCode).toBe(0)
      expect(dataSrv.output).toContain('capstan stopped')
      expect(deliveryRows(dataSrv, 'id, status, attempts, last_status_code')).toEqual([{ id: rx.got[0]!.headers['webhook-id']!, status: 'delivered', attempts: 1, last_status_code: 200 }])
      rx.stop()
    } finally {
      await dataSrv.close()
    }
  }, 30_000)

  test.concurrent('a receiver that hangs does not hold up a stop: after 3 s Capstan stops and the delivery stays pending', async () => {
    const dataSrv = await TestServer.start()
    const rx = receiver(60_000)
    try {
      await inboundDelivered(dataSrv, rx)
      await dataSrv.stop('SIGTERM')
      expect(dataSrv.proc.exitCode).toBe(0)
      expect(dataSrv.output).toContain('stopping with webhook deliveries in flight')
      // not answered, not timed out (15 s): left for the next start to deliver again
      expect(deliveryRows(dataSrv, 'status, last_error')).toEqual([{ status: 'pending', last_error: null }])
    } finally {
      rx.stop()
      await dataSrv.close()
    }
  }, 30_000)

  test('the signing secret is encrypted at rest; admin validation; removal', async () => {
    const ws = await srv.workspace()
    const created = (await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: 'http://127.0.0.1:9/x' })).json.data
    const files = readdirSync(srv.dataDir).filter((f) => f.startsWith('capstan.db'))
    for (const f of files) expect(readFileSync(join(srv.dataDir, f)).includes(created.secret.slice(6))).toBe(false)
    expect(created.events).toEqual([...EVENT_TYPES])
    for (const body of [{ url: 'ftp://x' }, { url: 'not a url' }, {}, { url: 'http://x.test', events: ['message.exploded'] }]) {
      expect((await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, body)).status).toBe(422)
    }
    expect((await srv.admin('GET', `/workspaces/${ws.id}/webhooks`)).json.data.map((h: any) => [h.id, h.secret])).toEqual([[created.id, undefined]])
    for (const body of [{}, { status: 'paused' }, { status: true }]) {
      const r = await srv.admin('PATCH', `/webhooks/${created.id}`, body)
      expect([r.status, Object.keys(r.json.errors ?? {})]).toEqual([422, ['status']])
    }
    expect((await srv.admin('PATCH', `/webhooks/${crypto.randomUUID()}`, { status: 'active' })).status).toBe(404)
    for (const [body, field] of [[{ url: 'ftp://x' }, 'url'], [{ events: ['message.exploded'] }, 'events.0']] as const) {
      const r = await srv.admin('PATCH', `/webhooks/${created.id}`, body)
      expect([r.status, Object.keys(r.json.errors ?? {})]).toEqual([422, [field]])
    }
    // the receiver moved: a new URL and fewer events, the same secret
    const moved = await srv.admin('PATCH', `/webhooks/${created.id}`, { url: 'http://127.0.0.1:9/moved', events: ['message.failed'] })
    expect(moved.json.data).toMatchObject({ url: 'http://127.0.0.1:9/moved', events: ['message.failed'], status: 'active' })
    expect((await srv.admin('GET', `/webhooks/${created.id}`)).json.data.secret).toBe(created.secret)
    expect((await srv.admin('PATCH', `/webhooks/${created.id}`, { events: [] })).json.data.events).toEqual([...EVENT_TYPES])
    expect((await srv.admin('DELETE', `/webhooks/${created.id}`)).status).toBe(204)
    expect((await srv.admin('DELETE', `/webhooks/${created.id}`)).status).toBe(404)
    expect((await srv.admin('GET', `/workspaces/${ws.id}/webhooks`)).json.data).toEqual([])
  })

  test('rotating the secret: both secrets sign for the grace period, each verifies; 0 hours drops the old at once; audited', async () => {
    const { ws, key, conn, rx, hook } = await setup({ delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }, ['message.sent'])
    const send = async (body: string) => {
      const before = rx.got.length
      await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body } })
      await waitFor(() => rx.got.length > before)
      return rx.got.at(-1)!
    }
    const first = await send('before rotation')
    expect(first.headers['webhook-signature']!.split(' ')).toHaveLength(1)
    expect(verifies(hook.secret, first)).toBe(true)

    const t0 = Date.now()
    const rotated = await srv.admin('POST', `/webhooks/${hook.id}/rotate-secret`)
    expect(rotated.status).toBe(200)
    const second = rotated.json.data.secret as string
    expect(second).toMatch(/^whsec_[A-Za-z0-9+/]+={0,2}$/)
    expect(second).not.toBe(hook.secret)
    const until = Date.parse(rotated.json.data.previous_secret_expires_at)
    expect(until - t0).toBeGreaterThanOrEqual(24 * 3_600_000 - 1000)
    expect(until - Date.now()).toBeLessThanOrEqual(24 * 3_600_000)
    expect((await srv.admin('GET', `/webhooks/${hook.id}`)).json.data).toMatchObject({ secret: second, previous_secret_expires_at: rotated.json.data.previous_secret_expires_at })
    // the list shows when the old one stops, never a secret
    const listed = (await srv.admin('GET', `/workspaces/${ws.id}/webhooks`)).json.data[0]
    expect([listed.secret, listed.previous_secret_expires_at]).toEqual([undefined, rotated.json.data.previous_secret_expires_at])

    // a receiver still on the old secret and one already on the new both verify the same event
    const during = await send('during the grace period')
    expect(during.headers['webhook-signature']!.split(' ')).toHaveLength(2)
    expect([verifies(second, during), verifies(hook.secret, during)]).toEqual([true, true])
    expect(verifies(`whsec_${Buffer.alloc(32, 7).toString('base64')}`, during)).toBe(false)

    // rotated again with no grace: only the newest signs
    const again = await srv.admin('POST', `/webhooks/${hook.id}/rotate-secret`, { keep_previous_hours: 0 })
    expect([again.status, again.json.data.previous_secret_expires_at]).toEqual([200, null])
    const third = again.json.data.secret as string
    const after = await send('after the second rotation')
    expect(after.headers['webhook-signature']!.split(' ')).toHaveLength(1)
    expect([verifies(third, after), verifies(second, after), verifies(hook.secret, after)]).toEqual([true, false, false])

    // neither secret is stored in clear
    for (const f of readdirSync(srv.dataDir).filter((f) => f.startsWith('capstan.db'))) {
      const bytes = readFileSync(join(srv.dataDir, f))
      for (const secret of [second, third]) expect(bytes.includes(secret.slice(6))).toBe(false)
    }
    const audit = (await srv.admin('GET', `/workspaces/${ws.id}/audit-log`)).json.data
    expect(audit.filter((e: any) => e.action === 'webhook.secret_rotated')).toEqual([
      { action: 'webhook.secret_rotated', key_id: null, key_name: null, subject_id: hook.id, subject_name: hook.url, actor: 'operator', via: 'admin_token', ip: '127.0.0.1', at: expect.any(String) },
      { action: 'webhook.secret_rotated', key_id: null, key_name: null, subject_id: hook.id, subject_name: hook.url, actor: 'operator', via: 'admin_token', ip: '127.0.0.1', at: expect.any(String) },
    ])

    // bad input changes nothing
    for (const keep of [-1, 169, 1.5, 'a day', null, true]) {
      const r = await srv.admin('POST', `/webhooks/${hook.id}/rotate-secret`, { keep_previous_hours: keep })
      expect([r.status, r.json.code, Object.keys(r.json.errors ?? {})]).toEqual([422, 'validation_failed', ['keep_previous_hours']])
    }
    expect((await srv.admin('POST', `/webhooks/${crypto.randomUUID()}/rotate-secret`)).status).toBe(404)
    const anonymous = await srv.request('POST', `/admin/api/webhooks/${hook.id}/rotate-secret`, { json: {} })
    expect(anonymous.status).toBe(401)
    expect((await srv.admin('GET', `/webhooks/${hook.id}`)).json.data.secret).toBe(third)
    rx.stop()
  })

  test('the replaced secret stops signing when its hours are up; a retry of an earlier event is signed with the new secret', async () => {
    await hooked(['message.received'], { phone: '+15550000199' }, async ({ svc, clock, rx, hook, conn }) => {
      const signatures = (r: Received) => r.headers['webhook-signature']!.split(' ')
      // the first attempt of an event fails before the rotation
      rx.plan.push(500)
      await svc.messages.inbound(conn.id, '+15550000200', 'one')
      await waitFor(() => rx.got.length === 1)
      expect(verifies(hook.secret, rx.got[0]!)).toBe(true)
      await waitFor(async () => (await svc.webhooks.deliveries(hook.id, 1, 0)).rows[0]!.attempts === 1)
      const rotated = await svc.webhooks.rotateSecret(hook.id, 2)
      expect(rotated.previous_secret_expires_at).toBe(new Date(clock.t + 2 * 3_600_000).toISOString())
      // its retry (same webhook-id) carries the new secret's signature and the old one's
      clock.t += 5000
      svc.webhooks.kick()
      await waitFor(() => rx.got.length === 2)
      expect(rx.got[1]!.headers['webhook-id']).toBe(rx.got[0]!.headers['webhook-id'])
      expect([signatures(rx.got[1]!).length, verifies(rotated.secret, rx.got[1]!), verifies(hook.secret, rx.got[1]!)]).toEqual([2, true, true])
      // a minute before the hours are up the old one still signs; once they are, only the new one
      clock.t += 2 * 3_600_000 - 5000 - 60_000
      await svc.messages.inbound(conn.id, '+15550000200', 'two')
      await waitFor(() => rx.got.length === 3)
      expect(signatures(rx.got[2]!)).toHaveLength(2)
      clock.t += 60_000
      expect(svc.webhooks.toAdmin(await svc.webhooks.get(hook.id)).previous_secret_expires_at).toBeNull()
      await svc.messages.inbound(conn.id, '+15550000200', 'three')
      await waitFor(() => rx.got.length === 4)
      expect([signatures(rx.got[3]!).length, verifies(rotated.secret, rx.got[3]!), verifies(hook.secret, rx.got[3]!)]).toEqual([1, true, false])
    })
  })

  test('extra headers (a receiver behind a gateway): sent on every delivery, stored encrypted, values shown only with the secret; reserved or malformed ones refused', async () => {
    const { ws, key, conn, rx, hook } = await setup({ delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }, ['message.sent'])
    const gateway = { 'CF-Access-Client-Id': 'capstan.access', 'CF-Access-Client-Secret': 'MARK-HEADER-SECRET-9d1e' }
    const patched = await srv.admin('PATCH', `/webhooks/${hook.id}`, { headers: gateway })
    expect([patched.status, patched.json.data.headers, patched.json.data.header_values]).toEqual([200, Object.keys(gateway), undefined])
    expect((await srv.admin('GET', `/workspaces/${ws.id}/webhooks`)).json.data[0].headers).toEqual(Object.keys(gateway))
    expect((await srv.admin('GET', `/webhooks/${hook.id}`)).json.data.header_values).toEqual(gateway)
    await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'through the gateway' } })
    await waitFor(() => rx.got.length === 1)
    const got = rx.got[0]!
    expect([got.headers['cf-access-client-id'], got.headers['cf-access-client-secret']]).toEqual(['capstan.access', 'MARK-HEADER-SECRET-9d1e'])
    expect([got.headers['content-type'], got.headers['user-agent'], verifies(hook.secret, got)]).toEqual(['application/json', 'Capstan-Webhooks/1', true])
    for (const f of readdirSync(srv.dataDir).filter((f) => f.startsWith('capstan.db'))) expect(readFileSync(join(srv.dataDir, f)).includes('MARK-HEADER-SECRET-9d1e')).toBe(false)
    // refused, and nothing changes
    for (const headers of [{ 'Content-Type': 'text/plain' }, { 'webhook-id': 'x' }, { Host: 'evil.test' }, { 'X-Line': 'a\r\nInjected: 1' }, { 'X-Num': 5 }, { 'bad name': 'x' }, Object.fromEntries(Array.from({ length: 11 }, (_, i) => [`X-H${i}`, 'v'])), 'x']) {
      const r = await srv.admin('PATCH', `/webhooks/${hook.id}`, { headers })
      expect([r.status, Object.keys(r.json.errors ?? {})]).toEqual([422, ['headers']])
      expect(r.text).not.toContain('evil.test')
    }
    expect((await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: rx.url, headers: { 'User-Agent': 'mine' } })).status).toBe(422)
    expect((await srv.admin('GET', `/webhooks/${hook.id}`)).json.data.header_values).toEqual(gateway)
    // removed: none sent
    expect((await srv.admin('PATCH', `/webhooks/${hook.id}`, { headers: null })).json.data.headers).toEqual([])
    await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'direct' } })
    await waitFor(() => rx.got.length === 2)
    expect(rx.got[1]!.headers['cf-access-client-secret']).toBeUndefined()
    // given at creation
    const made = await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: rx.url, events: ['message.failed'], headers: { Authorization: 'Bearer receiver-token' } })
    expect([made.status, made.json.data.headers]).toEqual([201, ['Authorization']])
    rx.stop()
  })

  test('a test event goes to an active endpoint signed; a disabled one answers 409 and queues nothing', async () => {
    const { rx, hook } = await setup({ delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }, ['message.sent'])
    const r = await srv.admin('POST', `/webhooks/${hook.id}/test`)
    expect([r.status, r.json.data.type]).toEqual([202, 'webhook.test'])
    await waitFor(() => rx.got.length === 1)
    const got = rx.got[0]!
    const verified = new Webhook(hook.secret).verify(got.body, signedHeaders(got)) as any
    expect([got.headers['webhook-id'], verified.type, verified.data.endpoint_id]).toEqual([r.json.data.id, 'webhook.test', hook.id])
    await srv.admin('PATCH', `/webhooks/${hook.id}`, { status: 'disabled' })
    const off = await srv.admin('POST', `/webhooks/${hook.id}/test`)
    expect([off.status, off.json.code, off.json.message]).toEqual([409, 'endpoint_disabled', 'The endpoint is disabled; enable it to send a test event.'])
    expect((await srv.admin('GET', `/webhooks/${hook.id}/deliveries`)).json.data).toHaveLength(1)
    // enabling it again sends nothing that was refused
    await srv.admin('PATCH', `/webhooks/${hook.id}`, { status: 'active' })
    await Bun.sleep(300)
    expect(rx.got).toHaveLength(1)
    expect((await srv.admin('POST', `/webhooks/${crypto.randomUUID()}/test`)).status).toBe(404)
    rx.stop()
  })

  test('the operator disables an endpoint (its pending deliveries are held) and enables it again (they go out)', async () => {
    const { key, conn, rx, hook } = await setup({ delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }, ['message.sent'])
    rx.plan.push(503)
    const sent = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'held' } })).json.data
    await waitFor(() => rx.got.length === 1)
    // the first attempt failed; its retry waits 5 s: disable now
    const off = await srv.admin('PATCH', `/webhooks/${hook.id}`, { status: 'disabled' })
    expect([off.status, off.json.data.status]).toEqual([200, 'disabled'])
    const history = async () => (await srv.admin('GET', `/webhooks/${hook.id}/deliveries`)).json.data
    expect((await history()).map((d: any) => [d.status, d.last_error])).toEqual([['failed', 'endpoint disabled by the operator']])
    // while disabled, new events are not written for it
    await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'not for it' } })
    await Bun.sleep(300)
    expect((await history()).length).toBe(1)
    expect((await srv.admin('PATCH', `/webhooks/${hook.id}`, { status: 'disabled' })).json.data.status).toBe('disabled')
    const on = await srv.admin('PATCH', `/webhooks/${hook.id}`, { status: 'active' })
    expect([on.status, on.json.data.status]).toEqual([200, 'active'])
    await waitFor(() => rx.got.length === 2)
    expect([rx.got[1]!.headers['webhook-id'], rx.got[1]!.json.data.id]).toEqual([rx.got[0]!.headers['webhook-id'], sent.id])
    await waitFor(async () => (await history())[0].status === 'delivered')
    rx.stop()
  })

  test('an endpoint failing for 3 days is disabled (controlled clock, real receiver); enabled again, it gets what was held', async () => {
    await hooked(['message.received'], { phone: '+15550000099' }, async ({ env, svc, rx, hook, conn }) => {
      const attempts = () => rx.got.length
      for (let i = 0; i < 50; i++) rx.plan.push(500)
      await svc.messages.inbound(conn.id, '+15550000100', 'one')
      await waitFor(() => attempts() >= 1)
      await Bun.sleep(50)
      expect((await storesOf(svc).webhooks.endpoint(hook.id))!.failing_since).toBe(env.clock.t)
      // three days later, the next failure disables the endpoint and fails its pending deliveries
      env.clock.t += 3 * 86_400_000
      await svc.messages.inbound(conn.id, '+15550000100', 'two')
      await waitFor(async () => (await storesOf(svc).webhooks.endpoint(hook.id))!.status === 'disabled')
      await Bun.sleep(200)
      const { rows } = await svc.webhooks.deliveries(hook.id, 10, 0)
      expect(rows).toHaveLength(2)
      expect(rows.every((d) => d.status === 'failed')).toBe(true)
      const before = attempts()
      await svc.messages.inbound(conn.id, '+15550000100', 'three')
      await Bun.sleep(200)
      expect(attempts()).toBe(before)
      expect((await svc.webhooks.deliveries(hook.id, 10, 0)).total).toBe(2)
      // the receiver is fixed and the operator enables the endpoint again: the two held deliveries
      // go out with their own webhook-ids; nothing from while it was disabled
      rx.plan.length = 0
      const held = rows.map((d) => d.id).reverse()
      expect(svc.webhooks.toAdmin(await svc.webhooks.patch(hook.id, { status: 'active' }))).toMatchObject({ status: 'active', failing_since: null })
      await waitFor(async () => (await svc.webhooks.deliveries(hook.id, 10, 0)).rows.every((d) => d.status === 'delivered'))
      const after = rx.got.slice(before).map((r) => [r.headers['webhook-id'], r.json.data.body])
      expect(after.sort()).toEqual([
        [held[0], 'one'],
        [held[1], 'two'],
      ].sort())
    })
  })

  test('a receiver down longer than the retry schedule: its failed deliveries since a time go out again (same webhook-id), older and delivered ones do not', async () => {
    await hooked(['message.received'], { phone: '+15550000299' }, async ({ svc, clock, rx, hook, conn }) => {
      const statusOf = async (body: string) => (await svc.webhooks.deliveries(hook.id, 100, 0)).rows.find((d) => JSON.parse(d.payload).data.body === body)!
      // delivered while the receiver was up
      await svc.messages.inbound(conn.id, '+15550000300', 'delivered')
      await waitFor(async () => (await statusOf('delivered')).status === 'delivered')
      // then it goes down: an event written two days before the recovery, and one an hour later,
      // each tried 8 times over about 28 hours until their retries run out
      const failAll = async (body: string) => {
        const before = rx.got.length
        for (let i = 0; i < 20; i++) rx.plan.push(503)
        await svc.messages.inbound(conn.id, '+15550000300', body)
        await waitFor(() => rx.got.length === before + 1)
        for (const [i, delay] of RETRY_SCHEDULE_S.entries()) {
          await waitFor(async () => (await statusOf(body)).attempts === i + 1)
          clock.t += delay * 1000
          svc.webhooks.kick()
          await waitFor(() => rx.got.length === before + i + 2)
        }
        await waitFor(async () => (await statusOf(body)).status === 'failed')
        rx.plan.length = 0
        return statusOf(body)
      }
      const older = await failAll('older')
      clock.t += 3_600_000
      const since = clock.t
      const lost = await failAll('lost')
      expect((await svc.webhooks.get(hook.id)).status).toBe('active')
      expect([older.attempts, lost.attempts, lost.last_error]).toEqual([8, 8, 'HTTP 503'])
      // the receiver is back: nothing goes to it on its own
      const tries = rx.got.length
      clock.t += 86_400_000
      svc.webhooks.kick()
      await Bun.sleep(200)
      expect(rx.got.length).toBe(tries)
      // the operator sends again what failed since the older one
      expect(await svc.webhooks.recover(hook.id, since)).toBe(1)
      await waitFor(async () => (await statusOf('lost')).status === 'delivered')
      const again = rx.got.slice(tries)
      expect(again.map((r) => [r.headers['webhook-id'], r.json.data.body])).toEqual([[lost.id, 'lost']])
      expect(new Webhook(hook.secret).verify(again[0]!.body, signedHeaders(again[0]!))).toMatchObject({ type: 'message.received' })
      expect([(await statusOf('older')).status, (await statusOf('delivered')).status, (await statusOf('lost')).attempts]).toEqual(['failed', 'delivered', 1])
      // a second recovery finds nothing; a disabled endpoint is refused and nothing changes
      expect(await svc.webhooks.recover(hook.id, since)).toBe(0)
      await svc.webhooks.patch(hook.id, { status: 'disabled' })
      expect(svc.webhooks.recover(hook.id, 0)).rejects.toThrow('The endpoint is disabled; enable it first.')
      expect((await statusOf('older')).status).toBe('failed')
    })
  }, 30_000)

  test('recover works in slices: every failed delivery since the time, of that endpoint only, and none older', async () => {
    const env = await inProcess()
    try {
      const { svc, clock } = env
      svc.webhooks.stop() // rows are written directly below; nothing is to be sent
      svc.webhooks.recoverSlice = 5
      const ws = await svc.workspaces.create({ name: 'Slices' })
      const hook = await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/', undefined)
      const other = await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/other', undefined)
      const repo = storesOf(svc).webhooks
      const t0 = clock.t
      await svc.deps.engine.write(async (tx) => {
        for (let i = 0; i < 40; i++) {
          // interleaved: old failed, new failed, new delivered, the other endpoint's new failed
          const [id, endpoint, at, end] = (
            [
              [`old${i}`, hook.id, t0 - 1, 'failed'],
              [`new${i}`, hook.id, t0 + i, 'failed'],
              [`done${i}`, hook.id, t0 + i, 'delivered'],
              [`other${i}`, other.id, t0 + i, 'failed'],
            ] as const
          )[i % 4]!
          await repo.enqueue(tx, id, endpoint, ws.id, 'message.sent', '{}', at)
          if (end === 'failed') await repo.fail(tx, id, 503, 'HTTP 503', at)
          else await repo.delivered(tx, id, 200, at)
        }
      })
      clock.t = t0 + 86_400_000
      expect(await svc.webhooks.recover(hook.id, t0)).toBe(10)
      const rows = [...(await repo.deliveries(hook.id, 100, 0)).rows, ...(await repo.deliveries(other.id, 100, 0)).rows]
      const pending = rows.filter((d) => d.status === 'pending')
      expect(pending.map((d) => d.id).sort()).toEqual(rows.filter((d) => d.id.startsWith('new')).map((d) => d.id).sort())
      expect(pending.every((d) => d.attempts === 0 && d.next_attempt_at === clock.t)).toBe(true)
      expect(rows.filter((d) => d.id.startsWith('old') || d.id.startsWith('other')).every((d) => d.status === 'failed')).toBe(true)
    } finally {
      await env.close()
    }
  })

  test('recover over HTTP: 202 with the count; since is validated; 404, 409 for a disabled endpoint, 401 without the admin token', async () => {
    const ws = await srv.workspace()
    const hook = (await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: 'http://127.0.0.1:9/x' })).json.data
    const since = new Date(Date.now() - 86_400_000).toISOString()
    const ok = await srv.admin('POST', `/webhooks/${hook.id}/recover`, { since })
    expect([ok.status, ok.json]).toEqual([202, { data: { requeued: 0 } }])
    for (const body of [{}, { since: 'yesterday' }, { since: '2026-11-20T10:00:00' }, { since: 5 }]) {
      const r = await srv.admin('POST', `/webhooks/${hook.id}/recover`, body)
      expect([r.status, Object.keys(r.json.errors ?? {})]).toEqual([422, ['since']])
    }
    expect((await srv.admin('POST', `/webhooks/${crypto.randomUUID()}/recover`, { since })).status).toBe(404)
    expect((await srv.request('POST', `/admin/api/webhooks/${hook.id}/recover`, { json: { since } })).status).toBe(401)
    await srv.admin('PATCH', `/webhooks/${hook.id}`, { status: 'disabled' })
    const off = await srv.admin('POST', `/webhooks/${hook.id}/recover`, { since })
    expect([off.status, off.json.code, off.json.message]).toEqual([409, 'endpoint_disabled', 'The endpoint is disabled; enable it first.'])
  })

  test('finished deliveries are deleted after 30 days, in slices with the server working between; pending and newer ones stay', async () => {
    const env = await inProcess()
    try {
      const { svc, clock } = env
      svc.webhooks.stop() // rows are written directly below; nothing is to be sent
      const ws = await svc.workspaces.create({ name: 'Prune' })
      const hook = await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/', undefined)
      const repo = storesOf(svc).webhooks
      const t0 = clock.t
      const add = (id: string, end: 'delivered' | 'failed' | null, at: number) =>
        svc.deps.engine.write(async (tx) => {
          await repo.enqueue(tx, id, hook.id, ws.id, 'message.sent', '{}', at)
          if (end === 'delivered') await repo.delivered(tx, id, 200, at)
          if (end === 'failed') await repo.fail(tx, id, 500, 'HTTP 500', at)
        })
      await Promise.all(Array.from({ length: 2500 }, (_, i) => add(`msg_old${i}`, 'delivered', t0)))
      await add('msg_oldfailed', 'failed', t0)
      await add('msg_oldpending', null, t0)
      await add('msg_recent', 'delivered', t0 + 20 * 86_400_000)
      clock.t = t0 + 31 * 86_400_000
      // in slices of 1,000 with the server working between: after the first, 1,503 rows are left
      const rows = () => (env.db.query('SELECT COUNT(*) AS n FROM webhook_deliveries').get() as { n: number }).n
      const turns = eachTurn(rows)
      expect(await svc.webhooks.pruneFinished()).toBe(2501)
      expect(turns.stop()).toEqual([2503, 1503, 503])
      expect((await repo.deliveries(hook.id, 10, 0)).rows.map((d) => d.id).sort()).toEqual(['msg_oldpending', 'msg_recent'])
      expect(await svc.webhooks.pruneFinished()).toBe(0)
      clock.t = t0 + 51 * 86_400_000
      expect(await svc.webhooks.pruneFinished()).toBe(1)
      expect((await repo.deliveries(hook.id, 10, 0)).rows.map((d) => d.id)).toEqual(['msg_oldpending'])
    } finally {
      await env.close()
    }
  })

  test("the history's meta.total is kept per endpoint as deliveries are added and deleted (prune, retention, any delete); an upgraded database starts from the rows it has", async () => {
    const env = await inProcess()
    try {
      const { svc, clock, db } = env
      svc.webhooks.stop()
      const ws = await svc.workspaces.create({ name: 'Counts' })
      const [a, b] = [await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/a', undefined), await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/b', undefined)]
      const repo = storesOf(svc).webhooks
      const total = async (id: string) => (await repo.deliveries(id, 1, 0)).total
      const rows = (id: string) => (db.query('SELECT COUNT(*) AS n FROM webhook_deliveries WHERE endpoint_id = ?').get(id) as { n: number }).n
      const both = async () => [await total(a.id), await total(b.id)]
      expect(await both()).toEqual([0, 0])
      const t0 = clock.t
      await svc.deps.engine.write(async (tx) => {
        for (let i = 0; i < 30; i++) {
          await repo.enqueue(tx, `a${i}`, a.id, ws.id, i % 2 ? 'message.sent' : 'connection.status_changed', '{}', t0)
          await repo.delivered(tx, `a${i}`, 200, t0)
        }
        for (let i = 0; i < 7; i++) await repo.enqueue(tx, `b${i}`, b.id, ws.id, 'message.sent', '{}', t0)
      })
      expect(await both()).toEqual([30, 7])
      // retention takes a's finished message events; the 30-day prune the rest of its finished ones
      clock.t = t0 + 86_400_000
      expect(await svc.webhooks.pruneMessageEvents(ws.id, clock.t)).toBe(15)
      expect(await both()).toEqual([15, 7])
      clock.t = t0 + 31 * 86_400_000
      expect(await svc.webhooks.pruneFinished()).toBe(15)
      db.run("DELETE FROM webhook_deliveries WHERE id = 'b3'")
      expect(await both()).toEqual([0, 6])
      expect(await both()).toEqual([rows(a.id), rows(b.id)])

      // a database at schema 33 with deliveries: migrating counts what it holds
      const dir = mkdtempSync(join(tmpdir(), 'capstan-delivery-counts-'))
      const old = databaseAtSchema(join(dir, 'capstan.db'), 33)
      try {
        old.run("INSERT INTO webhook_endpoints (id, workspace_id, url, events, secret_enc, status, created_at, updated_at) VALUES ('e1', 'w', 'http://x/', '[]', 's', 'active', 0, 0), ('e2', 'w', 'http://y/', '[]', 's', 'active', 0, 0)")
        const add = old.query("INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, type, payload, status, attempts, created_at, updated_at) VALUES (?, ?, 'w', 'message.sent', '{}', 'delivered', 1, 0, 0)")
        for (let i = 0; i < 3; i++) add.run(`x${i}`, 'e1')
        add.run('y0', 'e2')
        expect(migrate(old)[0]).toBe(34)
        expect(old.query('SELECT endpoint_id, n FROM webhook_delivery_counts ORDER BY endpoint_id').all()).toEqual([{ endpoint_id: 'e1', n: 3 }, { endpoint_id: 'e2', n: 1 }])
      } finally {
        old.close()
        rmSync(dir, { recursive: true, force: true })
      }
    } finally {
      await env.close()
    }
  })
})
