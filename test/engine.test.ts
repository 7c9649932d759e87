/**
 * The store seam's engine contract (src/db/engine.ts), one test body run on both engines: the
 * embedded SQLite file through the group commit, and a private PostgreSQL. What a store may count
 * on: values come back as they went in (times in milliseconds as numbers), a write's statements
 * commit together or not at all, a duplicate key is the same error, concurrent writes all land.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { CLOSE_WAIT_MS, CommitInDoubt, type Engine, SESSION, STALL_MS, databaseAway, insertStatement, MANY_CALLS, mergeable, oneByKey, PgEngine, SqliteEngine, UniqueViolation, pgPlaceholders, stmt } from '../src/db/engine'
import { openDatabase } from '../src/db/open'
import { Writer } from '../src/db/writer'
import { CommitCutter } from './support/commit-cutter'
import { DeafPooler } from './support/deaf-pooler'
import { PgProxy } from './support/pg-proxy'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)

const CREATE = stmt(
  'CREATE TABLE items (id TEXT PRIMARY KEY, n INTEGER NOT NULL, at INTEGER, note TEXT, flag INTEGER NOT NULL DEFAULT 0)',
  'CREATE TABLE items (id TEXT PRIMARY KEY, n BIGINT NOT NULL, at BIGINT, note TEXT, flag INTEGER NOT NULL DEFAULT 0)',
)
const INSERT = stmt('INSERT INTO items (id, n, at, note, flag) VALUES (?, ?, ?, ?, ?)')
const GET = stmt('SELECT id, n, at, note, flag FROM items WHERE id = ?')
const ALL = stmt('SELECT id, n FROM items ORDER BY id')
const BUMP = stmt('UPDATE items SET n = n + 1 WHERE id = ?')
const CLEAR = stmt('DELETE FROM items')

// mergeable forms of an insert and of a read by key (PostgreSQL runs several writes' calls as one)
const ADD = insertStatement('items', { id: 'TEXT', n: 'BIGINT', at: 'BIGINT', note: 'TEXT', flag: 'BIGINT' })
const FIND = oneByKey('items', ['id'])

interface Item {
  id: string
  n: number
  at: number | null
  note: string | null
  flag: number
}

const engines: Record<string, { make: () => Promise<Engine>; done: () => Promise<void> }> = {}
let sqliteDir: string
let pgDir: string
let pg: PrivatePostgres
const opened: Engine[] = []

beforeAll(async () => {
  sqliteDir = mkdtempSync(join(tmpdir(), 'capstan-engine-'))
  pgDir = mkdtempSync(join(tmpdir(), 'capstan-engine-pg-'))
  pg = await PrivatePostgres.start(pgDir)
})
afterAll(async () => {
  for (const e of opened) await e.close()
  await pg.stop()
  rmSync(sqliteDir, { recursive: true, force: true })
  rmSync(pgDir, { recursive: true, force: true })
})

const make = {
  sqlite: async () => {
    const db = openDatabase(join(sqliteDir, `${crypto.randomUUID()}.db`))
    return new SqliteEngine(db, new Writer(db))
  },
  postgres: async () => PgEngine.connect(pg.url, 8),
}

test('placeholders become $n outside quoted text', () => {
  expect(pgPlaceholders(`SELECT '?', "a?" FROM t WHERE a = ? AND b IN (?, ?)`)).toBe(`SELECT '?', "a?" FROM t WHERE a = $1 AND b IN ($2, $3)`)
})

describe.each(['sqlite', 'postgres'] as const)('on %s', (kind) => {
  let engine: Engine
  beforeAll(async () => {
    engine = await make[kind]()
    opened.push(engine)
    await engine.run(stmt('DROP TABLE IF EXISTS items'))
    await engine.run(CREATE)
  })

  test('a change announced in a write has gone round when propagated resolves: heard back on PostgreSQL, at once on SQLite', async () => {
    const heard: string[] = []
    await engine.listen((what) => heard.push(what))
    const what = `test:${crypto.randomUUID()}`
    let round: Promise<void> | null = null
    await engine.write(async (tx) => {
      await engine.announce(tx, what)
      round = engine.propagated(what)
    })
    await round
    if (kind === 'postgres') expect(heard).toContain(what)
    else expect(heard).toEqual([])
  })

  test('values come back as they went in: text, whole numbers past 2^32 (times in ms), null, 0/1 flags', async () => {
    await engine.run(CLEAR)
    const at = 1_795_000_000_123
    expect(await engine.write((tx) => tx.run(INSERT, 'a', 2 ** 40, at, 'Grüße 😀', 1))).toBe(1)
    await engine.write((tx) => tx.run(INSERT, 'b', 0, null, null, 0))
    expect(await engine.get<Item>(GET, 'a')).toEqual({ id: 'a', n: 2 ** 40, at, note: 'Grüße 😀', flag: 1 })
    expect(await engine.get<Item>(GET, 'b')).toEqual({ id: 'b', n: 0, at: null, note: null, flag: 0 })
    expect(await engine.get<Item>(GET, 'none')).toBeNull()
    expect(await engine.all(ALL)).toEqual([{ id: 'a', n: 2 ** 40 }, { id: 'b', n: 0 }])
  })

  test("a write's statements commit together; one that throws leaves nothing, and the writes beside it commit", async () => {
    await engine.run(CLEAR)
    const results = await Promise.allSettled([
      engine.write(async (tx) => {
        await tx.run(INSERT, 'x', 1, null, null, 0)
        await tx.run(INSERT, 'y', 1, null, null, 0)
      }),
      engine.write(async (tx) => {
        await tx.run(INSERT, 'half', 1, null, null, 0)
        throw new Error('refused half-way')
      }),
      engine.write(async (tx) => tx.run(INSERT, 'z', 1, null, null, 0)),
    ])
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    expect((await engine.all<{ id: string }>(ALL)).map((r) => r.id)).toEqual(['x', 'y', 'z'])
  })

  test('a duplicate key is UniqueViolation on both engines, and its write changes nothing', async () => {
    await engine.run(CLEAR)
    await engine.write((tx) => tx.run(INSERT, 'k', 1, null, null, 0))
    const dup = engine.write(async (tx) => {
      await tx.run(INSERT, 'other', 1, null, null, 0)
      await tx.run(INSERT, 'k', 2, null, null, 0)
    })
    await expect(dup).rejects.toBeInstanceOf(UniqueViolation)
    expect((await engine.all<{ id: string }>(ALL)).map((r) => r.id)).toEqual(['k'])
  })

  test("statements of one write sent together (not awaited one by one) commit in order, or none does when one of them fails", async () => {
    await engine.run(CLEAR)
    const counts = await engine.write((tx) => Promise.all([tx.run(INSERT, 'p1', 1, null, null, 0), tx.run(BUMP, 'p1'), tx.get<Item>(GET, 'p1')]))
    expect(counts[0]).toBe(1)
    expect(counts[1]).toBe(1)
    expect(counts[2]!.n).toBe(2) // the read ran after the two writes before it
    const failed = engine.write((tx) => Promise.all([tx.run(INSERT, 'p2', 1, null, null, 0), tx.run(INSERT, 'p1', 1, null, null, 0), tx.run(INSERT, 'p3', 1, null, null, 0)]))
    await expect(failed).rejects.toBeInstanceOf(UniqueViolation)
    expect((await engine.all<{ id: string }>(ALL)).map((r) => r.id)).toEqual(['p1'])
    // a write that fails before its first statement leaves the connection usable
    await expect(engine.write(async () => {
      throw new Error('refused at once')
    })).rejects.toThrow('refused at once')
    expect(await engine.write((tx) => tx.run(INSERT, 'p4', 1, null, null, 0))).toBe(1)
  })

  test('writes that each add a row when it is missing, at once: every one succeeds and the row is added once', async () => {
    await engine.run(CLEAR)
    const added = await Promise.all(
      Array.from({ length: 20 }, () =>
        engine.write(async (tx) => {
          const found = await tx.get<Item>(GET, 'shared')
          if (found) return (await tx.run(BUMP, 'shared')) && 'bumped'
          await tx.run(INSERT, 'shared', 1, null, null, 0)
          return 'added'
        }),
      ),
    )
    expect(added.filter((a) => a === 'added')).toHaveLength(1)
    expect((await engine.get<Item>(GET, 'shared'))!.n).toBe(20)
  })

  test('mergeable statements made by several writes at once: each write reads its own row (or none) and every row lands as given', async () => {
    await engine.run(CLEAR)
    await engine.write((tx) => tx.run(ADD, 'there', 7, 1_700_000_000_123, 'x', 1))
    const ids = ['m1', 'm2', 'there', 'm3']
    const found = await Promise.all(
      ids.map((id, i) =>
        engine.write(async (tx) => {
          const before = await tx.get<Item>(FIND, id)
          if (!before) await tx.run(ADD, id, i, i === 1 ? null : 2 ** 40 + i, i === 2 ? null : `note ${i}`, 0)
          return before
        }),
      ),
    )
    expect(found.map((r) => r?.id ?? null)).toEqual([null, null, 'there', null])
    expect(found[2]).toEqual({ id: 'there', n: 7, at: 1_700_000_000_123, note: 'x', flag: 1 })
    expect(await engine.get<Item>(GET, 'm1')).toEqual({ id: 'm1', n: 0, at: 2 ** 40, note: 'note 0', flag: 0 })
    expect(await engine.get<Item>(GET, 'm2')).toEqual({ id: 'm2', n: 1, at: null, note: 'note 1', flag: 0 })
    expect((await engine.all<{ id: string }>(ALL)).map((r) => r.id)).toEqual(['m1', 'm2', 'm3', 'there'])
  })

  test("afterCommit: a write's hook runs once its rows can be read from elsewhere; on PostgreSQL a write that fails runs none", async () => {
    await engine.run(CLEAR)
    const seen: Record<string, Item | null> = {}
    const hook = (id: string, tx: Parameters<Parameters<Engine['write']>[0]>[0]) =>
      engine.afterCommit(tx, () => {
        // read through the engine (on PostgreSQL another connection of the pool) as the hook runs
        void engine.get<Item>(GET, id).then((r) => (seen[id] = r))
      })
    const results = await Promise.allSettled([
      engine.write(async (tx) => {
        await tx.run(INSERT, 'kept', 1, null, null, 0)
        hook('kept', tx)
      }),
      engine.write(async (tx) => {
        await tx.run(INSERT, 'thrown', 1, null, null, 0)
        hook('thrown', tx)
        throw new Error('refused after writing')
      }),
      engine.write(async (tx) => {
        await tx.run(INSERT, 'also', 1, null, null, 0)
        hook('also', tx)
      }),
    ])
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    for (let i = 0; i < 50 && Object.keys(seen).length < 2; i++) await Bun.sleep(10)
    await Bun.sleep(50)
    // (SQLite runs a hook at once, inside its write: a failed write's too, reading its own row)
    expect(Object.keys(seen).sort()).toEqual(kind === 'postgres' ? ['also', 'kept'] : ['also', 'kept', 'thrown'])
    expect([seen.kept?.id, seen.also?.id]).toEqual(['kept', 'also'])
  })

  test('200 concurrent writes to one row all land (group commit on SQLite, row locks on PostgreSQL)', async () => {
    await engine.run(CLEAR)
    await engine.write((tx) => tx.run(INSERT, 'counter', 0, null, null, 0))
    const changed = await Promise.all(Array.from({ length: 200 }, () => engine.write((tx) => tx.run(BUMP, 'counter'))))
    expect(changed.every((c) => c === 1)).toBe(true)
    expect((await engine.get<Item>(GET, 'counter'))!.n).toBe(200)
  })
})

/** `on` listening: what it heard, and how many times it listened anew (`resumed`: what it keeps read again). */
async function listening(on: PgEngine) {
  const got = { heard: [] as string[], resumed: 0 }
  await on.listen(
    (what) => void got.heard.push(what),
    () => void got.resumed++,
  )
  return got
}

describe("PostgreSQL's group commit: the writes of one turn share a transaction", () => {
  let engine: Engine
  const VERSION = stmt('', 'SELECT id, xmin::text AS tx FROM items ORDER BY id')
  beforeAll(async () => {
    engine = await make.postgres()
    opened.push(engine)
    await engine.run(stmt('DROP TABLE IF EXISTS items'))
    await engine.run(CREATE)
  })

  test('writes asked for in one turn commit in one transaction; one refused before it wrote anything leaves the others in it', async () => {
    await engine.run(CLEAR)
    const results = await Promise.allSettled([
      engine.write((tx) => tx.run(INSERT, 'a', 1, null, null, 0)),
      engine.write(async (tx) => {
        if (!(await tx.get(GET, 'nothing'))) throw new Error('refused after a read')
      }),
      engine.write((tx) => tx.run(INSERT, 'b', 1, null, null, 0)),
    ])
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    const rows = await engine.all<{ id: string; tx: string }>(VERSION)
    expect(rows.map((r) => r.id)).toEqual(['a', 'b'])
    expect(rows[0]!.tx).toBe(rows[1]!.tx)
    // a write of the next turn is another transaction
    await engine.write((tx) => tx.run(INSERT, 'c', 1, null, null, 0))
    const later = await engine.all<{ id: string; tx: string }>(VERSION)
    expect(later[2]!.tx).not.toBe(later[0]!.tx)
  })

  test('a statement that fails loses the shared transaction: each write runs again alone, the others commit, the failed one changes nothing', async () => {
    await engine.run(CLEAR)
    await engine.write((tx) => tx.run(INSERT, 'taken', 1, null, null, 0))
    let runs = 0
    const results = await Promise.allSettled([
      engine.write(async (tx) => {
        runs++
        await tx.run(INSERT, 'first', 1, null, null, 0)
      }),
      engine.write(async (tx) => {
        await tx.run(INSERT, 'half', 1, null, null, 0)
        await tx.run(INSERT, 'taken', 2, null, null, 0)
      }),
      engine.write((tx) => tx.run(INSERT, 'last', 1, null, null, 0)),
    ])
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    expect((results[1] as PromiseRejectedResult).reason).toBeInstanceOf(UniqueViolation)
    expect(runs).toBe(2)
    expect((await engine.all<{ id: string }>(ALL)).map((r) => r.id)).toEqual(['first', 'last', 'taken'])
  })

  test('what PostgreSQL answers when a write changed nothing and may simply be tried again (it takes no writes, a deadlock) is databaseAway — a 503 and a retry; a refused row is not', async () => {
    await engine.run(CLEAR)
    for (const id of ['x', 'y']) await engine.write((tx) => tx.run(INSERT, id, 1, null, null, 0))
    const sql = new Bun.SQL(pg.url, { max: 2 })
    try {
      const readOnly = await sql.begin(async (tx) => {
        await tx`SET TRANSACTION READ ONLY`
        await tx`UPDATE items SET n = n + 1 WHERE id = 'x'`
      }).catch((e) => e)
      // two transactions taking the same two rows in opposite orders: PostgreSQL ends one of them
      const crossing = (first: string, second: string) =>
        sql.begin(async (tx) => {
          await tx`UPDATE items SET n = n + 1 WHERE id = ${first}`
          await Bun.sleep(300)
          await tx`UPDATE items SET n = n + 1 WHERE id = ${second}`
        })
      const [one, two] = await Promise.allSettled([crossing('x', 'y'), crossing('y', 'x')])
      const deadlock = one!.status === 'rejected' ? one!.reason : (two as PromiseRejectedResult).reason
      const duplicate = await sql`INSERT INTO items (id, n) VALUES ('x', 1)`.catch((e) => e)
      expect([readOnly, deadlock, duplicate].map((e) => [e.errno, databaseAway(e)])).toEqual([['25006', true], ['40P01', true], ['23505', false]])
    } finally {
      await sql.close()
    }
  })

  test('a COMMIT whose answer is lost (the connection cut once it went): its writes fail as the database away and are not run again — each lands once, never twice', async () => {
    await engine.run(CLEAR)
    const cutter = new CommitCutter(join(pgDir, '.s.PGSQL.5432'), join(pgDir, 'cutter'))
    const through = PgEngine.connect(cutter.via(pg.url), 4)
    try {
      // a write that runs again makes a row of its own (a new id each run), as a send would
      const add = () => through.write((tx) => tx.run(INSERT, crypto.randomUUID(), 1, null, null, 0))
      await add()
      cutter.arm()
      const results = await Promise.allSettled([add(), add()])
      expect(cutter.cuts).toBe(1)
      expect(results.map((r) => r.status)).toEqual(['rejected', 'rejected'])
      for (const r of results) {
        expect((r as PromiseRejectedResult).reason).toBeInstanceOf(CommitInDoubt)
        expect(databaseAway((r as PromiseRejectedResult).reason)).toBe(true)
      }
      // the two committed once, with the first; nothing ran again
      expect(await engine.all<{ id: string }>(ALL)).toHaveLength(3)
      // and the engine goes on
      await add()
      expect(await engine.all<{ id: string }>(ALL)).toHaveLength(4)
    } finally {
      await through.close()
      cutter.stop()
    }
  })

  test("a statement slower than the watchdog's wait (STALL_MS) and its looks after it, on a server that answers, its session working there, is left alone: the read returns, the write commits", async () => {
    await engine.run(CLEAR)
    // (the watchdog asks after a second here: looks at 1–2 s and 2–4 s while it sleeps)
    const pgEngine = engine as PgEngine
    pgEngine.stallMs = 1000
    try {
      const slow = stmt('', `SELECT 1 AS slept FROM pg_sleep(${(pgEngine.stallMs + 3000) / 1000})`)
      const [read, wrote] = await Promise.all([
        engine.get<{ slept: number }>(slow),
        engine.write(async (tx) => {
          await tx.get(slow)
          return tx.run(INSERT, 'slow', 1, null, null, 0)
        }),
      ])
      expect([read?.slept, wrote]).toEqual([1, 1])
      // (its sessions were working: the pool was not made again)
      expect(pgEngine.reconnects).toBe(0)
    } finally {
      pgEngine.stallMs = STALL_MS
    }
    expect((await engine.all<{ id: string }>(ALL)).map((r) => r.id)).toEqual(['slow'])
  })

  test.concurrent("sessions whose name a pooler added to (PgBouncer's application_name_add_host): still found as this instance's — a slow statement is left alone", async () => {
    const name = 'capstan test-host 1 abcd'
    const pool = () => new Bun.SQL(pg.url, { max: 2, bigint: true, connection: { ...SESSION, application_name: `${name} - 10.0.0.5:6432` } })
    const named = new PgEngine(pool(), pg.url, pool, name)
    named.stallMs = 1000
    try {
      expect((await named.get<{ slept: number }>(stmt('', 'SELECT 1 AS slept FROM pg_sleep(3.5)')))?.slept).toBe(1)
      expect(named.reconnects).toBe(0)
    } finally {
      await named.close()
    }
  })

  test.concurrent('connections the server no longer knows, left open without a word (a failover behind the same address, a server host gone at once): what waits on them is given up on as the database away within seconds, not the minutes TCP takes, and the engine goes on over new connections — listening included', async () => {
    await engine.run(CLEAR)
    const proxy = new PgProxy(join(pgDir, '.s.PGSQL.5432'), join(pgDir, 'silencer'), { state: () => null })
    const through = PgEngine.connect(proxy.via(pg.url), 2)
    // (the watchdog asks after a second here)
    through.stallMs = 1000
    try {
      const got = await listening(through)
      // both of the pool's connections open, and the one that listens
      await Promise.all([through.write((tx) => tx.run(INSERT, 'before', 1, null, null, 0)), through.get(stmt('', 'SELECT pg_sleep(0.05)'))])
      proxy.silence()
      const lost = await Promise.race([
        Promise.allSettled([through.get<Item>(GET, 'before'), through.write((tx) => tx.run(INSERT, 'lost', 1, null, null, 0))]),
        Bun.sleep(through.stallMs + 15_000).then(() => 'still waiting' as const),
      ])
      expect(lost).not.toBe('still waiting')
      for (const r of lost as PromiseSettledResult<unknown>[]) {
        expect(r.status).toBe('rejected')
        expect(databaseAway((r as PromiseRejectedResult).reason)).toBe(true)
      }
      expect(through.reconnects).toBe(1)
      // nothing of the write given up on landed, and the engine answers again on new connections
      expect(await engine.get<Item>(GET, 'lost')).toBeNull()
      expect((await through.get<Item>(GET, 'before'))?.n).toBe(1)
      await through.write((tx) => tx.run(INSERT, 'after', 1, null, null, 0))
      expect((await engine.get<Item>(GET, 'after'))?.n).toBe(1)
      // and it hears again what is announced (it listened anew: what it keeps is read again)
      await waitFor(() => got.resumed >= 1, 15_000)
      await engine.write((tx) => engine.announce(tx, 'key:after-failover'))
      await waitFor(() => got.heard.includes('key:after-failover'), 5_000)
    } finally {
      await through.close()
      proxy.stop()
    }
  })

  test.concurrent('closing the engine (a graceful stop) while a statement waits on a connection leading nowhere: it ends within its bound, the statement fails', async () => {
    const proxy = new PgProxy(join(pgDir, '.s.PGSQL.5432'), join(pgDir, 'silenced-at-stop'), { state: () => null })
    const through = PgEngine.connect(proxy.via(pg.url), 1)
    try {
      await through.get(stmt('', 'SELECT 1 AS one'))
      proxy.silence()
      const waiting = through.get(stmt('', 'SELECT 2 AS two'))
      waiting.catch(() => {})
      await Bun.sleep(100)
      const closed = await Promise.race([through.close().then(() => 'closed' as const), Bun.sleep(CLOSE_WAIT_MS + 5_000).then(() => 'still closing' as const)])
      expect(closed).toBe('closed')
      expect(await waiting.then(() => 'answered', () => 'failed')).toBe('failed')
    } finally {
      proxy.stop()
    }
  })

  test.concurrent('a listening connection that goes deaf while the others work (a middlebox forgot it): the heartbeat is missed, a new connection listens, what is kept in memory is read again, and announcements are heard again', async () => {
    const pooler = new DeafPooler(join(pgDir, '.s.PGSQL.5432'), join(pgDir, 'deafening'), false)
    const through = PgEngine.connect(pooler.via(pg.url), 2)
    through.hearingEveryMs = 500
    try {
      const got = await listening(through)
      const tell = (what: string) => engine.write((tx) => engine.announce(tx, what))
      await tell('key:before')
      await waitFor(() => got.heard.includes('key:before'), 5_000)
      pooler.deafen()
      await tell('key:while-deaf')
      // noticed within a heartbeat and its wait, and listened again on a new connection
      await waitFor(() => got.resumed === 1, 10_000)
      expect(got.heard).not.toContain('key:while-deaf')
      expect(pooler.dropped).toBeGreaterThan(0)
      await tell('key:after')
      await waitFor(() => got.heard.includes('key:after'), 5_000)
      // and while it hears, nothing more is done
      await Bun.sleep(1_500)
      expect(got.resumed).toBe(1)
    } finally {
      await through.close()
      pooler.stop()
    }
  })

  test("a mergeable statement made by several writes of one turn goes to PostgreSQL once, with every write's parameters", async () => {
    await engine.run(CLEAR)
    // each row notes how many calls its statement carried: 1 when sent alone
    const COUNTED = mergeable(stmt('', 'INSERT INTO items (id, n) VALUES ($1, 1)'), `INSERT INTO items (id, n) SELECT calls.v->>0, COUNT(*) OVER () FROM ${MANY_CALLS}`)
    await Promise.all(['a', 'b', 'c', 'd', 'e'].map((id) => engine.write((tx) => tx.run(COUNTED, id))))
    expect(await engine.all<{ id: string; n: number }>(ALL)).toEqual(['a', 'b', 'c', 'd', 'e'].map((id) => ({ id, n: 5 })))
    // a write alone in its turn sends it as it is
    await engine.write((tx) => tx.run(COUNTED, 'f'))
    expect((await engine.get<Item>(GET, 'f'))!.n).toBe(1)
  })

  test("merging keeps each write's own order of statements, and a call held behind a merged one waits its turn", async () => {
    await engine.run(CLEAR)
    await engine.run(stmt('', 'CREATE TABLE IF NOT EXISTS seen (who TEXT PRIMARY KEY, own BOOLEAN NOT NULL)'))
    await engine.run(stmt('', 'DELETE FROM seen'))
    // LOOK notes whether the looking write's own item ("a" for "A") is there when it runs
    const LOOK = mergeable(
      stmt('', 'INSERT INTO seen (who, own) SELECT $1, EXISTS (SELECT 1 FROM items WHERE id = lower($1))'),
      `INSERT INTO seen (who, own) SELECT calls.v->>0, EXISTS (SELECT 1 FROM items WHERE id = lower(calls.v->>0)) FROM ${MANY_CALLS}`,
    )
    const COUNT = stmt('', 'SELECT COUNT(*) AS n FROM items WHERE id = $1')
    const looked = await Promise.all([
      // A adds, then looks (both sent at once)
      engine.write((tx) => Promise.all([tx.run(ADD, 'a', 1, null, null, 0), tx.run(LOOK, 'A')])),
      // B looks, then adds: merged with A's add and look, its look must still go before its add
      engine.write((tx) => Promise.all([tx.run(LOOK, 'B'), tx.run(ADD, 'b', 1, null, null, 0)])),
      // C: a mergeable add not awaited, then a plain read, which waits behind the add
      engine.write(async (tx) => {
        void tx.run(ADD, 'c', 1, null, null, 0)
        return (await tx.get<{ n: number }>(COUNT, 'c'))!.n
      }),
    ])
    const seen = Object.fromEntries((await engine.all<{ who: string; own: boolean }>(stmt('', 'SELECT who, own FROM seen'))).map((r) => [r.who, r.own]))
    expect(seen).toEqual({ A: true, B: false })
    expect(looked[2]).toBe(1)
    expect((await engine.all<{ id: string }>(ALL)).map((r) => r.id)).toEqual(['a', 'b', 'c'])
    const rows = await engine.all<{ id: string; tx: string }>(VERSION)
    expect(new Set(rows.map((r) => r.tx)).size).toBe(1)
  })

  test('a merged statement that fails loses the shared transaction: each write runs again alone, and only the one at fault fails', async () => {
    await engine.run(CLEAR)
    await engine.write((tx) => tx.run(ADD, 'taken', 1, null, null, 0))
    const results = await Promise.allSettled(['x', 'taken', 'y'].map((id) => engine.write((tx) => tx.run(ADD, id, 2, null, null, 0))))
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    expect((results[1] as PromiseRejectedResult).reason).toBeInstanceOf(UniqueViolation)
    expect(await engine.all<{ id: string; n: number }>(ALL)).toEqual([
      { id: 'taken', n: 1 },
      { id: 'x', n: 2 },
      { id: 'y', n: 2 },
    ])
  })

  test('a write that announces a change and then throws is undone with its announcement; the others are heard', async () => {
    await engine.run(CLEAR)
    const heard: string[] = []
    await engine.listen((what) => heard.push(what))
    const [kept, dropped] = [`test:${crypto.randomUUID()}`, `test:${crypto.randomUUID()}`]
    let round: Promise<void> | null = null
    const results = await Promise.allSettled([
      engine.write(async (tx) => {
        await engine.announce(tx, kept)
        round = engine.propagated(kept)
        await tx.run(INSERT, 'told', 1, null, null, 0)
      }),
      engine.write(async (tx) => {
        await engine.announce(tx, dropped)
        throw new Error('refused after announcing')
      }),
    ])
    expect(results.map((r) => r.status)).toEqual(['fulfilled', 'rejected'])
    await round
    await Bun.sleep(100)
    expect(heard).toContain(kept)
    expect(heard).not.toContain(dropped)
    expect((await engine.all<{ id: string }>(ALL)).map((r) => r.id)).toEqual(['told'])
  })
})
