/** Crash safety (CONTRACT §3): SIGKILL with messages queued and in flight, then start again. */
import { Database } from 'bun:sqlite'
import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { randomBytes } from 'node:crypto'
import { readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { ADMIN_TOKEN, TestServer, hostEnv, newPhone } from './support/server'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)


describe('restart', () => {
  test.concurrent('a start that fails after the database is open (here a number whose stored config cannot be opened) exits non-zero with one line, never 0 as if stopped', async () => {
    const srv = await TestServer.start()
    const t = await srv.tenant()
    const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone(), driver: 'sandbox' })).json.data
    await srv.stop()
    const db = new Database(join(srv.dataDir, 'capstan.db'))
    db.run(`UPDATE connections SET config = '{"token": {"$sealed": "not-a-sealed-value"}}' WHERE id = ?`, [conn.id])
    db.close()
    const r = Bun.spawnSync(['bun', 'src/main.ts', 'serve'], { env: { ...hostEnv(), CAPSTAN_DATA_DIR: srv.dataDir, CAPSTAN_PORT: '0', CAPSTAN_ADMIN_TOKEN: ADMIN_TOKEN, CAPSTAN_LOG_LEVEL: 'silent' }, timeout: 30_000 })
    const err = r.stderr.toString().trim()
    expect(r.exitCode).toBe(2)
    expect(err.split('\n')).toHaveLength(1)
    expect(err).toStartWith('capstan: the start failed: ')
    await srv.close()
  })

  test.concurrent('a data directory whose key file was replaced: the start stops with one line (exit 2) instead of failing every stored secret; the right key starts again', async () => {
    const srv = await TestServer.start()
    const t = await srv.tenant()
    expect((await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: 'https://example.com/hook', events: ['message.sent'] })).status).toBe(201)
    await srv.stop()
    const keyFile = join(srv.dataDir, 'secret.key')
    const right = readFileSync(keyFile, 'utf8')
    writeFileSync(keyFile, `${randomBytes(32).toString('base64')}\n`)
    const wrong = Bun.spawnSync(['bun', 'src/main.ts', 'serve'], { env: { ...hostEnv(), CAPSTAN_DATA_DIR: srv.dataDir, CAPSTAN_PORT: '0', CAPSTAN_ADMIN_TOKEN: ADMIN_TOKEN } })
    expect([wrong.exitCode, wrong.stderr.toString().trim()]).toEqual([
      2,
      'capstan: the secret key is not the one the secrets in this database were sealed with: give every instance the same CAPSTAN_SECRET_KEY (or CAPSTAN_SECRET_KEY_FILE), the one it was first started with — each data directory makes a key file of its own when neither is set',
    ])
    writeFileSync(keyFile, right)
    await srv.boot()
    expect((await srv.admin('GET', `/workspaces/${t.ws.id}/webhooks`)).json.data).toHaveLength(1)
    await srv.close()
  })

  test.concurrent('a number removed while its queue was being failed: the next start fails the rest as connection_removed', async () => {
    const srv = await TestServer.start()
    try {
      const t = await srv.tenant()
      // a slow pace: the messages stay queued
      await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { hourly_cap: 1, daily_cap: 1, min_gap_seconds: 3600, max_gap_seconds: 3600 } } })
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
      const ids: string[] = []
      for (let i = 0; i < 4; i++) ids.push((await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: `m${i}` } })).json.data.id)
      // the first goes at once; the others wait an hour
      await waitFor(async () => (await srv.api(t.key, 'GET', `/messages/${ids[0]}`)).json.data.status === 'sent')
      await srv.stop('SIGKILL')
      // as a crash right after the removal's write leaves it: the number removed, its queue not yet failed
      const db = new Database(join(srv.dataDir, 'capstan.db'))
      db.query('UPDATE connections SET deleted_at = 1 WHERE id = ?').run(conn.id)
      db.close()
      await srv.boot()
      const key = (await srv.key(t.ws.id)).key
      const after = await Promise.all(ids.map(async (id) => (await srv.api(key, 'GET', `/messages/${id}`)).json.data))
      expect(after.map((m) => [m.status, m.error?.code ?? null])).toEqual([['sent', null], ...ids.slice(1).map(() => ['failed', 'connection_removed'])])
    } finally {
      await srv.close()
    }
  })

  test.concurrent('queued messages go out after a crash; interrupted sends fail as send_interrupted, never twice', async () => {
    const srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    try {
      const sent: Record<string, number> = {}
      const rx = Bun.serve({
        hostname: '127.0.0.1',
        port: 0,
        async fetch(req) {
          const e = (await req.json()) as { type: string; data: { id: string } }
          if (e.type === 'message.sent') sent[e.data.id] = (sent[e.data.id] ?? 0) + 1
          return new Response('ok')
        },
      })
      const t = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { hourly_cap: 100, daily_cap: 100, min_gap_seconds: 1, max_gap_seconds: 1 } } })
      await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: `http://127.0.0.1:${rx.port}/`, events: ['message.sent'] })
      // the network takes 4 s to accept each send, so released messages are still in flight
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [], accept_after_ms: 4000 } })).json.data
      const ids: string[] = []
      for (let i = 0; i < 5; i++) {
        const r = await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: `m${i}` } })
        expect(r.status).toBe(202)
        ids.push(r.json.data.id)
      }
      const statuses = async () => Promise.all(ids.map(async (id) => (await srv.api(t.key, 'GET', `/messages/${id}`)).json.data.status as string))
      await waitFor(async () => (await statuses()).filter((s) => s === 'sending').length === 2)
      await srv.stop('SIGKILL')

      await srv.boot()
      await srv.admin('PATCH', `/connections/${conn.id}`, { config: { accept_after_ms: 0 } })
      const key2 = (await srv.key(t.ws.id)).key
      const final = await waitFor(async () => {
        const s = await Promise.all(ids.map(async (id) => (await srv.api(key2, 'GET', `/messages/${id}`)).json.data))
        return s.every((m) => m.status === 'sent' || m.status === 'failed') ? s : null
      })
      expect(final.map((m) => m.status)).toEqual(['failed', 'failed', 'sent', 'sent', 'sent'])
      expect(final.slice(0, 2).map((m) => m.error.code)).toEqual(['send_interrupted', 'send_interrupted'])
      for (const m of final.slice(2)) expect(m.timeline.filter((e: any) => e.status === 'sending')).toHaveLength(1)
      await Bun.sleep(300)
      expect(Object.keys(sent).sort()).toEqual(ids.slice(2).sort())
      expect(Object.values(sent).every((n) => n === 1)).toBe(true)
      const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
      expect((db.query('PRAGMA integrity_check').get() as any).integrity_check).toBe('ok')
      db.close()
      rx.stop(true)
    } finally {
      await srv.close()
    }
  }, 60_000)

  test.concurrent("a sandbox number's delivered and read reports still come after a crash: the next start sets them again for what was sent (at once when past due)", async () => {
    // (the polls below pass 60 requests a minute)
    const srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    try {
      const t = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone(), driver: 'sandbox', config: { delivered_after_ms: 1500, read_after_ms: 6000, fail_recipients: [] } })).json.data
      const id = (await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'reported after a crash' } })).json.data.id as string
      const status = async () => (await srv.api(t.key, 'GET', `/messages/${id}`)).json.data.status as string
      await waitFor(async () => (await status()) === 'sent')
      await srv.stop('SIGKILL')
      // down past the delivered report's time: it comes at the start; the read one when due
      await Bun.sleep(2_000)
      await srv.boot()
      await waitFor(async () => (await status()) === 'delivered', 3_000)
      await waitFor(async () => (await status()) === 'read', 10_000)
    } finally {
      await srv.close()
    }
  })

  test.concurrent('a 202 is durable: the message is there after an immediate SIGKILL', async () => {
    const srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    try {
      const t = await srv.tenant()
      await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })
      const conn = (await srv.admin('GET', `/workspaces/${t.ws.id}/connections`)).json.data[0]
      await srv.admin('PATCH', `/connections/${conn.id}`, { status: 'offline' })
      await srv.admin('PATCH', `/connections/${conn.id}`, { status: 'online' })
      const rs = await Promise.all(Array.from({ length: 20 }, (_, i) => srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: `d${i}` } })))
      expect(rs.every((r) => r.status === 202)).toBe(true)
      await srv.stop('SIGKILL')
      const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
      const found = db.query(`SELECT COUNT(*) AS n FROM messages WHERE id IN (${rs.map(() => '?').join(',')})`).get(...rs.map((r) => r.json.data.id)) as { n: number }
      db.close()
      expect(found.n).toBe(20)
    } finally {
      await srv.close()
    }
  }, 30_000)

  test.concurrent('SIGTERM stops gracefully: in-flight sends record their outcome, the queue stays intact, nothing fails', async () => {
    const srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    try {
      const t = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { hourly_cap: 100, daily_cap: 100, min_gap_seconds: 0.5, max_gap_seconds: 0.5 } } })
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [], accept_after_ms: 800 } })).json.data
      const ids: string[] = []
      for (let i = 0; i < 6; i++) ids.push((await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: `g${i}` } })).json.data.id)
      const status = (id: string) => srv.api(t.key, 'GET', `/messages/${id}`).then((r) => r.json.data.status as string)
      // one in the network's hands (each is for 0.8 s, then the next after 0.5 s: asked of all at
      // once, a slow answer does not miss the one under way)
      await waitFor(async () => (await Promise.all(ids.map(status))).includes('sending'))
      srv.proc.kill('SIGTERM')
      expect(await srv.proc.exited).toBe(0)
      expect(srv.output).toContain('capstan stopped')
      const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
      const rows = db.query(`SELECT status FROM messages WHERE id IN (${ids.map(() => '?').join(',')})`).all(...ids) as { status: string }[]
      db.close()
      expect(rows.filter((r) => r.status === 'sending')).toEqual([])
      expect(rows.filter((r) => r.status === 'queued').length).toBeGreaterThan(0)
      await srv.boot()
      await srv.admin('PATCH', `/connections/${conn.id}`, { config: { accept_after_ms: 0 } })
      const key = (await srv.key(t.ws.id)).key
      await waitFor(async () => {
        const all = await Promise.all(ids.map((id) => srv.api(key, 'GET', `/messages/${id}`).then((r) => r.json.data.status)))
        return all.every((s) => s === 'sent')
      }, 20_000)
    } finally {
      await srv.close()
    }
  }, 60_000)
})
