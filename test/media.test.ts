/** Media (spec §4 POST /media, media:read; CONTRACT §2): real clamd, real store, real server. */
import type { LocalMediaStore } from '../src/modules/media/store'
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join } from 'node:path'
import { EICAR, TestClamd, scanningServer } from './support/clamd'
import * as files from './support/files'
import { inProcess, settle } from './support/inproc'
import { ADMIN_TOKEN, TestServer, newPhone } from './support/server'
import { storesOf } from './support/stores'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)

let clamd: TestClamd
let srv: TestServer
let close: () => Promise<void>
beforeAll(async () => ({ clamd, srv, close } = await scanningServer()))
afterAll(() => close())

const upload = (key: string, bytes: Uint8Array, name = 'file.bin', type = 'application/octet-stream', field = 'file') => {
  const fd = new FormData()
  fd.set(field, new File([bytes], name, { type }))
  return srv.api(key, 'POST', '/media', { multipart: fd })
}

/** Every file under the media store (temp files included). */
function storeFiles(dir = join(srv.dataDir, 'media')): string[] {
  if (!existsSync(dir)) return []
  return readdirSync(dir).flatMap((f) => (statSync(join(dir, f)).isDirectory() ? storeFiles(join(dir, f)) : [join(dir, f)]))
}

describe('upload', () => {
  const kinds: [string, () => Uint8Array, string][] = [
    ['png', () => files.png(), 'image/png'],
    ['jpeg', files.jpeg, 'image/jpeg'],
    ['pdf', files.pdf, 'application/pdf'],
    ['text', files.text, 'text/plain'],
    ['mp3', files.mp3, 'audio/mpeg'],
    ['ogg', files.ogg, 'audio/ogg'],
    ['mp4', files.mp4, 'video/mp4'],
    ['docx', files.docx, 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'],
    ['xlsx', files.xlsx, 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet'],
    ['UTF-16 text (FF FE)', files.utf16Text, 'text/plain'],
  ]
  for (const [label, make, type] of kinds) {
    test(`${label}: 201 with the record; the type comes from the bytes, not the header or the name`, async () => {
      const { key } = await srv.tenant()
      const bytes = make()
      const r = await upload(key, bytes, 'misleading.exe', 'application/x-msdownload')
      expect(r.status).toBe(201)
      expect(r.json.data).toMatchObject({ mime_type: type, size: bytes.length, sha256: new Bun.CryptoHasher('sha256').update(bytes).digest('hex'), filename: 'misleading.exe' })
      expect(Date.parse(r.json.data.expires_at) - Date.parse(r.json.data.created_at)).toBe(30 * 86_400_000)
    })
  }

  test('infected files are refused with 422 malware_detected and leave nothing behind', async () => {
    const { key } = await srv.tenant()
    const before = storeFiles()
    const r1 = await upload(key, Buffer.concat([files.png(), EICAR]), 'invoice.png', 'image/png')
    expect([r1.status, r1.json.code]).toEqual([422, 'malware_detected'])
    const r2 = await upload(key, EICAR, 'eicar.com')
    expect([r2.status, r2.json.code]).toEqual([422, 'malware_detected'])
    expect(storeFiles()).toEqual(before)
    const db = new Database(join(srv.dataDir, 'capstan.db'), { readonly: true })
    expect((db.query('SELECT COUNT(*) AS n FROM media WHERE workspace_id = (SELECT workspace_id FROM api_keys WHERE key_id = ?)').get(key.slice(4, 20)) as any).n).toBe(0)
    db.close()
    for (const f of storeFiles()) expect(Buffer.from(await Bun.file(f).arrayBuffer()).includes(EICAR)).toBe(false)
  })

  const unsupported: [string, () => Uint8Array][] = [
    ['an ELF executable', files.elf],
    ['a GIF', files.gif],
    ['a zip that is not an Office document', files.plainZip],
    ['a zip with a word/ folder that is not an Office document', files.zipWithWordFolder],
    ['random binary', files.binary],
  ]
  for (const [label, make] of unsupported) {
    test(`${label} is refused as unsupported_media even when it claims to be an image`, async () => {
      const { key } = await srv.tenant()
      const before = storeFiles()
      const r = await upload(key, make(), 'photo.png', 'image/png')
      expect([r.status, r.json.code]).toEqual([422, 'unsupported_media'])
      expect(storeFiles()).toEqual(before)
    })
  }

  test('empty, missing or non-file fields are 422 naming file', async () => {
    const { key } = await srv.tenant()
    expect((await upload(key, new Uint8Array())).json.errors.file).toBeDefined()
    const noFile = new FormData()
    noFile.set('other', 'x')
    expect((await srv.api(key, 'POST', '/media', { multipart: noFile })).json.errors.file).toBeDefined()
    const asText = new FormData()
    asText.set('file', 'just text')
    expect((await srv.api(key, 'POST', '/media', { multipart: asText })).json.errors.file).toBeDefined()
    expect((await srv.api(key, 'POST', '/media', { json: { file: 'x' } })).status).toBe(422)
  })

  test('over the workspace max_bytes is 422 naming file; over the server limit is 413', async () => {
    const { ws, key } = await srv.tenant()
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { media: { retention_days: 30, max_bytes: 2048 } } })
    const big = Buffer.concat([Buffer.from('%PDF-1.4\n'), Buffer.alloc(3000, 0x20)])
    const r = await upload(key, big, 'big.pdf')
    expect([r.status, r.json.code]).toEqual([422, 'validation_failed'])
    expect(r.json.errors.file[0]).toContain('2048')
    expect((await upload(key, Buffer.concat([Buffer.from('%PDF-1.4\n'), Buffer.alloc(1000, 0x20)]))).status).toBe(201)
    const huge = await upload(key, Buffer.alloc(65 * 1024 * 1024, 0x41), 'huge.txt')
    expect([huge.status, huge.json?.code]).toEqual([413, 'payload_too_large'])
  })

  test('a workspace\'s media storage (max_total_bytes): uploads past it are refused with media_quota_exceeded and change nothing; raised or lifted, they go in', async () => {
    const { ws, key } = await srv.tenant()
    const pdfOf = (size: number) => Buffer.concat([Buffer.from('%PDF-1.4\n'), Buffer.alloc(size - 9, 0x20)])
    const MiB = 1024 * 1024
    expect((await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { media: { max_total_bytes: 2 * MiB } } })).json.data.settings.media).toEqual({ retention_days: 30, max_bytes: 16 * MiB, max_total_bytes: 2 * MiB })
    expect((await upload(key, pdfOf(900 * 1024), 'a.pdf')).status).toBe(201)
    expect((await upload(key, pdfOf(900 * 1024), 'b.pdf')).status).toBe(201)
    const files0 = storeFiles().length
    const over = await upload(key, pdfOf(300 * 1024), 'c.pdf')
    expect([over.status, over.json.code, over.json.message]).toEqual([422, 'media_quota_exceeded', 'The workspace has used its media storage; the file was not stored.'])
    // a file sent with a message is refused the same way, and no message is made
    const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
    const fd = new FormData()
    fd.set('connection_id', conn.id)
    fd.set('recipient', newPhone())
    fd.set('file', new File([pdfOf(300 * 1024)], 'invoice.pdf', { type: 'application/pdf' }))
    const withMessage = await srv.api(key, 'POST', '/messages', { multipart: fd })
    expect([withMessage.status, withMessage.json.code]).toEqual([422, 'media_quota_exceeded'])
    expect((await srv.api(key, 'GET', '/messages')).json.data).toEqual([])
    expect(storeFiles().length).toBe(files0)
    // a small one still fits; raised, the big one goes in; lifted (null), anything the disk takes
    expect((await upload(key, pdfOf(100 * 1024), 'd.pdf')).status).toBe(201)
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { media: { max_total_bytes: 3 * MiB } } })
    expect((await upload(key, pdfOf(300 * 1024), 'c.pdf')).status).toBe(201)
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { media: { max_total_bytes: null } } })
    expect((await upload(key, pdfOf(2 * MiB), 'e.pdf')).status).toBe(201)
    // below 1 MiB or not a whole number: refused
    for (const bad of [1000, 1.5, 'lots']) {
      const r = await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { media: { max_total_bytes: bad } } })
      expect([r.status, Object.keys(r.json.errors ?? {})]).toEqual([422, ['settings.media.max_total_bytes']])
    }
  })

  test('an upload longer than the workspace takes is refused before it is read, after the key, scope and limit checks', async () => {
    const { ws, key } = await srv.tenant()
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { media: { retention_days: 30, max_bytes: 1 << 20 } } })
    const head = (bearer: string, path = '/api/v1/media') => `POST ${path} HTTP/1.1\r\nAuthorization: Bearer ${bearer}\r\nContent-Type: multipart/form-data; boundary=b`
    const status = (reply: string) => reply.split('\r\n')[0]
    const body = (reply: string) => JSON.parse(reply.slice(reply.indexOf('\r\n\r\n') + 4))
    // 40 MB announced (the server's limit is 64 MiB), 4 KiB sent: the answer comes at once, and
    // the connection closes (the rest of the body is not read)
    for (const path of ['/api/v1/media', '/api/v1/messages']) {
      const { reply, closed } = await srv.partialRequest(head(key, path), 40_000_000)
      expect(status(reply)).toBe('HTTP/1.1 422 Unprocessable Entity')
      expect(body(reply)).toEqual({ message: 'The given data was invalid.', code: 'validation_failed', errors: { file: [`The file field must not be larger than ${1 << 20} bytes.`] } })
      expect(closed).toBe(true)
    }
    // counted once against the key's limit, like any request, and answered with its headers
    const seen = await srv.api(key, 'GET', '/workspace')
    const { reply } = await srv.partialRequest(head(key), 40_000_000)
    const left = (r: string) => Number(/x-ratelimit-remaining: (\d+)/i.exec(r)?.[1])
    expect(left(reply)).toBe(Number(seen.headers.get('x-ratelimit-remaining')) - 1)
    // in CONTRACT's order: a key without the scope gets its 403, an inactive workspace its 403
    const reader = (await srv.key(ws.id, ['contacts:read'])).key
    const noScope = await srv.partialRequest(head(reader), 40_000_000)
    expect([status(noScope.reply), body(noScope.reply).code, noScope.closed]).toEqual(['HTTP/1.1 403 Forbidden', 'insufficient_scope', true])
    // a file the workspace takes, in a body the same size, is read as before: nothing is answered yet
    expect((await srv.partialRequest(head(key), (1 << 20) + 1000, 1000)).reply).toBe('')
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { status: 'inactive' })
    const inactive = await srv.partialRequest(head(key), 40_000_000)
    expect([status(inactive.reply), body(inactive.reply).code]).toEqual(['HTTP/1.1 403 Forbidden', 'workspace_unavailable'])
  })

  test('a chunked upload is read only as far as the workspace takes files', async () => {
    const { ws, key } = await srv.tenant()
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { media: { retention_days: 30, max_bytes: 1 << 20 } } })
    // a stream body goes out chunked (no Content-Length): a file of `size` bytes in a form
    const post = async (size: number) => {
      let sent = 0
      const chunk = new Uint8Array(64 * 1024).fill(0x20)
      const body = (async function* () {
        yield Buffer.from('--b\r\nContent-Disposition: form-data; name="file"; filename="f.pdf"\r\n\r\n%PDF-1.4\n')
        for (; sent < size; sent += chunk.length) yield chunk.subarray(0, Math.min(chunk.length, size - sent))
        yield Buffer.from('\r\n--b--\r\n')
      })()
      const r = await fetch(`${srv.base}/api/v1/media`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'multipart/form-data; boundary=b' }, body: body as any })
      return { status: r.status, json: (await r.json()) as any, sent }
    }
    expect((await post(200_000)).status).toBe(201)
    // 80 MB: past the workspace's limit and the server's (64 MiB)
    const r = await post(80_000_000)
    expect([r.status, r.json.errors]).toEqual([422, { file: [`The file field must not be larger than ${1 << 20} bytes.`] }])
    // answered once a little more than the workspace's limit (and the room for other fields) was in
    expect(r.sent).toBeLessThan(16 << 20)
  })

  test('identical content is stored once per workspace, never shared with another workspace; every record downloads it', async () => {
    const { key } = await srv.tenant()
    const other = (await srv.tenant()).key
    const bytes = files.png() // a random image: no other test uploads it, so the store's new files can be counted
    const before = new Set(storeFiles())
    const a = (await upload(key, bytes)).json.data
    const b = (await upload(key, bytes)).json.data
    expect(a.id).not.toBe(b.id)
    expect(storeFiles().filter((f) => !before.has(f))).toHaveLength(1)
    const c = (await upload(other, bytes)).json.data
    expect(c.sha256).toBe(a.sha256)
    expect(storeFiles().filter((f) => !before.has(f))).toHaveLength(2)
    for (const [k, m] of [[key, a], [key, b], [other, c]] as const) {
      const dl = await fetch(`${srv.base}/api/v1/media/${m.id}/download`, { headers: { authorization: `Bearer ${k}` } })
      expect(Buffer.from(await dl.arrayBuffer()).equals(Buffer.from(bytes))).toBe(true)
    }
  })
})

describe('reading', () => {
  test('GET /media/{id} and /download need media:read; bytes come back as an attachment', async () => {
    const { ws, key } = await srv.tenant()
    const bytes = files.pdf()
    const fd = new FormData()
    fd.set('file', new File([bytes], 'Rechnung März.pdf'))
    const m = (await srv.api(key, 'POST', '/media', { multipart: fd })).json.data
    const reader = (await srv.key(ws.id, ['media:read'])).key
    const writer = (await srv.key(ws.id, ['messages:write'])).key
    expect((await srv.api(reader, 'GET', `/media/${m.id}`)).json.data).toEqual(m)
    const dl = await fetch(`${srv.base}/api/v1/media/${m.id}/download`, { headers: { authorization: `Bearer ${reader}` } })
    expect(dl.status).toBe(200)
    expect(Buffer.from(await dl.arrayBuffer()).equals(Buffer.from(bytes))).toBe(true)
    expect(dl.headers.get('content-type')).toBe('application/pdf')
    expect(dl.headers.get('content-length')).toBe(String(bytes.length))
    expect(dl.headers.get('content-disposition')).toBe(`attachment; filename="Rechnung M_rz.pdf"; filename*=UTF-8''${encodeURIComponent('Rechnung März.pdf')}`)
    expect(dl.headers.get('x-content-type-options')).toBe('nosniff')
    expect((await srv.api(writer, 'GET', `/media/${m.id}`)).status).toBe(403)
    expect((await srv.api(writer, 'GET', `/media/${m.id}/download`)).status).toBe(403)
    expect((await srv.api(reader, 'POST', '/media', { multipart: fd })).status).toBe(403)
  })

  test('a long name is cut at 200 characters without splitting one, and still downloads', async () => {
    const { key } = await srv.tenant()
    const fd = new FormData()
    fd.set('file', new File([files.pdf()], `${'a'.repeat(199)}😀😀.pdf`))
    const m = (await srv.api(key, 'POST', '/media', { multipart: fd })).json.data
    expect(m.filename).toBe(`${'a'.repeat(199)}😀`)
    const dl = await fetch(`${srv.base}/api/v1/media/${m.id}/download`, { headers: { authorization: `Bearer ${key}` } })
    expect(dl.status).toBe(200)
    expect(dl.headers.get('content-disposition')).toContain(`filename*=UTF-8''${'a'.repeat(199)}${encodeURIComponent('😀')}`)
  })

  test('another workspace’s media is 404 everywhere', async () => {
    const a = await srv.tenant()
    const b = await srv.tenant()
    const m = (await upload(a.key, files.png())).json.data
    expect((await srv.api(b.key, 'GET', `/media/${m.id}`)).status).toBe(404)
    expect((await srv.api(b.key, 'GET', `/media/${m.id}/download`)).status).toBe(404)
    expect((await srv.api(b.key, 'GET', `/media/nope/download`)).status).toBe(404)
    const conn = (await srv.admin('POST', `/workspaces/${b.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
    const r = await srv.api(b.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), media: { attachments: [{ media_id: m.id }] } } })
    expect([r.status, r.json.message]).toEqual([404, 'The media was not found.'])
  })

  test('a sandbox customer can send a file: the inbound message carries its own copy of workspace media', async () => {
    const a = await srv.tenant()
    const b = await srv.tenant()
    const conn = (await srv.admin('POST', `/workspaces/${a.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
    const photo = files.png()
    const m = (await upload(a.key, photo, 'broken-box.png')).json.data
    const r = await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'It arrived like this', media_id: m.id })
    expect([r.status, r.json.data.direction, r.json.data.attachments.length]).toEqual([201, 'inbound', 1])
    const copy = r.json.data.attachments[0]
    expect(copy).not.toBe(m.id)
    expect((await srv.api(a.key, 'GET', `/media/${copy}`)).json.data).toMatchObject({ filename: 'broken-box.png', mime_type: 'image/png', sha256: m.sha256 })
    const dl = await fetch(`${srv.base}/api/v1/media/${copy}/download`, { headers: { authorization: `Bearer ${a.key}` } })
    expect(new Uint8Array(await dl.arrayBuffer())).toEqual(new Uint8Array(photo))
    // another workspace's or unknown media is not found, a malformed id is a validation error; nothing is logged
    const foreign = (await upload(b.key, files.pdf())).json.data
    const before = (await srv.api(a.key, 'GET', '/messages?direction=inbound')).json.meta.total
    for (const media_id of [foreign.id, crypto.randomUUID()]) expect((await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'x', media_id })).status).toBe(404)
    const bad = await srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: newPhone(), body: 'x', media_id: 'nope' })
    expect([bad.status, Object.keys(bad.json.errors)]).toEqual([422, ['media_id']])
    expect((await srv.api(a.key, 'GET', '/messages?direction=inbound')).json.meta.total).toBe(before)
  })

  test('operators download a workspace’s media from the dashboard’s message log; only through that workspace', async () => {
    const a = await srv.tenant()
    const b = await srv.tenant()
    const bytes = files.pdf()
    const m = (await upload(a.key, bytes, 'receipt.pdf')).json.data
    const get = (ws: string, id: string, token = ADMIN_TOKEN) => fetch(`${srv.base}/admin/api/workspaces/${ws}/media/${id}/download`, { headers: { authorization: `Bearer ${token}` } })
    const dl = await get(a.ws.id, m.id.toUpperCase())
    expect([dl.status, dl.headers.get('content-type'), dl.headers.get('content-disposition')?.startsWith('attachment; filename="receipt.pdf"')]).toEqual([200, 'application/pdf', true])
    expect(new Uint8Array(await dl.arrayBuffer())).toEqual(new Uint8Array(bytes))
    for (const r of [await get(b.ws.id, m.id), await get(a.ws.id, 'nope'), await get(crypto.randomUUID(), m.id)]) expect([r.status, ((await r.json()) as any).code]).toEqual([404, 'not_found'])
    const noToken = await get(a.ws.id, m.id, 'wrong-token')
    expect(noToken.status).toBe(401)
  })
})

describe('sending with media', () => {
  test('a multipart send with a file stores, scans and attaches it; the sandbox receives it', async () => {
    const { ws, key } = await srv.tenant()
    await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: 100, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 0 } } })
    const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
    const existing = (await upload(key, files.jpeg())).json.data
    const bytes = files.png()
    const fd = new FormData()
    fd.set('connection_id', conn.id)
    fd.set('recipient', newPhone())
    fd.set('body', 'Your receipt')
    fd.set('media[attachments][0][media_id]', existing.id)
    fd.set('file', new File([bytes], 'receipt.png', { type: 'image/png' }))
    const r = await srv.api(key, 'POST', '/messages', { multipart: fd })
    expect(r.status).toBe(202)
    const atts: string[] = r.json.data.attachments
    expect(atts).toHaveLength(2)
    expect(atts[0]).toBe(existing.id)
    const dl = await fetch(`${srv.base}/api/v1/media/${atts[1]}/download`, { headers: { authorization: `Bearer ${key}` } })
    expect(Buffer.from(await dl.arrayBuffer()).equals(Buffer.from(bytes))).toBe(true)
    for (let i = 0; i < 100 && (await srv.api(key, 'GET', `/messages/${r.json.data.id}`)).json.data.status !== 'sent'; i++) await Bun.sleep(50)
    expect((await srv.api(key, 'GET', `/messages/${r.json.data.id}`)).json.data.status).toBe('sent')
    // the file counts toward the 10 attachments of a message: 9 ids and a file pass, 10 and a file do not
    const withFile = (ids: number) => {
      const form = new FormData()
      form.set('connection_id', conn.id)
      form.set('recipient', newPhone())
      for (let i = 0; i < ids; i++) form.set(`media[attachments][${i}][media_id]`, existing.id)
      form.set('file', new File([bytes], 'receipt.png', { type: 'image/png' }))
      return srv.api(key, 'POST', '/messages', { multipart: form })
    }
    const eleven = await withFile(10)
    expect(eleven.status).toBe(422)
    expect(eleven.json.errors['media.attachments']).toEqual(['A message carries at most 10 attachments, the file included.'])
    const ten = await withFile(9)
    expect(ten.status).toBe(202)
    expect(ten.json.data.attachments).toHaveLength(10)
  })

  test('a refused send with a file leaves no media row and no file; an infected file refuses the send', async () => {
    const { ws, key } = await srv.tenant()
    const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
    const out = newPhone()
    await srv.api(key, 'POST', '/contacts', { json: { phone: out, consent_status: 'opted_out' } })
    const before = storeFiles()
    const bytes = files.png()
    const fd = new FormData()
    fd.set('connection_id', conn.id)
    fd.set('recipient', out)
    fd.set('file', new File([bytes], 'x.png'))
    const r = await srv.api(key, 'POST', '/messages', { multipart: fd })
    expect(r.json.code).toBe('recipient_opted_out')
    expect(storeFiles()).toEqual(before)
    const bad = new FormData()
    bad.set('connection_id', conn.id)
    bad.set('recipient', newPhone())
    bad.set('file', new File([Buffer.concat([files.png(), EICAR])], 'x.png'))
    expect((await srv.api(key, 'POST', '/messages', { multipart: bad })).json.code).toBe('malware_detected')
    expect((await srv.api(key, 'GET', '/messages')).json.data).toEqual([])
    expect(storeFiles()).toEqual(before)
  })
})

describe('scanner down', () => {
  test('uploads answer 503 scanner_unavailable, nothing is stored, everything else works; readyz says so', async () => {
    const down = await TestServer.start({ env: { CAPSTAN_CLAMD: 'unix:/nonexistent/clamd.sock' } })
    try {
      const { ws, key } = await down.tenant()
      const fd = new FormData()
      fd.set('file', new File([files.png()], 'a.png'))
      const r = await down.api(key, 'POST', '/media', { multipart: fd })
      expect([r.status, r.json.code]).toEqual([503, 'scanner_unavailable'])
      expect(existsSync(join(down.dataDir, 'media')) ? readdirSync(join(down.dataDir, 'media')).filter((f) => f !== 'tmp') : []).toEqual([])
      expect((await down.request('GET', '/readyz')).json).toMatchObject({ database: 'ok', scanner: 'unavailable' })
      const conn = (await down.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
      expect((await down.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'text still works' } })).status).toBe(202)
    } finally {
      await down.close()
    }
    expect((await srv.request('GET', '/readyz')).json.scanner).toBe('ok')
  })
})

describe('a scanner that takes less than the workspace allows', () => {
  test('a file longer than clamd takes (its StreamMaxLength) is 422 naming file, not 503; nothing is stored; the log says what to change', async () => {
    const small = await TestClamd.start({ streamMaxLength: '1M' })
    const s2 = await TestServer.start({ env: { CAPSTAN_CLAMD: `unix:${small.socket}` } })
    try {
      const { key } = await s2.tenant()
      const send = (bytes: Uint8Array) => {
        const fd = new FormData()
        fd.set('file', new File([bytes], 'long.pdf'))
        return s2.api(key, 'POST', '/media', { multipart: fd })
      }
      const long = await send(Buffer.concat([Buffer.from('%PDF-1.4\n'), Buffer.alloc(2 * 1024 * 1024, 0x20)]))
      expect([long.status, long.json.code, long.json.errors]).toEqual([422, 'validation_failed', { file: ['The file field is larger than the malware scanner accepts.'] }])
      expect(existsSync(join(s2.dataDir, 'media')) ? readdirSync(join(s2.dataDir, 'media')).filter((f) => f !== 'tmp') : []).toEqual([])
      expect(s2.output).toContain('raise StreamMaxLength in clamd.conf')
      // the scanner itself is fine: readiness says so, and a file within its limit is stored
      expect((await s2.request('GET', '/readyz')).json.scanner).toBe('ok')
      expect((await send(Buffer.concat([Buffer.from('%PDF-1.4\n'), Buffer.alloc(500 * 1024, 0x20)]))).status).toBe(201)
    } finally {
      await s2.close()
      await small.stop()
    }
  })
})

describe('retention', () => {
  /** An in-process Capstan (real SQLite, real clamd, controlled time) with one workspace keeping media for a day. */
  async function withOneDayRetention(name: string, run: (env: Awaited<ReturnType<typeof inProcess>>, ws: { id: string }) => Promise<void>) {
    const env = await inProcess({ clamd: `unix:${clamd.socket}` })
    try {
      const ws = await env.svc.workspaces.create({ name })
      await env.svc.workspaces.patch(ws.id, { settings: { media: { retention_days: 1, max_bytes: 1 << 20 } } })
      await run(env, ws)
    } finally {
      await env.close()
    }
  }

  test('media a campaign that has not ended still sends is kept past its retention, and goes once the campaign ends', async () => {
    await withOneDayRetention('Campaign media', async (env, ws) => {
      const { svc } = env
      const conn = await svc.connections.create(ws.id, { phone: '+15550000081', driver: 'sandbox' })
      await svc.contacts.upsert(ws.id, { phone: '+15550000082', consent_status: 'opted_in' }, 'test')
      const used = await svc.media.upload(ws.id, new File([files.pdf()], 'menu.pdf'))
      const unused = await svc.media.upload(ws.id, new File([files.png()], 'other.png'))
      const tpl = await svc.templates.create(ws.id, { name: 'T', body: 'Our new menu' })
      const c = await svc.campaigns.create(ws.id, { name: 'Menu', template_id: tpl.id, connection_id: conn.id, media_id: used.id })
      await svc.campaigns.schedule(ws.id, c.id, new Date(env.clock.now() + 2 * 86_400_000).toISOString())
      env.clock.t += 86_400_000 + 1
      await svc.media.purgeExpired()
      expect((await svc.media.find(ws.id, used.id))?.id).toBe(used.id)
      expect(existsSync((svc.media.store as LocalMediaStore).pathFor(used.blob))).toBe(true)
      expect(await svc.media.find(ws.id, unused.id)).toBeNull()
      // moved to another time, it still holds it
      await svc.campaigns.schedule(ws.id, c.id, new Date(env.clock.now() + 86_400_000).toISOString())
      await svc.media.purgeExpired()
      expect((await svc.media.find(ws.id, used.id))?.id).toBe(used.id)
      // cancelled, the campaign no longer holds it
      await svc.campaigns.cancel(ws.id, c.id)
      await svc.media.purgeExpired()
      expect(await svc.media.find(ws.id, used.id)).toBeNull()
      expect(existsSync((svc.media.store as LocalMediaStore).pathFor(used.blob))).toBe(false)
    })
  })

  test('media a queued message still has to send is kept past its retention, and goes once the message is sent', async () => {
    await withOneDayRetention('Queued media', async (env, ws) => {
      const { svc, timers } = env
      const conn = await svc.connections.create(ws.id, { phone: '+15550000083', driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })
      const m = await svc.media.upload(ws.id, new File([files.pdf()], 'invoice.pdf'))
      await timers.advance(23 * 3_600_000)
      // sent an hour before the file expires, while the number is down: it waits in the queue
      const row = await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15550000084', attachments: [m.id] })
      await svc.connections.setStatus(conn.id, 'offline', 'test')
      await timers.advance(2 * 3_600_000)
      await svc.media.purgeExpired()
      expect((await svc.media.find(ws.id, m.id))?.id).toBe(m.id)
      expect(existsSync((svc.media.store as LocalMediaStore).pathFor(m.blob))).toBe(true)
      await expect(svc.media.get(ws.id, m.id)).rejects.toThrow() // expired for new sends all the same
      // back online, the message goes out with its file; then nothing holds it any more
      await svc.connections.setStatus(conn.id, 'online', null)
      for (let i = 0; i < 3; i++) {
        await timers.advance(15_000)
        await settle()
      }
      // (the network reads the file as it takes the message: real disk reads, not the test's clock)
      await waitFor(async () => (await storesOf(svc).messages.get(ws.id, row.id))?.status !== 'sending')
      expect(await storesOf(svc).messages.get(ws.id, row.id)).toMatchObject({ status: 'sent', error_code: null })
      await svc.media.purgeExpired()
      expect(await svc.media.find(ws.id, m.id)).toBeNull()
      expect(existsSync((svc.media.store as LocalMediaStore).pathFor(m.blob))).toBe(false)
    })
  })

  test('expired media is deleted with its file; later sends naming it get 404', async () => {
    await withOneDayRetention('Retention', async (env, ws) => {
      const { svc } = env
      const conn = await svc.connections.create(ws.id, { phone: '+15550000077', driver: 'sandbox' })
      const bytes = files.pdf()
      const m = await svc.media.upload(ws.id, new File([bytes], 'a.pdf'))
      const path = (svc.media.store as LocalMediaStore).pathFor(m.blob)
      expect(existsSync(path)).toBe(true)
      // the whole file, or only its first bytes (all a driver needs to tell a WebP sticker)
      expect(Buffer.from(await svc.media.store.bytes(m.blob)).equals(Buffer.from(bytes))).toBe(true)
      expect(Buffer.from(await svc.media.store.bytes(m.blob, 5)).toString()).toBe('%PDF-')
      env.clock.t += 86_400_000 - 1
      const keep = await svc.media.upload(ws.id, new File([files.png()], 'b.png'))
      await svc.media.purgeExpired()
      expect((await svc.media.get(ws.id, m.id)).id).toBe(m.id)
      env.clock.t += 1
      await expect(svc.media.get(ws.id, m.id)).rejects.toThrow()
      await expect(svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15550000078', attachments: [m.id] })).rejects.toMatchObject({ status: 404 })
      await svc.media.purgeExpired()
      expect(existsSync(path)).toBe(false)
      expect(await svc.media.find(ws.id, m.id)).toBeNull()
      // a later upload is untouched
      expect(existsSync((svc.media.store as LocalMediaStore).pathFor(keep.blob))).toBe(true)
      expect((await svc.media.get(ws.id, keep.id)).id).toBe(keep.id)
    })
  })
})
