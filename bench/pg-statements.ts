/**
 * The statements one POST /api/v1/messages runs on PostgreSQL, as the server logs them: a private
 * PostgreSQL, one Capstan on it, five sends to warm the caches, then one send with
 * log_statement = all. What bench/postgres.ts measures, statement by statement (see
 * docs/design/two-engines.md). Run: bun bench/pg-statements.ts
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { sendLoad, startCapstan } from './support'

const dir = mkdtempSync(join(tmpdir(), 'capstan-pg-statements-'))
const pg = await PrivatePostgres.start(join(dir, 'pg'))
const cap = await startCapstan({ CAPSTAN_DATABASE_URL: pg.url, CAPSTAN_SECRET_KEY: 'bench-secret-key-0123456789abcdef0123456789', CAPSTAN_LOG_LEVEL: 'warn' })
try {
  const { keys, connection } = await sendLoad(cap)
  const send = (i: number) =>
    fetch(`${cap.base}/api/v1/messages`, { method: 'POST', headers: { authorization: `Bearer ${keys[0]}`, 'content-type': 'application/json' }, body: JSON.stringify({ connection_id: connection, recipient: `+1555000${1000 + i}`, body: 'Your order has shipped' }) })
  for (let i = 0; i < 5; i++) await send(i)
  const admin = new Bun.SQL(pg.url, { max: 1 })
  const logging = async (on: boolean) => {
    await admin.unsafe(`ALTER SYSTEM SET log_statement = '${on ? 'all' : 'none'}'`)
    await admin.unsafe('SELECT pg_reload_conf()')
    await Bun.sleep(300)
  }
  await logging(true)
  const before = pg.output.length
  const status = (await send(99)).status
  await Bun.sleep(300) // the pacer's look at the number, after the answer
  const lines = pg.output.slice(before).split('\n')
  await logging(false)
  await admin.close()
  console.log(`POST /api/v1/messages answered ${status}; PostgreSQL ran:`)
  for (const line of lines) {
    const m = /LOG:\s+(?:statement|execute [^:]*): (.*)$/.exec(line)
    if (m && !/log_statement|pg_reload_conf/.test(m[1]!)) console.log(`  ${m[1]!.slice(0, 160)}`)
  }
} finally {
  await cap.stop()
  await pg.stop()
  rmSync(dir, { recursive: true, force: true })
}
