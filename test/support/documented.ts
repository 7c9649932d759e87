/**
 * Checks a real response against the API document the same server publishes: the status must be
 * one the operation documents, and a JSON body must match that status's schema (ajv, JSON Schema
 * 2020-12 as OpenAPI 3.1 uses, `required` included). TestServer runs every response to a
 * documented operation through this, so every test of the suite is also a test of the document.
 */
import Ajv2020, { type ValidateFunction } from 'ajv/dist/2020'
import addFormats from 'ajv-formats'

type Json = Record<string, any>

/** `/api/v1/messages/{id}` → a pattern over concrete paths; literal segments count for ranking. */
function templatePattern(template: string) {
  const parts = template.split('/')
  const source = parts.map((p) => (p.startsWith('{') ? '[^/]+' : p.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'))).join('/')
  return { pattern: new RegExp(`^${source}$`), literal: parts.filter((p) => !p.startsWith('{')).length }
}

const pointer = (...keys: string[]) => keys.map((k) => k.replaceAll('~', '~0').replaceAll('/', '~1')).join('/')

export class DocumentedResponses {
  private readonly ajv
  private readonly templates: { template: string; pattern: RegExp; literal: number }[]
  private readonly compiled = new Map<string, ValidateFunction>()

  constructor(private readonly doc: Json, id: string) {
    this.ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true })
    addFormats(this.ajv)
    this.ajv.addSchema(doc, id)
    this.templates = Object.keys(doc.paths ?? {})
      .map((template) => ({ template, ...templatePattern(template) }))
      .sort((a, b) => b.literal - a.literal)
    this.id = id
  }

  private readonly id: string

  /** The documented operation a request reached, or null (an unknown route, an undocumented method). */
  operation(method: string, path: string): { template: string; op: Json } | null {
    const bare = path.split('?')[0]!
    for (const t of this.templates) {
      if (!t.pattern.test(bare)) continue
      const op = this.doc.paths[t.template][method.toLowerCase()]
      if (op) return { template: t.template, op }
    }
    return null
  }

  /** What is wrong with this response by the document; [] when it matches or is not documented. */
  problems(method: string, path: string, status: number, contentType: string | null, text: string): string[] {
    const found = this.operation(method, path)
    if (!found) return []
    const { template, op } = found
    const where = `${method} ${template} → ${status}`
    const response = op.responses?.[String(status)] ?? op.responses?.[`${String(status)[0]}XX`] ?? op.responses?.default
    if (!response) return [`${where}: status not documented (documented: ${Object.keys(op.responses ?? {}).join(', ')})`]
    const json = contentType?.startsWith('application/json')
    if (!json || method === 'HEAD') return []
    const key = pointer('paths', template, method.toLowerCase(), 'responses', String(status), 'content', 'application/json', 'schema')
    if (!response.content?.['application/json']) return [`${where}: answered JSON, documented ${Object.keys(response.content ?? {}).join(', ') || 'no body'}`]
    let validate = this.compiled.get(key)
    if (!validate) {
      validate = this.ajv.compile({ $ref: `${this.id}#/${key}` })
      this.compiled.set(key, validate)
    }
    let body: unknown
    try {
      body = JSON.parse(text)
    } catch {
      return [`${where}: body is not JSON`]
    }
    if (validate(body)) return []
    return (validate.errors ?? []).slice(0, 5).map((e) => `${where}: ${e.instancePath || '(body)'} ${e.message}${e.params ? ` ${JSON.stringify(e.params)}` : ''}`)
  }
}
