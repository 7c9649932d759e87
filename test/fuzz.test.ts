/**
 * Property-based bad input (fast-check) over every /api/v1 operation: random JSON, form and
 * multipart bodies, query strings and headers. Properties: never a 5xx; every error is the
 * contract's JSON ({message, code}); an error never echoes a submitted value or the bearer; and a
 * refused request changes no row (idempotency records of refusals aside, which are by design).
 * Run on both engines — the embedded SQLite file and a private PostgreSQL — since what one takes
 * the other may not (PostgreSQL's text cannot hold a NUL character; SQLite's can).
 */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import fc from 'fast-check'
import { PrivatePostgres } from '../src/cluster/postgres'
import { ADMIN_TOKEN, TestServer, newPhone } from './support/server'

setDefaultTimeout(60_000)

const MARK = 'zq7mark'
describe.each(['sqlite', 'postgres'] as const)('on %s', (engine) => {
let srv: TestServer
let key: string
let ids: Record<string, string>
/** The row counts of the tables a refusal must not change, read from the server's database. */
let count: (sql: string) => Promise<number>
let rowsOf: (sql: string) => Promise<unknown[]>
let done: () => Promise<void>

beforeAll(async () => {
  const env: Record<string, string> = { CAPSTAN_KEY_RATE_LIMIT: '10000000', CAPSTAN_LOG_LEVEL: 'warn' }
  let pg: PrivatePostgres | null = null
  let pgDir = ''
  if (engine === 'postgres') {
    pgDir = mkdtempSync(join(tmpdir(), 'capstan-fuzz-pg-'))
    pg = await PrivatePostgres.start(join(pgDir, 'pg'))
    env.CAPSTAN_DATABASE_URL = pg.url
  }
  srv = await TestServer.start({ env })
  if (pg) {
    const sql = new Bun.SQL(pg.url, { max: 1 })
    count = async (q) => Number((await sql.unsafe(q))[0].n)
    rowsOf = async (q) => [...(await sql.unsafe(q))]
    done = async () => {
      await sql.close()
      await srv.close()
      await pg!.stop()
      rmSync(pgDir, { recursive: true, force: true })
    }
  } else {
    const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
    count = async (q) => (db.query(q).get() as { n: number }).n
    rowsOf = async (q) => db.query(q).all()
    done = async () => {
      db.close()
      await srv.close()
    }
  }
  const t = await srv.tenant()
  key = t.key
  const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
  await srv.admin('PUT', `/connections/${conn.id}/sandbox/groups`, { groups: [{ external_id: 'g', name: 'G', participants: ['+447900000009'], announce: false, admin: true }] })
  await srv.api(key, 'POST', '/groups/sync')
  const template = (await srv.api(key, 'POST', '/templates', { json: { name: 'T', body: 'hi' } })).json.data
  ids = {
    ws: t.ws.id,
    conn: conn.id,
    message: (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'x' } })).json.data.id,
    group: (await srv.api(key, 'GET', '/groups')).json.data[0].id,
    template: template.id,
    campaign: (await srv.api(key, 'POST', '/campaigns', { json: { name: 'C', template_id: template.id, connection_id: conn.id } })).json.data.id,
  }
})
afterAll(async () => {
  await done()
})

const TABLES = ['contacts', 'consent_ledger', 'messages', 'media', 'groups', 'templates', 'campaigns', 'campaign_recipients', 'suppressions', 'usage_monthly']
const snapshot = async () => {
  const counts: string[] = []
  for (const t of TABLES) counts.push(`${t}:${await count(`SELECT COUNT(*) AS n FROM ${t}`)}`)
  return `${counts.join(',')},usage:${await count('SELECT COALESCE(SUM(messages), 0) AS n FROM usage_monthly')}`
}
const stateOf = async () => JSON.stringify([await snapshot(), await rowsOf('SELECT name, body, category FROM templates ORDER BY id'), await rowsOf('SELECT name, status FROM campaigns ORDER BY id')])

const ops = () => [
  ['GET', '/workspace'],
  ['GET', '/contacts'],
  ['POST', '/contacts'],
  ['POST', '/messages'],
  ['GET', '/messages'],
  ['GET', `/messages/${ids.message}`],
  ['POST', '/media'],
  ['GET', `/media/${ids.message}`],
  ['GET', '/groups'],
  ['POST', `/groups/${ids.group}/messages`],
  ['GET', '/templates'],
  ['GET', `/templates/${ids.template}/preview`],
  ['POST', '/templates'],
  ['PUT', `/templates/${ids.template}`],
  ['GET', '/campaigns'],
  ['GET', `/campaigns/${ids.campaign}/recipients`],
  ['POST', '/campaigns/audience/preview'],
  ['POST', '/campaigns'],
  ['PUT', `/campaigns/${ids.campaign}`],
  ['POST', `/campaigns/${ids.campaign}/schedule`],
  ['POST', `/campaigns/${ids.campaign}/pause`],
] as const

// strings that carry the marker, so an echo in an error is detectable
const marked = fc.string({ maxLength: 12 }).map((s) => `${s}${MARK}`)
const value = fc.oneof(marked, fc.integer(), fc.double(), fc.boolean(), fc.constant(null), fc.constantFrom('+15551234567', 'opted_in', '00000000-0000-4000-8000-000000000000', '', `a\u0000${MARK}`))
const field = fc.constantFrom('phone', 'name', 'consent_status', 'metadata', 'connection_id', 'recipient', 'contact_id', 'body', 'media', 'file', 'template_id', 'audience', 'variables', 'scheduled_at', 'at', 'category', marked as any)
const json = fc.dictionary(field as fc.Arbitrary<string>, fc.oneof(value, fc.array(value, { maxLength: 3 }), fc.dictionary(fc.oneof(marked, fc.constantFrom('attachments', 'metadata', 'plan')), value, { maxKeys: 3 })), { maxKeys: 6 })
const formKey = fc.oneof(field as fc.Arbitrary<string>, fc.constantFrom('media[attachments][0][media_id]', 'metadata[plan]', 'a[', 'x[][y]', '__proto__[x]', 'media[attachments][999][media_id]'))
const form = fc.array(fc.tuple(formKey, fc.oneof(marked, fc.constantFrom('+15551234567', 'hello', `a\u0000${MARK}`))), { maxLength: 6 })

const input = fc.record({
  op: fc.nat({ max: 20 }),
  encoding: fc.constantFrom('json', 'form', 'multipart', 'raw'),
  json,
  form,
  raw: fc.oneof(marked, fc.constantFrom('{', '[]', 'null', '"x"', '{"a":', '\u0000')),
  query: fc.dictionary(fc.constantFrom('page', 'per_page', 'direction', 'status', 'search', 'contact_id', '1', 'metadata.plan', MARK), fc.oneof(marked, fc.constantFrom('0', '-1', '101', '1e9', 'x', '', 'a\u0000b', '99999999999999999999')), { maxKeys: 3 }),
  idem: fc.option(fc.oneof(marked, fc.constantFrom('short', 'valid-key-1234', 'bad key!!', 'x'.repeat(300))), { nil: undefined }),
  contentType: fc.option(fc.constantFrom('application/json', 'text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data', 'application/xml'), { nil: undefined }),
})

describe('the NUL character', () => {
  test('anywhere in a request — a JSON string or name, a form value, a query — is refused and nothing is stored (PostgreSQL cannot hold it; SQLite gives the same answers)', async () => {
    const before = await stateOf()
    const send = async (path: string, init: RequestInit & { bearer?: string } = {}) => {
      const res = await fetch(`${srv.base}${path}`, { ...init, headers: { authorization: `Bearer ${init.bearer ?? key}`, ...(init.headers as Record<string, string>) } })
      return { status: res.status, json: await res.json() }
    }
    const unreadable = { message: 'Request could not be read.', code: 'bad_request' }
    const json = { 'content-type': 'application/json' }
    const fd = (fields: [string, string | File][]) => {
      const f = new FormData()
      for (const [k, v] of fields) f.append(k, v)
      return f
    }
    const refusals = [
      await send('/api/v1/contacts', { method: 'POST', headers: json, body: JSON.stringify({ phone: newPhone(), name: 'Ada\u0000' }) }),
      await send('/api/v1/contacts', { method: 'POST', headers: json, body: JSON.stringify({ phone: newPhone(), metadata: { 'pl\u0000an': 'pro' } }) }),
      await send('/api/v1/messages', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' }, body: `connection_id=${ids.conn}&recipient=%2B15550001111&body=hi%00` }),
      await send('/api/v1/messages', { method: 'POST', body: fd([['connection_id', ids.conn], ['recipient', newPhone()], ['body', 'hi\u0000']]) }),
      await send(`/admin/api/workspaces/${ids.ws}/suppressions`, { method: 'POST', bearer: ADMIN_TOKEN, headers: json, body: JSON.stringify({ phone: newPhone(), reason: 'asked\u0000' }) }),
    ]
    expect(refusals).toEqual(Array(refusals.length).fill({ status: 400, json: unreadable }))
    const search = await send(`/admin/api/workspaces/${ids.ws}/contacts?search=a%00b`, { bearer: ADMIN_TOKEN })
    expect(search).toEqual({ status: 422, json: { message: 'The given data was invalid.', code: 'validation_failed', errors: { search: ['The search field must not contain the NUL character.'] } } })
    expect(await stateOf()).toBe(before)
  })
})

describe('bad input never breaks the API', () => {
  test('random bodies, queries and headers on every operation', async () => {
    let refused = 0
    await fc.assert(
      fc.asyncProperty(input, async (x) => {
        const [method, path] = ops()[x.op]!
        const headers: Record<string, string> = { authorization: `Bearer ${key}`, accept: 'application/json' }
        if (x.idem !== undefined) headers['idempotency-key'] = x.idem
        let body: string | FormData | undefined
        if (method !== 'GET') {
          if (x.encoding === 'json') {
            body = JSON.stringify(x.json)
            headers['content-type'] = x.contentType ?? 'application/json'
          } else if (x.encoding === 'form') {
            body = new URLSearchParams(x.form).toString()
            headers['content-type'] = x.contentType ?? 'application/x-www-form-urlencoded'
          } else if (x.encoding === 'multipart') {
            const fd = new FormData()
            for (const [k, v] of x.form) fd.append(k, v)
            body = fd
          } else {
            body = x.raw
            if (x.contentType) headers['content-type'] = x.contentType
          }
        }
        const qs = new URLSearchParams(x.query).toString()
        const before = await stateOf()
        const res = await fetch(`${srv.base}/api/v1${path}${qs ? `?${qs}` : ''}`, { method, headers, body })
        const text = await res.text()
        expect(res.status).toBeLessThan(500)
        if (res.status >= 400) {
          refused++
          const err = JSON.parse(text)
          expect(typeof err.message).toBe('string')
          expect(typeof err.code).toBe('string')
          expect(text).not.toContain(MARK)
          expect(text).not.toContain(key.split('.')[1]!)
          await Bun.sleep(5) // a refused send changes nothing, even after its write batch
          expect(await stateOf()).toBe(before)
        }
      }),
      { numRuns: 1500 },
    )
    expect(refused).toBeGreaterThan(500)
    expect(srv.output).not.toContain(MARK)
  }, 120_000)
})

describe('bad input never breaks the admin API', () => {
  test('random bodies and queries on every operator operation', async () => {
    const hook = (await srv.admin('POST', `/workspaces/${ids.ws}/webhooks`, { url: 'http://127.0.0.1:9/' })).json.data.id
    const keyId = (await srv.admin('POST', `/workspaces/${ids.ws}/keys`, { name: 'fuzz' })).json.data.id
    const adminOps = [
      ['POST', '/workspaces'],
      ['GET', '/workspaces'],
      ['PATCH', `/workspaces/${ids.ws}`],
      ['POST', `/workspaces/${ids.ws}/keys`],
      ['GET', `/workspaces/${ids.ws}/audit-log`],
      ['POST', `/workspaces/${ids.ws}/suppressions`],
      ['DELETE', `/workspaces/${ids.ws}/suppressions/${MARK}`],
      ['POST', `/workspaces/${ids.ws}/connections`],
      ['PATCH', `/connections/${ids.conn}`],
      ['POST', `/connections/${ids.conn}/sandbox/inbound`],
      ['PUT', `/connections/${ids.conn}/sandbox/groups`],
      ['POST', `/workspaces/${ids.ws}/webhooks`],
      ['GET', `/webhooks/${hook}/deliveries`],
      ['PATCH', `/webhooks/${hook}`],
      ['POST', `/webhooks/${hook}/recover`],
      ['POST', `/webhooks/${hook}/rotate-secret`],
      ['GET', `/workspaces/${ids.ws}/messages`],
      ['GET', `/workspaces/${ids.ws}/contacts`],
      ['GET', `/workspaces/${ids.ws}/groups`],
      ['GET', `/workspaces/${ids.ws}/stats/daily`],
      ['POST', `/keys/${keyId}/revoke`],
    ] as const
    const adminValue = fc.oneof(value, fc.constantFrom('online', 'offline', 'inactive', 'sandbox', 'cloud_api', 'http://127.0.0.1:9/', '2099-01-01T00:00:00Z', 'http://127.0.0.1:9/\u0000'))
    const adminField = fc.constantFrom('name', 'slug', 'status', 'settings', 'sending_policy', 'hourly_cap', 'message_allowance', 'media', 'scopes', 'expires_at', 'phone', 'reason', 'driver', 'receives', 'config', 'url', 'events', 'from', 'body', 'groups', 'since', 'keep_previous_hours', 'allowed_ips', 'content_retention_days', 'messages', 'headers', 'warmup', 'days', 'start_daily_cap', marked as any) as fc.Arbitrary<string>
    const leaf = fc.oneof(adminValue, fc.array(adminValue, { maxLength: 3 }))
    const adminJson = fc.dictionary(adminField, fc.oneof(leaf, fc.dictionary(adminField, fc.oneof(leaf, fc.dictionary(adminField, leaf, { maxKeys: 3 })), { maxKeys: 4 })), { maxKeys: 5 })
    const adminQuery = fc.dictionary(fc.constantFrom('page', 'per_page', 'days', 'status', 'direction', 'name', 'search', 'consent', 'phone', 'event'), fc.oneof(marked, fc.constantFrom('0', '-1', '101', 'x', '', 'a\u0000b', '99999999999999999999')), { maxKeys: 2 })
    await fc.assert(
      fc.asyncProperty(fc.nat({ max: adminOps.length - 1 }), adminJson, adminQuery, async (op, body, query) => {
        const [method, path] = adminOps[op]!
        const qs = new URLSearchParams(query).toString()
        const res = await fetch(`${srv.base}/admin/api${path}${qs ? `?${qs}` : ''}`, { method, headers: { authorization: `Bearer ${ADMIN_TOKEN}`, 'content-type': 'application/json' }, body: method === 'GET' ? undefined : JSON.stringify(body) })
        const text = await res.text()
        expect(res.status).toBeLessThan(500)
        if (res.status >= 400) {
          const err = JSON.parse(text)
          expect(typeof err.message).toBe('string')
          expect(typeof err.code).toBe('string')
          expect(text).not.toContain(MARK)
        }
      }),
      { numRuns: 1500 },
    )
    expect(srv.output).not.toContain(MARK)
  }, 120_000)
})

describe('odd path segments never break a route', () => {
  test('random ids in every {id} and {phone} position, raw and percent-encoded', async () => {
    // the admin fuzz above may have deactivated the workspace; its routes are what is under test here
    await srv.admin('PATCH', `/workspaces/${ids.ws}`, { status: 'active' })
    const api = (seg: string) => [['GET', `/api/v1/messages/${seg}`], ['GET', `/api/v1/media/${seg}`], ['GET', `/api/v1/media/${seg}/download`], ['GET', `/api/v1/templates/${seg}/preview`], ['PUT', `/api/v1/campaigns/${seg}`], ['POST', `/api/v1/campaigns/${seg}/cancel`], ['POST', `/api/v1/groups/${seg}/messages`]] as const
    const admin = (seg: string) => [['GET', `/admin/api/workspaces/${seg}`], ['POST', `/admin/api/keys/${seg}/revoke`], ['PATCH', `/admin/api/connections/${seg}`], ['GET', `/admin/api/webhooks/${seg}/deliveries`], ['POST', `/admin/api/webhooks/${seg}/rotate-secret`], ['DELETE', `/admin/api/workspaces/${ids.ws}/suppressions/${seg}`]] as const
    // percent signs, escapes of bytes that are not UTF-8, upper-case ids, dots and plus signs
    const piece = fc.oneof(fc.string({ maxLength: 8 }), fc.constantFrom('%', '%25', '%FF', '%E0%A4', '%2B', '+', '..', '%2F', ids.message.toUpperCase(), MARK))
    const segment = fc.oneof(fc.array(piece, { minLength: 1, maxLength: 3 }).map((p) => p.join('')), fc.string({ minLength: 1, maxLength: 12 }).map(encodeURIComponent))
    await fc.assert(
      fc.asyncProperty(segment, fc.nat({ max: api('x').length + admin('x').length - 1 }), async (raw, i) => {
        // keep the segment one path segment: an unescaped / or ? would make it another route
        const seg = raw.replaceAll('/', '%2F').replaceAll('?', '%3F').replaceAll('#', '%23') || 'x'
        const [method, path] = [...api(seg), ...admin(seg)][i]!
        const bearer = path.startsWith('/admin') ? ADMIN_TOKEN : key
        const res = await fetch(`${srv.base}${path}`, { method, headers: { authorization: `Bearer ${bearer}`, 'content-type': 'application/json' }, body: method === 'GET' ? undefined : '{}' })
        const text = await res.text()
        expect(res.status).toBeLessThan(500)
        const err = JSON.parse(text)
        if (res.status >= 400) expect(typeof err.code).toBe('string')
      }),
      { numRuns: 1000 },
    )
  }, 120_000)
})
})
