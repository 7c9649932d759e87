/**
 * Crash safety under load (issue: reliability). Concurrent sends — half with an Idempotency-Key
 * and retried by the client until they get an answer — while the server is SIGKILLed at random
 * moments and restarted. Afterwards: every 202 is in the log, the network (the sandbox's durable
 * record of accepted sends) received no message twice, each idempotency key maps to one message,
 * every message is terminal or queued, and SQLite's integrity check passes.
 */
import { Database } from 'bun:sqlite'
import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { TestServer, newPhone } from './support/server'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)

const KILLS = 4
const WORKERS = 8

describe('crash test', () => {
  test('SIGKILL under load, several times: nothing lost, nothing sent twice', async () => {
    const srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '10000000' } })
    try {
      const t = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { hourly_cap: 100000, daily_cap: 1000000, min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const conns: string[] = []
      for (let i = 0; i < 3; i++) {
        const c = await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: { delivered_after_ms: 30, read_after_ms: null, fail_recipients: [], accept_after_ms: 15 } })
        conns.push(c.json.data.id)
      }
      const accepted = new Map<string, string>() // message id -> idempotency key ('' when none)
      const byKey = new Map<string, Set<string>>()
      let running = true
      let n = 0

      const post = async (body: unknown, key?: string) => {
        const r = await fetch(`${srv.base}/api/v1/messages`, {
          method: 'POST',
          headers: { authorization: `Bearer ${t.key}`, 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}) },
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(5000),
        })
        return { status: r.status, json: (await r.json().catch(() => null)) as any }
      }

      const worker = async (w: number) => {
        while (running) {
          const i = n++
          const body = { connection_id: conns[i % conns.length], recipient: `+1777${String(w).padStart(2, '0')}${String(i % 100_000).padStart(5, '0')}`, body: `load ${i}` }
          const key = i % 2 === 0 ? `crash-${w}-${i}` : undefined
          for (let attempt = 0; ; attempt++) {
            try {
              const r = await post(body, key)
              if (r.status === 202) {
                accepted.set(r.json.data.id, key ?? '')
                if (key) (byKey.get(key) ?? byKey.set(key, new Set()).get(key)!).add(r.json.data.id)
              } else if (r.status === 409 && key) {
                await Bun.sleep(50) // the first attempt is still running: ask again
                continue
              } else {
                throw new Error(`unexpected ${r.status}: ${JSON.stringify(r.json)}`)
              }
              break
            } catch (e) {
              if (String(e).startsWith('Error: unexpected')) throw e
              // no answer (server down): only a request with an Idempotency-Key is safe to repeat
              if (!key) break
              await Bun.sleep(100)
            }
          }
        }
      }

      const load = Promise.all(Array.from({ length: WORKERS }, (_, w) => worker(w)))
      for (let k = 0; k < KILLS; k++) {
        await Bun.sleep(400 + Math.random() * 900)
        await srv.stop('SIGKILL')
        await srv.boot()
      }
      await Bun.sleep(500)
      running = false
      await load

      // let everything queued go out
      let left: unknown
      await waitFor(() => {
        const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
        left = db.query("SELECT status, COUNT(*) AS n FROM messages WHERE status IN ('queued', 'sending') GROUP BY status").all()
        db.close()
        return (left as unknown[]).length === 0
      }, 30_000).catch((e) => {
        throw new Error(`${e.message}; still waiting: ${JSON.stringify(left)}`)
      })
      await srv.stop('SIGTERM')

      const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
      const rows = db.query("SELECT id, status, error_code FROM messages WHERE direction = 'outbound'").all() as { id: string; status: string; error_code: string | null }[]
      const integrity = (db.query('PRAGMA integrity_check').get() as { integrity_check: string }).integrity_check
      db.close()
      const inLog = new Map(rows.map((r) => [r.id, r]))
      expect(accepted.size).toBeGreaterThan(50)
      for (const id of accepted.keys()) expect(inLog.has(id)).toBe(true)
      for (const r of rows) expect(['sent', 'delivered', 'read', 'failed']).toContain(r.status)
      for (const r of rows.filter((x) => x.status === 'failed')) expect(['send_interrupted', 'send_timeout']).toContain(r.error_code ?? '')
      for (const ids of byKey.values()) expect(ids.size).toBe(1)
      // what the network received: every message at most once, and only messages in the log
      const dir = join(srv.dataDir, 'sandbox')
      const received: string[] = existsSync(dir)
        ? readdirSync(dir).flatMap((f) => readFileSync(join(dir, f), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l).message_id as string))
        : []
      expect(new Set(received).size).toBe(received.length)
      for (const id of received) expect(inLog.has(id)).toBe(true)
      // a message the network has was never failed as interrupted
      const got = new Set(received)
      for (const r of rows) if (got.has(r.id)) expect(r.status).not.toBe('failed')
      expect(integrity).toBe('ok')
      console.log(`crash test: ${accepted.size} accepted, ${rows.length} in the log, ${received.length} received by the network, ${rows.filter((r) => r.status === 'failed').length} interrupted, ${KILLS} kills`)
    } finally {
      await srv.close()
    }
  }, 150_000)
})
