/** Message content retention (workspace setting messages.content_retention_days). */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { inProcess } from './support/inproc'
import { TestServer } from './support/server'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)

const DAY = 86_400_000

/** Which of `needles` occur anywhere in the database file and its WAL, byte for byte. */
function inDatabaseFiles(dir: string, needles: string[]): string[] {
  const bytes = ['capstan.db', 'capstan.db-wal'].map((f) => join(dir, f)).filter(existsSync).map((f) => readFileSync(f))
  return needles.filter((n) => bytes.some((b) => b.includes(Buffer.from(n))))
}

describe('message content retention', () => {
  test('content older than the retention goes (body, attachments, rendered template) and the log keeps the rest; newer messages, other workspaces and unsettled messages keep theirs; gone from the database files', async () => {
    const env = await inProcess()
    try {
      const { svc, clock, timers, dir } = env
      const ws = await svc.workspaces.create({ name: 'Keeps 30 days' })
      const other = await svc.workspaces.create({ name: 'Keeps everything' })
      await svc.workspaces.patch(ws.id, { settings: { messages: { content_retention_days: 30 }, sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const quiet = { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }
      const conn = await svc.connections.create(ws.id, { phone: '+15550005000', driver: 'sandbox', config: quiet } as any)
      const otherConn = await svc.connections.create(other.id, { phone: '+15550005100', driver: 'sandbox', config: quiet } as any)
      svc.messageRetention.slice = 2 // the walk goes slice by slice
      const get = async (id: string) => (await svc.messages.getAny(id))!

      // thirty-one days ago: a message in, one out (sent), one still being handed over, and the other workspace's
      const oldIn = await svc.messages.inbound(conn.id, '+15550005001', 'MARK-IN-OLD-51c2')
      const oldOut = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15550005002', body: 'MARK-OUT-OLD-51c2', attachments: [] })
      await timers.advance(1000)
      await waitFor(async () => (await get(oldOut.id)).status === 'sent')
      const handing = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15550005003', body: 'MARK-SENDING-51c2', attachments: [] })
      await svc.deps.engine.write((tx) => svc.messages.markSendingIn(tx, [handing], clock.now()))
      const otherOld = await svc.messages.inbound(otherConn.id, '+15550005101', 'MARK-OTHER-OLD-51c2')
      clock.t += 31 * DAY
      const fresh = await svc.messages.inbound(conn.id, '+15550005001', 'MARK-IN-NEW-51c2')
      const newOut = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15550005004', body: 'MARK-OUT-NEW-51c2', attachments: [] })
      await timers.advance(1000)
      await waitFor(async () => (await get(newOut.id)).status === 'sent')
      expect(inDatabaseFiles(dir, ['MARK-IN-OLD-51c2', 'MARK-OUT-OLD-51c2'])).toHaveLength(2)
      const record = join(dir, 'sandbox', `${conn.id}.jsonl`)
      const recordBefore = readFileSync(record)
      expect(recordBefore.includes('MARK-OUT-OLD-51c2')).toBe(true)

      expect(await svc.messageRetention.run()).toBe(2)
      // the sandbox's record of sends loses the old text too, in place; the numbers and the newer text stay
      const recordAfter = readFileSync(record)
      expect(recordAfter.length).toBe(recordBefore.length)
      expect(['MARK-OUT-OLD-51c2', '+15550005002', 'MARK-OUT-NEW-51c2'].map((n) => recordAfter.includes(n))).toEqual([false, true, true])
      expect(recordAfter.toString().trim().split('\n').map((l) => JSON.parse(l)).map((l) => [l.message_id, l.body])).toEqual([
        [oldOut.id, null],
        [newOut.id, 'MARK-OUT-NEW-51c2'],
      ])
      for (const [id, status] of [[oldIn.id, 'delivered'], [oldOut.id, 'sent']] as const) {
        const m = svc.messages.toPublic((await get(id)))
        expect(m).toMatchObject({ body: null, attachments: [], status })
        expect(m.timeline.length).toBeGreaterThan(0)
      }
      expect((await get(oldOut.id)).recipient).toBe('+15550005002')
      expect([(await get(handing.id)).body, (await get(otherOld.id)).body, (await get(fresh.id)).body]).toEqual(['MARK-SENDING-51c2', 'MARK-OTHER-OLD-51c2', 'MARK-IN-NEW-51c2'])
      expect(inDatabaseFiles(dir, ['MARK-IN-OLD-51c2', 'MARK-OUT-OLD-51c2', 'MARK-SENDING-51c2', 'MARK-OTHER-OLD-51c2', 'MARK-IN-NEW-51c2'])).toEqual(['MARK-SENDING-51c2', 'MARK-OTHER-OLD-51c2', 'MARK-IN-NEW-51c2'])
      // nothing new aged out: nothing to do
      expect(await svc.messageRetention.run()).toBe(0)
      // the one being handed over settles: the next run takes it (the walk resumed at it)
      await svc.deps.engine.write((tx) => svc.messages.advanceIn(tx, handing.id, 'sent', clock.now()))
      expect(await svc.messageRetention.run()).toBe(1)
      expect((await get(handing.id))).toMatchObject({ body: null, status: 'sent' })
      // thirty days after it came in, the newer one goes too; with the retention lifted, nothing more would
      clock.t += 30 * DAY + 1
      expect(await svc.messageRetention.run()).toBe(2)
      expect([(await get(fresh.id)).body, (await get(newOut.id)).body]).toEqual([null, null])
      expect(readFileSync(record).includes('MARK-OUT-NEW-51c2')).toBe(false)
      await svc.workspaces.patch(ws.id, { settings: { messages: { content_retention_days: null } } })
      const kept = await svc.messages.inbound(conn.id, '+15550005001', 'MARK-KEPT-51c2')
      clock.t += 365 * DAY
      expect(await svc.messageRetention.run()).toBe(0)
      expect((await get(kept.id)).body).toBe('MARK-KEPT-51c2')
      expect((await get(otherOld.id)).body).toBe('MARK-OTHER-OLD-51c2')
    } finally {
      await env.close()
    }
  })
})

describe('webhook deliveries of message events', () => {
  test('finished deliveries of message events older than the retention go with the content; pending ones, other events and other workspaces keep theirs', async () => {
    const env = await inProcess()
    const rx = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response(null, { status: 204 }) })
    try {
      const { svc, clock, dir } = env
      const ws = await svc.workspaces.create({ name: 'Keeps a day' })
      const other = await svc.workspaces.create({ name: 'Keeps everything' })
      await svc.workspaces.patch(ws.id, { settings: { messages: { content_retention_days: 1 } } })
      const up = await svc.webhooks.create(ws.id, `http://127.0.0.1:${rx.port}/hook`, undefined)
      const down = await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/hook', ['message.received'])
      const otherHook = await svc.webhooks.create(other.id, `http://127.0.0.1:${rx.port}/hook`, undefined)
      const conn = await svc.connections.create(ws.id, { phone: '+15550006000', driver: 'sandbox' })
      const otherConn = await svc.connections.create(other.id, { phone: '+15550006100', driver: 'sandbox' })
      svc.webhooks.pruneSlice = 2 // endpoint by endpoint, slice by slice
      for (let i = 0; i < 3; i++) await svc.messages.inbound(conn.id, '+15550006001', `MARK-HOOK-OLD-${i}-9d1e`)
      await svc.contacts.upsert(ws.id, { phone: '+15550006002', consent_status: 'opted_in' }, 'test')
      await svc.messages.inbound(otherConn.id, '+15550006101', 'MARK-HOOK-OTHER-9d1e')
      const rows = async (id: string) => (await svc.webhooks.deliveries(id, 100, 0)).rows
      await waitFor(async () => [...(await rows(up.id)), ...(await rows(otherHook.id))].every((d) => d.status === 'delivered') && (await rows(down.id)).every((d) => d.attempts > 0))
      expect((await rows(up.id)).map((d) => d.type).sort()).toEqual(['contact.consent_changed', 'message.received', 'message.received', 'message.received'])
      expect((await rows(down.id)).map((d) => d.status)).toEqual(['pending', 'pending', 'pending'])
      // two days on (a receiver failing for less than 3 days is not disabled: its events wait)
      clock.t += 2 * 86_400_000
      await svc.messages.inbound(conn.id, '+15550006001', 'MARK-HOOK-NEW-9d1e')
      await waitFor(async () => (await rows(up.id)).every((d) => d.status === 'delivered'))

      await svc.messageRetention.run()
      // the old message events delivered to the live endpoint are gone, from the files too
      expect((await rows(up.id)).map((d) => [d.type, JSON.parse(d.payload).data.body ?? null])).toEqual([['message.received', 'MARK-HOOK-NEW-9d1e'], ['contact.consent_changed', null]])
      // the receiver that is down still gets its events; the other workspace keeps its history
      expect((await rows(down.id)).map((d) => d.status)).toEqual(['pending', 'pending', 'pending', 'pending'])
      expect((await rows(otherHook.id))).toHaveLength(1)
      // ... until they are finished: the endpoint removed, its deliveries fail and the next run takes them
      await svc.webhooks.remove(down.id)
      await svc.messageRetention.run()
      expect((await rows(down.id)).map((d) => JSON.parse(d.payload).data.body)).toEqual(['MARK-HOOK-NEW-9d1e'])
      expect(inDatabaseFiles(dir, ['MARK-HOOK-OLD-0-9d1e', 'MARK-HOOK-OLD-1-9d1e', 'MARK-HOOK-OLD-2-9d1e', 'MARK-HOOK-OTHER-9d1e', 'MARK-HOOK-NEW-9d1e'])).toEqual(['MARK-HOOK-OTHER-9d1e', 'MARK-HOOK-NEW-9d1e'])
    } finally {
      rx.stop(true)
      await env.close()
    }
  })
})

describe('the setting', () => {
  let srv: TestServer
  beforeAll(async () => {
    srv = await TestServer.start()
  })
  afterAll(() => srv.close())

  test('admin PATCH sets and clears it; other settings keep their values; bad values are refused and change nothing', async () => {
    const ws = await srv.workspace()
    expect(ws.settings.messages).toEqual({ content_retention_days: null })
    const set = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { messages: { content_retention_days: 90 } } })
    expect([set.status, set.json.data.settings.messages, set.json.data.settings.media]).toEqual([200, { content_retention_days: 90 }, ws.settings.media])
    for (const bad of [0, 3651, 1.5, 'a year', true]) {
      const r = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { messages: { content_retention_days: bad } } })
      expect([r.status, Object.keys(r.json.errors ?? {})]).toEqual([422, ['settings.messages.content_retention_days']])
    }
    expect((await srv.admin('GET', `/workspaces/${ws.id}`)).json.data.settings.messages).toEqual({ content_retention_days: 90 })
    const cleared = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { messages: { content_retention_days: null } } })
    expect(cleared.json.data.settings.messages).toEqual({ content_retention_days: null })
  })
})
