/** Message input schemas (spec §4 POST /messages, GET /messages). */
import { d, type Shape } from '../../http/docs'
import { pageQuery } from '../../http/format'
import { codePoints, s } from '../../http/schema'
import { phoneField } from '../contacts/model'
import { VARIABLES } from '../templates/model'
import { OUTCOME_CODES } from './outcomes'

export const MAX_BODY = 4096
export const MAX_ATTACHMENTS = 10

/** WhatsApp's limit on a template's text header, in characters. */
export const MAX_HEADER_TEXT = 60

/**
 * Why a template rendered for one recipient cannot be a message's text: past `max` code points
 * (MAX_BODY), or nothing but whitespace; null when it can. A one-to-one send refuses it (422; an
 * empty text is allowed beside media), a campaign skips the recipient with this as the reason. A
 * WhatsApp template's header text is held to the same rule with MAX_HEADER_TEXT.
 */
export function renderedFault(text: string, max = MAX_BODY): 'rendered_too_long' | 'rendered_empty' | null {
  if (codePoints(text) > max) return 'rendered_too_long'
  return text.trim() === '' ? 'rendered_empty' : null
}

/** `renderedFault` for a WhatsApp template's rendered header text; null when it has none. */
export const headerFault = (headerText: string | null) => (headerText === null ? null : renderedFault(headerText, MAX_HEADER_TEXT))
export const STATUSES = ['queued', 'sending', 'sent', 'delivered', 'read', 'failed'] as const

export const sendMessageBody = s.object({
  connection_id: s.string().format('uuid').describe('Which connected number sends.'),
  recipient: phoneField().optional().describe('E.164 number; required unless contact_id is given. A new number creates the contact.', '+14155550100'),
  contact_id: s.string().format('uuid').optional().describe('An existing contact; required unless recipient is given.'),
  body: s.string().length(1, MAX_BODY).optional().describe('Text, up to 4096 characters (Unicode code points).', 'Your order #1001 has shipped.'),
  template_id: s
    .string()
    .format('uuid')
    .optional()
    .describe(
      'Send a template instead of body: its text rendered for the recipient ({{name}}, {{phone}}, {{metadata.key}} from the contact, numbered ones from variables). Through a Cloud API number a template linked to a Meta-approved one (`whatsapp`) is sent as that template, which reaches people outside the 24-hour customer service window. A marketing template goes only to contacts who opted in.',
    ),
  variables: VARIABLES.optional(),
  file: s.file().optional().describe('A file to upload, scan and send inline (multipart/form-data).'),
  media: s
    .object({
      attachments: s.array(s.object({ media_id: s.string().format('uuid') })).max(MAX_ATTACHMENTS).describe('Up to 10 media ids from POST /media (9 when a file is sent too: the file becomes an attachment).'),
    })
    .optional(),
})

export const listMessagesQuery = s.object({
  direction: s.string().oneOf(['inbound', 'outbound']).optional().describe('Omit for both.'),
  status: s.string().oneOf(STATUSES).optional(),
  contact_id: s.string().format('uuid').optional().describe('Only the messages to and from this contact: its conversation (group messages have no contact).'),
  ...pageQuery.shape,
})

/** Inbound texts that opt the sender out (trimmed, case-insensitive). */
export const OPT_OUT_KEYWORDS = new Set(['STOP', 'STOPALL', 'UNSUBSCRIBE', 'CANCEL', 'END', 'QUIT'])

/** A failed message's error: `{code, message}`, code from OUTCOME_CODES (or the network's own). */
export const messageErrorDoc = d.object({
  code: d.string(
    `Why the message failed. One of: ${Object.entries(OUTCOME_CODES)
      .map(([code, why]) => `\`${code}\` (${why})`)
      .join('; ')}; or \`cloud_api_<n>\` with the Cloud API's own error code n; or, for a failure receipt posted to a sandbox number, the code given there.`,
  ),
  message: d.string("What happened, in words (the network's own text for cloud_api_<n>)."),
})

export const OUTCOME_STATES = ['pending', 'sent', 'delivered', 'read', 'failed'] as const

/** A message as the API returns it (and the message.* webhooks carry it). */
export const messageDoc = d.object({
  id: d.uuid,
  direction: d.oneOf(['inbound', 'outbound']),
  status: d.oneOf(STATUSES),
  connection_id: d.uuid,
  contact_id: d.nullable(d.uuid),
  recipient: d.nullable(d.string(), { description: 'Who receives it: the contact for outbound, the connected number for inbound; null for group messages.' }),
  sender: d.nullable(d.string(), { description: 'Who sent it: the connected number for outbound, the contact for inbound.' }),
  group_id: d.nullable(d.string()),
  body: d.nullable(d.string()),
  attachments: d.list(d.uuid, { description: 'Media ids (GET /media/{id}): what an outbound message sends, or the file a customer sent with an inbound one (Cloud API numbers).' }),
  reply_to: d.nullable(d.uuid, { description: 'Inbound: the id of the workspace’s message this one answers — a quoted reply, a tap on one of its buttons or a reaction to it (Cloud API numbers) — else null.' }),
  error: d.nullable(messageErrorDoc),
  created_at: d.time,
  updated_at: d.time,
  outcome: d.object({ state: d.oneOf(OUTCOME_STATES), at: d.nullable(d.time), error: d.nullable(messageErrorDoc) }),
  timeline: d.list(d.object({ status: d.string(), at: d.time })),
})
export type PublicMessage = Shape<typeof messageDoc>
