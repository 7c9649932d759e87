// The PostgreSQL durable-insert ceiling: a bare Bun.serve that parses a JSON body, inserts one row
// through Bun.SQL (a pool of 20, its best: 8 serves it as much, 4 a third less; each insert its
// own committed transaction, which PostgreSQL flushes to disk before it answers) and answers 202.
export {}
const sql = new Bun.SQL(process.env.DATABASE_URL!, { max: 20 })
await sql`CREATE TABLE IF NOT EXISTS m (id TEXT PRIMARY KEY, recipient TEXT, body TEXT, created_at BIGINT)`
const server = Bun.serve({
  hostname: '127.0.0.1',
  port: Number(process.env.PORT ?? 0),
  async fetch(req) {
    const body = (await req.json()) as { recipient: string; body: string }
    const id = crypto.randomUUID()
    await sql`INSERT INTO m VALUES (${id}, ${body.recipient}, ${body.body}, ${Date.now()})`
    return Response.json({ data: { id, status: 'queued' } }, { status: 202 })
  },
})
console.log(`listening ${server.port}`)
