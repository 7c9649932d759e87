/** Automatic backups (CAPSTAN_BACKUP_DIR): on a schedule and on request, kept to a number, restorable; a failure is reported. */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { loadConfig } from '../src/config'
import { Logger } from '../src/http/log'
import { AutoBackups } from '../src/modules/backups/service'
import { inProcess, ManualClock } from './support/inproc'
import { TestServer, hostEnv, newPhone } from './support/server'
import { mountTmpfs, unmount } from './support/tmpfs'

setDefaultTimeout(60_000)

const ROOT = join(import.meta.dir, '..')
const METRICS = 'metrics-token-0123456789abcdef'

let dir: string
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'capstan-auto-backup-'))
})
afterAll(() => rmSync(dir, { recursive: true, force: true }))

describe('over the admin API', () => {
  test('a backup now, kept to CAPSTAN_BACKUP_KEEP, listed, and restored into a working server', async () => {
    const backups = join(dir, 'kept')
    const srv = await TestServer.start({ env: { CAPSTAN_BACKUP_DIR: backups, CAPSTAN_BACKUP_KEEP: '2', CAPSTAN_BACKUP_HOURS: '6' } })
    let restored: TestServer | null = null
    try {
      const before = (await srv.admin('GET', '/backups')).json.data
      expect(before).toMatchObject({ directory: backups, every_hours: 6, keep: 2, last_success_at: null, last_failure: null, backups: [] })
      // none yet, but the server has just started: not overdue (the first comes a minute after the start)
      expect((await srv.request('GET', '/readyz')).json.backup).toEqual({ state: 'ok', last_success_at: null })
      const { key } = await srv.tenant()
      const phone = newPhone()
      await srv.api(key, 'POST', '/contacts', { json: { phone, name: 'Kept', consent_status: 'opted_in' } })
      const made: string[] = []
      for (let i = 0; i < 3; i++) {
        const r = await srv.admin('POST', '/backups')
        expect([r.status, r.json.data.complete, r.json.data.media_files]).toEqual([201, true, 0])
        made.push(r.json.data.name)
        await Bun.sleep(1000) // one name per second
      }
      expect(made.every((n) => /^capstan-\d{8}T\d{6}Z$/.test(n))).toBe(true)
      const after = (await srv.admin('GET', '/backups')).json.data
      // the newest two; the first was removed
      expect(after.backups.map((b: any) => b.name)).toEqual([made[2], made[1]])
      expect(readdirSync(backups).sort()).toEqual([made[1], made[2]])
      expect(after.last_success_at).toBe(after.backups[0].created_at)
      expect((await srv.request('GET', '/readyz')).json.backup).toEqual({ state: 'ok', last_success_at: after.last_success_at })
      // what `capstan restore` makes of it is a working server with the data
      const into = join(dir, 'restored')
      const r = Bun.spawnSync(['bun', 'src/main.ts', 'restore', join(backups, made[2]!)], { cwd: ROOT, env: { ...hostEnv(), CAPSTAN_DATA_DIR: into } })
      expect([r.exitCode, r.stderr.toString()]).toEqual([0, ''])
      restored = await TestServer.start({ dataDir: into })
      const found = (await restored.api(key, 'GET', `/contacts?phone=${encodeURIComponent(phone)}`)).json.data
      expect(found.map((c: any) => [c.name, c.consent_status])).toEqual([['Kept', 'opted_in']])
      // the CLI lists them
      const p = Bun.spawnSync(['bun', 'src/main.ts', 'backups', 'list'], { cwd: ROOT, env: { ...hostEnv(), CAPSTAN_URL: srv.base, CAPSTAN_ADMIN_TOKEN: 'test-admin-token-0123456789abcdef' } })
      const out = p.stdout.toString()
      expect(out.split('\n')[0]).toBe(`every 6 h into ${backups}, newest 2 kept; state ok; last success ${after.last_success_at}`)
      expect(out).toContain(`  ${made[2]}  ${after.backups[0].created_at}  `)
    } finally {
      await restored?.close()
      await srv.close()
    }
  })

  test('a backup that cannot be written (its disk full) is a 500 naming why, reported by /readyz, /metrics and GET /backups; nothing half-written is left', async () => {
    const small = join(dir, 'small')
    mountTmpfs(small, '64k')
    const srv = await TestServer.start({ env: { CAPSTAN_BACKUP_DIR: small, CAPSTAN_METRICS_TOKEN: METRICS } })
    try {
      const { key } = await srv.tenant()
      // more than 64 KiB of data
      for (let i = 0; i < 40; i++) await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'x'.repeat(200), metadata: { note: 'y'.repeat(900) } } })
      const r = await srv.admin('POST', '/backups')
      expect([r.status, r.json.code]).toEqual([500, 'backup_failed'])
      expect(r.json.message).toContain('The backup could not be written: the backup could not be written and nothing of it was kept')
      expect(readdirSync(small)).toEqual([])
      const listed = (await srv.admin('GET', '/backups')).json.data
      expect([listed.state, listed.last_failure.error]).toEqual(['failed', expect.stringContaining('nothing of it was kept')])
      expect((await srv.request('GET', '/readyz')).json.backup).toEqual({ state: 'failed', last_success_at: null })
      const metrics = (await srv.request('GET', '/metrics', { bearer: METRICS })).text
      expect(metrics).toContain('capstan_backup_failing 1')
      expect(metrics).toContain('capstan_backup_last_success_timestamp_seconds 0')
      expect(srv.output).toContain('"msg":"automatic backup failed"')
    } finally {
      await srv.close()
      unmount(small)
    }
  })

  test('without CAPSTAN_BACKUP_DIR: off, and asking for one says how to turn them on', async () => {
    const srv = await TestServer.start()
    try {
      expect((await srv.admin('GET', '/backups')).json.data).toMatchObject({ directory: null, state: 'off', backups: [] })
      const r = await srv.admin('POST', '/backups')
      expect([r.status, r.json]).toEqual([422, { message: 'Set CAPSTAN_BACKUP_DIR to the directory backups go to, then restart the server.', code: 'backups_not_configured' }])
      expect((await srv.request('GET', '/readyz')).json.backup).toBeUndefined()
      expect((await srv.request('POST', '/admin/api/backups')).status).toBe(401)
    } finally {
      await srv.close()
    }
  })
})

describe('on the schedule (controlled clock)', () => {
  test('due when none is there or the newest is an interval old; a failure waits an hour; an interrupted one is removed, other files never', async () => {
    const env = await inProcess()
    const backups = join(dir, 'scheduled')
    try {
      const clock = new ManualClock(Date.now())
      const config = { ...loadConfig({ CAPSTAN_DATA_DIR: env.dir, CAPSTAN_BACKUP_DIR: backups, CAPSTAN_BACKUP_HOURS: '24', CAPSTAN_BACKUP_KEEP: '1' }) }
      const auto = new AutoBackups(config, new Logger('silent'), clock, ['bun', join(ROOT, 'src/main.ts')])
      await env.svc.workspaces.create({ name: 'Scheduled' })
      expect(auto.due()).toBe(true)
      // none yet: overdue once the server has run 15 minutes without one
      expect(auto.status().state).toBe('ok')
      clock.t += 16 * 60_000
      expect(auto.status().state).toBe('overdue')
      await auto.runIfDue()
      const first = auto.list()
      expect(first.map((b) => b.complete)).toEqual([true])
      expect(auto.due()).toBe(false)
      expect(auto.status().state).toBe('ok')
      // a day on (the manifest's time is the wall clock's): due again; two days on, overdue
      clock.t += 24 * 3_600_000 + 60_000
      expect([auto.due(), auto.status().state]).toEqual([true, 'ok'])
      clock.t += 24 * 3_600_000
      expect(auto.status().state).toBe('overdue')
      // a backup cut off by a stop, and files of the operator's own
      mkdirSync(join(backups, 'capstan-20200101T000000Z'))
      writeFileSync(join(backups, 'notes.txt'), 'mine')
      mkdirSync(join(backups, 'capstan-old-style'))
      await auto.runIfDue()
      const second = auto.list()
      expect(second.map((b) => b.complete)).toEqual([true])
      expect(second[0]!.name).not.toBe(first[0]!.name)
      expect(readdirSync(backups).sort()).toEqual(['capstan-old-style', second[0]!.name, 'notes.txt'].sort())
      // a failure (the directory replaced by a file): not due again for an hour
      clock.t += 24 * 3_600_000 + 60_000
      const blocked = new AutoBackups({ ...config, backupDir: join(backups, 'notes.txt') }, new Logger('silent'), clock, ['bun', join(ROOT, 'src/main.ts')])
      expect(blocked.due()).toBe(true)
      await blocked.runIfDue()
      expect([blocked.due(), blocked.status().state]).toEqual([false, 'failed'])
      clock.t += 60 * 60_000
      expect(blocked.due()).toBe(true)
      expect(existsSync(join(backups, 'notes.txt'))).toBe(true)
    } finally {
      await env.close()
    }
  })
})

describe('erasures outlive a restore', () => {
  test('a contact erased after a backup stays erased when that backup is restored — into a new data directory or over the old one; one who came back after the erasure stays', async () => {
    const backups = join(dir, 'erasures')
    const srv = await TestServer.start({ env: { CAPSTAN_BACKUP_DIR: backups, CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    let restored: TestServer | null = null
    try {
      const { ws, key } = await srv.tenant()
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
      const [gone, kept, back] = [newPhone(), newPhone(), newPhone()]
      for (const phone of [gone, kept, back]) await srv.api(key, 'POST', '/contacts', { json: { phone, name: `N${phone}`, consent_status: 'opted_in' } })
      const sent = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: gone, body: 'ERASE-ME-body' } })).json.data
      const before = (await srv.admin('POST', '/backups')).json.data.name
      // erased after that backup; `back` is erased and then writes again (a new contact)
      for (const phone of [gone, back]) expect((await srv.admin('POST', `/workspaces/${ws.id}/contacts/erase`, { phone })).status).toBe(200)
      await Bun.sleep(1000) // (and one backup name per second)
      await srv.api(key, 'POST', '/contacts', { json: { phone: back, name: 'Came back' } })
      const after = (await srv.admin('POST', '/backups')).json.data.name
      // recorded in the data directory and beside the backups, without the number
      for (const journal of [join(srv.dataDir, 'erasures.log'), join(backups, 'erasures.log')]) {
        const text = readFileSync(journal, 'utf8')
        expect(text.trim().split('\n')).toHaveLength(2)
        for (const phone of [gone, back]) expect(text).not.toContain(phone.slice(1))
      }
      await srv.stop()

      // the data directory lost: the backup restored into a new one
      const fresh = join(dir, 'fresh')
      const r = Bun.spawnSync(['bun', 'src/main.ts', 'restore', join(backups, before)], { cwd: ROOT, env: { ...hostEnv(), CAPSTAN_DATA_DIR: fresh } })
      expect([r.exitCode, r.stdout.toString()]).toEqual([0, expect.stringContaining('2 recorded erasures are done again when the server starts')])
      restored = await TestServer.start({ dataDir: fresh })
      const has = async (on: TestServer, phone: string) => (await on.api(key, 'GET', `/contacts?phone=${encodeURIComponent(phone)}`)).json.data.map((c: any) => c.name)
      expect(await has(restored, gone)).toEqual([])
      expect(await has(restored, kept)).toEqual([`N${kept}`])
      // in that backup `back` is the contact from before its erasure: erased too
      expect(await has(restored, back)).toEqual([])
      const m = (await restored.api(key, 'GET', `/messages/${sent.id}`)).json.data
      expect([m.recipient, m.body, m.contact_id]).toEqual([null, null, null])
      expect(existsSync(join(fresh, 'erasures.pending'))).toBe(false)
      await restored.close()
      restored = null

      // over the old data directory, with only its own record of the erasures
      rmSync(join(backups, 'erasures.log'))
      const again = Bun.spawnSync(['bun', 'src/main.ts', 'restore', '--force', join(backups, before)], { cwd: ROOT, env: { ...hostEnv(), CAPSTAN_DATA_DIR: srv.dataDir } })
      expect(again.exitCode).toBe(0)
      await srv.boot()
      expect(await has(srv, gone)).toEqual([])
      expect(await has(srv, kept)).toEqual([`N${kept}`])

      await srv.stop()
      // a backup made after `back` came back: the new contact stays (it is newer than the erasure)
      const third = join(dir, 'third')
      expect(Bun.spawnSync(['bun', 'src/main.ts', 'restore', join(backups, after)], { cwd: ROOT, env: { ...hostEnv(), CAPSTAN_DATA_DIR: third } }).stdout.toString()).toContain('2 recorded erasures')
      restored = await TestServer.start({ dataDir: third })
      expect(await has(restored, back)).toEqual(['Came back'])
      expect(await has(restored, gone)).toEqual([])
      expect(await has(restored, kept)).toEqual([`N${kept}`])
    } finally {
      await restored?.close()
      await srv.close()
    }
  })
  test('a backup put back by hand (its files copied in, not `capstan restore`) does not bring an erased contact back either; an ordinary restart walks nothing', async () => {
    const backups = join(dir, 'by-hand')
    const srv = await TestServer.start({ env: { CAPSTAN_BACKUP_DIR: backups } })
    let copied: TestServer | null = null
    try {
      const { ws, key } = await srv.tenant()
      const [gone, kept] = [newPhone(), newPhone()]
      for (const phone of [gone, kept]) await srv.api(key, 'POST', '/contacts', { json: { phone, name: `N${phone}` } })
      const before = join(backups, (await srv.admin('POST', '/backups')).json.data.name)
      expect((await srv.admin('POST', `/workspaces/${ws.id}/contacts/erase`, { phone: gone })).status).toBe(200)
      const has = async (on: TestServer, phone: string) => (await on.api(key, 'GET', `/contacts?phone=${encodeURIComponent(phone)}`)).json.data.length
      const doneAgain = '"msg":"erasures done again after a restore"'
      // restarted as it is: the database has seen every erasure recorded, nothing is walked
      await srv.stop()
      await srv.boot()
      expect(srv.output).not.toContain(doneAgain)
      await srv.stop()

      // the backup's database copied over the data directory's
      for (const f of ['capstan.db-wal', 'capstan.db-shm']) rmSync(join(srv.dataDir, f), { force: true })
      cpSync(join(before, 'capstan.db'), join(srv.dataDir, 'capstan.db'))
      srv.output = ''
      await srv.boot()
      expect(srv.output).toContain('erasures recorded beside the database are newer than any it has seen')
      expect(srv.output).toContain(doneAgain)
      expect([await has(srv, gone), await has(srv, kept)]).toEqual([0, 1])
      // and only once
      await srv.stop()
      srv.output = ''
      await srv.boot()
      expect(srv.output).not.toContain(doneAgain)
      await srv.stop()

      // the data directory lost, the whole backup copied into a new one: the record beside the backups is read
      const fresh = join(dir, 'by-hand-fresh')
      cpSync(before, fresh, { recursive: true })
      copied = await TestServer.start({ dataDir: fresh, env: { CAPSTAN_BACKUP_DIR: backups } })
      expect(copied.output).toContain(doneAgain)
      expect([await has(copied, gone), await has(copied, kept)]).toEqual([0, 1])
    } finally {
      await copied?.close()
      await srv.close()
    }
  })
})
