/**
 * What the store seam's async write callbacks cost SQLite's group commit: the same inserts through
 * `Writer.write` with a synchronous callback (today's modules) and with an async one that awaits a
 * store method (the seam's form), in turns, 50 concurrent writers like a busy server.
 * Run: bun bench/writer-async.ts [rounds = 5] [writes per round = 100000]
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { openDatabase } from '../src/db/open'
import { Writer } from '../src/db/writer'

const rounds = Number(process.argv[2] ?? 5)
const total = Number(process.argv[3] ?? 100_000)
const dir = mkdtempSync(join(tmpdir(), 'capstan-bench-writer-'))
const db = openDatabase(join(dir, 'bench.db'))
db.run('CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL, at INTEGER NOT NULL)')
const writer = new Writer(db)
const insert = db.prepare('INSERT INTO t (body, at) VALUES (?, ?)')
const store = { insert: async (body: string, at: number) => insert.run(body, at).changes }

async function run(kind: 'sync' | 'async'): Promise<number> {
  let next = 0
  const start = performance.now()
  const client = async () => {
    while (next < total) {
      next++
      if (kind === 'sync') await writer.write(() => insert.run('Your order has shipped', Date.now()).changes)
      else await writer.write(async () => (await store.insert('Your order has shipped', Date.now())) + 0)
    }
  }
  await Promise.all(Array.from({ length: 50 }, client))
  return total / ((performance.now() - start) / 1000)
}

const results: Record<string, number[]> = { sync: [], async: [] }
for (let r = 0; r < rounds; r++) for (const kind of ['sync', 'async'] as const) results[kind]!.push(await run(kind))
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const s = median(results.sync!)
const a = median(results.async!)
console.log(`writes/s, median of ${rounds} rounds of ${total}: sync ${Math.round(s)}, async ${Math.round(a)} (${((a / s) * 100).toFixed(1)}%)`)
db.close()
rmSync(dir, { recursive: true, force: true })
