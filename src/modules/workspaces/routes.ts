/** GET /api/v1/workspace and the admin workspace routes. */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { hidden } from '../../http/docs'
import { paged } from '../../http/format'
import { validate } from '../../http/schema'
import type { Services } from '../../services'
import { createWorkspaceBody, patchWorkspaceBody } from './model'

export const workspaceDoc = {
  type: 'object',
  properties: {
    id: { type: 'string', format: 'uuid' },
    name: { type: 'string' },
    slug: { type: 'string' },
    status: { type: 'string', enum: ['active'] },
  },
}

export function workspaceApiRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  return new Elysia().use(auth).get('/workspace', ({ caller }) => ({ data: svc.workspaces.toPublic(caller.workspace) }), {
    api: { summary: 'The workspace of the API key', tag: 'Workspace', scope: 'contacts:read', ok: { status: 200, data: workspaceDoc, description: 'The workspace.' } },
  })
}

export function workspaceAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const ws = svc.workspaces
  return new Elysia()
    .use(auth)
    .post(
      '/workspaces',
      ({ body, set }) => {
        const input = validate(createWorkspaceBody, body)
        set.status = 201
        return { data: ws.toAdmin(ws.create(input)) }
      },
      { admin: true, detail: hidden },
    )
    .get(
      '/workspaces',
      ({ query }) => {
        return paged(query, (limit, offset) => ws.list(limit, offset), (r) => ws.toAdmin(r))
      },
      { admin: true, detail: hidden },
    )
    .get('/workspaces/:id', ({ params }) => ({ data: ws.toAdmin(ws.get(params.id)) }), { admin: true, detail: hidden })
    .patch(
      '/workspaces/:id',
      ({ params, body }) => {
        ws.get(params.id)
        const input = validate(patchWorkspaceBody, body)
        return { data: ws.toAdmin(ws.patch(params.id, input)) }
      },
      { admin: true, detail: hidden },
    )
}
