/** Template input rules shared with the modules that fill templates (campaigns, one-to-one sends). */
import { d, type Shape } from '../../http/docs'
import { fieldError, s } from '../../http/schema'
import { NUMBERED } from './render'

/** Values for a template's numbered placeholders, given by a campaign or a one-to-one send. */
export const VARIABLES = s.metadata(50, 3, 1000).describe('Values for numbered placeholders: {"1": "SPRING20"}.', { '1': 'SPRING20' })

/** A template as the API returns it. */
export const templateDoc = d.object({
  id: d.uuid,
  name: d.string(),
  body: d.string(),
  variables: d.list(d.string(), { description: 'Placeholders in order of appearance, e.g. ["name", "metadata.plan", "1"].' }),
  category: d.oneOf(['utility', 'marketing']),
  whatsapp: d.nullable(
    d.object({
      name: d.string(),
      language: d.string(),
      header_text: d.nullable(d.string()),
      url_buttons: d.list(d.object({ index: d.integer, value: d.string() })),
      parameter_names: d.nullable(d.list(d.string())),
      header_parameter_name: d.nullable(d.string()),
      header_media: d.nullable(d.oneOf(['image', 'video', 'document'])),
    }),
    { description: 'The Meta-approved WhatsApp template sent in its place through Cloud API numbers (campaigns and one-to-one sends), or null.' },
  ),
  created_at: d.time,
  updated_at: d.time,
})
export type PublicTemplate = Shape<typeof templateDoc>

/** Numbered placeholder values are keyed "1" to "999". */
export function numberedKeys(v: { variables?: Record<string, unknown> }, errors: Record<string, string[]>) {
  for (const k of Object.keys(v.variables ?? {})) if (!NUMBERED.test(k)) fieldError(errors, 'variables', 'The variables keys must be the numbers of placeholders, "1" to "999".')
}
