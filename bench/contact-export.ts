/**
 * A contact export of a long conversation (in-process, real SQLite file): `bun bench/contact-export.ts [messages]`.
 * Prints how long the whole document took, its size, the peak memory it added and the longest the
 * event loop was held (a 1 ms timer's worst lateness): what every other request and send waited.
 */
import { inProcess } from '../test/support/inproc'

const N = Number(process.argv[2] ?? 100_000)
const env = await inProcess()
const { svc, db } = env
const ws = svc.workspaces.create({ name: 'Export' })
const conn = svc.connections.create(ws.id, { phone: '+15550007000', driver: 'sandbox' })
const first = await svc.messages.inbound(conn.id, '+15550007001', 'x'.repeat(300))
const cols = (db.query("SELECT name FROM pragma_table_info('messages') WHERE name NOT IN ('seq', 'id')").all() as { name: string }[]).map((c) => c.name).join(', ')
db.run(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${N - 1}) INSERT INTO messages (id, ${cols}) SELECT 'copy-' || i, ${cols} FROM messages, n WHERE messages.id = ?`, [first.id])
Bun.gc(true)
const rss0 = process.memoryUsage().rss
let last = performance.now()
let held = 0
const tick = setInterval(() => {
  const now = performance.now()
  held = Math.max(held, now - last)
  last = now
}, 1)
const started = performance.now()
let bytes = 0
let peak = rss0
const reader = svc.contactExport.export(ws.id, '+15550007001').getReader()
for (let r = await reader.read(); !r.done; r = await reader.read()) {
  bytes += r.value.length
  peak = Math.max(peak, process.memoryUsage().rss)
  await Bun.sleep(0) // as a socket write would, let the loop turn
}
clearInterval(tick)
console.log(`${N} messages: ${(performance.now() - started).toFixed(0)} ms, ${(bytes / 1e6).toFixed(1)} MB of JSON, peak memory +${((peak - rss0) / 1e6).toFixed(0)} MB, event loop held at most ${held.toFixed(1)} ms`)
await env.close()
