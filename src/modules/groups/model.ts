/** Groups as the API returns them: the mirror of a number's groups, and a sync's outcome. */
import { d, type Shape } from '../../http/docs'

export const groupDoc = d.object({
  id: d.string(),
  name: d.string(),
  participant_count: d.described(d.integer, 'A count only; member numbers are never stored or returned.'),
  can_send: d.described(d.boolean, 'false for an announcement group where the number is not an admin.'),
  announce: d.boolean,
  number: d.nullable(d.string(), { description: 'The E.164 number of the connected number that is in the group.' }),
  synced_at: d.time,
})
export type PublicGroup = Shape<typeof groupDoc>

export const syncEntryDoc = d.object({
  number: d.string(),
  status: d.oneOf(['synced', 'failed', 'unsupported']),
  groups: d.nullable(d.integer),
  error: d.nullable(d.string()),
})
/** One number's outcome of a sync. */
export type SyncEntry = Shape<typeof syncEntryDoc>
export const syncDoc = d.object({ numbers: d.list(syncEntryDoc) })
