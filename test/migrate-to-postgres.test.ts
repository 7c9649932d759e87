/**
 * `capstan migrate-to-postgres`: an installation used on its SQLite file (contacts, a key, a
 * number, messages, webhook deliveries, a scanned upload) moves into a private PostgreSQL and an
 * s3rver bucket; served from there it is the same installation — same ids, counts, secrets, files
 * — and goes on (a new message follows the old ones). The SQLite file is left as it was; an
 * installation already moved is not moved twice.
 */
import { Database } from 'bun:sqlite'
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { TestClamd } from './support/clamd'
import * as files from './support/files'
import { TestS3 } from './support/s3'
import { TestServer, hostEnv, newPhone } from './support/server'

setDefaultTimeout(120_000)

let dir: string
let pg: PrivatePostgres
let s3: TestS3
let clamd: TestClamd
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'capstan-move-'))
  ;[pg, s3, clamd] = await Promise.all([PrivatePostgres.start(join(dir, 'pg')), TestS3.start(['moved-media']), TestClamd.start()])
})
afterAll(async () => {
  await Promise.all([pg.stop(), s3.stop(), clamd.stop()])
  rmSync(dir, { recursive: true, force: true })
})

const move = async (dataDir: string, url = pg.url) => {
  const proc = Bun.spawn(['bun', 'src/main.ts', 'migrate-to-postgres'], { env: { ...hostEnv(), CAPSTAN_DATA_DIR: dataDir, CAPSTAN_DATABASE_URL: url, ...s3.env('s3://moved-media/m') }, stdout: 'pipe', stderr: 'pipe' })
  const code = await proc.exited
  return { code, out: await new Response(proc.stdout).text(), err: (await new Response(proc.stderr).text()).trim() }
}

describe('capstan migrate-to-postgres', () => {
  test('everything moves, verified by counts; served from PostgreSQL and the bucket it is the same installation, and it goes on', async () => {
    const sqlite = await TestServer.start({ env: { CAPSTAN_CLAMD: `unix:${clamd.socket}` } })
    const dataDir = sqlite.dataDir
    let before: Record<string, unknown>
    let key: string
    let mediaId: string
    const png = files.png()
    try {
      const t = await sqlite.tenant()
      key = t.key
      await sqlite.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const conn = (await sqlite.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1555'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
      await sqlite.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: 'http://127.0.0.1:9/hook' })
      for (let i = 0; i < 5; i++) await sqlite.api(key, 'POST', '/contacts', { json: { phone: newPhone('+1444'), name: `Person ${i}`, consent_status: i % 2 ? 'opted_in' : 'unknown', metadata: { n: i } } })
      await sqlite.admin('POST', `/workspaces/${t.ws.id}/suppressions`, { phone: newPhone('+1333'), reason: 'asked' })
      const upload = new FormData()
      upload.append('file', new File([png], 'photo.png', { type: 'image/png' }))
      const media = await sqlite.api(key, 'POST', '/media', { multipart: upload })
      expect(media.status).toBe(201)
      mediaId = media.json.data.id
      for (let i = 0; i < 3; i++) expect((await sqlite.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1222'), body: `hello ${i}`, media: { attachments: [{ media_id: mediaId }] } } })).status).toBe(202)
      for (let i = 0; i < 50; i++) {
        if ((await sqlite.api(key, 'GET', '/messages?status=sent&per_page=1')).json.meta.total === 3) break
        await Bun.sleep(100)
      }
      // a person erased before the move: the record goes to the bucket with the media
      const erased = newPhone('+1444')
      await sqlite.api(key, 'POST', '/contacts', { json: { phone: erased, name: 'Erased Before' } })
      expect((await sqlite.admin('POST', `/workspaces/${t.ws.id}/contacts/erase`, { phone: erased })).status).toBe(200)
      before = {
        contacts: (await sqlite.api(key, 'GET', '/contacts?per_page=100')).json,
        messages: (await sqlite.api(key, 'GET', '/messages?per_page=100')).json,
        hooks: (await sqlite.admin('GET', `/workspaces/${t.ws.id}/webhooks`)).json,
        suppressions: (await sqlite.admin('GET', `/workspaces/${t.ws.id}/suppressions`)).json,
      }
    } finally {
      await sqlite.stop()
    }

    const moved = await move(dataDir)
    expect([moved.code, moved.err]).toEqual([0, ''])
    expect(moved.out).toMatch(/^moved to PostgreSQL .+: 1 workspaces, 8 contacts, 3 messages, \d+ webhook deliveries, every table's rows counted on both sides; 1 media files and 1 erasure records copied to s3:\/\/moved-media\/m/)
    expect(await s3.keys('moved-media', 'm/')).toHaveLength(2)
    expect(await s3.keys('moved-media', 'm/erasures/')).toEqual([expect.stringMatching(/^m\/erasures\/[0-9a-f-]{36}_[0-9a-f]{64}_\d{4}-/)])

    // served from PostgreSQL and the bucket, over the same data directory (its secret key)
    const pgServer = await TestServer.start({ dataDir, env: { CAPSTAN_DATABASE_URL: pg.url, CAPSTAN_CLAMD: `unix:${clamd.socket}`, ...s3.env('s3://moved-media/m') } })
    try {
      expect((await pgServer.api(key, 'GET', '/contacts?per_page=100')).json).toEqual(before.contacts)
      expect((await pgServer.api(key, 'GET', '/messages?per_page=100')).json).toEqual(before.messages)
      const ws = (await pgServer.api(key, 'GET', '/workspace')).json.data
      expect((await pgServer.admin('GET', `/workspaces/${ws.id}/webhooks`)).json).toEqual(before.hooks)
      expect((await pgServer.admin('GET', `/workspaces/${ws.id}/suppressions`)).json).toEqual(before.suppressions)
      // the endpoint's signing secret opens with the installation's key
      const hook = (before.hooks as { data: { id: string }[] }).data[0]!
      expect((await pgServer.admin('GET', `/webhooks/${hook.id}`)).json.data.secret).toStartWith('whsec_')
      const download = await fetch(`${pgServer.base}/api/v1/media/${mediaId}/download`, { headers: { authorization: `Bearer ${key}` } })
      expect(Buffer.from(await download.arrayBuffer()).equals(Buffer.from(png))).toBe(true)
      // and it goes on: a new message comes after the old ones in the log
      const conn = (before.messages as { data: { connection_id: string }[] }).data[0]!.connection_id
      const next = await pgServer.api(key, 'POST', '/messages', { json: { connection_id: conn, recipient: newPhone('+1222'), body: 'after the move' } })
      expect(next.status).toBe(202)
      const log = (await pgServer.api(key, 'GET', '/messages?per_page=100')).json
      expect([log.meta.total, log.data[0].id]).toEqual([4, next.json.data.id])
    } finally {
      await pgServer.stop()
    }

    // moved already: refused, nothing changed
    const again = await move(dataDir)
    expect(again.code).toBe(2)
    expect(again.err).toMatch(/^capstan: the database .+ already holds Capstan data \(1 workspaces\); move into an empty one$/)
    rmSync(dataDir, { recursive: true, force: true })
  })

  test('texts an earlier Capstan took with a NUL character (PostgreSQL cannot hold one) move with U+FFFD in its place, counted and said', async () => {
    const sqlite = await TestServer.start({})
    const dataDir = sqlite.dataDir
    let key: string
    const phone = newPhone('+1444')
    try {
      const t = await sqlite.tenant()
      key = t.key
      expect((await sqlite.api(key, 'POST', '/contacts', { json: { phone, name: 'Ada' } })).status).toBe(201)
    } finally {
      await sqlite.stop()
    }
    // what the API took before it refused the character
    const db = new Database(join(dataDir, 'capstan.db'))
    db.run("UPDATE contacts SET name = 'A' || char(0) || 'da' WHERE phone = ?", [phone])
    db.close()
    const url = await pg.createDatabase('with_nul')
    const moved = await move(dataDir, url)
    expect([moved.code, moved.err]).toEqual([0, ''])
    expect(moved.out).toContain("every table's rows counted on both sides (1 texts held the NUL character, which PostgreSQL cannot store: each was copied with U+FFFD in its place)")
    const pgServer = await TestServer.start({ dataDir, env: { CAPSTAN_DATABASE_URL: url, ...s3.env('s3://moved-media/m') } })
    try {
      expect((await pgServer.api(key, 'GET', '/contacts')).json.data.map((c: any) => [c.phone, c.name])).toEqual([[phone, 'A\uFFFDda']])
    } finally {
      await pgServer.stop()
    }
    rmSync(dataDir, { recursive: true, force: true })
  })

  test('into a database not encoded in UTF8: one line, exit 2, nothing made in it', async () => {
    const sqlite = await TestServer.start({})
    await sqlite.stop()
    const admin = new Bun.SQL(pg.url, { max: 1 })
    await admin.unsafe("CREATE DATABASE latin ENCODING 'LATIN1' TEMPLATE template0")
    await admin.close()
    const u = new URL(pg.url)
    u.pathname = '/latin'
    const moved = await move(sqlite.dataDir, u.toString())
    expect(moved.code).toBe(2)
    expect(moved.err).toMatch(/^capstan: the database .+\/latin is encoded LATIN1, not UTF8: .+ \(nothing was changed in this one\)$/)
    const db = new Bun.SQL(u.toString(), { max: 1 })
    const [t] = await db.unsafe("SELECT COUNT(*)::int AS n FROM information_schema.tables WHERE table_schema = 'public'")
    await db.close()
    expect(t.n).toBe(0)
    rmSync(sqlite.dataDir, { recursive: true, force: true })
  })
})
