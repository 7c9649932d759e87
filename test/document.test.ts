/**
 * The API document as outside tools see it: Redocly's linter finds nothing in it; requests
 * generated from its own request schemas (fast-check) on every operation never meet a 5xx, and
 * every answer is a status the operation documents with a body its schema accepts (TestServer
 * checks each one against /openapi.json); the checker itself catches a body that breaks the
 * document.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { copyFileSync, cpSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import fc from 'fast-check'
import { DocumentedResponses } from './support/documented'
import { scanningServer } from './support/clamd'
import { ADMIN_TOKEN, type TestServer, newPhone } from './support/server'

setDefaultTimeout(120_000)

const ROOT = join(import.meta.dir, '..')
type Json = Record<string, any>

let srv: TestServer
let close: () => Promise<void>
let doc: Json
let adminDoc: Json
let key: string
let ids: Record<string, string[]>

beforeAll(async () => {
  // uploads scanned by a real clamd, so the media operations reach their success paths too
  ;({ srv, close } = await scanningServer({ CAPSTAN_KEY_RATE_LIMIT: '10000000', CAPSTAN_LOG_LEVEL: 'warn' }))
  doc = (await srv.request('GET', '/openapi.json')).json
  const t = await srv.tenant()
  key = t.key
  const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
  await srv.admin('PUT', `/connections/${conn.id}/sandbox/groups`, { groups: [{ external_id: 'g', name: 'G', participants: ['+447900000009'], announce: false, admin: true }] })
  await srv.api(key, 'POST', '/groups/sync')
  const contact = (await srv.api(key, 'POST', '/contacts', { json: { phone: '+14155550199', consent_status: 'opted_in' } })).json.data
  const template = (await srv.api(key, 'POST', '/templates', { json: { name: 'T', body: 'Hi {{name}}' } })).json.data
  const form = new FormData()
  form.set('file', new File(['hello document'], 'note.txt', { type: 'text/plain' }))
  const media = (await srv.api(key, 'POST', '/media', { multipart: form })).json.data
  const message = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'x' } })).json.data
  const campaign = (await srv.api(key, 'POST', '/campaigns', { json: { name: 'C', template_id: template.id, connection_id: conn.id } })).json.data
  const group = (await srv.api(key, 'GET', '/groups')).json.data[0]
  const webhook = (await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: 'http://127.0.0.1:9/hook' })).json.data
  adminDoc = (await srv.request('GET', '/admin/openapi.json')).json
  // each id position gets real ids of its kind, or some other real id, or an unknown one
  ids = {
    connection_id: [conn.id],
    contact_id: [contact.id],
    template_id: [template.id],
    media_id: [media.id],
    message: [message.id],
    campaign: [campaign.id],
    group: [group.id],
    media: [media.id],
    workspace: [t.ws.id],
    connection: [conn.id],
    key: [t.keyId],
    webhook: [webhook.id],
  }
})
afterAll(() => close())

/** Stands for a file field: sent as a real text file in multipart, left out of other encodings. */
const A_FILE = Symbol('a file')

/** Values a field's schema allows (mostly), and now and then one it does not. */
function arbitrary(schema: Json, name = '', depth = 0): fc.Arbitrary<unknown> {
  if (schema.anyOf) return fc.oneof(...(schema.anyOf as Json[]).map((s) => arbitrary(s, name, depth)))
  if (schema.enum) return fc.oneof({ weight: 9, arbitrary: fc.constantFrom(...(schema.enum as unknown[])) }, { weight: 1, arbitrary: fc.string({ maxLength: 8 }) })
  if (schema.const !== undefined) return fc.constant(schema.const)
  const known = ids[name]
  switch (schema.type) {
    case 'string': {
      if (schema.format === 'binary') return fc.constant(A_FILE)
      if (schema.format === 'uuid') return fc.oneof({ weight: 6, arbitrary: fc.constantFrom(...(known ?? Object.values(ids).flat())) }, { weight: 1, arbitrary: fc.uuid() })
      if (schema.format === 'date-time') return fc.date({ min: new Date('2020-01-01'), max: new Date('2035-01-01'), noInvalidDate: true }).map((d) => d.toISOString())
      if (name === 'recipient' || name === 'phone') return fc.oneof({ weight: 4, arbitrary: fc.integer({ min: 0, max: 9999 }).map((n) => `+1415555${String(n).padStart(4, '0')}`) }, { weight: 1, arbitrary: fc.stringMatching(/^\+[1-9][0-9]{6,14}$/) })
      const examples = (schema.examples as string[] | undefined) ?? []
      const max = Math.min(schema.maxLength ?? 40, 40)
      const text = schema.pattern ? fc.stringMatching(new RegExp(schema.pattern)).filter((s) => s.length <= (schema.maxLength ?? Infinity)) : fc.string({ minLength: schema.minLength ?? 0, maxLength: Math.max(max, schema.minLength ?? 0) })
      return examples.length ? fc.oneof(fc.constantFrom(...examples), text) : text
    }
    case 'integer':
      // near the lower bound, where most limits bite
      return fc.integer({ min: schema.minimum ?? -5, max: Math.min(schema.maximum ?? Infinity, (schema.minimum ?? 0) + 200) })
    case 'number':
      return fc.double({ noNaN: true, min: -1e6, max: 1e6 })
    case 'boolean':
      return fc.boolean()
    case 'array':
      return depth > 4 ? fc.constant([]) : fc.array(arbitrary(schema.items ?? {}, '', depth + 1), { maxLength: Math.min(schema.maxItems ?? 3, 3) })
    case 'object': {
      if (depth > 4) return fc.constant({})
      if (schema.properties) {
        const props = Object.fromEntries(Object.entries(schema.properties as Json).map(([k, s]) => [k, arbitrary(s as Json, k, depth + 1)]))
        return fc.record(props, { requiredKeys: ((schema.required as string[] | undefined) ?? []).filter((k) => k in props) }).map((o) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)))
      }
      const values = schema.additionalProperties && typeof schema.additionalProperties === 'object' ? arbitrary(schema.additionalProperties, '', depth + 1) : fc.string({ maxLength: 8 })
      return fc.dictionary(fc.stringMatching(/^[a-z0-9_]{1,8}$/), values, { maxKeys: 3 })
    }
  }
  return fc.anything({ maxDepth: 1 })
}

/** A nested value as form fields with bracket names (the document's deepObject encoding). */
function brackets(value: unknown, prefix: string, out: [string, string][]) {
  if (value === A_FILE) return
  if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) brackets(v, `${prefix}[${k}]`, out)
  } else out.push([prefix, String(value)])
}

interface Operation {
  method: string
  template: string
  op: Json
}

/** The document's operations, deletions last (so the others still find what they name). */
const operations = (document: Json): Operation[] =>
  Object.entries(document.paths as Json)
    .flatMap(([template, item]) => Object.entries(item as Json).map(([method, op]) => ({ method: method.toUpperCase(), template, op: op as Json })))
    .sort((a, b) => Number(a.method === 'DELETE') - Number(b.method === 'DELETE'))

/** A concrete path for a template: each {id} a real id of the path's kind (or another's, or none). */
function pathArbitrary(template: string): fc.Arbitrary<string> {
  // /api/v1/<kind>s/{id} and /admin/api/<kind>s/{id} alike
  const kind = template.split('/')[3]!.replace(/s$/, '')
  const candidates = [...(ids[kind] ?? []), ...Object.values(ids).flat(), crypto.randomUUID()]
  return fc.record({ id: fc.constantFrom(...candidates), media: fc.constantFrom(...ids.media!, crypto.randomUUID()), phone: fc.constantFrom('+14155550199', '+14155550100', 'not-a-number') }).map((p) =>
    template.replace('{id}', p.id).replace('{mediaId}', p.media).replace('{phone}', encodeURIComponent(p.phone)),
  )
}

type Send = (method: string, path: string, o: Parameters<TestServer['request']>[2]) => ReturnType<TestServer['request']>

/**
 * Requests generated from a document's own schemas, 40 per operation (JSON, deepObject forms and
 * multipart; real ids in most id positions), each answer checked against the document by
 * TestServer. Fails on a 5xx; asserts every operation was reached and most were answered with success.
 */
async function generatedRun(document: Json, send: Send) {
  const reached = new Map<string, Set<number>>()
  for (const { method, template, op } of operations(document)) {
    // (an upload is documented as multipart only)
    const content = (op.requestBody?.content ?? {}) as Json
    const bodySchema = (content['application/json'] ?? content['multipart/form-data'])?.schema as Json | undefined
    const query = ((op.parameters ?? []) as Json[]).filter((p) => p.in === 'query')
    const queryArb = fc.record(Object.fromEntries(query.map((p) => [p.name, arbitrary(p.schema, p.name)])), { requiredKeys: [] })
    const request = fc.record({
      path: template.includes('{') ? pathArbitrary(template) : fc.constant(template),
      query: queryArb,
      body: bodySchema ? arbitrary(bodySchema) : fc.constant(undefined),
      encoding: fc.constantFrom('json', 'json', 'form', 'multipart'),
    })
    const samples = fc.sample(request, { numRuns: 40, seed: 20261125 + template.length })
    for (const r of samples) {
      const qs = new URLSearchParams(Object.entries(r.query as Json).filter(([, v]) => v !== undefined).map(([k, v]): [string, string] => [k, String(v)])).toString()
      const url = `${r.path}${qs ? `?${qs}` : ''}`
      let res
      const fileField = Object.entries((r.body ?? {}) as Json).find(([, v]) => v === A_FILE)?.[0]
      const encoding = fileField && r.encoding !== 'form' ? 'multipart' : r.encoding
      if (r.body === undefined || encoding === 'json') res = await send(method, url, r.body === undefined ? {} : { json: r.body })
      else {
        const fields: [string, string][] = []
        for (const [k, v] of Object.entries(r.body as Json)) brackets(v, k, fields)
        if (encoding === 'form') res = await send(method, url, { raw: new URLSearchParams(fields).toString(), headers: { 'content-type': 'application/x-www-form-urlencoded' } })
        else {
          const form = new FormData()
          for (const [k, v] of fields) form.append(k, v)
          if (fileField) form.append(fileField, new File([`generated ${Math.random()}`], 'generated.txt', { type: 'text/plain' }))
          res = await send(method, url, { multipart: form })
        }
      }
      expect([method, template, res.status < 500]).toEqual([method, template, true])
      const seen = reached.get(`${method} ${template}`) ?? new Set<number>()
      seen.add(res.status)
      reached.set(`${method} ${template}`, seen)
    }
  }
  // every operation was reached, and most of them were also answered with success at least once
  expect([...reached.keys()].sort()).toEqual(operations(document).map((o) => `${o.method} ${o.template}`).sort())
  const succeeded = [...reached.values()].filter((statuses) => [...statuses].some((s) => s < 300)).length
  expect(succeeded).toBeGreaterThan(reached.size / 2)
}

describe('the API document', () => {
  test.each(['/openapi.json', '/admin/openapi.json'])('Redocly CLI (pinned in devDependencies) finds no error and no warning in %s', async (path) => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-lint-'))
    try {
      writeFileSync(join(dir, 'openapi.json'), JSON.stringify(path === '/openapi.json' ? doc : adminDoc))
      const run = Bun.spawnSync(['bun', '--bun', join(ROOT, 'node_modules/@redocly/cli/bin/cli.js'), 'lint', join(dir, 'openapi.json'), '--format=summary'], { cwd: dir, stdout: 'pipe', stderr: 'pipe', env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true' } })
      const out = run.stdout.toString() + run.stderr.toString()
      expect({ exit: run.exitCode, problems: out.match(/^(error|warning) .*$/gm) ?? [] }).toEqual({ exit: 0, problems: [] })
      expect(out).toContain('Your API description is valid')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('the response check catches a body the document does not allow: a required field missing, a wrong type, an undocumented status', () => {
    const checker = new DocumentedResponses(doc, 'unit')
    const path = `/api/v1/messages/${crypto.randomUUID()}`
    expect(checker.problems('GET', path, 404, 'application/json', JSON.stringify({ message: 'The message was not found.', code: 'not_found' }))).toEqual([])
    expect(checker.problems('GET', path, 404, 'application/json', JSON.stringify({ message: 'x' })).join()).toContain("must have required property 'code'")
    expect(checker.problems('GET', path, 200, 'application/json', JSON.stringify({ data: { id: 'not-a-uuid' } })).length).toBeGreaterThan(0)
    expect(checker.problems('GET', path, 418, 'application/json', '{}').join()).toContain('status not documented')
    // what the document does not describe is not judged: another method, another path
    expect(checker.problems('DELETE', path, 405, 'application/json', '{}')).toEqual([])
  })

  test('every response object lists its fields as required, and outcome.error has its shape', () => {
    const message = doc.paths['/api/v1/messages/{id}'].get.responses['200'].content['application/json'].schema
    expect(message.required).toEqual(['data'])
    expect(message.properties.data.required).toContain('outcome')
    const error = message.properties.data.properties.outcome.properties.error.anyOf.find((s: Json) => s.type === 'object')
    expect(error.required).toEqual(['code', 'message'])
    expect(doc.paths['/api/v1/contacts'].post.responses['200']).toBeDefined()
    expect(Object.keys(doc.paths['/api/v1/media/{id}/download'].get.responses)).toEqual(expect.arrayContaining(['200', '206', '416', '431']))
  })

  test('requests generated from the document on every operation: no 5xx, every answer documented', async () => {
    await generatedRun(doc, (method, path, o) => srv.request(method, path, { ...o, bearer: key }))
  })

  test("the document's response shapes are the types toPublic returns: a record that drifts from its shape does not compile", () => {
    // what the project's own typecheck (CI) does to a module whose record and document disagree
    const dir = mkdtempSync(join(tmpdir(), 'capstan-drift-'))
    try {
      const contact = `{ id: 'c', phone: '+14155550100', name: null, consent_status: 'unknown', metadata: {}, created_at: 't', updated_at: 't', last_activity_at: 't' }`
      const lines = [
        `import type { PublicContact } from '${join(ROOT, 'src/modules/contacts/model')}'`,
        `import type { EventData } from '${join(ROOT, 'src/modules/webhooks/docs')}'`,
        `export const whole = (): PublicContact => (${contact})`,
        `export const missing = (): PublicContact => ({ ...${contact}, last_activity_at: undefined })`,
        `export const extra = (): PublicContact => ({ ...${contact}, nickname: 'x' })`,
        `export const unlisted = (): PublicContact => ({ ...${contact}, consent_status: 'maybe' })`,
        `export const nullTime = (): PublicContact => ({ ...${contact}, created_at: null })`,
        `export const event = (): EventData['contact.consent_changed'] => ({ ...${contact}, consent_change: { from: null, to: 'opted_in', source: 'api_key:k' } })`,
        `export const eventWithout = (): EventData['contact.consent_changed'] => (${contact})`,
      ]
      writeFileSync(join(dir, 'drift.ts'), lines.join('\n') + '\n')
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({ compilerOptions: { target: 'ESNext', module: 'ESNext', moduleResolution: 'bundler', lib: ['ESNext'], typeRoots: [join(ROOT, 'node_modules/@types')], types: ['bun'], strict: true, skipLibCheck: true, noEmit: true }, files: ['drift.ts'] }),
      )
      const tsc = Bun.spawnSync([join(ROOT, 'node_modules/.bin/tsc'), '-p', 'tsconfig.json'], { cwd: dir, stdout: 'pipe', stderr: 'pipe' })
      const out = tsc.stdout.toString()
      // each error names drift.ts(line,…): only the drifted records, and none in the project itself
      const failing = [...out.matchAll(/^drift\.ts\((\d+),/gm)].map((m) => lines[Number(m[1]) - 1]!.split(' ')[2])
      expect(out.split('\n').filter((l) => /^\S+\(\d+,\d+\): error/.test(l) && !l.startsWith('drift.ts'))).toEqual([])
      expect([...new Set(failing)]).toEqual(['missing', 'extra', 'unlisted', 'nullTime', 'eventWithout'])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('a client generated with openapi-typescript and driven by openapi-fetch compiles under strict TypeScript (noUncheckedIndexedAccess) and works first time', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-client-'))
    try {
      // openapi-typescript needs TypeScript 5's compiler API (the project's own tsc is TypeScript 7,
      // which has none): a private node_modules where its `typescript` is the typescript5 alias
      const modules = join(dir, 'node_modules')
      mkdirSync(modules)
      cpSync(join(ROOT, 'node_modules/openapi-typescript'), join(modules, 'openapi-typescript'), { recursive: true })
      symlinkSync(join(ROOT, 'node_modules/typescript5'), join(modules, 'typescript'))
      for (const name of readdirSync(join(ROOT, 'node_modules'))) {
        if (name !== 'openapi-typescript' && name !== 'typescript' && name !== '.bin') symlinkSync(join(ROOT, 'node_modules', name), join(modules, name))
      }
      writeFileSync(join(dir, 'openapi.json'), JSON.stringify(doc))
      // a file field (format: binary) as Blob, the generator's documented recipe for uploads
      writeFileSync(
        join(dir, 'generate.ts'),
        `import ts from 'typescript'
import openapiTS, { astToString } from 'openapi-typescript'
const blob = ts.factory.createTypeReferenceNode(ts.factory.createIdentifier('Blob'))
const ast = await openapiTS(await Bun.file('openapi.json').json(), { transform: (s) => (s.format === 'binary' ? blob : undefined) })
await Bun.write('api.d.ts', astToString(ast))
`,
      )
      const gen = Bun.spawnSync(['bun', 'generate.ts'], { cwd: dir, stdout: 'pipe', stderr: 'pipe' })
      expect([gen.exitCode, gen.stderr.toString()]).toEqual([0, ''])
      copyFileSync(join(ROOT, 'test/client/integrator.ts'), join(dir, 'integrator.ts'))
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({ compilerOptions: { target: 'ESNext', module: 'ESNext', moduleResolution: 'bundler', lib: ['ESNext', 'DOM'], types: [], strict: true, noUncheckedIndexedAccess: true, exactOptionalPropertyTypes: true, noEmit: true }, files: ['integrator.ts'] }),
      )
      const tsc = Bun.spawnSync([join(ROOT, 'node_modules/.bin/tsc'), '-p', 'tsconfig.json'], { cwd: dir, stdout: 'pipe', stderr: 'pipe' })
      expect([tsc.exitCode, tsc.stdout.toString()]).toEqual([0, ''])
      // no casts, no non-null assertions and no optional chaining in the client: the types carry it
      const source = readFileSync(join(ROOT, 'test/client/integrator.ts'), 'utf8').replace(/\/\*[\s\S]*?\*\/|\/\/.*$/gm, '')
      expect(source.match(/\sas\s+(?!const\b)\w|\?\.|\w!\.|\w!\)/g)).toBeNull()

      // and it runs against the server: a sandbox number to send through, a contact, a message, a file
      const ws = (await srv.request('GET', '/api/v1/workspace', { bearer: key })).json.data
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1445'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
      const { tour } = (await import(join(dir, 'integrator.ts'))) as { tour: (base: string, key: string, connectionId: string, phone: string) => Promise<Json> }
      const result = await tour(srv.base, key, conn.id, '+14155550142')
      expect(result).toMatchObject({ contactStatus: 201, queued: 'queued', mediaType: 'text/plain', downloaded: 'receipt #1001', read: { id: result.messageId, errorCode: null } })
      // (released at once or still waiting: the number is new and idle)
      expect(['pending', 'sent']).toContain(result.read.state)
      expect(result.read.timeline[0]).toBe('queued')
      expect(result.listed).toBeGreaterThan(0)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test('the admin API document: every /admin/api route of the source is in it, each behind the admin token; /docs offers it', async () => {
    // each `admin: true` route declares an adminOp (a static count of the source: a route added
    // without one shows up here)
    const glob = new Bun.Glob('src/**/*.ts')
    let declared = 0
    for await (const file of glob.scan(ROOT)) if (!file.endsWith('workspace-ops.ts')) declared += (readFileSync(join(ROOT, file), 'utf8').match(/admin: true,/g) ?? []).length
    // and the workspace operations served on both APIs (http/workspace-ops.ts), one admin route each
    const { templateOps } = await import('../src/modules/templates/routes')
    const { campaignOps } = await import('../src/modules/campaigns/routes')
    const none = {} as Parameters<typeof templateOps>[0]
    declared += templateOps(none).length + campaignOps(none).length
    const ops = operations(adminDoc)
    expect(ops.length).toBe(declared)
    for (const { method, template, op } of ops) {
      expect([method, template, op.security]).toEqual([method, template, [{ adminToken: [] }]])
      expect(template.startsWith('/admin/api/')).toBe(true)
      expect(Object.keys(op.responses)).toEqual(expect.arrayContaining(['401', '429']))
    }
    expect(adminDoc.components.securitySchemes.adminToken).toMatchObject({ type: 'http', scheme: 'bearer' })
    const init = await (await fetch(`${srv.base}/docs/init.js`)).text()
    expect(init).toContain('/admin/openapi.json')
    expect((await srv.request('GET', '/docs')).text).toContain('href="/docs?api=admin"')
  })

  // last: it changes the workspace, its keys and numbers at random
  test('requests generated from the admin document on every admin operation: no 5xx, every answer documented', async () => {
    await generatedRun(adminDoc, (method, path, o) => srv.request(method, path, { ...o, bearer: ADMIN_TOKEN }))
  })
})
