/** `capstan backup` while the server runs under load, then `capstan restore` and a fresh start. */
import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { Database } from 'bun:sqlite'
import { chmodSync, copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { TestClamd } from './support/clamd'
import * as files from './support/files'
import { TestServer, hostEnv, newPhone } from './support/server'
import { growTmpfs, mountTmpfs, unmount } from './support/tmpfs'
import { blobOf } from '../src/modules/media/service'

setDefaultTimeout(60_000)

const ROOT = join(import.meta.dir, '..')

function capstan(args: string[], env: Record<string, string>) {
  const base = hostEnv()
  const p = Bun.spawnSync(['bun', 'src/main.ts', ...args], { cwd: ROOT, env: { ...base, ...env } })
  return { code: p.exitCode, out: p.stdout.toString(), err: p.stderr.toString() }
}

/** Files and directories under `dir` that anyone but their owner may read, write or enter. */
function notPrivate(dir: string): string[] {
  const loose: string[] = []
  for (const f of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, f.name)
    if ((statSync(path).mode & 0o077) !== 0) loose.push(`${path} ${(statSync(path).mode & 0o777).toString(8)}`)
    if (f.isDirectory()) loose.push(...notPrivate(path))
  }
  return loose
}

describe('backup and restore', () => {
  test('with the key file outside the data directory (CAPSTAN_SECRET_KEY_FILE) a backup holds no key, and a restore starts with the same key; a key left inside is refused with how to move it', async () => {
    const root = mkdtempSync(join(tmpdir(), 'capstan-keyfile-'))
    const keyFile = join(root, 'keys', 'secret.key')
    const env = { CAPSTAN_SECRET_KEY_FILE: keyFile }
    const srv = await TestServer.start({ dataDir: join(root, 'data'), env })
    let restored: TestServer | null = null
    try {
      const ws = await srv.workspace()
      // a Cloud API number: its sealed secrets are opened at every start
      const conn = await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone(), driver: 'cloud_api', config: { phone_number_id: '1234567', access_token: 'EAAG-key-file-token', app_secret: 'key-file-app-secret', verify_token: 'key-file-verify', graph_base_url: 'http://127.0.0.1:9' } })
      expect(conn.status).toBe(201)
      await srv.stop()
      expect(existsSync(join(root, 'data', 'secret.key'))).toBe(false)
      expect(statSync(keyFile).mode & 0o777).toBe(0o600)
      expect(capstan(['backup', join(root, 'b')], { CAPSTAN_DATA_DIR: join(root, 'data'), ...env }).code).toBe(0)
      expect(existsSync(join(root, 'b', 'secret.key'))).toBe(false)
      expect(capstan(['restore', join(root, 'b')], { CAPSTAN_DATA_DIR: join(root, 'restored'), ...env }).code).toBe(0)
      restored = await TestServer.start({ dataDir: join(root, 'restored'), env })
      expect((await restored.admin('GET', `/connections/${conn.json.data.id}`)).json.data.config).toMatchObject({ access_token: '(set)', phone_number_id: '1234567' })
      await restored.stop()
      // a data directory that still holds its key: the start names the move to make, and works after it
      const older = join(root, 'older')
      const first = await TestServer.start({ dataDir: older })
      await first.stop()
      const moved = join(root, 'keys', 'older.key')
      const r = capstan(['serve'], { CAPSTAN_DATA_DIR: older, CAPSTAN_PORT: '0', CAPSTAN_SECRET_KEY_FILE: moved })
      expect([r.code, r.err.trim()]).toEqual([2, `capstan: the secret key cannot be used: CAPSTAN_SECRET_KEY_FILE names ${moved}, which does not exist, while the data directory holds its key in ${join(older, 'secret.key')}: move that file there (mv ${join(older, 'secret.key')} ${moved})`])
      copyFileSync(join(older, 'secret.key'), moved)
      const both = capstan(['serve'], { CAPSTAN_DATA_DIR: older, CAPSTAN_PORT: '0', CAPSTAN_SECRET_KEY_FILE: moved })
      expect([both.code, both.err]).toEqual([2, expect.stringContaining('is still in the data directory, so backups carry it')])
      rmSync(join(older, 'secret.key'))
      const after = await TestServer.start({ dataDir: older, env: { CAPSTAN_SECRET_KEY_FILE: moved } })
      await after.close()
    } finally {
      await restored?.close()
      await srv.close()
      rmSync(root, { recursive: true, force: true })
    }
  })

  test('an online backup restores into a working server with every message, media file and secret', async () => {
    const umask = process.umask(0o022) // what Capstan's processes inherit, as from a login shell
    const clamd = await TestClamd.start()
    const srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000', CAPSTAN_CLAMD: `unix:${clamd.socket}` } })
    const backupDir = join(mkdtempSync(join(tmpdir(), 'capstan-backup-')), 'b1')
    const restoredDir = mkdtempSync(join(tmpdir(), 'capstan-restored-'))
    let restored: TestServer | null = null
    try {
      const t = await srv.tenant()
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
      const hook = (await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: 'http://127.0.0.1:9/h' })).json.data
      const pngBytes = files.png()
      const fd = new FormData()
      fd.set('file', new File([pngBytes], 'logo.png'))
      const media = (await srv.api(t.key, 'POST', '/media', { multipart: fd })).json.data
      const before: string[] = []
      for (let i = 0; i < 30; i++) before.push((await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: `m${i}`, ...(i === 0 ? { media: { attachments: [{ media_id: media.id }] } } : {}) } })).json.data.id)
      // keep writing while the backup runs
      let writing = true
      const load = (async () => {
        while (writing) await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'during backup' } })
      })()
      const b = capstan(['backup', backupDir], { CAPSTAN_DATA_DIR: srv.dataDir })
      writing = false
      await load
      expect(b.code).toBe(0)
      expect(b.out).toContain('backup written')
      expect(capstan(['backup', backupDir], { CAPSTAN_DATA_DIR: srv.dataDir }).code).toBe(2) // never overwrites
      expect(notPrivate(backupDir)).toEqual([])
      for (const f of readdirSync(backupDir, { recursive: true }) as string[]) chmodSync(join(backupDir, f), statSync(join(backupDir, f)).isDirectory() ? 0o755 : 0o644)

      const r = capstan(['restore', backupDir], { CAPSTAN_DATA_DIR: restoredDir })
      expect(r.code).toBe(0)
      expect(capstan(['restore', backupDir], { CAPSTAN_DATA_DIR: restoredDir }).err).toContain('already holds a database')
      restored = await TestServer.start({ dataDir: restoredDir, env: { CAPSTAN_KEY_RATE_LIMIT: '100000', CAPSTAN_CLAMD: `unix:${clamd.socket}` } })
      for (const id of before) expect((await restored.api(t.key, 'GET', `/messages/${id}`)).status).toBe(200)
      const dl = await fetch(`${restored.base}/api/v1/media/${media.id}/download`, { headers: { authorization: `Bearer ${t.key}` } })
      expect(Buffer.from(await dl.arrayBuffer()).equals(Buffer.from(pngBytes))).toBe(true)
      expect((await restored.admin('GET', `/webhooks/${hook.id}`)).json.data.secret).toBe(hook.secret)
      expect((await restored.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'after restore' } })).status).toBe(202)
      // customers' data and the key file stay private to the service's user under a umask of 022,
      // restored from a backup whose files had been made readable too
      expect(notPrivate(srv.dataDir)).toEqual([])
      expect(notPrivate(restoredDir)).toEqual([])
    } finally {
      await restored?.close()
      await srv.close()
      await clamd.stop()
      rmSync(join(backupDir, '..'), { recursive: true, force: true })
      rmSync(restoredDir, { recursive: true, force: true })
      process.umask(umask)
    }
  }, 60_000)

  test('a backup beside an earlier one shares its media files (hard links): no second copy, and removing the earlier leaves it whole', async () => {
    const clamd = await TestClamd.start()
    const srv = await TestServer.start({ env: { CAPSTAN_CLAMD: `unix:${clamd.socket}` } })
    const root = mkdtempSync(join(tmpdir(), 'capstan-backup-links-'))
    const restoredDir = join(root, 'restored')
    let restored: TestServer | null = null
    try {
      const t = await srv.tenant()
      const upload = async (bytes: Uint8Array, name: string) => {
        const fd = new FormData()
        fd.set('file', new File([bytes], name))
        return (await srv.api(t.key, 'POST', '/media', { multipart: fd })).json.data
      }
      const png = files.png()
      const first = await upload(png, 'logo.png')
      const b1 = capstan(['backup', join(root, 'day1')], { CAPSTAN_DATA_DIR: srv.dataDir })
      expect([b1.code, b1.out]).toEqual([0, expect.not.stringContaining('shared')])
      const pdf = files.pdf()
      const second = await upload(pdf, 'receipt.pdf')
      const b2 = capstan(['backup', join(root, 'day2')], { CAPSTAN_DATA_DIR: srv.dataDir })
      expect([b2.code, b2.out]).toEqual([0, expect.stringContaining('2 media files (1 shared with the backup beside it)')])
      const path = (day: string, m: { sha256: string }) => {
        const name = blobOf(t.ws.id, m.sha256)
        return join(root, day, 'media', name.slice(0, 2), name)
      }
      expect(statSync(path('day2', first)).ino).toBe(statSync(path('day1', first)).ino)
      expect(statSync(path('day2', first)).nlink).toBe(2)
      expect(statSync(path('day2', second)).nlink).toBe(1)
      expect(JSON.parse(readFileSync(join(root, 'day2', 'manifest.json'), 'utf8'))).toMatchObject({ media_files: 2, media_linked: 1 })
      expect(notPrivate(join(root, 'day2'))).toEqual([])
      // the earlier backup removed (as pruning does): the later one restores with both files
      rmSync(join(root, 'day1'), { recursive: true })
      expect(capstan(['restore', join(root, 'day2')], { CAPSTAN_DATA_DIR: restoredDir }).code).toBe(0)
      restored = await TestServer.start({ dataDir: restoredDir, env: { CAPSTAN_CLAMD: `unix:${clamd.socket}` } })
      for (const [m, bytes] of [[first, png], [second, pdf]] as const) {
        const dl = await fetch(`${restored.base}/api/v1/media/${m.id}/download`, { headers: { authorization: `Bearer ${t.key}` } })
        expect(Buffer.from(await dl.arrayBuffer()).equals(Buffer.from(bytes))).toBe(true)
      }
    } finally {
      await restored?.close()
      await srv.close()
      await clamd.stop()
      rmSync(root, { recursive: true, force: true })
    }
  })

  test('a forced restore of a damaged or incomplete backup, or of one a newer Capstan made, leaves the data directory as it was', () => {
    const root = mkdtempSync(join(tmpdir(), 'capstan-restore-check-'))
    try {
      const live = join(root, 'live')
      expect(capstan(['migrate'], { CAPSTAN_DATA_DIR: live }).code).toBe(0)
      const good = join(root, 'good')
      expect(capstan(['backup', good], { CAPSTAN_DATA_DIR: live }).code).toBe(0)
      const liveBytes = () => readFileSync(join(live, 'capstan.db'))
      const before = liveBytes()

      // made by a newer Capstan: one more migration recorded
      const newer = join(root, 'newer')
      mkdirSync(newer)
      copyFileSync(join(good, 'capstan.db'), join(newer, 'capstan.db'))
      const db = new Database(join(newer, 'capstan.db'))
      db.run("INSERT INTO migrations (version, name, applied_at) VALUES (9999, '9999_from_the_future.sql', 0)")
      db.close()
      // damaged: the database file is not a database any more
      const damaged = join(root, 'damaged')
      mkdirSync(damaged)
      writeFileSync(join(damaged, 'capstan.db'), Buffer.alloc(8192, 7))

      // cut off before its manifest (written last) was: its media may not all be there
      const cut = join(root, 'cut')
      expect(capstan(['backup', cut], { CAPSTAN_DATA_DIR: live }).code).toBe(0)
      rmSync(join(cut, 'manifest.json'))

      for (const [dir, reason] of [
        [newer, 'the backup was made by a newer Capstan (database schema version 9999'],
        [damaged, "the backup's database cannot be read: file is not a database"],
        [cut, `the backup at ${cut} is incomplete (no manifest.json: it was interrupted); make a new one`],
      ] as const) {
        const r = capstan(['restore', dir, '--force'], { CAPSTAN_DATA_DIR: live })
        expect(r.code).toBe(2)
        expect(r.err.trim().split('\n')).toEqual([expect.stringContaining(`capstan: ${reason}`)])
        expect(liveBytes().equals(before)).toBe(true)
      }
      // the good backup still restores over it
      expect(capstan(['restore', good, '--force'], { CAPSTAN_DATA_DIR: live }).code).toBe(0)
    } finally {
      rmSync(root, { recursive: true, force: true })
    }
  })

  test('a forced restore leaves only the media files the restored database refers to', () => {
    const root = mkdtempSync(join(tmpdir(), 'capstan-restore-media-'))
    try {
      const live = join(root, 'live')
      expect(capstan(['migrate'], { CAPSTAN_DATA_DIR: live }).code).toBe(0)
      const put = (sha: string, bytes: string) => {
        mkdirSync(join(live, 'media', sha.slice(0, 2)), { recursive: true })
        writeFileSync(join(live, 'media', sha.slice(0, 2), sha), bytes)
        const db = new Database(join(live, 'capstan.db'))
        db.run("INSERT OR IGNORE INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES ('w1', 'W', 'w', 'active', '{}', 0, 0)")
        db.query("INSERT INTO media (id, workspace_id, sha256, blob, filename, mime_type, size, created_at, expires_at) VALUES (?, 'w1', ?, ?, 'f.txt', 'text/plain', ?, 0, 9e12)").run(crypto.randomUUID(), sha, sha, bytes.length)
        db.close()
      }
      const kept = 'aa'.repeat(32)
      const later = 'bb'.repeat(32)
      put(kept, 'in the backup')
      const backupDir = join(root, 'b')
      expect(capstan(['backup', backupDir], { CAPSTAN_DATA_DIR: live }).code).toBe(0)
      put(later, 'uploaded after the backup')
      expect(capstan(['restore', backupDir, '--force'], { CAPSTAN_DATA_DIR: live }).code).toBe(0)
      expect(readFileSync(join(live, 'media', 'aa', kept), 'utf8')).toBe('in the backup')
      expect(existsSync(join(live, 'media', 'bb', later))).toBe(false)
    } finally {
      rmSync(root, { recursive: true, force: true })
    }
  })

  test('a backup that cannot be finished (its disk fills up) leaves nothing of itself, and the next try works', () => {
    const root = mkdtempSync(join(tmpdir(), 'capstan-backup-full-'))
    const small = join(root, 'small')
    mountTmpfs(small, '100k') // for the backups
    try {
      const live = join(root, 'live')
      expect(capstan(['migrate'], { CAPSTAN_DATA_DIR: live }).code).toBe(0)
      const target = join(small, 'b1')
      const r = capstan(['backup', target], { CAPSTAN_DATA_DIR: live })
      expect(r.code).toBe(2)
      expect(r.err).toContain('capstan: the backup could not be written and nothing of it was kept: database or disk is full')
      expect(existsSync(target)).toBe(false)
      // into a directory that was there: only what the backup added goes
      mkdirSync(join(small, 'b2'))
      writeFileSync(join(small, 'b2', 'notes.txt'), 'mine')
      expect(capstan(['backup', join(small, 'b2')], { CAPSTAN_DATA_DIR: live }).code).toBe(2)
      expect(readdirSync(join(small, 'b2'))).toEqual(['notes.txt'])
      // with room, the same command succeeds (no "already holds a backup")
      expect(growTmpfs(small, '16m')).toBe(true)
      expect(capstan(['backup', target], { CAPSTAN_DATA_DIR: live }).code).toBe(0)
      expect(existsSync(join(target, 'manifest.json'))).toBe(true)
    } finally {
      unmount(small)
      rmSync(root, { recursive: true, force: true })
    }
  })

  test('a forced restore that cannot be finished (the data directory’s disk fills up) leaves its database as it was', async () => {
    const root = mkdtempSync(join(tmpdir(), 'capstan-restore-full-'))
    const live = join(root, 'live')
    // the live data directory on a tmpfs that holds its database but not a second copy beside it
    mountTmpfs(live, '1500k')
    try {
      expect(capstan(['migrate'], { CAPSTAN_DATA_DIR: live }).code).toBe(0)
      // a backup of another installation, somewhat larger
      const other = join(root, 'other')
      expect(capstan(['migrate'], { CAPSTAN_DATA_DIR: other }).code).toBe(0)
      const odb = new Database(join(other, 'capstan.db'))
      odb.run("INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES ('w1', ?, 'w', 'active', '{}', 0, 0)", ['x'.repeat(2_000_000)])
      odb.close()
      const backupDir = join(root, 'b')
      expect(capstan(['backup', backupDir], { CAPSTAN_DATA_DIR: other }).code).toBe(0)
      const before = readFileSync(join(live, 'capstan.db'))
      const r = capstan(['restore', backupDir, '--force'], { CAPSTAN_DATA_DIR: live })
      expect(r.code).toBe(2)
      expect(r.err).toContain('capstan: the restore could not be written; the data directory was left as it was')
      expect(readFileSync(join(live, 'capstan.db')).equals(before)).toBe(true)
      expect(readdirSync(live).filter((f) => f.endsWith('.restoring'))).toEqual([])
      // and a server still starts on it
      const srv = await TestServer.start({ dataDir: live })
      await srv.close()
    } finally {
      unmount(live)
      rmSync(root, { recursive: true, force: true })
    }
  })
})
