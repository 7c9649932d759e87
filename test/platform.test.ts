/** The running appliance: health, docs, OpenAPI, logs, config errors, admin token bootstrap, migrations. */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs'
import { networkInterfaces, tmpdir } from 'node:os'
import { join } from 'node:path'
import { startCheckpointer } from '../src/db/checkpoint'
import { emptyWal, openDatabase } from '../src/db/open'
import { Logger } from '../src/http/log'
import { loadDotEnv } from '../src/main'
import { Metrics, RequestDurations, ResponseCounts, signatureTime } from '../src/metrics'
import { inProcess } from './support/inproc'
import { databaseAtSchema } from './support/schema'
import { ADMIN_TOKEN, TestServer, freePort, hostEnv, newPhone } from './support/server'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)

const ROOT = join(import.meta.dir, '..')

let srv: TestServer
beforeAll(async () => {
  srv = await TestServer.start()
})
afterAll(() => srv.close())

describe('health and docs', () => {
  test('healthz and readyz', async () => {
    expect((await srv.request('GET', '/healthz')).json).toEqual({ status: 'ok' })
    const ready = await srv.request('GET', '/readyz')
    expect(ready.status).toBe(200)
    expect(ready.json.database).toBe('ok')
    // the data directory's disk: plenty free here
    expect(ready.json.disk).toEqual({ state: 'ok', free_bytes: expect.any(Number), total_bytes: expect.any(Number) })
    expect(ready.json.disk.free_bytes).toBeGreaterThan(0)
    expect(ready.json.disk.free_bytes).toBeLessThanOrEqual(ready.json.disk.total_bytes)
  })

  test('the OpenAPI document names every API path with its scope and error responses', async () => {
    const r = await srv.request('GET', '/openapi.json')
    expect(r.json.openapi).toMatch(/^3\.1/)
    const paths = r.json.paths
    // every operation the spec names is documented (spec §4 and §5)
    expect(Object.values(paths).reduce((n: number, p: any) => n + Object.keys(p).length, 0)).toBe(29)
    expect(Object.keys(paths).every((p) => p.startsWith('/api/v1/'))).toBe(true)
    const expected: [string, string, string][] = [
      ['/api/v1/workspace', 'get', 'contacts:read'],
      ['/api/v1/contacts', 'get', 'contacts:read'],
      ['/api/v1/contacts', 'post', 'contacts:write'],
      ['/api/v1/messages', 'post', 'messages:write'],
      ['/api/v1/messages', 'get', 'messages:read'],
      ['/api/v1/messages/{id}', 'get', 'messages:read'],
      ['/api/v1/media', 'post', 'messages:write'],
      ['/api/v1/media/{id}', 'get', 'media:read'],
      ['/api/v1/media/{id}/download', 'get', 'media:read'],
      ['/api/v1/groups', 'get', 'groups:read'],
      ['/api/v1/groups/sync', 'post', 'groups:read'],
      ['/api/v1/groups/{id}/messages', 'post', 'groups:send'],
      ['/api/v1/templates', 'get', 'templates:read'],
      ['/api/v1/templates', 'post', 'templates:write'],
      ['/api/v1/templates/{id}', 'get', 'templates:read'],
      ['/api/v1/templates/{id}', 'put', 'templates:write'],
      ['/api/v1/templates/{id}', 'delete', 'templates:write'],
      ['/api/v1/templates/{id}/preview', 'get', 'templates:read'],
      ['/api/v1/campaigns', 'get', 'campaigns:read'],
      ['/api/v1/campaigns', 'post', 'campaigns:write'],
      ['/api/v1/campaigns/{id}', 'get', 'campaigns:read'],
      ['/api/v1/campaigns/{id}', 'put', 'campaigns:write'],
      ['/api/v1/campaigns/{id}', 'delete', 'campaigns:write'],
      ['/api/v1/campaigns/{id}/recipients', 'get', 'campaigns:read'],
      ['/api/v1/campaigns/audience/preview', 'post', 'campaigns:read'],
      ['/api/v1/campaigns/{id}/schedule', 'post', 'campaigns:send'],
      ['/api/v1/campaigns/{id}/pause', 'post', 'campaigns:send'],
      ['/api/v1/campaigns/{id}/resume', 'post', 'campaigns:send'],
      ['/api/v1/campaigns/{id}/cancel', 'post', 'campaigns:send'],
    ]
    for (const [path, method, scope] of expected) {
      const opn = paths[path]?.[method]
      expect(opn?.['x-required-scope']).toBe(scope)
      expect(Object.keys(opn.responses)).toEqual(expect.arrayContaining(['401', '403', '429']))
    }
    expect(paths['/api/v1/contacts'].post.requestBody.content['application/json'].schema.required).toEqual(['phone'])
    expect(paths['/api/v1/messages'].post.parameters.map((p: any) => p.name)).toContain('Idempotency-Key')
    expect(Object.keys(paths['/api/v1/messages'].post.responses)).toEqual(expect.arrayContaining(['202', '404', '409', '422']))
  })

  test('the docs UI is served from the binary, no CDN', async () => {
    const html = await srv.request('GET', '/docs')
    expect(html.status).toBe(200)
    expect(html.text).not.toMatch(/https?:\/\//)
    const js = await fetch(`${srv.base}/docs/swagger-ui-bundle.js`)
    expect(js.status).toBe(200)
    expect((await js.arrayBuffer()).byteLength).toBeGreaterThan(100_000)
  })

  test('unknown routes are a JSON 404', async () => {
    const r = await srv.request('GET', '/api/v1/nothing-here')
    expect(r.status).toBe(404)
    expect(r.json.code).toBe('not_found')
    expect((await srv.request('DELETE', '/api/v1/nothing-here')).status).toBe(404)
  })

  test('a known path asked with a method it does not answer is 405 with Allow, before any credential check', async () => {
    const cases: [string, string, string][] = [
      ['DELETE', '/api/v1/contacts', 'GET, HEAD, POST'],
      ['OPTIONS', '/api/v1/contacts', 'GET, HEAD, POST'],
      ['PUT', '/api/v1/messages/0190a0a0-0000-7000-8000-000000000000', 'GET, HEAD'],
      ['POST', '/healthz', 'GET, HEAD'],
    ]
    for (const [method, path, allow] of cases) {
      const r = await srv.request(method, path)
      expect([method, path, r.status, r.headers.get('allow'), r.json]).toEqual([method, path, 405, allow, { message: 'The method is not allowed on this route.', code: 'method_not_allowed' }])
      expect(r.headers.get('x-content-type-options')).toBe('nosniff')
    }
    // (fetch reads no body from an answer to TRACE)
    const trace = await srv.request('TRACE', '/api/v1/messages')
    expect([trace.status, trace.headers.get('allow')]).toEqual([405, 'GET, HEAD, POST'])
    // HEAD is answered wherever GET is
    expect((await srv.request('HEAD', '/healthz')).status).toBe(200)
  })
})

describe('metrics', () => {
  test('GET /metrics: Prometheus text for the metrics token only; not served without one', async () => {
    // the default server has no metrics token: /metrics is an unknown route there
    expect((await srv.request('GET', '/metrics')).json).toEqual({ message: 'The route was not found.', code: 'not_found' })
    const token = 'metrics-token-0123456789abcdef'
    const m = await TestServer.start({ env: { CAPSTAN_METRICS_TOKEN: token, CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    try {
      const t = await m.tenant()
      await m.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { hourly_cap: 1, daily_cap: 10, min_gap_seconds: 0, max_gap_seconds: 0 }, media: { max_total_bytes: 5 * 1024 * 1024 } } })
      const conn = (await m.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }, warmup: { days: 10, start_daily_cap: 4 } })).json.data
      // a receiver that is not there: the sent event stays pending
      const hook = (await m.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: 'http://127.0.0.1:9/nobody', events: ['message.sent'] })).json.data
      const ada = newPhone()
      for (let i = 0; i < 3; i++) expect((await m.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: ada, body: `n${i}` } })).status).toBe(202)
      await m.api(t.key, 'GET', '/messages/00000000-0000-0000-0000-000000000000')
      for (const bearer of [undefined, 'wrong-metrics-token-0123456789', t.key]) {
        const r = await m.request('GET', '/metrics', bearer ? { bearer } : {})
        expect([r.status, r.json]).toEqual([401, { message: 'A valid metrics token is required.', code: 'unauthenticated' }])
      }
      // one number, hourly cap 1: one message sent, two queued
      const read = async () => {
        const r = await fetch(`${m.base}/metrics`, { headers: { authorization: `Bearer ${token}` } })
        expect([r.status, r.headers.get('content-type')]).toEqual([200, 'text/plain; version=0.0.4; charset=utf-8'])
        return r.text()
      }
      const text = await waitFor(async () => {
        const body = await read()
        return body.includes(`capstan_messages{workspace="${t.ws.id}",direction="outbound",status="sent"} 1`) ? body : null
      })
      const lines = text.split('\n')
      for (const line of [
        `capstan_messages{workspace="${t.ws.id}",direction="outbound",status="queued"} 2`,
        `capstan_queue_depth{connection="${conn.id}",workspace="${t.ws.id}"} 2`,
        `capstan_connection_up{connection="${conn.id}",workspace="${t.ws.id}",driver="sandbox"} 1`,
        'capstan_database_up 1',
        'capstan_database_writable 1',
        'capstan_scanner_up 0',
        'capstan_messages_sending 0',
        'capstan_webhook_deliveries_pending 1',
        `capstan_webhook_endpoint_pending{endpoint="${hook.id}",workspace="${t.ws.id}"} 1`,
        `capstan_number_daily_cap{connection="${conn.id}",workspace="${t.ws.id}"} 4`,
        `capstan_media_quota_bytes{workspace="${t.ws.id}"} 5242880`,
        '# TYPE capstan_http_responses_total counter',
        'capstan_http_responses_total{code="404"} 1',
        'capstan_http_responses_total{code="401"} 3',
      ]) expect(lines).toContain(line)
      expect(lines.find((l) => l.startsWith('capstan_http_responses_total{code="202"}'))).toBe('capstan_http_responses_total{code="202"} 3')
      expect(lines.find((l) => l.startsWith('capstan_disk_free_bytes '))).toMatch(/^capstan_disk_free_bytes \d+$/)
      // every sample line is "name{labels} number" or "name number"; no phone number anywhere
      for (const line of lines.filter((l) => l && !l.startsWith('#'))) expect(line).toMatch(/^(capstan|process|http)_[a-z_]+(\{[a-z_]+="[^"]*"(,[a-z_]+="[^"]*")*\})? -?\d+(\.\d+)?(e-?\d+)?$/)
      // the request histogram by route pattern and status class: three 202s on POST /messages
      expect(lines).toContain('# TYPE http_request_duration_seconds histogram')
      expect(lines).toContain('http_request_duration_seconds_count{route="/api/v1/messages",status="2xx"} 3')
      expect(lines).toContain('http_request_duration_seconds_bucket{route="/api/v1/messages",status="2xx",le="+Inf"} 3')
      expect(lines.find((l) => l.startsWith('http_request_duration_seconds_count{route="/api/v1/messages/:id",status="4xx"}'))).toBe('http_request_duration_seconds_count{route="/api/v1/messages/:id",status="4xx"} 1')
      for (const name of ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'process_start_time_seconds', 'process_open_fds', 'process_max_fds', 'process_virtual_memory_bytes']) expect(lines.some((l) => l.startsWith(`${name} `))).toBe(true)
      expect(lines).toContain('capstan_message_outcomes_total{status="sent"} 1')
      // counters that only go up: a failure receipt with a code of the operator's (counted as other),
      // an inbound message, an upload refused while the scanner is down, the dead receiver's attempts
      const sent = (await m.api(t.key, 'GET', '/messages?status=sent')).json.data[0]
      expect((await m.admin('POST', `/messages/${sent.id}/sandbox/receipt`, { status: 'failed', error: { code: 'made_up_by_hand' } })).status).toBe(200)
      expect((await m.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'hello' })).status).toBe(201)
      const fd = new FormData()
      fd.set('file', new File([Buffer.from('%PDF-1.4\n')], 'a.pdf'))
      expect((await m.api(t.key, 'POST', '/media', { multipart: fd })).status).toBe(503)
      const later = await waitFor(async () => {
        const body = await read()
        return body.includes('capstan_webhook_attempts_total{result="connection_failed"}') ? body.split('\n') : null
      })
      for (const line of ['capstan_message_outcomes_total{status="failed",code="other"} 1', 'capstan_inbound_messages_total{driver="sandbox"} 1', 'capstan_media_scans_total{verdict="unavailable"} 1', '# TYPE capstan_message_outcomes_total counter']) expect(later).toContain(line)
      // without a signature database date (the scanner is down) there is no age to report
      expect(later.some((l) => l.startsWith('capstan_clamav_signatures_age_seconds'))).toBe(false)
      expect(text).not.toContain(ada)
      expect(text).not.toContain(conn.phone)
    } finally {
      await m.close()
    }
  })
})

describe('metrics helpers', () => {
  test('the ClamAV signature date is read from clamd\'s VERSION answer; an answer without one gives none', () => {
    expect(signatureTime('ClamAV 1.4.6/27463/Mon Nov 24 08:35:13 2026')).toBe(new Date(2026, 10, 24, 8, 35, 13).getTime())
    expect(signatureTime('ClamAV 1.4.6/27463/Mon Nov 24 08:35:13 2026\0')).toBe(new Date(2026, 10, 24, 8, 35, 13).getTime())
    expect(signatureTime('ClamAV 1.4.6')).toBeNull()
    expect(signatureTime('ClamAV 1.4.6/27463/garbage')).toBeNull()
  })

  test('the request histogram counts each observation in its bucket and every one above', () => {
    const d = new RequestDurations()
    for (const s of [0.001, 0.02, 0.02, 3, 20]) d.observe('/api/v1/workspace', 200, s)
    d.observe('/api/v1/workspace', 503, 0.2)
    const lines = d.lines()
    expect(lines).toContain('http_request_duration_seconds_bucket{route="/api/v1/workspace",status="2xx",le="0.005"} 1')
    expect(lines).toContain('http_request_duration_seconds_bucket{route="/api/v1/workspace",status="2xx",le="0.025"} 3')
    expect(lines).toContain('http_request_duration_seconds_bucket{route="/api/v1/workspace",status="2xx",le="5"} 4')
    expect(lines).toContain('http_request_duration_seconds_bucket{route="/api/v1/workspace",status="2xx",le="10"} 4')
    expect(lines).toContain('http_request_duration_seconds_bucket{route="/api/v1/workspace",status="2xx",le="+Inf"} 5')
    expect(lines).toContain('http_request_duration_seconds_count{route="/api/v1/workspace",status="5xx"} 1')
    expect(Number(lines.find((l) => l.startsWith('http_request_duration_seconds_sum{route="/api/v1/workspace",status="2xx"}'))!.split(' ')[1])).toBeCloseTo(23.041, 9)
  })
})

describe('metrics of kept media', () => {
  test('capstan_media_bytes sums a workspace\'s unexpired media records', async () => {
    const env = await inProcess()
    try {
      const { svc, clock } = env
      const ws = await svc.workspaces.create({ name: 'Media metrics' })
      const other = await svc.workspaces.create({ name: 'Other' })
      const row = (workspace_id: string, size: number, expires_at: number) => ({ id: crypto.randomUUID(), workspace_id, sha256: 'b'.repeat(64), blob: 'b'.repeat(64), filename: 'f.pdf', mime_type: 'application/pdf' as const, size, created_at: clock.t, expires_at })
      await svc.deps.engine.write(async (tx) => {
        await svc.media.insertIn(tx, row(ws.id, 1000, clock.t + 1000))
        await svc.media.insertIn(tx, row(ws.id, 2500, clock.t + 1000))
        await svc.media.insertIn(tx, row(ws.id, 7000, clock.t - 1)) // expired, not yet purged
        await svc.media.insertIn(tx, row(other.id, 40, clock.t + 1000))
      })
      const text = await new Metrics(svc, new ResponseCounts(), {}).render()
      expect(text.split('\n').filter((l) => l.startsWith('capstan_media_bytes{')).sort()).toEqual([`capstan_media_bytes{workspace="${ws.id}"} 3500`, `capstan_media_bytes{workspace="${other.id}"} 40`].sort())
    } finally {
      await env.close()
    }
  })
})

describe('logs', () => {
  test('X-Request-Id: a new UUIDv7 on every response; a trusted proxy\'s own id is kept, anyone else\'s ignored; HSTS only over TLS via a trusted proxy', async () => {
    const own = await srv.request('GET', '/healthz', { headers: { 'x-request-id': 'client-chosen-id' } })
    expect(own.headers.get('x-request-id')).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-/)
    expect(own.headers.get('strict-transport-security')).toBeNull()
    expect((await srv.request('GET', '/api/v1/nothing-here')).headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/)
    const proxied = await TestServer.start({ env: { CAPSTAN_TRUSTED_PROXIES: '127.0.0.1' } })
    try {
      const kept = await proxied.request('GET', '/api/v1/workspace', { headers: { 'x-request-id': 'edge-42.abc', 'x-forwarded-proto': 'https' } })
      expect([kept.status, kept.headers.get('x-request-id'), kept.headers.get('strict-transport-security')]).toEqual([401, 'edge-42.abc', 'max-age=31536000'])
      // an id that could not go into a log line as it is gets a fresh one
      const odd = await proxied.request('GET', '/healthz', { headers: { 'x-request-id': 'has space"quote' } })
      expect(odd.headers.get('x-request-id')).toMatch(/^[0-9a-f-]{36}$/)
      expect((await proxied.request('GET', '/healthz')).headers.get('strict-transport-security')).toBeNull()
      // the dashboard's cookie is Secure when the proxy says the client came over TLS, and only then
      const signIn = (headers: Record<string, string>) => proxied.request('POST', '/admin/session', { json: { token: ADMIN_TOKEN }, headers: { 'x-capstan-csrf': '1', ...headers } })
      const overTls = await signIn({ 'x-forwarded-proto': 'https' })
      expect([overTls.status, /;\s*Secure/i.test(overTls.headers.get('set-cookie') ?? '')]).toEqual([204, true])
      const plain = await signIn({})
      expect([plain.status, /;\s*Secure/i.test(plain.headers.get('set-cookie') ?? '')]).toEqual([204, false])
      const direct = await srv.request('POST', '/admin/session', { json: { token: ADMIN_TOKEN }, headers: { 'x-capstan-csrf': '1', 'x-forwarded-proto': 'https' } })
      expect([direct.status, /;\s*Secure/i.test(direct.headers.get('set-cookie') ?? '')]).toEqual([204, false])
      await Bun.sleep(100)
      expect(proxied.output).toContain('"request_id":"edge-42.abc"')
    } finally {
      await proxied.close()
    }
  })

  test('one JSON line per request, without the bearer or the body', async () => {
    const { ws, key } = await srv.tenant()
    const phone = newPhone()
    await srv.api(key, 'POST', '/contacts', { json: { phone, name: 'Secret Name' } })
    await srv.api(key, 'POST', '/contacts', { json: { phone: 'bad-phone-value' } })
    await srv.api(key, 'GET', '/workspace')
    const unknown = await srv.request('GET', `/api/v1/logged-once-unknown/${phone}`)
    // a phone number in the path of a known route: the route's pattern is logged, not the path
    const removed = await srv.admin('DELETE', `/workspaces/${ws.id}/suppressions/${encodeURIComponent(phone)}`)
    await Bun.sleep(100)
    const lines = srv.output.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l))
    const line = lines.find((l) => l.msg === 'request' && l.route === '/api/v1/contacts' && l.status === 201 && l.workspace_id === ws.id)
    expect(line).toBeDefined()
    expect(Object.keys(line).sort()).toEqual(['key_id', 'level', 'method', 'ms', 'msg', 'request_id', 'route', 'status', 'time', 'workspace_id'])
    expect(line.key_id).toBe(key.slice(4, 20))
    expect(line.ms).toBeGreaterThanOrEqual(0)
    expect(lines.find((l) => l.route === '/api/v1/contacts' && l.status === 422 && l.workspace_id === ws.id)).toBeDefined()
    const get = lines.find((l) => l.route === '/api/v1/workspace' && l.method === 'GET' && l.workspace_id === ws.id)
    expect(get.status).toBe(200)
    expect(get.ms).toBeGreaterThanOrEqual(0)
    // an unknown route gets exactly one line (its 404 passes through the error and response
    // steps), without its path; every response carries the id its line has
    const unmatched = lines.filter((l) => l.request_id === unknown.headers.get('x-request-id'))
    expect(unmatched.map((l) => [l.route, l.status])).toEqual([['(unmatched)', 404]])
    const removal = lines.filter((l) => l.request_id === removed.headers.get('x-request-id'))
    expect(removal.map((l) => [l.method, l.route, l.status])).toEqual([['DELETE', '/admin/api/workspaces/:id/suppressions/:phone', removed.status]])
    expect(new Set(lines.filter((l) => l.msg === 'request').map((l) => l.request_id)).size).toBe(lines.filter((l) => l.msg === 'request').length)
    expect(srv.output).not.toContain(key.split('.')[1])
    expect(srv.output).not.toContain(phone)
    expect(srv.output).not.toContain('Secret Name')
    expect(srv.output).not.toContain('bad-phone-value')
  })
})

/** Run `capstan …` to its end; one that has not ended after `limitMs` (a start that should have failed) is stopped. */
async function runCapstan(args: string[], env: Record<string, string>, limitMs = 30_000) {
  const base = hostEnv()
  const p = Bun.spawn(['bun', 'src/main.ts', ...args], { cwd: ROOT, env: { ...base, ...env }, stdout: 'pipe', stderr: 'pipe' })
  const limit = setTimeout(() => p.kill('SIGKILL'), limitMs)
  const [out, err] = [await new Response(p.stdout).text(), await new Response(p.stderr).text()]
  const code = await p.exited
  clearTimeout(limit)
  return { code, out, err }
}

describe('configuration and start-up', () => {
  test('a second server on a port in use stops with one line and touches nothing', async () => {
    const port = new URL(srv.base).port
    const dir = mkdtempSync(join(tmpdir(), 'capstan-second-'))
    // without an admin token: a start that would generate one must not show it and then fail
    const r = await runCapstan(['serve'], { CAPSTAN_HOST: '127.0.0.1', CAPSTAN_PORT: port, CAPSTAN_DATA_DIR: join(dir, 'data') })
    expect(r.code).toBe(2)
    expect(r.err.trim().split('\n')).toEqual([`capstan: cannot listen on 127.0.0.1:${port}: the address is in use (is another Capstan running?)`])
    expect(r.out).toBe('')
    // nothing was written: no data directory, no database, no key
    expect(existsSync(join(dir, 'data'))).toBe(false)
    // the first server still answers alone
    expect((await srv.request('GET', '/healthz')).status).toBe(200)
    rmSync(dir, { recursive: true, force: true })
  })

  test('one Capstan per data directory: serve on another port, migrate and a forced restore all refuse while it runs', async () => {
    const env = { CAPSTAN_HOST: '127.0.0.1', CAPSTAN_PORT: String(await freePort()), CAPSTAN_DATA_DIR: srv.dataDir, CAPSTAN_ADMIN_TOKEN: 'second-admin-token-0123456789abcd' }
    const line = `capstan: ${srv.dataDir} is in use by another Capstan process (serve, migrate or restore)`
    for (const args of [['serve'], ['migrate'], ['vacuum'], ['restore', srv.dataDir, '--force']]) {
      const r = await runCapstan(args, env)
      expect(r.code).toBe(2)
      expect(r.err.trim().split('\n')).toEqual([line])
    }
    // the running server is untouched and still serves its data
    const { key } = await srv.tenant()
    expect((await srv.api(key, 'GET', '/workspace')).status).toBe(200)
  })

  test('a bad value stops the start with one line naming the variable', async () => {
    for (const [name, value] of [['CAPSTAN_PORT', 'eighty'], ['CAPSTAN_CLAMD', 'clamd.sock'], ['CAPSTAN_TRUST_PROXY', 'maybe'], ['CAPSTAN_TRUSTED_PROXIES', '10.0.0.0/33'], ['CAPSTAN_LOG_LEVEL', 'loud'], ['CAPSTAN_KEY_RATE_LIMIT', '0'], ['CAPSTAN_METRICS_TOKEN', 'short'], ['CAPSTAN_BACKUP_HOURS', '0'], ['CAPSTAN_BACKUP_KEEP', 'all'], ['CAPSTAN_WAL_CHECKPOINTER', 'sometimes'], ['CAPSTAN_BACKUP_DIR', join(tmpdir(), 'capstan-never', 'backups')], ['CAPSTAN_SECRET_KEY_FILE', join(tmpdir(), 'capstan-never', 'secret.key')]]) {
      const r = await runCapstan(['serve'], { [name]: value!, CAPSTAN_DATA_DIR: join(tmpdir(), 'capstan-never') })
      expect(r.code).toBe(2)
      expect(r.err.trim().split('\n')).toHaveLength(1)
      expect(r.err).toContain(name!)
    }
  })

  test('an unusable data directory, database or address stops the start with one line and changes nothing', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-unusable-'))
    const port = String(await freePort())
    const start = (args: string[], env: Record<string, string>) => runCapstan(args, { CAPSTAN_HOST: '127.0.0.1', CAPSTAN_PORT: port, CAPSTAN_ADMIN_TOKEN: 'unusable-admin-token-0123456789ab', ...env })
    const oneLine = (r: { code: number; err: string }, text: string) => {
      expect(r.code).toBe(2)
      expect(r.err.trim().split('\n')).toEqual([expect.stringContaining(text)])
    }
    try {
      // a data directory that cannot be made (a file sits where a parent directory should be)
      const file = join(dir, 'a-file')
      writeFileSync(file, 'x')
      for (const args of [['serve'], ['migrate']]) oneLine(await start(args, { CAPSTAN_DATA_DIR: join(file, 'data') }), `capstan: CAPSTAN_DATA_DIR ${join(file, 'data')} cannot be used: ENOTDIR`)

      // a capstan.db that is not a database is left exactly as it was
      const notDb = join(dir, 'not-a-db')
      const junk = 'these bytes are not an SQLite database, and no start may change them\n'.repeat(20)
      mkdirSync(notDb)
      writeFileSync(join(notDb, 'capstan.db'), junk)
      for (const args of [['serve'], ['migrate']]) oneLine(await start(args, { CAPSTAN_DATA_DIR: notDb }), `capstan: cannot open the database ${join(notDb, 'capstan.db')}: file is not a database`)
      expect(readFileSync(join(notDb, 'capstan.db'), 'utf8')).toBe(junk)

      // a database a newer Capstan has migrated is not touched by an older one
      const newer = join(dir, 'newer')
      expect((await start(['migrate'], { CAPSTAN_DATA_DIR: newer })).code).toBe(0)
      const db = new Database(join(newer, 'capstan.db'))
      db.run("INSERT INTO migrations (version, name, applied_at) VALUES (9999, '9999_from_the_future.sql', 0)")
      const before = db.query('SELECT version FROM migrations ORDER BY version').all()
      db.close()
      for (const args of [['serve'], ['migrate']]) oneLine(await start(args, { CAPSTAN_DATA_DIR: newer }), 'database schema version 9999 is newer than this binary')
      const after = new Database(join(newer, 'capstan.db'), { readonly: true })
      expect(after.query('SELECT version FROM migrations ORDER BY version').all()).toEqual(before)
      after.close()

      // an address no interface has (from TEST-NET-3) is named as such, not as a port in use
      const own = new Set(Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address)))
      const away = ['203.0.113.77', '203.0.113.78', '198.51.100.77'].find((a) => !own.has(a))!
      oneLine(await start(['serve'], { CAPSTAN_DATA_DIR: join(dir, 'ok'), CAPSTAN_HOST: away }), `capstan: cannot listen on ${away}:${port}: no network interface of this machine has that address (check CAPSTAN_HOST)`)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('without CAPSTAN_ADMIN_TOKEN the first start prints a token once and stores only its hash; a token set later replaces it for good', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-admin-'))
    try {
      const port = await freePort()
      const env: Record<string, string> = { CAPSTAN_DATA_DIR: dir, CAPSTAN_PORT: String(port), CAPSTAN_HOST: '127.0.0.1' }
      const base = hostEnv()
      const start = async () => {
        const p = Bun.spawn(['bun', 'src/main.ts', 'serve'], { cwd: ROOT, env: { ...base, ...env }, stdout: 'pipe', stderr: 'pipe' })
        let out = ''
        const reader = (p.stdout as ReadableStream<Uint8Array>).getReader()
        while (!out.includes('capstan started')) {
          const { value, done } = await reader.read()
          if (done) break
          out += new TextDecoder().decode(value)
        }
        return { p, out }
      }
      const first = await start()
      const token = /admin token[^:]*: (adm_[A-Za-z0-9]{40})/.exec(first.out)?.[1]
      expect(token).toBeDefined()
      const ok = await fetch(`http://127.0.0.1:${port}/admin/api/workspaces`, { headers: { authorization: `Bearer ${token}` } })
      expect(ok.status).toBe(200)
      first.p.kill()
      await first.p.exited
      const db = new Database(join(dir, 'capstan.db'), { readonly: true })
      const stored = JSON.stringify(db.query('SELECT * FROM system_settings').all())
      const migrations = db.query('SELECT version FROM migrations').all()
      db.close()
      expect(stored).not.toContain(token!)
      expect(migrations.length).toBeGreaterThan(0)
      const second = await start()
      expect(second.out).not.toContain('admin token')
      expect((await fetch(`http://127.0.0.1:${port}/admin/api/workspaces`, { headers: { authorization: `Bearer ${token}` } })).status).toBe(200)
      second.p.kill()
      await second.p.exited
      // rotating: a token set in CAPSTAN_ADMIN_TOKEN replaces the generated one for good — the
      // old one does not come back when the variable is later taken away
      const status = (bearer: string) => fetch(`http://127.0.0.1:${port}/admin/api/workspaces`, { headers: { authorization: `Bearer ${bearer}` } }).then((r) => r.status)
      const chosen = 'chosen-admin-token-0123456789abcdef'
      env.CAPSTAN_ADMIN_TOKEN = chosen
      const third = await start()
      expect([await status(chosen), await status(token!)]).toEqual([200, 401])
      third.p.kill()
      await third.p.exited
      delete env.CAPSTAN_ADMIN_TOKEN
      const fourth = await start()
      expect(fourth.out).not.toContain('admin token')
      expect([await status(chosen), await status(token!)]).toEqual([200, 401])
      fourth.p.kill()
      await fourth.p.exited
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('capstan vacuum rewrites the database without what deleted rows left in its free space', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-vacuum-'))
    try {
      expect((await runCapstan(['migrate'], { CAPSTAN_DATA_DIR: dir })).code).toBe(0)
      // what an older Capstan (without secure_delete) left behind: rows deleted, bytes kept
      const db = new Database(join(dir, 'capstan.db'))
      db.run('PRAGMA secure_delete = OFF')
      db.run("INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES ('w', 'W', 'w', 'active', '{}', 0, 0)")
      const insert = db.query("INSERT INTO contacts (id, workspace_id, phone, name, consent_status, metadata, created_at, updated_at, last_activity_at) VALUES (?, 'w', ?, 'Gone Person-4c1e', 'unknown', '{}', 0, 0, 0)")
      db.transaction(() => {
        for (let i = 0; i < 2000; i++) insert.run(`c${i}`, `+1555${String(i).padStart(7, '0')}`)
      })()
      db.run('DELETE FROM contacts')
      db.run('PRAGMA wal_checkpoint(TRUNCATE)')
      db.close()
      const has = () => readFileSync(join(dir, 'capstan.db')).includes(Buffer.from('Gone Person-4c1e'))
      expect(has()).toBe(true)
      const r = await runCapstan(['vacuum'], { CAPSTAN_DATA_DIR: dir })
      expect(r.code).toBe(0)
      const [, before, after] = /database rewritten: (\d+) → (\d+) bytes/.exec(r.out)!.map(Number)
      expect(after).toBeLessThan(before!)
      expect(has()).toBe(false)
      expect((await runCapstan(['vacuum', 'now'], { CAPSTAN_DATA_DIR: dir })).code).toBe(2)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('capstan migrate and version', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-migrate-'))
    try {
      const first = await runCapstan(['migrate'], { CAPSTAN_DATA_DIR: dir })
      expect(first.code).toBe(0)
      expect(first.out).toContain('applied migrations 1')
      const again = await runCapstan(['migrate'], { CAPSTAN_DATA_DIR: dir })
      expect(again.out).toContain('up to date')
      const db = new Database(join(dir, 'capstan.db'), { readonly: true })
      expect((db.query('PRAGMA journal_mode').get() as any).journal_mode).toBe('wal')
      db.close()
      expect((await runCapstan(['version'], {})).out.trim()).toMatch(/^\d+\.\d+\.\d+$/)
      expect((await runCapstan(['healthcheck'], { CAPSTAN_PORT: new URL(srv.base).port })).code).toBe(0)
      expect((await runCapstan(['healthcheck'], { CAPSTAN_PORT: '1' })).code).toBe(1)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('upgrading keeps what older migrations wrote: a paused campaign keeps its reason when the reasons grow (0019)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-upgrade-'))
    try {
      // a database as Capstan left it at schema 18, with campaigns paused for each reason it had
      const old = databaseAtSchema(join(dir, 'capstan.db'), 18)
      const campaign = old.query("INSERT INTO campaigns (id, workspace_id, name, template_id, connection_id, audience, variables, status, created_at, updated_at, paused_reason) VALUES (?, 'w', 'c', 't', 'k', '{}', '{}', ?, 0, 0, ?)")
      campaign.run('by-request', 'paused', 'requested')
      campaign.run('by-allowance', 'paused', 'allowance_exhausted')
      campaign.run('running', 'running', null)
      old.close()
      const r = await runCapstan(['migrate'], { CAPSTAN_DATA_DIR: dir })
      expect([r.code, r.out]).toEqual([0, expect.stringContaining('applied migrations 19')])
      const db = new Database(join(dir, 'capstan.db'))
      expect(db.query('SELECT id, status, paused_reason FROM campaigns ORDER BY id').all()).toEqual([
        { id: 'by-allowance', status: 'paused', paused_reason: 'allowance_exhausted' },
        { id: 'by-request', status: 'paused', paused_reason: 'requested' },
        { id: 'running', status: 'running', paused_reason: null },
      ])
      db.run("UPDATE campaigns SET status = 'paused', paused_reason = 'template_refused' WHERE id = 'running'")
      expect(() => db.run("UPDATE campaigns SET paused_reason = 'whatever' WHERE id = 'running'")).toThrow(/CHECK constraint failed/)
      expect((db.query('PRAGMA integrity_check').get() as any).integrity_check).toBe('ok')
      db.close()
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('.env beside the binary is read as dotenv files are written (comments, quotes)', () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-dotenv-'))
    try {
      const file = join(dir, '.env')
      writeFileSync(
        file,
        [
          '# Capstan on the VPS',
          'CAPSTAN_PORT=8081 # the API port',
          'export CAPSTAN_LOG_LEVEL=warn',
          'CAPSTAN_ADMIN_TOKEN="adm_abc#def # not a comment" # a comment',
          "CAPSTAN_URL='http://127.0.0.1:8081'   ",
          'CAPSTAN_SECRET_KEY=key#with-hash',
          'CAPSTAN_MULTI="one\\ntwo \\"quoted\\""',
          'CAPSTAN_EMPTY=',
          'CAPSTAN_HOST=   # only a comment',
          'CAPSTAN_DATA_DIR=/from/file',
        ].join('\n'),
      )
      const env: Record<string, string | undefined> = { CAPSTAN_DATA_DIR: '/already/set' }
      loadDotEnv(file, env)
      expect(env).toEqual({
        CAPSTAN_PORT: '8081',
        CAPSTAN_LOG_LEVEL: 'warn',
        CAPSTAN_ADMIN_TOKEN: 'adm_abc#def # not a comment',
        CAPSTAN_URL: 'http://127.0.0.1:8081',
        CAPSTAN_SECRET_KEY: 'key#with-hash',
        CAPSTAN_MULTI: 'one\ntwo "quoted"',
        CAPSTAN_EMPTY: '',
        CAPSTAN_HOST: '',
        CAPSTAN_DATA_DIR: '/already/set', // the environment wins
      })
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('built-in commands refuse arguments they do not take instead of ignoring them', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-args-'))
    try {
      const env = { CAPSTAN_DATA_DIR: dir, CAPSTAN_PORT: '1' }
      for (const [args, line] of [
        [['serve', '--port', '9000'], 'capstan: serve takes no arguments; settings come from CAPSTAN_* variables (run `capstan help`)'],
        [['migrate', 'now'], 'capstan: migrate takes no arguments; settings come from CAPSTAN_* variables (run `capstan help`)'],
        [['backup'], 'capstan: usage: capstan backup <dir>'],
        [['backup', join(dir, 'a'), join(dir, 'b')], 'capstan: usage: capstan backup <dir>'],
        [['restore', '--force'], 'capstan: usage: capstan restore <dir> [--force]'],
      ] as const) {
        const r = await runCapstan([...args], env)
        expect([args, r.code, r.err.trim()]).toEqual([args, 2, line])
      }
      // nothing was served, migrated or written
      expect(readdirSync(dir)).toEqual([])
      // --force may come before the directory
      const r = await runCapstan(['restore', '--force', join(dir, 'none')], env)
      expect(r.err.trim()).toBe(`capstan: no backup at ${join(dir, 'none')} (capstan.db missing)`)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('healthcheck and the CLI find a server listening on a CAPSTAN_HOST other than 127.0.0.1', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-host-'))
    const env = { CAPSTAN_HOST: '127.0.0.2', CAPSTAN_PORT: String(await freePort()), CAPSTAN_DATA_DIR: dir, CAPSTAN_ADMIN_TOKEN: 'host-admin-token-0123456789abcdef' }
    const base = hostEnv()
    const p = Bun.spawn(['bun', 'src/main.ts', 'serve'], { cwd: ROOT, env: { ...base, ...env }, stdout: 'ignore', stderr: 'ignore' })
    try {
      let up = false
      for (let i = 0; i < 200 && !up; i++) {
        up = await fetch(`http://127.0.0.2:${env.CAPSTAN_PORT}/healthz`).then((r) => r.ok, () => false)
        if (!up) await Bun.sleep(50)
      }
      expect(up).toBe(true)
      // the same environment the server was started with is enough: no CAPSTAN_URL
      expect((await runCapstan(['healthcheck'], env)).code).toBe(0)
      const list = await runCapstan(['workspaces', 'list', '--json'], env)
      expect([list.code, JSON.parse(list.out).data]).toEqual([0, []])
    } finally {
      p.kill()
      await p.exited
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('--help after any command prints the help and does nothing; a group without its subcommand names them', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-help-'))
    try {
      for (const args of [['migrate', '--help'], ['backup', '--help'], ['restore', '-h'], ['serve', '--help'], ['keys', 'create', '--help']]) {
        const r = await runCapstan(args, { CAPSTAN_DATA_DIR: dir, CAPSTAN_PORT: '1' })
        expect([args, r.code]).toEqual([args, 0])
        expect(r.out).toContain('usage:')
      }
      // nothing was migrated, backed up or restored
      expect(existsSync(join(dir, 'capstan.db'))).toBe(false)
      expect(existsSync(join(ROOT, '--help'))).toBe(false)
      const bare = await runCapstan(['keys'], {})
      expect([bare.code, bare.err.trim()]).toEqual([2, 'capstan: "keys" needs a subcommand: create, list, revoke, remove; run `capstan help`'])
      const typo = await runCapstan(['workspaces', 'delete', 'x'], {})
      expect([typo.code, typo.err]).toEqual([2, expect.stringContaining('unknown subcommand "workspaces delete": create, list, get, update, policy')])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('the CLI creates a workspace and a key through the admin API', async () => {
    const env = { CAPSTAN_URL: srv.base, CAPSTAN_ADMIN_TOKEN: 'test-admin-token-0123456789abcdef' }
    const ws = await runCapstan(['workspaces', 'create', '--name', 'From CLI', '--json'], env)
    expect(ws.code).toBe(0)
    const wsId = JSON.parse(ws.out).data.id
    const key = await runCapstan(['keys', 'create', '--workspace', wsId, '--name', 'cli', '--scopes', 'contacts:read', '--json'], env)
    const rec = JSON.parse(key.out).data
    expect(rec.scopes).toEqual(['contacts:read'])
    expect((await srv.api(rec.key, 'GET', '/workspace')).json.data.name).toBe('From CLI')
    const conn = await runCapstan(['connections', 'create', '--workspace', wsId, '--phone', '+15557654321', '--config', '{"delivered_after_ms":null}', '--json'], env)
    expect(JSON.parse(conn.out).data).toMatchObject({ phone: '+15557654321', driver: 'sandbox', status: 'online', config: { delivered_after_ms: null } })
    const off = await runCapstan(['connections', 'update', JSON.parse(conn.out).data.id, '--status', 'offline', '--json'], env)
    expect(JSON.parse(off.out).data.status).toBe('offline')
    const connId = JSON.parse(conn.out).data.id
    const warm = await runCapstan(['connections', 'update', connId, '--warmup-days', '7', '--warmup-start-cap', '10', '--json'], env)
    expect(JSON.parse(warm.out).data.warmup).toMatchObject({ days: 7, start_daily_cap: 10, day: 1 })
    expect(JSON.parse((await runCapstan(['connections', 'update', connId, '--warmup-days', '0', '--json'], env)).out).data.warmup).toBeNull()
    // a template and a campaign from a shell (the admin API's mirror of /api/v1 for the workspace)
    const tpl = JSON.parse((await runCapstan(['templates', 'create', '--workspace', wsId, '--name', 'Hello', '--text', 'Hi {{name}}', '--json'], env)).out).data
    expect(tpl).toMatchObject({ name: 'Hello', body: 'Hi {{name}}', variables: ['name'] })
    const camp = JSON.parse((await runCapstan(['campaigns', 'create', '--workspace', wsId, '--name', 'Spring', '--template', tpl.id, '--connection', connId, '--audience', '{"plan":"pro"}', '--json'], env)).out).data
    expect(camp).toMatchObject({ name: 'Spring', status: 'draft', audience: { metadata: { plan: 'pro' } } })
    const later = new Date(Date.now() + 86_400_000).toISOString()
    expect(JSON.parse((await runCapstan(['campaigns', 'schedule', camp.id, '--workspace', wsId, '--at', later, '--json'], env)).out).data.status).toBe('scheduled')
    expect(JSON.parse((await runCapstan(['campaigns', 'cancel', camp.id, '--workspace', wsId, '--json'], env)).out).data.status).toBe('cancelled')
    expect(JSON.parse((await runCapstan(['campaigns', 'list', '--workspace', wsId, '--json'], env)).out).data.map((c: any) => c.id)).toEqual([camp.id])
    const inUse = await runCapstan(['templates', 'remove', tpl.id, '--workspace', wsId], env)
    expect(inUse.code).toBe(0)
    // the operators' lists from a shell: contacts by name and consent, messages by words, groups, media, the audit log by kind
    const writer = (await srv.key(wsId, ['contacts:write'])).key
    expect((await srv.api(writer, 'POST', '/contacts', { json: { phone: '+15557654000', name: 'Shell Person', consent_status: 'opted_in' } })).status).toBe(201)
    const admin = (args: string[]) => runCapstan([...args, '--workspace', wsId, '--json'], env).then((r) => JSON.parse(r.out))
    expect((await admin(['contacts', 'list', '--name', 'shell', '--consent', 'opted_in'])).data.map((c: any) => c.name)).toEqual(['Shell Person'])
    expect((await admin(['messages', 'list', '--text', 'nothing like this'])).data).toEqual([])
    expect((await admin(['groups', 'sync'])).data.numbers).toEqual([{ number: '+15557654321', status: 'failed', groups: null, error: 'The number is offline.' }]) // (taken offline above)
    expect((await admin(['groups', 'list'])).data).toEqual([])
    expect((await admin(['media', 'list'])).data).toEqual([])
    expect((await admin(['audit-log', '--action', 'connection'])).data.map((e: any) => [e.action, e.via])).toEqual([['connection.updated', 'cli'], ['connection.updated', 'cli'], ['connection.updated', 'cli'], ['connection.created', 'cli']])
    // as a table: what it was about, and who (how, from where)
    const table = (await runCapstan(['audit-log', '--workspace', wsId, '--action', 'connection.created'], env)).out.trim().split('\n')
    expect(table[0]!.split(/\s+/)).toEqual(['ACTION', 'KEY_ID', 'SUBJECT_NAME', 'VIA', 'IP', 'AT'])
    expect(table[1]!.split(/\s+/).slice(0, 4)).toEqual(['connection.created', '+15557654321', 'cli', '127.0.0.1']) // (no key: its column empty)
    // another workspace's campaign is not found through this one
    const elsewhere = await srv.admin('GET', `/workspaces/${(await srv.workspace()).id}/campaigns/${camp.id}`)
    expect(elsewhere.status).toBe(404)
    const hook = await runCapstan(['webhooks', 'create', '--workspace', wsId, '--url', 'http://127.0.0.1:9/h', '--events', 'message.sent,message.failed', '--json'], env)
    expect(JSON.parse(hook.out).data.events).toEqual(['message.sent', 'message.failed'])
    const hookId = JSON.parse(hook.out).data.id
    expect(JSON.parse((await runCapstan(['webhooks', 'disable', hookId, '--json'], env)).out).data.status).toBe('disabled')
    expect(JSON.parse((await runCapstan(['webhooks', 'enable', hookId, '--json'], env)).out).data.status).toBe('active')
    // a new signing secret, the old one signing beside it for 2 hours; failed deliveries sent again
    const rotated = JSON.parse((await runCapstan(['webhooks', 'rotate-secret', hookId, '--keep-previous-hours', '2', '--json'], env)).out).data
    expect(rotated.secret).not.toBe(JSON.parse(hook.out).data.secret)
    expect(Date.parse(rotated.previous_secret_expires_at) - Date.now()).toBeGreaterThan(7_100_000)
    expect(JSON.parse((await runCapstan(['webhooks', 'recover', hookId, '--since', '2026-01-01T00:00:00Z', '--json'], env)).out).data).toEqual({ requeued: 0 })
    // an endpoint's health, its history by status, and one delivery sent again (the endpoint
    // answers nothing here: a test event waits for its next attempt, so it cannot be resent yet)
    expect(JSON.parse((await runCapstan(['webhooks', 'health', hookId, '--json'], env)).out).data.state).toBe('unknown')
    expect(JSON.parse((await runCapstan(['webhooks', 'deliveries', hookId, '--status', 'failed', '--json'], env)).out).data).toEqual([])
    const missing = await runCapstan(['webhooks', 'resend', hookId, 'msg_0000'], env)
    expect([missing.code, missing.err]).toEqual([1, expect.stringContaining('not found')])
    const withHeaders = await runCapstan(['webhooks', 'headers', hookId, '--header', 'X-Gateway-Key: k-123', '--header', 'X-Env: prod', '--json'], env)
    expect(JSON.parse(withHeaders.out).data.headers).toEqual(['X-Gateway-Key', 'X-Env'])
    expect((await srv.admin('GET', `/webhooks/${hookId}`)).json.data.header_values).toEqual({ 'X-Gateway-Key': 'k-123', 'X-Env': 'prod' })
    expect(JSON.parse((await runCapstan(['webhooks', 'headers', hookId, '--json'], env)).out).data.headers).toEqual([])
    const malformed = await runCapstan(['webhooks', 'headers', hookId, '--header', 'no colon'], env)
    expect([malformed.code, malformed.err]).toEqual([2, expect.stringContaining('--header needs "Name: value"')])
    // a key usable only from the office's addresses
    const limited = JSON.parse((await runCapstan(['keys', 'create', '--workspace', wsId, '--name', 'office', '--allowed-ips', '203.0.113.0/24, 2001:db8::/32', '--json'], env)).out).data
    expect(limited.allowed_ips).toEqual(['203.0.113.0/24', '2001:db8::/32'])
    expect((await srv.api(limited.key, 'GET', '/workspace')).status).toBe(401)
    // a contact erased from the shell
    await srv.api((await srv.key(wsId)).key, 'POST', '/contacts', { json: { phone: '+15557650000', name: 'To Forget' } })
    // an export prints its document as indented JSON, without --json too
    const exported = await runCapstan(['contacts', 'export', '--workspace', wsId, '--phone', '+15557650000'], env)
    expect(exported.out.split('\n')[1]).toBe('  "data": {')
    expect(JSON.parse(exported.out).data.contact).toMatchObject({ phone: '+15557650000', name: 'To Forget' })
    const erased = await runCapstan(['contacts', 'erase', '--workspace', wsId, '--phone', '+15557650000', '--json'], env)
    expect([erased.code, JSON.parse(erased.out).data.messages]).toEqual([0, 0])
    expect((await runCapstan(['contacts', 'erase', '--workspace', wsId, '--phone', '+15557650000'], env)).err).toContain('The contact was not found.')
    const bad = await runCapstan(['workspaces', 'list'], { ...env, CAPSTAN_ADMIN_TOKEN: 'wrong-token-wrong-token' })
    expect(bad.code).toBe(1)
    expect(bad.err).toContain('A valid admin token is required.')
  })

  test('CLI: a policy flag alone changes only its field; an option the command does not take is refused and sends nothing', async () => {
    const env = { CAPSTAN_URL: srv.base, CAPSTAN_ADMIN_TOKEN: 'test-admin-token-0123456789abcdef' }
    const wsId = JSON.parse((await runCapstan(['workspaces', 'create', '--name', 'Policy CLI', '--json'], env)).out).data.id
    const set = await runCapstan(['workspaces', 'policy', wsId, '--hourly-cap', '120', '--daily-cap', '900', '--min-gap', '2', '--max-gap', '8', '--json'], env)
    expect(set.code).toBe(0)
    const one = await runCapstan(['workspaces', 'policy', wsId, '--max-gap', '9.5', '--json'], env)
    expect([one.code, one.err]).toEqual([0, ''])
    expect(JSON.parse(one.out).data.settings.sending_policy).toEqual({ hourly_cap: 120, daily_cap: 900, min_gap_seconds: 2, max_gap_seconds: 9.5 })
    for (const [args, message] of [
      [['workspaces', 'policy', wsId], 'give at least one of --hourly-cap'],
      [['workspaces', 'policy', wsId, '--hourly-cap', 'lots'], '--hourly-cap must be a number'],
      [['workspaces', 'policy', wsId, '--hourly_cap', '5'], 'workspaces policy does not take --hourly_cap'],
      // a misspelt --scopes must not issue a key with every scope
      [['keys', 'create', '--workspace', wsId, '--name', 'typo', '--scope', 'contacts:read'], 'keys create does not take --scope'],
      [['workspaces', 'create', '--name', 'X', '--scopes', 'contacts:read'], 'workspaces create does not take --scopes'],
      [['keys', 'create', '--workspace', wsId, '--name'], "Option '--name <value>' argument missing"],
    ] as const) {
      const r = await runCapstan([...args], env)
      expect([args, r.code, r.err]).toEqual([args, 2, expect.stringContaining(message)])
    }
    expect((await srv.admin('GET', `/workspaces/${wsId}/keys`)).json.data).toEqual([])
    expect((await srv.admin('GET', `/workspaces/${wsId}`)).json.data.settings.sending_policy.max_gap_seconds).toBe(9.5)
    const missing = await runCapstan(['workspaces', 'policy', '01a1ff63-0299-755f-b4eb-ab8401901800', '--daily-cap', '5'], env)
    expect([missing.code, missing.err.trim()]).toEqual([1, 'The workspace was not found. (not_found)'])
    // --json after the raw admin call's arguments is the output switch, not its body
    const raw = await runCapstan(['admin', 'GET', `/workspaces/${wsId}`, '--json'], env)
    expect([raw.code, JSON.parse(raw.out).data.name]).toEqual([0, 'Policy CLI'])
  })
})

describe('checkpoints off the event loop', () => {
  /** ~300 KB of contacts written to a fresh server: a WAL well under the ~40 MiB at which SQLite's own checkpoint runs. */
  async function written(env: Record<string, string>) {
    const srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000', ...env } })
    const size = (f: string) => Bun.file(join(srv.dataDir, f)).size
    try {
      const { key } = await srv.tenant()
      await Bun.sleep(300)
      const before = size('capstan.db')
      for (let i = 0; i < 300; i++) await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone(), metadata: { note: 'x'.repeat(700) } } })
      return { srv, size, before }
    } catch (e) {
      await srv.close()
      throw e
    }
  }

  test('writes reach the database file within moments, long before the WAL reaches the automatic checkpoint; the server stops cleanly', async () => {
    const { srv, size, before } = await written({})
    try {
      expect(size('capstan.db-wal')).toBeLessThan(8 * 1024 * 1024)
      // copied into the database by the checkpointer, a few times a second
      await waitFor(() => size('capstan.db') > before + 200_000, 5_000)
      await srv.stop()
      expect(srv.output).toContain('"msg":"capstan stopped"')
      expect(srv.output).not.toContain('checkpointer')
    } finally {
      await srv.close()
    }
  })

  test('emptying the WAL after an erasure waits out the checkpointer thread (SQLite answers busy at once while it runs)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-empty-wal-'))
    const db = openDatabase(join(dir, 'capstan.db'))
    // the real checkpointer, every millisecond instead of every 100: a truncation tried once right
    // after a write collides with one of its checkpoints more often than not
    const checkpointer = startCheckpointer(join(dir, 'capstan.db'), new Logger('silent'), 1)
    try {
      db.run('CREATE TABLE t (x TEXT)')
      const add = db.query('INSERT INTO t VALUES (?)')
      for (let i = 0; i < 50; i++) {
        db.transaction(() => {
          for (let j = 0; j < 100; j++) add.run('x'.repeat(1000))
        })()
        await Bun.sleep(1)
        expect(await emptyWal(db)).toBe(true)
        expect(Bun.file(join(dir, 'capstan.db-wal')).size).toBe(0)
      }
    } finally {
      await checkpointer.stop()
      db.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('CAPSTAN_WAL_CHECKPOINTER=false leaves the copying to SQLite: the same writes stay in the WAL', async () => {
    const { srv, size, before } = await written({ CAPSTAN_WAL_CHECKPOINTER: 'false' })
    try {
      await Bun.sleep(1_500)
      expect(size('capstan.db-wal')).toBeGreaterThan(200_000)
      expect(size('capstan.db')).toBeLessThan(before + 200_000)
    } finally {
      await srv.close()
    }
  })
})

describe('the compiled binary', () => {
  test("stack traces from a build made with package.json's build flags name the src/ file and line", async () => {
    // the same `bun build --compile …` flags as `bun run build`, on a small entry that fails inside
    // src/config.ts: without --sourcemap the frames would read /$bunfs/root/<binary>:<line>
    const script = (JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as { scripts: { build: string } }).scripts.build
    const flags = script.split(/\s+/).filter((w) => w.startsWith('--') && w !== '--outfile')
    expect(flags).toContain('--sourcemap')
    const dir = mkdtempSync(join(tmpdir(), 'capstan-build-'))
    try {
      writeFileSync(join(dir, 'entry.ts'), `import { loadConfig } from ${JSON.stringify(join(ROOT, 'src/config.ts'))}\ntry { loadConfig({ CAPSTAN_PORT: 'x' }) } catch (e) { console.log((e as Error).stack) }\n`)
      const build = Bun.spawnSync(['bun', 'build', ...flags, join(dir, 'entry.ts'), '--outfile', join(dir, 'probe')], { cwd: ROOT, stderr: 'pipe' })
      expect(build.exitCode).toBe(0)
      const run = Bun.spawnSync([join(dir, 'probe')], { cwd: dir, stdout: 'pipe' })
      const stack = run.stdout.toString()
      expect(stack).toContain('CAPSTAN_PORT must be a whole number')
      expect(stack).toMatch(/at loadConfig \(\S*src\/config\.ts:\d+:\d+\)/)
      expect(stack).not.toContain('$bunfs')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
