/**
 * Operations on one workspace's data, stated once and served twice: on the public API for an API
 * key (`/api/v1/templates/:id`, the key's workspace, its scope checked) and on the admin API for
 * operators (`/admin/api/workspaces/:id/templates/:itemId`), which is what the dashboard calls —
 * so whatever the dashboard does with templates or campaigns is also scriptable, with the same
 * rules, the same validation and the same answers.
 */
import { Elysia } from 'elysia'
import type { Scope } from '../modules/keys/model'
import type { Services } from '../services'
import type { authPlugin } from './auth'
import { adminOp, type OpOptions } from './docs'
import { UUID } from './schema'

export interface WorkspaceRequest {
  workspaceId: string
  /** The operation's own path parameters (`id` for `/templates/:id`). */
  params: Record<string, string>
  body: unknown
  query: Record<string, unknown>
  set: { status?: number | string }
}

export interface WorkspaceOp {
  method: 'get' | 'post' | 'put' | 'delete'
  /** Relative to the workspace: `/templates/:id`. */
  path: string
  run(r: WorkspaceRequest): unknown
  /** The public operation's document and scope; the admin one is made from it. */
  doc: OpOptions & { scope: Scope }
}

type Ctx = { params: Record<string, string>; body: unknown; query: Record<string, unknown>; set: { status?: number | string }; caller?: { workspace: { id: string } } }

/** The operations on /api/v1, for an API key of the workspace. */
export function apiOps(auth: ReturnType<typeof authPlugin>, ops: readonly WorkspaceOp[]) {
  let app: any = new Elysia().use(auth)
  for (const op of ops) app = app[op.method](op.path, (c: Ctx) => op.run({ workspaceId: c.caller!.workspace.id, params: c.params, body: c.body, query: c.query, set: c.set }), { api: op.doc })
  return app as Elysia
}

/**
 * The same operations on the admin API, under `/workspaces/:id` (404 for a workspace that does
 * not exist); an operation's own `:id` is `:itemId` there.
 */
export function adminOps(svc: Services, auth: ReturnType<typeof authPlugin>, ops: readonly WorkspaceOp[]) {
  let app: any = new Elysia().use(auth)
  for (const op of ops) {
    const { scope, params: _params, ...doc } = op.doc
    app = app[op.method](
      `/workspaces/:id${op.path.replace(/:id\b/, ':itemId')}`,
      async (c: Ctx) => {
        const ws = await svc.workspaces.find(c.params.id!)
        const { id: _ws, itemId, ...rest } = c.params
        const params = itemId === undefined ? rest : { ...rest, id: UUID.test(itemId) ? itemId.toLowerCase() : itemId }
        return op.run({ workspaceId: ws.id, params, body: c.body, query: c.query, set: c.set })
      },
      { admin: true, detail: adminOp({ ...doc, description: `${doc.description ? `${doc.description} ` : ''}As \`${op.method.toUpperCase()} /api/v1${op.path.replace(/:(\w+)/g, '{$1}')}\` (scope ${scope}), for the workspace in the path.`, errors: [...new Set([...(doc.errors ?? []), 404])] }) },
    )
  }
  return app as Elysia
}
