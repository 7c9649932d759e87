/**
 * Request validation: the house schema language (src/http/schema.ts) against TypeBox compiled
 * the way Elysia compiles a route's `t` schema (TypeCompiler), on POST /messages' body — a valid
 * one, and an invalid one whose errors must be turned into the contract's `errors` object. The
 * TypeBox schema is the same rules as far as TypeBox states them (it counts string lengths in
 * UTF-16 units, so the code-point limit is one more check after it). Reports validations per second.
 * Run: bun bench/validation.ts [milliseconds per case = 1500]
 */
import { Type as T } from '@sinclair/typebox'
import { TypeCompiler } from '@sinclair/typebox/compiler'
import { FormatRegistry } from '@sinclair/typebox'
import { sendMessageBody } from '../src/modules/messages/model'
import { E164 } from '../src/http/phone'
import { codePoints, UUID, validate } from '../src/http/schema'

const fmt = (n: number) => Math.round(n).toLocaleString('en-US')
const ms = Number(process.argv[2] ?? 1500)
FormatRegistry.Set('uuid', (v) => UUID.test(v))

const typebox = TypeCompiler.Compile(
  T.Object({
    connection_id: T.String({ format: 'uuid' }),
    recipient: T.Optional(T.String({ pattern: E164.source })),
    contact_id: T.Optional(T.String({ format: 'uuid' })),
    body: T.Optional(T.String({ minLength: 1, maxLength: 8192 })),
    template_id: T.Optional(T.String({ format: 'uuid' })),
    variables: T.Optional(T.Record(T.String({ maxLength: 3 }), T.Union([T.String({ maxLength: 1000 }), T.Number(), T.Boolean()]), { maxProperties: 50 })),
    media: T.Optional(T.Object({ attachments: T.Array(T.Object({ media_id: T.String({ format: 'uuid' }) }), { maxItems: 10 }) })),
  }),
)

/** TypeBox's answer in the contract's shape: field path → messages (a fixed text per rule). */
function typeboxValidate(body: unknown) {
  if (typebox.Check(body)) {
    const b = body as { body?: string }
    if (b.body !== undefined && codePoints(b.body) > 4096) return { errors: { body: ['must be at most 4096 characters'] } }
    return body
  }
  const errors: Record<string, string[]> = {}
  for (const e of typebox.Errors(body)) (errors[e.path.slice(1).replaceAll('/', '.') || 'body'] ??= []).push(e.message)
  return { errors }
}
function houseValidate(body: unknown) {
  try {
    return validate(sendMessageBody, body)
  } catch (e) {
    return e
  }
}

const valid = { connection_id: '0192e4a0-7b1c-7000-8000-000000000001', recipient: '+14155550100', body: 'Your order #1001 has shipped.' }
const invalid = { connection_id: 'nope', recipient: '14155550100', body: '', media: { attachments: [{ media_id: 'x' }] } }

function rate(fn: (b: unknown) => unknown, body: unknown) {
  for (let i = 0; i < 20_000; i++) fn(body)
  let n = 0
  const end = performance.now() + ms
  while (performance.now() < end) for (let i = 0; i < 1000; i++, n++) fn(body)
  return (n / ms) * 1000
}

for (const [label, body] of [['valid body', valid], ['invalid body (4 fields wrong)', invalid]] as const) {
  const house = rate(houseValidate, body)
  const tb = rate(typeboxValidate, body)
  console.log(`${label}: house ${fmt(house)}/s, TypeBox compiled ${fmt(tb)}/s (house/TypeBox ${(house / tb).toFixed(2)})`)
}
