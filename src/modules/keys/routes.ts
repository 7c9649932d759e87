/** Admin routes for API keys and the audit log (CONTRACT §6). */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { adminOp, d } from '../../http/docs'
import { iso, lookedUpOnce, paged, pageQuery } from '../../http/format'
import { s, validate } from '../../http/schema'
import type { Services } from '../../services'
import { createKeyBody, keyDoc, newKeyDoc } from './model'

const auditDoc = d.object({
  action: d.string('What happened: api_key.created, api_key.revoked, contact.erased, …'),
  key_id: d.nullable(d.uuid),
  key_name: d.nullable(d.string('The name of the API key it is about (null once the key is removed).')),
  subject_id: d.nullable(d.string()),
  subject_name: d.nullable(d.string('What the subject is called: the number, the endpoint URL or the workspace name (null once it is removed).')),
  actor: d.constant('operator', { description: 'Who did it: every entry is an operator’s (the admin token, the dashboard or the CLI); what API keys change is in the consent ledger and the message log.' }),
  via: d.oneOf(['dashboard', 'cli', 'admin_token', null], { description: 'How the operator signed the request: a dashboard session, the admin token from the `capstan` CLI, or the admin token from anything else. Every operator holds the same admin token, so this and `ip` are what tell their changes apart. Null for entries written before Capstan recorded it, and for what Capstan does itself (an erasure applied again after a restore).' }),
  ip: d.nullable(d.string(), { description: 'The address the request came from (the client’s, behind a trusted proxy: CAPSTAN_TRUSTED_PROXIES); null where `via` is.' }),
  at: d.time,
})
const auditQuery = s.object({ action: s.string().length(1, 64).pattern(/^[a-z_]+(\.[a-z_]+)?$/, 'must be an action (webhook.removed) or a kind of action (webhook)').optional().describe('Only this action, or every action of this kind.', 'webhook'), ...pageQuery.shape })
const tag = 'API keys'

export function keyAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const keys = svc.keys
  return new Elysia()
    .use(auth)
    .post(
      '/workspaces/:id/keys',
      async ({ params, body, set, operator }) => {
        await svc.workspaces.find(params.id)
        const input = validate(createKeyBody, body)
        set.status = 201
        return { data: await keys.create(params.id, input, operator) }
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
    .post('/keys/:id/revoke', async ({ params, operator }) => ({ data: keys.toAdmin(await keys.revoke(params.id, operator)) }), { admin: true, detail: adminOp({ summary: 'Revoke an API key', description: 'It answers 401 from the next request on, on every instance.', tag, writes: true, ok: { status: 200, data: keyDoc, description: 'The key, revoked.' }, errors: [404] }) })
    .delete(
      '/keys/:id',
      async ({ params, set, operator }) => {
        await keys.remove(params.id, operator)
        set.status = 204
        return ''
      },
      { admin: true, detail: adminOp({ summary: 'Remove a revoked API key', tag, ok: { status: 204, description: 'Removed.' }, errors: [404, 409] }) },
    )
    .get(
      '/workspaces/:id/audit-log',
      async ({ params, query }) => {
        const ws = await svc.workspaces.find(params.id)
        const { action } = validate(auditQuery, query)
        // names beside the ids, each looked up once a page
        // (a removed one has no name: null)
        const keyName = lookedUpOnce((id) => svc.keys.nameOf(id).catch(() => null))
        const hookUrl = lookedUpOnce((id) => svc.webhooks.get(id).then((h) => h.url, () => null))
        const subjectName = (kind: string, id: string): Promise<string | null> => {
          if (id === ws.id) return Promise.resolve(ws.name)
          if (kind === 'connection' || kind === 'templates') return Promise.resolve(svc.connections.find(id)?.row.phone ?? null)
          if (kind === 'webhook') return hookUrl(id)
          return Promise.resolve(null)
        }
        return paged(
          query,
          (limit, offset) => svc.audit.list(params.id, limit, offset, action),
          async (r) => ({
            action: r.action,
            key_id: r.key_id,
            key_name: r.key_id ? await keyName(r.key_id) : null,
            subject_id: r.subject_id,
            subject_name: r.subject_id ? await subjectName(r.action.split('.')[0]!, r.subject_id) : null,
            actor: 'operator' as const,
            via: r.via,
            ip: r.ip,
            at: iso(r.at),
          }),
        )
      },
      { admin: true, detail: adminOp({ summary: "A workspace's audit log", description: 'Newest first, with the names of what each entry is about; action narrows it to one action or kind (then meta.total counts up to 10,000).', tag, query: auditQuery, ok: { status: 200, data: auditDoc, list: true, description: 'Newest first.' }, errors: [404, 422] }) },
    )
}
