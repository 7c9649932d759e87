/**
 * The events Capstan posts to webhook endpoints, as the OpenAPI document's `webhooks` (OpenAPI
 * 3.1): one operation per event type, with the body schema and the signing headers, so a
 * receiver can be generated from /openapi.json like a client.
 */
import { d, requireAll, type Shape } from '../../http/docs'
import { campaignDoc, type PublicCampaign } from '../campaigns/model'
import { type ConnectionStatusEvent, connectionStatusDoc } from '../connections/model'
import { CONSENT, contactDoc } from '../contacts/model'
import { messageDoc, type PublicMessage } from '../messages/model'
import type { TSchema } from '@sinclair/typebox'
import { type EventType, RETRY_SCHEDULE_S } from './service'

type Json = Record<string, unknown>

/** A contact whose consent changed, with the change (contact.consent_changed). */
export const consentChangedDoc = d.object({
  ...contactDoc.properties,
  consent_change: d.object({
    from: d.oneOf([...CONSENT, null], { description: 'The consent before; null for a contact created with one.' }),
    to: d.oneOf(CONSENT),
    source: d.string('As in the consent ledger: api_key:<key id>, inbound:<message id>, cloud_api:marketing_stopped, cloud_api_131050:<message id>.'),
  }),
})
export type ConsentChangedEvent = Shape<typeof consentChangedDoc>

/** What each event's `data` is, as a type: the same shapes the document gives below. */
export interface EventData {
  'message.sent': PublicMessage
  'message.delivered': PublicMessage
  'message.read': PublicMessage
  'message.failed': PublicMessage
  'message.received': PublicMessage
  'campaign.completed': PublicCampaign
  'contact.consent_changed': ConsentChangedEvent
  'connection.status_changed': ConnectionStatusEvent
}

const EVENTS: Record<EventType, { summary: string; data: TSchema }> = {
  'message.sent': { summary: 'A message was handed to its network', data: messageDoc },
  'message.delivered': { summary: 'A message reached the recipient’s phone', data: messageDoc },
  'message.read': { summary: 'The recipient read a message', data: messageDoc },
  'message.failed': { summary: 'A message failed (error.code says why)', data: messageDoc },
  'message.received': { summary: 'A customer wrote to one of the numbers', data: messageDoc },
  'campaign.completed': { summary: 'A campaign finished: every recipient has a final outcome', data: campaignDoc },
  'contact.consent_changed': { summary: 'A contact’s consent changed (API, STOP reply, stopped promotions)', data: consentChangedDoc },
  'connection.status_changed': { summary: 'A number went offline (its network refused its token, or the operator) or came back online', data: connectionStatusDoc },
}

const retries = RETRY_SCHEDULE_S.map((s) => (s < 60 ? `${s} s` : s < 3600 ? `${s / 60} min` : `${s / 3600} h`)).join(', ')

const header = (name: string, description: string) => ({ name, in: 'header', required: true, schema: { type: 'string' }, description })

export const WEBHOOK_DOCS: Record<string, Json> = Object.fromEntries(
  Object.entries(EVENTS).map(([type, { summary, data }]) => [
    type,
    {
      post: {
        // the event's name as an identifier: message.sent → messageSentEvent
        operationId: `${type.replace(/[._](\w)/g, (_, c: string) => c.toUpperCase())}Event`,
        summary,
        // Capstan calls the receiver: no credential of Capstan's; the signature below is the proof
        security: [],
        description: `Posted to every active endpoint of the workspace subscribed to \`${type}\` (an endpoint with no events listed gets all). Signed per Standard Webhooks with the endpoint’s secret; verify before trusting the body.`,
        tags: ['Webhooks'],
        parameters: [
          header('webhook-id', 'Unique per event and the same on every retry: drop duplicates by it.'),
          header('webhook-timestamp', 'Unix seconds of this attempt.'),
          header('webhook-signature', 'Space-separated `v1,<base64 HMAC-SHA256>` of "<webhook-id>.<webhook-timestamp>.<raw body>", keyed with the base64-decoded secret after whsec_; two while a rotated secret still signs.'),
        ],
        requestBody: {
          required: true,
          content: {
            'application/json': {
              schema: requireAll({
                type: 'object',
                properties: { type: { type: 'string', const: type }, timestamp: { type: 'string', format: 'date-time' }, data },
              }),
            },
          },
        },
        responses: {
          '2XX': { description: `Received. Any other answer, or none within 15 s, is retried after ${retries}; an endpoint failing for 3 days is disabled.` },
        },
      },
    },
  ]),
)
