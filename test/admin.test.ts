/** The admin API (CONTRACT §6): workspaces, keys, audit log, suppressions, and its token. */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { join } from 'node:path'
import { ADMIN_TOKEN, TestServer, newPhone } from './support/server'

setDefaultTimeout(60_000)

const ALL = ['contacts:read', 'contacts:write', 'messages:write', 'messages:read', 'media:read', 'groups:read', 'groups:send', 'templates:read', 'templates:write', 'campaigns:read', 'campaigns:write', 'campaigns:send']

let srv: TestServer
beforeAll(async () => {
  srv = await TestServer.start()
})
afterAll(() => srv.close())

describe('admin token', () => {
  test('a wrong or missing admin token is 401 with the admin message', async () => {
    for (const bearer of [undefined, 'wrong-token', `${'x'.repeat(40)}`]) {
      const r = await srv.request('GET', '/admin/api/workspaces', bearer === undefined ? {} : { bearer })
      expect(r.status).toBe(401)
      expect(r.json).toEqual({ message: 'A valid admin token is required.', code: 'unauthenticated' })
    }
  })

  test('an API key is not an admin token', async () => {
    const { key } = await srv.tenant()
    expect((await srv.request('GET', '/admin/api/workspaces', { bearer: key })).status).toBe(401)
  })
})

describe('workspaces', () => {
  test('create derives a unique slug, list and get return settings with defaults', async () => {
    const a = await srv.admin('POST', '/workspaces', { name: 'Ünïcode Shop!' })
    const b = await srv.admin('POST', '/workspaces', { name: 'Ünïcode Shop!' })
    expect(a.status).toBe(201)
    expect(a.json.data.slug).toBe('unicode-shop')
    expect(b.json.data.slug).toBe('unicode-shop-2')
    expect(a.json.data.settings).toEqual({
      sending_policy: { hourly_cap: 60, daily_cap: 500, min_gap_seconds: 3, max_gap_seconds: 12 },
      message_allowance: null,
      media: { retention_days: 30, max_bytes: 16777216, max_total_bytes: null },
      messages: { content_retention_days: null },
      contacts: { default_country: null },
    })
    const got = await srv.admin('GET', `/workspaces/${a.json.data.id}`)
    expect(got.json.data).toEqual(a.json.data)
    const list = await srv.admin('GET', '/workspaces?per_page=100')
    expect(list.json.data.map((w: any) => w.id)).toContain(b.json.data.id)
    expect(list.json.meta.per_page).toBe(100)
  })

  test('an explicit slug must be well formed and unique', async () => {
    const slug = `shop-${crypto.randomUUID().slice(0, 6)}`
    expect((await srv.admin('POST', '/workspaces', { name: 'S', slug })).json.data.slug).toBe(slug)
    const dup = await srv.admin('POST', '/workspaces', { name: 'S', slug })
    expect(dup.status).toBe(422)
    expect(dup.json.errors.slug).toBeDefined()
    for (const badSlug of ['Upper', 'two--dashes', '-lead', 'sp ace', '']) {
      expect((await srv.admin('POST', '/workspaces', { name: 'S', slug: badSlug })).status).toBe(422)
    }
    expect((await srv.admin('POST', '/workspaces', {})).json.errors.name).toBeDefined()
  })

  test('patch changes name, status and settings partially and validates them', async () => {
    const ws = await srv.workspace()
    const r = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 10, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 1.5 } } })
    expect(r.status).toBe(200)
    expect(r.json.data.settings.sending_policy).toEqual({ hourly_cap: 10, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 1.5 })
    expect(r.json.data.settings.media).toEqual({ retention_days: 30, max_bytes: 16777216, max_total_bytes: null })
    const r2 = await srv.admin('PATCH', `/workspaces/${ws.id}`, { name: 'Renamed', settings: { message_allowance: 1000 } })
    expect(r2.json.data.name).toBe('Renamed')
    expect(r2.json.data.settings.message_allowance).toBe(1000)
    expect(r2.json.data.settings.sending_policy.hourly_cap).toBe(10)
    const r3 = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { message_allowance: null } })
    expect(r3.json.data.settings.message_allowance).toBeNull()
    // sending_policy and media merge: the fields left out keep their value
    const r4 = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 25 }, media: { retention_days: 7 } } })
    expect(r4.status).toBe(200)
    expect(r4.json.data.settings.sending_policy).toEqual({ hourly_cap: 25, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 1.5 })
    expect(r4.json.data.settings.media).toEqual({ retention_days: 7, max_bytes: 16777216, max_total_bytes: null })
    // a gap checked against the stored one: min 5 over the stored max 1.5 is refused, naming the field given
    const gap = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 5 } } })
    expect([gap.status, Object.keys(gap.json.errors)]).toEqual([422, ['settings.sending_policy.min_gap_seconds']])
    const gap2 = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { max_gap_seconds: 0 } } })
    expect(gap2.status).toBe(200)
    const bad = [
      { status: 'paused' },
      { name: '' },
      { name: ' \t\n ' },
      { settings: { sending_policy: { hourly_cap: 0, daily_cap: 1, min_gap_seconds: 0, max_gap_seconds: 0 } } },
      { settings: { sending_policy: { hourly_cap: 1, daily_cap: 1, min_gap_seconds: 5, max_gap_seconds: 1 } } },
      { settings: { sending_policy: { hourly_cap: 1.5 } } },
      { settings: { sending_policy: { min_gap_seconds: 1 } } },
      { settings: { media: { max_bytes: 10 } } },
      { settings: { message_allowance: -1 } },
      { settings: { media: { retention_days: 0, max_bytes: 10 } } },
    ]
    for (const body of bad) expect((await srv.admin('PATCH', `/workspaces/${ws.id}`, body)).status).toBe(422)
    expect((await srv.admin('GET', `/workspaces/${ws.id}`)).json.data.name).toBe('Renamed')
    expect((await srv.admin('PATCH', `/workspaces/${crypto.randomUUID()}`, { name: 'x' })).status).toBe(404)
    expect((await srv.admin('GET', `/workspaces/not-a-uuid`)).status).toBe(404)
  })
})

describe('keys', () => {
  test('a key has the documented format; no scopes means all twelve, stamped; the secret is only shown once', async () => {
    const ws = await srv.workspace()
    const r = await srv.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'ci' })
    expect(r.status).toBe(201)
    const k = r.json.data
    expect(k.key).toMatch(/^cap_[a-z0-9]{16}\.[A-Za-z0-9]{48}$/)
    expect(k.prefix).toBe(k.key.split('.')[0])
    expect(k.scopes).toEqual(ALL)
    expect(k.status).toBe('active')
    const empty = await srv.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'empty', scopes: [] })
    expect(empty.json.data.scopes).toEqual(ALL)
    const list = await srv.admin('GET', `/workspaces/${ws.id}/keys`)
    expect(list.text).not.toContain(k.key.split('.')[1])
    expect(list.json.data.every((x: any) => x.key === undefined && x.secret_hash === undefined)).toBe(true)
    // only the hash of the secret is on disk
    const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
    const dump = JSON.stringify(db.query('SELECT * FROM api_keys').all())
    db.close()
    expect(dump).not.toContain(k.key.split('.')[1])
  })

  test('a key shows when it was last used; the time is kept across a restart and when it is revoked', async () => {
    const own = await TestServer.start()
    try {
      const ws = await own.workspace()
      const [a, b] = [await own.key(ws.id), await own.key(ws.id)]
      const lastUsed = async () => new Map((await own.admin('GET', `/workspaces/${ws.id}/keys`)).json.data.map((k: any) => [k.id, k.last_used_at]))
      expect([...(await lastUsed()).values()]).toEqual([null, null])
      const before = Date.now()
      for (const k of [a, b]) expect((await own.api(k.key, 'GET', '/workspace')).status).toBe(200)
      // shown at once (from memory; nothing is written on the request path)
      const shown = await lastUsed()
      for (const k of [a, b]) expect(Date.parse(shown.get(k.id) as string)).toBeGreaterThanOrEqual(before - 1000)
      const written = () => {
        const db = new Database(join(own.dataDir, 'capstan.db'), { readonly: true })
        try {
          return new Map((db.query('SELECT id, last_used_at FROM api_keys').all() as { id: string; last_used_at: number | null }[]).map((r) => [r.id, r.last_used_at]))
        } finally {
          db.close()
        }
      }
      // revoking a key writes its last use with it
      expect((await own.admin('POST', `/keys/${b.id}/revoke`)).status).toBe(200)
      expect(written().get(b.id)).toBe(Date.parse(shown.get(b.id) as string))
      // a graceful stop writes the rest
      await own.stop()
      expect(written().get(a.id)).toBe(Date.parse(shown.get(a.id) as string))
      await own.boot()
      expect(await lastUsed()).toEqual(shown)
    } finally {
      await own.close()
    }
  }, 30_000)

  test('chosen scopes are kept exactly; unknown scopes, bad names and past expiry are 422', async () => {
    const ws = await srv.workspace()
    const r = await srv.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'r', scopes: ['contacts:read', 'groups:send'] })
    expect(r.json.data.scopes).toEqual(['contacts:read', 'groups:send'])
    for (const body of [{ name: 'x', scopes: ['admin:all'] }, { name: 'x', scopes: 'contacts:read' }, { name: '' }, { name: '   ' }, {}, { name: 'x', expires_at: '2001-01-01T00:00:00Z' }, { name: 'x', expires_at: 'tomorrow' }, { name: 'x', expires_at: '2099-02-30T00:00:00Z' }, { name: 'x', expires_at: '2099-01-01T24:00:00Z' }]) {
      expect((await srv.admin('POST', `/workspaces/${ws.id}/keys`, body)).status).toBe(422)
    }
    expect((await srv.admin('POST', `/workspaces/${crypto.randomUUID()}/keys`, { name: 'x' })).status).toBe(404)
  })

  test('revoke, then remove; removing an active key is 409; every step is in the audit log', async () => {
    const ws = await srv.workspace()
    const k = await srv.key(ws.id)
    const early = await srv.admin('DELETE', `/keys/${k.id}`)
    expect(early.status).toBe(409)
    expect((await srv.admin('POST', `/keys/${k.id}/revoke`)).json.data.status).toBe('revoked')
    expect((await srv.admin('DELETE', `/keys/${k.id}`)).status).toBe(204)
    expect((await srv.admin('GET', `/workspaces/${ws.id}/keys`)).json.data).toEqual([])
    expect((await srv.admin('POST', `/keys/${k.id}/revoke`)).status).toBe(404)
    const log = await srv.admin('GET', `/workspaces/${ws.id}/audit-log`)
    expect(log.json.data.map((e: any) => [e.action, e.key_id])).toEqual([
      ['api_key.removed', k.id],
      ['api_key.revoked', k.id],
      ['api_key.created', k.id],
    ])
    for (const e of log.json.data) expect(e.at).toMatch(/Z$/)
  })
})

describe('suppressions', () => {
  test('add (201, then 200 for a repeat), list, remove (204, then 404)', async () => {
    const ws = await srv.workspace()
    const phone = newPhone()
    const a = await srv.admin('POST', `/workspaces/${ws.id}/suppressions`, { phone, reason: 'complaint' })
    expect(a.status).toBe(201)
    expect(a.json.data).toMatchObject({ phone, reason: 'complaint' })
    expect((await srv.admin('POST', `/workspaces/${ws.id}/suppressions`, { phone })).status).toBe(200)
    expect((await srv.admin('POST', `/workspaces/${ws.id}/suppressions`, { phone: '555' })).status).toBe(422)
    const list = await srv.admin('GET', `/workspaces/${ws.id}/suppressions`)
    expect(list.json.data.map((x: any) => x.phone)).toEqual([phone])
    expect((await srv.admin('DELETE', `/workspaces/${ws.id}/suppressions/${encodeURIComponent(phone)}`)).status).toBe(204)
    expect((await srv.admin('DELETE', `/workspaces/${ws.id}/suppressions/${encodeURIComponent(phone)}`)).status).toBe(404)
    // the path is decoded once: a literal % (sent as %25) is a phone that does not exist, not a 500
    for (const odd of ['%25', '100%25', '%2525', '%25E0%25A4%25A']) expect((await srv.admin('DELETE', `/workspaces/${ws.id}/suppressions/${odd}`)).status).toBe(404)
    // and a + sent as is reads as the + of the number
    await srv.admin('POST', `/workspaces/${ws.id}/suppressions`, { phone })
    expect((await srv.admin('DELETE', `/workspaces/${ws.id}/suppressions/${phone}`)).status).toBe(204)
  })
})

describe('dashboard sessions', () => {
  const signIn = async (s: TestServer) => {
    const r = await fetch(`${s.base}/admin/session`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-capstan-csrf': '1' }, body: JSON.stringify({ token: ADMIN_TOKEN }) })
    expect(r.status).toBe(204)
    expect(r.headers.get('x-content-type-options')).toBe('nosniff')
    return r.headers.get('set-cookie')!.split(';')[0]!
  }
  const statusWith = async (s: TestServer, cookie: string) => (await fetch(`${s.base}/admin/api/session`, { headers: { cookie } })).status

  test('signing out ends the session for every copy of its cookie; sessions survive a restart; only a hash is stored', async () => {
    const s = await TestServer.start()
    try {
      const a = await signIn(s)
      const b = await signIn(s)
      expect(await statusWith(s, a)).toBe(200)
      await s.stop()
      await s.boot()
      expect(await statusWith(s, a)).toBe(200)
      const out = await fetch(`${s.base}/admin/session`, { method: 'DELETE', headers: { cookie: a } })
      expect(out.status).toBe(204)
      expect(out.headers.get('set-cookie')).toContain('Max-Age=0')
      // a copy of the signed-out cookie (still correctly signed and unexpired) no longer works
      expect(await statusWith(s, a)).toBe(401)
      expect(await statusWith(s, b)).toBe(200)
      // a made-up id with a valid-looking shape is refused too
      expect(await statusWith(s, b.replace(/\.[A-Za-z0-9]+\./, '.x.'))).toBe(401)
      const db = new Database(join(s.dataDir, 'capstan.db'), { readonly: true })
      const rows = db.query<{ id: string }, []>('SELECT id FROM dashboard_sessions').all()
      db.close()
      expect(rows).toHaveLength(1)
      expect(rows[0]!.id).toMatch(/^[0-9a-f]{64}$/)
      expect(b).not.toContain(rows[0]!.id)
      // a new admin token ends every session
      await s.stop()
      await s.boot({ CAPSTAN_ADMIN_TOKEN: 'a-different-admin-token-for-this-test' })
      expect(await statusWith(s, b)).toBe(401)
    } finally {
      await s.close()
    }
  })
})

describe('audit log: who made a change', () => {
  test('each entry names how its operator signed the request — the dashboard, the CLI, the admin token — and from which address', async () => {
    const s = await TestServer.start({ env: { CAPSTAN_TRUSTED_PROXIES: '127.0.0.1' } })
    try {
      const ws = await s.workspace()
      const signedIn = await s.request('POST', '/admin/session', { json: { token: ADMIN_TOKEN }, headers: { 'x-capstan-csrf': '1' } })
      const cookie = signedIn.headers.get('set-cookie')!.split(';')[0]!
      const fromDashboard = await s.request('PATCH', `/admin/api/workspaces/${ws.id}`, { json: { name: 'Renamed in the dashboard' }, headers: { cookie, 'x-capstan-csrf': '1', 'x-forwarded-for': '203.0.113.9' } })
      expect(fromDashboard.status).toBe(200)
      // the CLI says so in its User-Agent; anything else with the token is the admin token
      const token = { authorization: `Bearer ${ADMIN_TOKEN}` }
      expect((await s.request('POST', `/admin/api/workspaces/${ws.id}/suppressions`, { json: { phone: '+15550009961' }, headers: { ...token, 'user-agent': 'capstan-cli/0.1.0', 'x-forwarded-for': '198.51.100.4' } })).status).toBe(201)
      expect((await s.request('POST', `/admin/api/workspaces/${ws.id}/keys`, { json: { name: 'script' }, headers: { ...token, 'user-agent': 'curl/8.5.0' } })).status).toBe(201)
      // refused: nothing recorded (a session's change without the CSRF header)
      expect((await s.request('PATCH', `/admin/api/workspaces/${ws.id}`, { json: { name: 'Forged' }, headers: { cookie } })).status).toBe(403)
      const log = (await s.admin('GET', `/workspaces/${ws.id}/audit-log`)).json.data
      expect(log.map((e: any) => [e.action, e.via, e.ip])).toEqual([
        ['api_key.created', 'admin_token', '127.0.0.1'],
        ['suppression.added', 'cli', '198.51.100.4'],
        ['workspace.updated', 'dashboard', '203.0.113.9'],
      ])
    } finally {
      await s.close()
    }
  })
})

describe('connections: warming up a new number', () => {
  test('created with a warm-up, the number shows it and the live view counts against the day\'s cap; PATCH ends it; bad values are refused', async () => {
    const ws = await srv.workspace()
    const created = await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: '+15550009901', driver: 'sandbox', warmup: { days: 10, start_daily_cap: 25 } })
    expect(created.status).toBe(201)
    expect(created.json.data.warmup).toMatchObject({ days: 10, start_daily_cap: 25, day: 1 })
    expect(Date.parse(created.json.data.warmup.ends_at) - Date.parse(created.json.data.warmup.started_at)).toBe(10 * 86_400_000)
    const live = async () => (await srv.admin('GET', `/workspaces/${ws.id}/numbers/live`)).json.data[0]
    expect(await live()).toMatchObject({ daily_cap: 25, hourly_cap: 25, warming_up: true })
    const id = created.json.data.id
    for (const [warmup, field] of [
      [{ days: 0, start_daily_cap: 10 }, 'warmup.days'],
      [{ days: 91, start_daily_cap: 10 }, 'warmup.days'],
      [{ days: 7, start_daily_cap: 0 }, 'warmup.start_daily_cap'],
      [{ days: 7 }, 'warmup.start_daily_cap'],
      ['14', 'warmup'],
    ] as const) {
      const r = await srv.admin('PATCH', `/connections/${id}`, { warmup })
      expect([r.status, Object.keys(r.json.errors ?? {})]).toEqual([422, [field]])
    }
    expect((await srv.admin('GET', `/connections/${id}`)).json.data.warmup).toMatchObject({ days: 10, start_daily_cap: 25 })
    const ended = await srv.admin('PATCH', `/connections/${id}`, { warmup: null })
    expect([ended.status, ended.json.data.warmup]).toEqual([200, null])
    expect(await live()).toMatchObject({ daily_cap: 500, hourly_cap: 60, warming_up: false })
  })
})

describe('audit log', () => {
  test('operator changes are recorded with what they are about; entries about a person name nobody', async () => {
    const { ws, key } = await srv.tenant()
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 90 } } })
    const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: '+15550009950', driver: 'sandbox' })).json.data
    await srv.admin('PATCH', `/connections/${conn.id}`, { name: 'Front desk' })
    const hook = (await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: 'http://127.0.0.1:9/audit' })).json.data
    await srv.admin('PATCH', `/webhooks/${hook.id}`, { events: ['message.failed'] })
    await srv.admin('POST', `/webhooks/${hook.id}/recover`, { since: '2026-01-01T00:00:00Z' })
    await srv.admin('POST', `/webhooks/${hook.id}/rotate-secret`, {})
    await srv.admin('DELETE', `/webhooks/${hook.id}`)
    await srv.admin('POST', `/workspaces/${ws.id}/suppressions`, { phone: '+15550009951' })
    await srv.admin('DELETE', `/workspaces/${ws.id}/suppressions/${encodeURIComponent('+15550009951')}`)
    await srv.api(key, 'POST', '/contacts', { json: { phone: '+15550009952', name: 'Exported Person' } })
    expect((await srv.admin('POST', `/workspaces/${ws.id}/contacts/export`, { phone: '+15550009952' })).status).toBe(200)
    await srv.admin('DELETE', `/connections/${conn.id}`)
    // refused changes are not recorded
    expect((await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 99, max_gap_seconds: 1 } } })).status).toBe(422)
    const log = await srv.admin('GET', `/workspaces/${ws.id}/audit-log?per_page=100`)
    const entries = log.json.data.map((e: any) => [e.action, e.subject_id]).reverse()
    expect(entries).toEqual([
      ['api_key.created', null],
      ['workspace.updated', ws.id],
      ['connection.created', conn.id],
      ['connection.updated', conn.id],
      ['webhook.created', hook.id],
      ['webhook.updated', hook.id],
      ['webhook.recovered', hook.id],
      ['webhook.secret_rotated', hook.id],
      ['webhook.removed', hook.id],
      ['suppression.added', null],
      ['suppression.removed', null],
      ['contact.exported', null],
      ['connection.removed', conn.id],
    ])
    expect(log.text).not.toContain('+1555000995')
    expect(log.text).not.toContain('Exported Person')
    // each made with the admin token from this machine
    expect([...new Set(log.json.data.map((e: any) => `${e.actor} ${e.via} ${e.ip}`))]).toEqual(['operator admin_token 127.0.0.1'])
    // one kind or one action, with the names of what they are about (gone once it is removed)
    const kind = async (action: string) => (await srv.admin('GET', `/workspaces/${ws.id}/audit-log?action=${action}`)).json
    const workspaceEntries = await kind('workspace')
    expect([workspaceEntries.meta.total, workspaceEntries.data.map((e: any) => [e.action, e.subject_name, e.actor])]).toEqual([1, [['workspace.updated', ws.name, 'operator']]])
    expect((await kind('webhook')).data.map((e: any) => e.action)).toEqual(['webhook.removed', 'webhook.secret_rotated', 'webhook.recovered', 'webhook.updated', 'webhook.created'])
    expect((await kind('connection.created')).data.map((e: any) => [e.subject_id, e.subject_name])).toEqual([[conn.id, null]])
    expect((await srv.admin('GET', `/workspaces/${ws.id}/audit-log?action=DROP%20TABLE`)).status).toBe(422)
  })
})
