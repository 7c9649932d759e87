/**
 * `capstan migrate-to-postgres` on a large installation: how long the move takes (the time the
 * installation is stopped for it). A SQLite installation is made with `contacts` contacts and
 * `messages` messages spread over them (written straight into the file, as bench/messages.ts's
 * log), then moved into a private PostgreSQL (fsync on, a Unix socket); the media stays in the
 * data directory (no bucket), as a move to one PostgreSQL does. Beside it, the same messages
 * copied by PostgreSQL's own COPY from a file on the server (the move does not use it: it inserts
 * 1,000 rows a statement through Bun's client) into a table with no index, trigger or key — what the rows alone cost the server —
 * and into one with the messages table's columns and indexes.
 * Run: bun bench/migrate-to-postgres.ts [messages = 1000000] [contacts = 10000]
 */
import { Database } from 'bun:sqlite'
import { mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { hostEnv } from '../test/support/server'
import { ROOT, startCapstan } from './support'

const MESSAGES = Number(process.argv[2] ?? 1_000_000)
const CONTACTS = Number(process.argv[3] ?? 10_000)
const SECRET = 'bench-secret-key-0123456789abcdef0123456789'

const cap = await startCapstan({ CAPSTAN_SECRET_KEY: SECRET })
const ws = (await cap.admin('POST', '/workspaces', { name: 'Moving' })).data
await cap.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'k' })
const conn = (await cap.admin('POST', `/workspaces/${ws.id}/connections`, { phone: '+15550008888', driver: 'sandbox' })).data
cap.proc.kill()
await cap.proc.exited

const file = join(cap.dir, 'capstan.db')
const db = new Database(file)
db.run('PRAGMA synchronous = OFF')
const ins = db.query("INSERT INTO messages (id, workspace_id, connection_id, contact_id, direction, status, recipient, body, attachments, created_at, updated_at, sent_at) VALUES (?, ?, ?, ?, ?, ?, ?, 'Your order has shipped', '[]', ?, ?, ?)")
const addContact = db.query("INSERT INTO contacts (id, workspace_id, phone, consent_status, metadata, created_at, updated_at, last_activity_at) VALUES (?, ?, ?, 'unknown', '{}', ?, ?, ?)")
const st = ['sent', 'delivered', 'read', 'failed']
const now = Date.now()
const contacts = Array.from({ length: CONTACTS }, (_, i) => ({ id: crypto.randomUUID(), phone: `+1555${String(i).padStart(7, '0')}` }))
db.transaction(() => {
  for (const c of contacts) addContact.run(c.id, ws.id, c.phone, now, now, now)
  for (let i = 0; i < MESSAGES; i++) {
    const c = contacts[(i * 7919) % contacts.length]!
    ins.run(crypto.randomUUID(), ws.id, conn.id, c.id, i % 5 === 0 ? 'inbound' : 'outbound', st[i % 4]!, c.phone, now - MESSAGES + i, now, now)
  }
})()
db.run('PRAGMA wal_checkpoint(TRUNCATE)')
db.close()
const size = statSync(file).size

const pgDir = mkdtempSync(join(tmpdir(), 'capstan-bench-move-'))
const pg = await PrivatePostgres.start(join(pgDir, 'pg'))
const target = await pg.createDatabase('moved')
const t0 = performance.now()
const move = Bun.spawn(['bun', join(ROOT, 'src/main.ts'), 'migrate-to-postgres'], { env: { ...hostEnv(), CAPSTAN_DATA_DIR: cap.dir, CAPSTAN_DATABASE_URL: target, CAPSTAN_SECRET_KEY: SECRET }, stdout: 'pipe', stderr: 'pipe' })
const [code, out, err] = await Promise.all([move.exited, new Response(move.stdout).text(), new Response(move.stderr).text()])
const seconds = (performance.now() - t0) / 1000
if (code !== 0) throw new Error(`migrate-to-postgres exited ${code}: ${err}`)

// the ceiling: the same message rows, COPY'd into a bare table (no index, trigger or key)
const bare = await pg.createDatabase('bare')
const sql = new Bun.SQL(bare, { max: 1 })
await sql.unsafe('CREATE TABLE m (id text, workspace_id text, connection_id text, contact_id text, direction text, status text, recipient text, body text, attachments text, created_at bigint, updated_at bigint, sent_at bigint)')
const src = new Database(file, { readonly: true })
const lines: string[] = []
for (const r of src.query('SELECT id, workspace_id, connection_id, contact_id, direction, status, recipient, body, attachments, created_at, updated_at, sent_at FROM messages').values() as unknown[][]) lines.push(r.map((v) => (v === null ? '\\N' : String(v))).join('\t'))
src.close()
const tsv = join(pgDir, 'messages.tsv')
await Bun.write(tsv, `${lines.join('\n')}\n`)
const { chownSync } = await import('node:fs')
try {
  // (the server reads the file as its own user)
  const pw = Bun.spawnSync(['id', '-u', 'postgres'], { stdout: 'pipe' })
  if (pw.exitCode === 0) chownSync(tsv, Number(pw.stdout.toString().trim()), 0)
} catch {}
const c0 = performance.now()
await sql.unsafe(`COPY m FROM '${tsv}'`)
const copySeconds = (performance.now() - c0) / 1000
await sql.close()
// and into a copy of the moved messages table with its indexes (its triggers and foreign keys not)
const moved = new Bun.SQL(target, { max: 1 })
await moved.unsafe('CREATE TABLE m (LIKE messages INCLUDING ALL)')
const cols = 'id, workspace_id, connection_id, contact_id, direction, status, recipient, body, attachments, created_at, updated_at, sent_at'
const i0 = performance.now()
await moved.unsafe(`COPY m (${cols}) FROM '${tsv}'`)
const indexedSeconds = (performance.now() - i0) / 1000
await moved.close()

console.log(`\ncapstan migrate-to-postgres: ${MESSAGES.toLocaleString('en-US')} messages, ${CONTACTS.toLocaleString('en-US')} contacts (SQLite file ${(size / 1024 / 1024).toFixed(0)} MiB); 2 cores, Bun ${Bun.version}\n`)
console.log('| step | time | messages a second |')
console.log('|---|---|---|')
console.log(`| the whole move (every table, counts verified, one transaction) | ${seconds.toFixed(1)} s | ${Math.round(MESSAGES / seconds).toLocaleString('en-US')} |`)
console.log(`| ceiling: the message rows alone, COPY into a table with no index, trigger or key | ${copySeconds.toFixed(1)} s | ${Math.round(MESSAGES / copySeconds).toLocaleString('en-US')} |`)
console.log(`| the same COPY into a table with the messages table's columns and indexes (not its triggers or foreign keys) | ${indexedSeconds.toFixed(1)} s | ${Math.round(MESSAGES / indexedSeconds).toLocaleString('en-US')} |`)
console.log(`\n${out.trim().split('\n')[0]}`)
await pg.stop()
rmSync(pgDir, { recursive: true, force: true })
rmSync(cap.dir, { recursive: true, force: true })
process.exit(0)
