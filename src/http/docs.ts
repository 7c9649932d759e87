/**
 * OpenAPI descriptions for routes, built from the same schemas that validate input.
 * `op()` returns an Elysia `detail` object: summary, the required scope (in the text and as
 * `x-required-scope`), request body in all three accepted encodings, parameters, and the
 * contract's error responses.
 */
import { MAX_CSV_ROWS, MAX_JSON_ROWS } from './bulk'
import type { Schema } from './schema'
import { Kind, type Static, type TProperties, type TSchema, Type as t } from '@sinclair/typebox'

type Json = Record<string, unknown>

const errorSchema = {
  type: 'object',
  required: ['message', 'code'],
  properties: {
    message: { type: 'string', description: 'Human-readable, never echoes input.' },
    code: { type: 'string', description: 'Stable snake_case name.' },
    errors: { type: 'object', additionalProperties: { type: 'array', items: { type: 'string' } }, description: 'On validation_failed: messages keyed by field (dot paths).' },
  },
}

const ERROR_TEXT: Record<number, string> = {
  400: 'bad_request: the request could not be read.',
  401: 'unauthenticated: "A valid API bearer token is required."',
  403: 'workspace_unavailable: "The API key workspace is unavailable." or insufficient_scope: "The API key does not have the required scope."',
  404: 'not_found: the named resource does not exist in this workspace.',
  409: 'idempotency_conflict / idempotency_in_progress, or a state conflict.',
  413: 'payload_too_large: the body is over the limit.',
  416: 'The Range asked for lies outside the file (Content-Range: bytes */<size>); no body.',
  422: 'validation_failed (with errors), invalid_idempotency_key, or a refusal code.',
  429: 'rate_limited: "The API key rate limit has been reached." or auth_rate_limited: "Too many invalid API bearer attempts." No Retry-After.',
  500: 'backup_failed: the backup could not be written (the message says why); nothing half-written is kept.',
  502: 'network_error: the number\'s network could not be reached or refused the request.',
  503: 'scanner_unavailable: the malware scanner cannot be reached.',
  431: "The request's headers are too large (the HTTP server's limit, ~16 KiB together); answered before any route, with no body and the connection closed.",
  507: "storage_full: the server's disk is full; the write was rolled back and nothing was stored.",
}

/** The 503 of an installation on PostgreSQL (CAPSTAN_DATABASE_URL) while its database cannot be reached. */
const DATABASE_AWAY = 'database_unavailable: the PostgreSQL database cannot be reached or takes no writes right now (installations with CAPSTAN_DATABASE_URL; a failover under way); nothing was stored, try again shortly.'

/** An error status's response: the contract's error body. */
const errorResponse = (description: string) => ({ description, content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } })

/** Answered by the HTTP server itself, before any route: no JSON body. */
const NO_BODY = new Set([416, 431])

/** Both documents' `info.license`. */
export const DOC_LICENSE = { name: 'Proprietary', identifier: 'LicenseRef-Proprietary' }

export const DOC_COMPONENTS = {
  securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'cap_<key_id>.<48-character secret>' } },
  schemas: { Error: errorSchema },
}

const pageMeta = {
  type: 'object',
  properties: { page: { type: 'integer' }, per_page: { type: 'integer' }, total: { type: 'integer' }, last_page: { type: 'integer' } },
}

/**
 * A response schema with every property of every object `required`: a public record always
 * carries all its fields (null when empty), so generated clients need not test each one. An
 * object that lists its own `required` (a field sent only sometimes) keeps its list. Returns a
 * copy: the shapes are shared between operations and webhooks.
 */
export function requireAll(schema: unknown): unknown {
  if (Array.isArray(schema)) return schema.map(requireAll)
  if (!schema || typeof schema !== 'object') return schema
  const out: Json = {}
  for (const [k, v] of Object.entries(schema as Json)) {
    if (k === 'properties') out[k] = Object.fromEntries(Object.entries(v as Json).map(([name, s]) => [name, requireAll(s)]))
    else if (k === 'items' || k === 'anyOf' || k === 'oneOf' || k === 'allOf' || (k === 'additionalProperties' && typeof v === 'object')) out[k] = requireAll(v)
    else out[k] = v
  }
  // a shape written with `d` says itself which fields are optional
  if (out.properties && !out.required && !(Kind in schema)) out.required = Object.keys(out.properties as Json)
  return out
}

export interface OpOptions {
  summary: string
  description?: string
  tag: string
  scope?: string
  body?: Schema<any>
  /** The body may carry files: documented as multipart only for those fields' sake. */
  query?: Schema<any>
  params?: readonly string[]
  /** status → response data schema (wrapped in {data}) or a description only */
  ok: { status: number; data?: Json; list?: boolean; description: string; headers?: Json; binary?: boolean; csv?: boolean }
  /** Other success statuses answered with the same body (POST /contacts: 200 on an update). */
  alsoOk?: readonly { status: number; description: string; headers?: Json }[]
  errors?: readonly number[]
  idempotent?: boolean
  /** A request body described by hand (an import: a CSV file or a JSON list), in place of `body`. */
  requestBody?: Json
  /** Body fields the schema does not list but the route reads (a driver's free-form config). */
  bodyExtra?: Record<string, Json>
  /** The operation writes though it takes no body (so it may answer 507). */
  writes?: boolean
}

export function op(o: OpOptions) {
  const scopeText = o.scope ? `\n\nRequired scope: \`${o.scope}\`.` : ''
  const responses: Json = {}
  const okBody = o.ok.data ? requireAll(o.ok.list ? { type: 'object', properties: { data: { type: 'array', items: o.ok.data }, meta: pageMeta } } : { type: 'object', properties: { data: o.ok.data } }) : undefined
  const rateHeaders = o.scope
    ? { 'X-RateLimit-Limit': { schema: { type: 'integer' } }, 'X-RateLimit-Remaining': { schema: { type: 'integer' } }, ...(o.ok.headers ?? {}) }
    : o.ok.headers
  // a file's bytes in its own type: no JSON to parse
  const content = okBody ? { 'application/json': { schema: okBody } } : o.ok.binary ? { '*/*': { schema: { type: 'string', format: 'binary' } } } : o.ok.csv ? { 'text/csv': { schema: { type: 'string' } } } : undefined
  for (const { status, description, headers } of [o.ok, ...(o.alsoOk ?? [])]) {
    const all = rateHeaders || headers ? { ...rateHeaders, ...headers } : undefined
    responses[String(status)] = { description, ...(content ? { content } : {}), ...(all ? { headers: all } : {}) }
  }
  // any write may find the disk full (507); reads never write
  const writes = o.writes ?? (o.body !== undefined || o.requestBody !== undefined || o.idempotent || [201, 202, 204].includes(o.ok.status))
  // and any operation may find PostgreSQL away (several instances on one database: 503)
  const codes = new Set([...(o.scope ? [401, 403, 429] : []), 431, 503, ...(writes ? [507] : []), ...(o.errors ?? [])])
  for (const c of [...codes].sort()) {
    const text = c === 503 ? (o.errors?.includes(503) ? `${ERROR_TEXT[503]} Or ${DATABASE_AWAY}` : DATABASE_AWAY[0]!.toUpperCase() + DATABASE_AWAY.slice(1)) : ERROR_TEXT[c]
    responses[String(c)] = NO_BODY.has(c) ? { description: text } : errorResponse(text ?? 'Error')
  }
  const parameters: Json[] = []
  for (const p of o.params ?? []) parameters.push({ name: p, in: 'path', required: true, schema: { type: 'string' } })
  if (o.query) {
    const q = o.query.toJsonSchema() as { properties?: Record<string, Json>; required?: string[] }
    for (const [name, schema] of Object.entries(q.properties ?? {})) {
      const { description, ...rest } = schema as Json
      parameters.push({ name, in: 'query', required: q.required?.includes(name) ?? false, schema: rest, ...(description ? { description } : {}) })
    }
  }
  if (o.idempotent) {
    parameters.push({
      name: 'Idempotency-Key',
      in: 'header',
      required: false,
      schema: { type: 'string', minLength: 8, maxLength: 255, pattern: '^[A-Za-z0-9._:-]+$' },
      description: 'Same key and body within 24 h replays the stored response (Idempotency-Replayed: true); a different body answers 409.',
    })
  }
  const detail: Json = {
    summary: o.summary,
    description: (o.description ?? '') + scopeText,
    tags: [o.tag],
    responses,
    ...(o.scope ? { security: [{ bearer: [] }], 'x-required-scope': o.scope } : {}),
    ...(parameters.length ? { parameters } : {}),
  }
  if (o.requestBody) detail.requestBody = o.requestBody
  if (o.body) {
    const schema = o.body.toJsonSchema()
    if (o.bodyExtra) schema.properties = { ...(schema.properties as Json), ...o.bodyExtra }
    // the fields holding an object or a list: in a form they are written with bracket names
    // (deepObject: metadata[plan]=pro, media[attachments][0][media_id]=…); in a multipart body
    // either so or as one part of JSON text
    const nested = Object.entries((schema.properties ?? {}) as Record<string, Json>)
      .filter(([, p]) => holdsStructure(p))
      .map(([name]) => name)
    const form = nested.length ? { encoding: Object.fromEntries(nested.map((n) => [n, { style: 'deepObject', explode: true }])) } : {}
    const multipart = nested.length ? { encoding: Object.fromEntries(nested.map((n) => [n, { contentType: 'application/json' }])) } : {}
    detail.requestBody = {
      required: true,
      content: { 'application/json': { schema }, 'application/x-www-form-urlencoded': { schema, ...form }, 'multipart/form-data': { schema, ...multipart } },
    }
  }
  return detail
}

/**
 * Response shapes, written once with TypeBox (the one Elysia's `t` is built on; its plain
 * builders, since `t.Integer` also admits numeric strings, which suits a query, not an answer): each is the JSON Schema the
 * documents publish and, through `Shape<typeof x>` (TypeBox's `Static`), the type the module's
 * `toPublic`/`toAdmin` must return, so the two cannot drift (docs/operations.md, "Health and docs"). A
 * property is required unless wrapped in `d.optional`; `d.nullable` is the field that is sent as
 * null when empty. `d.oneOf` and `d.map` write their JSON Schema by hand (`enum`,
 * `additionalProperties`) so the document stays as plain as it reads, typed all the same.
 */
export type Shape<S extends TSchema> = Static<S>
type Described = { description?: string }
export const d = {
  string: (description?: string) => t.String(description ? { description } : {}),
  uuid: t.String({ format: 'uuid' }),
  time: t.String({ format: 'date-time' }),
  integer: t.Integer(),
  number: t.Number(),
  boolean: t.Boolean(),
  /** A string from a fixed list (with `null` in the list, a nullable one). */
  oneOf: <const V extends readonly (string | null)[]>(values: V, o: Described = {}) =>
    t.Unsafe<V[number]>({ type: values.includes(null) ? ['string', 'null'] : 'string', enum: [...values], ...o }),
  nullable: <S extends TSchema>(schema: S, o: Described = {}) => t.Union([schema, t.Null()], o),
  list: <S extends TSchema>(items: S, o: Described = {}) => t.Array(items, o),
  object: <P extends TProperties>(properties: P, o: Described = {}) => t.Object(properties, o),
  optional: <S extends TSchema>(schema: S) => t.Optional(schema),
  /** Always this value. */
  constant: <const V extends string | boolean>(value: V, o: Described = {}) => t.Literal(value, o),
  /** An object of any keys whose values are all `values`. */
  map: <S extends TSchema>(values: S, o: Described = {}) => t.Unsafe<Record<string, Static<S>>>({ type: 'object', additionalProperties: values, ...o }),
  /** An object the document does not spell out (a driver's settings, a stored audience). */
  anyObject: (o: Described = {}) => t.Unsafe<Record<string, unknown>>({ type: 'object', ...o }),
  /** The same shape with its own description. */
  described: <S extends TSchema>(schema: S, description: string): S => ({ ...schema, description }),
}

/** An import's body: a CSV file (multipart field `file`, a header row naming `columns`) or `{<list>: [rows]}` as JSON. */
export function importBody(list: string, row: TSchema, columns: string) {
  return {
    required: true,
    content: {
      'application/json': { schema: d.object({ [list]: t.Array(row, { minItems: 1, maxItems: MAX_JSON_ROWS }) }) },
      'multipart/form-data': { schema: d.object({ file: t.String({ format: 'binary', description: `UTF-8 CSV with a header row: ${columns}; at most ${MAX_CSV_ROWS} rows.` }) }) },
    },
  }
}

/** Where an admin route keeps its operation (its `detail` is hidden from /openapi.json). */
export const ADMIN_OPERATION = 'x-capstan-admin-operation'

const ADMIN_ERRORS: Record<number, string> = {
  401: 'unauthenticated: the admin token (or a dashboard session) is required.',
  403: 'csrf_failed: a dashboard session changing state without the X-Capstan-CSRF header.',
  429: 'auth_rate_limited: too many invalid admin tokens from this address.',
}

export type AdminOpOptions = Omit<OpOptions, 'scope' | 'params'>

/**
 * An /admin/api route's operation for the admin API document (GET /admin/openapi.json): the same
 * shape as `op()`, with the admin token as its security and the path parameters taken from the
 * route itself when the document is built.
 */
export function adminOp(o: AdminOpOptions) {
  const detail = op(o) as Json
  const responses = detail.responses as Json
  for (const [code, description] of Object.entries(ADMIN_ERRORS)) responses[code] = errorResponse(description)
  detail.security = [{ adminToken: [] }]
  return { hide: true, [ADMIN_OPERATION]: detail }
}

/** The admin API document from the app's routes: each /admin/api route with an `adminOp`. */
export function adminDocument(routes: readonly { method: string; path: string; hooks?: { detail?: Json } }[], version: string): Json {
  const paths: Record<string, Json> = {}
  for (const r of routes) {
    const operation = r.hooks?.detail?.[ADMIN_OPERATION] as Json | undefined
    if (!operation) continue
    const names = [...r.path.matchAll(/:(\w+)/g)].map((m) => m[1]!)
    const template = r.path.replace(/:(\w+)/g, '{$1}')
    const method = r.method.toLowerCase()
    const parameters = [...names.map((name) => ({ name, in: 'path', required: true, schema: { type: 'string' } })), ...((operation.parameters as Json[] | undefined) ?? [])]
    const camel = template.replace(/[{}]/g, '').split(/[^A-Za-z0-9]+/).filter(Boolean).map((w) => w[0]!.toUpperCase() + w.slice(1)).join('')
    ;(paths[template] ??= {})[method] = { operationId: `${method}${camel}`, ...operation, ...(parameters.length ? { parameters } : {}) }
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Capstan Admin API',
      version,
      license: DOC_LICENSE,
      description:
        'The operator\'s API, which the dashboard and the `capstan` admin commands use: workspaces, API keys, connected numbers, webhooks, suppressions, backups and the dashboard\'s views. Every request needs `Authorization: Bearer <CAPSTAN_ADMIN_TOKEN>` (the dashboard signs in with it and then uses a session cookie plus `X-Capstan-CSRF: 1` on writes). Errors are JSON `{message, code}`, plus `errors` on validation failures.',
    },
    servers: [{ url: '/' }],
    components: {
      securitySchemes: { adminToken: { type: 'http', scheme: 'bearer', description: 'The admin token (CAPSTAN_ADMIN_TOKEN, or the one printed at first start).' } },
      schemas: { Error: errorSchema },
    },
    paths,
  }
}

/** Whether a property's schema is an object or a list (possibly nullable). */
function holdsStructure(p: Json): boolean {
  if (p.type === 'object' || p.type === 'array') return true
  return Array.isArray(p.anyOf) && (p.anyOf as Json[]).some(holdsStructure)
}

/** Hidden from the OpenAPI document (admin, health, docs routes). */
export const hidden = { hide: true } as const
