/** Template input rules shared with the modules that fill templates (campaigns, one-to-one sends). */
import { fieldError, s } from '../../http/schema'
import { NUMBERED } from './render'

/** Values for a template's numbered placeholders, given by a campaign or a one-to-one send. */
export const VARIABLES = s.metadata(50, 3, 1000).describe('Values for numbered placeholders: {"1": "SPRING20"}.', { '1': 'SPRING20' })

/** Numbered placeholder values are keyed "1" to "999". */
export function numberedKeys(v: { variables?: Record<string, unknown> }, errors: Record<string, string[]>) {
  for (const k of Object.keys(v.variables ?? {})) if (!NUMBERED.test(k)) fieldError(errors, 'variables', 'The variables keys must be the numbers of placeholders, "1" to "999".')
}
