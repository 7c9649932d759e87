/** Idempotency-Key on POST /messages (spec §4, CONTRACT §4). */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TestServer, newPhone } from './support/server'

setDefaultTimeout(60_000)

const NO_RECEIPTS = { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }
let srv: TestServer
beforeAll(async () => {
  srv = await TestServer.start()
})
afterAll(() => srv.close())

async function setup() {
  const t = await srv.tenant()
  const c = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: NO_RECEIPTS })).json.data
  return { ...t, conn: c }
}
const idem = () => ({ 'idempotency-key': `order-${crypto.randomUUID()}` })
const count = async (key: string) => (await srv.api(key, 'GET', '/messages')).json.meta.total

describe('Idempotency-Key', () => {
  test('same key and body: the stored response with Idempotency-Replayed, nothing sent again', async () => {
    const { key, conn } = await setup()
    const h = idem()
    const body = { connection_id: conn.id, recipient: newPhone(), body: 'Order 1001 confirmed' }
    const r1 = await srv.api(key, 'POST', '/messages', { json: body, headers: h })
    const r2 = await srv.api(key, 'POST', '/messages', { json: { body: body.body, recipient: body.recipient, connection_id: conn.id }, headers: h })
    expect(r1.status).toBe(202)
    expect(r1.headers.get('idempotency-replayed')).toBeNull()
    expect(r2.status).toBe(202)
    expect(r2.headers.get('idempotency-replayed')).toBe('true')
    expect(r2.text).toBe(r1.text)
    expect(await count(key)).toBe(1)
  })

  test('same key, different body: 409 idempotency_conflict, nothing created', async () => {
    const { key, conn } = await setup()
    const h = idem()
    expect((await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'a' }, headers: h })).status).toBe(202)
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'b' }, headers: h })
    expect([r.status, r.json.code]).toEqual([409, 'idempotency_conflict'])
    expect(await count(key)).toBe(1)
  })

  test('a body that differs only in a member named __proto__ is a different body: 409', async () => {
    const { key, conn } = await setup()
    const h = { ...idem(), 'content-type': 'application/json' }
    const recipient = newPhone()
    const raw = (extra: string) => `{"connection_id":"${conn.id}","recipient":"${recipient}","body":"a","__proto__":{"x":${extra}}}`
    expect((await srv.api(key, 'POST', '/messages', { raw: raw('1'), headers: h })).status).toBe(202)
    expect((await srv.api(key, 'POST', '/messages', { raw: raw('1'), headers: h })).headers.get('idempotency-replayed')).toBe('true')
    const r = await srv.api(key, 'POST', '/messages', { raw: raw('2'), headers: h })
    expect([r.status, r.json.code]).toEqual([409, 'idempotency_conflict'])
    expect(await count(key)).toBe(1)
  })

  test('a body nested 100,000 deep is 400 bad_request, not a server error; nothing stored', async () => {
    const { key, conn } = await setup()
    const raw = `{"connection_id":"${conn.id}","recipient":"${newPhone()}","body":"a","x":${'['.repeat(100_000)}${']'.repeat(100_000)}}`
    const r = await srv.api(key, 'POST', '/messages', { raw, headers: { ...idem(), 'content-type': 'application/json' } })
    expect([r.status, r.json]).toEqual([400, { message: 'Request could not be read.', code: 'bad_request' }])
    expect(await count(key)).toBe(0)
  })

  test('malformed keys are 422 invalid_idempotency_key; edge lengths are accepted', async () => {
    const { key, conn } = await setup()
    for (const bad of ['abc1234', 'order 12345', 'order#12345', 'order/12345', 'ü'.repeat(10), 'a'.repeat(256)]) {
      const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'x' }, headers: { 'idempotency-key': bad } })
      expect([r.status, r.json.code]).toEqual([422, 'invalid_idempotency_key'])
    }
    expect(await count(key)).toBe(0)
    for (const ok of ['a.b_c:d-', 'a'.repeat(255)]) {
      expect((await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'x' }, headers: { 'idempotency-key': ok } })).status).toBe(202)
    }
  })

  test('validation runs first: an invalid body with a key is 422 validation_failed and is not stored', async () => {
    const { key, conn } = await setup()
    const h = idem()
    const bad = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, body: 'no recipient' }, headers: h })
    expect(bad.json.code).toBe('validation_failed')
    const good = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'ok' }, headers: h })
    expect(good.status).toBe(202)
    expect(good.headers.get('idempotency-replayed')).toBeNull()
  })

  test('a refusal is stored and replayed too', async () => {
    const { ws, key, conn } = await setup()
    const phone = newPhone()
    await srv.admin('POST', `/workspaces/${ws.id}/suppressions`, { phone })
    const h = idem()
    const r1 = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: phone, body: 'x' }, headers: h })
    expect(r1.json.code).toBe('recipient_suppressed')
    await srv.admin('DELETE', `/workspaces/${ws.id}/suppressions/${encodeURIComponent(phone)}`)
    const r2 = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: phone, body: 'x' }, headers: h })
    expect([r2.status, r2.json.code, r2.headers.get('idempotency-replayed')]).toEqual([422, 'recipient_suppressed', 'true'])
    expect(await count(key)).toBe(0)
  })

  test('keys are scoped to the API key: another key with the same Idempotency-Key sends its own', async () => {
    const { ws, key, conn } = await setup()
    const other = (await srv.key(ws.id)).key
    const h = idem()
    const body = { connection_id: conn.id, recipient: newPhone(), body: 'x' }
    const a = await srv.api(key, 'POST', '/messages', { json: body, headers: h })
    const b = await srv.api(other, 'POST', '/messages', { json: body, headers: h })
    expect(b.headers.get('idempotency-replayed')).toBeNull()
    expect(a.json.data.id).not.toBe(b.json.data.id)
    expect(await count(key)).toBe(2)
  })

  test('the same multipart request with a new boundary replays; urlencoded field order does not matter', async () => {
    const { key, conn } = await setup()
    const h = idem()
    const rcpt = newPhone()
    const mk = () => {
      const fd = new FormData()
      fd.set('connection_id', conn.id)
      fd.set('recipient', rcpt)
      fd.set('body', 'multipart')
      return fd
    }
    const r1 = await srv.api(key, 'POST', '/messages', { multipart: mk(), headers: h })
    const r2 = await srv.api(key, 'POST', '/messages', { multipart: mk(), headers: h })
    expect(r2.headers.get('idempotency-replayed')).toBe('true')
    expect(r2.text).toBe(r1.text)
    const h2 = idem()
    const rcpt2 = newPhone()
    const f1 = await srv.request('POST', '/api/v1/messages', { bearer: key, raw: `connection_id=${conn.id}&recipient=${encodeURIComponent(rcpt2)}&body=hi`, headers: { 'content-type': 'application/x-www-form-urlencoded', ...h2 } })
    const f2 = await srv.request('POST', '/api/v1/messages', { bearer: key, raw: `body=hi&recipient=${encodeURIComponent(rcpt2)}&connection_id=${conn.id}`, headers: { 'content-type': 'application/x-www-form-urlencoded', ...h2 } })
    expect(f1.status).toBe(202)
    expect(f2.headers.get('idempotency-replayed')).toBe('true')
    expect(await count(key)).toBe(2)
  })

  test('concurrent duplicates send exactly once', async () => {
    const { ws, conn } = await setup()
    const keys = await Promise.all(Array.from({ length: 2 }, () => srv.key(ws.id)))
    for (const { key } of keys) {
      const h = idem()
      const body = { connection_id: conn.id, recipient: newPhone(), body: 'once' }
      const rs = await Promise.all(Array.from({ length: 12 }, () => srv.api(key, 'POST', '/messages', { json: body, headers: h })))
      const created = rs.filter((r) => r.status === 202 && r.headers.get('idempotency-replayed') === null)
      expect(created).toHaveLength(1)
      for (const r of rs) {
        if (r.status === 202) expect(r.json.data.id).toBe(created[0]!.json.data.id)
        else expect([r.status, r.json.code]).toEqual([409, 'idempotency_in_progress'])
      }
    }
    expect(await count(keys[0]!.key)).toBe(2)
  })
})
