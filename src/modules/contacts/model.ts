/** Contact input schemas (spec §2, CONTRACT §2). */
import { d, type Shape } from '../../http/docs'
import { pageQuery } from '../../http/format'
import { E164 } from '../../http/phone'
import { s } from '../../http/schema'
import { Type as t } from '@sinclair/typebox'

export { E164 }
export const CONSENT = ['unknown', 'opted_in', 'opted_out'] as const
export type Consent = (typeof CONSENT)[number]

/** Metadata values: the kinds `s.metadata()` accepts. */
export const metadataDoc = d.map(t.Union([t.String(), t.Number(), t.Boolean()]))

/** A contact as the API returns it (and webhooks carry it). */
export const contactDoc = d.object({
  id: d.uuid,
  phone: t.String({ examples: ['+14155550100'] }),
  name: d.nullable(d.string()),
  consent_status: d.oneOf(CONSENT),
  metadata: metadataDoc,
  created_at: d.time,
  updated_at: d.time,
  last_activity_at: d.described(d.time, 'When a message last went to or came from the contact, or it was made or changed (the newest activity first in the list). A message moves it at once on the server that took it and is written within 200 ms for the others.'),
})
export type PublicContact = Shape<typeof contactDoc>

export const phoneField = () => s.string().pattern(E164, 'must be an E.164 phone number such as +14155550100')

export const upsertContactBody = s.object({
  phone: phoneField().describe('E.164 phone number; the upsert key.', '+14155550100'),
  name: s.string().length(0, 255).nullable().optional().describe('Display name for the team.', 'Ada Lovelace'),
  consent_status: s.string().oneOf(CONSENT).optional().describe('Changes the stored consent only when sent; opted_in is recorded in the consent ledger with the API key as source.'),
  metadata: s.metadata().optional().describe('Your own key/value fields (string, number or boolean values; at most 50 keys). When sent, replaces the stored object.', { plan: 'pro' }),
})

/**
 * A phone number from a query string: an unencoded + arrives as a space, so " 14155550100" is
 * read as "+14155550100". Anything else is left for validation.
 */
export const queryPhone = (raw: unknown) => (typeof raw === 'string' && /^ [1-9]/.test(raw) ? `+${raw.slice(1)}` : raw)

export const listContactsQuery = s.object({
  phone: phoneField().optional().describe('Only the contact with this E.164 number: a page of one, or none. Write the + as %2B (a bare + in a query string reads as a space, which is taken as +).', '+14155550100'),
  ...pageQuery.shape,
})
