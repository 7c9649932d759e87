/**
 * Group commit (src/db/writer.ts) over a real SQLite file: writes that keep arriving turn after
 * turn share one commit, a lone write is not held back, a steady stream still commits within the
 * gathering limit, and a write that throws is rolled back alone.
 */
import { afterEach, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openDatabase } from '../src/db/open'
import { AwaitedOutsideWrite, Writer } from '../src/db/writer'

setDefaultTimeout(60_000)

let dir: string | null = null
let db: Database | null = null
afterEach(() => {
  db?.close()
  if (dir) rmSync(dir, { recursive: true, force: true })
  db = null
  dir = null
})

/** A writer over a fresh file, counting the COMMITs it runs (the statement itself is real). */
function setup() {
  dir = mkdtempSync(join(tmpdir(), 'capstan-writer-'))
  db = openDatabase(join(dir, 'w.db'))
  db.run('CREATE TABLE t (n INTEGER NOT NULL UNIQUE)')
  const commits = { n: 0 }
  const prepare = db.prepare.bind(db)
  ;(db as any).prepare = (sql: string) => {
    const stmt = prepare(sql)
    if (sql !== 'COMMIT') return stmt
    return { run: () => (commits.n++, stmt.run()) }
  }
  const writer = new Writer(db)
  const insert = db.prepare('INSERT INTO t (n) VALUES (?)')
  const put = (n: number) => writer.write(() => insert.run(n).changes)
  const rows = () => (db!.query('SELECT n FROM t ORDER BY n').all() as { n: number }[]).map((r) => r.n)
  return { writer, put, rows, commits }
}

const nextTurn = () => new Promise<void>((r) => setImmediate(r))

test('writes that arrive over consecutive turns of the event loop share one commit', async () => {
  const { put, rows, commits } = setup()
  const pending: Promise<number>[] = []
  for (let turn = 0; turn < 5; turn++) {
    pending.push(put(turn * 2), put(turn * 2 + 1))
    await nextTurn()
  }
  expect(await Promise.all(pending)).toEqual(Array(10).fill(1))
  expect(commits.n).toBe(1)
  expect(rows()).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9])
})

test('a lone write commits within a few turns, not after the gathering limit', async () => {
  const { put, rows, commits } = setup()
  let done = false
  void put(7).then(() => (done = true))
  for (let i = 0; i < 3 && !done; i++) await nextTurn()
  expect(done).toBe(true)
  expect(commits.n).toBe(1)
  expect(rows()).toEqual([7])
})

test('a steady stream of writes still commits while it goes on (a batch gathers for at most 2 ms)', async () => {
  const { put, rows, commits } = setup()
  const pending: Promise<number>[] = []
  const start = performance.now()
  let n = 0
  while (performance.now() - start < 30) {
    pending.push(put(n++))
    // a write in every turn, but far fewer than a batch's 1,000 within its 2 ms
    const t = performance.now()
    while (performance.now() - t < 0.05);
    await nextTurn()
  }
  expect(n).toBeLessThan(1000)
  // some batches committed while the stream was still going
  expect(commits.n).toBeGreaterThan(1)
  await Promise.all(pending)
  expect(rows().length).toBe(n)
})

test('a write that throws is rolled back alone; the others in its batch commit', async () => {
  const { writer, put, rows, commits } = setup()
  const insert = db!.prepare('INSERT INTO t (n) VALUES (?)')
  const a = put(1)
  const bad = writer.write(() => {
    insert.run(2)
    insert.run(1) // UNIQUE violation after a write of its own
  })
  const c = put(3)
  const settled = await Promise.allSettled([a, bad, c])
  expect(settled.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
  expect(commits.n).toBe(1)
  expect(rows()).toEqual([1, 3])
})

test('a refusal (a write that throws before writing) costs no second pass; one that fails half-way makes the batch run again', async () => {
  const { writer, rows, commits } = setup()
  const insert = db!.prepare('INSERT INTO t (n) VALUES (?)')
  const runs = { a: 0, b: 0 }
  const counted = (name: 'a' | 'b', n: number) => writer.write(() => (runs[name]++, insert.run(n).changes))

  // a refusal, and a first statement that fails on its own (SQLite undoes that statement)
  const first = await Promise.allSettled([
    counted('a', 1),
    writer.write(() => {
      throw new Error('refused')
    }),
    writer.write(() => insert.run(1)),
    counted('b', 2),
  ])
  expect(first.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'rejected', 'fulfilled'])
  expect(String((first[1] as PromiseRejectedResult).reason)).toContain('refused')
  expect(String((first[2] as PromiseRejectedResult).reason)).toContain('UNIQUE')
  expect(runs).toEqual({ a: 1, b: 1 })

  // half-way: everything is rolled back and the batch runs again, each write in a savepoint
  const second = await Promise.allSettled([
    counted('a', 3),
    writer.write(() => {
      insert.run(4)
      insert.run(3)
    }),
    counted('b', 5),
  ])
  expect(second.map((r) => r.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
  // a ran in the fast pass and again in the careful one; the fast pass stopped before b
  expect(runs).toEqual({ a: 3, b: 2 })
  expect(commits.n).toBe(2)
  expect(rows()).toEqual([1, 2, 3, 5])
})

describe('async write callbacks (the store seam: one write(async (tx) => …) for both engines)', () => {
  test('async writes that await only the database join the same batch and commit as sync ones', async () => {
    const { writer, put, rows, commits } = setup()
    const insert = db!.prepare('INSERT INTO t (n) VALUES (?)')
    // what a store method on SQLite is: the statement runs at once, the caller awaits its value
    const store = { insert: async (n: number) => insert.run(n).changes }
    const results = await Promise.all([
      put(1),
      writer.write(async () => (await store.insert(2)) + (await store.insert(3))),
      put(4),
      writer.write(async () => {
        await store.insert(5)
        return 'five'
      }),
    ])
    expect(results).toEqual([1, 2, 1, 'five'])
    expect(commits.n).toBe(1)
    expect(rows()).toEqual([1, 2, 3, 4, 5])
  })

  test('an async write that fails half-way is rolled back alone; the others in its batch commit', async () => {
    const { writer, put, rows } = setup()
    const insert = db!.prepare('INSERT INTO t (n) VALUES (?)')
    const outcome = await Promise.allSettled([
      put(1),
      writer.write(async () => {
        insert.run(2)
        await Promise.resolve()
        insert.run(1) // UNIQUE: fails after writing 2
      }),
      writer.write(async () => insert.run(3).changes),
    ])
    expect(outcome.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    expect(rows()).toEqual([1, 3])
  })

  test('an async write that waits for something outside the database (a timer) is refused; nothing of it is kept, the rest commit', async () => {
    const { writer, put, rows } = setup()
    const insert = db!.prepare('INSERT INTO t (n) VALUES (?)')
    const outcome = await Promise.allSettled([
      put(1),
      writer.write(async () => {
        insert.run(2)
        await Bun.sleep(5)
        insert.run(3)
      }),
      put(4),
    ])
    expect(outcome.map((o) => o.status)).toEqual(['fulfilled', 'rejected', 'fulfilled'])
    expect((outcome[1] as PromiseRejectedResult).reason).toBeInstanceOf(AwaitedOutsideWrite)
    expect(rows()).toEqual([1, 4])
    // and the writer goes on: the next batch commits
    expect(await put(5)).toBe(1)
    expect(rows()).toEqual([1, 4, 5])
  })

  test('writes made while an async batch is open wait for it, then commit in the next batch', async () => {
    const { writer, put, rows, commits } = setup()
    const insert = db!.prepare('INSERT INTO t (n) VALUES (?)')
    let later: Promise<number> | null = null
    const first = writer.write(async () => {
      insert.run(1)
      // queued from inside the open batch: must not run inside it
      later = put(2)
      await Promise.resolve()
      return 1
    })
    expect(await first).toBe(1)
    expect(await later!).toBe(1)
    expect(commits.n).toBe(2)
    expect(rows()).toEqual([1, 2])
  })
})
