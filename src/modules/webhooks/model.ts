/** Webhook endpoints and deliveries as the operator sees them. */
import { d, type Shape } from '../../http/docs'
import { EVENT_TYPES } from './service'

const endpointFields = {
  id: d.uuid,
  workspace_id: d.uuid,
  url: d.string(),
  events: d.list(d.oneOf(EVENT_TYPES)),
  status: d.oneOf(['active', 'disabled']),
  failing_since: d.nullable(d.time),
  created_at: d.time,
  previous_secret_expires_at: d.nullable(d.time, { description: 'While a rotated secret still signs beside the new one.' }),
  headers: d.list(d.string('The names of the extra headers sent with each delivery (values only with the secret).')),
}
export const endpointDoc = d.object(endpointFields)
const secretDoc = d.string('whsec_<base64>: the Standard Webhooks signing secret.')
export const endpointWithSecretDoc = d.object({ ...endpointFields, secret: secretDoc })
export const endpointFullDoc = d.object({ ...endpointFields, secret: secretDoc, header_values: d.map(d.string()) })
export const deliveryDoc = d.object({
  id: d.string('The webhook-id the event is sent with (msg_<hex>), the same on every attempt.'),
  type: d.oneOf([...EVENT_TYPES, 'webhook.test']),
  status: d.oneOf(['pending', 'delivered', 'failed']),
  attempts: d.integer,
  next_attempt_at: d.nullable(d.time),
  last_status_code: d.nullable(d.integer),
  last_error: d.nullable(d.string()),
  created_at: d.time,
  delivered_at: d.nullable(d.time),
})
/** One delivery in full (the admin API's delivery view). */
export const deliveryDetailDoc = d.object({
  ...deliveryDoc.properties,
  updated_at: d.time,
  payload: d.anyObject({ description: 'The event as it was signed and sent: {type, timestamp, data}.' }),
})

/** How an endpoint has been doing (see WebhookService.health). */
export const healthDoc = d.object({
  state: d.oneOf(['healthy', 'degraded', 'failing', 'disabled', 'unknown'], { description: 'failing: 3 or more failures in a row (or failing for a while); degraded: 1-2 in a row, or under 95% delivered; unknown: nothing attempted yet.' }),
  recent: { ...d.integer, description: 'How many of its newest 50 deliveries were attempted (what the rest is read from).' },
  success_rate: d.nullable(d.number, { description: 'The share of those finished that were delivered, 0–1; null when none finished.' }),
  consecutive_failures: { ...d.integer, description: 'Its newest deliveries that failed, or are being retried after failing, in a row.' },
  last_error: d.nullable(d.string()),
  last_error_at: d.nullable(d.time),
  last_success_at: d.nullable(d.time),
  failing_since: d.nullable(d.time),
})

export type AdminEndpoint = Shape<typeof endpointDoc> & Partial<Pick<Shape<typeof endpointFullDoc>, 'secret' | 'header_values'>>
