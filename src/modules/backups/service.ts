/**
 * Automatic backups: with CAPSTAN_BACKUP_DIR set, the server writes a backup there every
 * CAPSTAN_BACKUP_HOURS (checked a minute after the start and every ten minutes, against the newest
 * backup in the directory, so a restart neither skips nor repeats one) and keeps the newest
 * CAPSTAN_BACKUP_KEEP. A backup hard-links the media files of the one before (see backup.ts). An operator can also ask for one now (admin API, CLI,
 * dashboard).
 *
 * Each backup is `capstan backup <dir>/capstan-<UTC time>` run as a child process of this same
 * executable: `VACUUM INTO` and the file copies then take neither the server's event loop nor its
 * memory, and the backup is exactly what the command writes (restored with `capstan restore`).
 * A backup is complete once its manifest.json is written (last); only directories named as this
 * writes them are ever removed here.
 */
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Clock } from '../../clock'
import type { Config } from '../../config'
import type { Logger } from '../../http/log'

const NAME = /^capstan-\d{8}T\d{6}Z(-\d+)?$/
/** After a failed backup the next automatic one waits this long (a full disk stays full for a while). */
const RETRY_AFTER_MS = 60 * 60_000
/** A server with no backup yet is overdue only after this long (the first is made a minute after start). */
const FIRST_GRACE_MS = 15 * 60_000

export interface BackupEntry {
  name: string
  /** When the backup's database copy was made (its manifest's time), or null while it is being written. */
  created_at: string | null
  complete: boolean
  messages: number | null
  media_files: number | null
}

export interface BackupStatus {
  /**
   * off: no CAPSTAN_BACKUP_DIR; failed: the last try failed; overdue: none complete within twice
   * the interval (or, with none at all, within 15 minutes of the start).
   */
  state: 'off' | 'ok' | 'failed' | 'overdue'
  last_success_at: string | null
  last_failure: { at: string; error: string } | null
  running: boolean
}

/** `20261122T120000Z` for a time. */
const stamp = (ms: number) => new Date(ms).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}Z$/, 'Z')

export class AutoBackups {
  private running: Promise<BackupEntry> | null = null
  private lastFailure: { at: number; error: string } | null = null
  private readonly startedAt: number

  /** `self`: the command line that runs this executable (`capstan`, or `bun src/main.ts`). */
  constructor(
    private readonly config: Config,
    private readonly log: Logger,
    private readonly clock: Clock,
    private readonly self: string[],
  ) {
    this.startedAt = clock.now()
  }

  get enabled() {
    return this.config.backupDir !== null
  }

  /** The backups in the directory, newest first (written by this server or by an earlier one). */
  list(): BackupEntry[] {
    const dir = this.config.backupDir
    if (dir === null) return []
    let files
    try {
      files = readdirSync(dir, { withFileTypes: true })
    } catch {
      return [] // not there yet (made with the first backup), or no directory it can read
    }
    const entries: BackupEntry[] = []
    for (const f of files) {
      if (!f.isDirectory() || !NAME.test(f.name)) continue
      let manifest: { created_at?: unknown; messages?: unknown; media_files?: unknown } | null = null
      try {
        manifest = JSON.parse(readFileSync(join(dir, f.name, 'manifest.json'), 'utf8'))
      } catch {
        // not written yet, or cut off: incomplete
      }
      entries.push({
        name: f.name,
        created_at: typeof manifest?.created_at === 'string' ? manifest.created_at : null,
        complete: manifest !== null,
        messages: typeof manifest?.messages === 'number' ? manifest.messages : null,
        media_files: typeof manifest?.media_files === 'number' ? manifest.media_files : null,
      })
    }
    return entries.sort((a, b) => b.name.localeCompare(a.name))
  }

  private lastSuccess(): number | null {
    const newest = this.list().find((b) => b.complete && b.created_at !== null)
    return newest ? Date.parse(newest.created_at!) : null
  }

  status(): BackupStatus {
    const iso = (ms: number | null) => (ms === null ? null : new Date(ms).toISOString())
    if (!this.enabled) return { state: 'off', last_success_at: null, last_failure: null, running: false }
    const success = this.lastSuccess()
    const failure = this.lastFailure
    const failed = failure !== null && (success === null || failure.at > success)
    const overdue = success === null ? this.clock.now() - this.startedAt > FIRST_GRACE_MS : this.clock.now() - success > 2 * this.config.backupEveryMs
    return {
      state: failed ? 'failed' : overdue && this.running === null ? 'overdue' : 'ok',
      last_success_at: iso(success),
      last_failure: failure && { at: new Date(failure.at).toISOString(), error: failure.error },
      running: this.running !== null,
    }
  }

  /** Whether the interval has passed since the newest complete backup (and not just after a failure). */
  due(): boolean {
    if (!this.enabled || this.running) return false
    const now = this.clock.now()
    if (this.lastFailure && now - this.lastFailure.at < RETRY_AFTER_MS) return false
    const success = this.lastSuccess()
    return success === null || now - success >= this.config.backupEveryMs
  }

  /** The scheduler's check (every ten minutes): a backup when one is due. */
  async runIfDue() {
    if (!this.due()) return
    await this.run().catch(() => {
      // logged and kept in the status by run()
    })
  }

  /** Write a backup now (one at a time: a second call while one runs gets that one). */
  run(): Promise<BackupEntry> {
    if (this.running) return this.running
    this.running = this.write().finally(() => {
      this.running = null
    })
    return this.running
  }

  private async write(): Promise<BackupEntry> {
    const dir = this.config.backupDir!
    let name = `capstan-${stamp(this.clock.now())}`
    for (let n = 1; existsSync(join(dir, name)); n++) name = `capstan-${stamp(this.clock.now())}-${n}`
    const child = Bun.spawn([...this.self, 'backup', join(dir, name)], { env: { ...process.env, CAPSTAN_DATA_DIR: this.config.dataDir }, stdin: 'ignore', stdout: 'pipe', stderr: 'pipe' })
    const [code, , err] = await Promise.all([child.exited, new Response(child.stdout).text(), new Response(child.stderr).text()])
    const entry = this.list().find((b) => b.name === name)
    if (code !== 0 || !entry?.complete) {
      // the command's own line (it says why: a full disk, a directory it cannot write)
      const error = (err.trim().split('\n').at(-1) ?? '').replace(/^capstan: /, '').slice(0, 500) || `the backup command exited with ${code}`
      this.lastFailure = { at: this.clock.now(), error }
      this.log.error('automatic backup failed', { backup: name, error })
      throw new Error(error)
    }
    this.lastFailure = null
    const removed = this.prune(name)
    this.log.info('backup written', { backup: name, messages: entry.messages, media_files: entry.media_files, removed })
    return entry
  }

  /**
   * Keep the newest CAPSTAN_BACKUP_KEEP complete backups; remove the older ones, and any left
   * incomplete (a server stopped mid-backup). Returns the names removed.
   */
  private prune(current: string): string[] {
    const dir = this.config.backupDir!
    const all = this.list()
    const complete = all.filter((b) => b.complete)
    const gone = [...complete.slice(this.config.backupKeep), ...all.filter((b) => !b.complete && b.name !== current)].map((b) => b.name)
    for (const name of gone) rmSync(join(dir, name), { recursive: true, force: true })
    return gone
  }
}

/** The command line that runs this executable: the compiled `capstan` itself, or Bun with the entry script. */
export function selfCommand(): string[] {
  return Bun.main.startsWith('/$bunfs/') || Bun.main.startsWith('B:\\~BUN') ? [process.execPath] : [process.execPath, Bun.main]
}
