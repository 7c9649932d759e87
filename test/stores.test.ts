/**
 * The modules' stores on both engines (docs/design/two-engines.md): one test body per store, run
 * on the embedded SQLite file and on a private PostgreSQL — rows come back as they were written,
 * a write's statements land together, the dialect differences (GREATEST/MAX, bytes) give the same
 * answers. Stores move onto the seam one by one; each that has comes here.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { stmt, UniqueViolation, type Engine } from '../src/db/engine'
import { AuditRepo, auditIn } from '../src/modules/audit/repo'
import { type KeyRow, KeyStore } from '../src/modules/keys/store'
import { MediaRecordStore, type MediaRow } from '../src/modules/media/records'
import { SuppressionStore } from '../src/modules/suppressions/store'
import { type TemplateRow, TemplateStore } from '../src/modules/templates/store'
import { type WorkspaceRow, WorkspaceStore } from '../src/modules/workspaces/store'
import { SharedWindows } from '../src/http/limits'
import { ENGINES, type EngineName, migratedEngines, workspace } from './support/engines'

setDefaultTimeout(60_000)

let engines: Record<EngineName, Engine>
let stop: () => Promise<void>
beforeAll(async () => {
  ;({ engines, stop } = await migratedEngines())
})
afterAll(() => stop())

const AUDIT = stmt('SELECT workspace_id, action, key_id, subject_id, at FROM audit_log WHERE workspace_id = ? ORDER BY id')


const key = (workspaceId: string, over: Partial<KeyRow> = {}): KeyRow => ({
  id: crypto.randomUUID(),
  workspace_id: workspaceId,
  key_id: crypto.randomUUID().replaceAll('-', '').slice(0, 16),
  secret_hash: new Uint8Array(Array.from({ length: 32 }, (_, i) => (i * 37 + 255) % 256)),
  name: 'shop backend — ✓',
  scopes: '["contacts:read"]',
  status: 'active',
  created_at: 1_764_000_000_123,
  expires_at: null,
  revoked_at: null,
  allowed_ips: '["10.0.0.0/8"]',
  ...over,
})

describe.each(ENGINES)('keys on %s', (name) => {
  test('a key comes back as it went in, by its key id and by its id; a second with the same key id is refused and leaves nothing', async () => {
    const engine = engines[name]
    const store = new KeyStore(engine)
    const ws = await workspace(engine)
    const row = key(ws, { expires_at: 1_900_000_000_000 })
    await engine.write((tx) => store.insert(tx, row))
    const read = (await store.byKeyId(row.key_id))!
    expect({ ...read, secret_hash: [...read.secret_hash] }).toEqual({ ...row, secret_hash: [...row.secret_hash], last_used_at: null })
    expect((await store.get(row.id))!.key_id).toBe(row.key_id)
    expect(await store.byKeyId('nothing-like-it0')).toBeNull()
    const twin = key(ws, { key_id: row.key_id })
    await expect(engine.write((tx) => store.insert(tx, twin))).rejects.toBeInstanceOf(UniqueViolation)
    expect(await store.get(twin.id)).toBeNull()
  })

  test('revoking once changes the key, twice nothing; a last use only ever moves later; the list is newest first; a removed key is gone', async () => {
    const engine = engines[name]
    const store = new KeyStore(engine)
    const ws = await workspace(engine)
    const older = key(ws, { created_at: 1000 })
    const newer = key(ws, { created_at: 2000 })
    await engine.write(async (tx) => {
      await store.insert(tx, older)
      await store.insert(tx, newer)
    })
    expect((await store.listForWorkspace(ws)).map((k) => k.id)).toEqual([newer.id, older.id])
    expect(await engine.write((tx) => store.revoke(tx, older.id, 5000))).toBe(true)
    expect(await engine.write((tx) => store.revoke(tx, older.id, 6000))).toBe(false)
    expect(await store.get(older.id)).toMatchObject({ status: 'revoked', revoked_at: 5000 })
    await engine.write((tx) => store.used(tx, newer.id, 7000))
    await engine.write((tx) => store.used(tx, newer.id, 6500)) // an instance that saw an earlier use
    expect((await store.get(newer.id))!.last_used_at).toBe(7000)
    await engine.write((tx) => store.remove(tx, older.id))
    expect((await store.listForWorkspace(ws)).map((k) => k.id)).toEqual([newer.id])
  })

  test("a key's audit entry is written in the key's write, or not at all", async () => {
    const engine = engines[name]
    const store = new KeyStore(engine)
    const ws = await workspace(engine)
    const row = key(ws)
    await engine.write(async (tx) => {
      await store.insert(tx, row)
      await auditIn(tx, ws, 'api_key.created', row.id, 42)
    })
    const failing = key(ws)
    await expect(
      engine.write(async (tx) => {
        await store.insert(tx, failing)
        await auditIn(tx, ws, 'api_key.created', failing.id, 43)
        throw new Error('refused after both were written')
      }),
    ).rejects.toThrow('refused after both')
    expect(await store.get(failing.id)).toBeNull()
    expect(await engine.all(AUDIT, ws)).toEqual([{ workspace_id: ws, action: 'api_key.created', key_id: row.id, subject_id: null, at: 42 }])
  })
})

describe.each(ENGINES)('audit log on %s', (name) => {
  test('newest first, a page at a time, with the total; only the workspace’s own', async () => {
    const engine = engines[name]
    const log = new AuditRepo(engine)
    const ws = await workspace(engine)
    const other = await workspace(engine)
    await engine.write(async (tx) => {
      for (let i = 0; i < 5; i++) await auditIn(tx, ws, 'webhook.updated', null, 100 + i, `hook-${i}`)
      await auditIn(tx, other, 'webhook.removed', null, 1)
    })
    const page = await log.list(ws, 2, 1)
    expect(page.total).toBe(5)
    expect(page.rows.map((r) => [r.subject_id, r.at, r.workspace_id])).toEqual([
      ['hook-3', 103, ws],
      ['hook-2', 102, ws],
    ])
    expect(typeof page.rows[0]!.id).toBe('number')
    // one kind of action, or one action; `_` in a kind is no pattern
    await engine.write(async (tx) => {
      await auditIn(tx, ws, 'api_key.created', null, 200)
      await auditIn(tx, ws, 'webhook.removed', null, 201)
    })
    const kinds = async (action: string) => {
      const r = await log.list(ws, 10, 0, action)
      return [r.total, r.rows.map((x) => x.action)]
    }
    expect(await kinds('webhook')).toEqual([6, ['webhook.removed', ...Array(5).fill('webhook.updated')]])
    expect(await kinds('webhook.removed')).toEqual([1, ['webhook.removed']])
    expect(await kinds('api_key')).toEqual([1, ['api_key.created']])
    expect(await kinds('api')).toEqual([0, []])
    expect(await kinds('contact')).toEqual([0, []])
  })
})

describe.each(ENGINES)('workspaces on %s', (name) => {
  test('a workspace comes back as written, by id and slug; a taken slug is refused; an update changes what it names; pages are newest first with the total', async () => {
    const engine = engines[name]
    const store = new WorkspaceStore(engine)
    const before = (await store.list(1000, 0)).total
    const row = (i: number): WorkspaceRow => ({ id: crypto.randomUUID(), name: `Ünïcode ${i} 🚀`, slug: `store-test-${name}-${i}`, status: 'active', settings: '{"message_allowance":10}', created_at: 2_000_000_000_000 + i, updated_at: 2_000_000_000_000 + i })
    const [a, b] = [row(1), row(2)]
    await engine.write(async (tx) => {
      await store.insert(tx, a)
      await store.insert(tx, b)
    })
    expect(await store.get(a.id)).toEqual(a)
    expect(await store.bySlug(b.slug)).toEqual(b)
    await expect(engine.write((tx) => store.insert(tx, { ...row(3), slug: a.slug }))).rejects.toBeInstanceOf(UniqueViolation)
    // written only over the row it was made from: one read before another change (of its name, status or settings) changes nothing
    for (const read of [{ ...a, name: 'Earlier' }, { ...a, status: 'inactive' as const }, { ...a, settings: '{"x":1}' }])
      expect(await engine.write((tx) => store.update(tx, { ...read, name: 'Stale', updated_at: 2 }, read))).toBe(false)
    expect(await engine.write((tx) => store.update(tx, { ...a, name: 'Renamed', status: 'inactive', settings: '{}', updated_at: 3, slug: 'ignored' }, a))).toBe(true)
    expect(await store.get(a.id)).toEqual({ ...a, name: 'Renamed', status: 'inactive', settings: '{}', updated_at: 3 })
    const page = await store.list(2, 0)
    expect(page.total).toBe(before + 2)
    expect(page.rows.map((r) => r.id)).toEqual([b.id, a.id])
    expect((await store.all()).map((r) => r.id)).toEqual(expect.arrayContaining([a.id, b.id]))
  })
})

describe.each(ENGINES)('suppressions on %s', (name) => {
  test('a number is on the list once; an import keeps the first entry; pages newest first with the kept count; only the workspace’s own', async () => {
    const engine = engines[name]
    const store = new SuppressionStore(engine)
    const [ws, other] = [await workspace(engine), await workspace(engine)]
    await engine.write((tx) => store.insert(tx, { workspace_id: ws, phone: '+15550001001', reason: 'asked', created_at: 10 }))
    await expect(engine.write((tx) => store.insert(tx, { workspace_id: ws, phone: '+15550001001', reason: null, created_at: 11 }))).rejects.toBeInstanceOf(UniqueViolation)
    const added = await engine.write(async (tx) => {
      const results = []
      for (const phone of ['+15550001001', '+15550001002', '+15550001003']) results.push(await store.insertNew(tx, { workspace_id: ws, phone, reason: null, created_at: 20 }))
      results.push(await store.insertNew(tx, { workspace_id: other, phone: '+15550001001', reason: null, created_at: 30 }))
      return results
    })
    expect(added).toEqual([false, true, true, true])
    expect(await store.get(ws, '+15550001001')).toEqual({ workspace_id: ws, phone: '+15550001001', reason: 'asked', created_at: 10 })
    const page = await store.list(ws, 2, 0)
    expect([page.total, page.rows.map((r) => r.phone)]).toEqual([3, ['+15550001002', '+15550001003']])
    expect(await engine.write((tx) => store.remove(tx, ws, '+15550001002'))).toBe(true)
    expect(await engine.write((tx) => store.remove(tx, ws, '+15550001002'))).toBe(false)
    expect((await store.list(ws, 10, 0)).total).toBe(2)
    expect((await store.list(other, 10, 0)).total).toBe(1)
  })
})

describe.each(ENGINES)('templates on %s', (name) => {
  test('a template comes back as written; an update changes what it names; a removed one is gone from reads and pages; linked ones are found; pages newest first', async () => {
    const engine = engines[name]
    const store = new TemplateStore(engine)
    const ws = await workspace(engine)
    const tpl = (i: number, whatsapp: string | null = null): TemplateRow => ({ id: crypto.randomUUID(), workspace_id: ws, name: `T${i}`, body: `Hi {{name}} — ${i} ✓`, category: 'utility', variables: '["name"]', whatsapp, imported: null, created_at: 100 + i, updated_at: 100 + i, deleted_at: null })
    const [a, b, c] = [tpl(1), tpl(2, '{"name":"order_update","language":"en"}'), tpl(3)]
    await engine.write(async (tx) => {
      for (const t of [a, b, c]) await store.insert(tx, t)
    })
    expect(await store.get(ws, b.id)).toEqual(b)
    expect(await store.get(crypto.randomUUID(), b.id)).toBeNull()
    expect((await store.linked(ws)).map((t) => t.id)).toEqual([b.id])
    // written only over the template it was made from: one read before another change changes nothing
    for (const read of [{ ...a, name: 'Other' }, { ...a, body: 'Other' }, { ...a, category: 'marketing' as const }, { ...a, whatsapp: '{}' }, { ...a, imported: '["y"]' }])
      expect(await engine.write((tx) => store.update(tx, { ...read, name: 'Stale', updated_at: 400 }, read))).toBe(false)
    expect(await engine.write((tx) => store.update(tx, { ...a, name: 'Renamed', category: 'marketing', imported: '["x"]', updated_at: 500 }, a))).toBe(true)
    expect(await store.get(ws, a.id)).toMatchObject({ name: 'Renamed', category: 'marketing', imported: '["x"]', updated_at: 500, created_at: 101 })
    await engine.write((tx) => store.remove(tx, c.id, 600))
    expect(await store.get(ws, c.id)).toBeNull()
    const page = await store.list(ws, 10, 0)
    expect([page.total, page.rows.map((t) => t.id)]).toEqual([2, [b.id, a.id]])
    expect([await store.activeUses(a.id), await store.scheduledWithMedia(a.id)]).toEqual([0, 0])
  })
})

describe.each(ENGINES)('media records on %s', (name) => {
  test('records by workspace; the expired ones nothing queued still sends; references per file; bytes kept, per workspace and in all', async () => {
    const engine = engines[name]
    const store = new MediaRecordStore(engine)
    const ws = await workspace(engine)
    const blob = (c: string) => c.repeat(64)
    const rec = (over: Partial<MediaRow>): MediaRow => ({ id: crypto.randomUUID(), workspace_id: ws, sha256: blob('a'), blob: blob('a'), filename: 'menü.pdf', mime_type: 'application/pdf', size: 1000, created_at: 1, expires_at: 10_000, ...over })
    const [kept, old, queuedFor, shared] = [rec({ size: 3_000_000_000 }), rec({ expires_at: 50, blob: blob('b') }), rec({ expires_at: 50, blob: blob('c') }), rec({ expires_at: 50 })]
    const conn = crypto.randomUUID()
    await engine.write(async (tx) => {
      for (const r of [kept, old, queuedFor, shared]) await store.insert(tx, r)
      await tx.run(stmt("INSERT INTO connections (id, workspace_id, phone, name, driver, status, status_reason, receives, config, warmup, created_at, updated_at, deleted_at) VALUES (?, ?, '+15550001111', NULL, 'sandbox', 'online', NULL, 1, '{}', NULL, 0, 0, NULL)"), conn, ws)
      // a message still waiting to send one of them keeps it past its time
      await tx.run(stmt("INSERT INTO messages (id, workspace_id, connection_id, direction, status, attachments, created_at, updated_at) VALUES (?, ?, ?, 'outbound', 'queued', ?, 0, 0)"), crypto.randomUUID(), ws, conn, JSON.stringify([queuedFor.id]))
    })
    expect(await store.get(ws, kept.id)).toEqual(kept)
    // the operators' list: newest first (ties by id), counted, only the workspace's own
    const page = await store.list(ws, 10, 0)
    expect([page.total, page.rows.map((r) => r.id)]).toEqual([4, [kept, old, queuedFor, shared].map((r) => r.id).sort().reverse()])
    expect((await store.list(ws, 2, 3)).rows.length).toBe(1)
    expect(await store.list(crypto.randomUUID(), 10, 0)).toEqual({ rows: [], total: 0 })
    expect(await store.get(crypto.randomUUID(), kept.id)).toBeNull()
    expect((await store.expired(100, 10)).map((r) => r.id).sort()).toEqual([old.id, shared.id].sort())
    expect([await store.references(blob('a')), await store.references(blob('b')), await store.references(blob('z'))]).toEqual([2, 1, 0])
    expect(await store.bytesUsed(ws, 100)).toBe(3_000_000_000)
    expect((await store.bytesPerWorkspace(100)).find((r) => r.workspace_id === ws)).toEqual({ workspace_id: ws, n: 3_000_000_000 })
    expect(await engine.write((tx) => store.expire(tx, ws, kept.id, 99))).toBe(true)
    expect(await engine.write((tx) => store.expire(tx, ws, kept.id, 99))).toBe(false)
    await engine.write((tx) => store.remove(tx, old.id))
    expect((await store.expired(100, 10)).map((r) => r.id).sort()).toEqual([kept.id, shared.id].sort())
  })
})

describe.each(ENGINES)('request windows counted in the database on %s', (name) => {
  test('hits arriving together are counted by one statement, each in its own place; a window that ended starts again; names are apart', async () => {
    const engine = engines[name]
    let now = 1_000_000
    const windows = new SharedWindows(engine, `t${crypto.randomUUID().slice(0, 8)}`, 5, 60_000, () => now)
    // one turn: three hits of a, one of b; the next turn two more of a
    expect(await Promise.all([windows.hit('a'), windows.hit('b'), windows.hit('a'), windows.hit('a')])).toEqual([4, 4, 3, 2])
    expect(await Promise.all([windows.hit('a'), windows.hit('a'), windows.hit('a')])).toEqual([1, 0, -1])
    expect(await windows.exceeded('a')).toBe(true)
    expect(await windows.exceeded('b')).toBe(false)
    now += 60_000
    expect(await windows.exceeded('a')).toBe(false)
    expect(await Promise.all([windows.hit('a'), windows.hit('a')])).toEqual([4, 3])
  })

  test('places ahead: a name hit often counts places ahead with its hits, asks for the next before they run out, and hands them out without a statement; unused ones go back; a new window voids them', async () => {
    const engine = engines[name]
    let now = 2_000_000
    const kind = `p${crypto.randomUUID().slice(0, 8)}`
    const windows = new SharedWindows(engine, kind, 6400, 60_000, () => now, true)
    const n = async () => Number((await engine.get<{ n: number }>(stmt('SELECT n FROM rate_windows WHERE subject = ?'), `${kind}:a`))!.n)
    // what was asked for at the end of a turn has come back
    const asked = async () => {
      for (let i = 0; i < 3; i++) await new Promise((r) => setImmediate(r))
      await Bun.sleep(30)
    }
    try {
      expect(await windows.hit('a')).toBe(6399) // first count: nothing ahead
      now += 10
      expect(await windows.hit('a')).toBe(6398) // counted again within a second: one place ahead
      expect(await n()).toBe(3)
      // handed out at once, not a promise: no statement waited for; that was the last one held, so
      // the next two are asked for at once
      expect(windows.hit('a')).toBe(6397)
      await asked()
      expect(await n()).toBe(5)
      // from here on every hit is handed out at once, the next places asked for when half are used
      const left: unknown[] = []
      for (let i = 0; i < 40; i++) {
        left.push(windows.hit('a'))
        await asked()
      }
      expect(left).toEqual(Array.from({ length: 40 }, (_, i) => 6396 - i))
      const held = (await n()) - 43
      expect(held).toBeGreaterThan(0)
      // idle for a second: the places left go back; the window counts the 43 hits
      now += 1000
      await windows.giveBackIdle()
      expect(await n()).toBe(43)
      // counted again a second later: places ahead again (half as many as last time)
      expect(await windows.hit('a')).toBe(6356)
      expect(await n()).toBeGreaterThan(44)
      // the places held when the window ends are void: the next hit opens a new window
      now += 60_000
      expect(await windows.hit('a')).toBe(6399)
      expect(await n()).toBeLessThan(43) // this hit and its places ahead, nothing of the last window
    } finally {
      await windows.close()
    }
  })

  test('places ahead on two instances never let more than the limit through, and near the limit none are taken: exactly the limit passes', async () => {
    const engine = engines[name]
    let now = 3_000_000
    const kind = `q${crypto.randomUUID().slice(0, 8)}`
    const a = new SharedWindows(engine, kind, 640, 60_000, () => now, true)
    const b = new SharedWindows(engine, kind, 640, 60_000, () => now, true)
    try {
      let passed = 0
      let statements = 0
      for (let i = 0; i < 400; i++) {
        now += 1
        // three hits at once on each, as concurrent requests would be
        const hits = [a.hit('k'), a.hit('k'), a.hit('k'), b.hit('k'), b.hit('k'), b.hit('k')]
        statements += hits.filter((h) => h instanceof Promise).length
        for (const left of await Promise.all(hits)) if (left >= 0) passed++
      }
      expect(passed).toBe(640)
      expect(statements).toBeLessThan(2400) // some were handed out from places ahead
    } finally {
      await a.close()
      await b.close()
    }
  })
})
