/** A media record as the API returns it. */
import { d, type Shape } from '../../http/docs'
import { SUPPORTED_TYPES } from './sniff'

export const mediaDoc = d.object({
  id: d.uuid,
  filename: d.string(),
  mime_type: d.oneOf(SUPPORTED_TYPES),
  size: d.integer,
  sha256: d.string(),
  created_at: d.time,
  expires_at: d.time,
})
export type PublicMedia = Shape<typeof mediaDoc>
