/**
 * Media in an S3-compatible bucket (CAPSTAN_MEDIA_STORE=s3://bucket/prefix; s3rver as the bucket,
 * a real clamd as the scanner): uploads are scanned before anything is stored and land as objects
 * under the prefix, nothing in the data directory; downloads stream from the bucket, a Range
 * answered 206 (416 outside the file); retention deletes the objects; a bucket that does not
 * exist or cannot be reached stops the start with one line and exit code 2.
 */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { BucketJournal } from '../src/modules/contacts/erasure-journal'
import { BUCKET_CHECK_MS, byteRange, MediaStoreUnavailable, S3MediaStore } from '../src/modules/media/store'
import { EICAR, TestClamd } from './support/clamd'
import * as files from './support/files'
import { inProcess } from './support/inproc'
import { TestS3 } from './support/s3'
import { hostEnv, TestServer } from './support/server'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)

let s3: TestS3
let clamd: TestClamd
let srv: TestServer
let key: string
beforeAll(async () => {
  s3 = await TestS3.start(['capstan-media', 'other-bucket', 'journal'])
  clamd = await TestClamd.start()
  srv = await TestServer.start({ env: { CAPSTAN_CLAMD: `unix:${clamd.socket}`, ...s3.env('s3://capstan-media/shop-a') } })
  key = (await srv.tenant()).key
})
afterAll(async () => {
  await srv.close()
  await clamd.stop()
  await s3.stop()
})

const upload = (bytes: Uint8Array, name: string, type: string) => {
  const form = new FormData()
  form.append('file', new File([bytes], name, { type }))
  return srv.api(key, 'POST', '/media', { multipart: form })
}

describe('media in a bucket', () => {
  test('an upload is scanned, then stored as one object under the prefix; none in the data directory; the same bytes again are one object', async () => {
    const before = await s3.keys('capstan-media')
    const refused = await upload(Buffer.concat([files.pdf(), EICAR]), 'bad.pdf', 'application/pdf')
    expect([refused.status, refused.json.code]).toEqual([422, 'malware_detected'])
    expect(await s3.keys('capstan-media')).toEqual(before)
    const pdf = files.pdf()
    const a = await upload(pdf, 'invoice.pdf', 'application/pdf')
    const b = await upload(pdf, 'again.pdf', 'application/pdf')
    expect([a.status, b.status]).toEqual([201, 201])
    const keys = await s3.keys('capstan-media')
    expect(keys.length).toBe(before.length + 1)
    expect(keys.at(-1)).toMatch(/^shop-a\/[0-9a-f]{64}$/)
    const mediaDir = join(srv.dataDir, 'media')
    expect(existsSync(mediaDir) ? readdirSync(mediaDir).filter((f) => f !== 'tmp') : []).toEqual([])
    expect(await s3.keys('other-bucket')).toEqual([])
  })

  test('a download streams the object: whole, or the part a Range asks for (206), 416 outside it', async () => {
    const bytes = new Uint8Array(300_000).map((_, i) => (i * 7) % 256)
    const up = await upload(Buffer.concat([Buffer.from('%PDF-1.4\n'), bytes]), 'big.pdf', 'application/pdf')
    expect(up.status).toBe(201)
    const size = up.json.data.size as number
    const whole = await fetch(`${srv.base}/api/v1/media/${up.json.data.id}/download`, { headers: { authorization: `Bearer ${key}` } })
    const body = new Uint8Array(await whole.arrayBuffer())
    // streamed as it comes from the bucket: chunked, no Content-Length
    expect([whole.status, whole.headers.get('content-type'), whole.headers.get('transfer-encoding'), body.length, whole.headers.get('accept-ranges')]).toEqual([200, 'application/pdf', 'chunked', size, 'bytes'])
    expect(whole.headers.get('content-disposition')).toBe('attachment; filename="big.pdf"; filename*=UTF-8\'\'big.pdf')
    expect(Buffer.from(body.subarray(9)).equals(Buffer.from(bytes))).toBe(true)
    const part = await fetch(`${srv.base}/api/v1/media/${up.json.data.id}/download`, { headers: { authorization: `Bearer ${key}`, range: 'bytes=9-18' } })
    expect([part.status, part.headers.get('content-range')]).toEqual([206, `bytes 9-18/${size}`])
    expect([...new Uint8Array(await part.arrayBuffer())]).toEqual([...bytes.subarray(0, 10)])
    const tail = await fetch(`${srv.base}/api/v1/media/${up.json.data.id}/download`, { headers: { authorization: `Bearer ${key}`, range: 'bytes=-4' } })
    expect([tail.status, [...new Uint8Array(await tail.arrayBuffer())]]).toEqual([206, [...bytes.subarray(-4)]])
    const outside = await fetch(`${srv.base}/api/v1/media/${up.json.data.id}/download`, { headers: { authorization: `Bearer ${key}`, range: `bytes=${size}-` } })
    expect([outside.status, outside.headers.get('content-range')]).toEqual([416, `bytes */${size}`])
  })

  test('the Range header read as HTTP says: one range, open-ended or the last n bytes; anything else served whole', () => {
    expect(byteRange('bytes=0-0', 10)).toEqual([0, 0])
    expect(byteRange('bytes=5-', 10)).toEqual([5, 9])
    expect(byteRange('bytes=5-100', 10)).toEqual([5, 9])
    expect(byteRange('bytes=-3', 10)).toEqual([7, 9])
    expect(byteRange('bytes=-30', 10)).toEqual([0, 9])
    expect(byteRange('bytes=10-', 10)).toBe('unsatisfiable')
    expect(byteRange('bytes=6-5', 10)).toBe('unsatisfiable')
    expect(byteRange('bytes=-0', 10)).toBe('unsatisfiable')
    for (const h of [null, 'bytes=1-2,4-5', 'items=1-2', 'bytes=-', 'bytes=a-b']) expect(byteRange(h, 10)).toBeNull()
  })

  test('retention deletes the object with its record; a send hands the bytes from the bucket to its network', async () => {
    const env = await inProcess({ clamd: `unix:${clamd.socket}`, env: s3.env('s3://capstan-media/retention') })
    try {
      const { svc, timers } = env
      const ws = await svc.workspaces.create({ name: 'Bucket retention' })
      await svc.workspaces.patch(ws.id, { settings: { media: { retention_days: 1, max_bytes: 1 << 20 } } })
      const png = files.png()
      const m = await svc.media.upload(ws.id, new File([png], 'photo.png'))
      expect(await s3.keys('capstan-media', 'retention/')).toEqual([`retention/${m.blob}`])
      expect(Buffer.from(await svc.media.store.bytes(m.blob)).equals(Buffer.from(png))).toBe(true)
      expect(Buffer.from(await svc.media.store.bytes(m.blob, 8)).equals(Buffer.from(png.subarray(0, 8)))).toBe(true)
      await timers.advance(25 * 3_600_000)
      await svc.media.purgeExpired()
      expect(await svc.media.find(ws.id, m.id)).toBeNull()
      expect(await s3.keys('capstan-media', 'retention/')).toEqual([])
    } finally {
      await env.close()
    }
  })
})

describe('erasure records kept in the bucket', () => {
  test('an instance reads every record back, a listing of more than 1,000 paged through in order', async () => {
    const journal = new BucketJournal(s3.client('journal'), 'journal/')
    const made = Array.from({ length: 1_205 }, (_, i) => ({
      workspace_id: `ws${String(i % 3)}`,
      number_digest: Bun.SHA256.hash(`+1555${String(i).padStart(7, '0')}`, 'hex'),
      erased_at: new Date(Date.UTC(2026, 10, 1) + i * 1000).toISOString(),
    }))
    for (let i = 0; i < made.length; i += 100) await Promise.all(made.slice(i, i + 100).map((r) => journal.add(r)))
    // an object under the prefix that is not a record is passed over
    await s3.client('journal').write('journal/erasures/not-a-record', '')
    const read = await journal.all()
    const key = (r: { workspace_id: string; number_digest: string; erased_at: string }) => `${r.workspace_id}_${r.number_digest}_${r.erased_at}`
    expect(read.length).toBe(made.length)
    expect(read.map(key).sort()).toEqual(made.map(key).sort())
    expect((await s3.keys('journal', 'journal/')).length).toBe(made.length + 1)
  })
})

describe('a bucket that goes away while serving', () => {
  test('one that takes requests and never answers: each look, put, read, download and removal is given up on as the bucket away once its wait is over, instead of holding the request for minutes', async () => {
    const silent = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
    const store = new S3MediaStore({ kind: 's3', bucket: 'capstan-media', prefix: 'silent/', endpoint: `http://127.0.0.1:${silent.port}`, region: 'us-east-1', accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER', sessionToken: null }, { answerMs: 300, checkMs: 300 })
    const sha = 'ab'.repeat(32)
    try {
      const outcomes = await Promise.race([
        Promise.allSettled([store.has(sha), store.put(sha, new Uint8Array(1000)), store.bytes(sha, 16), store.response(sha, 100, {}, null), store.remove(sha)]),
        Bun.sleep(10_000).then(() => 'still waiting' as const),
      ])
      expect(outcomes).not.toBe('still waiting')
      for (const o of outcomes as PromiseSettledResult<unknown>[]) {
        expect(o.status).toBe('rejected')
        expect((o as PromiseRejectedResult).reason).toBeInstanceOf(MediaStoreUnavailable)
      }
      expect(await store.reachable()).toBe(false)
      expect(await store.check()).toBe('the bucket capstan-media did not answer within 0.3 s; check S3_ENDPOINT (and that nothing between drops the traffic)')
    } finally {
      silent.stop(true)
    }
  })

  test('one that stops sending halfway through a download: the download ends with an error once its wait is over, not a wait without end', async () => {
    // answers any request with the start of a 100,000-byte object, then sends nothing more
    const stalling = Bun.listen({
      hostname: '127.0.0.1',
      port: 0,
      socket: {
        data(socket) {
          socket.write('HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: 100000\r\n\r\n' + 'x'.repeat(1000))
        },
      },
    })
    const store = new S3MediaStore({ kind: 's3', bucket: 'capstan-media', prefix: 'stalling/', endpoint: `http://127.0.0.1:${stalling.port}`, region: 'us-east-1', accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER', sessionToken: null }, { answerMs: 300, checkMs: 300 })
    try {
      const res = await store.response('cd'.repeat(32), 100_000, {}, null)
      expect(res.status).toBe(200)
      const read = await Promise.race([res.arrayBuffer().then(() => 'whole', (e) => `cut: ${e instanceof MediaStoreUnavailable || String(e)}`), Bun.sleep(10_000).then(() => 'still waiting')])
      expect(read).toStartWith('cut')
    } finally {
      stalling.stop(true)
    }
  })

  test('uploads and downloads answer 503 media_store_unavailable and store nothing; /readyz reports it; a send with a file waits and goes once the bucket is back', async () => {
    const t = await srv.tenant()
    await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
    const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: `+1555${String(Date.now()).slice(-7)}`, driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
    const form = (bytes: Uint8Array, name: string) => {
      const f = new FormData()
      f.append('file', new File([bytes], name))
      return f
    }
    const kept = (await srv.api(t.key, 'POST', '/media', { multipart: form(files.png(), 'kept.png') })).json.data
    expect((await srv.request('GET', '/readyz')).json.media).toBe('ok')
    await s3.down()
    try {
      const rows = () => {
        const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
        try {
          return (db.query('SELECT count(*) AS n FROM media').get() as { n: number }).n
        } finally {
          db.close()
        }
      }
      const before = rows()
      const up = await srv.api(t.key, 'POST', '/media', { multipart: form(files.pdf(), 'late.pdf') })
      expect([up.status, up.json.code, up.json.message]).toEqual([503, 'media_store_unavailable', 'The media store cannot be reached right now; nothing was stored. Try again shortly.'])
      expect(rows()).toBe(before)
      const down = await srv.api(t.key, 'GET', `/media/${kept.id}/download`)
      expect([down.status, down.json.code]).toEqual([503, 'media_store_unavailable'])
      const ready = await srv.request('GET', '/readyz')
      expect([ready.status, ready.json.media]).toEqual([200, 'unavailable'])
      // a send with a file released now: the network never got it, so it is tried again
      const sent = await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: `+1555${String(Date.now() + 1).slice(-7)}`, body: 'Your photo', media: { attachments: [{ media_id: kept.id }] } } })
      expect(sent.status).toBe(202)
      await Bun.sleep(1500)
      expect((await srv.api(t.key, 'GET', `/messages/${sent.json.data.id}`)).json.data.status).not.toBe('failed')
      await s3.up()
      const done = await waitFor(async () => {
        const m = (await srv.api(t.key, 'GET', `/messages/${sent.json.data.id}`)).json.data
        return m.status === 'sent' ? m : null
      }, 20_000)
      expect(done.error).toBeNull()
    } finally {
      await s3.up().catch(() => {})
    }
    const again = await srv.api(t.key, 'GET', `/media/${kept.id}/download`)
    expect(again.status).toBe(200)
  }, 60_000)

  test('a send with a file stopped gracefully while the bucket is away is handed back, not failed; after the restart it goes once the bucket is back', async () => {
    const own = await TestServer.start({ env: { CAPSTAN_CLAMD: `unix:${clamd.socket}`, ...s3.env('s3://capstan-media/stopping') } })
    try {
      const t = await own.tenant()
      await own.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const conn = (await own.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: `+1556${String(Date.now()).slice(-7)}`, driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
      const f = new FormData()
      f.append('file', new File([files.png()], 'kept.png'))
      const kept = (await own.api(t.key, 'POST', '/media', { multipart: f })).json.data
      await s3.down()
      let id = ''
      try {
        const sent = await own.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: `+1556${String(Date.now() + 1).slice(-7)}`, body: 'Your photo', media: { attachments: [{ media_id: kept.id }] } } })
        expect(sent.status).toBe(202)
        id = sent.json.data.id
        await waitFor(async () => (await own.api(t.key, 'GET', `/messages/${id}`)).json.data.status === 'sending')
        await own.stop('SIGTERM')
      } finally {
        await s3.up()
      }
      const d = new Database(join(own.dataDir, 'capstan.db'), { readonly: true })
      const row = d.query('SELECT status, resend, error_code FROM messages WHERE id = ?').get(id)
      d.close()
      // still sending (a status never moves back), marked to go on at the next start
      expect(row).toEqual({ status: 'sending', resend: 1, error_code: null })
      await own.boot()
      const done = await waitFor(async () => {
        const m = (await own.api(t.key, 'GET', `/messages/${id}`)).json.data
        return m.status === 'sent' ? m : null
      }, 20_000)
      expect(done.error).toBeNull()
    } finally {
      await own.close()
    }
  }, 60_000)
})

describe('a bucket Capstan cannot use stops the start', () => {
  const start = async (env: Record<string, string>) => {
    const dir = `${srv.dataDir}-start-${crypto.randomUUID()}`
    const proc = Bun.spawn(['bun', 'src/main.ts', 'serve'], { env: { ...hostEnv(), CAPSTAN_DATA_DIR: dir, CAPSTAN_PORT: '0', CAPSTAN_ADMIN_TOKEN: 'a-start-that-must-stop-0123456789', ...env }, stdout: 'pipe', stderr: 'pipe' })
    const code = await proc.exited
    return { code, err: (await new Response(proc.stderr).text()).trim(), made: existsSync(join(dir, 'capstan.db')) }
  }

  test.concurrent('a bucket that does not exist: one line, exit code 2, no database made', async () => {
    const r = await start(s3.env('s3://no-such-bucket/x'))
    expect(r).toEqual({ code: 2, err: 'capstan: CAPSTAN_MEDIA_STORE: the bucket no-such-bucket does not exist', made: false })
  })

  test.concurrent('an endpoint nobody answers: one line, exit code 2', async () => {
    const r = await start({ ...s3.env('s3://capstan-media'), S3_ENDPOINT: 'http://127.0.0.1:9' })
    expect(r.code).toBe(2)
    expect(r.err.split('\n')).toHaveLength(1)
    expect(r.err).toStartWith('capstan: CAPSTAN_MEDIA_STORE: the bucket capstan-media cannot be reached (')
  })

  test.concurrent('an endpoint that takes connections and never answers (a server stuck, a network dropping the traffic): one line within seconds, exit code 2', async () => {
    const silent = Bun.listen({ hostname: '127.0.0.1', port: 0, socket: { data() {} } })
    try {
      const started = Date.now()
      const r = await start({ ...s3.env('s3://capstan-media'), S3_ENDPOINT: `http://127.0.0.1:${silent.port}` })
      expect(r).toEqual({ code: 2, err: `capstan: CAPSTAN_MEDIA_STORE: the bucket capstan-media did not answer within ${BUCKET_CHECK_MS / 1000} s; check S3_ENDPOINT (and that nothing between drops the traffic)`, made: false })
      expect(Date.now() - started).toBeLessThan(BUCKET_CHECK_MS + 10_000)
    } finally {
      silent.stop(true)
    }
  })

  test.concurrent('credentials that may list the bucket but not write, or not delete, its objects: one line naming the refusal and the permissions needed, exit code 2', async () => {
    // fault injection in front of the real s3rver: a bucket policy that refuses one kind of request
    const refusing = (method: string) =>
      Bun.serve({
        hostname: '127.0.0.1',
        port: 0,
        async fetch(req) {
          if (req.method === method) return new Response('<?xml version="1.0" encoding="UTF-8"?><Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>', { status: 403, headers: { 'content-type': 'application/xml' } })
          const url = new URL(req.url)
          url.host = new URL(s3.endpoint).host
          return fetch(url, { method: req.method, headers: req.headers, body: req.method === 'GET' || req.method === 'HEAD' ? undefined : await req.arrayBuffer() })
        },
      })
    for (const [method, what] of [['PUT', 'write'], ['DELETE', 'delete']] as const) {
      const proxy = refusing(method)
      try {
        const r = await start({ ...s3.env('s3://capstan-media/checked/'), S3_ENDPOINT: `http://127.0.0.1:${proxy.port}` })
        expect(r).toEqual({ code: 2, err: `capstan: CAPSTAN_MEDIA_STORE: the bucket capstan-media refused to ${what} an object (AccessDenied): the credentials need s3:PutObject, s3:GetObject and s3:DeleteObject on its objects, and s3:ListBucket on it`, made: false })
      } finally {
        proxy.stop(true)
      }
    }
    // the one the delete was refused for stays (nothing could delete it); a start on a bucket that
    // takes everything leaves nothing of its own check behind
    expect(await s3.keys('capstan-media', 'checked/')).toEqual([expect.stringMatching(/^checked\/\.capstan-probe-[0-9a-f-]{36}$/)])
    const served = await TestServer.start({ env: s3.env('s3://capstan-media/checked/') })
    await served.close()
    expect(await s3.keys('capstan-media', 'checked/')).toHaveLength(1)
  })

  test.concurrent('a malformed CAPSTAN_MEDIA_STORE: one line, exit code 2', async () => {
    const r = await start({ CAPSTAN_MEDIA_STORE: 'ftp://bucket' })
    expect([r.code, r.err]).toEqual([2, 'capstan: CAPSTAN_MEDIA_STORE must be s3://bucket or s3://bucket/prefix (a bucket name of 3-63 lower-case letters, digits, dots and hyphens)'])
  })
})
