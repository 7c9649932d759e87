import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { sendLoad, startCapstan, wrk, fmt } from '../bench/support'
const dir = mkdtempSync(join(tmpdir(), 'expl-'))
const pg = await PrivatePostgres.start(join(dir, 'pg'))
const env = { CAPSTAN_DATABASE_URL: pg.url, CAPSTAN_SECRET_KEY: 'bench-secret-key-0123456789abcdef0123456789', CAPSTAN_LOG_LEVEL: 'warn' }
const a = await startCapstan(env)
const { lua, keys } = await sendLoad(a)
console.log(fmt(await wrk(`${a.base}/api/v1/messages`, { seconds: 5, connections: 25, lua })))
const sql = new Bun.SQL(pg.url, { max: 1 })
const ws = (await sql`SELECT workspace_id FROM messages LIMIT 1`)[0].workspace_id
console.log((await sql`SELECT status, count(*) FROM messages GROUP BY 1`))
for (const q of [
  `EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM messages WHERE workspace_id = '${ws}' ORDER BY seq DESC LIMIT 50 OFFSET 0`,
  `EXPLAIN (ANALYZE, BUFFERS) SELECT * FROM messages WHERE workspace_id = '${ws}' AND status = 'queued' ORDER BY seq DESC LIMIT 50 OFFSET 0`,
  `EXPLAIN (ANALYZE, BUFFERS) SELECT CAST(COALESCE(SUM(n), 0) AS BIGINT) AS n FROM message_counts WHERE workspace_id = '${ws}' AND status = 'queued'`,
]) for (const r of await sql.unsafe(q)) console.log(r['QUERY PLAN'])
for (const p of ['/api/v1/messages?per_page=50', '/api/v1/messages?per_page=50&status=queued']) {
  const getLua = `local n = 0\nlocal keys = {${keys.map((k) => `"${k}"`).join(',')}}\nrequest = function()\n  n = n + 1\n  return wrk.format("GET", "${p}", {["Authorization"] = "Bearer " .. keys[(n % #keys) + 1]})\nend`
  console.log(p, fmt(await wrk(`${a.base}/api/v1/messages`, { seconds: 4, connections: 1, lua: getLua })))
}
await sql.close()
await a.stop(); await pg.stop(); process.exit(0)
