/**
 * Backups of a data directory with media: the first beside nothing (every file copied), the next
 * beside it (media it already has hard-linked) — time and the disk each takes — and the server's
 * event loop while an automatic backup runs as a child process.
 * Run: bun bench/backup.ts [media files = 200] [MiB each = 1]
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { systemClock } from '../src/clock'
import { loadConfig } from '../src/config'
import { migrate, openDatabase } from '../src/db/open'
import { Logger } from '../src/http/log'
import { AutoBackups } from '../src/modules/backups/service'
import { ROOT, timedHold } from './support'

const FILES = Number(process.argv[2] ?? 200)
const MIB = Number(process.argv[3] ?? 1)

const root = mkdtempSync(join(tmpdir(), 'capstan-backup-bench-'))
const data = join(root, 'data')
const db = openDatabase(join((mkdirSync(data, { recursive: true }), data), 'capstan.db'))
migrate(db)
db.run("INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES ('w', 'Bench', 'bench', 'active', '{}', 0, 0)")
const insert = db.query("INSERT INTO media (id, workspace_id, sha256, filename, mime_type, size, created_at, expires_at) VALUES (?, 'w', ?, 'f.pdf', 'application/pdf', ?, 0, ?)")
const far = Date.now() + 365 * 86_400_000
for (let i = 0; i < FILES; i++) {
  const bytes = new Uint8Array(MIB * 1024 * 1024).fill(i % 251)
  bytes[0] = i & 255
  bytes[1] = i >> 8
  const sha = new Bun.CryptoHasher('sha256').update(bytes).digest('hex')
  mkdirSync(join(data, 'media', sha.slice(0, 2)), { recursive: true })
  writeFileSync(join(data, 'media', sha.slice(0, 2), sha), bytes)
  insert.run(crypto.randomUUID(), sha, bytes.length, far)
}
db.close()

const du = (path: string) => Number(Bun.spawnSync(['du', '-sk', path]).stdout.toString().split('\t')[0]) / 1024
const backups = join(root, 'backups')
const config = loadConfig({ CAPSTAN_DATA_DIR: data, CAPSTAN_BACKUP_DIR: backups, CAPSTAN_BACKUP_KEEP: '10' })
const auto = new AutoBackups(config, new Logger('silent'), systemClock, ['bun', join(ROOT, 'src/main.ts')])
console.log(`\nBackups of ${FILES} media files of ${MIB} MiB (${((FILES * MIB) / 1024).toFixed(2)} GiB); ${navigator.hardwareConcurrency} cores, Bun ${Bun.version}\n`)
console.log('| backup | took | longest event-loop hold meanwhile | disk it adds |\n|---|---|---|---|')
let before = 0
for (const which of ['first (nothing beside it: all copied)', 'second (beside the first: media linked)', 'third']) {
  const { result, ms, heldMs } = await timedHold(() => auto.run())
  const total = du(backups)
  console.log(`| ${which}: ${result.name} | ${ms.toFixed(0)} ms | ${heldMs.toFixed(0)} ms | ${(total - before).toFixed(1)} MiB |`)
  before = total
  await Bun.sleep(1100) // one name per second
}
rmSync(root, { recursive: true, force: true })
