/**
 * Meta's message templates as the WhatsApp Business Account lists them (Graph API
 * `GET /{waba id}/message_templates`), read into what Capstan can send (`NetworkTemplateDefinition`).
 *
 * A template's parts are its `components`: a HEADER (TEXT with at most one variable, or a media
 * format), the BODY text with numbered variables {{1}}, {{2}}, …, an optional FOOTER, and BUTTONS.
 * Capstan sends body parameters, a text header's value or a media header, and the variable end of
 * URL buttons — with their names for a template with named parameters; a template needing
 * anything else (a copy-code or flow button, a location header, a carousel) is listed as unusable
 * with the reason, not guessed at.
 */
import type { NetworkTemplateDefinition } from './driver'

/** The fields asked for: only what the import reads. */
export const TEMPLATE_FIELDS = 'name,language,status,category,parameter_format,components'

interface MetaComponent {
  type?: unknown
  format?: unknown
  text?: unknown
  buttons?: { type?: unknown; url?: unknown }[]
}

/** Buttons that need nothing per message (a URL is checked for a variable separately). */
const STATIC_BUTTONS = new Set(['QUICK_REPLY', 'PHONE_NUMBER', 'URL'])
const MEDIA_FORMATS = new Set(['IMAGE', 'VIDEO', 'DOCUMENT'])
const VARIABLE = /\{\{[^{}]*\}\}/

/** One listed template, or null when it is not a template at all (no name or language). */
export function readTemplate(raw: unknown): NetworkTemplateDefinition | null {
  const t = raw as { name?: unknown; language?: unknown; status?: unknown; category?: unknown; parameter_format?: unknown; components?: unknown } | null
  if (!t || typeof t.name !== 'string' || typeof t.language !== 'string' || !t.name || !t.language) return null
  const components = Array.isArray(t.components) ? (t.components as MetaComponent[]) : []
  const def: NetworkTemplateDefinition = { name: t.name, language: t.language, category: t.category === 'MARKETING' ? 'marketing' : 'utility', body: '', headerVariable: false, urlButtons: [], unusable: null }
  const unusable = (reason: string) => ({ ...def, unusable: reason })

  if (t.status !== 'APPROVED') return unusable(`Meta has not approved it (status ${String(t.status ?? 'unknown')}).`)
  if (t.category === 'AUTHENTICATION') return unusable('Authentication templates (one-time passcodes) are not supported.')
  const named = t.parameter_format === 'NAMED'
  for (const c of components) {
    if (!c || typeof c !== 'object') continue
    switch (c.type) {
      case 'BODY':
        def.body = typeof c.text === 'string' ? c.text : ''
        if (named) Object.assign(def, numbered(def.body))
        break
      case 'HEADER':
        // a media header takes the send's attachment, of its kind
        if (c.format === 'TEXT') {
          def.headerVariable = typeof c.text === 'string' && VARIABLE.test(c.text)
          if (named && def.headerVariable) def.headerParameterName = VARIABLE.exec(c.text as string)![0].slice(2, -2).trim()
        } else if (MEDIA_FORMATS.has(String(c.format))) def.headerMedia = String(c.format).toLowerCase() as 'image' | 'video' | 'document'
        else return unusable(`Its ${String(c.format ?? 'unknown').toLowerCase()} header is not supported.`)
        break
      case 'FOOTER':
        break
      case 'BUTTONS':
        for (const [index, b] of (Array.isArray(c.buttons) ? c.buttons : []).entries()) {
          if (!STATIC_BUTTONS.has(String(b?.type))) return unusable(`Its ${String(b?.type ?? 'unknown').toLowerCase().replace(/_/g, '-')} button is not supported.`)
          if (b.type === 'URL' && typeof b.url === 'string' && VARIABLE.test(b.url)) def.urlButtons.push(index)
        }
        break
      default:
        return unusable(`Its ${String(c.type ?? 'unknown').toLowerCase().replace(/_/g, ' ')} component is not supported.`)
    }
  }
  if (!def.body) return unusable('It has no body text.')
  return def
}

/**
 * A body with named parameters ("Hi {{customer_name}}, order {{order_number}}") as Capstan writes
 * it — each name replaced by its number in order of first appearance ("Hi {{1}}, order {{2}}") — and
 * the names in that order, sent with the values.
 */
function numbered(text: string): { body: string; parameterNames: string[] } {
  const parameterNames: string[] = []
  const body = text.replace(/\{\{([^{}]*)\}\}/g, (_, raw: string) => {
    const name = raw.trim()
    if (!parameterNames.includes(name)) parameterNames.push(name)
    return `{{${parameterNames.indexOf(name) + 1}}}`
  })
  return { body, parameterNames }
}
