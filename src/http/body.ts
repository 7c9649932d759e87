/**
 * One body parser for JSON, urlencoded and multipart requests.
 *
 * Form fields with bracket names become nested values: `media[attachments][0][media_id]` →
 * `{media: {attachments: [{media_id}]}}`, `metadata[plan]` → `{metadata: {plan}}`. Uploaded
 * files stay `File` objects. Parsing never throws: an unreadable body becomes `UNREADABLE`, and
 * the route answers 400 only after authentication and scope checks (CONTRACT §1 order).
 */
export const UNREADABLE: unique symbol = Symbol('unreadable body')
export type Body = Record<string, unknown> | typeof UNREADABLE

const MAX_DEPTH = 6
const MAX_INDEX = 999
/** Objects and arrays inside one another in a JSON body; no body of this API nests past ~5. */
const MAX_JSON_DEPTH = 32

/**
 * Whether a parsed JSON value nests deeper than MAX_JSON_DEPTH. A body of 100,000 nested arrays
 * parses fine but would overflow the call stack of any recursive step after it (the idempotency
 * fingerprint is one); this walk itself stops one level past the bound.
 */
function tooDeep(value: object, depth = 1): boolean {
  if (depth > MAX_JSON_DEPTH) return true
  for (const k in value) {
    const x = (value as Record<string, unknown>)[k]
    if (x !== null && typeof x === 'object' && tooDeep(x, depth + 1)) return true
  }
  return false
}

/** Split `a[b][0]` into ['a', 'b', '0']; null when the name is not well formed. */
function splitName(name: string): string[] | null {
  const first = name.indexOf('[')
  if (first === -1) return name ? [name] : null
  const head = name.slice(0, first)
  if (!head) return null
  const parts = [head]
  const rest = name.slice(first)
  const re = /\[([^[\]]*)\]/gy
  let m: RegExpExecArray | null
  let consumed = 0
  while ((m = re.exec(rest))) {
    parts.push(m[1]!)
    consumed = re.lastIndex
  }
  if (consumed !== rest.length || parts.length > MAX_DEPTH) return null
  return parts
}

const isIndex = (s: string) => /^(0|[1-9]\d{0,2})$/.test(s) && Number(s) <= MAX_INDEX

/** Build a nested object from (name, value) pairs. Returns UNREADABLE on conflicting names. */
export function nestFields(pairs: Iterable<[string, unknown]>): Body {
  const root: Record<string, unknown> = Object.create(null)
  for (const [name, value] of pairs) {
    const parts = splitName(name)
    if (!parts) return UNREADABLE
    let node: any = root
    for (let i = 0; i < parts.length; i++) {
      let key: string = parts[i]!
      const last = i === parts.length - 1
      if (key === '') {
        // "a[]" appends
        if (!Array.isArray(node)) return UNREADABLE
        key = String(node.length)
      }
      if (key === '__proto__' || key === 'constructor' || key === 'prototype') return UNREADABLE
      if (Array.isArray(node) && !isIndex(key)) return UNREADABLE
      if (last) {
        node[key] = value
      } else {
        const nextKey = parts[i + 1]!
        const wantArray = nextKey === '' || isIndex(nextKey)
        if (node[key] === undefined) node[key] = wantArray ? [] : Object.create(null)
        else if (typeof node[key] !== 'object' || node[key] instanceof File) return UNREADABLE
        node = node[key]
      }
    }
  }
  return compact(root) as Record<string, unknown>
}

/** Arrays built from indexed names may have holes; keep the order, drop the holes. */
function compact(value: unknown): unknown {
  if (Array.isArray(value)) return value.filter((v) => v !== undefined).map(compact)
  if (value && typeof value === 'object' && !(value instanceof File)) {
    const out: Record<string, unknown> = {}
    for (const [k, v] of Object.entries(value)) out[k] = compact(v)
    return out
  }
  return value
}

/** Read the request body by its content type. Never throws. */
export async function parseBody(request: Request, contentType: string): Promise<Body> {
  const type = contentType.split(';')[0]!.trim().toLowerCase()
  try {
    if (type === 'application/json' || type.endsWith('+json')) {
      const text = await request.text()
      if (text.trim() === '') return {}
      const value = JSON.parse(text)
      if (!value || typeof value !== 'object' || Array.isArray(value) || tooDeep(value)) return UNREADABLE
      return value
    }
    if (type === 'application/x-www-form-urlencoded') {
      return nestFields(new URLSearchParams(await request.text()).entries())
    }
    if (type === 'multipart/form-data') {
      const form = await request.formData()
      return nestFields(form.entries() as Iterable<[string, unknown]>)
    }
    const text = await request.text()
    return text.length === 0 ? {} : UNREADABLE
  } catch {
    return UNREADABLE
  }
}
