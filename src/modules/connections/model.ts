/** Admin input schemas for connections (CONTRACT §6). */
import { s } from '../../http/schema'
import { phoneField } from '../contacts/model'

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
  driver: s.string().oneOf(['sandbox', 'cloud_api']).describe('The messaging network driver: sandbox, or cloud_api (WhatsApp Cloud API).'),
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
