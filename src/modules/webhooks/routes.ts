/** Admin routes for webhook endpoints and their delivery history (CONTRACT §5-6). */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { adminOp, d } from '../../http/docs'
import { paged, pageQuery } from '../../http/format'
import { fieldError, s, validate } from '../../http/schema'
import type { Services } from '../../services'
import { deliveryDetailDoc, deliveryDoc, endpointDoc, endpointFullDoc, endpointWithSecretDoc, healthDoc } from './model'
import { EVENT_TYPES, KEEP_PREVIOUS_HOURS, MAX_KEEP_PREVIOUS_HOURS } from './service'

const url = s.string().length(1, 2048).pattern(/^https?:\/\/[^\s/?#]+[^\s]*$/i, 'must be an http or https URL')
const events = s.array(s.string().oneOf(EVENT_TYPES)).max(EVENT_TYPES.length)
const headers = s.metadata(10, 64, 1000).nullable().optional()
const createBody = s.object({ url, events: events.optional(), headers })
const patchBody = s.object({ status: s.string().oneOf(['active', 'disabled'] as const).optional(), url: url.optional(), events: events.optional(), headers })
const recoverBody = s.object({ since: s.string().format('date-time') })
const rotateBody = s.object({ keep_previous_hours: s.integer().range(0, MAX_KEEP_PREVIOUS_HOURS).optional() })
const historyQuery = s.object({ status: s.string().oneOf(['pending', 'delivered', 'failed'] as const).optional().describe('Only deliveries of this status (then meta.total counts up to 10,000).'), ...pageQuery.shape })

const tag = 'Webhooks'

export function webhookAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const hooks = svc.webhooks
  return new Elysia()
    .use(auth)
    .post(
      '/workspaces/:id/webhooks',
      async ({ params, body, set, operator }) => {
        await svc.workspaces.find(params.id)
        const input = validate(createBody, body)
        set.status = 201
        return { data: await hooks.create(params.id, input.url, input.events, input.headers, operator) }
      },
      { admin: true, detail: adminOp({ summary: 'Add a webhook endpoint', description: 'No events listed = all of them. The signing secret is in the answer.', tag, body: createBody, ok: { status: 201, data: endpointWithSecretDoc, description: 'Added.' }, errors: [400, 404, 422] }) },
    )
    .get(
      '/workspaces/:id/webhooks',
      async ({ params }) => {
        await svc.workspaces.find(params.id)
        return { data: (await hooks.endpoints(params.id)).map((e) => hooks.toAdmin(e)) }
      },
      { admin: true, detail: adminOp({ summary: "A workspace's webhook endpoints", tag, ok: { status: 200, data: d.list(endpointDoc), description: 'Every endpoint, without secrets.' }, errors: [404] }) },
    )
    .get('/webhooks/:id', async ({ params }) => ({ data: hooks.toAdmin(await hooks.get(params.id), true) }), { admin: true, detail: adminOp({ summary: 'A webhook endpoint, with its secret and header values', tag, ok: { status: 200, data: endpointFullDoc, description: 'The endpoint.' }, errors: [404] }) })
    .patch(
      '/webhooks/:id',
      async ({ params, body, operator }) => {
        const input = validate(patchBody, body, (v, errors) => {
          if (v.status === undefined && v.url === undefined && v.events === undefined && v.headers === undefined) fieldError(errors, 'status', 'Give at least one of status, url, events or headers.')
        })
        return { data: hooks.toAdmin(await hooks.patch(params.id, input, operator)) }
      },
      { admin: true, detail: adminOp({ summary: 'Change a webhook endpoint', description: 'disabled holds its deliveries; active sends them.', tag, body: patchBody, ok: { status: 200, data: endpointDoc, description: 'The endpoint as stored now.' }, errors: [400, 404, 422] }) },
    )
    // failed deliveries of events since a time go out again
    .post(
      '/webhooks/:id/recover',
      async ({ params, body, set, operator }) => {
        const input = validate(recoverBody, body)
        const requeued = await hooks.recover(params.id, Date.parse(input.since), operator)
        set.status = 202
        return { data: { requeued } }
      },
      { admin: true, detail: adminOp({ summary: 'Send failed deliveries again', description: 'Failed deliveries of events since a time go out again, with their webhook-id.', tag, body: recoverBody, ok: { status: 202, data: d.object({ requeued: d.integer }), description: 'How many were queued again.' }, errors: [400, 404, 409, 422] }) },
    )
    // a new signing secret; the replaced one keeps signing beside it for keep_previous_hours
    .post(
      '/webhooks/:id/rotate-secret',
      async ({ params, body, operator }) => {
        const input = validate(rotateBody, body)
        return { data: await hooks.rotateSecret(params.id, input.keep_previous_hours ?? KEEP_PREVIOUS_HOURS, operator) }
      },
      { admin: true, detail: adminOp({ summary: 'Rotate the signing secret', description: `The replaced secret keeps signing beside the new one for keep_previous_hours (default ${KEEP_PREVIOUS_HOURS}; 0 drops it at once).`, tag, body: rotateBody, ok: { status: 200, data: endpointWithSecretDoc, description: 'The endpoint with its new secret.' }, errors: [400, 404, 422] }) },
    )
    .delete(
      '/webhooks/:id',
      async ({ params, set, operator }) => {
        await hooks.remove(params.id, operator)
        set.status = 204
        return ''
      },
      { admin: true, detail: adminOp({ summary: 'Remove a webhook endpoint', tag, ok: { status: 204, description: 'Removed, with its pending deliveries.' }, errors: [404] }) },
    )
    .get(
      '/webhooks/:id/deliveries',
      async ({ params, query }) => {
        await hooks.get(params.id)
        const { status } = validate(historyQuery, query)
        return paged(query, (limit, offset) => hooks.deliveries(params.id, limit, offset, status), (row) => hooks.deliveryToAdmin(row))
      },
      { admin: true, detail: adminOp({ summary: "An endpoint's deliveries", tag, query: historyQuery, ok: { status: 200, data: deliveryDoc, list: true, description: 'Newest first.' }, errors: [404, 422] }) },
    )
    .get(
      '/webhooks/:id/deliveries/:deliveryId',
      async ({ params }) => {
        await hooks.get(params.id)
        return { data: hooks.deliveryDetail(await hooks.delivery(params.id, params.deliveryId)) }
      },
      { admin: true, detail: adminOp({ summary: 'One delivery, with the event it carries', tag, ok: { status: 200, data: deliveryDetailDoc, description: 'The delivery: its attempts, last answer and payload.' }, errors: [404] }) },
    )
    .post(
      '/webhooks/:id/deliveries/:deliveryId/resend',
      async ({ params, set, operator }) => {
        const row = await hooks.resend(params.id, params.deliveryId, operator)
        set.status = 202
        return { data: hooks.deliveryToAdmin(row) }
      },
      {
        admin: true,
        detail: adminOp({
          summary: 'Send one delivery again',
          description: 'From its first attempt, with the same webhook-id. 409 endpoint_disabled for a disabled endpoint, delivery_pending while it is still being attempted.',
          tag,
          writes: true,
          ok: { status: 202, data: deliveryDoc, description: 'Pending again.' },
          errors: [404, 409],
        }),
      },
    )
    .get(
      '/webhooks/:id/health',
      async ({ params }) => ({ data: await hooks.health(await hooks.get(params.id)) }),
      { admin: true, detail: adminOp({ summary: "How an endpoint has been doing", description: 'From its newest 50 deliveries that were attempted.', tag, ok: { status: 200, data: healthDoc, description: 'Its health.' }, errors: [404] }) },
    )
}
