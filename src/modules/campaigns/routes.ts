/** /api/v1/campaigns: CRUD, audience preview, recipients, schedule/pause/resume/cancel. */
import type { authPlugin } from '../../http/auth'
import { notFound } from '../../http/errors'
import { iso, paged, pageQuery } from '../../http/format'
import { fieldError, s, UUID, validate } from '../../http/schema'
import type { Services } from '../../services'
import { apiOps, type WorkspaceOp } from '../../http/workspace-ops'
import { contactDoc } from '../contacts/model'
import { campaignDoc, type PublicRecipient, recipientDoc } from './model'
import { numberedKeys, VARIABLES } from '../templates/model'

const audience = s.object({ metadata: s.metadata(20).optional().describe('Equality filters on contact metadata (value and type must match).', { plan: 'pro' }) }).describe('Contacts whose consent is opted_in, narrowed by metadata filters, minus suppressed numbers.')
const MEDIA_ID = s
  .string()
  .format('uuid')
  .nullable()
  .optional()
  .describe('Media from POST /media sent with every message: an image (JPEG or PNG), a video or a document. With a WhatsApp template it is the template’s media header. Kept past its retention while the campaign is scheduled, running or paused. null removes it.')
const HHMM = /^([01][0-9]|2[0-3]):[0-5][0-9]$/
const sendWindow = s
  .object({
    from: s.string().pattern(HHMM, 'must be a time of day as HH:MM (24 h)').describe('Local time the window opens.', '09:00'),
    to: s.string().pattern(HHMM, 'must be a time of day as HH:MM (24 h)').describe('Local time it closes (earlier than from: over midnight).', '20:00'),
    time_zone: s.string().length(1, 64).describe('IANA time zone the times are in.', 'Europe/Berlin'),
  })
  .nullable()
  .optional()
  .describe('Release messages only between from and to, local time in time_zone, so a campaign that runs for days never messages people at night. null = any time.')
const createBody = s.object({
  name: s.string().length(1, 120),
  template_id: s.string().format('uuid'),
  connection_id: s.string().format('uuid').describe('The connected number that sends it.'),
  audience: audience.optional(),
  variables: VARIABLES.optional(),
  media_id: MEDIA_ID,
  send_window: sendWindow,
  scheduled_at: s.string().format('date-time').nullable().optional().describe('Used by POST /campaigns/{id}/schedule when it is given no time.'),
})
const updateBody = s.object({
  name: s.string().length(1, 120).optional(),
  template_id: s.string().format('uuid').optional(),
  connection_id: s.string().format('uuid').optional(),
  audience: audience.optional(),
  variables: VARIABLES.optional(),
  media_id: MEDIA_ID,
  send_window: sendWindow,
  scheduled_at: s.string().format('date-time').nullable().optional(),
})
const scheduleBody = s.object({
  at: s.string().format('date-time').nullable().optional().describe('When to start; omitted (and no scheduled_at on the campaign) or in the past = now.'),
  scheduled_at: s.string().format('date-time').nullable().optional().describe('The same as at (the campaign field’s name).'),
})
const previewBody = s.object({ audience: audience.optional() })

/** The campaign operations, on the public API and (for the dashboard) the admin API: see workspace-ops. */
export function campaignOps(svc: Services): WorkspaceOp[] {
  const campaigns = svc.campaigns
  const find = (ws: string, id: string) => {
    if (!UUID.test(id)) throw notFound('campaign')
    return campaigns.get(ws, id)
  }
  const action = (name: 'pause' | 'resume' | 'cancel', summary: string, description: string): WorkspaceOp => ({
    method: 'post',
    path: `/campaigns/:id/${name}`,
    run: async ({ workspaceId, params }) => {
      await find(workspaceId, params.id!)
      return { data: await campaigns.toPublic(await campaigns[name](workspaceId, params.id!)) }
    },
    doc: { summary, description, tag: 'Campaigns', scope: 'campaigns:send', params: ['id'], ok: { status: 200, data: campaignDoc, description: 'The campaign.' }, errors: name === 'resume' ? [404, 409, 422] : [404, 409] },
  })
  return [
    {
      method: 'get',
      path: '/campaigns',
      run: ({ workspaceId, query }) => paged(query, (l, o) => campaigns.list(workspaceId, l, o), (c) => campaigns.toPublic(c)),
      doc: { summary: 'List campaigns', description: 'Newest first, each with live counts.', tag: 'Campaigns', scope: 'campaigns:read', query: pageQuery, ok: { status: 200, data: campaignDoc, list: true, description: 'A page of campaigns.' }, errors: [422] },
    },
    {
      method: 'post',
      path: '/campaigns/audience/preview',
      run: async ({ workspaceId, body }) => {
        const input = validate(previewBody, body ?? {})
        const { count, rows } = await campaigns.preview(workspaceId, input.audience ?? {}, 10)
        return { data: { count, sample: (rows as any[]).map((r) => svc.contacts.toPublic(r)) } }
      },
      doc: {
        summary: 'Preview an audience',
        description: 'How many contacts the audience holds now (opted in, not suppressed, metadata filters) and up to 10 of them. Creates nothing.',
        tag: 'Campaigns',
        scope: 'campaigns:read',
        body: previewBody,
        ok: { status: 200, data: { type: 'object', properties: { count: { type: 'integer' }, sample: { type: 'array', items: contactDoc } } }, description: 'Count and sample.' },
        errors: [400, 422],
      },
    },
    {
      method: 'get',
      path: '/campaigns/:id',
      run: async ({ workspaceId, params }) => ({ data: await campaigns.toPublic(await find(workspaceId, params.id!)) }),
      doc: { summary: 'One campaign', description: 'With live counts.', tag: 'Campaigns', scope: 'campaigns:read', params: ['id'], ok: { status: 200, data: campaignDoc, description: 'The campaign.' }, errors: [404] },
    },
    {
      method: 'get',
      path: '/campaigns/:id/recipients',
      run: async ({ workspaceId, params, query }) => {
        await find(workspaceId, params.id!)
        return paged(query, (l, o) => campaigns.recipients(params.id!, l, o), (r): PublicRecipient => ({
          contact_id: r.contact_id,
          phone: r.phone,
          status: r.status === 'released' ? (r.message_status ?? 'queued') : r.status,
          message_id: r.message_id,
          skipped_reason: r.skipped_reason,
          updated_at: iso(r.updated_at),
        }))
      },
      doc: { summary: 'Recipients of a campaign', description: 'Frozen when the campaign started; each with its message status.', tag: 'Campaigns', scope: 'campaigns:read', params: ['id'], query: pageQuery, ok: { status: 200, data: recipientDoc, list: true, description: 'A page of recipients.' }, errors: [404, 422] },
    },
    {
      method: 'post',
      path: '/campaigns',
      run: async ({ workspaceId, body, set }) => {
        const input = validate(createBody, body, numberedKeys)
        set.status = 201
        return { data: await campaigns.toPublic(await campaigns.create(workspaceId, input)) }
      },
      doc: { summary: 'Create a campaign', description: 'Created as draft. Schedule it with POST /campaigns/{id}/schedule (campaigns:send).', tag: 'Campaigns', scope: 'campaigns:write', body: createBody, ok: { status: 201, data: campaignDoc, description: 'Created.' }, errors: [400, 404, 422] },
    },
    {
      method: 'put',
      path: '/campaigns/:id',
      run: async ({ workspaceId, params, body }) => {
        await find(workspaceId, params.id!)
        const input = validate(updateBody, body, (v, errors) => {
          if (Object.values(v).every((x) => x === undefined)) fieldError(errors, 'name', 'Give at least one field to change.')
          numberedKeys(v, errors)
        })
        return { data: await campaigns.toPublic(await campaigns.update(workspaceId, params.id!, input)) }
      },
      doc: { summary: 'Update a campaign', description: 'Only while draft or scheduled (else 409 invalid_campaign_state); changes the fields given.', tag: 'Campaigns', scope: 'campaigns:write', params: ['id'], body: updateBody, ok: { status: 200, data: campaignDoc, description: 'Updated.' }, errors: [400, 404, 409, 422] },
    },
    {
      method: 'delete',
      path: '/campaigns/:id',
      run: async ({ workspaceId, params, set }) => {
        await find(workspaceId, params.id!)
        await campaigns.remove(workspaceId, params.id!)
        set.status = 204
        return ''
      },
      doc: { summary: 'Delete a campaign', description: 'Not while running (409). An unfinished campaign is cancelled first.', tag: 'Campaigns', scope: 'campaigns:write', params: ['id'], ok: { status: 204, description: 'Deleted.' }, errors: [404, 409] },
    },
    {
      method: 'post',
      path: '/campaigns/:id/schedule',
      run: async ({ workspaceId, params, body }) => {
        await find(workspaceId, params.id!)
        const input = validate(scheduleBody, body ?? {})
        return { data: await campaigns.toPublic(await campaigns.schedule(workspaceId, params.id!, input.at ?? input.scheduled_at)) }
      },
      doc: {
        summary: 'Schedule or start a campaign',
        description: 'From draft (or to move a scheduled one). At the time it starts, the audience is frozen (in slices, with other requests served between; a start now answers once it is all frozen, or after 20 s with the freeze going on) and each recipient becomes one paced message on the campaign’s number, re-checked for consent when released. Each message counts against the monthly allowance; when it is used up the campaign pauses (nobody is skipped). 422 when numbered placeholders lack values, or (allowance_exhausted) when starting now with the allowance used up.',
        tag: 'Campaigns',
        scope: 'campaigns:send',
        params: ['id'],
        body: scheduleBody,
        ok: { status: 200, data: campaignDoc, description: 'Scheduled or running.' },
        errors: [400, 404, 409, 422],
      },
    },
    action('pause', 'Pause a running campaign', 'Stops releasing its recipients within one pacing tick. 409 (invalid_campaign_state) unless running.'),
    action('resume', 'Resume a paused campaign', '409 unless paused; 422 (allowance_exhausted) while the workspace’s monthly message allowance is used up.'),
    action('cancel', 'Cancel a campaign', 'From draft, scheduled, running or paused. Nothing already sent is touched; nothing more is released (pending recipients become skipped, reason cancelled).'),
  ]
}

export function campaignApiRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  return apiOps(auth, campaignOps(svc))
}
