/** Importing contacts in bulk (admin API and CLI): CSV and JSON, checked whole before anything is written. */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { migrate } from '../src/db/open'
import { parseCsv } from '../src/http/bulk'
import { databaseAtSchema } from './support/schema'
import { inProcess } from './support/inproc'
import { ADMIN_TOKEN, TestServer, hostEnv, newPhone } from './support/server'
import { storesOf } from './support/stores'

setDefaultTimeout(60_000)

let srv: TestServer
beforeAll(async () => {
  srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
})
afterAll(() => srv.close())

const upload = (wsId: string, csv: string | Uint8Array, token = ADMIN_TOKEN) => {
  const form = new FormData()
  form.set('file', new Blob([csv], { type: 'text/csv' }), 'contacts.csv')
  return srv.request('POST', `/admin/api/workspaces/${wsId}/contacts/import`, { bearer: token, multipart: form })
}
const contacts = async (key: string) => (await srv.api(key, 'GET', '/contacts?per_page=100')).json.data as any[]
const byPhone = async (key: string, phone: string) => (await contacts(key)).find((c) => c.phone === phone)

function ledger(phone: string) {
  const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
  try {
    return db.query('SELECT l.status, l.source FROM consent_ledger l JOIN contacts c ON c.id = l.contact_id WHERE c.phone = ? ORDER BY l.id').all(phone)
  } finally {
    db.close()
  }
}

describe('CSV', () => {
  test('creates and updates by phone like POST /contacts: consent only where given, each change in the ledger as admin:import, metadata columns, quoting', async () => {
    const { ws, key } = await srv.tenant()
    const [a, b, c] = [newPhone(), newPhone(), newPhone()]
    // b exists, opted in through the API, with a name and metadata
    await srv.api(key, 'POST', '/contacts', { json: { phone: b, name: 'Bea', consent_status: 'opted_in', metadata: { plan: 'free' } } })
    const hooks = await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: 'http://127.0.0.1:9/hook', events: ['contact.consent_changed'] })
    expect(hooks.status).toBe(201)
    const csv = ['\uFEFFPhone,name,consent_status,metadata.plan,metadata.city,metadata.__proto__', `${a},"Lovelace, Ada",Opted_In,pro,"London ""UK""",`, `${b},,,`, `${c},Cy,opted_out,,Paris,kept`, ''].join('\r\n')
    const r = await upload(ws.id, csv)
    expect([r.status, r.json]).toEqual([200, { data: { created: 2, updated: 1 } }])
    const got = await contacts(key)
    const one = (p: string) => got.find((x) => x.phone === p)
    expect([one(a).name, one(a).consent_status, one(a).metadata]).toEqual(['Lovelace, Ada', 'opted_in', { plan: 'pro', city: 'London "UK"' }])
    // empty cells leave a stored value as it was
    expect([one(b).name, one(b).consent_status, one(b).metadata]).toEqual(['Bea', 'opted_in', { plan: 'free' }])
    expect([one(c).name, one(c).consent_status, JSON.stringify(one(c).metadata)]).toEqual(['Cy', 'opted_out', '{"city":"Paris","__proto__":"kept"}'])
    expect(ledger(a)).toEqual([{ status: 'opted_in', source: 'admin:import' }])
    expect(ledger(b)).toEqual([{ status: 'opted_in', source: expect.stringMatching(/^api_key:/) }])
    expect(ledger(c)).toEqual([{ status: 'opted_out', source: 'admin:import' }])
    // announced like any consent change, and audited
    const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
    const events = db.query("SELECT payload FROM webhook_deliveries WHERE endpoint_id = ? AND type = 'contact.consent_changed'").all(hooks.json.data.id) as { payload: string }[]
    db.close()
    expect(events.map((e) => JSON.parse(e.payload).data.consent_change).sort((x: any, y: any) => x.to.localeCompare(y.to))).toEqual([
      { from: null, to: 'opted_in', source: 'admin:import' },
      { from: null, to: 'opted_out', source: 'admin:import' },
    ])
    expect((await srv.admin('GET', `/workspaces/${ws.id}/audit-log`)).json.data[0]).toMatchObject({ action: 'contacts.imported', subject_id: ws.id })
    // the imported opt-ins are a campaign's audience
    expect((await srv.api(key, 'POST', '/campaigns/audience/preview', { json: { audience: { metadata: { plan: 'pro' } } } })).json.data.count).toBe(1)
    // the same file again: all updated, nothing new in the ledger
    expect((await upload(ws.id, csv)).json).toEqual({ data: { created: 0, updated: 3 } })
    expect(ledger(a)).toHaveLength(1)
  })

  test('semicolons or tabs as a spreadsheet writes them, LF or CR line ends, a line break inside quotes', async () => {
    const { ws, key } = await srv.tenant()
    const [a, b] = [newPhone(), newPhone()]
    expect((await upload(ws.id, `phone;name\n${a};"Two\nLines"\n`)).json).toEqual({ data: { created: 1, updated: 0 } })
    expect((await upload(ws.id, `phone\tname\r${b}\tTab\r`)).json).toEqual({ data: { created: 1, updated: 0 } })
    expect([(await byPhone(key, a)).name, (await byPhone(key, b)).name]).toEqual(['Two\nLines', 'Tab'])
    expect(parseCsv('a,b\n"x\n""y""",z\n\nq,', ',')).toEqual([
      { line: 1, cells: ['a', 'b'] },
      { line: 2, cells: ['x\n"y"', 'z'] },
      { line: 5, cells: ['q', ''] },
    ])
  })

  test('one bad row refuses the whole import and changes nothing: each error names the file line and field; duplicates; bad headers', async () => {
    const { ws, key } = await srv.tenant()
    const [a, b] = [newPhone(), newPhone()]
    const bad = await upload(ws.id, `phone,name,consent_status\n${a},Ann,opted_in\nnot-a-phone,Bob,\n${b},Cy,maybe\n${a},Again,\n${b},x,opted_in,extra`)

    expect(bad.status).toBe(422)
    expect(bad.json.errors).toEqual({
      'rows.3.phone': ['The rows.3.phone field must be an E.164 phone number such as +14155550100.'],
      'rows.4.consent_status': ['The rows.4.consent_status field must be one of: unknown, opted_in, opted_out.'],
      'rows.5.phone': ['The same phone is on line 2 too; give each number once.'],
      'rows.6': ['Line 6 has more cells than the header has columns.'],
    })
    // nothing was written, not even the good first row; no input is echoed
    expect(await contacts(key)).toEqual([])
    expect(bad.text).not.toContain('not-a-phone')
    expect(bad.text).not.toContain('maybe')
    const refusals: [string, string][] = [
      ['', 'The file has no rows: a header line (phone, and name, consent_status or metadata.<key> columns if you like), then one contact per line.'],
      ['phone,name\n', 'The file has no rows: a header line (phone, and name, consent_status or metadata.<key> columns if you like), then one contact per line.'],
      [`name\nAnn`, 'The header has no phone column.'],
      [`phone,email\n${a},a@x`, 'Column 2 of the header is not one of phone, name, consent_status or metadata.<key> (metadata keys: 1 to 64 letters, digits, dots, dashes or underscores).'],
      [`phone,metadata.bad key\n${a},x`, 'Column 2 of the header is not one of phone, name, consent_status or metadata.<key> (metadata keys: 1 to 64 letters, digits, dots, dashes or underscores).'],
      [`phone,Phone\n${a},${a}`, 'Column 2 of the header names a column given before.'],
      [`phone,name\n${a},"Ann`, 'A quoted field opened on line 2 is never closed.'],
      [`phone,${Array.from({ length: 51 }, (_, i) => `metadata.k${i}`).join(',')}\n${a}`, 'The header has more than 50 metadata columns; a contact keeps at most 50 metadata keys.'],
    ]
    for (const [csv, message] of refusals) {
      const r = await upload(ws.id, csv)
      expect([csv, r.status, r.json.errors]).toEqual([csv, 422, { file: [message] }])
    }
    const latin1 = await upload(ws.id, new Uint8Array([...new TextEncoder().encode(`phone,name\n${a},Jos`), 0xe9]))
    expect([latin1.status, latin1.json.errors]).toEqual([422, { file: ['The file must be UTF-8 text (CSV).'] }])
    // a NUL character is no text either (PostgreSQL could not store it), in a metadata cell as anywhere
    const nul = await upload(ws.id, `phone,name,metadata.plan\n${a},Ann,pro\u0000`)
    expect([nul.status, nul.json.errors]).toEqual([422, { file: ['The file must be UTF-8 text (CSV).'] }])
    expect(await contacts(key)).toEqual([])
  })

  test('at most 100,000 rows per file; many bad rows list the first 100 errors', async () => {
    const { ws, key } = await srv.tenant()
    const rows = Array.from({ length: 100_001 }, (_, i) => `+1999${String(i).padStart(7, '0')}`)
    const big = await upload(ws.id, `phone\n${rows.join('\n')}`)
    expect([big.status, big.json.errors]).toEqual([422, { file: ['The file has more than 100000 rows; split it into several imports.'] }])
    const wrong = await upload(ws.id, `phone\n${Array.from({ length: 150 }, () => 'x').join('\n')}`)
    expect(wrong.status).toBe(422)
    expect(Object.keys(wrong.json.errors)).toHaveLength(101)
    expect(wrong.json.errors.more).toEqual(['50 more fields have errors; the first 100 are listed.'])
    expect(await contacts(key)).toEqual([])
  })
})

describe('national numbers', () => {
  test('with the workspace default country, numbers written without + are read in that country and stored in E.164; without it they are refused', async () => {
    const { ws, key } = await srv.tenant()
    const csv = 'phone,name\n030 1234567,Berlin\n+44 7911 123456,London\n0170-1234567,Mobile\n'
    const refused = await upload(ws.id, csv)
    expect([refused.status, Object.keys(refused.json.errors)]).toEqual([422, ['rows.2.phone', 'rows.4.phone']])
    const bad = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { contacts: { default_country: 'XX' } } })
    expect([bad.status, Object.keys(bad.json.errors)]).toEqual([422, ['settings.contacts.default_country']])
    expect((await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { contacts: { default_country: 'de' } } })).status).toBe(422)
    const set = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { contacts: { default_country: 'DE' } } })
    expect(set.json.data.settings.contacts).toEqual({ default_country: 'DE' })
    const done = await upload(ws.id, csv)
    expect([done.status, done.json.data]).toEqual([200, { created: 3, updated: 0 }])
    expect((await contacts(key)).map((c) => [c.phone, c.name]).sort()).toEqual([['+491701234567', 'Mobile'], ['+49301234567', 'Berlin'], ['+447911123456', 'London']].sort())
    // JSON rows too; a number that is no number of that country still names its row
    const json = await srv.request('POST', `/admin/api/workspaces/${ws.id}/contacts/import`, { bearer: ADMIN_TOKEN, json: { contacts: [{ phone: '089 12345678' }, { phone: '12' }] } })
    expect([json.status, Object.keys(json.json.errors)]).toEqual([422, ['contacts.1.phone']])
    expect((await srv.request('POST', `/admin/api/workspaces/${ws.id}/contacts/import`, { bearer: ADMIN_TOKEN, json: { contacts: [{ phone: '089 12345678' }] } })).json.data).toEqual({ created: 1, updated: 0 })
    expect(await byPhone(key, '+498912345678')).toBeDefined()
  })
})

describe('JSON', () => {
  test('{contacts: [...]} as POST /contacts takes them, typed metadata kept; errors name contacts.<index>.<field>', async () => {
    const { ws, key } = await srv.tenant()
    const [a, b] = [newPhone(), newPhone()]
    const ok = await srv.admin('POST', `/workspaces/${ws.id}/contacts/import`, { contacts: [{ phone: a, consent_status: 'opted_in', metadata: { tier: 3, vip: true } }, { phone: b, name: 'Bo' }] })
    expect([ok.status, ok.json]).toEqual([200, { data: { created: 2, updated: 0 } }])
    expect((await byPhone(key, a)).metadata).toEqual({ tier: 3, vip: true })
    expect((await srv.api(key, 'POST', '/campaigns/audience/preview', { json: { audience: { metadata: { tier: 3 } } } })).json.data.count).toBe(1)
    const bad = await srv.admin('POST', `/workspaces/${ws.id}/contacts/import`, { contacts: [{ phone: b, name: 'New' }, { phone: 'x' }, { phone: b }, { name: 'no phone' }] })
    expect([bad.status, bad.json.errors]).toEqual([
      422,
      {
        'contacts.1.phone': ['The contacts.1.phone field must be an E.164 phone number such as +14155550100.'],
        'contacts.2.phone': ['The same phone is on contact 0 too; give each number once.'],
        'contacts.3.phone': ['The contacts.3.phone field is required.'],
      },
    ])
    expect((await byPhone(key, b)).name).toBe('Bo')
    for (const [body, errors] of [
      [{ contacts: [] }, { contacts: ['The contacts field must list at least one contact.'] }],
      [{ contacts: 'x' }, { contacts: ['The contacts field must be a list.'] }],
      [{}, { file: ['Send a CSV file as the file field (multipart/form-data), or {"contacts": [...]} as JSON.'] }],
    ] as const) {
      const r = await srv.admin('POST', `/workspaces/${ws.id}/contacts/import`, body)
      expect([r.status, r.json.errors]).toEqual([422, errors])
    }
  })

  test('an unknown workspace is 404; without the admin token 401; an API key is no admin token', async () => {
    const { key } = await srv.tenant()
    const unknown = await srv.admin('POST', '/workspaces/01a1ff63-0299-755f-b4eb-ab8401901800/contacts/import', { contacts: [{ phone: newPhone() }] })
    expect([unknown.status, unknown.json.code]).toEqual([404, 'not_found'])
    const ws = await srv.workspace()
    expect((await upload(ws.id, `phone\n${newPhone()}`, 'wrong-token')).status).toBe(401)
    expect((await upload(ws.id, `phone\n${newPhone()}`, key)).status).toBe(401)
    expect((await srv.admin('GET', `/workspaces/${ws.id}/contacts`)).json.meta.total).toBe(0)
  })
})

describe('the CLI and the writes', () => {
  test('capstan contacts import --workspace ID FILE (CSV, or JSON by its .json name) prints what it did; a refusal prints the errors', async () => {
    const { ws, key } = await srv.tenant()
    const dir = srv.dataDir
    const [a, b] = [newPhone(), newPhone()]
    await Bun.write(join(dir, 'people.csv'), `phone,consent_status\n${a},opted_in\n`)
    await Bun.write(join(dir, 'people.json'), JSON.stringify({ contacts: [{ phone: b, metadata: { n: 1 } }] }))
    await Bun.write(join(dir, 'bad.csv'), `phone\nnope\n`)
    const run = async (...args: string[]) => {
      const p = Bun.spawn(['bun', 'src/main.ts', 'contacts', 'import', ...args], { cwd: join(import.meta.dir, '..'), env: { ...hostEnv(), CAPSTAN_URL: srv.base, CAPSTAN_ADMIN_TOKEN: ADMIN_TOKEN }, stdout: 'pipe', stderr: 'pipe' })
      return { code: await p.exited, out: await new Response(p.stdout).text(), err: await new Response(p.stderr).text() }
    }
    expect(await run('--workspace', ws.id, join(dir, 'people.csv'))).toEqual({ code: 0, out: 'created 1, updated 0\n', err: '' })
    expect(await run('--workspace', ws.id, join(dir, 'people.json'))).toEqual({ code: 0, out: 'created 1, updated 0\n', err: '' })
    expect((await byPhone(key, b)).metadata).toEqual({ n: 1 })
    const bad = await run('--workspace', ws.id, join(dir, 'bad.csv'))
    expect([bad.code, bad.err]).toEqual([1, expect.stringContaining('rows.2.phone')])
    const missing = await run('--workspace', ws.id, join(dir, 'none.csv'))
    expect([missing.code, missing.err]).toEqual([2, expect.stringContaining('cannot read')])
    expect((await run('--workspace', ws.id)).code).toBe(2)
  })

  test('written in slices with the server working between; counted right across slice boundaries', async () => {
    const env = await inProcess()
    try {
      const { svc } = env
      const ws = await svc.workspaces.create({ name: 'Slices' })
      await svc.contacts.upsert(ws.id, { phone: '+15550010003', name: 'Old' }, 'test')
      svc.contactImport.sliceSize = 2
      const rows = Array.from({ length: 5 }, (_, i) => ({ phone: `+1555001000${i}`, consent_status: 'opted_in' as const }))
      let turned = 0
      const tick = setInterval(() => turned++, 0)
      const done = await svc.contactImport.run(ws.id, rows)
      clearInterval(tick)
      expect(done).toEqual({ created: 4, updated: 1 })
      expect(turned).toBeGreaterThan(0)
      expect(await storesOf(svc).contacts.count(ws.id)).toBe(5)
      expect((await svc.contacts.getByPhone(ws.id, '+15550010003'))!.name).toBe('Old')
    } finally {
      await env.close()
    }
  })
})

describe('a do-not-contact list (suppressions)', () => {
  const uploadSuppressions = (wsId: string, csv: string) => {
    const form = new FormData()
    form.set('file', new Blob([csv], { type: 'text/csv' }), 'dnc.csv')
    return srv.request('POST', `/admin/api/workspaces/${wsId}/suppressions/import`, { bearer: ADMIN_TOKEN, multipart: form })
  }

  test('CSV or JSON: numbers added with their reason, one already on the list keeps its entry; a suppressed number is skipped by campaigns; bad rows change nothing', async () => {
    const { ws, key } = await srv.tenant()
    const [a, b, c] = [newPhone(), newPhone(), newPhone()]
    await srv.admin('POST', `/workspaces/${ws.id}/suppressions`, { phone: b, reason: 'complaint' })
    await srv.api(key, 'POST', '/contacts', { json: { phone: a, consent_status: 'opted_in' } })
    const r = await uploadSuppressions(ws.id, `Phone,Reason\n${a},"asked us, by phone"\n${b},imported\n${c},\n`)
    expect([r.status, r.json]).toEqual([200, { data: { added: 2, already: 1 } }])
    const listed = (await srv.admin('GET', `/workspaces/${ws.id}/suppressions`)).json.data
    expect(Object.fromEntries(listed.map((x: any) => [x.phone, x.reason]))).toEqual({ [a]: 'asked us, by phone', [b]: 'complaint', [c]: null })
    expect((await srv.api(key, 'POST', '/campaigns/audience/preview', { json: {} })).json.data.count).toBe(0)
    expect((await srv.admin('GET', `/workspaces/${ws.id}/audit-log`)).json.data[0]).toMatchObject({ action: 'suppressions.imported', subject_id: ws.id })
    const d = newPhone()
    const json = await srv.admin('POST', `/workspaces/${ws.id}/suppressions/import`, { suppressions: [{ phone: d, reason: 'legal' }, { phone: a }] })
    expect(json.json).toEqual({ data: { added: 1, already: 1 } })
    const bad = await uploadSuppressions(ws.id, `phone,reason\n${newPhone()},ok\nnope,\n${d},${'x'.repeat(501)}`)
    expect([bad.status, bad.json.errors]).toEqual([
      422,
      { 'rows.3.phone': ['The rows.3.phone field must be an E.164 phone number such as +14155550100.'], 'rows.4.reason': ['The rows.4.reason field must not be longer than 500 characters.'] },
    ])
    const wrongColumn = await uploadSuppressions(ws.id, `phone,name\n${newPhone()},x`)
    expect(wrongColumn.json.errors).toEqual({ file: ['Column 2 of the header is not one of phone or reason.'] })
    expect((await srv.admin('GET', `/workspaces/${ws.id}/suppressions`)).json.meta.total).toBe(4)
  })

  test('capstan suppressions import --workspace ID FILE', async () => {
    const { ws } = await srv.tenant()
    const file = join(srv.dataDir, 'dnc.csv')
    await Bun.write(file, `phone\n${newPhone()}\n${newPhone()}\n`)
    const p = Bun.spawn(['bun', 'src/main.ts', 'suppressions', 'import', '--workspace', ws.id, file], { cwd: join(import.meta.dir, '..'), env: { ...hostEnv(), CAPSTAN_URL: srv.base, CAPSTAN_ADMIN_TOKEN: ADMIN_TOKEN }, stdout: 'pipe', stderr: 'pipe' })
    expect([await p.exited, await new Response(p.stdout).text()]).toEqual([0, 'added 2, already on the list 0\n'])
  })

  test("a page of the list, newest first, reads its index and the count kept per workspace (added, imported, removed); an upgraded database starts from the rows it has", async () => {
    const env = await inProcess()
    try {
      const { svc, db, clock } = env
      const [a, b] = [await svc.workspaces.create({ name: 'A' }), await svc.workspaces.create({ name: 'B' })]
      const page = (ws: string) => svc.suppressions.list(ws, 3, 0)
      const rows = (ws: string) => (db.query('SELECT COUNT(*) AS n FROM suppressions WHERE workspace_id = ?').get(ws) as { n: number }).n
      expect((await page(a.id)).total).toBe(0)
      await svc.suppressions.add(a.id, '+15550007001', null)
      clock.t += 1000
      await svc.suppressions.add(a.id, '+15550007001', 'again') // already there: no new row
      expect(await svc.suppressions.importRows(a.id, [{ phone: '+15550007003' }, { phone: '+15550007002' }, { phone: '+15550007001' }])).toEqual({ added: 2, already: 1 })
      await svc.suppressions.add(b.id, '+15550007001', null)
      await svc.suppressions.remove(a.id, '+15550007003')
      const p = await page(a.id)
      expect([p.total, (await page(b.id)).total]).toEqual([2, 1])
      expect([p.total, (await page(b.id)).total]).toEqual([rows(a.id), rows(b.id)])
      expect(p.rows.map((r) => r.phone)).toEqual(['+15550007002', '+15550007001'])
      const plan = db.query('EXPLAIN QUERY PLAN SELECT * FROM suppressions WHERE workspace_id = ? ORDER BY created_at DESC, phone LIMIT 3 OFFSET 0').all('x') as { detail: string }[]
      expect(plan.map((r) => r.detail)).toEqual(['SEARCH suppressions USING INDEX suppressions_newest (workspace_id=?)'])

      const dir = mkdtempSync(join(tmpdir(), 'capstan-suppression-counts-'))
      const old = databaseAtSchema(join(dir, 'capstan.db'), 34)
      try {
        const add = old.query("INSERT INTO suppressions (workspace_id, phone, created_at) VALUES (?, ?, 0)")
        for (let i = 0; i < 3; i++) add.run('w1', `+1555000800${i}`)
        add.run('w2', '+15550008000')
        expect(migrate(old)[0]).toBe(35)
        expect(old.query('SELECT workspace_id, n FROM suppression_counts ORDER BY workspace_id').all()).toEqual([{ workspace_id: 'w1', n: 3 }, { workspace_id: 'w2', n: 1 }])
      } finally {
        old.close()
        rmSync(dir, { recursive: true, force: true })
      }
    } finally {
      await env.close()
    }
  })
})

describe('every contact as CSV', () => {
  test('the columns the import reads, one per metadata key; quoted and formula-guarded cells; imported into another workspace it gives the same contacts', async () => {
    const { ws, key } = await srv.tenant()
    const [a, b, c] = [newPhone(), newPhone(), newPhone()].sort()
    await srv.api(key, 'POST', '/contacts', { json: { phone: b, name: '=HYPERLINK("x")', consent_status: 'opted_in', metadata: { plan: 'pro', note: 'says "hi", twice\nand again' } } })
    await srv.api(key, 'POST', '/contacts', { json: { phone: a, name: 'Ada', consent_status: 'opted_out', metadata: { city: '-Paris' } } })
    await srv.api(key, 'POST', '/contacts', { json: { phone: c } })
    const r = await fetch(`${srv.base}/admin/api/workspaces/${ws.id}/contacts.csv`, { headers: { authorization: `Bearer ${ADMIN_TOKEN}` } })
    expect([r.status, r.headers.get('content-type'), r.headers.get('content-disposition')]).toEqual([200, 'text/csv; charset=utf-8', `attachment; filename="contacts-${ws.slug}.csv"`])
    const text = await r.text()
    expect(text).toBe(
      [
        'phone,name,consent_status,metadata.city,metadata.note,metadata.plan',
        `${a},Ada,opted_out,'-Paris,,`,
        `${b},"'=HYPERLINK(""x"")",opted_in,,"says ""hi"", twice\nand again",pro`,
        `${c},,unknown,,,`,
        '',
      ].join('\r\n'),
    )
    expect((await srv.admin('GET', `/workspaces/${ws.id}/audit-log`)).json.data[0]).toMatchObject({ action: 'contacts.exported', subject_id: ws.id })
    // into another workspace, as it is
    const other = await srv.tenant()
    expect((await upload(other.ws.id, text)).json).toEqual({ data: { created: 3, updated: 0 } })
    const pick = (list: any[]) => list.map((x) => [x.phone, x.name, x.consent_status, x.metadata]).sort((x, y) => x[0].localeCompare(y[0]))
    expect(pick(await contacts(other.key))).toEqual(pick(await contacts(key)))
    // the CLI writes the file as it arrives
    const p = Bun.spawn(['bun', 'src/main.ts', 'contacts', 'csv', '--workspace', ws.id], { cwd: join(import.meta.dir, '..'), env: { ...hostEnv(), CAPSTAN_URL: srv.base, CAPSTAN_ADMIN_TOKEN: ADMIN_TOKEN }, stdout: 'pipe', stderr: 'pipe' })
    expect([await p.exited, await new Response(p.stdout).text()]).toEqual([0, text])
    expect((await srv.request('GET', `/admin/api/workspaces/${ws.id}/contacts.csv`, { bearer: key })).status).toBe(401)
  })

  test('both walks go a slice at a time with the server working between', async () => {
    const env = await inProcess()
    try {
      const { svc } = env
      const ws = await svc.workspaces.create({ name: 'Walk' })
      const rows = Array.from({ length: 4_500 }, (_, i) => ({ phone: `+1555002${String(i).padStart(4, '0')}`, metadata: (i === 4_499 ? { last: 'yes' } : {}) as Record<string, string> }))
      await svc.contactImport.run(ws.id, rows)
      let turned = 0
      const tick = setInterval(() => turned++, 0)
      const csv = await new Response(await svc.contactList.export(ws.id)).text()
      clearInterval(tick)
      const lines = csv.trim().split('\r\n')
      // the key of the last contact only, found by the first walk
      expect([lines.length, lines[0], lines.at(-1)]).toEqual([4_501, 'phone,name,consent_status,metadata.last', '+15550024499,,unknown,yes'])
      expect(turned).toBeGreaterThan(2)
    } finally {
      await env.close()
    }
  })
})
