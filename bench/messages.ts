/**
 * Messaging benchmarks (issue: messaging). Run: bun bench/messages.ts [post|release|list|all] [seconds] [rounds]
 *
 * post:    POST /api/v1/messages with 50 keys against a bare Bun hello and a bare durable-insert
 *          server (bench/bare-insert.ts), measured in turns, medians. Target: >= 50% of the bare
 *          insert ceiling.
 * release: 1,000 sandbox numbers at zero gap release a pre-filled queue, in-process over a real
 *          SQLite file and the real sandbox driver. Target: >= 5,000 messages/s. Then the
 *          scheduler's CPU use while messages are queued but none is due (target ~0%).
 * list:    GET /api/v1/messages with 1,000,000 messages stored (10,000 contacts with 100 each), the
 *          whole log, its filters and one contact's conversation. Target: p50 <= 5 ms.
 */
import { Database } from 'bun:sqlite'
import { rmSync } from 'node:fs'
import { join } from 'node:path'
import { startServices } from '../src/services'
import { hostEnv } from '../test/support/server'
import { ROOT, benchServices, fmt, freePort, ratio, rounds, startBare, startBareInsert, startCapstan, wrk } from './support'

const what = process.argv[2] ?? 'all'
const seconds = Number(process.argv[3] ?? 8)
const turns = Number(process.argv[4] ?? 5)

async function post() {
  const bare = await startBare()
  const ins = await startBareInsert()
  const insGather = await startBareInsert(true)
  const cap = await startCapstan()
  try {
    const ws = (await cap.admin('POST', '/workspaces', { name: 'Bench' })).data
    const conn = (await cap.admin('POST', `/workspaces/${ws.id}/connections`, { phone: '+15550009999', driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).data
    const keys: string[] = []
    for (let i = 0; i < 50; i++) keys.push((await cap.admin('POST', `/workspaces/${ws.id}/keys`, { name: `k${i}` })).data.key)
    const lua = (withAuth: boolean) => `
local n = 0
local keys = {${keys.map((k) => `"${k}"`).join(',')}}
local tid = math.random(100, 999)
request = function()
  n = n + 1
  local body = string.format('{"connection_id":"${conn.id}","recipient":"+1%03d%07d","body":"Your order %d has shipped"}', tid, n, n)
  local h = {["Content-Type"] = "application/json"}
  ${withAuth ? 'h["Authorization"] = "Bearer " .. keys[(n % #keys) + 1]' : ''}
  return wrk.format("POST", nil, h, body)
end`
    const [hello, insert, gathered, send] = await rounds(
      [
        { name: 'bare Bun.serve hello', url: `${bare.base}/` },
        { name: 'bare durable insert (JSON parse + INSERT, group commit, FULL sync)', url: `${ins.base}/`, lua: lua(false) },
        { name: 'the same, batches gathered like Capstan’s writer', url: `${insGather.base}/`, lua: lua(false) },
        { name: 'POST /api/v1/messages', url: `${cap.base}/api/v1/messages`, lua: lua(true) },
      ],
      { rounds: turns, seconds },
    )
    console.log(`\nPOST /messages, wrk -t1 -c50, 50 API keys, ${turns} rounds of ${seconds} s in turns, medians\n`)
    console.log('| target | median result | of insert ceiling |\n|---|---|---|')
    console.log(`| ${hello!.name} | ${fmt(hello!.median)} | — |`)
    console.log(`| ${insert!.name} | ${fmt(insert!.median)} | 100% |`)
    console.log(`| ${gathered!.name} | ${fmt(gathered!.median)} | ${ratio(gathered!, insert!)} |`)
    console.log(`| ${send!.name} | ${fmt(send!.median)} | ${ratio(send!, insert!)}; of the gathered one: ${ratio(send!, gathered!)} |`)
  } finally {
    bare.stop()
    ins.stop()
    insGather.stop()
    await cap.stop()
  }
}

async function release() {
  // started below, once the queues are full
  const { db, svc, close } = await benchServices('release', false)
  const ws = await svc.workspaces.create({ name: 'Release' })
  await svc.workspaces.patch(ws.id, { settings: { sending_policy: { hourly_cap: 100_000, daily_cap: 1_000_000, min_gap_seconds: 0, max_gap_seconds: 0 } } })
  const numbers = 1000
  const perNumber = 30
  const conns = []
  for (let i = 0; i < numbers; i++) conns.push(await svc.connections.create(ws.id, { phone: `+1555${String(i).padStart(7, '0')}`, driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } }))
  // fill the queues before the pacer runs
  const sends = []
  for (let j = 0; j < perNumber; j++) for (const c of conns) sends.push(svc.messages.send(ws.id, { connection_id: c.id, recipient: `+1666${String(sends.length).padStart(7, '0')}`, body: 'release bench', attachments: [] }))
  await Promise.all(sends)
  const total = numbers * perNumber
  const sentCount = db.query<{ n: number }, []>("SELECT COUNT(*) AS n FROM messages WHERE status = 'sent'")
  const t0 = performance.now()
  await startServices(svc)
  while (sentCount.get()!.n < total) await Bun.sleep(20)
  const ms = performance.now() - t0
  console.log(`\nRelease: ${numbers} sandbox numbers, zero gap, ${total.toLocaleString('en-US')} queued messages`)
  console.log(`| queued → sending → sent for all | ${ms.toFixed(0)} ms | ${Math.round(total / (ms / 1000)).toLocaleString('en-US')} messages/s |`)

  // idle: every number has one message waiting behind a one-hour gap
  await svc.workspaces.patch(ws.id, { settings: { sending_policy: { hourly_cap: 100_000, daily_cap: 1_000_000, min_gap_seconds: 3600, max_gap_seconds: 3600 } } })
  await Promise.all(conns.map((c, i) => svc.messages.send(ws.id, { connection_id: c.id, recipient: `+1777${String(i).padStart(7, '0')}`, body: 'waits', attachments: [] })))
  await Bun.sleep(500)
  const before = process.cpuUsage()
  const t1 = performance.now()
  await Bun.sleep(5000)
  const used = process.cpuUsage(before)
  const wall = (performance.now() - t1) * 1000
  console.log(`| idle with ${numbers} messages queued, none due (5 s) | CPU ${(((used.user + used.system) / wall) * 100).toFixed(2)}% of one core |`)
  close()
}

async function list() {
  const cap = await startCapstan()
  const ws = (await cap.admin('POST', '/workspaces', { name: 'Log' })).data
  const key = (await cap.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'k' })).data.key
  const conn = (await cap.admin('POST', `/workspaces/${ws.id}/connections`, { phone: '+15550008888', driver: 'sandbox' })).data
  cap.proc.kill()
  await cap.proc.exited
  const db = new Database(join(cap.dir, 'capstan.db'))
  db.run('PRAGMA synchronous = OFF')
  const ins = db.query("INSERT INTO messages (id, workspace_id, connection_id, contact_id, direction, status, recipient, body, attachments, created_at, updated_at, sent_at) VALUES (?, ?, ?, ?, ?, ?, '+15551234567', 'Your order has shipped', '[]', ?, ?, ?)")
  const addContact = db.query("INSERT INTO contacts (id, workspace_id, phone, consent_status, metadata, created_at, updated_at, last_activity_at) VALUES (?, ?, ?, 'unknown', '{}', ?, ?, ?)")
  const st = ['sent', 'delivered', 'read', 'failed']
  const now = Date.now()
  // 10,000 contacts with 100 messages each, interleaved (a conversation is spread over the log)
  const contacts = Array.from({ length: 10_000 }, () => crypto.randomUUID())
  db.transaction(() => {
    for (const [i, id] of contacts.entries()) addContact.run(id, ws.id, `+1555${String(i).padStart(7, '0')}`, now, now, now)
    for (let i = 0; i < 1_000_000; i++) ins.run(crypto.randomUUID(), ws.id, conn.id, contacts[(i * 7919) % contacts.length]!, i % 5 === 0 ? 'inbound' : 'outbound', st[i % 4]!, now - 1_000_000 + i, now, now)
  })()
  db.close()
  const port = await freePort()
  const clean = hostEnv()
  const proc = Bun.spawn(['bun', join(ROOT, 'src/main.ts'), 'serve'], {
    env: { ...clean, CAPSTAN_HOST: '127.0.0.1', CAPSTAN_PORT: String(port), CAPSTAN_DATA_DIR: cap.dir, CAPSTAN_ADMIN_TOKEN: 'bench-admin-token-0123456789', CAPSTAN_KEY_RATE_LIMIT: '10000000', CAPSTAN_CLAMD: 'unix:/nonexistent' },
    stdout: 'ignore',
    stderr: 'inherit',
  })
  for (let i = 0; i < 200; i++) {
    if ((await fetch(`http://127.0.0.1:${port}/healthz`).catch(() => null))?.ok) break
    await Bun.sleep(50)
  }
  console.log(`\nGET /api/v1/messages with 1,000,000 messages stored (wrk -t1 -c1 -d${seconds}s, one request at a time)\n`)
  console.log('| query | result |\n|---|---|')
  const one = contacts[1234]
  for (const qs of ['', '?direction=inbound', '?status=failed', '?direction=outbound&status=read&per_page=100', '?page=2000', `?contact_id=${one}`, `?contact_id=${one}&direction=inbound&per_page=100`]) {
    const r = await wrk(`http://127.0.0.1:${port}/api/v1/messages${qs}`, { seconds, connections: 1, headers: { authorization: `Bearer ${key}` } })
    console.log(`| GET /api/v1/messages${qs} | ${fmt(r)} |`)
  }
  proc.kill()
  await proc.exited
  rmSync(cap.dir, { recursive: true, force: true })
}

if (what === 'post' || what === 'all') await post()
if (what === 'release' || what === 'all') await release()
if (what === 'list' || what === 'all') await list()
process.exit(0)
