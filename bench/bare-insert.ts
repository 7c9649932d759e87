// The durable-insert ceiling: a bare Bun.serve that parses a JSON body and inserts one row into
// bun:sqlite (WAL, synchronous = FULL), committing the requests of one event-loop turn together
// (the same durability Capstan gives a 202), then answers 202.
// GATHER=1: gather the batch the way Capstan's writer does (src/db/writer.ts: one more turn while
// writes keep arriving, at most 2 ms) — the same ceiling with Capstan's batching.
import { Database } from 'bun:sqlite'

const db = new Database(process.env.DB_PATH!, { create: true })
db.run('PRAGMA journal_mode = WAL')
db.run('PRAGMA synchronous = FULL')
db.run('CREATE TABLE IF NOT EXISTS m (id TEXT PRIMARY KEY, recipient TEXT, body TEXT, created_at INTEGER)')
const ins = db.prepare('INSERT INTO m VALUES (?, ?, ?, ?)')
let batch: { row: [string, string, string, number]; done: () => void }[] = []
const flush = db.transaction((rows: typeof batch) => {
  for (const r of rows) ins.run(...r.row)
})
const gather = process.env.GATHER === '1'
let firstAt = 0
let seen = 0
const commit = () => {
  if (gather && batch.length > seen && batch.length < 1000 && performance.now() - firstAt < 2) {
    seen = batch.length
    return setImmediate(commit)
  }
  const b = batch
  batch = []
  flush(b)
  for (const x of b) x.done()
}
const server = Bun.serve({
  hostname: '127.0.0.1',
  port: Number(process.env.PORT ?? 0),
  async fetch(req) {
    const body = (await req.json()) as { recipient: string; body: string }
    const id = crypto.randomUUID()
    await new Promise<void>((done) => {
      if (batch.length === 0) {
        firstAt = performance.now()
        seen = 0
        setImmediate(commit)
      }
      batch.push({ row: [id, body.recipient, body.body, Date.now()], done })
    })
    return Response.json({ data: { id, status: 'queued' } }, { status: 202 })
  },
})
console.log(`listening ${server.port}`)
