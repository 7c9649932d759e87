/**
 * Isolation and scopes over the whole API: every id-taking endpoint tried with another
 * workspace's ids (404), every operation with a key lacking exactly its scope (403), and a key
 * revoked in the middle of a stream of requests (refused on the very next one).
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { TestClamd } from './support/clamd'
import * as files from './support/files'
import { TestServer, newPhone } from './support/server'

setDefaultTimeout(60_000)

const ALL = ['contacts:read', 'contacts:write', 'messages:write', 'messages:read', 'media:read', 'groups:read', 'groups:send', 'templates:read', 'templates:write', 'campaigns:read', 'campaigns:write', 'campaigns:send']

let clamd: TestClamd
let srv: TestServer
let a: Awaited<ReturnType<TestServer['tenant']>>
let other: Record<string, string>
beforeAll(async () => {
  clamd = await TestClamd.start()
  srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000', CAPSTAN_CLAMD: `unix:${clamd.socket}` } })
  a = await srv.tenant()
  await srv.admin('POST', `/workspaces/${a.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })
  // workspace B and one of everything in it
  const b = await srv.tenant()
  const conn = (await srv.admin('POST', `/workspaces/${b.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
  await srv.admin('PUT', `/connections/${conn.id}/sandbox/groups`, { groups: [{ external_id: 'g1', name: 'B group', participants: ['+447900000001'], announce: false, admin: true }] })
  await srv.api(b.key, 'POST', '/groups/sync')
  const fd = new FormData()
  fd.set('file', new File([files.png()], 'b.png'))
  const contact = (await srv.api(b.key, 'POST', '/contacts', { json: { phone: newPhone(), consent_status: 'opted_in' } })).json.data
  const template = (await srv.api(b.key, 'POST', '/templates', { json: { name: 'B', body: 'hi {{name}}' } })).json.data
  other = {
    connection: conn.id,
    contact: contact.id,
    media: (await srv.api(b.key, 'POST', '/media', { multipart: fd })).json.data.id,
    message: (await srv.api(b.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'b' } })).json.data.id,
    group: (await srv.api(b.key, 'GET', '/groups')).json.data[0].id,
    template: template.id,
    campaign: (await srv.api(b.key, 'POST', '/campaigns', { json: { name: 'B', template_id: template.id, connection_id: conn.id } })).json.data.id,
  }
  for (const [k, v] of Object.entries(other)) if (typeof v !== 'string') throw new Error(`setup of B's ${k} failed`)
})
afterAll(async () => {
  await srv.close()
  await clamd.stop()
})

/** Every operation of the spec with its scope and a body that would pass validation. */
function operations(ids: Record<string, string>, own: { connection: string }): [string, string, string, unknown?][] {
  return [
    ['GET', '/workspace', 'contacts:read'],
    ['GET', '/contacts', 'contacts:read'],
    ['POST', '/contacts', 'contacts:write', { phone: newPhone() }],
    ['POST', '/messages', 'messages:write', { connection_id: own.connection, recipient: newPhone(), body: 'x' }],
    ['GET', '/messages', 'messages:read'],
    ['GET', `/messages/${ids.message}`, 'messages:read'],
    ['POST', '/media', 'messages:write', {}],
    ['GET', `/media/${ids.media}`, 'media:read'],
    ['GET', `/media/${ids.media}/download`, 'media:read'],
    ['GET', '/groups', 'groups:read'],
    ['POST', '/groups/sync', 'groups:read'],
    ['POST', `/groups/${ids.group}/messages`, 'groups:send', { body: 'x' }],
    ['GET', '/templates', 'templates:read'],
    ['GET', `/templates/${ids.template}`, 'templates:read'],
    ['GET', `/templates/${ids.template}/preview`, 'templates:read'],
    ['POST', '/templates', 'templates:write', { name: 't', body: 'x' }],
    ['PUT', `/templates/${ids.template}`, 'templates:write', { name: 't2' }],
    ['DELETE', `/templates/${ids.template}`, 'templates:write'],
    ['GET', '/campaigns', 'campaigns:read'],
    ['GET', `/campaigns/${ids.campaign}`, 'campaigns:read'],
    ['GET', `/campaigns/${ids.campaign}/recipients`, 'campaigns:read'],
    ['POST', '/campaigns/audience/preview', 'campaigns:read', {}],
    ['POST', '/campaigns', 'campaigns:write', { name: 'c', template_id: ids.template, connection_id: own.connection }],
    ['PUT', `/campaigns/${ids.campaign}`, 'campaigns:write', { name: 'c2' }],
    ['DELETE', `/campaigns/${ids.campaign}`, 'campaigns:write'],
    ['POST', `/campaigns/${ids.campaign}/schedule`, 'campaigns:send', {}],
    ['POST', `/campaigns/${ids.campaign}/pause`, 'campaigns:send'],
    ['POST', `/campaigns/${ids.campaign}/resume`, 'campaigns:send'],
    ['POST', `/campaigns/${ids.campaign}/cancel`, 'campaigns:send'],
  ]
}

describe('isolation', () => {
  test("another workspace's ids are 404 on every endpoint that takes one, and nothing of B changes", async () => {
    const own = (await srv.admin('GET', `/workspaces/${a.ws.id}/connections`)).json.data[0]
    const ops = operations(other, { connection: own.id }).filter(([, path]) => Object.values(other).some((id) => path.includes(id)))
    expect(ops.length).toBe(16)
    for (const [method, path, , body] of ops) {
      const r = await srv.api(a.key, method, path, body === undefined ? {} : { json: body })
      expect([`${method} ${path}`, r.status, r.json?.code]).toEqual([`${method} ${path}`, 404, 'not_found'])
    }
    const refs: [string, Record<string, unknown>][] = [
      ['/messages', { connection_id: other.connection, recipient: newPhone(), body: 'x' }],
      ['/messages', { connection_id: own.id, contact_id: other.contact, body: 'x' }],
      ['/messages', { connection_id: own.id, recipient: newPhone(), media: { attachments: [{ media_id: other.media }] } }],
      ['/campaigns', { name: 'x', template_id: other.template, connection_id: own.id }],
    ]
    for (const [path, body] of refs) expect((await srv.api(a.key, 'POST', path, { json: body })).status).toBe(404)
    const bKey = (await srv.admin('POST', `/workspaces/${(await srv.admin('GET', `/connections/${other.connection}`)).json.data.workspace_id}/keys`, { name: 'check' })).json.data.key
    expect((await srv.api(bKey, 'GET', `/templates/${other.template}`)).status).toBe(200)
    expect((await srv.api(bKey, 'GET', `/campaigns/${other.campaign}`)).json.data.status).toBe('draft')
  })
})

describe('scopes', () => {
  test('every operation refuses a key that has every scope but its own (403, exact message)', async () => {
    const own = (await srv.admin('GET', `/workspaces/${a.ws.id}/connections`)).json.data[0]
    const keys: Record<string, string> = {}
    for (const scope of ALL) keys[scope] = (await srv.key(a.ws.id, ALL.filter((s) => s !== scope))).key
    const ops = operations(other, { connection: own.id })
    expect(ops).toHaveLength(29)
    for (const [method, path, scope, body] of ops) {
      const r = await srv.api(keys[scope]!, method, path, body === undefined ? {} : { json: body })
      expect([`${method} ${path}`, r.status, r.json?.message]).toEqual([`${method} ${path}`, 403, 'The API key does not have the required scope.'])
    }
  })

  test('a key revoked in the middle of a stream of requests is refused on the very next one', async () => {
    const k = await srv.key(a.ws.id)
    const statuses: number[] = []
    for (let i = 0; i < 40; i++) {
      if (i === 20) expect((await srv.admin('POST', `/keys/${k.id}/revoke`)).status).toBe(200)
      statuses.push((await srv.api(k.key, 'GET', '/workspace')).status)
    }
    expect(statuses).toEqual([...Array(20).fill(200), ...Array(20).fill(401)])
  })
})
