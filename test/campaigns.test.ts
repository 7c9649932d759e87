/** Campaigns (campaigns:read/write/send; CONTRACT §2): audience, lifecycle, consent, pacing, restarts. */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { migrate } from '../src/db/open'
import { CampaignStore, type Counts, RUNNING_FOR_CONNECTION } from '../src/modules/campaigns/store'
import { SqliteEngine } from '../src/db/engine'
import { Writer } from '../src/db/writer'
import { inProcess, settle } from './support/inproc'
import { databaseAtSchema } from './support/schema'
import { TestServer, newPhone } from './support/server'
import { waitFor } from './support/wait'
import { storesOf } from './support/stores'

setDefaultTimeout(60_000)

const NO_RECEIPTS = { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }
const policy = (gap: number) => ({ hourly_cap: 1000, daily_cap: 10000, min_gap_seconds: gap, max_gap_seconds: gap })

let srv: TestServer
beforeAll(async () => {
  srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
})
afterAll(() => srv.close())

async function setup(gap = 0, on: TestServer = srv) {
  const t = await on.tenant()
  await on.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: policy(gap) } })
  const conn = (await on.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: NO_RECEIPTS })).json.data
  const tpl = (await on.api(t.key, 'POST', '/templates', { json: { name: 'Promo', body: 'Hi {{name}}, {{metadata.plan}} deal: {{1}}', category: 'marketing' } })).json.data
  const contact = async (fields: Record<string, unknown>) => (await on.api(t.key, 'POST', '/contacts', { json: { phone: newPhone(), ...fields } })).json.data
  const campaign = async (extra: Record<string, unknown> = {}) =>
    (await on.api(t.key, 'POST', '/campaigns', { json: { name: 'Spring', template_id: tpl.id, connection_id: conn.id, variables: { '1': 'SPRING20' }, ...extra } })).json.data
  return { ...t, conn, tpl, contact, campaign }
}

const get = (key: string, id: string, on = srv) => on.api(key, 'GET', `/campaigns/${id}`).then((r) => r.json.data)

describe('audience', () => {
  test('only opted-in, unsuppressed contacts matching the metadata filters (value and type)', async () => {
    const { ws, key, contact } = await setup()
    const a = await contact({ name: 'A', consent_status: 'opted_in', metadata: { plan: 'pro', vip: true } })
    await contact({ name: 'B', consent_status: 'opted_in', metadata: { plan: 'free' } })
    await contact({ name: 'C', consent_status: 'unknown', metadata: { plan: 'pro' } })
    await contact({ name: 'D', consent_status: 'opted_out', metadata: { plan: 'pro' } })
    const e = await contact({ name: 'E', consent_status: 'opted_in', metadata: { plan: 'pro' } })
    await contact({ name: 'F', consent_status: 'opted_in', metadata: { plan: 'pro', vip: 1 } })
    await srv.admin('POST', `/workspaces/${ws.id}/suppressions`, { phone: e.phone })
    const all = await srv.api(key, 'POST', '/campaigns/audience/preview', { json: {} })
    expect(all.json.data.count).toBe(3)
    const pro = await srv.api(key, 'POST', '/campaigns/audience/preview', { json: { audience: { metadata: { plan: 'pro' } } } })
    expect(pro.json.data.count).toBe(2)
    const vip = await srv.api(key, 'POST', '/campaigns/audience/preview', { json: { audience: { metadata: { vip: true } } } })
    expect(vip.json.data.sample.map((c: any) => c.id)).toEqual([a.id])
    expect((await srv.api(key, 'GET', '/campaigns')).json.data).toEqual([])
    expect((await srv.api(key, 'POST', '/campaigns/audience/preview', { json: { audience: { metadata: 'x' } } })).status).toBe(422)
  })
})

describe('lifecycle', () => {
  test('schedule now: frozen recipients get rendered, paced messages; completed with counts and a webhook', async () => {
    const { ws, key, contact, campaign } = await setup()
    const events: any[] = []
    const rx = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: async (req) => (events.push(await req.json()), new Response('ok')) })
    await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: `http://127.0.0.1:${rx.port}/`, events: ['campaign.completed'] })
    const people = [await contact({ name: 'Ann', consent_status: 'opted_in', metadata: { plan: 'pro' } }), await contact({ name: 'Ben', consent_status: 'opted_in', metadata: { plan: 'free' } })]
    await contact({ name: 'Cat', consent_status: 'unknown' })
    const c = await campaign()
    expect(c).toMatchObject({ status: 'draft', counts: { total: 0, queued: 0, sent: 0, delivered: 0, read: 0, failed: 0, skipped: 0 } })
    const started = await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })
    expect(started.status).toBe(200)
    expect(['running', 'completed']).toContain(started.json.data.status)
    const done = await waitFor(async () => ((await get(key, c.id)).status === 'completed' ? get(key, c.id) : null))
    expect(done.counts).toEqual({ total: 2, queued: 0, sent: 2, delivered: 0, read: 0, failed: 0, skipped: 0 })
    expect(done.finished_at).not.toBeNull()
    const msgs = (await srv.api(key, 'GET', '/messages')).json.data
    expect(msgs.map((m: any) => m.body).sort()).toEqual(['Hi Ann, pro deal: SPRING20', 'Hi Ben, free deal: SPRING20'])
    const recips = (await srv.api(key, 'GET', `/campaigns/${c.id}/recipients`)).json.data
    expect(recips.map((r: any) => [r.phone, r.status]).sort()).toEqual(people.map((p) => [p.phone, 'sent']).sort())
    await waitFor(() => events.length >= 1)
    expect(events[0]).toMatchObject({ type: 'campaign.completed', data: { id: c.id, status: 'completed', counts: { total: 2, sent: 2 } } })
    // the event is documented field for field (the OpenAPI document's webhooks)
    const documented = (await srv.request('GET', '/openapi.json')).json.webhooks['campaign.completed'].post.requestBody.content['application/json'].schema.properties.data.properties
    expect(Object.keys(events[0].data).sort()).toEqual(Object.keys(documented).sort())
    rx.stop(true)
  })

  test('a metadata placeholder the contact has no value for is sent empty, never inherited text', async () => {
    const { key, contact, campaign } = await setup()
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Proto', body: 'Hi {{name}} [{{metadata.constructor}}{{metadata.toString}}]', category: 'marketing' } })).json.data
    await contact({ name: 'Ann', consent_status: 'opted_in', metadata: { plan: 'pro' } })
    const c = await campaign({ template_id: tpl.id, variables: {} })
    expect((await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })).status).toBe(200)
    await waitFor(async () => (await get(key, c.id)).status === 'completed')
    expect((await srv.api(key, 'GET', '/messages')).json.data.map((m: any) => m.body)).toEqual(['Hi Ann []'])
  })

  test.concurrent('an opt-out during the campaign is skipped when its turn comes; pause, resume and cancel', async () => {
    const { ws, key, conn, contact, campaign } = await setup(1)
    const people = []
    for (let i = 0; i < 6; i++) people.push(await contact({ name: `P${i}`, consent_status: 'opted_in' }))
    const c = await campaign()
    await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })
    await waitFor(async () => (await get(key, c.id)).counts.sent >= 1)
    // the last recipient writes STOP before the campaign reaches them
    await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: people[5].phone, body: 'STOP' })
    await waitFor(async () => (await get(key, c.id)).counts.sent >= 2)
    const paused = await srv.api(key, 'POST', `/campaigns/${c.id}/pause`)
    expect([paused.json.data.status, paused.json.data.paused_reason]).toEqual(['paused', 'requested'])
    // a settings change of the workspace (which resumes campaigns paused for the allowance) leaves it
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { message_allowance: null } })
    expect((await get(key, c.id)).status).toBe('paused')
    const sentAtPause = (await get(key, c.id)).counts.sent
    await Bun.sleep(2500)
    expect((await get(key, c.id)).counts.sent).toBeLessThanOrEqual(sentAtPause + 1)
    const pauseAgain = await srv.api(key, 'POST', `/campaigns/${c.id}/pause`)
    expect([pauseAgain.status, pauseAgain.json.code, pauseAgain.json.message]).toEqual([409, 'invalid_campaign_state', 'The campaign is paused; it cannot be paused.'])
    const resumed = (await srv.api(key, 'POST', `/campaigns/${c.id}/resume`)).json.data
    expect([resumed.status, resumed.paused_reason]).toEqual(['running', null])
    const done = await waitFor(async () => ((await get(key, c.id)).status === 'completed' ? get(key, c.id) : null), 20_000)
    expect(done.counts).toMatchObject({ total: 6, sent: 5, skipped: 1 })
    const skipped = (await srv.api(key, 'GET', `/campaigns/${c.id}/recipients?per_page=100`)).json.data.find((r: any) => r.status === 'skipped')
    expect(skipped).toMatchObject({ phone: people[5].phone, skipped_reason: 'not_opted_in', message_id: null })
    const cancelDone = await srv.api(key, 'POST', `/campaigns/${c.id}/cancel`)
    expect([cancelDone.status, cancelDone.json.message]).toEqual([409, 'The campaign is completed; it cannot be cancelled.'])
  }, 40_000)

  test.concurrent('campaign messages count against the monthly allowance: the campaign pauses when it is used up, nobody is skipped, and goes on when there is room', async () => {
    const { ws, key, conn, contact, campaign } = await setup()
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { message_allowance: 3 } })
    for (let i = 0; i < 5; i++) await contact({ consent_status: 'opted_in' })
    expect((await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'order' } })).status).toBe(202)
    const c = await campaign()
    expect((await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })).status).toBe(200)
    await waitFor(async () => (await get(key, c.id)).status === 'paused')
    // the two it released before pausing reach the network (they may still be on their way when it pauses)
    const paused = await waitFor(async () => {
      const p = await get(key, c.id)
      return p.counts.sent + p.counts.failed >= 2 ? p : null
    })
    expect(paused.counts).toMatchObject({ total: 5, queued: 3, sent: 2, failed: 0, skipped: 0 })
    expect(paused.paused_reason).toBe('allowance_exhausted')
    expect((await srv.api(key, 'GET', '/messages')).json.meta.total).toBe(3)
    const again = await srv.api(key, 'POST', `/campaigns/${c.id}/resume`)
    expect([again.status, again.json.code]).toEqual([422, 'allowance_exhausted'])
    const other = await campaign({ name: 'Other' })
    const now = await srv.api(key, 'POST', `/campaigns/${other.id}/schedule`, { json: {} })
    expect([now.status, now.json.code]).toEqual([422, 'allowance_exhausted'])
    expect((await get(key, other.id)).status).toBe('draft')
    // more room: it goes on by itself, the rest go out
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { message_allowance: 10 } })
    const done = await waitFor(async () => ((await get(key, c.id)).status === 'completed' ? get(key, c.id) : null))
    expect([done.counts.total, done.counts.sent, done.counts.skipped, done.paused_reason]).toEqual([5, 5, 0, null])
  })

  test.concurrent('cancel releases nothing more and leaves what was sent', async () => {
    const { key, contact, campaign } = await setup(1)
    for (let i = 0; i < 5; i++) await contact({ consent_status: 'opted_in' })
    const c = await campaign()
    await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })
    await waitFor(async () => (await get(key, c.id)).counts.sent >= 1)
    const cancelled = (await srv.api(key, 'POST', `/campaigns/${c.id}/cancel`)).json.data
    expect(cancelled.status).toBe('cancelled')
    await Bun.sleep(1500)
    const after = await get(key, c.id)
    expect(after.counts.sent + after.counts.queued).toBeLessThanOrEqual(2)
    expect(after.counts.skipped).toBeGreaterThanOrEqual(3)
    expect(after.counts.total).toBe(5)
    const sentMsgs = (await srv.api(key, 'GET', '/messages?status=sent')).json.meta.total
    await Bun.sleep(1200)
    expect((await srv.api(key, 'GET', '/messages?status=sent')).json.meta.total).toBe(sentMsgs)
  })

  test.concurrent('a recipient for whom the template renders empty or past 4096 characters is skipped with the reason; no message', async () => {
    const { ws, key, contact, conn } = await setup()
    const long = (c: string) => c.repeat(1000)
    const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Notes', body: '{{metadata.a}}{{metadata.b}}{{metadata.c}}{{metadata.d}}{{metadata.e}}' } })).json.data
    const fits = await contact({ consent_status: 'opted_in', metadata: { a: 'See you soon' } })
    const empty = await contact({ consent_status: 'opted_in', metadata: { a: ' ' } })
    const tooLong = await contact({ consent_status: 'opted_in', metadata: { a: long('a'), b: long('b'), c: long('c'), d: long('d'), e: long('e') } })
    const c = (await srv.api(key, 'POST', '/campaigns', { json: { name: 'Notes', template_id: tpl.id, connection_id: conn.id } })).json.data
    expect((await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })).status).toBe(200)
    const done = await waitFor(async () => ((await get(key, c.id)).status === 'completed' ? get(key, c.id) : null))
    expect(done.counts).toMatchObject({ total: 3, sent: 1, failed: 0, skipped: 2 })
    const recipients = (await srv.api(key, 'GET', `/campaigns/${c.id}/recipients?per_page=100`)).json.data
    const by = (id: string) => recipients.find((r: any) => r.contact_id === id)
    expect([by(empty.id).skipped_reason, by(empty.id).message_id]).toEqual(['rendered_empty', null])
    expect([by(tooLong.id).skipped_reason, by(tooLong.id).message_id]).toEqual(['rendered_too_long', null])
    expect(by(fits.id).status).not.toBe('skipped')
    const sent = (await srv.admin('GET', `/workspaces/${ws.id}/messages`)).json.data
    expect(sent.map((m: any) => m.body)).toEqual(['See you soon'])
  })

  test.concurrent('removing the number cancels its unfinished campaigns; pending recipients are skipped', async () => {
    const { key, conn, contact, campaign } = await setup(60)
    for (let i = 0; i < 3; i++) await contact({ consent_status: 'opted_in' })
    const running = await campaign()
    await srv.api(key, 'POST', `/campaigns/${running.id}/schedule`, { json: {} })
    await waitFor(async () => (await get(key, running.id)).counts.sent >= 1)
    const draft = await campaign({ name: 'Draft' })
    expect((await srv.admin('DELETE', `/connections/${conn.id}`)).status).toBe(204)
    const after = await get(key, running.id)
    expect(after.status).toBe('cancelled')
    expect(after.counts).toMatchObject({ total: 3, sent: 1, skipped: 2 })
    const reasons = (await srv.api(key, 'GET', `/campaigns/${running.id}/recipients`)).json.data.filter((r: any) => r.status === 'skipped').map((r: any) => r.skipped_reason)
    expect(reasons).toEqual(['connection_removed', 'connection_removed'])
    expect((await get(key, draft.id)).status).toBe('cancelled')
  })

  test.concurrent('transitions, edits and deletion follow the state machine', async () => {
    const { key, tpl, campaign } = await setup()
    const c = await campaign({ scheduled_at: new Date(Date.now() + 3_600_000).toISOString() })
    for (const a of ['pause', 'resume']) expect((await srv.api(key, 'POST', `/campaigns/${c.id}/${a}`)).json.message).toBe(`The campaign is draft; it cannot be ${a === 'pause' ? 'paused' : 'resumed'}.`)
    expect((await srv.api(key, 'PUT', `/campaigns/${c.id}`, { json: { name: 'Renamed' } })).json.data.name).toBe('Renamed')
    const sched = await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })
    expect(sched.json.data.status).toBe('scheduled')
    const later = new Date(Date.now() + 5_400_000).toISOString()
    const moved = await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: { scheduled_at: later } })
    expect([moved.json.data.status, moved.json.data.scheduled_at]).toEqual(['scheduled', later])
    expect((await srv.api(key, 'DELETE', `/templates/${tpl.id}`)).json.code).toBe('template_in_use')
    expect((await srv.api(key, 'PUT', `/campaigns/${c.id}`, { json: { scheduled_at: new Date(Date.now() + 7_200_000).toISOString() } })).status).toBe(200)
    expect((await srv.api(key, 'POST', `/campaigns/${c.id}/cancel`)).json.data.status).toBe('cancelled')
    expect((await srv.api(key, 'PUT', `/campaigns/${c.id}`, { json: { name: 'x' } })).status).toBe(409)
    expect((await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })).status).toBe(409)
    expect((await srv.api(key, 'DELETE', `/campaigns/${c.id}`)).status).toBe(204)
    expect((await srv.api(key, 'GET', `/campaigns/${c.id}`)).status).toBe(404)
    expect((await srv.api(key, 'DELETE', `/templates/${tpl.id}`)).status).toBe(204)
  })

  test.concurrent('validation: references, numbered values, past times; scopes', async () => {
    const { ws, key, conn, tpl, campaign } = await setup()
    const bad = await srv.api(key, 'POST', '/campaigns', { json: { name: 'x', template_id: crypto.randomUUID(), connection_id: conn.id } })
    expect([bad.status, bad.json.message]).toEqual([404, 'The template was not found.'])
    expect((await srv.api(key, 'POST', '/campaigns', { json: { name: 'x', template_id: tpl.id, connection_id: crypto.randomUUID() } })).status).toBe(404)
    expect((await srv.api(key, 'POST', '/campaigns', { json: { name: 'x', template_id: tpl.id, connection_id: conn.id, variables: { first: 'x' } } })).json.errors.variables).toBeDefined()
    expect((await srv.api(key, 'POST', '/campaigns', { json: { name: 'x', template_id: tpl.id, connection_id: conn.id, scheduled_at: '2001-01-01T00:00:00Z' } })).status).toBe(422)
    // an impossible date is refused, not rolled over into the next month by the date parser
    const feb30 = await srv.api(key, 'POST', '/campaigns', { json: { name: 'x', template_id: tpl.id, connection_id: conn.id, scheduled_at: '2099-02-30T09:00:00Z' } })
    expect([feb30.status, Object.keys(feb30.json.errors)]).toEqual([422, ['scheduled_at']])
    const draft = await campaign()
    const at = await srv.api(key, 'POST', `/campaigns/${draft.id}/schedule`, { json: { at: '2099-04-31T09:00:00Z' } })
    expect([at.status, Object.keys(at.json.errors)]).toEqual([422, ['at']])
    expect((await srv.api(key, 'GET', `/campaigns/${draft.id}`)).json.data.status).toBe('draft')
    const noVars = await campaign({ variables: {} })
    const r = await srv.api(key, 'POST', `/campaigns/${noVars.id}/schedule`, { json: {} })
    expect([r.status, Object.keys(r.json.errors)]).toEqual([422, ['variables']])
    const writer = (await srv.key(ws.id, ['campaigns:write', 'campaigns:read'])).key
    const sender = (await srv.key(ws.id, ['campaigns:send'])).key
    expect((await srv.api(writer, 'POST', `/campaigns/${noVars.id}/schedule`, { json: {} })).status).toBe(403)
    expect((await srv.api(sender, 'POST', '/campaigns', { json: { name: 'x', template_id: tpl.id, connection_id: conn.id } })).status).toBe(403)
    expect((await srv.api(sender, 'GET', '/campaigns')).status).toBe(403)
    const other = await setup()
    expect((await srv.api(other.key, 'GET', `/campaigns/${noVars.id}`)).status).toBe(404)
    expect((await srv.api(other.key, 'POST', `/campaigns/${noVars.id}/cancel`)).status).toBe(404)
  })
})

describe('scheduling and restarts', () => {
  test.concurrent('a scheduled campaign survives a restart and starts on time; a running one continues after a crash, nothing twice', async () => {
    const own = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    try {
      const s = await setup(1, own)
      for (let i = 0; i < 4; i++) await s.contact({ consent_status: 'opted_in' })
      const at = new Date(Date.now() + 3000)
      const c = await s.campaign()
      expect((await own.api(s.key, 'POST', `/campaigns/${c.id}/schedule`, { json: { at: at.toISOString() } })).json.data.status).toBe('scheduled')
      await own.stop('SIGKILL')
      await own.boot()
      const key = (await own.key(s.ws.id)).key
      const running = await waitFor(async () => ((await get(key, c.id, own)).status !== 'scheduled' ? get(key, c.id, own) : null))
      expect(Date.parse(running.started_at)).toBeGreaterThanOrEqual(at.getTime())
      expect(Date.parse(running.started_at)).toBeLessThan(at.getTime() + 2000)
      await waitFor(async () => (await get(key, c.id, own)).counts.sent >= 1)
      await own.stop('SIGKILL')
      await own.boot()
      const key2 = (await own.key(s.ws.id)).key
      const done = await waitFor(async () => ((await get(key2, c.id, own)).status === 'completed' ? get(key2, c.id, own) : null), 20_000)
      expect(done.counts.total).toBe(4)
      expect(done.counts.sent + done.counts.failed).toBe(4)
      const msgs = (await own.api(key2, 'GET', '/messages?per_page=100')).json.data
      expect(new Set(msgs.map((m: any) => m.recipient)).size).toBe(msgs.length)
      expect(msgs).toHaveLength(4)
    } finally {
      await own.close()
    }
  }, 60_000)
})

describe('the campaign lane (controlled clock)', () => {
  test('the campaign lane finds a number’s running campaigns through the index, not by scanning every campaign', async () => {
    const env = await inProcess()
    try {
      const plan = env.db.query(`EXPLAIN QUERY PLAN ${RUNNING_FOR_CONNECTION}`).all('x') as { detail: string }[]
      const details = plan.map((p) => p.detail).join(' | ')
      expect(details).toContain('USING INDEX campaigns_running')
      expect(details).not.toContain('SCAN campaigns')
      expect(details).not.toContain('TEMP B-TREE')
    } finally {
      await env.close()
    }
  })

  test('a send window: the campaign releases only while it is open, in the local time of its zone; one-to-one messages go out meanwhile', async () => {
    const env = await inProcess()
    try {
      const { svc, timers } = env
      // the env's clock starts at 09:00 UTC: 04:00 in New York
      const ws = await svc.workspaces.create({ name: 'Window' })
      await svc.workspaces.patch(ws.id, { settings: { sending_policy: policy(40) } })
      const conn = await svc.connections.create(ws.id, { phone: '+15550002100', driver: 'sandbox', config: NO_RECEIPTS })
      for (let i = 0; i < 3; i++) await svc.contacts.upsert(ws.id, { phone: `+155560000${i}0`, consent_status: 'opted_in' }, 'test')
      const tpl = await svc.templates.create(ws.id, { name: 'T', body: 'Offer' })
      // open 09:00–09:01 New York time (14:00–14:01 UTC in November): room for two releases 40 s apart
      const c = await svc.campaigns.create(ws.id, { name: 'Daytime', template_id: tpl.id, connection_id: conn.id, send_window: { from: '09:00', to: '09:01', time_zone: 'America/New_York' } })
      expect((await svc.campaigns.toPublic(c)).send_window).toEqual({ from: '09:00', to: '09:01', time_zone: 'America/New_York' })
      await svc.campaigns.schedule(ws.id, c.id, null)
      await timers.advance(0)
      await settle()
      const counts = async () => (await svc.campaigns.toPublic((await storesOf(svc).campaigns.getAny(c.id))!)).counts
      expect([(await storesOf(svc).campaigns.getAny(c.id))!.status, (await counts()).sent, (await counts()).queued]).toEqual(['running', 0, 3])
      // the number itself is not held: a one-to-one message goes out at once
      const order = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15550009999', body: 'Your order shipped', attachments: [] })
      await timers.advance(0)
      await settle()
      expect((await svc.messages.getAny(order.id))!.status).toBe('sent')
      // the window opens at 14:00 UTC; the minute's sweep wakes the number
      await timers.advanceTo(Date.UTC(2026, 10, 21, 14, 0, 0))
      await svc.campaigns.sweep()
      await timers.advance(0)
      await settle()
      await timers.advance(40_000)
      await settle()
      expect((await counts()).sent).toBe(2)
      // 14:01 UTC: closed again; the third waits for the next day's window
      await timers.advance(60_000)
      await svc.campaigns.sweep()
      await settle()
      expect([(await counts()).sent, (await counts()).queued]).toEqual([2, 1])
      await timers.advanceTo(Date.UTC(2026, 10, 22, 13, 59, 0))
      await svc.campaigns.sweep()
      await settle()
      expect((await counts()).sent).toBe(2)
      await timers.advanceTo(Date.UTC(2026, 10, 22, 14, 0, 0))
      await svc.campaigns.sweep()
      await timers.advance(0)
      await settle()
      expect((await counts()).sent).toBe(3)
      expect((await storesOf(svc).campaigns.getAny(c.id))!.status).toBe('completed')
    } finally {
      await env.close()
    }
  })

  test('a long run of recipients who opted out after the start is skipped through; the campaign still completes', async () => {
    const env = await inProcess()
    try {
      const { svc, timers } = env
      const ws = await svc.workspaces.create({ name: 'Skips' })
      await svc.workspaces.patch(ws.id, { settings: { sending_policy: policy(10) } })
      const conn = await svc.connections.create(ws.id, { phone: '+15550002000', driver: 'sandbox', config: NO_RECEIPTS })
      const phones = Array.from({ length: 250 }, (_, i) => `+1555500${String(i).padStart(4, '0')}`)
      for (const phone of phones) await svc.contacts.upsert(ws.id, { phone, consent_status: 'opted_in' }, 'test')
      const tpl = await svc.templates.create(ws.id, { name: 'T', body: 'Offer' })
      const c = await svc.campaigns.create(ws.id, { name: 'Big', template_id: tpl.id, connection_id: conn.id })
      await svc.campaigns.schedule(ws.id, c.id, null)
      await timers.advance(0)
      await settle()
      // after the first release, everyone opts out before their turn
      for (const phone of phones) await svc.contacts.upsert(ws.id, { phone, consent_status: 'opted_out' }, 'test')
      for (let i = 0; i < 4; i++) {
        await timers.advance(10_000)
        await settle()
      }
      const after = await svc.campaigns.toPublic((await storesOf(svc).campaigns.getAny(c.id))!)
      expect([after.status, after.counts]).toEqual(['completed', { total: 250, queued: 0, sent: 1, delivered: 0, read: 0, failed: 0, skipped: 249 }])
    } finally {
      await env.close()
    }
  })

  test('a campaign paused for the allowance goes on when a new month gives it room', async () => {
    const env = await inProcess()
    try {
      const { svc, timers, clock } = env
      await timers.advanceTo(Date.UTC(2026, 10, 30, 23, 0, 0))
      const ws = await svc.workspaces.create({ name: 'Month' })
      await svc.workspaces.patch(ws.id, { settings: { sending_policy: policy(10), message_allowance: 2 } })
      const conn = await svc.connections.create(ws.id, { phone: '+15550003000', driver: 'sandbox', config: NO_RECEIPTS })
      for (let i = 0; i < 4; i++) await svc.contacts.upsert(ws.id, { phone: `+1555600${String(i).padStart(4, '0')}`, consent_status: 'opted_in' }, 'test')
      const tpl = await svc.templates.create(ws.id, { name: 'T', body: 'Offer' })
      const c = await svc.campaigns.create(ws.id, { name: 'Rollover', template_id: tpl.id, connection_id: conn.id })
      await svc.campaigns.schedule(ws.id, c.id, null)
      const state = async () => {
        const p = await svc.campaigns.toPublic((await storesOf(svc).campaigns.getAny(c.id))!)
        return [p.status, p.paused_reason, p.counts.sent, p.counts.skipped]
      }
      for (let i = 0; i < 4; i++) {
        await timers.advance(10_000)
        await settle()
      }
      expect(await state()).toEqual(['paused', 'allowance_exhausted', 2, 0])
      // the hourly check within the same month: still no room
      await timers.advance(30 * 60_000)
      await svc.campaigns.resumeWhereRoom()
      expect(await state()).toEqual(['paused', 'allowance_exhausted', 2, 0])
      // the first check of December
      await timers.advanceTo(Date.UTC(2026, 11, 1, 0, 0, 5))
      expect(clock.now()).toBe(Date.UTC(2026, 11, 1, 0, 0, 5))
      await svc.campaigns.resumeWhereRoom()
      expect((await state()).slice(0, 2)).toEqual(['running', null])
      for (let i = 0; i < 4; i++) {
        await timers.advance(10_000)
        await settle()
      }
      expect(await state()).toEqual(['completed', null, 4, 0])
    } finally {
      await env.close()
    }
  })

  test('one-to-one messages and a large campaign alternate on the same number', async () => {
    const env = await inProcess()
    try {
      const { svc } = env
      const ws = await svc.workspaces.create({ name: 'Fair' })
      await svc.workspaces.patch(ws.id, { settings: { sending_policy: policy(10) } })
      const conn = await svc.connections.create(ws.id, { phone: '+15550001000', driver: 'sandbox', config: NO_RECEIPTS })
      for (let i = 0; i < 20; i++) await svc.contacts.upsert(ws.id, { phone: `+1555300${String(i).padStart(4, '0')}`, consent_status: 'opted_in' }, 'test')
      const tpl = await svc.templates.create(ws.id, { name: 'T', body: 'Offer' })
      const c = await svc.campaigns.create(ws.id, { name: 'Big', template_id: tpl.id, connection_id: conn.id })
      await svc.campaigns.schedule(ws.id, c.id, null)
      await env.timers.advance(0)
      const orders = []
      for (let i = 0; i < 3; i++) orders.push(await svc.messages.send(ws.id, { connection_id: conn.id, recipient: `+1555400${i}000`, body: `order ${i}`, attachments: [] }))
      await env.timers.advance(60_000)
      const released = env.db.query("SELECT body, sending_at FROM messages WHERE sending_at IS NOT NULL ORDER BY sending_at, seq").all() as { body: string; sending_at: number }[]
      expect(released.slice(0, 7).map((r) => r.body)).toEqual(['Offer', 'order 0', 'Offer', 'order 1', 'Offer', 'order 2', 'Offer'])
      const gaps = released.slice(1).map((r, i) => r.sending_at - released[i]!.sending_at)
      expect(gaps.every((g) => g === 10_000)).toBe(true)
    } finally {
      await env.close()
    }
  })

  test('a start or a completion whose write failed (a full disk) happens at the next sweep, not at the next restart', async () => {
    const env = await inProcess()
    try {
      const { svc, timers, db } = env
      const ws = await svc.workspaces.create({ name: 'Sweep' })
      await svc.workspaces.patch(ws.id, { settings: { sending_policy: policy(0) } })
      const conn = await svc.connections.create(ws.id, { phone: '+15550003000', driver: 'sandbox', config: NO_RECEIPTS })
      await svc.contacts.upsert(ws.id, { phone: '+15550003001', consent_status: 'opted_in' }, 'test')
      const tpl = await svc.templates.create(ws.id, { name: 'T', body: 'Offer' })
      const c = await svc.campaigns.create(ws.id, { name: 'Now', template_id: tpl.id, connection_id: conn.id })
      await svc.webhooks.create(ws.id, 'http://127.0.0.1:9/hook', ['campaign.completed'])
      const status = async () => (await storesOf(svc).campaigns.getAny(c.id))!.status
      const failing = (to: string) => db.run(`CREATE TRIGGER full_disk BEFORE UPDATE OF status ON campaigns WHEN NEW.status = '${to}' BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`)
      // launched now, but the start cannot be written: it stays scheduled, due, with nothing armed
      failing('running')
      await expect(svc.campaigns.schedule(ws.id, c.id, null)).rejects.toThrow('database or disk is full')
      expect(await status()).toBe('scheduled')
      db.run('DROP TRIGGER full_disk')
      await svc.campaigns.sweep()
      expect(await status()).toBe('running')
      // its one message is sent; marking the campaign completed then cannot be written
      failing('completed')
      await timers.advance(0)
      await settle(20)
      expect(await storesOf(svc).campaigns.counts(c.id)).toMatchObject({ total: 1, sent: 1 })
      expect(await status()).toBe('running')
      db.run('DROP TRIGGER full_disk')
      await svc.campaigns.sweep()
      expect(await status()).toBe('completed')
      // announced once, with the completion
      expect(db.query("SELECT COUNT(*) AS n FROM webhook_deliveries WHERE type = 'campaign.completed'").get()).toEqual({ n: 1 })
    } finally {
      await env.close()
    }
  })
})

describe('send window over the API', () => {
  test('created, shown, changed and removed; an unknown time zone, an empty window or a malformed time is refused', async () => {
    const srv = await TestServer.start()
    try {
      const { ws, key } = await srv.tenant()
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
      const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'W', body: 'Hello' } })).json.data
      const base = { name: 'Windowed', template_id: tpl.id, connection_id: conn.id }
      const made = await srv.api(key, 'POST', '/campaigns', { json: { ...base, send_window: { from: '22:00', to: '06:00', time_zone: 'Asia/Tokyo' } } })
      expect([made.status, made.json.data.send_window]).toEqual([201, { from: '22:00', to: '06:00', time_zone: 'Asia/Tokyo' }])
      for (const [send_window, field] of [
        [{ from: '09:00', to: '20:00', time_zone: 'Mars/Olympus_Mons' }, 'send_window.time_zone'],
        [{ from: '09:00', to: '09:00', time_zone: 'UTC' }, 'send_window.to'],
        [{ from: '9:00', to: '20:00', time_zone: 'UTC' }, 'send_window.from'],
        [{ from: '09:00', to: '24:00', time_zone: 'UTC' }, 'send_window.to'],
        [{ from: '09:00', to: '20:00' }, 'send_window.time_zone'],
      ] as const) {
        const r = await srv.api(key, 'POST', '/campaigns', { json: { ...base, send_window } })
        expect([r.status, Object.keys(r.json.errors ?? {})]).toEqual([422, [field]])
      }
      const changed = await srv.api(key, 'PUT', `/campaigns/${made.json.data.id}`, { json: { send_window: { from: '10:00', to: '18:30', time_zone: 'Europe/Berlin' } } })
      expect(changed.json.data.send_window).toEqual({ from: '10:00', to: '18:30', time_zone: 'Europe/Berlin' })
      expect((await srv.api(key, 'PUT', `/campaigns/${made.json.data.id}`, { json: { send_window: null } })).json.data.send_window).toBeNull()
      expect((await srv.api(key, 'GET', '/campaigns')).json.data).toHaveLength(1)
    } finally {
      await srv.close()
    }
  })
})

describe('live counts', () => {
  /** A campaign's counts as its recipients and their messages say (the definition the kept counts must match), read from the database file. */
  function counted(dataDir: string | Database, id: string): Counts {
    const db = typeof dataDir === 'string' ? new Database(join(dataDir, 'capstan.db'), { readonly: true }) : dataDir
    try {
      return db
        .query(
          `SELECT COUNT(*) AS total, COALESCE(SUM(r.status = 'skipped'), 0) AS skipped,
             COALESCE(SUM(r.status = 'pending' OR m.status IN ('queued', 'sending')), 0) AS queued,
             COALESCE(SUM(m.status = 'sent'), 0) AS sent, COALESCE(SUM(m.status = 'delivered'), 0) AS delivered,
             COALESCE(SUM(m.status = 'read'), 0) AS read, COALESCE(SUM(m.status = 'failed'), 0) AS failed
           FROM campaign_recipients r LEFT JOIN messages m ON m.id = r.message_id WHERE r.campaign_id = ?`,
        )
        .get(id) as Counts
    } finally {
      if (typeof dataDir === 'string') db.close()
    }
  }

  test('kept as things happen, they always match the recipients and their messages: releases, receipts, a failure, a skip, erasures, a cancel', async () => {
    const { ws, key, conn, contact, campaign } = await setup(1)
    const people = []
    for (const name of ['Ann', 'Ben', 'Cy', 'Dee', 'Eve', 'Fay']) people.push(await contact({ name, consent_status: 'opted_in', metadata: { plan: 'pro' } }))
    // Ben's messages fail; the others are delivered, then read
    await srv.admin('PATCH', `/connections/${conn.id}`, { config: { delivered_after_ms: 30, read_after_ms: 60, fail_recipients: [people[1]!.phone] } })
    const c = await campaign()
    const matches = (id: string) => waitFor(async () => Bun.deepEquals((await get(key, id)).counts, counted(srv.dataDir, id)), 5000)
    expect((await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })).status).toBe(200)
    // the whole audience is counted from the start (the number may have released its first already)
    const first = (await get(key, c.id)).counts
    expect([first.total, first.skipped, first.queued + first.sent + first.delivered + first.read + first.failed]).toEqual([6, 0, 6])
    await waitFor(async () => (await get(key, c.id)).counts.read >= 1)
    await matches(c.id)
    // Fay opts out before her turn (skipped then); Eve, still pending, and Ann, already read, are erased
    await srv.api(key, 'POST', '/contacts', { json: { phone: people[5]!.phone, consent_status: 'opted_out' } })
    for (const p of [people[4]!, people[0]!]) expect((await srv.admin('POST', `/workspaces/${ws.id}/contacts/erase`, { phone: p.phone })).status).toBe(200)
    await matches(c.id)
    await waitFor(async () => (await get(key, c.id)).status === 'completed', 20_000)
    // a receipt still to come for a message of an erased person would change nothing here
    await Bun.sleep(100)
    await matches(c.id)
    expect((await get(key, c.id)).counts).toEqual({ total: 4, queued: 0, sent: 0, delivered: 0, read: 2, failed: 1, skipped: 1 })

    // a second campaign cancelled half-way: its pending recipients are skipped
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: policy(30) } })
    const d = await campaign({ name: 'Cancelled' })
    await srv.api(key, 'POST', `/campaigns/${d.id}/schedule`, { json: {} })
    expect((await srv.api(key, 'POST', `/campaigns/${d.id}/cancel`, { json: {} })).status).toBe(200)
    await matches(d.id)
    const cancelled = (await get(key, d.id)).counts
    expect([cancelled.total, cancelled.skipped > 0, cancelled.queued]).toEqual([3, true, 0])
  })

  test('an upgraded database starts from what its recipients and messages hold; messages of recipients erased before are no campaign’s', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-campaign-counts-'))
    const db = databaseAtSchema(join(dir, 'capstan.db'), 30)
    try {
      const recipient = db.query("INSERT INTO campaign_recipients (campaign_id, contact_id, phone, status, message_id, updated_at) VALUES ('c1', ?, '+1', ?, ?, 0)")
      const message = db.query("INSERT INTO messages (id, workspace_id, connection_id, direction, status, campaign_id, attachments, created_at, updated_at) VALUES (?, 'w', 'k', 'outbound', ?, 'c1', '[]', 0, 0)")
      recipient.run('p1', 'pending', null)
      recipient.run('p2', 'skipped', null)
      for (const [i, status] of ['queued', 'sending', 'sent', 'delivered', 'read', 'failed', 'read'].entries()) {
        message.run(`m${i}`, status)
        recipient.run(`r${i}`, 'released', `m${i}`)
      }
      message.run('orphan', 'sent') // its recipient was erased before the upgrade
      expect(migrate(db)).toContain(31)
      expect(await new CampaignStore(new SqliteEngine(db, new Writer(db))).counts('c1')).toEqual(counted(db, 'c1'))
      expect(counted(db, 'c1')).toEqual({ total: 9, skipped: 1, queued: 3, sent: 1, delivered: 1, read: 2, failed: 1 })
      expect(db.query("SELECT campaign_id FROM messages WHERE id = 'orphan'").get()).toEqual({ campaign_id: null })
      // and from there the triggers keep it: the orphan's receipt counts nowhere
      db.run("UPDATE messages SET status = 'delivered' WHERE id IN ('orphan', 'm2')")
      expect(await new CampaignStore(new SqliteEngine(db, new Writer(db))).counts('c1')).toEqual(counted(db, 'c1'))
    } finally {
      db.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

describe('audience preview, in process', () => {
  test('the count and the newest sample walk the contacts in slices with the server working between, every slice boundary included', async () => {
    const env = await inProcess()
    try {
      const { svc } = env
      const ws = await svc.workspaces.create({ name: 'Slices' })
      const people: [string, string, Record<string, unknown>][] = [
        ['+15550008001', 'opted_in', { plan: 'pro' }],
        ['+15550008002', 'opted_in', { plan: 'free' }],
        ['+15550008003', 'unknown', { plan: 'pro' }],
        ['+15550008004', 'opted_in', { plan: 'pro' }],
        ['+15550008005', 'opted_in', { plan: 'pro' }],
        ['+15550008006', 'opted_out', { plan: 'pro' }],
        ['+15550008007', 'opted_in', {}],
      ]
      for (const [phone, consent_status, metadata] of people) await svc.contacts.upsert(ws.id, { phone, consent_status: consent_status as any, metadata: metadata as any }, 'test')
      await svc.suppressions.add(ws.id, '+15550008005', null)
      // activity in another order than the numbers' (the walk's): the sample is the newest
      const activity = [5, 7, 1, 6, 2, 4, 3]
      for (const [i, [phone]] of people.entries()) env.db.query('UPDATE contacts SET last_activity_at = ? WHERE phone = ?').run(activity[i]!, phone)
      for (const [audience, expected, newest] of [
        [{}, 4, ['+15550008002', '+15550008004']],
        [{ metadata: { plan: 'pro' } }, 2, ['+15550008004', '+15550008001']],
        [{ metadata: { plan: 'none' } }, 0, []],
      ] as const) {
        for (const slice of [1, 2, 3, 7, 50_000]) {
          let turned = false
          setImmediate(() => (turned = true))
          const r = await svc.campaigns.preview(ws.id, audience, 2, slice)
          expect([audience, slice, r.count, r.rows.map((c) => c.phone)]).toEqual([audience, slice, expected, [...newest]])
          // several slices: the event loop turned between them
          if (slice < people.length) expect(turned).toBe(true)
        }
      }
    } finally {
      await env.close()
    }
  })
})

describe('audience freeze in slices', () => {
  const people: [string, string, Record<string, unknown>][] = [
    ['+15550009001', 'opted_in', { plan: 'pro' }],
    ['+15550009002', 'opted_in', { plan: 'free' }],
    ['+15550009003', 'unknown', { plan: 'pro' }],
    ['+15550009004', 'opted_in', { plan: 'pro' }],
    ['+15550009005', 'opted_in', { plan: 'pro' }],
    ['+15550009006', 'opted_out', { plan: 'pro' }],
    ['+15550009007', 'opted_in', {}],
  ]
  async function freezeEnv() {
    const env = await inProcess()
    const { svc } = env
    const ws = await svc.workspaces.create({ name: 'Freeze' })
    const conn = await svc.connections.create(ws.id, { phone: '+15550009000', driver: 'sandbox', config: NO_RECEIPTS })
    // contacts created in another order than their numbers' (the freeze walks numbers)
    for (const [phone, consent_status, metadata] of [...people].reverse()) await svc.contacts.upsert(ws.id, { phone, consent_status: consent_status as any, metadata: metadata as any }, 'test')
    await svc.suppressions.add(ws.id, '+15550009005', null)
    const tpl = await svc.templates.create(ws.id, { name: 'T', body: 'Offer' })
    const campaign = (audience = {}) => svc.campaigns.create(ws.id, { name: 'Sliced', template_id: tpl.id, connection_id: conn.id, audience })
    const recipients = (id: string) => (env.db.query('SELECT phone FROM campaign_recipients WHERE campaign_id = ? ORDER BY seq').all(id) as { phone: string }[]).map((r) => r.phone)
    return { env, svc, ws, campaign, recipients }
  }

  /** Hold a freeze between its slices until `open()` (`close()` holds the next one again). */
  const holdSlices = (svc: Awaited<ReturnType<typeof freezeEnv>>['svc']) => {
    let waiting: (() => void)[] = []
    let held = true
    svc.campaigns.betweenSlices = () => (held ? new Promise<void>((resolve) => waiting.push(resolve)) : new Promise<void>((resolve) => setImmediate(resolve)))
    return {
      open() {
        held = false
        for (const go of waiting) go()
        waiting = []
      },
      close() {
        held = true
      },
    }
  }

  test('every slice boundary: the whole audience, in number order, with the server working between slices; the schedule answers with the full counts', async () => {
    const { env, svc, ws, campaign, recipients } = await freezeEnv()
    try {
      for (const [audience, expected] of [
        [{}, ['+15550009001', '+15550009002', '+15550009004', '+15550009007']],
        [{ metadata: { plan: 'pro' } }, ['+15550009001', '+15550009004']],
        [{ metadata: { plan: 'none' } }, []],
      ] as const) {
        for (const slice of [1, 2, 3, 7, 5_000]) {
          svc.campaigns.freezeSliceSize = slice
          const c = await campaign(audience)
          let midway: number | null = null
          setImmediate(async () => (midway = (await storesOf(svc).campaigns.counts(c.id)).total))
          const started = await svc.campaigns.schedule(ws.id, c.id, null)
          expect([audience, slice, recipients(c.id)]).toEqual([audience, slice, [...expected]])
          expect([started.freeze_after, (await svc.campaigns.toPublic(started)).counts.total]).toEqual([null, expected.length])
          // more than one slice: the event loop turned before the last one, which the answer waited for
          if (slice < people.length && expected.length > 0) expect(midway!).toBeLessThan(expected.length)
          expect(started.status).toBe(expected.length ? 'running' : 'completed')
          if (expected.length) await svc.campaigns.cancel(ws.id, c.id)
        }
      }
    } finally {
      await env.close()
    }
  })

  test('a contact created after the start is not in the audience; a cancel between slices stops the freeze; a pause does not', async () => {
    const { env, svc, ws, campaign, recipients } = await freezeEnv()
    try {
      svc.campaigns.freezeSliceSize = 2
      // the freeze held between its slices while the test looks
      const gate = holdSlices(svc)
      const c = await campaign()
      const starting = svc.campaigns.schedule(ws.id, c.id, null)
      // the start and the first slice are one write
      await waitFor(async () => (await storesOf(svc).campaigns.getAny(c.id))!.status === 'running')
      expect(recipients(c.id)).toEqual(['+15550009001', '+15550009002'])
      env.clock.t += 1000
      await svc.contacts.upsert(ws.id, { phone: '+15550009008', consent_status: 'opted_in' }, 'test')
      expect((await storesOf(svc).campaigns.getAny(c.id))!.freeze_after).not.toBeNull()
      await svc.campaigns.pause(ws.id, c.id)
      gate.open()
      await starting
      expect([(await storesOf(svc).campaigns.getAny(c.id))!.status, recipients(c.id)]).toEqual(['paused', ['+15550009001', '+15550009002', '+15550009004', '+15550009007']])

      const d = await campaign()
      gate.close()
      const cancelled = svc.campaigns.schedule(ws.id, d.id, null)
      await waitFor(async () => (await storesOf(svc).campaigns.getAny(d.id))!.status === 'running')
      await svc.campaigns.cancel(ws.id, d.id)
      gate.open()
      const after = await cancelled
      expect([after.status, after.freeze_after, recipients(d.id)]).toEqual(['cancelled', null, ['+15550009001', '+15550009002']])
      expect((await svc.campaigns.toPublic(after)).counts).toMatchObject({ total: 2, skipped: 2 })
      // a later campaign has the new contact
      svc.campaigns.freezeSliceSize = 5_000
      const e = await campaign()
      await svc.campaigns.schedule(ws.id, e.id, null)
      expect(recipients(e.id)).toContain('+15550009008')
    } finally {
      await env.close()
    }
  })

  test('a start now answers after freezeWaitMs at most, the freeze going on', async () => {
    const { env, svc, ws, campaign, recipients } = await freezeEnv()
    try {
      svc.campaigns.freezeSliceSize = 1
      svc.campaigns.freezeWaitMs = 0
      const c = await campaign()
      const answered = await svc.campaigns.schedule(ws.id, c.id, null)
      expect(answered.status).toBe('running')
      expect(answered.freeze_after).not.toBeNull()
      await waitFor(async () => (await storesOf(svc).campaigns.getAny(c.id))!.freeze_after === null)
      expect(recipients(c.id)).toEqual(['+15550009001', '+15550009002', '+15550009004', '+15550009007'])
    } finally {
      await env.close()
    }
  })

  test('a slice whose write fails (a full disk) leaves the campaign running with what was frozen; the next sweep goes on; it completes only then', async () => {
    const { env, svc, ws, campaign, recipients } = await freezeEnv()
    try {
      await svc.workspaces.patch(ws.id, { settings: { sending_policy: policy(0) } })
      svc.campaigns.freezeSliceSize = 2
      const gate = holdSlices(svc)
      const c = await campaign()
      const starting = svc.campaigns.schedule(ws.id, c.id, null)
      await waitFor(async () => (await storesOf(svc).campaigns.getAny(c.id))!.status === 'running')
      env.db.run("CREATE TRIGGER full_disk BEFORE INSERT ON campaign_recipients BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END")
      gate.open()
      const started = await starting
      expect([started.status, started.freeze_after, recipients(c.id)]).toEqual(['running', '+15550009002', ['+15550009001', '+15550009002']])
      // the two frozen are sent; with more to come, the campaign is not completed
      for (let i = 0; i < 3; i++) {
        await env.timers.advance(0)
        await settle()
      }
      expect([(await storesOf(svc).campaigns.getAny(c.id))!.status, (await storesOf(svc).campaigns.counts(c.id)).sent]).toEqual(['running', 2])
      env.db.run('DROP TRIGGER full_disk')
      await svc.campaigns.sweep()
      await waitFor(async () => (await storesOf(svc).campaigns.getAny(c.id))!.freeze_after === null)
      for (let i = 0; i < 3; i++) {
        await env.timers.advance(0)
        await settle()
      }
      expect([(await storesOf(svc).campaigns.getAny(c.id))!.status, recipients(c.id), (await storesOf(svc).campaigns.counts(c.id)).sent]).toEqual(['completed', ['+15550009001', '+15550009002', '+15550009004', '+15550009007'], 4])
    } finally {
      await env.close()
    }
  })

  test('a start cut off by a crash mid-freeze: the server goes on with the rest after a restart; each recipient gets one message', async () => {
    const own = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    try {
      const { key, contact, campaign } = await setup(0, own)
      const phones: string[] = []
      for (let i = 0; i < 5; i++) phones.push((await contact({ name: `P${i}`, consent_status: 'opted_in', metadata: { plan: 'pro' } })).phone)
      phones.sort()
      const c = await campaign()
      await own.stop('SIGKILL')
      // as the start's write leaves it (status, body and the first slice of two), the rest not yet frozen
      const db = new Database(join(own.dataDir, 'capstan.db'))
      const ids = db.query('SELECT id, phone FROM contacts WHERE phone IN (?, ?)').all(phones[0]!, phones[1]!) as { id: string; phone: string }[]
      db.query("UPDATE campaigns SET status = 'running', started_at = ?, body = 'Hi {{name}}, {{metadata.plan}} deal: {{1}}', freeze_after = ? WHERE id = ?").run(Date.now(), phones[1]!, c.id)
      for (const r of ids) db.query("INSERT INTO campaign_recipients (campaign_id, contact_id, phone, status, updated_at) VALUES (?, ?, ?, 'pending', 0)").run(c.id, r.id, r.phone)
      db.close()
      await own.boot()
      await waitFor(async () => (await get(key, c.id, own)).status === 'completed', 20_000)
      expect((await get(key, c.id, own)).counts).toMatchObject({ total: 5, sent: 5, skipped: 0 })
      const sent = new Database(join(own.dataDir, 'capstan.db'), { readonly: true })
      const perRecipient = sent.query('SELECT recipient, COUNT(*) AS n FROM messages WHERE campaign_id = ? GROUP BY recipient ORDER BY recipient').all(c.id)
      sent.close()
      expect(perRecipient).toEqual(phones.map((p) => ({ recipient: p, n: 1 })))
    } finally {
      await own.close()
    }
  })
})
