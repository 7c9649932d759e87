/** Authentication, scopes, limits and the order of checks (spec §5, §7, §8; CONTRACT §1). */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TestServer, newPhone } from './support/server'

setDefaultTimeout(60_000)

const MSG_401 = 'A valid API bearer token is required.'
const MSG_403_WS = 'The API key workspace is unavailable.'
const MSG_403_SCOPE = 'The API key does not have the required scope.'

let srv: TestServer
beforeAll(async () => {
  srv = await TestServer.start()
})
afterAll(() => srv.close())

describe('bearer', () => {
  test('missing, malformed, unknown, revoked and expired keys give byte-identical 401s', async () => {
    const { ws, key } = await srv.tenant()
    const revoked = await srv.key(ws.id)
    expect((await srv.admin('POST', `/keys/${revoked.id}/revoke`)).status).toBe(200)
    const expiring = await srv.key(ws.id, undefined, { expires_at: new Date(Date.now() + 1500).toISOString() })
    expect((await srv.api(expiring.key, 'GET', '/workspace')).status).toBe(200)
    await Bun.sleep(1600)
    const [kid] = key.split('.')
    const variants: (string | undefined)[] = [undefined, '', 'not-a-key', kid, `${kid}.short`, `cap_${'a'.repeat(16)}.${'b'.repeat(48)}`, revoked.key, expiring.key, `${kid}.${'x'.repeat(48)}`]
    const bodies = new Set<string>()
    for (const v of variants) {
      const r = v === undefined ? await srv.request('GET', '/api/v1/workspace') : await srv.api(v, 'GET', '/workspace')
      expect(r.status).toBe(401)
      expect(r.json).toEqual({ message: MSG_401, code: 'unauthenticated' })
      expect(r.headers.get('retry-after')).toBeNull()
      bodies.add(r.text)
    }
    expect(bodies.size).toBe(1)
    for (const scheme of ['Basic', 'Token']) {
      const r = await srv.request('GET', '/api/v1/workspace', { headers: { authorization: `${scheme} ${key}` } })
      expect(r.status).toBe(401)
    }
  })

  test('a revoked key is refused on the very next request and stays revoked', async () => {
    const { ws } = await srv.tenant()
    const k = await srv.key(ws.id)
    expect((await srv.api(k.key, 'GET', '/workspace')).status).toBe(200)
    const rev = await srv.admin('POST', `/keys/${k.id}/revoke`)
    expect(rev.json.data.status).toBe('revoked')
    expect((await srv.api(k.key, 'GET', '/workspace')).status).toBe(401)
    // revoking again changes nothing; it never comes back
    expect((await srv.admin('POST', `/keys/${k.id}/revoke`)).json.data.status).toBe('revoked')
    expect((await srv.api(k.key, 'GET', '/workspace')).status).toBe(401)
  })

  test('the key decides the workspace; X-Workspace-Id is ignored', async () => {
    const a = await srv.tenant()
    const b = await srv.tenant()
    const r = await srv.api(a.key, 'GET', '/workspace', { headers: { 'x-workspace-id': b.ws.id } })
    expect(r.json.data.id).toBe(a.ws.id)
    const phone = newPhone()
    expect((await srv.api(a.key, 'POST', '/contacts', { json: { phone }, headers: { 'x-workspace-id': b.ws.id } })).status).toBe(201)
    const listA = await srv.api(a.key, 'GET', '/contacts')
    const listB = await srv.api(b.key, 'GET', '/contacts')
    expect(listA.json.data.map((c: any) => c.phone)).toEqual([phone])
    expect(listB.json.data).toEqual([])
  })
})

describe('bodies without credentials', () => {
  test('are never read: the 401 comes while the client is still sending, and the connection closes', async () => {
    const { key } = await srv.tenant()
    const [kid] = key.split('.')
    for (const [head, status, message] of [
      // 50 MB of upload announced, no key / a wrong key / the admin API without its token
      [`POST /api/v1/media HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=b`, 401, MSG_401],
      [`POST /api/v1/media HTTP/1.1\r\nAuthorization: Bearer ${kid}.${'x'.repeat(48)}\r\nContent-Type: multipart/form-data; boundary=b`, 401, MSG_401],
      [`POST /admin/api/workspaces HTTP/1.1\r\nContent-Type: application/json`, 401, 'A valid admin token is required.'],
    ] as const) {
      const declared = head.includes('multipart') ? 50_000_000 : 900_000
      const { reply, closed } = await srv.partialRequest(head, declared)
      expect(reply.split('\r\n')[0]).toBe(`HTTP/1.1 ${status} Unauthorized`)
      expect(reply).toContain(JSON.stringify({ message, code: 'unauthenticated' }))
      expect(closed).toBe(true)
    }
    // with a valid key an upload of a size the workspace takes (16 MiB by default) is read:
    // nothing is answered before the body is in
    const { reply } = await srv.partialRequest(`POST /api/v1/media HTTP/1.1\r\nAuthorization: Bearer ${key}\r\nContent-Type: multipart/form-data; boundary=b`, 10_000_000, 1000)
    expect(reply).toBe('')
  })

  test('the dashboard sign-in reads a few KiB at most, never a multipart body, and nothing from an address over the failed-auth limit', async () => {
    for (const [head, declared, status] of [
      [`POST /admin/session HTTP/1.1\r\nX-Capstan-CSRF: 1\r\nContent-Type: multipart/form-data; boundary=b`, 50_000_000, '415 Unsupported Media Type'],
      [`POST /admin/session HTTP/1.1\r\nX-Capstan-CSRF: 1\r\nContent-Type: multipart/form-data; boundary=b`, 2_000, '415 Unsupported Media Type'],
      [`POST /admin/session HTTP/1.1\r\nX-Capstan-CSRF: 1\r\nContent-Type: application/json`, 900_000, '413 Payload Too Large'],
      [`POST /admin/session HTTP/1.1\r\nX-Capstan-CSRF: 1\r\nContent-Type: application/x-www-form-urlencoded`, 5_000, '413 Payload Too Large'],
    ] as const) {
      const { reply, closed } = await srv.partialRequest(head, declared)
      expect(reply.split('\r\n')[0]).toBe(`HTTP/1.1 ${status}`)
      expect(closed).toBe(true)
    }
    // a sign-in of an ordinary size is read and answered
    const wrong = await srv.request('POST', '/admin/session', { json: { token: 'not-the-admin-token' }, headers: { 'x-capstan-csrf': '1' } })
    expect(wrong.status).toBe(401)
    const limited = await TestServer.start({ env: { CAPSTAN_AUTH_FAIL_LIMIT: '1', CAPSTAN_RATE_WINDOW_SECONDS: '5' } })
    try {
      expect((await limited.request('POST', '/admin/session', { json: { token: 'not-the-admin-token' }, headers: { 'x-capstan-csrf': '1' } })).status).toBe(401)
      const { reply, closed } = await limited.partialRequest(`POST /admin/session HTTP/1.1\r\nX-Capstan-CSRF: 1\r\nContent-Type: application/json`, 3_000)
      expect(reply.split('\r\n')[0]).toBe('HTTP/1.1 429 Too Many Requests')
      expect(closed).toBe(true)
    } finally {
      await limited.close()
    }
  })
})

describe('workspace status and scopes', () => {
  test('an inactive workspace is refused with 403 everywhere, and works again when reactivated', async () => {
    const { ws, key } = await srv.tenant()
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { status: 'inactive' })
    for (const [m, p] of [['GET', '/workspace'], ['GET', '/contacts'], ['POST', '/contacts']] as const) {
      const r = await srv.api(key, m, p, m === 'POST' ? { json: { phone: newPhone() } } : {})
      expect(r.status).toBe(403)
      expect(r.json).toEqual({ message: MSG_403_WS, code: 'workspace_unavailable' })
    }
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { status: 'active' })
    expect((await srv.api(key, 'GET', '/workspace')).status).toBe(200)
  })

  test('each foundation route requires its own scope', async () => {
    const { ws } = await srv.tenant()
    const cases = [
      { scope: 'contacts:read', method: 'GET', path: '/workspace' },
      { scope: 'contacts:read', method: 'GET', path: '/contacts' },
      { scope: 'contacts:write', method: 'POST', path: '/contacts' },
    ]
    for (const c of cases) {
      const others = (await srv.key(ws.id, ['messages:write', 'groups:read'])).key
      const r = await srv.api(others, c.method, c.path, c.method === 'POST' ? { json: { phone: newPhone() } } : {})
      expect(r.status).toBe(403)
      expect(r.json).toEqual({ message: MSG_403_SCOPE, code: 'insufficient_scope' })
      const ok = (await srv.key(ws.id, [c.scope])).key
      expect((await srv.api(ok, c.method, c.path, c.method === 'POST' ? { json: { phone: newPhone() } } : {})).status).toBeLessThan(300)
    }
  })

  test('scope is checked before the body: a bad body without the scope is 403, not 422 or 400', async () => {
    const { ws } = await srv.tenant()
    const reader = (await srv.key(ws.id, ['contacts:read'])).key
    expect((await srv.api(reader, 'POST', '/contacts', { json: { phone: 'nope' } })).status).toBe(403)
    expect((await srv.api(reader, 'POST', '/contacts', { raw: '{oops', headers: { 'content-type': 'application/json' } })).status).toBe(403)
  })

  test('the bearer is checked before the body: a bad body without a key is 401', async () => {
    expect((await srv.request('POST', '/api/v1/contacts', { raw: '{oops', headers: { 'content-type': 'application/json' } })).status).toBe(401)
  })

  test('authenticated responses carry X-RateLimit headers counting down, never Retry-After', async () => {
    const { key } = await srv.tenant()
    const r1 = await srv.api(key, 'GET', '/workspace')
    const r2 = await srv.api(key, 'GET', '/contacts')
    expect(r1.headers.get('x-ratelimit-limit')).toBe('60')
    expect(Number(r1.headers.get('x-ratelimit-remaining'))).toBe(59)
    expect(Number(r2.headers.get('x-ratelimit-remaining'))).toBe(58)
    expect(r1.headers.get('retry-after')).toBeNull()
  })
})

describe('limits (a server with small limits and a short window)', () => {
  let small: TestServer
  beforeAll(async () => {
    small = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '5', CAPSTAN_AUTH_FAIL_LIMIT: '4', CAPSTAN_RATE_WINDOW_SECONDS: '3' } })
  })
  afterAll(() => small.close())

  test('per-key limit counts scope failures and answers 429 with the exact message', async () => {
    const { ws } = await small.tenant()
    const k = (await small.key(ws.id, ['contacts:read'])).key
    const statuses: number[] = []
    for (let i = 0; i < 3; i++) statuses.push((await small.api(k, 'POST', '/contacts', { json: { phone: newPhone() } })).status)
    for (let i = 0; i < 2; i++) statuses.push((await small.api(k, 'GET', '/workspace')).status)
    const over = await small.api(k, 'GET', '/workspace')
    expect(statuses).toEqual([403, 403, 403, 200, 200])
    expect(over.status).toBe(429)
    expect(over.json).toEqual({ message: 'The API key rate limit has been reached.', code: 'rate_limited' })
    expect(over.headers.get('x-ratelimit-remaining')).toBe('0')
    expect(over.headers.get('retry-after')).toBeNull()
    // another key of the same workspace has its own budget
    const other = (await small.key(ws.id)).key
    expect((await small.api(other, 'GET', '/workspace')).status).toBe(200)
    await Bun.sleep(3100)
    expect((await small.api(k, 'GET', '/workspace')).status).toBe(200)
  }, 30_000)

  test('failed-auth limit per IP: invalid bearers get 429 past it, valid keys and the admin token are still served, then it recovers', async () => {
    const { key } = await small.tenant()
    for (let i = 0; i < 4; i++) expect((await small.api('cap_nothere.x', 'GET', '/workspace')).status).toBe(401)
    const blocked = await small.api('cap_nothere.x', 'GET', '/workspace')
    expect(blocked.status).toBe(429)
    expect(blocked.json).toEqual({ message: 'Too many invalid API bearer attempts.', code: 'auth_rate_limited' })
    expect(blocked.headers.get('retry-after')).toBeNull()
    expect((await small.request('GET', '/api/v1/workspace')).status).toBe(429)
    // a valid key from the same address is served: one abuser behind a shared NAT locks nobody out
    expect((await small.api(key, 'GET', '/workspace')).status).toBe(200)
    // wrong admin tokens are refused the same way while the IP is over; the right one is served
    expect((await small.request('GET', '/admin/api/workspaces', { bearer: 'wrong' })).status).toBe(429)
    expect((await small.admin('GET', '/workspaces')).status).toBe(200)
    // so is a sign-in with the right token (a wrong one is refused before its body is read)
    const signIn = (token: string) => small.request('POST', '/admin/session', { json: { token }, headers: { 'x-capstan-csrf': '1' } })
    expect((await signIn('wrong-admin-token')).status).toBe(429)
    await Bun.sleep(3100)
    expect((await small.api('cap_nothere.x', 'GET', '/workspace')).status).toBe(401)
    for (let i = 0; i < 3; i++) expect((await small.request('GET', '/admin/api/workspaces', { bearer: 'wrong-admin' })).status).toBe(401)
    expect((await small.api('cap_nothere.x', 'GET', '/workspace')).status).toBe(429)
    await Bun.sleep(3100)
  }, 30_000)
})

describe('keys limited to addresses (allowed_ips)', () => {
  test('from an allowed address the key works; from any other it is no valid key: the same 401, nothing done; the list shows the ranges', async () => {
    const { ws, key: open } = await srv.tenant()
    const unknown = await srv.api(`cap_${'a'.repeat(16)}.${'b'.repeat(48)}`, 'GET', '/workspace')
    const here = await srv.key(ws.id, undefined, { allowed_ips: ['127.0.0.1', '127.0.0.1'] })
    const loopback = await srv.key(ws.id, undefined, { allowed_ips: ['10.0.0.0/8', '127.0.0.0/8', '::1'] })
    const elsewhere = await srv.key(ws.id, undefined, { allowed_ips: ['10.0.0.0/8', '2001:db8::/32'] })
    expect(here.allowed_ips).toEqual(['127.0.0.1'])
    expect((await srv.api(here.key, 'GET', '/workspace')).status).toBe(200)
    expect((await srv.api(loopback.key, 'GET', '/workspace')).status).toBe(200)
    const refused = await srv.api(elsewhere.key, 'GET', '/workspace')
    expect([refused.status, refused.text]).toEqual([401, unknown.text])
    const phone = newPhone()
    expect((await srv.api(elsewhere.key, 'POST', '/contacts', { json: { phone } })).status).toBe(401)
    expect((await srv.api(open, 'GET', `/contacts?phone=${encodeURIComponent(phone)}`)).json.data).toEqual([])
    const listed = (await srv.admin('GET', `/workspaces/${ws.id}/keys`)).json.data
    const byId = Object.fromEntries(listed.map((k: any) => [k.id, k.allowed_ips]))
    expect([byId[here.id], byId[elsewhere.id], byId[listed.find((k: any) => k.prefix === open.split('.')[0]).id]]).toEqual([['127.0.0.1'], ['10.0.0.0/8', '2001:db8::/32'], null])
    // an empty list is no limit
    expect((await srv.key(ws.id, undefined, { allowed_ips: [] })).allowed_ips).toBeNull()
  })

  test('entries that are no address or range are refused by position, and no key is made', async () => {
    const ws = await srv.workspace()
    for (const [ips, field] of [
      [['abc'], 'allowed_ips.0'],
      [['10.0.0.0/33'], 'allowed_ips.0'],
      [['::/129'], 'allowed_ips.0'],
      [['10.0.0.1/'], 'allowed_ips.0'],
      [['203.0.113.7', '300.1.1.1'], 'allowed_ips.1'],
      [Array.from({ length: 51 }, (_, i) => `10.0.0.${i}`), 'allowed_ips'],
      ['10.0.0.0/8', 'allowed_ips'],
    ] as const) {
      const r = await srv.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'limited', allowed_ips: ips })
      expect([r.status, r.json.code, Object.keys(r.json.errors ?? {})]).toEqual([422, 'validation_failed', [field]])
    }
    expect((await srv.admin('GET', `/workspaces/${ws.id}/keys`)).json.data).toEqual([])
  })

  test('behind a trusted proxy the right-most untrusted forwarded address counts, and refusals count toward the failed-auth limit of that address', async () => {
    const proxied = await TestServer.start({ env: { CAPSTAN_TRUSTED_PROXIES: '127.0.0.1, 10.0.0.0/8', CAPSTAN_AUTH_FAIL_LIMIT: '3', CAPSTAN_RATE_WINDOW_SECONDS: '3' } })
    try {
      const { ws } = await proxied.tenant()
      const office = (await proxied.key(ws.id, undefined, { allowed_ips: ['203.0.113.0/24'] })).key
      const from = (forwarded: string, key: string) => proxied.request('GET', '/api/v1/workspace', { bearer: key, headers: { 'x-forwarded-for': forwarded } })
      // the client, then a proxy of ours that appended what it saw
      expect((await from('203.0.113.9, 10.0.0.1', office)).status).toBe(200)
      // what the client wrote itself (left of what our proxies saw) is not believed; non-IP values are skipped
      expect((await from('203.0.113.9, 198.51.100.1', office)).status).toBe(401)
      expect((await from('203.0.113.9, not-an-ip, 10.0.0.1', office)).status).toBe(200)
      for (let i = 0; i < 2; i++) expect((await from('203.0.113.9, 198.51.100.1, 10.0.0.1', office)).status).toBe(401)
      // 198.51.100.1 is now over the limit: its invalid attempts get 429, however it dresses them up
      expect((await from('203.0.113.9, 198.51.100.1', office)).status).toBe(429)
      expect((await from('198.51.100.1', 'cap_nothere.x')).status).toBe(429)
      // the office is not
      expect((await from('203.0.113.9', office)).status).toBe(200)
      expect((await from('203.0.113.10', 'cap_nothere.x')).status).toBe(401)
      // IPv6 clients are counted per /64: other addresses of the same /64 share the count
      for (const ip of ['2001:db8:1:2::1', '2001:db8:1:2::2', '2001:db8:1:2:ffff::9']) expect((await from(ip, 'cap_nothere.x')).status).toBe(401)
      expect((await from('2001:0db8:0001:0002:0:0:0:abcd', 'cap_nothere.x')).status).toBe(429)
      expect((await from('2001:db8:1:3::1', 'cap_nothere.x')).status).toBe(401)
    } finally {
      await proxied.close()
    }
  }, 30_000)

  test('without trusted proxies X-Forwarded-For is ignored', async () => {
    const direct = await TestServer.start({ env: { CAPSTAN_AUTH_FAIL_LIMIT: '2', CAPSTAN_RATE_WINDOW_SECONDS: '3' } })
    try {
      for (const ip of ['198.51.100.1', '198.51.100.2']) expect((await direct.request('GET', '/api/v1/workspace', { bearer: 'cap_x.y', headers: { 'x-forwarded-for': ip } })).status).toBe(401)
      expect((await direct.request('GET', '/api/v1/workspace', { bearer: 'cap_x.y', headers: { 'x-forwarded-for': '198.51.100.3' } })).status).toBe(429)
    } finally {
      await direct.close()
    }
  }, 30_000)
})

describe('the route resolve that finds the API key', () => {
  // Elysia decides from a resolve's text whether to await it on every request (compose.ts: an
  // AsyncFunction, or `return x(`, `=> x(`, "async"/"await" in it) and from its destructured
  // parameters what to prepare; an awaited or undestructured resolve cost GET /workspace 20–30%
  const ELYSIA_ASYNC = /(?:return|=>)\s?\S+\(|a(?:sync|wait)/
  const plugin = async (answersAtOnce: boolean) => {
    const { authPlugin } = await import('../src/http/auth')
    const { loadConfig } = await import('../src/config')
    return authPlugin({ config: loadConfig({ CAPSTAN_DATA_DIR: '/nonexistent' }), clients: { ip: () => '127.0.0.1' } as never, keys: { answersAtOnce } as never, adminToken: { hash: new Uint8Array(32) }, sessions: {} as never })
  }

  test('is synchronous where every key is answered in the same turn (SQLite), and names the fields it reads', async () => {
    const resolve = (await plugin(true)).resolveCaller('contacts:read')
    expect(resolve.constructor.name).toBe('Function')
    expect(ELYSIA_ASYNC.test(resolve.toString())).toBe(false)
    expect(resolve.toString()).toMatch(/^function resolve\(\{\s*request,\s*set,\s*body,\s*params\s*\}\)/)
  })

  test('is async where a key may have to be read over the network (PostgreSQL)', async () => {
    const resolve = (await plugin(false)).resolveCaller('contacts:read')
    expect(resolve.constructor.name).toBe('AsyncFunction')
    expect(resolve.toString()).toMatch(/^async function resolve\(\{\s*request,\s*set,\s*body,\s*params\s*\}\)/)
  })
})
