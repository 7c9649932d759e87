/** A contact's data exported, then erased (admin API): nothing of the person is left in the database files. */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { scanningServer } from './support/clamd'
import { MessageStore } from '../src/modules/messages/store'
import { inProcess } from './support/inproc'
import { copyRow } from './support/rows'
import * as files from './support/files'
import { type TestServer, newPhone } from './support/server'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)

let srv: TestServer
let close: () => Promise<void>
beforeAll(async () => ({ srv, close } = await scanningServer()))
afterAll(() => close())

/** Which of `needles` occur anywhere in the database file and its WAL, byte for byte. */
function inDatabaseFiles(needles: string[]): string[] {
  const bytes = ['capstan.db', 'capstan.db-wal'].map((f) => join(srv.dataDir, f)).filter(existsSync).map((f) => readFileSync(f))
  return needles.filter((n) => bytes.some((b) => b.includes(Buffer.from(n))))
}

const message = (key: string, id: string) => srv.api(key, 'GET', `/messages/${id}`).then((r) => r.json.data)

describe('exporting and erasing a contact', () => {
  test('the export holds everything kept about the person; after the erasure the person is gone from contacts, messages, media, events, stored responses, campaigns and the files; the log keeps its counts', async () => {
    const { ws, key } = await srv.tenant()
    const policy = (gap: number) => srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 1000, daily_cap: 10000, min_gap_seconds: gap, max_gap_seconds: gap } } })
    await policy(0)
    const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
    // events pile up for a receiver that is not there
    await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: 'http://127.0.0.1:9/hook' })
    const ada = newPhone()
    const bob = newPhone()
    const marks = [ada, 'Ada Erasable', 'MARK-META-7f3a', 'MARK-OUT-7f3a', 'MARK-IN-7f3a', 'MARK-QUEUED-7f3a']
    // an older version of her row (renamed since) must not survive in the file's free space either
    await srv.api(key, 'POST', '/contacts', { json: { phone: ada, name: 'Ada Former-7f3a', metadata: { note: 'MARK-OLDMETA-7f3a' } } })
    await srv.api(key, 'POST', '/contacts', { json: { phone: ada, name: 'Ada Erasable', consent_status: 'opted_in', metadata: { note: 'MARK-META-7f3a' } } })
    await srv.api(key, 'POST', '/contacts', { json: { phone: bob, name: 'Bob Stays', consent_status: 'opted_in' } })
    // a send to Ada (kept under an Idempotency-Key), delivered; one to Bob
    const out = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: ada, body: 'MARK-OUT-7f3a' }, headers: { 'idempotency-key': 'erase-test-1' } })).json.data
    const toBob = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: bob, body: 'For Bob' } })).json.data
    // and one the network failed with an error text that names her number
    const bounced = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: ada, body: 'Second try' } })).json.data
    await waitFor(async () => (await message(key, out.id)).status === 'sent' && (await message(key, toBob.id)).status === 'sent' && (await message(key, bounced.id)).status === 'sent')
    await srv.admin('POST', `/messages/${out.id}/sandbox/receipt`, { status: 'delivered' })
    await srv.admin('POST', `/messages/${bounced.id}/sandbox/receipt`, { status: 'failed', error: { code: 'not_on_network', message: `Recipient ${ada} is not on this network.` } })
    // Ada sends a photo (a copy of a workspace file, under her own name) and a text
    const fd = new FormData()
    fd.set('file', new File([files.png()], 'logo.png'))
    const logo = (await srv.api(key, 'POST', '/media', { multipart: fd })).json.data
    const inbound = (await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: ada, body: 'MARK-IN-7f3a', media_id: logo.id })).json.data
    expect(inbound.attachments).toHaveLength(1)
    const photo = inbound.attachments[0]
    // a campaign to the opted-in contacts, and a send to Ada, both held back by the number's pace
    await policy(3600)
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'News', body: 'Hi {{name}}, news for you' } })).json.data
    const campaign = (await srv.api(key, 'POST', '/campaigns', { json: { name: 'News', template_id: tpl.id, connection_id: conn.id } })).json.data
    expect((await srv.api(key, 'POST', `/campaigns/${campaign.id}/schedule`, { json: {} })).status).toBe(200)
    const queued = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: ada, body: 'MARK-QUEUED-7f3a' } })).json.data
    expect(queued.status).toBe('queued')
    expect((await srv.api(key, 'GET', `/campaigns/${campaign.id}`)).json.data.counts.total).toBe(2)
    await waitFor(async () => (await srv.admin('GET', `/webhooks/${(await srv.admin('GET', `/workspaces/${ws.id}/webhooks`)).json.data[0].id}/deliveries`)).json.meta.total >= 3)
    expect(inDatabaseFiles(marks)).toEqual(marks)
    // the sandbox network's own record of the sends holds her number and texts too
    const record = join(srv.dataDir, 'sandbox', `${conn.id}.jsonl`)
    const recordBefore = readFileSync(record)
    expect([ada, 'MARK-OUT-7f3a', bob, 'For Bob'].map((n) => recordBefore.includes(Buffer.from(n)))).toEqual([true, true, true, true])
    const former = ['Ada Former-7f3a', 'MARK-OLDMETA-7f3a']

    // first what she may ask for: everything kept about her, in one document
    const exported = (await srv.admin('POST', `/workspaces/${ws.id}/contacts/export`, { phone: ada })).json.data
    expect(exported.contact).toMatchObject({ phone: ada, name: 'Ada Erasable', consent_status: 'opted_in', metadata: { note: 'MARK-META-7f3a' } })
    expect(exported.consent.map((e: any) => [e.status, e.source])).toEqual([['opted_in', expect.stringMatching(/^api_key:/)]])
    expect(exported.messages.map((m: any) => [m.id, m.direction, m.body])).toEqual([
      [out.id, 'outbound', 'MARK-OUT-7f3a'],
      [bounced.id, 'outbound', 'Second try'],
      [inbound.id, 'inbound', 'MARK-IN-7f3a'],
      [queued.id, 'outbound', 'MARK-QUEUED-7f3a'],
    ])
    expect(exported.messages[0].timeline.map((e: any) => e.status)).toEqual(['queued', 'sending', 'sent', 'delivered'])
    expect(exported.media.map((m: any) => m.id)).toEqual([photo])
    expect(exported.campaigns).toEqual([{ id: campaign.id, name: 'News', campaign_status: 'running', recipient_status: 'pending', skipped_reason: null, message_id: null }])
    expect([exported.network_addresses, exported.suppression]).toEqual([[], null])
    expect(exported.messages.some((m: any) => m.recipient === bob)).toBe(false)

    const r = await srv.admin('POST', `/workspaces/${ws.id}/contacts/erase`, { phone: ada })
    expect(r.status).toBe(200)
    expect(r.json.data).toMatchObject({ contact_id: out.contact_id, messages: 4, queued_failed: 1, media: 1 })
    expect(r.json.data.events).toBeGreaterThanOrEqual(3)

    // nothing of Ada in any database file, the WAL included, nor of what her row held before
    expect(inDatabaseFiles([...marks, ...former])).toEqual([])
    // nor in the sandbox's record, overwritten in place: each send's line keeps its ids (what crash
    // recovery asks for) without her number or text; Bob's stays as it was
    const recordAfter = readFileSync(record)
    expect(recordAfter.length).toBe(recordBefore.length)
    expect([ada, 'MARK-OUT-7f3a', 'Second try', bob, 'For Bob'].map((n) => recordAfter.includes(Buffer.from(n)))).toEqual([false, false, false, true, true])
    const lines = recordAfter.toString().trim().split('\n').map((l) => JSON.parse(l))
    expect(Object.fromEntries(lines.map((l) => [l.message_id, [l.recipient, l.body]]))).toEqual({
      [out.id]: [null, null],
      [toBob.id]: [bob, 'For Bob'],
      [bounced.id]: [null, null],
    })
    expect(lines.every((l) => typeof l.external_id === 'string' && l.external_id.startsWith('sbx_'))).toBe(true)
    // the contact is gone; its messages stay in the log without her
    expect((await srv.api(key, 'GET', `/contacts?phone=${encodeURIComponent(ada)}`)).json.meta.total).toBe(0)
    expect((await srv.api(key, 'GET', `/messages?contact_id=${out.contact_id}`)).status).toBe(404)
    expect(await message(key, out.id)).toMatchObject({ contact_id: null, recipient: null, sender: conn.phone, body: null, attachments: [], status: 'delivered' })
    expect(await message(key, inbound.id)).toMatchObject({ contact_id: null, sender: null, recipient: conn.phone, body: null, attachments: [], status: 'delivered' })
    expect(await message(key, bounced.id)).toMatchObject({ recipient: null, body: null, status: 'failed', error: { code: 'not_on_network', message: 'Recipient [erased number] is not on this network.' } })
    expect(await message(key, queued.id)).toMatchObject({ status: 'failed', body: null, error: { code: 'contact_erased', message: 'The contact was erased before the message was sent.' } })
    // her photo is gone; the workspace's own file stays
    expect((await srv.api(key, 'GET', `/media/${photo}`)).status).toBe(404)
    expect((await srv.api(key, 'GET', `/media/${logo.id}`)).status).toBe(200)
    // the campaign has one recipient left; Bob and his message are untouched
    expect((await srv.api(key, 'GET', `/campaigns/${campaign.id}`)).json.data.counts.total).toBe(1)
    expect((await srv.api(key, 'GET', `/contacts?phone=${encodeURIComponent(bob)}`)).json.data[0]).toMatchObject({ name: 'Bob Stays', consent_status: 'opted_in' })
    expect(await message(key, toBob.id)).toMatchObject({ recipient: bob, body: 'For Bob' })
    // the audit log says an erasure happened (not whom); the request log never names the number
    expect((await srv.admin('GET', `/workspaces/${ws.id}/audit-log`)).json.data[0]).toMatchObject({ action: 'contact.erased', key_id: null })
    await waitFor(() => srv.output.includes('"msg":"contact erased"'))
    expect(srv.output).not.toContain(ada)
    // a second erasure finds nobody; a malformed number is 422; another workspace cannot reach her
    expect((await srv.admin('POST', `/workspaces/${ws.id}/contacts/export`, { phone: ada })).status).toBe(404)
    const twice = await srv.admin('POST', `/workspaces/${ws.id}/contacts/erase`, { phone: ada })
    expect([twice.status, twice.json]).toEqual([404, { message: 'The contact was not found.', code: 'not_found' }])
    const bad = await srv.admin('POST', `/workspaces/${ws.id}/contacts/erase`, { phone: 'ada' })
    expect([bad.status, Object.keys(bad.json.errors)]).toEqual([422, ['phone']])
    const other = await srv.tenant()
    expect((await srv.admin('POST', `/workspaces/${other.ws.id}/contacts/erase`, { phone: bob })).status).toBe(404)
    expect((await srv.api(key, 'GET', `/contacts?phone=${encodeURIComponent(bob)}`)).json.meta.total).toBe(1)
    // only operators erase
    expect((await srv.request('POST', `/admin/api/workspaces/${ws.id}/contacts/erase`, { bearer: key, json: { phone: bob } })).status).toBe(401)
  })
})

describe('exporting, in process', () => {
  test('a long conversation streams in pieces of 500 messages, every message once and in order, then the rest of the document', async () => {
    const env = await inProcess()
    try {
      const { svc, db } = env
      const ws = await svc.workspaces.create({ name: 'Long' })
      const conn = await svc.connections.create(ws.id, { phone: '+15550007000', driver: 'sandbox' })
      const first = await svc.messages.inbound(conn.id, '+15550007001', 'message 0')
      // 1,200 more from the same person: the first message's row copied with its own id and text
      copyRow(db, 'messages', first.id, 1200, 'copy-', { body: "'message ' || i" })
      const pieces: string[] = []
      const reader = (await svc.contactExport.export(ws.id, '+15550007001')).getReader()
      for (let r = await reader.read(); !r.done; r = await reader.read()) pieces.push(new TextDecoder().decode(r.value))
      // the head, three batches of messages (500, 500, 201), the tail
      expect(pieces).toHaveLength(5)
      const doc = JSON.parse(pieces.join('')).data
      expect(doc.messages.map((m: any) => m.body)).toEqual(Array.from({ length: 1201 }, (_, i) => `message ${i}`))
      expect(Object.keys(doc)).toEqual(['exported_at', 'contact', 'consent', 'messages', 'media', 'campaigns', 'network_addresses', 'suppression'])
      expect(doc.contact.phone).toBe('+15550007001')
      // an unknown number is refused before anything is streamed
      expect(svc.contactExport.export(ws.id, '+15550007999')).rejects.toThrow('The contact was not found.')
    } finally {
      await env.close()
    }
  })
})

describe('erasure, in process', () => {
  test('events naming the contact are read in slices between which the server works, every slice boundary included; events of others stay', async () => {
    const env = await inProcess()
    try {
      const { svc, db } = env
      const ws = await svc.workspaces.create({ name: 'Slices' })
      await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/hook', undefined)
      const ada = (await svc.contacts.upsert(ws.id, { phone: '+15550003001' }, 'test')).row
      const bob = (await svc.contacts.upsert(ws.id, { phone: '+15550003002' }, 'test')).row
      // 50 events, every third one about Ada
      await svc.deps.engine.write(async (tx) => {
        for (let i = 0; i < 50; i++) await svc.webhooks.enqueueIn(tx, ws.id, 'message.received', { id: crypto.randomUUID(), contact_id: i % 3 === 0 ? ada.id : bob.id } as never)
      })
      const count = (id: string) => (db.query('SELECT COUNT(*) AS n FROM webhook_deliveries WHERE instr(payload, ?) > 0').get(id) as { n: number }).n
      expect([count(ada.id), count(bob.id)]).toEqual([17, 33])
      svc.eraser.eventSlice = 7
      const report = await svc.eraser.erase(ws.id, '+15550003001')
      expect(report.events).toBe(17)
      expect([count(ada.id), count(bob.id)]).toEqual([0, 33])
    } finally {
      await env.close()
    }
  })

  test('while a message to the contact is being handed to its network: 409 contact_busy, and nothing is erased', async () => {
    const env = await inProcess()
    try {
      const { svc, db } = env
      const ws = await svc.workspaces.create({ name: 'Busy' })
      await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/hook', undefined)
      const conn = await svc.connections.create(ws.id, { phone: '+15550004000', driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } } as any)
      const sent = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15550004001', body: 'On its way', attachments: [] })
      await svc.deps.engine.write((tx) => svc.webhooks.enqueueIn(tx, ws.id, 'message.received', { contact_id: sent.contact_id } as never))
      await svc.deps.engine.write((tx) => svc.messages.markSendingIn(tx, [sent], env.clock.now()))
      const events = () => (db.query('SELECT COUNT(*) AS n FROM webhook_deliveries').get() as { n: number }).n
      expect(events()).toBe(1)
      let refusal: any = null
      await svc.eraser.erase(ws.id, '+15550004001').catch((e) => (refusal = e))
      expect([refusal?.status, refusal?.code]).toEqual([409, 'contact_busy'])
      expect(await svc.contacts.getByPhone(ws.id, '+15550004001')).not.toBeNull()
      expect(await svc.messages.getAny(sent.id)).toMatchObject({ body: 'On its way', contact_id: sent.contact_id })
      expect(events()).toBe(1)
    } finally {
      await env.close()
    }
  })

  test('a message to the contact waiting out a retry or a "slow down" (the network does not have it) fails as contact_erased; its sender then stands back', async () => {
    const env = await inProcess()
    try {
      const { svc } = env
      const ws = await svc.workspaces.create({ name: 'Waiting' })
      const conn = await svc.connections.create(ws.id, { phone: '+15550004100', driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } } as any)
      const waiting = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15550004101', body: 'Not yet', attachments: [] })
      const store = new MessageStore(svc.deps.engine)
      // released, refused by the network for now, and marked while it waits (as waitOffNetwork does)
      await svc.deps.engine.write(async (tx) => {
        await store.claim(tx, waiting.id, env.clock.now())
        await store.markResend(tx, waiting.id)
      })
      const report = await svc.eraser.erase(ws.id, '+15550004101')
      expect([report.messages, report.queued_failed]).toEqual([1, 1])
      expect(await svc.messages.getAny(waiting.id)).toMatchObject({ status: 'failed', error_code: 'contact_erased', body: null, recipient: null, contact_id: null })
      // the sender, back from its wait, finds its mark taken
      expect(await svc.deps.engine.write((tx) => store.takeResend(tx, waiting.id))).toBe(false)
    } finally {
      await env.close()
    }
  })
})
