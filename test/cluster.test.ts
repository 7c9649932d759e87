/**
 * Several instances, one truth (issue #32): `bun run cluster` with three instances on one private
 * PostgreSQL and one s3rver bucket, behind its round-robin proxy. Under send load one instance is
 * killed (SIGKILL): the numbers it released are taken over by the others, and afterwards no
 * accepted message is lost, none went to the network twice (the sandbox's record in the
 * database), every sent message's webhook event arrived, and the limits count requests of every
 * instance together.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { readFileSync } from 'node:fs'
import { userInfo } from 'node:os'
import { join } from 'node:path'
import { LEASE_MS } from '../src/scheduler/leases'
import { TestServer, newPhone } from './support/server'

setDefaultTimeout(240_000)

const NUMBERS = 6
const SENDS = 600
const KEY_LIMIT = 3000

let srv: TestServer
let receiver: ReturnType<typeof Bun.serve>
const events: { type: string; id: string; webhookId: string }[] = []

beforeAll(async () => {
  receiver = Bun.serve({
    hostname: '127.0.0.1',
    port: 0,
    async fetch(req) {
      const body = (await req.json()) as { type: string; data: { id: string } }
      events.push({ type: body.type, id: body.data.id, webhookId: req.headers.get('webhook-id') ?? '' })
      return new Response(null, { status: 204 })
    },
  })
  srv = await TestServer.start({
    command: ['bun', 'src/cluster/main.ts'],
    startMs: 120_000,
    env: { CAPSTAN_CLUSTER_INSTANCES: '3', CAPSTAN_KEY_RATE_LIMIT: String(KEY_LIMIT), CAPSTAN_LOG_LEVEL: 'warn' },
  })
})

afterAll(async () => {
  await srv?.close()
  void receiver?.stop(true)
})

/** The cluster's instances (written by the cluster script). */
const instances = () => JSON.parse(readFileSync(join(srv.dataDir, 'instances.json'), 'utf8')) as { name: string; url: string; pid: number }[]

/** The cluster's private PostgreSQL, read directly (its socket is in the data directory). */
function database() {
  const role = process.getuid?.() === 0 ? 'capstan' : userInfo().username
  return new Bun.SQL(`postgres://${role}@localhost/capstan?host=${encodeURIComponent(join(srv.dataDir, 'postgres'))}`, { max: 1 })
}

describe('three instances on one PostgreSQL', () => {
  test('one is killed under send load: its numbers move on; nothing accepted is lost or sent twice; every event arrives; limits hold in total', async () => {
    const { ws, key } = await srv.tenant()
    const policy = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0, hourly_cap: 100_000, daily_cap: 100_000 } } })
    expect(policy.status).toBe(200)
    const hook = await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: `http://127.0.0.1:${receiver.port}/hook`, events: ['message.sent'] })
    expect(hook.status).toBe(201)
    const numbers: string[] = []
    for (let i = 0; i < NUMBERS; i++) {
      const r = await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1777'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })
      expect(r.status).toBe(201)
      numbers.push(r.json.data.id)
    }

    // a client that retries what it did not get an answer to, with the same Idempotency-Key
    const accepted = new Set<string>()
    const send = async (i: number) => {
      const until = Date.now() + 120_000
      // the same request each time (a retry with a new body would be another request: 409 idempotency_conflict)
      const body = JSON.stringify({ connection_id: numbers[i % NUMBERS], recipient: newPhone('+1888'), body: `load ${i}` })
      for (;;) {
        const r = await fetch(`${srv.base}/api/v1/messages`, {
          method: 'POST',
          headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json', 'idempotency-key': `load-${ws.id}-${i}` },
          body,
        }).catch(() => null)
        if (r?.status === 202) {
          accepted.add(((await r.json()) as { data: { id: string } }).data.id)
          return
        }
        const status = r?.status ?? 0
        // the instance died with the request (502), or its claim on the key has not run out (409)
        if (![0, 409, 502, 503].includes(status)) throw new Error(`send ${i}: ${status} ${await r?.text()}`)
        if (Date.now() > until) throw new Error(`send ${i}: no answer for two minutes (last ${status})`)
        await Bun.sleep(1000)
      }
    }
    let next = 0
    let killed: { name: string; pid: number } | null = null
    let sendingAtKill = new Set<string>()
    // how long after the kill every number's lease was held by a live instance again: one whose
    // lease runs out later than any the dead instance could have taken (it renewed before it died)
    let takenOver: Promise<number> | null = null
    const watchTakeover = async (killedAt: number) => {
      const sql = database()
      try {
        for (;;) {
          const rows = (await sql`SELECT expires_at FROM number_leases WHERE connection_id NOT LIKE 'job:%'`) as { expires_at: string | number }[]
          if ((rows.length === NUMBERS && rows.every((r) => Number(r.expires_at) > killedAt + LEASE_MS)) || Date.now() > killedAt + 60_000) return Date.now() - killedAt
          await Bun.sleep(100)
        }
      } finally {
        await sql.close()
      }
    }
    const worker = async () => {
      for (let i = next++; i < SENDS; i = next++) {
        await send(i)
        if (!killed && accepted.size >= SENDS / 3) {
          killed = instances()[1]!
          process.kill(killed.pid, 'SIGKILL')
          takenOver = watchTakeover(Date.now())
          // what was in the network's hands then: the dead instance's part stays so until its numbers are taken over
          const sql = database()
          sendingAtKill = new Set(((await sql`SELECT id FROM messages WHERE status = 'sending'`) as { id: string }[]).map((r) => r.id))
          await sql.close()
        }
      }
    }
    await Promise.all(Array.from({ length: 16 }, worker))
    expect(killed).not.toBeNull()
    expect(accepted.size).toBe(SENDS)

    // the killed instance's numbers are taken over within 15 s of its death (its leases run out
    // within LEASE_MS, the others try at each renewal); its interrupted sends are settled from
    // the shared record, and every message settles
    expect(await takenOver!).toBeLessThan(15_000)
    const count = async (status: string) => (await srv.api(key, 'GET', `/messages?status=${status}&per_page=1`)).json.meta.total as number
    const deadline = Date.now() + 120_000
    while ((await count('queued')) + (await count('sending')) > 0) {
      if (Date.now() > deadline) throw new Error(`still queued or sending: ${await count('queued')} / ${await count('sending')}`)
      await Bun.sleep(500)
    }
    // the log holds exactly what was accepted
    const logged = new Map<string, { status: string; error: { code: string } | null }>()
    for (let page = 1; ; page++) {
      const r = await srv.api(key, 'GET', `/messages?direction=outbound&per_page=100&page=${page}`)
      for (const m of r.json.data) logged.set(m.id, m)
      if (page >= r.json.meta.last_page) break
    }
    expect([...logged.keys()].sort()).toEqual([...accepted].sort())
    const sent = [...logged].filter(([, m]) => m.status === 'sent').map(([id]) => id)
    const failed = [...logged].filter(([, m]) => m.status !== 'sent')
    // only a send the killed instance had in the network's hands may have failed, as interrupted
    expect(failed.every(([, m]) => m.status === 'failed' && m.error?.code === 'send_interrupted')).toBe(true)
    expect(failed.filter(([id]) => !sendingAtKill.has(id))).toEqual([])
    // the network took each sent message once, and none of those that failed
    const sql = database()
    try {
      const records = (await sql`SELECT message_id, COUNT(*)::int AS n FROM sandbox_sends GROUP BY message_id`) as { message_id: string; n: number }[]
      const taken = new Map(records.map((r) => [r.message_id, r.n]))
      expect(records.filter((r) => r.n > 1)).toEqual([])
      expect(sent.filter((id) => taken.get(id) !== 1)).toEqual([])
      expect(failed.filter(([id]) => taken.has(id))).toEqual([])
      // the killed instance's numbers went to the live ones
      const leases = (await sql`SELECT owner, COUNT(*)::int AS n FROM number_leases WHERE connection_id NOT LIKE 'job:%' GROUP BY owner`) as { owner: string; n: number }[]
      expect(leases.reduce((n, l) => n + l.n, 0)).toBe(NUMBERS)
    } finally {
      await sql.close()
    }
    // (checked while the deliveries the killed instance had claimed wait for their claims to run out)
    // the limits count every instance's requests: a fresh key gets KEY_LIMIT answers in all, round-robin over the live instances
    const fresh = await srv.key(ws.id)
    const statuses: number[] = []
    for (let i = 0; i < KEY_LIMIT + 2; i += 100) {
      const batch = await Promise.all(Array.from({ length: Math.min(100, KEY_LIMIT + 2 - i) }, () => fetch(`${srv.base}/api/v1/workspace`, { headers: { authorization: `Bearer ${fresh.key}` } }).then((r) => r.status)))
      statuses.push(...batch)
    }
    const tally = statuses.reduce<Record<number, number>>((t, s) => ({ ...t, [s]: (t[s] ?? 0) + 1 }), {})
    expect(tally).toEqual({ 200: KEY_LIMIT, 429: 2 })
    // and failed credentials from one address are counted together too
    const bad = await Promise.all(Array.from({ length: 122 }, (_, i) => fetch(`${srv.base}/api/v1/workspace`, { headers: { authorization: `Bearer cap_${String(i).padStart(16, '0')}.nope` } }).then((r) => r.status)))
    expect(bad.filter((s) => s === 401).length).toBe(120)
    expect(bad.filter((s) => s === 429).length).toBe(2)
    // every sent message's event arrives (a delivery the killed instance had claimed goes out once its claim runs out)
    const announced = () => new Set(events.filter((e) => e.type === 'message.sent').map((e) => e.id))
    const eventsBy = Date.now() + 90_000
    let announcedNow = announced()
    while (sent.some((id) => !announcedNow.has(id)) && Date.now() < eventsBy) {
      await Bun.sleep(500)
      announcedNow = announced()
    }
    const missing = sent.filter((id) => !announcedNow.has(id))
    if (missing.length) {
      // what became of their deliveries (for the failure's message)
      const sql = database()
      try {
        const rows = await sql`SELECT payload, status, attempts, next_attempt_at, last_status_code, last_error, created_at FROM webhook_deliveries WHERE type = 'message.sent'`
        const mine = (rows as { payload: string }[]).filter((r) => missing.some((id) => r.payload.includes(id)))
        console.error('message.sent events that did not arrive, at', Date.now(), JSON.stringify({ missing, deliveries: mine }))
      } finally {
        await sql.close()
      }
    }
    expect(missing).toEqual([])
  })
})
