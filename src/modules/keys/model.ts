/** API key scopes (spec §5) and admin input schemas. */
import { d, type Shape } from '../../http/docs'
import { s } from '../../http/schema'

export const ALL_SCOPES = [
  'contacts:read',
  'contacts:write',
  'messages:write',
  'messages:read',
  'media:read',
  'groups:read',
  'groups:send',
  'templates:read',
  'templates:write',
  'campaigns:read',
  'campaigns:write',
  'campaigns:send',
] as const
export type Scope = (typeof ALL_SCOPES)[number]

export const createKeyBody = s.object({
  name: s.string().length(1, 100).describe('What the key is for.', 'shop backend'),
  scopes: s.array(s.string().oneOf(ALL_SCOPES)).max(ALL_SCOPES.length).optional().describe('Scopes to grant; omitted or empty = all twelve, stamped now.'),
  expires_at: s.string().format('date-time').nullable().optional().describe('When the key stops working (ISO-8601, in the future).'),
  allowed_ips: s
    .array(s.string().length(1, 64).pattern(/^[0-9A-Fa-f.:/]+$/, 'must be an IP address or a CIDR range'))
    .max(50)
    .nullable()
    .optional()
    .describe('IP addresses and CIDR ranges the key may be used from (IPv4 and IPv6); omitted, null or empty = any.'),
})

/** A key as the operator sees it: never its secret (shown once, on creation). */
export const keyDoc = d.object({
  id: d.uuid,
  workspace_id: d.uuid,
  name: d.string(),
  prefix: d.string('cap_<key_id>: how the key starts, to recognise it.'),
  scopes: d.list(d.oneOf(ALL_SCOPES)),
  status: d.oneOf(['active', 'revoked']),
  created_at: d.time,
  expires_at: d.nullable(d.time),
  revoked_at: d.nullable(d.time),
  allowed_ips: d.nullable(d.list(d.string())),
  last_used_at: d.nullable(d.time),
})
export const newKeyDoc = d.object({ ...keyDoc.properties, key: d.string('The whole key, cap_<key_id>.<secret>: shown this once, stored only as a hash.') })
export type AdminKey = Shape<typeof keyDoc>
