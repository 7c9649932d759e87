/**
 * Admin API views the dashboard needs beyond CONTRACT §6: a live per-number view of the queue
 * against the caps, the message log and campaigns of a workspace, messages per day, and a test
 * event for a webhook endpoint.
 */
import { Elysia } from 'elysia'
import type { authPlugin } from '../http/auth'
import { adminOp, d } from '../http/docs'
import { conflict, notFound } from '../http/errors'
import { iso, lookedUpOnce, pageQuery, paged } from '../http/format'
import { s, UUID, validate } from '../http/schema'
import { listContactsQuery, phoneField, queryPhone } from '../modules/contacts/model'
import { campaignDoc } from '../modules/campaigns/model'
import { contactDoc } from '../modules/contacts/model'
import { contactsPage } from '../modules/contacts/routes'
import { downloadResponse } from '../modules/media/routes'
import { messageDoc, STATUSES } from '../modules/messages/model'
import { groupDoc, syncDoc } from '../modules/groups/model'
import { mediaDoc } from '../modules/media/model'
import type { Services } from '../services'

const HOUR = 3_600_000
const DAY = 86_400_000

const logQuery = s.object({
  direction: s.string().oneOf(['inbound', 'outbound']).optional(),
  status: s.string().oneOf(STATUSES).optional(),
  // one contact's conversation, by its number
  phone: phoneField().optional(),
  q: s.string().length(1, 200).optional().describe('Text the body contains (any case).', 'order'),
  from: s.string().format('date-time').optional().describe('Only messages created at or after this time.'),
  to: s.string().format('date-time').optional().describe('Only messages created before this time.'),
  ...pageQuery.shape,
})

/** A message as the dashboard lists it: as the API has it, with its number, its contact's name and its campaign. */
const logRowDoc = d.object({
  ...messageDoc.properties,
  number: d.nullable(d.string('The connected number it went through (E.164); null once that number is removed.')),
  contact_name: d.nullable(d.string()),
  campaign: d.nullable(d.object({ id: d.uuid, name: d.string() }), { description: 'The campaign that sent it, or null.' }),
})
const daysQuery = s.object({ days: s.integer().range(1, 90).optional() })
const contactsQuery = s.object({
  ...listContactsQuery.shape,
  search: s.string().length(1, 100).optional().describe('Contacts whose name contains this (any case).', 'ada'),
  consent: s.string().oneOf(['unknown', 'opted_in', 'opted_out']).optional().describe('Contacts of this consent only.'),
})
const groupsQuery = s.object({ search: s.string().length(0, 200).optional().describe('Case-insensitive match on the group name.'), ...pageQuery.shape })
/** A file as the operators' list has it: its record, and what the scanner said of it. */
const mediaRowDoc = d.object({ ...mediaDoc.properties, scan: d.constant('clean', { description: 'Every file stored passed the malware scan (one that did not was refused and never stored).' }), expired: d.boolean })

const liveDoc = d.object({
  id: d.uuid,
  phone: d.string('E.164'),
  name: d.nullable(d.string()),
  status: d.oneOf(['online', 'offline']),
  queue_depth: { ...d.integer, description: 'Queued messages and pending campaign recipients.' },
  sent_last_hour: d.integer,
  sent_last_day: d.integer,
  hourly_cap: d.integer,
  daily_cap: d.integer,
  warming_up: d.boolean,
  next_release_at: d.nullable(d.time),
  status_reason: d.nullable(d.string('Why it is offline, in the words of its network or operator.')),
  failed_last_day: { ...d.integer, description: 'Its sends of the last 24 hours that failed.' },
  last_failure: d.nullable(d.object({ code: d.string(), message: d.string(), at: d.time }), { description: 'The newest of those, with its code and words.' }),
})
const dayDoc = d.object({ day: d.string('YYYY-MM-DD (UTC)'), sent: d.integer, delivered: d.integer, read: d.integer, failed: d.integer, received: { ...d.integer, description: 'Messages received that day.' } })
const tag = 'Dashboard views'

export function dashboardAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  return new Elysia()
    .use(auth)
    .get(
      '/workspaces/:id/numbers/live',
      async ({ params }) => {
        const ws = await svc.workspaces.find(params.id)
        const workspacePolicy = svc.workspaces.settings(ws).sending_policy
        const now = svc.deps.clock.now()
        return {
          data: await Promise.all(svc.connections.listForWorkspace(ws.id).map(async (c) => {
            const policy = svc.connections.policyFor(c.row, workspacePolicy, now)
            const [releases, queued, pending, failures] = await Promise.all([svc.messages.releasesSince(c.row.id, now - DAY), svc.messages.queuedCount(c.row.id), svc.campaigns.pendingFor(c.row.id), svc.messages.failuresSince(c.row.id, now - DAY)])
            const depth = queued + pending
            return {
              id: c.row.id,
              phone: c.row.phone,
              name: c.row.name,
              status: c.row.status,
              queue_depth: depth,
              sent_last_hour: releases.filter((t) => t > now - HOUR).length,
              sent_last_day: releases.length,
              hourly_cap: policy.hourly_cap,
              daily_cap: policy.daily_cap,
              warming_up: policy !== workspacePolicy,
              next_release_at: depth > 0 && c.row.status === 'online' ? iso(await svc.pacer.nextReleaseAt(c.row.id, policy)) : null,
              status_reason: c.row.status_reason,
              failed_last_day: failures.count,
              last_failure: failures.last ? { code: failures.last.error_code ?? 'failed', message: failures.last.error_message ?? '', at: iso(failures.last.failed_at ?? now)! } : null,
            }
          })),
        }
      },
      { admin: true, detail: adminOp({ summary: 'Each number now: queue against its caps', tag, ok: { status: 200, data: d.list(liveDoc), description: 'One row per number of the workspace.' }, errors: [404] }) },
    )
    .get(
      '/workspaces/:id/messages',
      async ({ params, query }) => {
        await svc.workspaces.find(params.id)
        const q = validate(logQuery, { ...query, phone: queryPhone(query.phone) })
        const contactId = q.phone === undefined ? undefined : (await svc.contacts.byNumber(params.id, q.phone)).id
        const filter = { direction: q.direction, status: q.status, contactId }
        const searching = q.q !== undefined || q.from !== undefined || q.to !== undefined
        const search = { ...filter, text: q.q, from: q.from === undefined ? undefined : Date.parse(q.from), to: q.to === undefined ? undefined : Date.parse(q.to) }
        // each contact's name and each campaign's name once per page
        const contactName = lookedUpOnce(async (id) => (await svc.contacts.find(params.id, id))?.name ?? null)
        const campaign = lookedUpOnce(async (id) => {
          const c = await svc.campaigns.find(params.id, id)
          return c ? { id: c.id, name: c.name } : null
        })
        return paged(
          query,
          (l, o) => (searching ? svc.messages.search(params.id, search, l, o) : svc.messages.list(params.id, filter, l, o)),
          async (m) => ({
            ...svc.messages.toPublic(m),
            number: svc.connections.find(m.connection_id)?.row.phone ?? null,
            contact_name: m.contact_id ? await contactName(m.contact_id) : null,
            campaign: m.campaign_id ? await campaign(m.campaign_id) : null,
          }),
        )
      },
      {
        admin: true,
        detail: adminOp({
          summary: "A workspace's message log",
          description: "Newest first; phone narrows it to one contact's conversation, q to messages whose body contains the text, from and to to a time range. With q, from or to, meta.total counts at most 10,000 (as deep as a list can be paged).",
          tag,
          query: logQuery,
          ok: { status: 200, data: logRowDoc, list: true, description: 'A page of messages, each with its number, its contact\'s name and its campaign.' },
          errors: [404, 422],
        }),
      },
    )
    .get(
      '/workspaces/:id/contacts',
      async ({ params, query }) => {
        await svc.workspaces.find(params.id)
        const q = validate(contactsQuery, { ...query, phone: queryPhone(query.phone) })
        if (q.phone !== undefined || (q.search === undefined && q.consent === undefined)) return contactsPage(svc, params.id, query)
        return paged(query, (l, o) => svc.contacts.search(params.id, { name: q.search, consent: q.consent }, l, o), (r) => svc.contacts.toPublic(r))
      },
      {
        admin: true,
        detail: adminOp({
          summary: "A workspace's contacts",
          description: 'As GET /api/v1/contacts, and found by name (search) and/or consent; then meta.total counts up to 10,000.',
          tag,
          query: contactsQuery,
          ok: { status: 200, data: contactDoc, list: true, description: 'A page of contacts, as GET /api/v1/contacts.' },
          errors: [404, 422],
        }),
      },
    )
    // a file of the message log (what a customer sent, or what was sent to them), for the dashboard
    .get(
      '/workspaces/:id/media/:mediaId/download',
      async ({ params, request }) => {
        await svc.workspaces.find(params.id)
        if (!UUID.test(params.mediaId)) throw notFound('media')
        return downloadResponse(svc, await svc.media.get(params.id, params.mediaId.toLowerCase()), request.headers.get('range'))
      },
      { admin: true, detail: adminOp({ summary: 'A file of the message log', tag, ok: { status: 200, binary: true, description: 'The file, in its own type, as an attachment.' }, alsoOk: [{ status: 206, description: 'The part a Range header asked for.' }], errors: [404, 416] }) },
    )
    .get(
      '/workspaces/:id/groups',
      async ({ params, query }) => {
        await svc.workspaces.find(params.id)
        const q = validate(groupsQuery, query)
        return paged(query, (l, o) => svc.groups.list(params.id, q.search || null, l, o), (g) => svc.groups.toPublic(g))
      },
      { admin: true, detail: adminOp({ summary: "A workspace's groups", description: 'As GET /api/v1/groups: largest first; search matches the name.', tag, query: groupsQuery, ok: { status: 200, data: groupDoc, list: true, description: 'A page of groups.' }, errors: [404, 422] }) },
    )
    .post(
      '/workspaces/:id/groups/sync',
      async ({ params }) => {
        await svc.workspaces.find(params.id)
        return { data: { numbers: await svc.groups.sync(params.id) } }
      },
      { admin: true, detail: adminOp({ summary: "Re-read the groups of a workspace's numbers", description: 'As POST /api/v1/groups/sync: one outcome per number.', tag, writes: true, ok: { status: 200, data: syncDoc, description: 'One entry per number.' }, errors: [404] }) },
    )
    .get(
      '/workspaces/:id/media',
      async ({ params, query }) => {
        await svc.workspaces.find(params.id)
        const now = svc.deps.clock.now()
        return paged(query, (l, o) => svc.media.list(params.id, l, o), (m) => ({ ...svc.media.toPublic(m), scan: 'clean' as const, expired: m.expires_at <= now }))
      },
      { admin: true, detail: adminOp({ summary: "A workspace's media", description: 'Newest first; meta.total counts up to 10,000.', tag, query: pageQuery, ok: { status: 200, data: mediaRowDoc, list: true, description: 'A page of files.' }, errors: [404, 422] }) },
    )
    .get(
      '/workspaces/:id/stats/daily',
      async ({ params, query }) => {
        await svc.workspaces.find(params.id)
        const days = validate(daysQuery, query).days ?? 14
        const today = Math.floor(svc.deps.clock.now() / DAY) * DAY
        const since = today - (days - 1) * DAY
        const rows = new Map<string, { day: string; sent: number; delivered: number; read: number; failed: number; received: number }>()
        for (let d = since; d <= today; d += DAY) {
          const day = new Date(d).toISOString().slice(0, 10)
          rows.set(day, { day, sent: 0, delivered: 0, read: 0, failed: 0, received: 0 })
        }
        for (const [step, counts] of Object.entries(await svc.messages.perDay(params.id, since))) for (const r of counts) if (rows.has(r.day)) rows.get(r.day)![step as 'sent'] = r.n
        return { data: [...rows.values()] }
      },
      { admin: true, detail: adminOp({ summary: 'Outbound messages per day', tag, query: daysQuery, ok: { status: 200, data: d.list(dayDoc), description: 'The last `days` days (default 14), oldest first, by when each step happened.' }, errors: [404, 422] }) },
    )
    .post(
      '/webhooks/:id/test',
      async ({ params, set }) => {
        const hook = await svc.webhooks.get(params.id)
        // a disabled endpoint would hold the test until it is enabled: say so instead
        if (hook.status !== 'active') throw conflict('endpoint_disabled', 'The endpoint is disabled; enable it to send a test event.')
        const id = await svc.webhooks.sendTest(hook)
        set.status = 202
        return { data: { id, type: 'webhook.test' } }
      },
      { admin: true, detail: adminOp({ summary: 'Send a test event to a webhook endpoint', tag, writes: true, ok: { status: 202, data: d.object({ id: d.string('The webhook-id of the test event.'), type: d.constant('webhook.test') }), description: 'Queued for delivery.' }, errors: [404, 409] }) },
    )
}
