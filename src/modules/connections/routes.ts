/** Admin routes for connected numbers and the sandbox network's test tools (CONTRACT §6). */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { adminOp, d } from '../../http/docs'
import { notFound, refused, validationFailed } from '../../http/errors'
import { validate } from '../../http/schema'
import { SandboxConnection } from '../../network/sandbox'
import type { Services } from '../../services'
import { templateDoc } from '../templates/model'
import { messageDoc } from '../messages/model'
import { connectionDoc, createConnectionBody, patchConnectionBody, sandboxGroupsBody, sandboxInboundBody, sandboxReceiptBody } from './model'

const importDoc = d.object({
  created: d.list(templateDoc),
  updated: d.list(templateDoc),
  existing: d.list(templateDoc),
  skipped: d.list(d.object({ name: d.string(), language: d.string(), reason: d.string() })),
})
const tag = 'Connected numbers'
const sandboxTag = 'Sandbox network'

export function connectionAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const conns = svc.connections
  const sandboxOf = async (id: string) => {
    const c = await conns.obtainAny(id)
    if (!(c.driver instanceof SandboxConnection)) throw refused('not_sandbox', 'This connection is not a sandbox number.')
    return { live: c, driver: c.driver }
  }
  return new Elysia()
    .use(auth)
    .post(
      '/workspaces/:id/connections',
      async ({ params, body, set, operator }) => {
        await svc.workspaces.find(params.id)
        const input = validate(createConnectionBody, body)
        const row = await conns.create(params.id, { ...input, config: (body as Record<string, unknown>).config }, operator)
        set.status = 201
        return { data: conns.toAdmin(await conns.verify(row.id)) }
      },
      { admin: true, detail: adminOp({ summary: 'Connect a number', description: 'Asks its network at once (status says whether it answered).', tag, body: createConnectionBody, bodyExtra: { config: connectionDoc.properties.config }, ok: { status: 201, data: connectionDoc, description: 'Connected.' }, errors: [400, 404, 409, 422] }) },
    )
    .get(
      '/workspaces/:id/connections',
      async ({ params }) => {
        await svc.workspaces.find(params.id)
        return { data: conns.listForWorkspace(params.id).map((c) => conns.toAdmin(c.row)) }
      },
      { admin: true, detail: adminOp({ summary: "A workspace's numbers", tag, ok: { status: 200, data: d.list(connectionDoc), description: 'Every number of the workspace.' }, errors: [404] }) },
    )
    .get('/connections/:id', async ({ params }) => ({ data: conns.toAdmin((await conns.obtainAny(params.id)).row) }), { admin: true, detail: adminOp({ summary: 'A number', tag, ok: { status: 200, data: connectionDoc, description: 'The number.' }, errors: [404] }) })
    .patch(
      '/connections/:id',
      async ({ params, body, operator }) => {
        await conns.obtainAny(params.id)
        const input = validate(patchConnectionBody, body)
        const raw = body as Record<string, unknown>
        await conns.patch(params.id, { ...input, config: raw.config }, operator)
        // ask the network again when the config changed or the number was set online
        const row = raw.config !== undefined || input.status === 'online' ? await conns.verify(params.id) : (await conns.obtainAny(params.id)).row
        return { data: conns.toAdmin(row) }
      },
      { admin: true, detail: adminOp({ summary: 'Change a number', description: 'Name, status, warm-up or config (a new config, or online, asks the network again).', tag, body: patchConnectionBody, bodyExtra: { config: connectionDoc.properties.config }, ok: { status: 200, data: connectionDoc, description: 'The number as stored now.' }, errors: [400, 404, 422] }) },
    )
    .post(
      '/connections/:id/import-templates',
      async ({ params, operator }) => {
        const workspaceId = (await conns.obtainAny(params.id)).row.workspace_id
        const r = await svc.templates.importFrom(workspaceId, params.id, await conns.networkTemplates(params.id), operator)
        const shown = (rows: typeof r.created) => rows.map((row) => svc.templates.toPublic(row))
        return { data: { created: shown(r.created), updated: shown(r.updated), existing: shown(r.existing), skipped: r.skipped } }
      },
      { admin: true, detail: adminOp({ summary: "Import a Cloud API number's approved templates", tag, writes: true, ok: { status: 200, data: importDoc, description: 'What was created, updated, already there, or skipped (and why).' }, errors: [404, 422, 502] }) },
    )
    .delete(
      '/connections/:id',
      async ({ params, set, operator }) => {
        await conns.remove(params.id, (tx) => svc.campaigns.cancelForConnectionIn(tx, params.id), operator)
        // answered once its queue has failed (connection_removed), in batches; a crash meanwhile
        // leaves the rest to the next start (startServices)
        await svc.messages.failQueuedOf(params.id)
        set.status = 204
        return ''
      },
      { admin: true, detail: adminOp({ summary: 'Remove a number', description: 'Its queued messages fail as connection_removed; its campaigns are cancelled.', tag, ok: { status: 204, description: 'Removed.' }, errors: [404] }) },
    )
    .put(
      '/connections/:id/sandbox/groups',
      async ({ params, body }) => {
        const { driver } = await sandboxOf(params.id)
        const input = validate(sandboxGroupsBody, body)
        const ids = new Set<string>()
        for (const g of input.groups) {
          if (ids.has(g.external_id)) throw validationFailed({ groups: ['Each group needs its own external_id.'] })
          ids.add(g.external_id)
        }
        await driver.setGroups(input.groups.map((g) => ({ ...g, announce: g.announce ?? false, admin: g.admin ?? true })))
        return { data: { groups: input.groups.length } }
      },
      { admin: true, detail: adminOp({ summary: "Set a sandbox number's groups", tag: sandboxTag, body: sandboxGroupsBody, ok: { status: 200, data: d.object({ groups: d.integer }), description: 'How many groups it is in now.' }, errors: [400, 404, 422] }) },
    )
    .post(
      '/connections/:id/sandbox/inbound',
      async ({ params, body, set }) => {
        const { live } = await sandboxOf(params.id)
        const input = validate(sandboxInboundBody, body)
        if (live.row.receives !== 1) throw refused('connection_not_receiving', 'This number does not receive messages.')
        // a reply to one of the workspace's messages (as a network reports a quoted reply)
        const replyTo = input.reply_to ? (await svc.messages.get(live.row.workspace_id, input.reply_to.toLowerCase())).id : null
        const file = input.media_id ? await svc.media.copyOf(live.row.workspace_id, input.media_id.toLowerCase()) : undefined
        const row = await svc.messages.inbound(params.id, input.from, input.body, { file, replyTo, senderName: input.name ?? null })
        set.status = 201
        return { data: svc.messages.toPublic(row) }
      },
      { admin: true, detail: adminOp({ summary: 'A simulated customer writes to a sandbox number', tag: sandboxTag, body: sandboxInboundBody, ok: { status: 201, data: messageDoc, description: 'The inbound message.' }, errors: [400, 404, 422] }) },
    )
    .post(
      '/messages/:id/sandbox/receipt',
      async ({ params, body }) => {
        const row = await svc.messages.getAny(params.id)
        if (!row) throw notFound('message')
        const input = validate(sandboxReceiptBody, body)
        await svc.messages.receipt(row.id, input.status as 'delivered' | 'read' | 'failed', input.error)
        return { data: svc.messages.toPublic((await svc.messages.getAny(row.id))!) }
      },
      { admin: true, detail: adminOp({ summary: 'A simulated receipt for a sandbox message', tag: sandboxTag, body: sandboxReceiptBody, ok: { status: 200, data: messageDoc, description: 'The message as it is now.' }, errors: [400, 404, 422] }) },
    )
}
