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
 * Whether a text can be stored as it came: not with a lone surrogate (`"\udc00"`), which is no
 * Unicode text — stored, it would become U+FFFD, and the response would not be what was stored —
 * nor with the NUL character (U+0000), which no field of this API takes and PostgreSQL's text
 * cannot hold (SQLite could: the same request would be taken on one engine and fail on the other).
 */
const storable = (s: string) => s.isWellFormed() && !s.includes('\0')

/**
 * Whether a parsed JSON value cannot be taken: nested deeper than MAX_JSON_DEPTH, or holding a
 * string (value or name) that is not `storable`. A body of 100,000 nested
 * arrays parses fine but would overflow the call stack of any recursive step after it (the
 * idempotency fingerprint is one); this walk itself stops one level past the bound.
 */
function unfit(value: object, depth = 1): boolean {
  if (depth > MAX_JSON_DEPTH) return true
  for (const k in value) {
    const x = (value as Record<string, unknown>)[k]
    if (typeof x === 'string') {
      if (!storable(x)) return true
    } else if (x !== null && typeof x === 'object' && unfit(x, depth + 1)) return true
    if (!storable(k)) return true
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

/**
 * A form cannot say whether `variables[1]=x` is a list's item or an object's key "1". A container
 * first named with an index (`a[0]`, `a[]`) becomes a list when every name under it is an index
 * (`media[attachments][0][media_id]`), and the list remembers the keys it was given, so a field
 * whose schema is an object reads `{"1": "x"}` (see `formKeyed`); any other name under it makes
 * it an object (`metadata[2]` with `metadata[plan]`).
 */
const INDEXED = new WeakSet<object>()
const FORM_KEYS = new WeakMap<unknown[], Record<string, unknown>>()

/** The object a form meant by a list built from indexed names, for a field that takes an object. */
export const formKeyed = (value: unknown): unknown => (Array.isArray(value) ? (FORM_KEYS.get(value) ?? value) : value)

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
        if (!INDEXED.has(node)) return UNREADABLE
        key = String(Object.keys(node).length)
      }
      if (key === '__proto__' || key === 'constructor' || key === 'prototype') return UNREADABLE
      if (last) {
        node[key] = value
      } else {
        const nextKey = parts[i + 1]!
        if (node[key] === undefined) {
          node[key] = Object.create(null)
          if (nextKey === '' || isIndex(nextKey)) INDEXED.add(node[key])
        } else if (typeof node[key] !== 'object' || node[key] instanceof File) return UNREADABLE
        node = node[key]
      }
    }
  }
  return compact(root) as Record<string, unknown>
}

/** Containers named by indices only become lists in index order; holes are dropped. */
function compact(value: unknown): unknown {
  if (!value || typeof value !== 'object' || value instanceof File) return value
  const out: Record<string, unknown> = {}
  for (const [k, v] of Object.entries(value)) out[k] = compact(v)
  if (!INDEXED.has(value) || !Object.keys(out).every(isIndex)) return out
  // integer-like keys enumerate in ascending numeric order
  const list = Object.values(out)
  FORM_KEYS.set(list, out)
  return list
}

/** Bodies read from multipart/form-data: their fields may hold JSON text (see `jsonPart`). */
const MULTIPART = new WeakSet<object>()

/**
 * A multipart body's field that should hold an object or a list may carry it as one part of JSON
 * text — what OpenAPI's default multipart encoding writes for such a field (`metadata` as
 * `{"plan":"pro"}`). Returns the parsed value when `body` came from multipart and `value` is such
 * text, else `value` unchanged (and then the schema says what is wrong with it).
 */
export function jsonPart(body: unknown, value: unknown): unknown {
  if (typeof value !== 'string' || typeof body !== 'object' || body === null || !MULTIPART.has(body)) return value
  const first = value.trimStart()[0]
  if (first !== '{' && first !== '[') return value
  try {
    const parsed: unknown = JSON.parse(value)
    return parsed !== null && typeof parsed === 'object' && !unfit(parsed) ? parsed : value
  } catch {
    return value
  }
}

/** Fatal: bytes that are not UTF-8 throw instead of silently becoming U+FFFD. A leading BOM is dropped. */
const utf8 = new TextDecoder('utf-8', { fatal: true })

const encoder = new TextEncoder()

/** The value of one ASCII hex digit, or -1. */
function hexValue(c: number): number {
  if (c >= 48 && c <= 57) return c - 48
  const lower = c | 32
  return lower >= 97 && lower <= 102 ? lower - 87 : -1
}

/**
 * One name or value of an urlencoded body, decoded as the WHATWG form parser does — `+` is a space,
 * a `%` not followed by two hex digits stays as it is (so `curl -d 'body=100% off'` reads as
 * typed) — except that percent-escaped bytes which are not UTF-8 give null instead of U+FFFD.
 */
function formDecode(s: string): string | null {
  if (s.indexOf('+') !== -1) s = s.replaceAll('+', ' ')
  if (s.indexOf('%') === -1) return s
  const bytes = encoder.encode(s)
  let n = 0
  for (let i = 0; i < bytes.length; i++) {
    const hi = bytes[i] === 37 && i + 2 < bytes.length ? hexValue(bytes[i + 1]!) : -1
    const lo = hi === -1 ? -1 : hexValue(bytes[i + 2]!)
    if (lo === -1) bytes[n++] = bytes[i]!
    else {
      bytes[n++] = hi * 16 + lo
      i += 2
    }
  }
  try {
    return utf8.decode(bytes.subarray(0, n))
  } catch {
    return null
  }
}

/** The (name, value) pairs of an urlencoded body; null when a name or value is not UTF-8, or not `storable`. */
function formFields(text: string): [string, string][] | null {
  const pairs: [string, string][] = []
  for (const part of text.split('&')) {
    if (!part) continue
    const eq = part.indexOf('=')
    const name = formDecode(eq === -1 ? part : part.slice(0, eq))
    const value = name === null ? null : formDecode(eq === -1 ? '' : part.slice(eq + 1))
    if (name === null || value === null || !storable(name) || !storable(value)) return null
    // a field without a name is no field of this API: ignored like any unknown one (and like the
    // same field in a multipart body)
    if (name !== '') pairs.push([name, value])
  }
  return pairs
}

/**
 * The runtime's multipart parser turns bytes that are not UTF-8 in a text field into U+FFFD. A
 * text field holding U+FFFD whose UTF-8 bytes do not appear in the raw body was such a field (a
 * real U+FFFD sent as UTF-8 is found as sent). Fields come in body order, so each search starts
 * where the previous one matched: one pass over the body however many fields there are.
 */
function mangledText(fields: [string, unknown][], raw: Uint8Array): boolean {
  const body = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength)
  let from = 0
  for (const [, value] of fields) {
    if (typeof value !== 'string' || !value.includes('\uFFFD')) continue
    const at = body.indexOf(value, from, 'utf8')
    if (at === -1) return true
    from = at + Buffer.byteLength(value)
  }
  return false
}

/** A body past its limit, found while reading it: the caller answers 413. */
export const TOO_LARGE: unique symbol = Symbol('body too large')

/**
 * The body's bytes (a request's, or a response's), at most `max` of them. A body with a
 * Content-Length is held to it (and the caller has checked that length against the limit before
 * reading); one sent chunked, without a length, is read piece by piece and given up as soon as it
 * passes `max`, never held whole.
 */
export async function readBody(request: Pick<Request, 'body' | 'headers' | 'bytes'>, max: number): Promise<Uint8Array | typeof TOO_LARGE> {
  if (request.body === null) return new Uint8Array(0)
  if (request.headers.get('content-length') !== null) {
    const bytes = await request.bytes()
    return bytes.byteLength > max ? TOO_LARGE : bytes
  }
  const reader = request.body.getReader()
  const chunks: Uint8Array[] = []
  let total = 0
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    total += value.byteLength
    if (total > max) {
      await reader.cancel().catch(() => {})
      return TOO_LARGE
    }
    chunks.push(value)
  }
  return Buffer.concat(chunks)
}

/**
 * Read the request body (at most `maxBytes`, else TOO_LARGE) by its content type. Never throws.
 * Text must be UTF-8 (RFC 8259 for JSON; the form encodings' own charset): other bytes make the
 * body unreadable, never a silently replaced character in what is stored.
 */
export async function parseBody(request: Request, contentType: string, maxBytes: number): Promise<Body | typeof TOO_LARGE> {
  const type = contentType.split(';')[0]!.trim().toLowerCase()
  try {
    const raw = await readBody(request, maxBytes)
    if (raw === TOO_LARGE) return TOO_LARGE
    if (type === 'application/json' || type.endsWith('+json')) {
      const text = utf8.decode(raw)
      if (text.trim() === '') return {}
      const value = JSON.parse(text)
      if (!value || typeof value !== 'object' || Array.isArray(value) || unfit(value)) return UNREADABLE
      return value
    }
    if (type === 'application/x-www-form-urlencoded') {
      const pairs = formFields(utf8.decode(raw))
      return pairs === null ? UNREADABLE : nestFields(pairs)
    }
    if (type === 'multipart/form-data') {
      const form = await new Response(raw, { headers: { 'content-type': request.headers.get('content-type') ?? contentType } }).formData()
      const fields = [...(form.entries() as Iterable<[string, unknown]>)]
      if (mangledText(fields, raw)) return UNREADABLE
      // (a file's name is stored with it: held to what a field's text is — Bun's parser cuts a
      // name at a NUL today, so this guards what it may keep tomorrow)
      if (fields.some(([name, v]) => !storable(name) || !storable(v instanceof File ? v.name : String(v)))) return UNREADABLE
      const body = nestFields(fields)
      if (body !== UNREADABLE) MULTIPART.add(body)
      return body
    }
    return raw.byteLength === 0 ? {} : UNREADABLE
  } catch {
    return UNREADABLE
  }
}
