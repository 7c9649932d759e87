/**
 * A small schema language for request input: one definition both validates (with the contract's
 * `errors` shape: dot paths → list of fixed messages) and describes itself as JSON Schema for the
 * OpenAPI document. String lengths are counted in Unicode code points. Form and query input
 * arrive as strings, so integers and booleans also accept their decimal / true|false spellings.
 * Unknown object properties are ignored and left out of the result.
 */
import type { FieldErrors } from './errors'
import { formKeyed, jsonPart } from './body'
import { validationFailed } from './errors'

type Json = Record<string, unknown>

export interface Ctx {
  errors: FieldErrors
}

function add(ctx: Ctx, path: string, message: string) {
  const key = path || 'body'
  const list = (ctx.errors[key] ??= [])
  if (!list.includes(message)) list.push(message)
}

const label = (path: string) => path || 'body'

export abstract class Schema<T> {
  isOptional = false
  isNullable = false
  desc?: string
  example?: unknown

  /** Check `value` (never undefined here); return the cleaned value, or undefined after adding errors. */
  abstract check(value: unknown, path: string, ctx: Ctx): T | undefined
  abstract json(): Json

  optional(): Schema<T | undefined> {
    const c = this.clone()
    c.isOptional = true
    return c as any
  }
  nullable(): Schema<T | null> {
    const c = this.clone()
    c.isNullable = true
    return c as any
  }
  describe(text: string, example?: unknown): this {
    const c = this.clone()
    c.desc = text
    if (example !== undefined) c.example = example
    return c
  }
  protected clone(): this {
    return Object.assign(Object.create(Object.getPrototypeOf(this)), this)
  }
  toJsonSchema(): Json {
    const j = this.json()
    if (this.desc) j.description = this.desc
    if (this.example !== undefined) j.examples = [this.example]
    if (this.isNullable) return { anyOf: [j, { type: 'null' }] }
    return j
  }
}

export const codePoints = (s: string) => {
  let n = 0
  for (const _ of s) n++
  return n
}

/** At most `max` code points of `s`: a cut never falls inside a surrogate pair (an emoji). */
export const clipCodePoints = (s: string, max: number) => (s.length <= max ? s : Array.from(s).slice(0, max).join(''))

class StringSchema<T extends string = string> extends Schema<T> {
  min = 0
  max = Infinity
  re?: RegExp
  reText?: string
  choices?: readonly string[]
  fmt?: 'uuid' | 'date-time'
  trim = false

  length(min: number, max: number) {
    const c = this.clone()
    c.min = min
    c.max = max
    return c
  }
  pattern(re: RegExp, explain: string) {
    const c = this.clone()
    c.re = re
    c.reText = explain
    return c
  }
  oneOf<C extends string>(choices: readonly C[]): StringSchema<C> {
    const c = this.clone() as unknown as StringSchema<C>
    c.choices = choices
    return c
  }
  format(fmt: 'uuid' | 'date-time') {
    const c = this.clone()
    c.fmt = fmt
    return c
  }
  check(value: unknown, path: string, ctx: Ctx): T | undefined {
    if (typeof value !== 'string') return void add(ctx, path, `The ${label(path)} field must be a string.`)
    // (a body holding one is refused before this, as unreadable: what is left is a query's %00)
    if (value.includes('\0')) return void add(ctx, path, `The ${label(path)} field must not contain the NUL character.`)
    const n = codePoints(value)
    // a required text of only spaces is as empty as "" (a blank name, a message of spaces)
    if (this.min > 0 && value.trim() === '') return void add(ctx, path, `The ${label(path)} field must not be empty.`)
    if (n < this.min) return void add(ctx, path, `The ${label(path)} field must be at least ${this.min} characters.`)
    if (n > this.max) return void add(ctx, path, `The ${label(path)} field must not be longer than ${this.max} characters.`)
    if (this.choices && !this.choices.includes(value)) {
      return void add(ctx, path, `The ${label(path)} field must be one of: ${this.choices.join(', ')}.`)
    }
    if (this.fmt === 'uuid' && !UUID.test(value)) return void add(ctx, path, `The ${label(path)} field must be a UUID.`)
    if (this.fmt === 'date-time' && !isIsoTime(value)) {
      return void add(ctx, path, `The ${label(path)} field must be an ISO-8601 date-time with a time zone.`)
    }
    if (this.re && !this.re.test(value)) return void add(ctx, path, `The ${label(path)} field ${this.reText}.`)
    // UUIDs are read case-insensitively and stored lower-case (an upper-case id finds its row)
    return (this.fmt === 'uuid' ? value.toLowerCase() : value) as T
  }
  json(): Json {
    const j: Json = { type: 'string' }
    if (this.min > 0) j.minLength = this.min
    if (this.max !== Infinity) j.maxLength = this.max
    if (this.re) j.pattern = this.re.source
    if (this.choices) j.enum = [...this.choices]
    if (this.fmt) j.format = this.fmt
    return j
  }
}

export const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i

const ISO_TIME = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?(?:Z|[+-](\d{2}):(\d{2}))$/

/**
 * An ISO-8601 date-time with a time zone that names a real moment. The engine's `Date.parse`
 * rolls impossible dates over (2027-02-30 becomes March 2), so every part is range-checked here.
 */
export function isIsoTime(value: string): boolean {
  const m = ISO_TIME.exec(value)
  if (!m) return false
  // seconds and the offset are optional (absent: 0)
  const [year, month, day, hour, minute, second, offH, offM] = m.slice(1).map((p) => Number(p ?? 0)) as [number, number, number, number, number, number, number, number]
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0)
  const daysInMonth = month === 2 ? (leap ? 29 : 28) : [4, 6, 9, 11].includes(month) ? 30 : 31
  return month >= 1 && month <= 12 && day >= 1 && day <= daysInMonth && hour <= 23 && minute <= 59 && second <= 59 && offH <= 23 && offM <= 59
}

class NumberSchema extends Schema<number> {
  lo = -Infinity
  hi = Infinity
  constructor(readonly integer: boolean) {
    super()
  }
  range(lo: number, hi: number) {
    const c = this.clone()
    c.lo = lo
    c.hi = hi
    return c
  }
  check(value: unknown, path: string, ctx: Ctx): number | undefined {
    let n = value
    if (typeof n === 'string' && /^-?\d+(\.\d+)?$/.test(n.trim())) n = Number(n)
    const kind = this.integer ? 'an integer' : 'a number'
    const bounds = this.lo !== -Infinity && this.hi !== Infinity ? ` between ${this.lo} and ${this.hi}` : this.lo !== -Infinity ? ` of at least ${this.lo}` : ''
    if (typeof n !== 'number' || !Number.isFinite(n) || (this.integer && !Number.isInteger(n)) || n < this.lo || n > this.hi) {
      return void add(ctx, path, `The ${label(path)} field must be ${kind}${bounds}.`)
    }
    return n
  }
  json(): Json {
    const j: Json = { type: this.integer ? 'integer' : 'number' }
    if (this.lo !== -Infinity) j.minimum = this.lo
    if (this.hi !== Infinity) j.maximum = this.hi
    return j
  }
}

class BooleanSchema extends Schema<boolean> {
  check(value: unknown, path: string, ctx: Ctx): boolean | undefined {
    if (typeof value === 'boolean') return value
    if (value === 'true' || value === '1') return true
    if (value === 'false' || value === '0') return false
    return void add(ctx, path, `The ${label(path)} field must be true or false.`)
  }
  json(): Json {
    return { type: 'boolean' }
  }
}

type Shape = Record<string, Schema<any>>
type Out<S extends Shape> = { [K in keyof S]: S[K] extends Schema<infer T> ? T : never }

class ObjectSchema<S extends Shape> extends Schema<Out<S>> {
  constructor(readonly shape: S) {
    super()
  }
  check(value: unknown, path: string, ctx: Ctx): Out<S> | undefined {
    value = formKeyed(value)
    if (!isPlainObject(value)) return void add(ctx, path, `The ${label(path)} field must be an object.`)
    const out: Record<string, unknown> = {}
    let ok = true
    for (const [key, schema] of Object.entries(this.shape)) {
      const p = path ? `${path}.${key}` : key
      const v = (value as Json)[key]
      if (v === undefined) {
        if (!schema.isOptional) {
          add(ctx, p, `The ${p} field is required.`)
          ok = false
        }
        continue
      }
      if (v === null && schema.isNullable) {
        out[key] = null
        continue
      }
      const r = schema.check(v, p, ctx)
      if (r === undefined) ok = false
      else out[key] = r
    }
    return ok ? (out as Out<S>) : undefined
  }
  json(): Json {
    const properties: Json = {}
    const required: string[] = []
    for (const [key, schema] of Object.entries(this.shape)) {
      properties[key] = schema.toJsonSchema()
      if (!schema.isOptional) required.push(key)
    }
    return required.length ? { type: 'object', properties, required } : { type: 'object', properties }
  }
}

class ArraySchema<T> extends Schema<T[]> {
  maxItems = Infinity
  constructor(readonly items: Schema<T>) {
    super()
  }
  max(n: number) {
    const c = this.clone()
    c.maxItems = n
    return c
  }
  check(value: unknown, path: string, ctx: Ctx): T[] | undefined {
    // a form sends a one-element list as a plain object keyed "0"
    if (!Array.isArray(value)) return void add(ctx, path, `The ${label(path)} field must be a list.`)
    if (value.length > this.maxItems) return void add(ctx, path, `The ${label(path)} field must not have more than ${this.maxItems} items.`)
    const out: T[] = []
    let ok = true
    value.forEach((item, i) => {
      const r = item === undefined || item === null ? (add(ctx, `${path}.${i}`, `The ${path}.${i} field is required.`), undefined) : this.items.check(item, `${path}.${i}`, ctx)
      if (r === undefined) ok = false
      else out.push(r)
    })
    return ok ? out : undefined
  }
  json(): Json {
    const j: Json = { type: 'array', items: this.items.toJsonSchema() }
    if (this.maxItems !== Infinity) j.maxItems = this.maxItems
    return j
  }
}

/** Flat key/value metadata: string keys, scalar values (string, number, boolean). */
class MetadataSchema extends Schema<Record<string, string | number | boolean>> {
  constructor(
    readonly maxKeys: number,
    readonly maxKeyLength: number,
    readonly maxValueLength: number,
  ) {
    super()
  }
  check(value: unknown, path: string, ctx: Ctx) {
    value = formKeyed(value)
    if (!isPlainObject(value)) return void add(ctx, path, `The ${label(path)} field must be an object.`)
    const entries = Object.entries(value as Json)
    if (entries.length > this.maxKeys) return void add(ctx, path, `The ${label(path)} field must not have more than ${this.maxKeys} keys.`)
    // no prototype: a key such as `__proto__` is kept as the caller's key, not lost to a setter
    const out: Record<string, string | number | boolean> = Object.create(null)
    let ok = true
    for (const [k, v] of entries) {
      if (codePoints(k) > this.maxKeyLength || k.length === 0 || !/^[A-Za-z0-9_.\-]+$/.test(k)) {
        add(ctx, path, `The ${label(path)} keys must be 1 to ${this.maxKeyLength} letters, digits, dots, dashes or underscores.`)
        ok = false
      } else if (typeof v === 'string' ? codePoints(v) > this.maxValueLength : !(typeof v === 'boolean' || (typeof v === 'number' && Number.isFinite(v)))) {
        // reported under the field itself: a key is the caller's input and is never echoed back
        add(ctx, path, `Each value of the ${label(path)} field must be a string of at most ${this.maxValueLength} characters, a number or a boolean.`)
        ok = false
      } else if (typeof v === 'number' && Number.isInteger(v) && !Number.isSafeInteger(v)) {
        // 12345678901234567890 arrives as ...67000: refused rather than stored (and sent) changed
        add(ctx, path, `Whole numbers in the ${label(path)} field must be within ±${Number.MAX_SAFE_INTEGER} to be kept exactly; send longer ones (such as ids) as strings.`)
        ok = false
      } else out[k] = v as string | number | boolean
    }
    return ok ? out : undefined
  }
  json(): Json {
    return {
      type: 'object',
      maxProperties: this.maxKeys,
      additionalProperties: { anyOf: [{ type: 'string', maxLength: this.maxValueLength }, { type: 'number' }, { type: 'boolean' }] },
    }
  }
}

/** Accepts an uploaded file (multipart). */
class FileSchema extends Schema<File> {
  check(value: unknown, path: string, ctx: Ctx): File | undefined {
    if (value instanceof File) return value
    return void add(ctx, path, `The ${label(path)} field must be an uploaded file.`)
  }
  json(): Json {
    return { type: 'string', format: 'binary' }
  }
}

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof File)
}

export const s = {
  string: () => new StringSchema(),
  integer: () => new NumberSchema(true),
  number: () => new NumberSchema(false),
  boolean: () => new BooleanSchema(),
  object: <S extends Shape>(shape: S) => new ObjectSchema(shape),
  array: <T>(items: Schema<T>) => new ArraySchema(items),
  metadata: (maxKeys = 50, maxKeyLength = 64, maxValueLength = 1000) => new MetadataSchema(maxKeys, maxKeyLength, maxValueLength),
  file: () => new FileSchema(),
}

/** A multipart body with its object and list fields sent as JSON text read as what that text holds. */
function withJsonParts(schema: ObjectSchema<Shape>, input: unknown): unknown {
  if (!isPlainObject(input)) return input
  let out: Record<string, unknown> | null = null
  for (const [key, field] of Object.entries(schema.shape)) {
    if (!(field instanceof ObjectSchema || field instanceof ArraySchema || field instanceof MetadataSchema)) continue
    const parsed = jsonPart(input, input[key])
    if (parsed !== input[key]) (out ??= { ...input })[key] = parsed
  }
  return out ?? input
}

/** Validate `input` against an object schema; throws 422 validation_failed with every error. */
export function validate<S extends Shape>(schema: ObjectSchema<S>, input: unknown, extra?: (value: Out<S>, errors: FieldErrors) => void): Out<S> {
  const ctx: Ctx = { errors: {} }
  const value = schema.check(withJsonParts(schema, input ?? {}), '', ctx)
  if (value !== undefined && extra) extra(value, ctx.errors)
  if (value === undefined || Object.keys(ctx.errors).length > 0) throw validationFailed(ctx.errors)
  return value
}

/** Add one field error (for rules that span fields). */
export function fieldError(errors: FieldErrors, field: string, message: string) {
  ;(errors[field] ??= []).push(message)
}
