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
import { ENGINES, type EngineName, migratedEngines } from './support/engines'

setDefaultTimeout(60_000)

let engines: Record<EngineName, Engine>
let stop: () => Promise<void>
beforeAll(async () => {
  ;({ engines, stop } = await migratedEngines())
})
afterAll(() => stop())

const WORKSPACE = stmt("INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES (?, ?, ?, 'active', '{}', 0, 0)")
const AUDIT = stmt('SELECT workspace_id, action, key_id, subject_id, at FROM audit_log WHERE workspace_id = ? ORDER BY id')

async function workspace(engine: Engine) {
  const id = crypto.randomUUID()
  await engine.write((tx) => tx.run(WORKSPACE, id, `W ${id}`, `w-${id}`))
  return id
}

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
  })
})
