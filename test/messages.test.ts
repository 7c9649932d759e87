/** POST/GET /messages over HTTP against a real server with sandbox numbers (spec §4, CONTRACT §2-3). */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { appendFileSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SandboxLedger } from '../src/network/sandbox'
import { TestServer, newPhone } from './support/server'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)

const NO_RECEIPTS = { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }

let srv: TestServer
beforeAll(async () => {
  srv = await TestServer.start()
})
afterAll(() => srv.close())

async function setup(opts: { config?: Record<string, unknown>; status?: string; fast?: boolean } = {}) {
  const t = await srv.tenant()
  if (opts.fast !== false) await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { hourly_cap: 1000, daily_cap: 10000, min_gap_seconds: 0, max_gap_seconds: 0 } } })
  const c = await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: opts.config ?? NO_RECEIPTS })
  expect(c.status).toBe(201)
  if (opts.status) await srv.admin('PATCH', `/connections/${c.json.data.id}`, { status: opts.status })
  return { ...t, conn: c.json.data }
}


const message = (key: string, id: string) => srv.api(key, 'GET', `/messages/${id}`).then((r) => r.json.data)
const waitStatus = (key: string, id: string, status: string) => waitFor(async () => ((await message(key, id)).status === status ? message(key, id) : null))

describe('sending', () => {
  test('202 queued with the message; a new recipient becomes a contact with unknown consent', async () => {
    const { key, conn } = await setup()
    const rcpt = newPhone()
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: rcpt, body: 'Your order shipped' } })
    expect(r.status).toBe(202)
    expect(r.json.data).toMatchObject({ status: 'queued', direction: 'outbound', recipient: rcpt, connection_id: conn.id, body: 'Your order shipped', attachments: [], error: null, group_id: null })
    expect(r.json.data.outcome).toEqual({ state: 'pending', at: null, error: null })
    const contacts = await srv.api(key, 'GET', '/contacts')
    expect(contacts.json.data).toHaveLength(1)
    expect(contacts.json.data[0]).toMatchObject({ phone: rcpt, consent_status: 'unknown', id: r.json.data.contact_id })
  })

  test('urlencoded and multipart sends are accepted like JSON', async () => {
    const { key, conn } = await setup()
    const f = await srv.api(key, 'POST', '/messages', { form: { connection_id: conn.id, recipient: newPhone(), body: 'form body' } })
    expect(f.status).toBe(202)
    const fd = new FormData()
    fd.set('connection_id', conn.id)
    fd.set('recipient', newPhone())
    fd.set('body', 'multipart body')
    const m = await srv.api(key, 'POST', '/messages', { multipart: fd })
    expect(m.status).toBe(202)
    expect(m.json.data.body).toBe('multipart body')
  })

  test('the full lifecycle from sandbox receipts: timeline oldest first, outcome, list entry', async () => {
    const { key, conn } = await setup({ config: { delivered_after_ms: 50, read_after_ms: 150, fail_recipients: [] } })
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'hi' } })
    const m = await waitStatus(key, r.json.data.id, 'read')
    expect(m.timeline.map((e: any) => e.status)).toEqual(['queued', 'sending', 'sent', 'delivered', 'read'])
    const times = m.timeline.map((e: any) => Date.parse(e.at))
    expect([...times].sort((a, b) => a - b)).toEqual(times)
    expect(m.outcome.state).toBe('read')
    expect(m.outcome.at).toBe(m.timeline[4].at)
  })

  test('a recipient the network refuses ends failed with its error', async () => {
    const bad = newPhone()
    const { key, conn } = await setup({ config: { ...NO_RECEIPTS, fail_recipients: [bad] } })
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: bad, body: 'hi' } })
    const m = await waitStatus(key, r.json.data.id, 'failed')
    expect(m.error.code).toBe('recipient_unreachable')
    expect(m.outcome).toMatchObject({ state: 'failed', error: { code: 'recipient_unreachable' } })
    expect(m.timeline.map((e: any) => e.status)).toEqual(['queued', 'sending', 'failed'])
  })

  test('status never moves backwards; a late receipt only fills its time', async () => {
    const { key, conn } = await setup()
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'hi' } })
    const id = r.json.data.id
    await waitStatus(key, id, 'sent')
    expect((await srv.admin('POST', `/messages/${id}/sandbox/receipt`, { status: 'read' })).status).toBe(200)
    const late = await srv.admin('POST', `/messages/${id}/sandbox/receipt`, { status: 'delivered' })
    expect(late.json.data.status).toBe('read')
    expect(late.json.data.timeline.map((e: any) => e.status)).toEqual(['queued', 'sending', 'sent', 'read', 'delivered'])
    const failedLate = await srv.admin('POST', `/messages/${id}/sandbox/receipt`, { status: 'failed' })
    expect(failedLate.json.data.status).toBe('read')
    expect((await srv.admin('POST', `/messages/${id}/sandbox/receipt`, { status: 'bogus' })).status).toBe(422)
    expect((await srv.admin('POST', `/messages/${crypto.randomUUID()}/sandbox/receipt`, { status: 'read' })).status).toBe(404)
  })
})

describe('refusals: 422/404 before anything is queued or created', () => {
  test('opted-out, suppressed, offline, allowance', async () => {
    const { ws, key, conn } = await setup()
    const out = newPhone()
    await srv.api(key, 'POST', '/contacts', { json: { phone: out, consent_status: 'opted_out' } })
    const sup = newPhone()
    await srv.admin('POST', `/workspaces/${ws.id}/suppressions`, { phone: sup })
    const cases: [string, Record<string, unknown>, string][] = [
      ['opted out', { recipient: out }, 'recipient_opted_out'],
      ['suppressed', { recipient: sup }, 'recipient_suppressed'],
    ]
    for (const [, fields, code] of cases) {
      const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, body: 'x', ...fields } })
      expect(r.status).toBe(422)
      expect(r.json.code).toBe(code)
    }
    const offline = await setup({ status: 'offline' })
    const ro = await srv.api(offline.key, 'POST', '/messages', { json: { connection_id: offline.conn.id, recipient: newPhone(), body: 'x' } })
    expect(ro.json.code).toBe('connection_offline')
    expect((await srv.api(offline.key, 'GET', '/contacts')).json.data).toEqual([])
    // allowance: 2 per month
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { message_allowance: 2 } })
    for (let i = 0; i < 2; i++) expect((await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'x' } })).status).toBe(202)
    const refusedPhone = newPhone()
    const over = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: refusedPhone, body: 'x' } })
    expect([over.status, over.json.code]).toEqual([422, 'allowance_exhausted'])
    expect((await srv.api(key, 'GET', '/messages')).json.meta.total).toBe(2)
    const phones = (await srv.api(key, 'GET', '/contacts')).json.data.map((c: any) => c.phone)
    expect(phones).not.toContain(refusedPhone)
    expect(phones).not.toContain(sup)
  })

  test('another workspace’s connection, contact or message is 404', async () => {
    const a = await setup()
    const b = await setup()
    const bContact = (await srv.api(b.key, 'POST', '/contacts', { json: { phone: newPhone() } })).json.data
    const bMsg = (await srv.api(b.key, 'POST', '/messages', { json: { connection_id: b.conn.id, recipient: newPhone(), body: 'b' } })).json.data
    const r1 = await srv.api(a.key, 'POST', '/messages', { json: { connection_id: b.conn.id, recipient: newPhone(), body: 'x' } })
    expect([r1.status, r1.json.code, r1.json.message]).toEqual([404, 'not_found', 'The connection was not found.'])
    const r2 = await srv.api(a.key, 'POST', '/messages', { json: { connection_id: a.conn.id, contact_id: bContact.id, body: 'x' } })
    expect([r2.status, r2.json.message]).toEqual([404, 'The contact was not found.'])
    expect((await srv.api(a.key, 'GET', `/messages/${bMsg.id}`)).status).toBe(404)
    expect((await srv.api(a.key, 'GET', '/messages/not-a-uuid')).status).toBe(404)
    const r3 = await srv.api(a.key, 'POST', '/messages', { json: { connection_id: a.conn.id, recipient: newPhone(), media: { attachments: [{ media_id: crypto.randomUUID() }] } } })
    expect([r3.status, r3.json.message]).toEqual([404, 'The media was not found.'])
    expect((await srv.api(a.key, 'GET', '/messages')).json.data).toEqual([])
  })

  const invalid: [string, Record<string, unknown>, string][] = [
    ['connection_id missing', { connection_id: undefined, recipient: '+15550001234', body: 'x' }, 'connection_id'],
    ['connection_id not a uuid', { connection_id: 'abc', recipient: '+15550001234', body: 'x' }, 'connection_id'],
    ['both recipient and contact_id', { recipient: '+15550001234', contact_id: '00000000-0000-4000-8000-000000000000', body: 'x' }, 'recipient'],
    ['neither recipient nor contact_id', { body: 'x' }, 'recipient'],
    ['recipient not E.164', { recipient: '5550001234', body: 'x' }, 'recipient'],
    ['contact_id not a uuid', { contact_id: 'nope', body: 'x' }, 'contact_id'],
    ['no content', { recipient: '+15550001234' }, 'body'],
    ['body 4097 code points', { recipient: '+15550001234', body: 'a'.repeat(4097) }, 'body'],
    ['body of only spaces and newlines', { recipient: '+15550001234', body: ' \n\t \u00a0' }, 'body'],
    ['body not a string', { recipient: '+15550001234', body: 42 }, 'body'],
    ['11 attachments', { recipient: '+15550001234', media: { attachments: Array.from({ length: 11 }, () => ({ media_id: '00000000-0000-4000-8000-000000000000' })) } }, 'media.attachments'],
    ['attachment id not a uuid', { recipient: '+15550001234', media: { attachments: [{ media_id: 'x' }] } }, 'media.attachments.0.media_id'],
    ['attachments not a list', { recipient: '+15550001234', media: { attachments: 'x' } }, 'media.attachments'],
    ['media not an object', { recipient: '+15550001234', media: 5 }, 'media'],
    ['both body and template_id', { recipient: '+15550001234', body: 'x', template_id: '00000000-0000-4000-8000-000000000000' }, 'body'],
    ['template_id not a uuid', { recipient: '+15550001234', template_id: 'welcome' }, 'template_id'],
    ['variables without template_id', { recipient: '+15550001234', body: 'x', variables: { '1': 'a' } }, 'variables'],
    ['variables keyed by names', { recipient: '+15550001234', template_id: '00000000-0000-4000-8000-000000000000', variables: { code: 'a' } }, 'variables'],
    ['variables not an object', { recipient: '+15550001234', template_id: '00000000-0000-4000-8000-000000000000', variables: 'a' }, 'variables'],
  ]
  for (const [label, body, field] of invalid) {
    test(`422: ${label}`, async () => {
      const { key, conn } = await setup()
      const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, ...body } })
      expect(r.status).toBe(422)
      expect(r.json.code).toBe('validation_failed')
      expect(Object.keys(r.json.errors)).toContain(field)
      expect((await srv.api(key, 'GET', '/messages')).json.data).toEqual([])
    })
  }

  test('ids are read case-insensitively: an upper-case UUID in a body or path finds its row', async () => {
    const { ws, key, conn } = await setup()
    const upper = (id: string) => id.toUpperCase()
    const contact = (await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone() } })).json.data
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: upper(conn.id), contact_id: upper(contact.id), body: 'x' } })
    expect(r.status).toBe(202)
    expect(r.json.data).toMatchObject({ connection_id: conn.id, contact_id: contact.id })
    const one = await srv.api(key, 'GET', `/messages/${upper(r.json.data.id)}`)
    expect([one.status, one.json.data?.id]).toEqual([200, r.json.data.id])
    expect((await srv.admin('GET', `/workspaces/${upper(ws.id)}`)).json.data.id).toBe(ws.id)
    // still scoped to the caller's workspace in any case
    const other = await setup()
    expect((await srv.api(other.key, 'GET', `/messages/${upper(r.json.data.id)}`)).status).toBe(404)
  })

  test('4096 emoji (8192 UTF-16 units) are accepted and stored intact', async () => {
    const { key, conn } = await setup()
    const body = '😀'.repeat(4096)
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body } })
    expect(r.status).toBe(202)
    expect((await message(key, r.json.data.id)).body).toBe(body)
  })

  test('scopes: messages:write sends, messages:read reads, neither crosses over', async () => {
    const { ws, conn } = await setup()
    const writer = (await srv.key(ws.id, ['messages:write'])).key
    const reader = (await srv.key(ws.id, ['messages:read'])).key
    const sent = await srv.api(writer, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'x' } })
    expect(sent.status).toBe(202)
    expect((await srv.api(writer, 'GET', '/messages')).status).toBe(403)
    expect((await srv.api(writer, 'GET', `/messages/${sent.json.data.id}`)).status).toBe(403)
    expect((await srv.api(reader, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'x' } })).status).toBe(403)
    expect((await srv.api(reader, 'GET', `/messages/${sent.json.data.id}`)).status).toBe(200)
  })
})

describe('a template sent one-to-one (template_id in place of body)', () => {
  const template = async (key: string, body: string, extra: Record<string, unknown> = {}) => {
    const r = await srv.api(key, 'POST', '/templates', { json: { name: 'T', body, ...extra } })
    expect(r.status).toBe(201)
    return r.json.data.id as string
  }

  test('rendered for the recipient: contact fields, numbered variables, a new number with only its phone', async () => {
    const { key, conn } = await setup()
    const tpl = await template(key, 'Hi {{name}}, order {{1}} ships {{metadata.day}} to {{phone}}.')
    const ann = (await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'Ann', metadata: { day: 'Friday' } } })).json.data
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, contact_id: ann.id, template_id: tpl, variables: { '1': 'A-1001' } } })
    expect(r.status).toBe(202)
    expect(r.json.data.body).toBe(`Hi Ann, order A-1001 ships Friday to ${ann.phone}.`)
    expect((await waitStatus(key, r.json.data.id, 'sent')).body).toBe(`Hi Ann, order A-1001 ships Friday to ${ann.phone}.`)
    // a number that is not a contact yet: no name or metadata, so those render empty
    const stranger = newPhone()
    const s = await srv.api(key, 'POST', '/messages', { form: { connection_id: conn.id, recipient: stranger, template_id: tpl, 'variables[1]': 'B-7' } })
    expect(s.status).toBe(202)
    expect(s.json.data.body).toBe(`Hi , order B-7 ships  to ${stranger}.`)
  })

  test('refused before anything is queued: unknown or foreign or deleted template, missing values, empty or too long, marketing without opt-in', async () => {
    const { key, conn } = await setup()
    const other = await setup()
    const foreign = await template(other.key, 'Hi')
    const deleted = await template(key, 'Gone')
    expect((await srv.api(key, 'DELETE', `/templates/${deleted}`)).status).toBe(204)
    for (const id of [crypto.randomUUID(), foreign, deleted]) {
      const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), template_id: id } })
      expect([r.status, r.json.code, r.json.message]).toEqual([404, 'not_found', 'The template was not found.'])
    }
    const numbered = await template(key, 'Code {{1}} and {{2}}')
    const missing = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), template_id: numbered, variables: { '1': 'A' } } })
    expect([missing.status, missing.json.code, missing.json.errors]).toEqual([422, 'validation_failed', { variables: ['Values are needed for the numbered placeholders {{2}}.'] }])
    const onlyName = await template(key, '{{name}}')
    const empty = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), template_id: onlyName } })
    expect([empty.status, empty.json.errors]).toEqual([422, { template_id: ['The template renders to an empty text for this recipient.'] }])
    const long = await template(key, '{{1}}{{1}}{{1}}{{1}}{{1}}')
    const tooLong = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), template_id: long, variables: { '1': 'x'.repeat(1000) } } })
    expect([tooLong.status, tooLong.json.errors]).toEqual([422, { template_id: ['The template renders to more than 4096 characters for this recipient.'] }])
    // a marketing template reaches only contacts who opted in (like a campaign)
    const promo = await template(key, 'Spring sale, {{name}}!', { category: 'marketing' })
    const unknown = newPhone()
    const notIn = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: unknown, template_id: promo } })
    expect([notIn.status, notIn.json.code, notIn.json.message]).toEqual([422, 'recipient_not_opted_in', 'A marketing template goes only to contacts who opted in.'])
    expect((await srv.api(key, 'GET', '/messages')).json.data).toEqual([])
    expect((await srv.api(key, 'GET', '/contacts')).json.data.map((c: any) => c.phone)).not.toContain(unknown)
    const fan = (await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'Fay', consent_status: 'opted_in' } })).json.data
    const ok = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, contact_id: fan.id, template_id: promo } })
    expect([ok.status, ok.json.data.body]).toEqual([202, 'Spring sale, Fay!'])
    // a utility template goes to anyone a body could reach
    const utility = await template(key, 'Your receipt, {{name}}.')
    const plain = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: unknown, template_id: utility } })
    expect([plain.status, plain.json.data.body]).toEqual([202, 'Your receipt, .'])
  })

  test('a queued marketing template leaves only while its recipient is still opted in', async () => {
    // hourly cap 1: the first message leaves at once, the rest wait in the queue
    const { ws, key, conn } = await setup({ fast: false })
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 1, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 0 } } })
    const promo = await template(key, 'Spring sale, {{name}}!', { category: 'marketing' })
    const [lapsed, kept, both] = [newPhone(), newPhone(), newPhone()]
    for (const phone of [lapsed, kept, both]) await srv.api(key, 'POST', '/contacts', { json: { phone, name: 'P', consent_status: 'opted_in' } })
    const post = (recipient: string) => srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient, template_id: promo } })
    const send = async (recipient: string) => (await post(recipient)).json.data.id as string
    await waitStatus(key, await send(kept), 'sent')
    const ids = { lapsed: await send(lapsed), kept: await send(kept), both: await send(both) }
    // consent set back to unknown while it waits (not an opt-out, but no longer an opt-in)
    for (const phone of [lapsed, both]) expect((await srv.api(key, 'POST', '/contacts', { json: { phone, consent_status: 'unknown' } })).status).toBe(200)
    // ... and one of them suppressed too: it fails with the code a send to it gets now
    expect((await srv.admin('POST', `/workspaces/${ws.id}/suppressions`, { phone: both })).status).toBe(201)
    expect((await post(both)).json.code).toBe('recipient_suppressed')
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 100, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 0 } } })
    await waitStatus(key, ids.kept, 'sent')
    const m = await message(key, ids.lapsed)
    expect([m.status, m.error?.code, m.timeline.map((e: any) => e.status)]).toEqual(['failed', 'recipient_not_opted_in', ['queued', 'failed']])
    const b = await waitStatus(key, ids.both, 'failed')
    expect(b.error.code).toBe('recipient_suppressed')
  })
})

describe('the log', () => {
  test('a simulated reply names the message it answers (reply_to); only the workspace’s own messages', async () => {
    const { key, conn } = await setup()
    const out = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'Your table is booked for 8 pm' } })).json.data
    const reply = await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'thanks!', reply_to: out.id.toUpperCase() })
    expect([reply.status, reply.json.data.reply_to]).toEqual([201, out.id])
    expect((await srv.api(key, 'GET', `/messages/${reply.json.data.id}`)).json.data.reply_to).toBe(out.id)
    const other = await setup()
    const theirs = (await srv.api(other.key, 'POST', '/messages', { json: { connection_id: other.conn.id, recipient: newPhone(), body: 'theirs' } })).json.data
    const before = (await srv.api(key, 'GET', '/messages?direction=inbound')).json.meta.total
    for (const reply_to of [theirs.id, crypto.randomUUID()]) expect((await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'x', reply_to })).status).toBe(404)
    expect((await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'x', reply_to: 'nope' })).status).toBe(422)
    expect((await srv.api(key, 'GET', '/messages?direction=inbound')).json.meta.total).toBe(before)
  })

  test('a simulated sender’s name names a new contact; a bad name is a 422 and logs nothing', async () => {
    const { key, conn } = await setup()
    const from = newPhone()
    expect((await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from, body: 'hi', name: 'Ada' })).status).toBe(201)
    expect((await srv.api(key, 'GET', '/contacts')).json.data.find((c: any) => c.phone === from).name).toBe('Ada')
    const before = (await srv.api(key, 'GET', '/messages?direction=inbound')).json.meta.total
    for (const name of ['', 7, 'x'.repeat(256)]) expect((await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'x', name })).status).toBe(422)
    expect((await srv.api(key, 'GET', '/messages?direction=inbound')).json.meta.total).toBe(before)
  })

  test('newest first, direction and status filters, pagination; inbound is delivered', async () => {
    const { key, conn } = await setup()
    const out = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'out' } })).json.data
    await waitStatus(key, out.id, 'sent')
    const inbound = (await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'hello?' })).json.data
    expect(inbound).toMatchObject({ direction: 'inbound', status: 'delivered', body: 'hello?', recipient: conn.phone })
    expect(inbound.sender).toMatch(/^\+1555/)
    expect(inbound.timeline.map((e: any) => e.status)).toEqual(['delivered'])
    expect([inbound.reply_to, out.reply_to]).toEqual([null, null])
    const all = await srv.api(key, 'GET', '/messages')
    expect(all.json.data.map((m: any) => m.id)).toEqual([inbound.id, out.id])
    const q = async (qs: string) => (await srv.api(key, 'GET', `/messages?${qs}`)).json.data.map((m: any) => m.id)
    expect(await q('direction=inbound')).toEqual([inbound.id])
    expect(await q('direction=outbound')).toEqual([out.id])
    expect(await q('status=sent')).toEqual([out.id])
    expect(await q('status=delivered')).toEqual([inbound.id])
    expect(await q('direction=outbound&status=delivered')).toEqual([])
    expect(await q('per_page=1&page=2')).toEqual([out.id])
    const total = async (qs: string) => (await srv.api(key, 'GET', `/messages?${qs}`)).json.meta.total
    expect([await total(''), await total('direction=inbound'), await total('status=sent'), await total('status=queued'), await total('direction=outbound&status=sent')]).toEqual([2, 1, 1, 0, 1])
    await srv.admin('POST', `/messages/${out.id}/sandbox/receipt`, { status: 'failed' })
    expect([await total('status=sent'), await total('status=failed'), await total('direction=outbound&status=failed'), await total('')]).toEqual([0, 1, 1, 2])
    for (const bad of ['direction=sideways', 'status=lost', 'per_page=0']) expect((await srv.api(key, 'GET', `/messages?${bad}`)).status).toBe(422)
  })

  test('direction-only and status-only filters merge their status/direction ranges newest first, across pages', async () => {
    const { ws, key, conn } = await setup()
    const receipts = ['delivered', 'failed', 'read', null, 'delivered', 'failed', null, 'read']
    for (const [i, receipt] of receipts.entries()) {
      const out = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: `out ${i}` } })).json.data
      await waitStatus(key, out.id, 'sent')
      if (receipt) await srv.admin('POST', `/messages/${out.id}/sandbox/receipt`, { status: receipt })
      if (i % 3 === 0) await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: `in ${i}` })
    }
    const all = (await srv.api(key, 'GET', '/messages?per_page=100')).json.data as any[]
    expect(all).toHaveLength(11)
    const pages = async (qs: string) => {
      const reader = (await srv.key(ws.id, ['messages:read'])).key // a fresh rate-limit window per filter
      const ids: string[] = []
      for (let page = 1; page <= 6; page++) {
        const r = await srv.api(reader, 'GET', `/messages?${qs}&per_page=2&page=${page}`)
        expect(r.status, JSON.stringify(r.json)).toBe(200)
        ids.push(...r.json.data.map((m: any) => m.id))
      }
      return ids
    }
    for (const direction of ['inbound', 'outbound']) expect(await pages(`direction=${direction}`)).toEqual(all.filter((m) => m.direction === direction).map((m) => m.id))
    for (const status of ['sent', 'delivered', 'read', 'failed']) expect(await pages(`status=${status}`)).toEqual(all.filter((m) => m.status === status).map((m) => m.id))
    // delivered spans both directions: inbound messages and delivered outbound ones, interleaved
    expect(new Set(all.filter((m) => m.status === 'delivered').map((m) => m.direction))).toEqual(new Set(['inbound', 'outbound']))
  })

  test('contact_id lists one contact’s conversation: both directions, newest first, with the other filters; a foreign or unknown contact is 404', async () => {
    const { ws, key, conn } = await setup()
    const ada = newPhone()
    const send = async (recipient: string, body: string) => (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient, body } })).json.data
    const first = await send(ada, 'Your order shipped')
    const other = await send(newPhone(), 'Someone else')
    await waitStatus(key, first.id, 'sent')
    const reply = (await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: ada, body: 'Thanks!' })).json.data
    const last = await send(ada, 'It arrives tomorrow')
    await waitStatus(key, last.id, 'sent')
    await srv.admin('POST', `/messages/${first.id}/sandbox/receipt`, { status: 'delivered' })
    const contactId = first.contact_id
    expect([reply.contact_id, last.contact_id]).toEqual([contactId, contactId])
    const page = async (qs: string, k = key) => srv.api(k, 'GET', `/messages?contact_id=${contactId}${qs}`)
    const ids = async (qs = '') => (await page(qs)).json.data.map((m: any) => m.id)
    expect(await ids()).toEqual([last.id, reply.id, first.id])
    expect((await page('')).json.meta).toEqual({ page: 1, per_page: 25, total: 3, last_page: 1 })
    expect(await ids('&direction=inbound')).toEqual([reply.id])
    expect(await ids('&direction=outbound')).toEqual([last.id, first.id])
    expect(await ids('&status=sent')).toEqual([last.id])
    expect(await ids('&status=delivered')).toEqual([reply.id, first.id])
    expect(await ids('&direction=outbound&status=delivered')).toEqual([first.id])
    expect(await ids('&status=failed')).toEqual([])
    expect(await ids('&per_page=1&page=2')).toEqual([reply.id])
    expect((await page('&per_page=2')).json.meta).toEqual({ page: 1, per_page: 2, total: 3, last_page: 2 })
    // the other contact's conversation holds only its message; an upper-case id finds the same
    expect((await srv.api(key, 'GET', `/messages?contact_id=${other.contact_id}`)).json.data.map((m: any) => m.id)).toEqual([other.id])
    expect((await srv.api(key, 'GET', `/messages?contact_id=${contactId.toUpperCase()}`)).json.meta.total).toBe(3)
    // another workspace's contact, and one that does not exist, are 404; a malformed id 422
    const stranger = await srv.tenant()
    for (const id of [contactId, crypto.randomUUID()]) {
      const r = await srv.api(stranger.key, 'GET', `/messages?contact_id=${id}`)
      expect([r.status, r.json]).toEqual([404, { message: 'The contact was not found.', code: 'not_found' }])
    }
    const bad = await srv.api(key, 'GET', '/messages?contact_id=ada')
    expect([bad.status, Object.keys(bad.json.errors)]).toEqual([422, ['contact_id']])
    // a reader key sees the conversation as well (messages:read is the scope)
    const reader = (await srv.key(ws.id, ['messages:read'])).key
    expect((await page('', reader)).status).toBe(200)
    // the operators' message log finds it by the number (a bare + in the query too)
    for (const phone of [encodeURIComponent(ada), ada]) expect((await srv.admin('GET', `/workspaces/${ws.id}/messages?phone=${phone}`)).json.data.map((m: any) => m.id)).toEqual([last.id, reply.id, first.id])
    expect((await srv.admin('GET', `/workspaces/${ws.id}/messages?phone=${encodeURIComponent(newPhone())}`)).status).toBe(404)
    expect((await srv.admin('GET', `/workspaces/${ws.id}/messages?phone=ada`)).status).toBe(422)
  })

  test('inbound STOP opts the contact out in the consent ledger; later sends are refused', async () => {
    const { key, conn } = await setup()
    const phone = newPhone()
    await srv.api(key, 'POST', '/contacts', { json: { phone, consent_status: 'opted_in' } })
    const stop = (await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: phone, body: '  stop ' })).json.data
    const contact = (await srv.api(key, 'GET', '/contacts')).json.data.find((c: any) => c.phone === phone)
    expect(contact.consent_status).toBe('opted_out')
    const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
    const ledger = db.query('SELECT status, source FROM consent_ledger WHERE contact_id = ? ORDER BY id').all(contact.id)
    db.close()
    expect(ledger.at(-1)).toEqual({ status: 'opted_out', source: `inbound:${stop.id}` })
    const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: phone, body: 'x' } })
    expect(r.json.code).toBe('recipient_opted_out')
    // an ordinary message does not opt anyone out
    const other = newPhone()
    await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: other, body: 'please stop by tomorrow' })
    expect((await srv.api(key, 'GET', '/contacts')).json.data.find((c: any) => c.phone === other).consent_status).toBe('unknown')
  })

  test('a message still queued when its recipient opts out or is suppressed is never released: it fails with the refusal code', async () => {
    // hourly cap 1: the first message leaves at once, the rest wait in the queue
    const { ws, key, conn } = await setup({ fast: false })
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 1, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 0 } } })
    const events: any[] = []
    const rx = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: async (req) => (events.push(await req.json()), new Response('ok')) })
    await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: `http://127.0.0.1:${rx.port}/`, events: ['message.failed'] })
    const [stopper, upserted, suppressed, fine] = [newPhone(), newPhone(), newPhone(), newPhone()]
    const send = async (recipient: string) => (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient, body: 'Your order shipped' } })).json.data.id
    const first = await send(fine)
    await waitStatus(key, first, 'sent')
    const ids = { stopper: await send(stopper), upserted: await send(upserted), suppressed: await send(suppressed), fine: await send(fine) }
    // while they wait: one writes STOP, one is set opted_out through the API, one is suppressed
    await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: stopper, body: 'STOP' })
    expect((await srv.api(key, 'POST', '/contacts', { json: { phone: upserted, consent_status: 'opted_out' } })).status).toBe(200)
    expect((await srv.admin('POST', `/workspaces/${ws.id}/suppressions`, { phone: suppressed })).status).toBe(201)
    expect((await message(key, ids.stopper)).status).toBe('queued')
    // room again: the queue is released in order
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 100, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 0 } } })
    await waitStatus(key, ids.fine, 'sent')
    for (const [who, code] of [['stopper', 'recipient_opted_out'], ['upserted', 'recipient_opted_out'], ['suppressed', 'recipient_suppressed']] as const) {
      const m = await message(key, ids[who])
      expect([who, m.status, m.error?.code, m.timeline.map((e: any) => e.status)]).toEqual([who, 'failed', code, ['queued', 'failed']])
    }
    await waitFor(() => events.length >= 3)
    expect(events.map((e) => e.data.id).sort()).toEqual([ids.stopper, ids.upserted, ids.suppressed].sort())
    rx.stop(true)
  })
})

describe('connections (admin)', () => {
  test('create, list, patch, validate, delete (queued messages fail as connection_removed)', async () => {
    const ws = await srv.workspace()
    const bad = await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: '123', driver: 'carrier-pigeon', config: { delivered_after_ms: -1 } })
    expect(bad.status).toBe(422)
    expect(Object.keys(bad.json.errors).sort()).toEqual(['driver', 'phone'])
    const badCfg = await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone(), driver: 'sandbox', config: { delivered_after_ms: -1 } })
    expect(Object.keys(badCfg.json.errors)).toEqual(['config.delivered_after_ms'])
    const c = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone(), driver: 'sandbox', receives: false, name: 'Shop' })).json.data
    expect(c).toMatchObject({ status: 'online', receives: false, name: 'Shop', driver: 'sandbox' })
    expect((await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: c.phone, driver: 'sandbox' })).status).toBe(422)
    expect((await srv.admin('GET', `/workspaces/${ws.id}/connections`)).json.data.map((x: any) => x.id)).toEqual([c.id])
    expect((await srv.admin('PATCH', `/connections/${c.id}`, { status: 'offline' })).json.data.status).toBe('offline')
    expect((await srv.admin('PATCH', `/connections/${c.id}`, { status: 'broken' })).status).toBe(422)
    expect((await srv.admin('POST', `/connections/${c.id}/sandbox/inbound`, { from: newPhone(), body: 'x' })).json.code).toBe('connection_not_receiving')
    const k = (await srv.key(ws.id)).key
    await srv.admin('PATCH', `/connections/${c.id}`, { status: 'online' })
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 1, daily_cap: 1, min_gap_seconds: 0, max_gap_seconds: 0 } } })
    const first = (await srv.api(k, 'POST', '/messages', { json: { connection_id: c.id, recipient: newPhone(), body: '1' } })).json.data
    const second = (await srv.api(k, 'POST', '/messages', { json: { connection_id: c.id, recipient: newPhone(), body: '2' } })).json.data
    await waitStatus(k, first.id, 'sent')
    expect((await message(k, second.id)).status).toBe('queued')
    // the sandbox's record of what it sent (recipients and texts) goes with the number
    const ledger = join(srv.dataDir, 'sandbox', `${c.id}.jsonl`)
    expect(readFileSync(ledger, 'utf8')).toContain(first.id)
    expect((await srv.admin('DELETE', `/connections/${c.id}`)).status).toBe(204)
    expect(existsSync(ledger)).toBe(false)
    const gone = await message(k, second.id)
    expect([gone.status, gone.error.code]).toEqual(['failed', 'connection_removed'])
    expect((await srv.admin('GET', `/connections/${c.id}`)).status).toBe(404)
    expect((await srv.api(k, 'POST', '/messages', { json: { connection_id: c.id, recipient: newPhone(), body: '3' } })).status).toBe(404)
  })

  test("the sandbox's record of sends is bounded: past its size it rolls over once, keeping the newest", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ledger-'))
    try {
      const path = join(dir, 'sandbox', 'conn.jsonl')
      const ledger = new SandboxLedger(path, 2000)
      const ids = Array.from({ length: 60 }, (_, i) => `m-${i}`)
      for (const id of ids) await ledger.record({ message_id: id, external_id: `x-${id}`, recipient: '+15550001111', group: null, body: 'Your order shipped', attachments: 0, at: new Date().toISOString() })
      // each file stays near its bound; the one before is kept, older ones are gone
      expect(statSync(path).size).toBeLessThan(2200)
      expect(statSync(join(dir, 'sandbox', 'conn.1.jsonl')).size).toBeLessThan(2200)
      const kept = (f: string) => readFileSync(join(dir, 'sandbox', f), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).message_id as string)
      const both = [...kept('conn.1.jsonl'), ...kept('conn.jsonl')]
      expect(both).toEqual(ids.slice(ids.length - both.length))
      expect(both.length).toBeLessThan(ids.length)
      // a fresh ledger (after a restart) still finds what the files hold, and nothing older
      const again = new SandboxLedger(path, 2000)
      expect(again.find(both[0]!)).toBe(`x-${both[0]}`)
      expect(again.find('m-0')).toBeNull()
      again.discard()
      expect([existsSync(path), existsSync(join(dir, 'sandbox', 'conn.1.jsonl'))]).toEqual([false, false])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test("retention takes the texts of older sends from the sandbox's record, piece by piece through both files, and resumes where it stopped; erasures meanwhile are not undone", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ledger-'))
    try {
      const path = join(dir, 'sandbox', 'conn.jsonl')
      const older = join(dir, 'sandbox', 'conn.1.jsonl')
      // ~1.1 KB a line, 3 MiB a file: several pieces of 1 MiB each, and a rollover
      const ledger = new SandboxLedger(path, 3 * 1024 * 1024)
      const numberOf = (i: number) => `+1555000${String(2000 + (i % 40)).padStart(4, '0')}`
      const t0 = Date.parse('2026-01-01T00:00:00Z')
      const at = (i: number) => new Date(t0 + i * 1000).toISOString()
      // a hundred at a time, sharing their syncs (each is written in call order)
      for (let b = 0; b < 4000; b += 100) {
        await Promise.all(Array.from({ length: 100 }, (_, k) => b + k).map((i) => ledger.record({ message_id: `m-${i}`, external_id: `x-${i}`, recipient: numberOf(i), group: null, body: `Text ${i} ${'y'.repeat(1000)}`, attachments: 0, at: at(i) })))
      }
      const lines = () => (readFileSync(older, 'utf8') + readFileSync(path, 'utf8')).split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l))
      const kept = lines().map((l) => Number(l.message_id.slice(2)))
      const sizes = [statSync(older).size, statSync(path).size]
      // sends before #3000 lose their text, while ten numbers are erased one per turn of the event
      // loop (how many of those turns the scan outlasts depends on the machine: at least the first)
      const erased = Array.from({ length: 10 }, (_, k) => numberOf(k * 3))
      let scanning = true
      let duringScan = 0
      const running = ledger.forgetContent(at(3000)).finally(() => (scanning = false))
      for (const n of erased) {
        await new Promise((r) => setImmediate(r))
        if (scanning) duringScan++
        ledger.forget(n)
      }
      expect(duringScan).toBeGreaterThan(0)
      const changed = await running
      expect([statSync(older).size, statSync(path).size]).toEqual(sizes)
      const after = lines()
      expect(after.filter((l) => erased.includes(l.recipient))).toEqual([])
      for (const l of after) {
        const i = Number(l.message_id.slice(2))
        expect([l.external_id, l.body === null]).toEqual([`x-${i}`, i < 3000 || erased.includes(numberOf(i))])
      }
      expect(changed).toBeGreaterThan(0)
      expect(changed).toBeLessThanOrEqual(kept.filter((i) => i < 3000).length)
      // the next run starts where this one stopped: only what aged out since (none of the ten erased numbers among them)
      const since = kept.filter((i) => i >= 3000 && i < 3010 && !erased.includes(numberOf(i))).length
      expect(await ledger.forgetContent(at(3010))).toBe(since)
      expect(await ledger.forgetContent(at(3010))).toBe(0)
      expect(new SandboxLedger(path).find('m-3005')).toBe('x-3005')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test("an erased number leaves the sandbox's record, in both files and in place; the sends stay findable", async () => {
    const dir = mkdtempSync(join(tmpdir(), 'ledger-'))
    try {
      const path = join(dir, 'sandbox', 'conn.jsonl')
      const older = join(dir, 'sandbox', 'conn.1.jsonl')
      const ledger = new SandboxLedger(path, 2000)
      const gone = '+15550001111'
      const stays = '+15550001112'
      for (let i = 0; i < 30; i++) {
        await ledger.record({ message_id: `m-${i}`, external_id: `x-${i}`, recipient: i % 3 ? gone : stays, group: null, body: `Order ${i} "shipped"`, attachments: 0, at: new Date().toISOString() })
      }
      // a line cut by a crash, naming the number
      appendFileSync(path, `{"message_id":"m-cut","external_id":"x-cut","recipient":"${gone}","body":"Order cu`)
      const sizes = () => [statSync(path).size, statSync(older).size]
      const before = sizes()
      const naming = (readFileSync(older, 'utf8') + readFileSync(path, 'utf8')).split('\n').filter((l) => l.includes(gone)).length
      expect(naming).toBeGreaterThan(5)
      expect(ledger.forget(gone)).toBe(naming)
      expect(sizes()).toEqual(before)
      const text = readFileSync(older, 'utf8') + readFileSync(path, 'utf8')
      expect(text).not.toContain(gone)
      expect(text).toContain(stays)
      const lines = text.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l))
      for (const l of lines) expect(l.recipient === null ? l.body : l.recipient).toBe(l.recipient === null ? null : stays)
      expect(lines.filter((l) => l.recipient === stays).every((l) => /^Order \d+ "shipped"$/.test(l.body))).toBe(true)
      // crash recovery still finds each send by its id (a fresh ledger reads the files)
      const again = new SandboxLedger(path, 2000)
      expect([again.find('m-29'), again.find('m-28'), again.find(lines[0].message_id)]).toEqual(['x-29', 'x-28', lines[0].external_id])
      expect(again.forget(gone)).toBe(0)
      // after a crash cut a line, the next send starts a line of its own, so it is found after another crash
      const cut = join(dir, 'sandbox', 'cut.jsonl')
      appendFileSync(cut, `{"message_id":"m-cut","external_id":"x-cut","recipient":"${stays}","body":"Order cu`)
      await new SandboxLedger(cut).record({ message_id: 'm-30', external_id: 'x-30', recipient: stays, group: null, body: 'next', attachments: 0, at: new Date().toISOString() })
      expect([new SandboxLedger(cut).find('m-30'), new SandboxLedger(cut).find('m-cut')]).toEqual(['x-30', null])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe('outcome codes', () => {
  test('every code a message can fail with is in the documented table (docs/sending.md and the API document), and no other is made anywhere', async () => {
    const { OUTCOME_CODES, NETWORK_CODE_PATTERN, TEMPLATE_IMPORT_CODES } = await import('../src/modules/messages/outcomes')
    const known = new Set<string>([...Object.keys(OUTCOME_CODES), ...TEMPLATE_IMPORT_CODES])
    // every place the code makes a failure code: driver errors, failed-message writes, refusals
    const patterns = [/(?:DriverError|UnconfirmedSend|TemplateRefused)\(\s*'([^']+)'/g, /error_code: '([^']+)'/g, /\bcode: '([^']+)', message:/g, /markFailed\([^,]+, '([^']+)'/g, /\?\.code \|\| '([^']+)'/g, /: '([a-z_]+)'\)\)$/gm]
    const files = ['src/network', 'src/modules/messages', 'src/modules/contacts', 'src/scheduler'].flatMap((d) => [...new Bun.Glob('**/*.ts').scanSync({ cwd: join(import.meta.dir, '..', d) })].map((f) => join(d, f)))
    const found = new Map<string, string>()
    for (const f of files) {
      const text = readFileSync(join(import.meta.dir, '..', f), 'utf8')
      for (const re of patterns) for (const m of text.matchAll(re)) found.set(m[1]!, f)
      // codes built from the network's own: only cloud_api_<digits>
      for (const m of text.matchAll(/(?<![A-Za-z])[cC]ode\b[^`\n]*`(\w*)\$\{/g)) if (m[1] !== 'cloud_api_') found.set(`${m[1]}…`, f)
    }
    expect(found.size).toBeGreaterThan(15)
    const unknown = [...found].filter(([code]) => !known.has(code) && !NETWORK_CODE_PATTERN.test(code))
    expect(unknown).toEqual([])
    // each of Capstan's own codes is in the documented table (docs/sending.md) and the API document
    const readme = readFileSync(join(import.meta.dir, '..', 'docs', 'sending.md'), 'utf8')
    const doc = await (await fetch(`${srv.base}/openapi.json`)).text()
    for (const code of Object.keys(OUTCOME_CODES)) {
      expect([code, readme.includes(`| \`${code}\` |`)]).toEqual([code, true])
      expect([code, doc.includes(`\`${code}\``)]).toEqual([code, true])
    }
    expect(NETWORK_CODE_PATTERN.test('cloud_api_131047')).toBe(true)
    expect(NETWORK_CODE_PATTERN.test('cloud_api_failed')).toBe(false)
  })
})
