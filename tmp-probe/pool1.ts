import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { sendLoad, startCapstan, wrk, fmt } from '../bench/support'
const dir = mkdtempSync(join(tmpdir(), 'pool1-'))
const pg = await PrivatePostgres.start(join(dir, 'pg'))
const env = { CAPSTAN_DATABASE_URL: pg.url, CAPSTAN_SECRET_KEY: 'bench-secret-key-0123456789abcdef0123456789', CAPSTAN_LOG_LEVEL: 'warn', CAPSTAN_DATABASE_POOL: process.argv[2] ?? '1' }
const a = await startCapstan(env)
const b = await startCapstan(env)
const { lua, keys } = await sendLoad(a)
const getLua = `local n = 0\nlocal keys = {${keys.map((k) => `"${k}"`).join(',')}}\nrequest = function()\n  n = n + 1\n  return wrk.format("GET", "/api/v1/messages?per_page=50&status=queued", {["Authorization"] = "Bearer " .. keys[(n % #keys) + 1]})\nend`
const rs = await Promise.all([
  wrk(`${a.base}/api/v1/messages`, { seconds: 8, connections: 20, lua }),
  wrk(`${b.base}/api/v1/messages`, { seconds: 8, connections: 20, lua }),
  ...(process.env.GETQ === "none" ? [] : [wrk(`${a.base}/api/v1/messages`, { seconds: 8, connections: 5, lua: getLua.replace("status=queued", process.env.GETQ ?? "status=queued") })]),
])
for (const r of rs) console.log(fmt(r))
const h = await fetch(`${a.base}/readyz`); console.log('readyz', h.status)
const w = await fetch(`${b.base}/api/v1/messages?per_page=1`, { headers: { authorization: `Bearer ${keys[0]}` } }); console.log('b list', w.status, (await w.json() as any).meta?.total)
await a.stop?.(); await b.stop?.()
await pg.stop()
process.exit(0)
