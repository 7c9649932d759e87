/**
 * Template placeholders: {{name}}, {{phone}}, {{metadata.<key>}} and numbered {{1}}, {{2}}, ...
 * (whitespace inside the braces is allowed). Anything else between double braces is an unknown
 * placeholder and refused when the template is saved.
 */
// whitespace around the name is trimmed in code: `\s*([^{}]*?)\s*` in the pattern let the spaces
// match three ways, and "{{" followed by 4,000 spaces took seconds of backtracking
const PLACEHOLDER = /\{\{([^{}]*)\}\}/g
/** A numbered placeholder's name, "1" to "999" (also the keys of campaign variables). */
export const NUMBERED = /^[1-9][0-9]{0,2}$/
const KNOWN = /^(name|phone|metadata\.[A-Za-z0-9_.-]{1,64}|[1-9][0-9]{0,2})$/

/** The placeholders of a body in order of first appearance, and the unknown ones. */
export function placeholders(body: string): { variables: string[]; unknown: string[] } {
  const variables: string[] = []
  const unknown: string[] = []
  for (const m of body.matchAll(PLACEHOLDER)) {
    const name = m[1]!.trim()
    if (!KNOWN.test(name)) {
      if (!unknown.includes(name)) unknown.push(name)
    } else if (!variables.includes(name)) variables.push(name)
  }
  return { variables, unknown }
}

export interface RenderValues {
  name?: string | null
  phone?: string | null
  metadata?: Record<string, unknown>
  /** numbered values: {"1": "..."} */
  numbered?: Record<string, unknown>
}

/**
 * A value the caller gave: an own property only. `{{metadata.constructor}}` for a contact without
 * that key must render empty, not the text of Object's constructor inherited from the prototype.
 */
const own = (values: Record<string, unknown> | undefined, key: string) => (values !== undefined && Object.hasOwn(values, key) ? values[key] : undefined)

/** What a known placeholder stands for; undefined for a name that is not a placeholder at all. */
function valueOf(name: string, values: RenderValues): { value: unknown } | undefined {
  if (name === 'name') return { value: values.name }
  if (name === 'phone') return { value: values.phone }
  if (name.startsWith('metadata.')) return { value: own(values.metadata, name.slice('metadata.'.length)) }
  if (NUMBERED.test(name)) return { value: own(values.numbered, name) }
  return undefined
}

/** A value as text; null for none (rendered empty and reported as missing). */
const asText = (v: unknown) => (v === undefined || v === null || v === '' ? null : String(v))

/** Render a body; returns the text and the placeholders that had no value (rendered empty). */
export function render(body: string, values: RenderValues): { text: string; missing: string[] } {
  const missing: string[] = []
  const text = body.replace(PLACEHOLDER, (whole, raw: string) => {
    const name = raw.trim()
    const found = valueOf(name, values)
    if (!found) return whole
    const v = asText(found.value)
    if (v === null && !missing.includes(name)) missing.push(name)
    return v ?? ''
  })
  return { text, missing }
}

/**
 * The network template a body stands for, filled for one recipient: its parameters are the values
 * of the body's placeholders in order of first appearance — so "Hi {{name}}, order {{1}} ships
 * {{metadata.day}}" fills a WhatsApp template "Hi {{1}}, order {{2}} ships {{3}}" — each as the
 * text renders it (a value the recipient lacks is empty: see emptyValueOf). Its header text and
 * its URL buttons' values are rendered the same way ("track/{{1}}" → "track/A-1001").
 */
export function networkTemplate(
  whatsapp: { name: string; language: string; header_text?: string | null; url_buttons?: { index: number; value: string }[]; parameter_names?: string[] | null; header_parameter_name?: string | null },
  body: string,
  values: RenderValues,
) {
  const parameters = placeholders(body).variables.map((name) => asText(valueOf(name, values)?.value) ?? '')
  const urlButtons = (whatsapp.url_buttons ?? []).map((b) => ({ index: b.index, text: render(b.value, values).text }))
  return {
    name: whatsapp.name,
    language: whatsapp.language,
    parameters,
    ...(whatsapp.header_text ? { headerText: render(whatsapp.header_text, values).text } : {}),
    ...(urlButtons.length ? { urlButtons } : {}),
    // a template with named parameters: each value goes with its name
    ...(whatsapp.parameter_names ? { parameterNames: whatsapp.parameter_names } : {}),
    ...(whatsapp.header_text && whatsapp.header_parameter_name ? { headerParameterName: whatsapp.header_parameter_name } : {}),
  }
}

/**
 * What of a filled network template has no value for the recipient — WhatsApp refuses a template
 * message with an empty parameter: a body placeholder ("{{metadata.day}}") or a URL button's value
 * ("URL button 0"); null when every value is there. (An empty header text is `headerFault`'s.)
 */
function emptyValueOf(t: ReturnType<typeof networkTemplate>, body: string): string | null {
  const i = t.parameters.findIndex((p) => p.trim() === '')
  if (i >= 0) return `{{${placeholders(body).variables[i]}}}`
  const button = t.urlButtons?.find((b) => b.text.trim() === '')
  return button ? `URL button ${button.index}` : null
}

/**
 * A template body filled for one recipient: the text, and — when the template names a network
 * template (`whatsapp`, JSON) — that template with its parameters, as a message row stores it,
 * its rendered header text (null when it has none) and what of it has no value (`emptyValue`,
 * see emptyValueOf; such a message cannot be sent).
 */
export function fill(body: string, whatsapp: string | null, values: RenderValues): { text: string; networkTemplate: string | null; headerText: string | null; emptyValue: string | null } {
  const text = render(body, values).text
  if (whatsapp === null) return { text, networkTemplate: null, headerText: null, emptyValue: null }
  const t = networkTemplate(JSON.parse(whatsapp), body, values)
  return { text, networkTemplate: JSON.stringify(t), headerText: t.headerText ?? null, emptyValue: emptyValueOf(t, body) }
}
