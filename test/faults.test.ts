/**
 * Fault tests: clamd dying or hanging mid-scan, the disk filling up while media is stored,
 * webhook receivers that hang, reset connections or answer 500, and a network driver that does
 * not answer. Each gives a clean error or a retry and leaves no partial file, row or stuck queue.
 */
import { Database } from 'bun:sqlite'
import { afterAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, readFileSync, readdirSync, rmSync, statSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { TestClamd } from './support/clamd'
import { TestServer, newPhone } from './support/server'
import { growTmpfs, mountTmpfs, unmount } from './support/tmpfs'
import { waitFor } from './support/wait'
import { blobOf } from '../src/modules/media/service'
import { SandboxLedger } from '../src/network/sandbox'

setDefaultTimeout(60_000)

function storeFiles(dir: string): string[] {
  if (!existsSync(dir)) return []
  return readdirSync(dir).flatMap((f) => (statSync(join(dir, f)).isDirectory() ? storeFiles(join(dir, f)) : [join(dir, f)]))
}

/** A PDF of `size` bytes whose content depends on `seed`. */
const pdf = (size: number, seed: number) => {
  const b = Buffer.alloc(size, 0x20 + (seed % 90))
  b.write('%PDF-1.4\n')
  b.writeUInt32BE(seed, 20)
  return b
}

async function upload(srv: TestServer, key: string, bytes: Uint8Array) {
  const fd = new FormData()
  fd.set('file', new File([bytes], 'f.pdf'))
  return srv.api(key, 'POST', '/media', { multipart: fd })
}

/** A unix socket "clamd" that misbehaves: closes mid-stream, or never answers. */
function badClamd(mode: 'reset' | 'hang') {
  const path = join(tmpdir(), `bad-clamd-${crypto.randomUUID()}.sock`)
  const server = createServer((sock) => {
    let got = 0
    sock.on('data', (d) => {
      got += d.length
      if (mode === 'reset' && got > 4096) sock.destroy()
    })
    sock.on('error', () => {})
  })
  server.listen(path)
  return { path, stop: () => server.close() }
}

describe('scanner faults', () => {
  for (const mode of ['reset', 'hang'] as const) {
    test(`a clamd that ${mode === 'reset' ? 'drops the connection' : 'never answers'} mid-scan: 503, nothing stored`, async () => {
      const bad = badClamd(mode)
      const srv = await TestServer.start({ env: { CAPSTAN_CLAMD: `unix:${bad.path}`, CAPSTAN_CLAMD_TIMEOUT_MS: '1000' } })
      try {
        const t = await srv.tenant()
        const r = await upload(srv, t.key, pdf(200_000, 1))
        expect([r.status, r.json.code]).toEqual([503, 'scanner_unavailable'])
        expect(storeFiles(join(srv.dataDir, 'media'))).toEqual([])
        const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
        expect((db.query('SELECT COUNT(*) AS n FROM media').get() as { n: number }).n).toBe(0)
        db.close()
      } finally {
        await srv.close()
        bad.stop()
      }
    })
  }

  test('the real clamd killed during uploads: each upload is stored whole or refused with 503, never half', async () => {
    const clamd = await TestClamd.start()
    const srv = await TestServer.start({ env: { CAPSTAN_CLAMD: `unix:${clamd.socket}`, CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    try {
      const t = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { media: { retention_days: 30, max_bytes: 32 * 1024 * 1024 } } })
      const uploads = Array.from({ length: 6 }, (_, i) => upload(srv, t.key, pdf(12 * 1024 * 1024, 10 + i)))
      await Bun.sleep(60)
      clamd.proc.kill('SIGKILL')
      const results = await Promise.all(uploads)
      for (const r of results) expect([201, 503]).toContain(r.status)
      const stored = results.filter((r) => r.status === 201).map((r) => blobOf(t.ws.id, r.json.data.sha256 as string))
      const files = storeFiles(join(srv.dataDir, 'media'))
      expect(files.filter((f) => f.includes(`${join('media', 'tmp')}`))).toEqual([])
      expect(files.map((f) => f.split('/').pop()).sort()).toEqual([...new Set(stored)].sort())
      for (const f of files) expect(statSync(f).size).toBe(12 * 1024 * 1024)
      expect(results.some((r) => r.status === 503)).toBe(true)
    } finally {
      await srv.close()
      await clamd.stop()
    }
  }, 60_000)
})

// the tmpfs mounts of the disk-full tests under way (unmounted by each test; any left at the end here)
const mounted = new Set<string>()
afterAll(() => {
  for (const dir of mounted) unmount(dir)
})

// The tests from here on wait more than they work (for retries, timeouts and a disk to fill):
// each has a server of its own, and they run at once.
describe('disk full', () => {

  test.concurrent('storing media on a full disk: 507 storage_full, no partial file, no row; works again once there is room', async () => {
    const clamd = await TestClamd.start()
    const dataDir = join(tmpdir(), `capstan-full-${crypto.randomUUID()}`)
    const mediaDir = join(dataDir, 'media')
    mountTmpfs(mediaDir, '1m') // the media store
    mounted.add(mediaDir)
    const srv = await TestServer.start({ dataDir, env: { CAPSTAN_CLAMD: `unix:${clamd.socket}` } })
    try {
      const t = await srv.tenant()
      const first = await upload(srv, t.key, pdf(700_000, 1))
      expect(first.status).toBe(201)
      const second = await upload(srv, t.key, pdf(700_000, 2))
      expect([second.status, second.json.code]).toEqual([507, 'storage_full'])
      const files = storeFiles(mediaDir)
      expect(files.map((f) => f.split('/').pop())).toEqual([blobOf(t.ws.id, first.json.data.sha256)])
      const db = new Database(join(dataDir, 'capstan.db'), { readonly: true })
      expect((db.query('SELECT COUNT(*) AS n FROM media').get() as { n: number }).n).toBe(1)
      db.close()
      // the server is fine; a small file still fits
      expect((await upload(srv, t.key, pdf(100_000, 3))).status).toBe(201)
    } finally {
      await srv.close()
      unmount(mediaDir)
      mounted.delete(mediaDir)
      rmSync(dataDir, { recursive: true, force: true })
      await clamd.stop()
    }
  }, 30_000)

  test.concurrent('a start on a full disk serves reads, refuses writes with 507 and says why in /readyz; once there is room it recovers by itself and sends', async () => {
    const dataDir = join(tmpdir(), `capstan-fullstart-${crypto.randomUUID()}`)
    mountTmpfs(dataDir, '4m')
    mounted.add(dataDir)
    let srv: TestServer | null = null
    try {
      srv = await TestServer.start({ dataDir })
      const t = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1333'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null } })).json.data
      const ada = newPhone()
      expect((await srv.api(t.key, 'POST', '/contacts', { json: { phone: ada, name: 'Ada' } })).status).toBe(201)
      // a clean stop: the WAL and its index are gone, and the next start has to make them anew
      await srv.stop()
      expect(existsSync(join(dataDir, 'capstan.db-shm'))).toBe(false)
      Bun.spawnSync(['dd', 'if=/dev/zero', `of=${join(dataDir, 'filler')}`, 'bs=64k'])
      await srv.boot()
      const ready = await srv.request('GET', '/readyz')
      expect([ready.status, ready.json.status, ready.json.database, ready.json.storage?.state]).toEqual([503, 'unavailable', 'ok', 'full'])
      expect(ready.json.storage.reason).toContain('disk is full')
      // reads are served: the API, the admin API, the dashboard
      expect((await srv.api(t.key, 'GET', `/contacts?phone=${encodeURIComponent(ada)}`)).json.data.map((c: any) => c.name)).toEqual(['Ada'])
      expect((await srv.admin('GET', `/workspaces/${t.ws.id}`)).status).toBe(200)
      expect((await srv.request('GET', '/admin')).status).toBe(200)
      // writes are refused whole
      const refused = await srv.api(t.key, 'POST', '/contacts', { json: { phone: newPhone() } })
      expect([refused.status, refused.json.code]).toEqual([507, 'storage_full'])
      expect(srv.output).toContain('started on a full disk')
      // room again: it recovers without a restart and sends
      rmSync(join(dataDir, 'filler'))
      await waitFor(async () => (await srv!.request('GET', '/readyz')).status === 200, 20_000)
      expect((await srv.api(t.key, 'POST', '/contacts', { json: { phone: newPhone() } })).status).toBe(201)
      const sent = await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: ada, body: 'back again' } })
      expect(sent.status).toBe(202)
      await waitFor(async () => (await srv!.api(t.key, 'GET', `/messages/${sent.json.data.id}`)).json.data.status === 'sent', 20_000)
      expect(srv.output).not.toContain('"request failed"')
    } finally {
      await srv?.close()
      unmount(dataDir)
      mounted.delete(dataDir)
      rmSync(dataDir, { recursive: true, force: true })
    }
  }, 60_000)

  test.concurrent('the sandbox record of sends on a full disk: a send it could not write is refused, no line is left broken, and every send it took is found again', async () => {
    const dir = join(tmpdir(), `capstan-ledger-${crypto.randomUUID()}`)
    mountTmpfs(dir, '64k')
    mounted.add(dir)
    let ledger: SandboxLedger | null = null
    try {
      const path = join(dir, 'sandbox', 'n.jsonl')
      ledger = new SandboxLedger(path)
      const entry = (i: number) => ({ message_id: `m-${i}`, external_id: `x-${i}`, recipient: '+14155550100', group: null, body: 'b'.repeat(700 + (i % 13)), attachments: 0, at: new Date().toISOString() })
      const taken: number[] = []
      let refused = 0
      for (let i = 0; i < 200 && refused < 3; i++) {
        // two at once: they share a sync
        const both = await Promise.allSettled([ledger.record(entry(i * 2)), ledger.record(entry(i * 2 + 1))])
        both.forEach((r, k) => (r.status === 'fulfilled' ? taken.push(i * 2 + k) : refused++))
      }
      expect(refused).toBe(3)
      expect(growTmpfs(dir, '1m')).toBe(true)
      for (let i = 1000; i < 1010; i++) {
        await ledger.record(entry(i))
        taken.push(i)
      }
      // every line of the file reads on its own; every send acknowledged is in it, found by a
      // fresh reader (as crash recovery after a restart would)
      const lines = readFileSync(path, 'utf8').split('\n').filter((l) => l.trim() !== '')
      for (const l of lines) expect(() => JSON.parse(l)).not.toThrow()
      const fresh = new SandboxLedger(path)
      for (const i of taken) expect(fresh.find(`m-${i}`)).toBe(`x-${i}`)
      expect(lines.length).toBe(taken.length)
    } finally {
      ledger?.close()
      unmount(dir)
      mounted.delete(dir)
      rmSync(dir, { recursive: true, force: true })
    }
  })

  test.concurrent('the database on a full disk: 507 storage_full and nothing half-stored; once there is room the queue goes on at once', async () => {
    const dataDir = join(tmpdir(), `capstan-dbfull-${crypto.randomUUID()}`)
    mountTmpfs(dataDir, '3m') // the whole data directory
    mounted.add(dataDir)
    const srv = await TestServer.start({ dataDir, env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    // a webhook receiver that takes events but holds its answers until the disk is full
    const received: string[] = []
    let answer = () => {}
    const held = new Promise<void>((resolve) => (answer = resolve))
    const receiver = Bun.serve({
      port: 0,
      hostname: '127.0.0.1',
      fetch: async (req) => {
        received.push(req.headers.get('webhook-id')!)
        await held
        return new Response('ok')
      },
    })
    try {
      const t = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { hourly_cap: 4, daily_cap: 100, min_gap_seconds: 1, max_gap_seconds: 1 } } })
      // the network reports each message delivered 4 s after it took it: the first ones while the disk is full
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1333'), driver: 'sandbox', config: { delivered_after_ms: 4000, read_after_ms: null } })).json.data
      const hook = (await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: `http://127.0.0.1:${receiver.port}/`, events: ['message.sent'] })).json.data
      const sends: string[] = []
      for (let i = 0; i < 6; i++) {
        const r = await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: `order ${i}` } })
        expect(r.status).toBe(202)
        sends.push(r.json.data.id)
      }
      expect((await srv.request('GET', '/readyz')).json.disk.state).toBe('ok')
      // fill the disk with contacts of 50 KB each until a write no longer fits
      const metadata = Object.fromEntries(Array.from({ length: 50 }, (_, i) => [`k${i}`, 'x'.repeat(1000)]))
      let created = 0
      const fill = async (body: Record<string, unknown>) => {
        for (let i = 0; i < 1000; i++) {
          const r = await srv.api(t.key, 'POST', '/contacts', { json: { phone: newPhone(), ...body } })
          if (r.status !== 201) return r
          created++
        }
        throw new Error('the disk never filled up')
      }
      const refusal = await fill({ metadata })
      expect([refusal.status, refusal.json]).toEqual([507, { code: 'storage_full', message: "The server's disk is full; nothing was stored." }])
      // then with the smallest contacts, so that not even a small write fits
      expect((await fill({})).status).toBe(507)
      const late = { connection_id: conn.id, recipient: newPhone(), body: 'no room' }
      const keyed = { json: late, headers: { 'idempotency-key': 'disk-full-0001' } }
      const send = await srv.api(t.key, 'POST', '/messages', keyed)
      expect([send.status, send.json.code]).toEqual([507, 'storage_full'])
      // still ready (reads work), and says where the trouble is
      const ready = await srv.request('GET', '/readyz')
      expect([ready.status, ready.json.database, ready.json.disk.state]).toEqual([200, 'ok', 'low'])
      // the receiver answers now: that it took the events cannot be written yet
      await waitFor(() => received.length > 0)
      answer()
      // releases keep failing for a while: each is rolled back, and none may count against the cap
      await Bun.sleep(5000)
      expect(growTmpfs(dataDir, '64m')).toBe(true)
      // the four the hourly cap allows are sent and then delivered (each outcome and receipt written
      // once it fits), two wait
      await waitFor(async () => {
        const statuses = await Promise.all(sends.map(async (id) => (await srv.api(t.key, 'GET', `/messages/${id}`)).json.data.status))
        return statuses.filter((s) => s === 'delivered').length === 4 && statuses.filter((s) => s === 'queued').length === 2
      }, 45_000)
      expect((await srv.api(t.key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'After' } })).status).toBe(201)
      // the refused send was not kept under its Idempotency-Key either: sent again, it is queued
      const again = await srv.api(t.key, 'POST', '/messages', keyed)
      expect([again.status, again.headers.get('idempotency-replayed')]).toEqual([202, null])
      // every contact answered 201 is there, the refused ones are not (plus the seven recipients)
      expect((await srv.api(t.key, 'GET', '/contacts')).json.meta.total).toBe(created + 7 + 1)
      // each sent message's event was delivered, and recorded as such: none went out twice
      const deliveries = await waitFor(async () => {
        const list = (await srv.admin('GET', `/webhooks/${hook.id}/deliveries`)).json.data as { id: string; status: string }[]
        return list.length === 4 && list.every((d) => d.status === 'delivered') && list
      }, 45_000)
      expect([...received].sort()).toEqual(deliveries.map((d) => d.id).sort())
      expect(srv.output).toContain('request refused: the disk of the data directory is full')
      expect(srv.output).not.toContain('"request failed"')
      expect(srv.output).not.toContain('background task failed')
      // the first receipts came while the disk was full: kept and written later, not dropped
      expect(srv.output).toContain('receipt could not be written yet')
      // the pacer tried each second while the disk was full (when a release was due), and said so
      // at most once
      expect(srv.output.split('"pacer tick failed"').length - 1).toBeLessThanOrEqual(1)
    } finally {
      receiver.stop(true)
      await srv.close()
      unmount(dataDir)
      mounted.delete(dataDir)
      rmSync(dataDir, { recursive: true, force: true })
    }
  }, 90_000)
})

describe('webhook receivers that misbehave', () => {
  test.concurrent('hanging, resetting and failing receivers are retried; a healthy endpoint is not held up', async () => {
    const srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    const hang = createServer(() => {}) // accepts, never answers
    await new Promise<void>((r) => hang.listen(0, '127.0.0.1', r))
    const reset = createServer((s) => s.destroy())
    await new Promise<void>((r) => reset.listen(0, '127.0.0.1', r))
    const fail = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response('no', { status: 500 }) })
    let healthy = 0
    const ok = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => (healthy++, new Response('ok')) })
    try {
      const t = await srv.tenant()
      const url = (port: number) => `http://127.0.0.1:${port}/hook`
      const hooks = {
        hang: (await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: url((hang.address() as any).port), events: ['message.received'] })).json.data.id,
        reset: (await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: url((reset.address() as any).port), events: ['message.received'] })).json.data.id,
        fail: (await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: url(fail.port!), events: ['message.received'] })).json.data.id,
        ok: (await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: url(ok.port!), events: ['message.received'] })).json.data.id,
      }
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
      await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'hello' })
      await waitFor(() => healthy >= 1, 5000)
      const history = async (id: string) => (await srv.admin('GET', `/webhooks/${id}/deliveries`)).json.data[0]
      const reset1 = await waitFor(async () => ((await history(hooks.reset)).attempts >= 1 ? history(hooks.reset) : null), 5000)
      expect(reset1).toMatchObject({ status: 'pending', last_error: 'connection failed' })
      const fail1 = await waitFor(async () => ((await history(hooks.fail)).attempts >= 1 ? history(hooks.fail) : null), 5000)
      expect(fail1).toMatchObject({ status: 'pending', last_status_code: 500, last_error: 'HTTP 500' })
      expect(Date.parse(fail1.next_attempt_at) - Date.now()).toBeGreaterThan(0)
      const hang1 = await waitFor(async () => ((await history(hooks.hang)).attempts >= 1 ? history(hooks.hang) : null), 20_000)
      expect(hang1).toMatchObject({ status: 'pending', last_error: 'timed out after 15 s' })
      // meanwhile new events still reach the healthy endpoint at once
      await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'again' })
      await waitFor(() => healthy >= 2, 5000)
      // the receiver counts the request before Capstan has read its answer and recorded it
      const ok2 = await waitFor(async () => ((await history(hooks.ok)).status === 'delivered' ? history(hooks.ok) : null), 2000)
      expect(ok2.status).toBe('delivered')
    } finally {
      // a delivery to the hanging receiver is still under way: the graceful stop waits its 3 s for it
      await srv.close()
      hang.close()
      reset.close()
      fail.stop(true)
      ok.stop(true)
    }
  }, 40_000)
})

describe('a network driver that does not answer', () => {
  test.concurrent('the send fails as send_timeout, the network keeps no record, it is never resent, the queue moves on', async () => {
    const srv = await TestServer.start({ env: { CAPSTAN_DRIVER_TIMEOUT_MS: '500', CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    try {
      const t = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { hourly_cap: 100, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: { accept_after_ms: 2000, delivered_after_ms: null, read_after_ms: null } })).json.data
      const r = await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'slow network' } })
      const failed = await waitFor(async () => {
        const m = (await srv.api(t.key, 'GET', `/messages/${r.json.data.id}`)).json.data
        return m.status === 'failed' ? m : null
      }, 5000)
      expect(failed.error.code).toBe('send_timeout')
      await Bun.sleep(2500) // the network's own delay passes: it still has no record of the send
      const ledger = join(srv.dataDir, 'sandbox', `${conn.id}.jsonl`)
      expect(existsSync(ledger) ? (await Bun.file(ledger).text()).includes(r.json.data.id) : false).toBe(false)
      expect((await srv.api(t.key, 'GET', `/messages/${r.json.data.id}`)).json.data.timeline.filter((e: any) => e.status === 'sending')).toHaveLength(1)
      await srv.admin('PATCH', `/connections/${conn.id}`, { config: { accept_after_ms: 0 } })
      const next = await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'fast again' } })
      await waitFor(async () => (await srv.api(t.key, 'GET', `/messages/${next.json.data.id}`)).json.data.status === 'sent', 5000)
    } finally {
      await srv.close()
    }
  }, 30_000)
})
