/**
 * A contact export of a long conversation (in-process, real SQLite file): `bun bench/contact-export.ts [messages]`.
 * Prints how long the whole document took, its size, the peak memory it added and the longest the
 * event loop was held (see timedHold).
 */
import { inProcess } from '../test/support/inproc'
import { copyRow } from '../test/support/rows'
import { timedHold } from './support'

const N = Number(process.argv[2] ?? 100_000)
const env = await inProcess()
const { svc, db } = env
const ws = await svc.workspaces.create({ name: 'Export' })
const conn = await svc.connections.create(ws.id, { phone: '+15550007000', driver: 'sandbox' })
const first = await svc.messages.inbound(conn.id, '+15550007001', 'x'.repeat(300))
copyRow(db, 'messages', first.id, N - 1, 'copy-')
Bun.gc(true)
const rss0 = process.memoryUsage().rss
let bytes = 0
let peak = rss0
const { ms, heldMs } = await timedHold(async () => {
  const reader = (await svc.contactExport.export(ws.id, '+15550007001')).getReader()
  for (let r = await reader.read(); !r.done; r = await reader.read()) {
    bytes += r.value.length
    peak = Math.max(peak, process.memoryUsage().rss)
    await Bun.sleep(0) // as a socket write would, let the loop turn
  }
})
console.log(`${N} messages: ${ms.toFixed(0)} ms, ${(bytes / 1e6).toFixed(1)} MB of JSON, peak memory +${((peak - rss0) / 1e6).toFixed(0)} MB, event loop held at most ${heldMs.toFixed(1)} ms`)
await env.close()
