/** Groups (spec §2 Group, §4; CONTRACT §2): mirror, sync, search, group posting. */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { TestServer, newPhone } from './support/server'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)

const NO_RECEIPTS = { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }
const FAST = { hourly_cap: 1000, daily_cap: 10000, min_gap_seconds: 0, max_gap_seconds: 0 }
let srv: TestServer
beforeAll(async () => {
  srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
})
afterAll(() => srv.close())

const participant = () => `+4479${String(Math.floor(Math.random() * 1e8)).padStart(8, '0')}`
type G = { external_id: string; name: string; participants: string[]; announce?: boolean; admin?: boolean }
const group = (name: string, n: number, announce = false, admin = true, external_id = `ext-${crypto.randomUUID().slice(0, 8)}`): G => ({ external_id, name, participants: Array.from({ length: n }, participant), announce, admin })

async function setup(config: Record<string, unknown> = NO_RECEIPTS) {
  const t = await srv.tenant()
  await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: FAST } })
  const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config })).json.data
  const setGroups = (gs: G[], c = conn.id) => srv.admin('PUT', `/connections/${c}/sandbox/groups`, { groups: gs })
  return { ...t, conn, setGroups }
}

function dataFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => (statSync(join(dir, f)).isDirectory() ? dataFiles(join(dir, f)) : [join(dir, f)]))
}

describe('sync and list', () => {
  test('largest first with counts, can_send, announce, number; no connection ids; participants never on disk', async () => {
    const { key, conn, setGroups } = await setup()
    const gs = [group('Small talk', 2), group('Big family', 5), group('Announcements', 3, true, false), group('Admins only but admin', 4, true, true)]
    expect((await setGroups(gs)).status).toBe(200)
    const r = await srv.api(key, 'POST', '/groups/sync')
    expect(r.json.data.numbers).toEqual([{ number: conn.phone, status: 'synced', groups: 4, error: null }])
    expect(r.text).not.toContain(conn.id)
    const list = await srv.api(key, 'GET', '/groups')
    expect(list.json.data.map((g: any) => [g.name, g.participant_count, g.can_send, g.announce])).toEqual([
      ['Big family', 5, true, false],
      ['Admins only but admin', 4, true, true],
      ['Announcements', 3, false, true],
      ['Small talk', 2, true, false],
    ])
    for (const g of list.json.data) {
      expect(g.number).toBe(conn.phone)
      expect(Object.keys(g).sort()).toEqual(['announce', 'can_send', 'id', 'name', 'number', 'participant_count', 'synced_at'])
    }
    expect(list.text).not.toContain(conn.id)
    // send into a group too, then look for any participant number anywhere in the data dir
    const big = list.json.data[0]
    const sent = await srv.api(key, 'POST', `/groups/${big.id}/messages`, { json: { body: 'hello all' } })
    await waitFor(async () => (await srv.api(key, 'GET', `/messages/${sent.json.data.id}`)).json.data.status === 'sent')
    await Bun.sleep(200)
    const numbers = gs.flatMap((g) => g.participants)
    for (const f of dataFiles(srv.dataDir)) {
      const content = readFileSync(f)
      for (const n of numbers) expect(content.includes(n)).toBe(false)
    }
    expect(srv.output).not.toContain(numbers[0]!)
  })

  test('ids are stable across syncs; renames and counts update; a left group goes with its messages', async () => {
    const { key, setGroups } = await setup()
    const keep = group('Keepers', 3)
    const leave = group('Leavers', 2)
    await setGroups([keep, leave])
    await srv.api(key, 'POST', '/groups/sync')
    const first = (await srv.api(key, 'GET', '/groups')).json.data
    const leaveId = first.find((g: any) => g.name === 'Leavers').id
    const keepId = first.find((g: any) => g.name === 'Keepers').id
    const msg = (await srv.api(key, 'POST', `/groups/${leaveId}/messages`, { json: { body: 'bye' } })).json.data
    await waitFor(async () => (await srv.api(key, 'GET', `/messages/${msg.id}`)).json.data.status === 'sent')
    await setGroups([{ ...keep, name: 'Keepers renamed', participants: [...keep.participants, participant()] }])
    await srv.api(key, 'POST', '/groups/sync')
    const second = (await srv.api(key, 'GET', '/groups')).json.data
    expect(second.map((g: any) => [g.id, g.name, g.participant_count])).toEqual([[keepId, 'Keepers renamed', 4]])
    expect((await srv.api(key, 'GET', `/messages/${msg.id}`)).status).toBe(404)
    expect((await srv.api(key, 'GET', '/messages')).json.meta.total).toBe(0)
    expect((await srv.api(key, 'POST', `/groups/${leaveId}/messages`, { json: { body: 'x' } })).status).toBe(404)
  })

  test('an offline number reports failed and keeps its previous mirror; the others sync', async () => {
    const { ws, key, conn, setGroups } = await setup()
    const other = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
    await setGroups([group('On A', 2)])
    await setGroups([group('On B', 3)], other.id)
    await srv.api(key, 'POST', '/groups/sync')
    await srv.admin('PATCH', `/connections/${conn.id}`, { status: 'offline' })
    await setGroups([])
    await setGroups([group('On B', 3), group('New on B', 1)], other.id)
    const r = (await srv.api(key, 'POST', '/groups/sync')).json.data.numbers
    const byNumber = Object.fromEntries(r.map((e: any) => [e.number, e]))
    expect(byNumber[conn.phone]).toMatchObject({ status: 'failed', groups: null })
    expect(typeof byNumber[conn.phone].error).toBe('string')
    expect(byNumber[other.phone]).toMatchObject({ status: 'synced', groups: 2, error: null })
    expect((await srv.api(key, 'GET', '/groups')).json.data.map((g: any) => g.name).sort()).toEqual(['New on B', 'On A', 'On B'])
  })

  test('search is case-insensitive (Unicode too); pagination; validation', async () => {
    const { key, setGroups } = await setup()
    await setGroups([group('Team Alpha Riders', 4), group('beta crew', 3), group('ALPHA squad', 2), group('École Été', 1)])
    await srv.api(key, 'POST', '/groups/sync')
    const names = async (q: string) => (await srv.api(key, 'GET', `/groups?${q}`)).json.data.map((g: any) => g.name)
    expect(await names('search=alpha')).toEqual(['Team Alpha Riders', 'ALPHA squad'])
    expect(await names('search=ALPHA')).toEqual(['Team Alpha Riders', 'ALPHA squad'])
    expect(await names('search=BeTa')).toEqual(['beta crew'])
    expect(await names(`search=${encodeURIComponent('ÉCOLE')}`)).toEqual(['École Été'])
    expect(await names('search=%25')).toEqual([])
    expect(await names('search=zeta')).toEqual([])
    const page = await srv.api(key, 'GET', '/groups?per_page=2&page=2')
    expect(page.json.data.map((g: any) => g.name)).toEqual(['ALPHA squad', 'École Été'])
    expect(page.json.meta).toEqual({ page: 2, per_page: 2, total: 4, last_page: 2 })
    expect((await srv.api(key, 'GET', '/groups?per_page=101')).status).toBe(422)
  })
})

describe('posting into a group', () => {
  test('202 queued, then sent and never delivered/read, and no delivered/read webhook', async () => {
    const { ws, key, conn, setGroups } = await setup({ delivered_after_ms: 50, read_after_ms: 100, fail_recipients: [] })
    const events: any[] = []
    const rx = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: async (req) => (events.push(await req.json()), new Response('ok')) })
    await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: `http://127.0.0.1:${rx.port}/` })
    await setGroups([group('Customers', 3)])
    await srv.api(key, 'POST', '/groups/sync')
    const g = (await srv.api(key, 'GET', '/groups')).json.data[0]
    const r = await srv.api(key, 'POST', `/groups/${g.id}/messages`, { json: { body: 'Sale today' } })
    expect(r.status).toBe(202)
    expect(r.json.data).toMatchObject({ status: 'queued', group_id: g.id, recipient: null, contact_id: null, connection_id: conn.id, body: 'Sale today' })
    const direct = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'control' } })).json.data
    await waitFor(async () => (await srv.api(key, 'GET', `/messages/${direct.id}`)).json.data.status === 'read')
    await srv.admin('POST', `/messages/${r.json.data.id}/sandbox/receipt`, { status: 'delivered' })
    await srv.admin('POST', `/messages/${r.json.data.id}/sandbox/receipt`, { status: 'read' })
    await Bun.sleep(300)
    const final = (await srv.api(key, 'GET', `/messages/${r.json.data.id}`)).json.data
    expect(final.status).toBe('sent')
    expect(final.timeline.map((e: any) => e.status)).toEqual(['queued', 'sending', 'sent'])
    expect(final.outcome.state).toBe('sent')
    const forGroup = events.filter((e) => e.data.id === r.json.data.id).map((e) => e.type)
    expect(forGroup).toEqual(['message.sent'])
    rx.stop(true)
  })

  test('refusals: admin-only, number not connected, another workspace, validation; nothing queued', async () => {
    const { key, conn, setGroups } = await setup()
    await setGroups([group('Broadcast only', 3, true, false), group('Open', 2)])
    await srv.api(key, 'POST', '/groups/sync')
    const [bc, open] = (await srv.api(key, 'GET', '/groups')).json.data
    expect(bc.can_send).toBe(false)
    const a = await srv.api(key, 'POST', `/groups/${bc.id}/messages`, { json: { body: 'x' } })
    expect([a.status, a.json.code]).toEqual([422, 'group_admin_only'])
    await srv.admin('PATCH', `/connections/${conn.id}`, { status: 'offline' })
    const d = await srv.api(key, 'POST', `/groups/${open.id}/messages`, { json: { body: 'x' } })
    expect([d.status, d.json.code]).toEqual([422, 'group_number_disconnected'])
    await srv.admin('PATCH', `/connections/${conn.id}`, { status: 'online' })
    for (const [body, field] of [[{}, 'body'], [{ body: '' }, 'body'], [{ body: 'a'.repeat(4097) }, 'body'], [{ body: 'x', media: { attachments: [] } }, 'media']] as const) {
      const r = await srv.api(key, 'POST', `/groups/${open.id}/messages`, { json: body })
      expect(r.status).toBe(422)
      expect(Object.keys(r.json.errors)).toContain(field)
    }
    const fd = new FormData()
    fd.set('body', 'with a file')
    fd.set('file', new File(['%PDF-1.4'], 'a.pdf'))
    expect(Object.keys((await srv.api(key, 'POST', `/groups/${open.id}/messages`, { multipart: fd })).json.errors)).toContain('file')
    expect((await srv.api(key, 'GET', '/messages')).json.data).toEqual([])
    const other = await setup()
    expect((await srv.api(other.key, 'POST', `/groups/${open.id}/messages`, { json: { body: 'x' } })).status).toBe(404)
    expect((await srv.api(key, 'POST', `/groups/not-an-id/messages`, { json: { body: 'x' } })).status).toBe(404)
  })

  test('a queued post fails at release when a sync since shows the group admins-only; the number stays free for the rest', async () => {
    const { ws, key, conn, setGroups } = await setup()
    const events: any[] = []
    const rx = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: async (req) => (events.push(await req.json()), new Response('ok')) })
    await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: `http://127.0.0.1:${rx.port}/`, events: ['message.failed'] })
    const team = group('Team', 3)
    const other = group('Other', 2)
    await setGroups([team, other])
    await srv.api(key, 'POST', '/groups/sync')
    const byName = async () => Object.fromEntries((await srv.api(key, 'GET', '/groups')).json.data.map((g: any) => [g.name, g]))
    const g = await byName()
    const post = async (id: string, body: string) => (await srv.api(key, 'POST', `/groups/${id}/messages`, { json: { body } })).json.data.id as string
    const status = async (id: string) => (await srv.api(key, 'GET', `/messages/${id}`)).json.data
    // one release an hour: the first post leaves, the next two wait in the queue
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 1 } } })
    const first = await post(g.Team.id, 'first')
    await waitFor(async () => (await status(first)).status === 'sent')
    const held = await post(g.Team.id, 'held')
    const control = await post(g.Other.id, 'control')
    expect((await status(held)).status).toBe('queued')
    // meanwhile the group turns announcement-only and the number is no longer an admin
    await setGroups([{ ...team, announce: true, admin: false }, other])
    await srv.api(key, 'POST', '/groups/sync')
    expect((await byName()).Team.can_send).toBe(false)
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 100 } } })
    await waitFor(async () => (await status(control)).status === 'sent')
    const m = await status(held)
    expect([m.status, m.error?.code, m.timeline.map((e: any) => e.status)]).toEqual(['failed', 'group_admin_only', ['queued', 'failed']])
    // the simulated network never got it
    const ledger = readFileSync(join(srv.dataDir, 'sandbox', `${conn.id}.jsonl`), 'utf8')
    expect([ledger.includes(first), ledger.includes(control), ledger.includes(held)]).toEqual([true, true, false])
    // a network that turned a group admins-only before any sync noticed refuses the post itself
    await setGroups([{ ...team, announce: true, admin: false }, { ...other, announce: true, admin: false }])
    const stale = await post(g.Other.id, 'stale mirror')
    await waitFor(async () => (await status(stale)).status === 'failed')
    const s = await status(stale)
    expect([s.error?.code, s.timeline.map((e: any) => e.status)]).toEqual(['group_admin_only', ['queued', 'sending', 'failed']])
    await waitFor(() => events.length >= 2)
    expect(events.map((e) => [e.type, e.data.id])).toEqual([
      ['message.failed', held],
      ['message.failed', stale],
    ])
    rx.stop(true)
  })

  test('scopes: groups:send posts (messages:write does not); groups:read syncs and lists', async () => {
    const { ws, key, setGroups } = await setup()
    await setGroups([group('G', 2)])
    await srv.api(key, 'POST', '/groups/sync')
    const g = (await srv.api(key, 'GET', '/groups')).json.data[0]
    const writer = (await srv.key(ws.id, ['messages:write', 'groups:read'])).key
    const sender = (await srv.key(ws.id, ['groups:send'])).key
    expect((await srv.api(writer, 'POST', `/groups/${g.id}/messages`, { json: { body: 'x' } })).status).toBe(403)
    expect((await srv.api(sender, 'POST', `/groups/${g.id}/messages`, { json: { body: 'x' } })).status).toBe(202)
    expect((await srv.api(sender, 'GET', '/groups')).status).toBe(403)
    expect((await srv.api(sender, 'POST', '/groups/sync')).status).toBe(403)
    expect((await srv.api(writer, 'POST', '/groups/sync')).status).toBe(200)
  })

  test('idempotent posts; one message of the allowance each', async () => {
    const { ws, key, setGroups } = await setup()
    await setGroups([group('G', 2)])
    await srv.api(key, 'POST', '/groups/sync')
    const g = (await srv.api(key, 'GET', '/groups')).json.data[0]
    const h = { 'idempotency-key': `grp-${crypto.randomUUID()}` }
    const r1 = await srv.api(key, 'POST', `/groups/${g.id}/messages`, { json: { body: 'once' }, headers: h })
    const r2 = await srv.api(key, 'POST', `/groups/${g.id}/messages`, { json: { body: 'once' }, headers: h })
    expect(r2.headers.get('idempotency-replayed')).toBe('true')
    expect(r2.text).toBe(r1.text)
    expect((await srv.api(key, 'POST', `/groups/${g.id}/messages`, { json: { body: 'twice' }, headers: h })).status).toBe(409)
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { message_allowance: 2 } })
    expect((await srv.api(key, 'POST', `/groups/${g.id}/messages`, { json: { body: 'two' } })).status).toBe(202)
    const over = await srv.api(key, 'POST', `/groups/${g.id}/messages`, { json: { body: 'three' } })
    expect([over.status, over.json.code]).toEqual([422, 'allowance_exhausted'])
  })
})
