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
export type AdminEndpoint = Shape<typeof endpointDoc> & Partial<Pick<Shape<typeof endpointFullDoc>, 'secret' | 'header_values'>>
