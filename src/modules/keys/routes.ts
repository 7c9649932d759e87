/** Admin routes for API keys and the audit log (CONTRACT §6). */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { adminOp, d } from '../../http/docs'
import { iso, paged, pageQuery } from '../../http/format'
import { validate } from '../../http/schema'
import type { Services } from '../../services'
import { createKeyBody, keyDoc, newKeyDoc } from './model'

const auditDoc = d.object({ action: d.string('What happened: api_key.created, api_key.revoked, contact.erased, …'), key_id: d.nullable(d.uuid), subject_id: d.nullable(d.string()), at: d.time })
const tag = 'API keys'

export function keyAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const keys = svc.keys
  return new Elysia()
    .use(auth)
    .post(
      '/workspaces/:id/keys',
      async ({ params, body, set }) => {
        await svc.workspaces.find(params.id)
        const input = validate(createKeyBody, body)
        set.status = 201
        return { data: await keys.create(params.id, input) }
      },
      { admin: true, detail: adminOp({ summary: 'Create an API key', tag, body: createKeyBody, ok: { status: 201, data: newKeyDoc, description: 'Created; `key` is shown this once.' }, errors: [400, 404, 422] }) },
    )
    .get(
      '/workspaces/:id/keys',
      async ({ params }) => {
        await svc.workspaces.find(params.id)
        return { data: (await keys.listForWorkspace(params.id)).map((r) => keys.toAdmin(r)) }
      },
      { admin: true, detail: adminOp({ summary: "A workspace's API keys", tag, ok: { status: 200, data: d.list(keyDoc), description: 'Every key of the workspace, revoked ones included.' }, errors: [404] }) },
    )
    .post('/keys/:id/revoke', async ({ params }) => ({ data: keys.toAdmin(await keys.revoke(params.id)) }), { admin: true, detail: adminOp({ summary: 'Revoke an API key', description: 'It answers 401 from the next request on, on every instance.', tag, writes: true, ok: { status: 200, data: keyDoc, description: 'The key, revoked.' }, errors: [404] }) })
    .delete(
      '/keys/:id',
      async ({ params, set }) => {
        await keys.remove(params.id)
        set.status = 204
        return ''
      },
      { admin: true, detail: adminOp({ summary: 'Remove a revoked API key', tag, ok: { status: 204, description: 'Removed.' }, errors: [404, 409] }) },
    )
    .get(
      '/workspaces/:id/audit-log',
      async ({ params, query }) => {
        await svc.workspaces.find(params.id)
        return paged(query, (limit, offset) => svc.audit.list(params.id, limit, offset), (r) => ({ action: r.action, key_id: r.key_id, subject_id: r.subject_id, at: iso(r.at) }))
      },
      { admin: true, detail: adminOp({ summary: "A workspace's audit log", tag, query: pageQuery, ok: { status: 200, data: auditDoc, list: true, description: 'Newest first.' }, errors: [404, 422] }) },
    )
}
