/**
 * The schema on both engines: PostgreSQL's migrations build the same tables, columns (and which
 * may be null), indexes and triggers as SQLite's at the same version, and the kept counts their
 * triggers maintain come out the same after the same writes. A second migrate changes nothing; a
 * database migrated by a newer Capstan is refused, and a migration announces the version it reached.
 */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { type Engine, PgEngine, SqliteEngine, stmt } from '../src/db/engine'
import { LATEST_SCHEMA, migrate, openDatabase } from '../src/db/open'
import { PG_LATEST, SchemaTooNew, migratePostgres } from '../src/db/postgres'
import { Writer } from '../src/db/writer'

setDefaultTimeout(120_000)

let dir: string
let pg: PrivatePostgres
let sqliteDb: Database
let client: InstanceType<typeof Bun.SQL>
const engines: Record<'sqlite' | 'postgres', Engine> = {} as never

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'capstan-mig-'))
  pg = await PrivatePostgres.start(join(dir, 'pg'))
  client = new Bun.SQL(pg.url, { max: 4 })
  sqliteDb = openDatabase(join(dir, 'capstan.db'))
  migrate(sqliteDb)
  await migratePostgres(client)
  engines.sqlite = new SqliteEngine(sqliteDb, new Writer(sqliteDb))
  engines.postgres = PgEngine.connect(pg.url, 4)
})
afterAll(async () => {
  await engines.postgres.close()
  await client.close()
  sqliteDb.close()
  await pg.stop()
  rmSync(dir, { recursive: true, force: true })
})

/** table → "column notnull" lines; primary-key columns count as not null (PostgreSQL makes them so). */
function sqliteShape() {
  const tables = (sqliteDb.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name").all() as { name: string }[]).map((t) => t.name)
  const columns: Record<string, string[]> = {}
  for (const t of tables) {
    columns[t] = (sqliteDb.query(`SELECT name, "notnull" AS nn, pk FROM pragma_table_info('${t}')`).all() as { name: string; nn: number; pk: number }[]).map((c) => `${c.name} ${c.nn || c.pk ? 'not null' : 'null'}`).sort()
  }
  const indexes = (sqliteDb.query("SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name").all() as { name: string }[]).map((r) => r.name)
  const triggers = (sqliteDb.query("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name").all() as { name: string }[]).map((r) => r.name)
  return { columns, indexes, triggers }
}

async function pgShape() {
  const cols = await client`SELECT table_name, column_name, is_nullable FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name`
  const columns: Record<string, string[]> = {}
  for (const c of cols) (columns[c.table_name] ??= []).push(`${c.column_name} ${c.is_nullable === 'NO' ? 'not null' : 'null'}`)
  for (const t of Object.keys(columns)) columns[t]!.sort()
  // the indexes behind PRIMARY KEY and UNIQUE constraints are SQLite's automatic ones
  const idx = await client`SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND indexname NOT IN (SELECT conname FROM pg_constraint) ORDER BY indexname`
  const trg = await client`SELECT DISTINCT trigger_name FROM information_schema.triggers WHERE trigger_schema = 'public' ORDER BY trigger_name`
  return { columns, indexes: idx.map((r: { indexname: string }) => r.indexname), triggers: trg.map((r: { trigger_name: string }) => r.trigger_name) }
}

describe('the schema on both engines', () => {
  test('the same version, tables, columns, nullability, indexes and triggers', async () => {
    expect(PG_LATEST).toBe(LATEST_SCHEMA)
    const [lite, post] = [sqliteShape(), await pgShape()]
    expect(Object.keys(post.columns).sort()).toEqual(Object.keys(lite.columns).sort())
    for (const t of Object.keys(lite.columns)) expect([t, post.columns[t]]).toEqual([t, lite.columns[t]])
    expect(post.indexes).toEqual(lite.indexes)
    // one difference, by design: a change of status's counts are added on PostgreSQL by one
    // trigger per statement (migration 0047: the statements of a turn are merged), on SQLite by
    // three per row (each a function call in the process)
    const STATUS_COUNTS = ['campaign_counts_message_status', 'message_counts_status', 'message_outcome_counts_status']
    expect(STATUS_COUNTS.filter((t) => lite.triggers.includes(t))).toEqual(STATUS_COUNTS)
    expect(post.triggers).toEqual([...lite.triggers.filter((t) => !STATUS_COUNTS.includes(t)), 'message_status_counts'].sort())
  })

  test('migrating again applies nothing; a database a newer Capstan migrated is refused', async () => {
    expect(await migratePostgres(client)).toEqual([])
    await client`INSERT INTO migrations (version, name, applied_at) VALUES (${PG_LATEST + 1}, 'from_the_future', 0)`
    try {
      await expect(migratePostgres(client)).rejects.toBeInstanceOf(SchemaTooNew)
    } finally {
      await client`DELETE FROM migrations WHERE version = ${PG_LATEST + 1}`
    }
  })

  test('a migration that applies something announces the version it reached to the instances listening; one that applies nothing is silent', async () => {
    const db = await pg.createDatabase('announced')
    const fresh = new Bun.SQL(db, { max: 1 })
    const listening = new Bun.SQL(db, { max: 1 })
    const heard: string[] = []
    await listening.listen('capstan_changes', (what) => void heard.push(what))
    try {
      expect((await migratePostgres(fresh)).at(-1)).toBe(PG_LATEST)
      expect(await migratePostgres(fresh)).toEqual([])
      await Bun.sleep(300)
      expect(heard).toEqual([`schema:${PG_LATEST}`])
    } finally {
      await fresh.close()
      await listening.close()
    }
  })

  test('a workspace or a number is never deleted: both engines refuse, and the row stays', async () => {
    const now = 1_795_000_000_000
    for (const kind of ['sqlite', 'postgres'] as const) {
      const e = engines[kind]
      await e.write(async (tx) => {
        await tx.run(stmt("INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES ('kept', 'K', 'kept', 'active', '{}', ?, ?)"), now, now)
        await tx.run(stmt("INSERT INTO connections (id, workspace_id, phone, driver, status, receives, config, created_at, updated_at) VALUES ('kept-n', 'kept', '+15550009', 'sandbox', 'online', 1, '{}', ?, ?)"), now, now)
      })
      await expect(e.write((tx) => tx.run(stmt("DELETE FROM connections WHERE id = 'kept-n'")))).rejects.toThrow(/never deleted/)
      await expect(e.write((tx) => tx.run(stmt("DELETE FROM workspaces WHERE id = 'kept'")))).rejects.toThrow(/never deleted/)
      expect(await e.get(stmt("SELECT id FROM connections WHERE id = 'kept-n'"))).toEqual({ id: 'kept-n' })
      expect(await e.get(stmt("SELECT id FROM workspaces WHERE id = 'kept'"))).toEqual({ id: 'kept' })
    }
  })

  test('a message received more than once before 0044 (copies an older Capstan logged on PostgreSQL): every row is kept, the earliest keeps the network id, and a copy is refused from then on', async () => {
    const now = 1_795_000_000_000
    const rows = (n: number) =>
      Array.from({ length: n }, (_, i) => `('in-${i}', 'w', 'n', 'inbound', 'delivered', '+15550001', 'hi', '[]', ${i < 3 ? "'wamid.same'" : "'wamid.other'"}, ${now + i}, ${now + i})`).join(', ')
    // the schema as 0043 left it (what the later migrations add undone)
    const before = `ALTER TABLE messages DROP COLUMN resend; DROP INDEX messages_inbound_once; DROP TABLE instances; ALTER TABLE idempotency_keys DROP COLUMN claimed_by; DELETE FROM migrations WHERE version >= 44;
      INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES ('w', 'W', 'w', 'active', '{}', ${now}, ${now});
      INSERT INTO connections (id, workspace_id, phone, driver, status, receives, config, created_at, updated_at) VALUES ('n', 'w', '+15550009', 'sandbox', 'online', 1, '{}', ${now}, ${now});
      INSERT INTO messages (id, workspace_id, connection_id, direction, status, sender, body, attachments, external_id, created_at, updated_at) VALUES ${rows(4)};`
    const copy = `INSERT INTO messages (id, workspace_id, connection_id, direction, status, attachments, external_id, created_at, updated_at) VALUES ('in-9', 'w', 'n', 'inbound', 'delivered', '[]', 'wamid.same', ${now}, ${now})`
    const expected = [['in-0', 'wamid.same'], ['in-1', null], ['in-2', null], ['in-3', 'wamid.other']]
    // SQLite
    const lite = openDatabase(join(dir, 'inbound-once.db'))
    migrate(lite)
    lite.run(before)
    expect(migrate(lite)).toEqual([44, 45, 46, 47, 48])
    expect(lite.query('SELECT id, external_id FROM messages ORDER BY seq').values()).toEqual(expected)
    expect(() => lite.run(copy)).toThrow(/UNIQUE/)
    lite.close()
    // PostgreSQL
    const db = new Bun.SQL(await pg.createDatabase('inbound_once'), { max: 1 })
    await migratePostgres(db)
    await db.unsafe(before)
    expect(await migratePostgres(db)).toEqual([44, 45, 46, 47, 48])
    expect((await db.unsafe('SELECT id, external_id FROM messages ORDER BY seq').values())).toEqual(expected)
    await expect(db.unsafe(copy)).rejects.toThrow(/unique/)
    await db.close()
  })

  test("PostgreSQL: each session counts on a shard of its own, keeps it, and a session's end frees it", async () => {
    // six sessions (a client of one connection each)
    const sessions = Array.from({ length: 6 }, () => new Bun.SQL(pg.url, { max: 1 }))
    const shardOf = async (s: (typeof sessions)[number]) => Number((await s`SELECT capstan_shard() AS n`)[0].n)
    try {
      const first = await Promise.all(sessions.map(shardOf))
      expect(new Set(first).size).toBe(6)
      // asked again, and after a transaction that failed, each keeps its own
      for (const s of sessions) await s.begin(async (tx) => {
        await tx`SELECT capstan_shard()`
        await tx`SELECT 1 / 0`
      }).catch(() => {})
      expect(await Promise.all(sessions.map(shardOf))).toEqual(first)
      // a session that ends lets its shard go to the next that asks: the lowest free one
      const gone = first[2]!
      await sessions[2]!.close()
      const fresh = new Bun.SQL(pg.url, { max: 1 })
      try {
        const held = async () => (await fresh`SELECT COUNT(*)::int AS n FROM pg_locks WHERE locktype = 'advisory' AND classid = 1397244242 AND objid = ${gone}`)[0].n
        for (let i = 0; i < 100 && (await held()) > 0; i++) await Bun.sleep(20)
        const free = [...Array(64).keys()].filter((i) => !first.includes(i) || i === gone)
        expect(Number((await fresh`SELECT capstan_shard() AS n`)[0].n)).toBe(Math.min(...free))
      } finally {
        await fresh.close()
      }
    } finally {
      for (const s of sessions) await s.close().catch(() => {})
    }
  })

  test('the kept counts come out the same on both engines after the same writes', async () => {
    const now = 1_795_000_000_000
    const w = (kind: 'sqlite' | 'postgres') => engines[kind]
    // summed over their shards (PostgreSQL keeps a row per connection's shard, SQLite one)
    const counts = async (e: Engine) => ({
      messages: await e.all(stmt('SELECT workspace_id, direction, status, CAST(SUM(n) AS BIGINT) AS n FROM message_counts GROUP BY workspace_id, direction, status HAVING SUM(n) <> 0 ORDER BY workspace_id, direction, status')),
      contacts: await e.all(stmt('SELECT workspace_id, CAST(SUM(n) AS BIGINT) AS n FROM contact_counts GROUP BY workspace_id ORDER BY workspace_id')),
      campaigns: await e.all(stmt('SELECT campaign_id, bucket, CAST(SUM(n) AS BIGINT) AS n FROM campaign_counts GROUP BY campaign_id, bucket HAVING SUM(n) <> 0 ORDER BY campaign_id, bucket')),
      outcomes: await e.all(stmt('SELECT status, code, CAST(SUM(n) AS BIGINT) AS n FROM message_outcome_counts GROUP BY status, code ORDER BY status, code')),
      suppressions: await e.all(stmt('SELECT workspace_id, CAST(SUM(n) AS BIGINT) AS n FROM suppression_counts GROUP BY workspace_id ORDER BY workspace_id')),
    })
    const script = async (e: Engine) => {
      await e.write(async (tx) => {
        await tx.run(stmt("INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES ('w1', 'W', 'w', 'active', '{}', ?, ?)"), now, now)
        await tx.run(stmt("INSERT INTO connections (id, workspace_id, phone, driver, status, receives, config, created_at, updated_at) VALUES ('c1', 'w1', '+15550001', 'sandbox', 'online', 1, '{}', ?, ?)"), now, now)
        await tx.run(stmt("INSERT INTO templates (id, workspace_id, name, body, category, variables, created_at, updated_at) VALUES ('t1', 'w1', 'T', 'hi', 'utility', '[]', ?, ?)"), now, now)
        await tx.run(stmt("INSERT INTO campaigns (id, workspace_id, name, template_id, connection_id, audience, variables, status, created_at, updated_at) VALUES ('k1', 'w1', 'K', 't1', 'c1', '{}', '{}', 'running', ?, ?)"), now, now)
        for (const i of [1, 2, 3]) {
          await tx.run(stmt("INSERT INTO contacts (id, workspace_id, phone, consent_status, metadata, created_at, updated_at, last_activity_at) VALUES (?, 'w1', ?, 'opted_in', '{}', ?, ?, ?)"), `p${i}`, `+1555000${i}`, now, now, now)
          await tx.run(stmt("INSERT INTO campaign_recipients (campaign_id, contact_id, phone, status, updated_at) VALUES ('k1', ?, ?, 'pending', ?)"), `p${i}`, `+1555000${i}`, now)
        }
        await tx.run(stmt("INSERT INTO suppressions (workspace_id, phone, created_at) VALUES ('w1', '+15559999', ?)"), now)
      })
      // two recipients released as messages, one skipped; the messages move on; one fails; a plain message too
      await e.write(async (tx) => {
        for (const i of [1, 2]) {
          await tx.run(stmt("INSERT INTO messages (id, workspace_id, connection_id, contact_id, direction, status, attachments, created_at, updated_at, campaign_id) VALUES (?, 'w1', 'c1', ?, 'outbound', 'queued', '[]', ?, ?, 'k1')"), `m${i}`, `p${i}`, now, now)
          await tx.run(stmt("UPDATE campaign_recipients SET status = 'released', message_id = ? WHERE contact_id = ?"), `m${i}`, `p${i}`)
        }
        await tx.run(stmt("UPDATE campaign_recipients SET status = 'skipped', skipped_reason = 'opted_out' WHERE contact_id = 'p3'"))
        await tx.run(stmt("INSERT INTO messages (id, workspace_id, connection_id, direction, status, attachments, created_at, updated_at) VALUES ('m9', 'w1', 'c1', 'outbound', 'queued', '[]', ?, ?)"), now, now)
      })
      await e.write(async (tx) => {
        await tx.run(stmt("UPDATE messages SET status = 'sending' WHERE id IN ('m1', 'm2', 'm9')"))
        await tx.run(stmt("UPDATE messages SET status = 'sent' WHERE id IN ('m1', 'm2', 'm9')"))
        await tx.run(stmt("UPDATE messages SET status = 'delivered' WHERE id = 'm1'"))
        await tx.run(stmt("UPDATE messages SET status = 'failed', error_code = 'recipient_unreachable' WHERE id = 'm2'"))
      })
      // an erasure's order: the message, then the released recipient; a skipped one and its contact
      await e.write(async (tx) => {
        await tx.run(stmt("DELETE FROM messages WHERE id = 'm2'"))
        await tx.run(stmt("DELETE FROM campaign_recipients WHERE contact_id = 'p2'"))
        await tx.run(stmt("DELETE FROM campaign_recipients WHERE contact_id = 'p3'"))
        await tx.run(stmt("DELETE FROM contacts WHERE id = 'p3'"))
      })
      return counts(e)
    }
    const lite = await script(w('sqlite'))
    const post = await script(w('postgres'))
    expect(post).toEqual(lite)
    // and they say what happened: m1 delivered and m9 sent are left, m2's failure was counted
    expect(lite.messages).toEqual([
      { workspace_id: 'w1', direction: 'outbound', status: 'delivered', n: 1 },
      { workspace_id: 'w1', direction: 'outbound', status: 'sent', n: 1 },
    ])
    expect(lite.campaigns).toEqual([{ campaign_id: 'k1', bucket: 'delivered', n: 1 }])
    expect(lite.contacts).toEqual([{ workspace_id: 'w1', n: 2 }])
  })
})
