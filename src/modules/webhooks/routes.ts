/** Admin routes for webhook endpoints and their delivery history (CONTRACT §5-6). */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { hidden } from '../../http/docs'
import { paged } from '../../http/format'
import { fieldError, s, validate } from '../../http/schema'
import type { Services } from '../../services'
import { EVENT_TYPES, KEEP_PREVIOUS_HOURS, MAX_KEEP_PREVIOUS_HOURS } from './service'

const url = s.string().length(1, 2048).pattern(/^https?:\/\/[^\s/?#]+[^\s]*$/i, 'must be an http or https URL')
const events = s.array(s.string().oneOf(EVENT_TYPES)).max(EVENT_TYPES.length)
const headers = s.metadata(10, 64, 1000).nullable().optional()
const createBody = s.object({ url, events: events.optional(), headers })
const patchBody = s.object({ status: s.string().oneOf(['active', 'disabled'] as const).optional(), url: url.optional(), events: events.optional(), headers })
const recoverBody = s.object({ since: s.string().format('date-time') })
const rotateBody = s.object({ keep_previous_hours: s.integer().range(0, MAX_KEEP_PREVIOUS_HOURS).optional() })

export function webhookAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const hooks = svc.webhooks
  return new Elysia()
    .use(auth)
    .post(
      '/workspaces/:id/webhooks',
      ({ params, body, set }) => {
        svc.workspaces.get(params.id)
        const input = validate(createBody, body)
        set.status = 201
        return { data: hooks.create(params.id, input.url, input.events, input.headers) }
      },
      { admin: true, detail: hidden },
    )
    .get(
      '/workspaces/:id/webhooks',
      ({ params }) => {
        svc.workspaces.get(params.id)
        return { data: hooks.repo.endpoints(params.id).map((e) => hooks.toAdmin(e)) }
      },
      { admin: true, detail: hidden },
    )
    .get('/webhooks/:id', ({ params }) => ({ data: hooks.toAdmin(hooks.get(params.id), true) }), { admin: true, detail: hidden })
    .patch(
      '/webhooks/:id',
      ({ params, body }) => {
        const input = validate(patchBody, body, (v, errors) => {
          if (v.status === undefined && v.url === undefined && v.events === undefined && v.headers === undefined) fieldError(errors, 'status', 'Give at least one of status, url, events or headers.')
        })
        return { data: hooks.toAdmin(hooks.patch(params.id, input)) }
      },
      { admin: true, detail: hidden },
    )
    // failed deliveries of events since a time go out again
    .post(
      '/webhooks/:id/recover',
      async ({ params, body, set }) => {
        const input = validate(recoverBody, body)
        const requeued = await hooks.recover(params.id, Date.parse(input.since))
        set.status = 202
        return { data: { requeued } }
      },
      { admin: true, detail: hidden },
    )
    // a new signing secret; the replaced one keeps signing beside it for keep_previous_hours
    .post(
      '/webhooks/:id/rotate-secret',
      ({ params, body }) => {
        const input = validate(rotateBody, body)
        return { data: hooks.rotateSecret(params.id, input.keep_previous_hours ?? KEEP_PREVIOUS_HOURS) }
      },
      { admin: true, detail: hidden },
    )
    .delete(
      '/webhooks/:id',
      ({ params, set }) => {
        hooks.remove(params.id)
        set.status = 204
        return ''
      },
      { admin: true, detail: hidden },
    )
    .get(
      '/webhooks/:id/deliveries',
      ({ params, query }) => {
        hooks.get(params.id)
        return paged(query, (limit, offset) => hooks.repo.deliveries(params.id, limit, offset), (d) => hooks.deliveryToAdmin(d))
      },
      { admin: true, detail: hidden },
    )
}
