/** GET /api/v1/groups, POST /api/v1/groups/sync, POST /api/v1/groups/{id}/messages. */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { notFound } from '../../http/errors'
import { paged } from '../../http/format'
import { fieldError, s, UUID, validate } from '../../http/schema'
import type { Services } from '../../services'
import type { MessageRow } from '../messages/store'
import { messageDoc } from '../messages/model'
import { groupDoc, syncDoc } from './model'

const listQuery = s.object({
  search: s.string().length(0, 200).optional().describe('Case-insensitive match on the group name.'),
  page: s.integer().range(1, 1_000_000).optional(),
  per_page: s.integer().range(1, 100).optional(),
})

const sendBody = s.object({
  body: s.string().length(1, 4096).describe('Text, up to 4096 characters (Unicode code points). Group messages are text only.'),
})

export function groupApiRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const groups = svc.groups
  return new Elysia()
    .use(auth)
    .get(
      '/groups',
      ({ caller, query }) => {
        const q = validate(listQuery, query)
        return paged(query, (limit, offset) => groups.list(caller.workspace.id, q.search || null, limit, offset), (g) => groups.toPublic(g))
      },
      {
        api: { summary: 'List groups', description: 'The mirror of the groups the connected numbers belong to, largest first.', tag: 'Groups', scope: 'groups:read', query: listQuery, ok: { status: 200, data: groupDoc, list: true, description: 'A page of groups.' }, errors: [422] },
      },
    )
    .post('/groups/sync', async ({ caller }) => ({ data: { numbers: await groups.sync(caller.workspace.id) } }), {
      api: {
        summary: 'Re-read the groups of every connected number',
        description: 'Each number is read independently: an offline or failing number reports failed and keeps its previous mirror; a network that cannot list groups reports unsupported. Groups a number has left are removed together with the messages sent to them. Idempotent by nature.',
        tag: 'Groups',
        scope: 'groups:read',
        ok: { status: 200, data: syncDoc, description: 'One entry per number.' },
      },
    })
    .post(
      '/groups/:id/messages',
      async ({ caller, params, body, request, set }) => {
        const raw = (body ?? {}) as Record<string, unknown>
        const input = validate(sendBody, raw, (_v, errors) => {
          if (raw.file !== undefined) fieldError(errors, 'file', 'Group messages are text only.')
          if (raw.media !== undefined) fieldError(errors, 'media', 'Group messages are text only.')
        })
        if (!UUID.test(params.id)) throw notFound('group')
        return svc.idempotency.send202<MessageRow>(
          { apiKeyId: caller.key.id, method: 'POST', path: `/api/v1/groups/${params.id}/messages`, header: request.headers.get('idempotency-key'), body: raw },
          set,
          (inTx) => groups.send(caller.workspace.id, params.id, input.body, inTx),
          (row) => svc.messages.toPublic(row),
        )
      },
      {
        api: {
          summary: 'Post a text message into a group',
          description:
            'Queued on the paced queue of the number that is in the group. Refused with 422 before anything is queued when the group lets only admins post and the number is not one (group_admin_only), or the number is not connected (group_number_disconnected). The final status of a group message is sent: no delivered or read is ever reported. Counts as one message of the allowance.',
          tag: 'Groups',
          scope: 'groups:send',
          params: ['id'],
          body: sendBody,
          idempotent: true,
          ok: { status: 202, data: messageDoc, description: 'Queued.' },
          errors: [400, 404, 409, 413, 422],
        },
      },
    )
}
