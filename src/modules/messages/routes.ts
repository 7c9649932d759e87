/** POST /api/v1/messages, GET /api/v1/messages, GET /api/v1/messages/{id}. */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { notFound } from '../../http/errors'
import { paged } from '../../http/format'
import { fieldError, UUID, validate } from '../../http/schema'
import type { Services } from '../../services'
import type { MessageRow } from './store'
import { numberedKeys } from '../templates/model'
import { listMessagesQuery, MAX_ATTACHMENTS, messageDoc, sendMessageBody } from './model'

export function messageApiRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const messages = svc.messages
  return new Elysia()
    .use(auth)
    .post(
      '/messages',
      async ({ caller, body, request, set }) => {
        const raw = body as Record<string, unknown>
        // an empty body field from a form means "no body"
        const input = validate(sendMessageBody, raw && raw.body === '' ? { ...raw, body: undefined } : raw, (v, errors) => {
          if (v.recipient !== undefined && v.contact_id !== undefined) fieldError(errors, 'recipient', 'Give either recipient or contact_id, not both.')
          if (v.recipient === undefined && v.contact_id === undefined) fieldError(errors, 'recipient', 'The recipient field is required when contact_id is not given.')
          if (v.body !== undefined && v.template_id !== undefined) fieldError(errors, 'body', 'Give either body or template_id, not both.')
          if (v.body === undefined && v.template_id === undefined && v.file === undefined && !(v.media?.attachments?.length)) fieldError(errors, 'body', 'Give at least one of body, file or media.attachments.')
          if (v.variables !== undefined && v.template_id === undefined) fieldError(errors, 'variables', 'The variables field is used only with template_id.')
          numberedKeys(v, errors)
          // the file becomes one of the message's attachments, so it counts toward their limit
          if (v.file !== undefined && (v.media?.attachments?.length ?? 0) >= MAX_ATTACHMENTS) fieldError(errors, 'media.attachments', `A message carries at most ${MAX_ATTACHMENTS} attachments, the file included.`)
        })
        return svc.idempotency.send202<MessageRow>(
          { apiKeyId: caller.key.id, method: 'POST', path: '/api/v1/messages', header: request.headers.get('idempotency-key'), body: raw },
          set,
          async (inTx) => {
            // the file is checked, scanned and stored first; its row commits with the message
            const upload = input.file ? await svc.media.prepare(caller.workspace.id, input.file) : undefined
            let committed = false
            try {
              await messages.send(caller.workspace.id, { ...input, attachments: (input.media?.attachments ?? []).map((a) => a.media_id) }, inTx, upload)
              committed = true
            } finally {
              if (upload) await svc.media.settle(upload, committed)
            }
          },
          (row) => messages.toPublic(row),
        )
      },
      {
        api: {
          summary: 'Queue a message',
          description:
            'Queues a one-to-one message (text, a file, or both) through one of the workspace’s connected numbers. Exactly one of recipient and contact_id; at least one of body, file, media.attachments — or a template (template_id with its numbered variables) in place of body. 202 means queued and durable, not delivered: the message is released at the number’s pace and delivery arrives through webhooks. Refused with 422 for an opted-out or suppressed recipient (recipient_opted_out, recipient_suppressed), an offline number (connection_offline), a used-up monthly allowance (allowance_exhausted), a marketing template to a contact who has not opted in (recipient_not_opted_in), a text or media send through a Cloud API number to someone who has not written to it in the last 24 hours (outside_service_window: WhatsApp takes only a template then), or a file that is infected (malware_detected), of an unsupported type (unsupported_media) or past the workspace’s media storage (media_quota_exceeded); 503 scanner_unavailable while the malware scanner is unreachable (media_store_unavailable while the bucket media is kept in is). Attachments must be media of this workspace that has not expired, and template_id one of its templates (404); a numbered placeholder without a value in variables, a template that renders empty or past 4096 characters for the recipient, or a WhatsApp template with a value the recipient lacks (WhatsApp refuses empty values), is a 422 validation_failed. A template that names a WhatsApp template is sent through a Cloud API number as that template message, with at most one attachment as its header (an image, a video or a document; otherwise 422 validation_failed).',
          tag: 'Messages',
          scope: 'messages:write',
          body: sendMessageBody,
          idempotent: true,
          ok: { status: 202, data: messageDoc, description: 'Queued.', headers: { 'Idempotency-Replayed': { schema: { type: 'string', enum: ['true'] }, description: 'On a replayed response.' } } },
          errors: [400, 404, 409, 413, 422, 503],
        },
      },
    )
    .get(
      '/messages',
      ({ caller, query }) => {
        const q = validate(listMessagesQuery, query)
        const filter = { direction: q.direction, status: q.status, contactId: q.contact_id?.toLowerCase() }
        return paged(query, (limit, offset) => messages.list(caller.workspace.id, filter, limit, offset), (r) => messages.toPublic(r))
      },
      {
        api: {
          summary: 'The message log',
          description: 'Inbound and outbound messages, newest first, each with its delivery outcome and timeline. With contact_id, one contact’s conversation (404 when the contact is not the workspace’s).',
          tag: 'Messages',
          scope: 'messages:read',
          query: listMessagesQuery,
          ok: { status: 200, data: messageDoc, list: true, description: 'A page of messages.' },
          errors: [404, 422],
        },
      },
    )
    .get(
      '/messages/:id',
      async ({ caller, params }) => {
        if (!UUID.test(params.id)) throw notFound('message')
        return { data: messages.toPublic(await messages.get(caller.workspace.id, params.id)) }
      },
      {
        api: { summary: 'One message', tag: 'Messages', scope: 'messages:read', params: ['id'], ok: { status: 200, data: messageDoc, description: 'The message with outcome and timeline.' }, errors: [404] },
      },
    )
}
