/** GET /api/v1/workspace and the admin workspace routes. */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { adminOp, d } from '../../http/docs'
import { paged, pageQuery } from '../../http/format'
import { validate } from '../../http/schema'
import type { Services } from '../../services'
import { createWorkspaceBody, patchWorkspaceBody, workspaceAdminDoc, workspaceDoc } from './model'

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
      async ({ body, set }) => {
        const input = validate(createWorkspaceBody, body)
        set.status = 201
        return { data: ws.toAdmin(await ws.create(input)) }
      },
      { admin: true, detail: adminOp({ summary: 'Create a workspace', tag: 'Workspaces', body: createWorkspaceBody, ok: { status: 201, data: workspaceAdminDoc, description: 'Created, with the default settings.' }, errors: [400, 409, 422] }) },
    )
    .get(
      '/workspaces',
      ({ query }) => {
        return paged(query, (limit, offset) => ws.list(limit, offset), (r) => ws.toAdmin(r))
      },
      { admin: true, detail: adminOp({ summary: 'List workspaces', tag: 'Workspaces', query: pageQuery, ok: { status: 200, data: workspaceAdminDoc, list: true, description: 'A page of workspaces.' }, errors: [422] }) },
    )
    .get('/workspaces/:id', async ({ params }) => ({ data: ws.toAdmin(await ws.find(params.id)) }), { admin: true, detail: adminOp({ summary: 'A workspace', tag: 'Workspaces', ok: { status: 200, data: workspaceAdminDoc, description: 'The workspace.' }, errors: [404] }) })
    .patch(
      '/workspaces/:id',
      async ({ params, body, operator }) => {
        await ws.find(params.id)
        const input = validate(patchWorkspaceBody, body)
        return { data: ws.toAdmin(await ws.patch(params.id, input, operator)) }
      },
      { admin: true, detail: adminOp({ summary: 'Change a workspace', description: 'Name, status (inactive: its keys get 403) and settings; a settings object replaces only the fields it names.', tag: 'Workspaces', body: patchWorkspaceBody, ok: { status: 200, data: workspaceAdminDoc, description: 'The workspace as stored now.' }, errors: [400, 404, 422] }) },
    )
}
