import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { startCapstan } from '../bench/support'
const dir = mkdtempSync(join(tmpdir(), 'stq-'))
const pg = await PrivatePostgres.start(join(dir, 'pg'))
const env = { CAPSTAN_DATABASE_URL: pg.url, CAPSTAN_SECRET_KEY: 'bench-secret-key-0123456789abcdef0123456789', CAPSTAN_LOG_LEVEL: 'warn' }
const cap = await startCapstan(env)
const ws = (await cap.admin('POST', '/workspaces', { name: 'Log' })).data
const conn = (await cap.admin('POST', `/workspaces/${ws.id}/connections`, { phone: '+15550001111', driver: 'sandbox' })).data
await cap.stop()
const db = new Bun.SQL(pg.url, { max: 1 })
const now = Date.now()
const N = 1_000_000
// statuses by age: the oldest read, then delivered, sent, the newest queued; 1 in 1,000 failed; 1 in 20 inbound (delivered)
await db.unsafe(
  `INSERT INTO messages (id, workspace_id, connection_id, direction, status, recipient, sender, body, attachments, created_at, updated_at, sent_at, opt_in_required)
   SELECT gen_random_uuid()::text, $1, $2, CASE WHEN g % 20 = 0 THEN 'inbound' ELSE 'outbound' END,
     CASE WHEN g % 20 = 0 THEN 'delivered' WHEN g % 1000 = 1 THEN 'failed' WHEN g < 600000 THEN 'read' WHEN g < 800000 THEN 'delivered' WHEN g < 950000 THEN 'sent' ELSE 'queued' END,
     '+1777' || lpad((g % 100000)::text, 7, '0'), '+15550001111', 'Message ' || g, '[]', $3 + g, $3 + g, $3 + g, 0
   FROM generate_series(1, ${N}) g`, [ws.id, conn.id, now])
await db.unsafe('DROP INDEX IF EXISTS messages_by_status')
await db.unsafe('VACUUM (ANALYZE) messages')
const DIRS0 = 0
const DIRS = ['outbound', 'inbound']
const STATUSES = (await db`SELECT DISTINCT status FROM messages`).map((r: any) => r.status)
console.log('statuses in table', STATUSES)
const ALL_STATUSES = ['queued', 'sending', 'sent', 'delivered', 'read', 'failed']
const forms: Record<string, (f: { status?: string; direction?: string }) => [string, unknown[]]> = {
  now: (f) => {
    const w = ['workspace_id = $1']; const p: unknown[] = [ws.id]
    if (f.direction) { p.push(f.direction); w.push(`direction = $${p.length}`) }
    if (f.status) { p.push(f.status); w.push(`status = $${p.length}`) }
    return [`SELECT * FROM messages WHERE ${w.join(' AND ')} ORDER BY seq DESC LIMIT 50 OFFSET 0`, p]
  },
  expr: (f) => {
    const p: unknown[] = [ws.id]
    const branch = (d: string, st: string) => `(SELECT * FROM messages WHERE workspace_id = $1 AND direction = ${d} AND status = ${st} ORDER BY -seq LIMIT $LIMOFF)`
    let q: string
    if (f.direction && f.status) { p.push(f.direction, f.status); q = `SELECT * FROM messages WHERE workspace_id = $1 AND direction = $2 AND status = $3 ORDER BY -seq LIMIT $LIM OFFSET $OFF` }
    else if (f.direction) { p.push(f.direction); q = `SELECT * FROM (${ALL_STATUSES.map((s) => branch('$2', `'${s}'`)).join(' UNION ALL ')}) u ORDER BY seq DESC LIMIT $LIM OFFSET $OFF` }
    else if (f.status) { p.push(f.status); q = `SELECT * FROM (${DIRS.map((d) => branch(`'${d}'`, '$2')).join(' UNION ALL ')}) u ORDER BY seq DESC LIMIT $LIM OFFSET $OFF` }
    else return [`SELECT * FROM messages WHERE workspace_id = $1 ORDER BY seq DESC LIMIT 50 OFFSET 0`, p]
    p.push(Number(process.env.LIM ?? 50), Number(process.env.OFF ?? 0))
    const lim = p.length - 1, off = p.length
    q = q.replaceAll('$LIMOFF', `($${lim} + $${off})`).replaceAll('$LIM', `$${lim}`).replaceAll('$OFF', `$${off}`)
    return [q, p]
  },
  expr2: (f) => {
    const p: unknown[] = [ws.id]
    const branch = (d: string, st: string) => `(SELECT seq FROM messages WHERE workspace_id = $1 AND direction = ${d} AND status = ${st} ORDER BY -seq LIMIT $LIMOFF)`
    let q: string
    if (f.direction && f.status) { p.push(f.direction, f.status); q = `SELECT * FROM messages WHERE workspace_id = $1 AND direction = $2 AND status = $3 ORDER BY -seq LIMIT $LIM OFFSET $OFF` }
    else if (f.direction) { p.push(f.direction); q = `SELECT * FROM messages WHERE seq IN (SELECT seq FROM (${ALL_STATUSES.map((s) => branch('$2', `'${s}'`)).join(' UNION ALL ')}) u ORDER BY seq DESC LIMIT $LIM OFFSET $OFF) ORDER BY seq DESC` }
    else if (f.status) { p.push(f.status); q = `SELECT * FROM messages WHERE seq IN (SELECT seq FROM (${DIRS.map((d) => branch(`'${d}'`, '$2')).join(' UNION ALL ')}) u ORDER BY seq DESC LIMIT $LIM OFFSET $OFF) ORDER BY seq DESC` }
    else return [`SELECT * FROM messages WHERE workspace_id = $1 ORDER BY seq DESC LIMIT 50 OFFSET 0`, p]
    p.push(Number(process.env.LIM ?? 50), Number(process.env.OFF ?? 0))
    const lim = p.length - 1, off = p.length
    q = q.replaceAll('$LIMOFF', `(CAST($${lim} AS BIGINT) + CAST($${off} AS BIGINT))`).replaceAll('$LIM', `$${lim}`).replaceAll('$OFF', `$${off}`)
    return [q, p]
  },



}


const ex = async (label: string, q: string, p: unknown[]) => {
  console.log('== ' + label)
  for (const r of await db.unsafe('EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) ' + q, p)) console.log(r['QUERY PLAN'])
}
for (const mode of (process.env.MODES ?? 'auto,force_generic_plan').split(',')) {
await db.unsafe(`SET plan_cache_mode = ${mode}`); console.log('plan_cache_mode', mode)
for (const f of [{}, { status: 'read' }, { status: 'delivered' }, { status: 'sent' }, { status: 'queued' }, { status: 'failed' }, { direction: 'inbound' }, { direction: 'outbound' }, { direction: 'outbound', status: 'read' }, { direction: 'inbound', status: 'read' }]) {
  const line: string[] = []
  for (const [name, form] of Object.entries(forms)) {
    const [q, p] = form(f)
    const ts: number[] = []
    for (let i = 0; i < 12; i++) { const t = performance.now(); await db.unsafe(q, p); ts.push(performance.now() - t) }
    ts.sort((a, b) => a - b)
    line.push(`${name} ${ts[6]!.toFixed(2)} ms`)
  }
  console.log(JSON.stringify(f).padEnd(45), line.join('  '))
}}
for (const f of JSON.parse(process.env.EXPLAIN ?? '[]')) await ex('expr2 ' + JSON.stringify(f), ...forms.expr2(f))
await db.close(); await pg.stop(); process.exit(0)
