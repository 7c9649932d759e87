/** Admin input schemas for connections (CONTRACT §6). */
import { d, type Shape } from '../../http/docs'
import { s } from '../../http/schema'
import { phoneField } from '../contacts/model'

export const DRIVER_NAMES = ['sandbox', 'cloud_api'] as const
export type DriverName = (typeof DRIVER_NAMES)[number]

/** A new number's warm-up (scheduler/warmup.ts); null ends one. */
const warmup = s
  .object({
    days: s.integer().range(1, 90).describe('Days until the number sends at the workspace’s full daily cap.'),
    start_daily_cap: s.integer().range(1, 10_000_000).describe('The daily cap on its first day; it rises in equal daily steps.'),
  })
  .nullable()
  .optional()

export const createConnectionBody = s.object({
  phone: phoneField().describe('The E.164 number this connection sends from.'),
  name: s.string().length(0, 120).nullable().optional(),
  driver: s.string().oneOf(DRIVER_NAMES).describe('The messaging network driver: sandbox, or cloud_api (WhatsApp Cloud API).'),
  receives: s.boolean().optional().describe('Whether the number receives inbound messages (default true).'),
  warmup,
})

export const patchConnectionBody = s.object({
  name: s.string().length(0, 120).nullable().optional(),
  status: s.string().oneOf(['online', 'offline']).optional(),
  warmup,
})

export const sandboxGroupsBody = s.object({
  groups: s
    .array(
      s.object({
        external_id: s.string().length(1, 200),
        name: s.string().length(0, 200),
        participants: s.array(s.string().length(1, 32)).max(100_000),
        announce: s.boolean().optional(),
        admin: s.boolean().optional(),
      }),
    )
    .max(50_000),
})

export const sandboxInboundBody = s.object({
  from: phoneField(),
  body: s.string().length(1, 4096),
  /** a file the simulated customer sends: media of the workspace (a copy becomes the message's) */
  media_id: s.string().format('uuid').optional(),
  /** the workspace's message it answers */
  reply_to: s.string().format('uuid').optional(),
  /** the name the simulated customer goes by (as WhatsApp's profile name): a contact without one takes it */
  name: s.string().length(1, 255).optional(),
})

export const sandboxReceiptBody = s.object({
  status: s.string().oneOf(['delivered', 'read', 'failed']),
  error: s
    .object({
      code: s.string().length(1, 100).optional(),
      message: s.string().length(0, 500).optional(),
    })
    .nullable()
    .optional(),
})

const STATUS = ['online', 'offline'] as const

/** A number as the operator sees it (secrets in its config shown as "(set)"). */
export const connectionDoc = d.object({
  id: d.uuid,
  workspace_id: d.uuid,
  phone: d.string('E.164'),
  name: d.nullable(d.string()),
  driver: d.oneOf(DRIVER_NAMES),
  status: d.oneOf(STATUS),
  status_reason: d.nullable(d.string('Why it is offline.')),
  receives: d.boolean,
  config: d.anyObject({
    description:
      'The driver\'s settings. sandbox: delivered_after_ms, read_after_ms (null = never), accept_after_ms, fail_recipients (numbers the network refuses). cloud_api: phone_number_id, waba_id, access_token, app_secret, verify_token, graph_version, graph_base_url. Secrets are stored encrypted and shown as "(set)".',
  }),
  warmup: d.nullable(d.object({ days: d.integer, start_daily_cap: d.integer, started_at: d.time, ends_at: d.time, day: d.nullable(d.integer) })),
  created_at: d.time,
  updated_at: d.time,
})
export type AdminConnection = Shape<typeof connectionDoc>

/** A number as the `connection.status_changed` event carries it: no config (it holds secrets). */
export const connectionStatusDoc = d.object({
  id: d.uuid,
  phone: d.string('The business number (E.164).'),
  name: d.nullable(d.string()),
  driver: d.oneOf(DRIVER_NAMES),
  status: d.oneOf(STATUS),
  previous_status: d.oneOf(STATUS),
  status_reason: d.nullable(d.string(), { description: 'Why it is offline (a rejected token, set by the operator); null when online.' }),
  at: d.time,
})
export type ConnectionStatusEvent = Shape<typeof connectionStatusDoc>
