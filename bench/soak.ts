/**
 * Soak: a steady mixed load for N minutes (default 60, run by hand, not in CI) — 60% GET
 * /messages, 25% POST /messages, 15% POST /contacts at a fixed rate — sampling the server's RSS and
 * the p99 latency of each 10-second window. Run: bun bench/soak.ts [minutes] [requests/s] [CAPSTAN_X=value ...]
 * (settings after the rate go to the server, e.g. CAPSTAN_WAL_CHECKPOINTER=false).
 */
import { readFileSync } from 'node:fs'
import { startCapstan } from './support'

const minutes = Number(process.argv[2] ?? 60)
const rate = Number(process.argv[3] ?? 300)
const settings = Object.fromEntries(process.argv.slice(4).map((a) => [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)]))
const cap = await startCapstan({ CAPSTAN_LOG_LEVEL: 'info', ...settings })
const rss = () => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${cap.proc.pid}/status`, 'utf8'))![1]) / 1024
try {
  const ws = (await cap.admin('POST', '/workspaces', { name: 'Soak' })).data
  await cap.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 1_000_000, daily_cap: 10_000_000, min_gap_seconds: 0, max_gap_seconds: 0 } } })
  const key = (await cap.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'soak' })).data.key
  const conns: string[] = []
  for (let i = 0; i < 5; i++) conns.push((await cap.admin('POST', `/workspaces/${ws.id}/connections`, { phone: `+1555900000${i}`, driver: 'sandbox', config: { delivered_after_ms: 200, read_after_ms: 1000, fail_recipients: [] } })).data.id)
  const headers = { authorization: `Bearer ${key}`, 'content-type': 'application/json' }
  let n = 0
  let errors = 0
  let window: number[] = []
  const one = async () => {
    const i = n++
    const t = performance.now()
    const pick = i % 20
    let r: Response
    if (pick < 12) r = await fetch(`${cap.base}/api/v1/messages?per_page=25`, { headers })
    else if (pick < 17) r = await fetch(`${cap.base}/api/v1/messages`, { method: 'POST', headers, body: JSON.stringify({ connection_id: conns[i % conns.length], recipient: `+1666${String(i % 9_000_000).padStart(7, '0')}`, body: `soak ${i}` }) })
    else r = await fetch(`${cap.base}/api/v1/contacts`, { method: 'POST', headers, body: JSON.stringify({ phone: `+1777${String(i % 9_000_000).padStart(7, '0')}`, metadata: { n: i } }) })
    await r.arrayBuffer()
    if (r.status >= 400) errors++
    window.push(performance.now() - t)
  }
  console.log(`soak: ${minutes} min at ${rate} req/s\n\n| t | RSS | requests | p50 | p99 | errors |\n|---|---|---|---|---|---|`)
  const end = Date.now() + minutes * 60_000
  const interval = 1000 / rate
  let next = performance.now()
  const sampler = setInterval(() => {
    const w = window.sort((a, b) => a - b)
    window = []
    const q = (p: number) => (w.length ? w[Math.min(w.length - 1, Math.floor(w.length * p))]! : 0)
    console.log(`| ${Math.round((Date.now() - (end - minutes * 60_000)) / 1000)} s | ${rss().toFixed(0)} MiB | ${w.length} | ${q(0.5).toFixed(2)} ms | ${q(0.99).toFixed(2)} ms | ${errors} |`)
  }, 10_000)
  while (Date.now() < end) {
    void one().catch(() => errors++)
    next += interval
    const wait = next - performance.now()
    if (wait > 1) await Bun.sleep(wait)
  }
  clearInterval(sampler)
  await Bun.sleep(500)
} finally {
  await cap.stop()
}
process.exit(0)
