/** Admin routes for API keys and the audit log (CONTRACT §6). */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { hidden } from '../../http/docs'
import { iso, paged } from '../../http/format'
import { validate } from '../../http/schema'
import type { Services } from '../../services'
import { createKeyBody } from './model'

export function keyAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const keys = svc.keys
  return new Elysia()
    .use(auth)
    .post(
      '/workspaces/:id/keys',
      ({ params, body, set }) => {
        svc.workspaces.get(params.id)
        const input = validate(createKeyBody, body)
        set.status = 201
        return { data: keys.create(params.id, input) }
      },
      { admin: true, detail: hidden },
    )
    .get(
      '/workspaces/:id/keys',
      ({ params }) => {
        svc.workspaces.get(params.id)
        return { data: keys.repo.listForWorkspace(params.id).map((r) => keys.toAdmin(r)) }
      },
      { admin: true, detail: hidden },
    )
    .post('/keys/:id/revoke', ({ params }) => ({ data: keys.toAdmin(keys.revoke(params.id)) }), { admin: true, detail: hidden })
    .delete(
      '/keys/:id',
      ({ params, set }) => {
        keys.remove(params.id)
        set.status = 204
        return ''
      },
      { admin: true, detail: hidden },
    )
    .get(
      '/workspaces/:id/audit-log',
      ({ params, query }) => {
        svc.workspaces.get(params.id)
        return paged(query, (limit, offset) => svc.audit.list(params.id, limit, offset), (r) => ({ action: r.action, key_id: r.key_id, subject_id: r.subject_id, at: iso(r.at) }))
      },
      { admin: true, detail: hidden },
    )
}
