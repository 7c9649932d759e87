/** Campaigns as the API returns them (and campaign.completed carries them), and their recipients. */
import { d, type Shape } from '../../http/docs'
import { metadataDoc } from '../contacts/model'

export const CAMPAIGN_STATUSES = ['draft', 'scheduled', 'running', 'paused', 'completed', 'cancelled'] as const
export const PAUSED_REASONS = ['requested', 'allowance_exhausted', 'template_refused'] as const
export const SKIPPED_REASONS = ['not_opted_in', 'suppressed', 'contact_removed', 'rendered_empty', 'rendered_too_long', 'missing_value', 'outside_service_window', 'cancelled', 'connection_removed'] as const

export const countsDoc = d.object({ total: d.integer, queued: d.integer, sent: d.integer, delivered: d.integer, read: d.integer, failed: d.integer, skipped: d.integer })

export const campaignDoc = d.object({
  id: d.uuid,
  name: d.string(),
  template_id: d.uuid,
  connection_id: d.uuid,
  audience: d.object({ metadata: d.optional(metadataDoc) }, { description: 'Who it goes to: opted-in contacts, not suppressed, whose metadata has each of these values.' }),
  variables: d.map(d.string()),
  media_id: d.nullable(d.uuid),
  send_window: d.nullable(d.object({ from: d.string(), to: d.string(), time_zone: d.string() })),
  status: d.oneOf(CAMPAIGN_STATUSES),
  paused_reason: d.oneOf([...PAUSED_REASONS, null], {
    description:
      'Why it is paused: on request (only a resume moves it); because the monthly allowance ran out (it goes on by itself when there is room); or because the network refused its template as such — Meta’s paused, disabled or unknown template — (fix the template, then resume). null unless paused.',
  }),
  scheduled_at: d.nullable(d.time),
  started_at: d.nullable(d.time),
  finished_at: d.nullable(d.time),
  created_at: d.time,
  updated_at: d.time,
  counts: countsDoc,
})
export type PublicCampaign = Shape<typeof campaignDoc>

export const recipientDoc = d.object({
  contact_id: d.uuid,
  phone: d.string(),
  status: d.oneOf(['pending', 'queued', 'sending', 'sent', 'delivered', 'read', 'failed', 'skipped']),
  message_id: d.nullable(d.uuid),
  skipped_reason: d.oneOf([null, ...SKIPPED_REASONS]),
  updated_at: d.time,
})
export type PublicRecipient = Shape<typeof recipientDoc>
