/** Workspace input schemas and settings defaults (CONTRACT §2, §3, §6). */
import { d, type Shape } from '../../http/docs'
import { s } from '../../http/schema'

export const DEFAULT_SETTINGS = {
  sending_policy: { hourly_cap: 60, daily_cap: 500, min_gap_seconds: 3, max_gap_seconds: 12 },
  message_allowance: null as number | null,
  media: { retention_days: 30, max_bytes: 16 * 1024 * 1024, max_total_bytes: null as number | null },
  /** Days a message's content (body, attachments, rendered template) is kept; null = for good. */
  messages: { content_retention_days: null as number | null },
  /** The country (ISO 3166 alpha-2) a contact import reads numbers without a + in; null = E.164 only. */
  contacts: { default_country: null as string | null },
}
export type WorkspaceSettings = typeof DEFAULT_SETTINGS

/** The workspace of an API key (GET /workspace): always active, an inactive one is refused at authentication. */
export const workspaceDoc = d.object({ id: d.uuid, name: d.string(), slug: d.string(), status: d.oneOf(['active']) })
export type PublicWorkspace = Shape<typeof workspaceDoc>

export const settingsDoc = d.object({
  sending_policy: d.object({ hourly_cap: d.integer, daily_cap: d.integer, min_gap_seconds: d.number, max_gap_seconds: d.number }),
  message_allowance: d.nullable(d.integer),
  media: d.object({ retention_days: d.integer, max_bytes: d.integer, max_total_bytes: d.nullable(d.integer) }),
  messages: d.object({ content_retention_days: d.nullable(d.integer) }),
  contacts: d.object({ default_country: d.nullable(d.string('ISO 3166 code')) }),
})

/** A workspace as the operator sees it: with its settings. */
export const workspaceAdminDoc = d.object({
  ...workspaceDoc.properties,
  status: d.oneOf(['active', 'inactive']),
  settings: settingsDoc,
  created_at: d.time,
  updated_at: d.time,
})
export type AdminWorkspace = Shape<typeof workspaceAdminDoc>

export const SLUG = /^[a-z0-9]+(?:-[a-z0-9]+)*$/

export const createWorkspaceBody = s.object({
  name: s.string().length(1, 120).describe('Display name.', 'Acme Store'),
  slug: s.string().length(1, 64).pattern(SLUG, 'must be lower-case letters, digits and single hyphens').optional().describe('URL-safe name; derived from the name when omitted.'),
})

/** The sending policy's fields; a PATCH may give any of them (the rest keep their value). */
export const sendingPolicy = s.object({
  hourly_cap: s.integer().range(1, 1_000_000).optional().describe('Messages one number may release in any trailing hour.'),
  daily_cap: s.integer().range(1, 10_000_000).optional().describe('Messages one number may release in any trailing 24 hours.'),
  min_gap_seconds: s.number().range(0, 86_400).optional().describe('Smallest random gap between two releases of one number.'),
  max_gap_seconds: s.number().range(0, 86_400).optional().describe('Largest random gap between two releases of one number.'),
})

/** PATCH merges: any field left out of sending_policy, media or messages keeps its current value. */
export const patchWorkspaceBody = s.object({
  name: s.string().length(1, 120).optional(),
  status: s.string().oneOf(['active', 'inactive']).optional(),
  settings: s
    .object({
      sending_policy: sendingPolicy.optional(),
      message_allowance: s.integer().range(0, 1_000_000_000).nullable().optional().describe('Messages per calendar month (UTC); null = unlimited.'),
      media: s
        .object({
          retention_days: s.integer().range(1, 3650).optional(),
          max_bytes: s.integer().range(1024, 1024 * 1024 * 1024).optional(),
          max_total_bytes: s.integer().range(1024 * 1024, Number.MAX_SAFE_INTEGER).nullable().optional().describe('All of the workspace’s kept media together, in bytes; null = no limit but the disk.'),
        })
        .optional(),
      messages: s
        .object({
          content_retention_days: s.integer().range(1, 3650).nullable().optional().describe('Days a sent or received message keeps its body, attachments and rendered template; null = for good.'),
        })
        .optional(),
      contacts: s
        .object({
          default_country: s.string().pattern(/^[A-Z]{2}$/, 'must be an ISO 3166 country code such as DE or US').nullable().optional().describe('The country a contact import reads phone numbers written without + in (030 1234567 → +49301234567); null = E.164 only.'),
        })
        .optional(),
    })
    .optional(),
})
