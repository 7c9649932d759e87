/**
 * Erasures outlive a restore. Each erasure is recorded in `erasures.log` — one JSON line naming the
 * workspace and a keyed digest of the number, never the number — in the data directory and, with
 * automatic backups, in CAPSTAN_BACKUP_DIR, so the record is there even when the data directory
 * is lost. `capstan restore` gathers the records it finds (the data directory's, the backup's own,
 * and those beside the backup), keeps them in the restored data directory and marks them pending;
 * the next start erases again every contact of the restored database that a record names (made
 * before that erasure: one made later is a new contact), before the server answers a request. A backup made before an erasure then never brings the person back.
 * A database put back by hand is caught as well: it remembers the time of the newest erasure it
 * has seen (system_settings `erasures_applied_through`), and a start that finds a newer record
 * here or beside the backups does the same as after a restore (ContactEraser.reapply).
 */
import { appendFileSync, closeSync, existsSync, fsyncSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import type { S3Client } from 'bun'
import { answerWithin, BUCKET_ANSWER_MS } from '../media/store'

export const JOURNAL = 'erasures.log'
/** Written by a restore: the journal's records are to be applied at the next start. */
export const PENDING = 'erasures.pending'
/** What the digest is for (see SecretBox.digest). */
export const PURPOSE = 'erased-number'

export interface ErasureRecord {
  workspace_id: string
  /** SecretBox.digest(PURPOSE, phone). */
  number_digest: string
  erased_at: string
}

/** The directories an erasure is recorded in: the data directory and, with automatic backups, the backup directory. */
export function journalDirs(config: { dataDir: string; backupDir: string | null }): string[] {
  return config.backupDir === null ? [config.dataDir] : [config.dataDir, config.backupDir]
}

/** Append a record to the journal in `dir` (made if missing), durably. */
export function appendRecord(dir: string, record: ErasureRecord) {
  mkdirSync(dir, { recursive: true, mode: 0o700 })
  const path = join(dir, JOURNAL)
  appendFileSync(path, `${JSON.stringify(record)}\n`, { mode: 0o600 })
  const fd = openSync(path, 'r')
  try {
    fsyncSync(fd)
  } finally {
    closeSync(fd)
  }
}

/** The records of the journals at `paths` that exist, and `more`, each once (a torn last line is skipped). */
export function readRecords(paths: string[], more: ErasureRecord[] = []): ErasureRecord[] {
  const seen = new Map<string, ErasureRecord>()
  const keep = (r: ErasureRecord) => seen.set(`${r.workspace_id} ${r.number_digest} ${r.erased_at}`, r)
  for (const path of paths) {
    if (!existsSync(path)) continue
    for (const line of readFileSync(path, 'utf8').split('\n')) {
      try {
        const r = JSON.parse(line) as ErasureRecord
        if (typeof r.workspace_id === 'string' && typeof r.number_digest === 'string' && typeof r.erased_at === 'string') keep(r)
      } catch {
        // empty, or cut off by a crash while it was written
      }
    }
  }
  for (const r of more) keep(r)
  return [...seen.values()]
}

/** After a restore: the journals (and `more`, the bucket's) gathered into the data directory's, and marked to be applied. */
export function carryOver(dataDir: string, sources: string[], more: ErasureRecord[] = []) {
  const records = readRecords([join(dataDir, JOURNAL), ...sources], more)
  if (records.length === 0) return 0
  writeFileSync(join(dataDir, JOURNAL), records.map((r) => `${JSON.stringify(r)}\n`).join(''), { mode: 0o600 })
  writeFileSync(join(dataDir, PENDING), '', { mode: 0o600 })
  return records.length
}

/** Whether a restore left records to apply; `done()` clears the mark. */
export const pending = (dataDir: string) => existsSync(join(dataDir, PENDING))
export const done = (dataDir: string) => rmSync(join(dataDir, PENDING), { force: true })

/**
 * The records kept in the media bucket as well (CAPSTAN_MEDIA_STORE=s3://…): one empty object per
 * erasure under `<prefix>erasures/`, its key the record itself (`<workspace>_<digest>_<time>`, so
 * a listing reads them all without opening one). Instances that share a database share the
 * bucket, and a database put back with PostgreSQL's own tools (a dump, a point in time) leaves
 * the bucket as it is: whichever instance made an erasure, and whether or not its data directory
 * survived, every instance's next start finds it. A listing gives 1,000 keys at most: the
 * records are read page after page.
 */
export class BucketJournal {
  constructor(
    private readonly client: S3Client,
    private readonly prefix: string,
  ) {}

  private get root() {
    return `${this.prefix}erasures/`
  }

  async add(r: ErasureRecord) {
    await answerWithin(BUCKET_ANSWER_MS, this.client.write(`${this.root}${r.workspace_id}_${r.number_digest}_${r.erased_at}`, ''))
  }

  async all(): Promise<ErasureRecord[]> {
    const out: ErasureRecord[] = []
    let token: string | undefined
    do {
      const page = await answerWithin(BUCKET_ANSWER_MS, this.client.list({ prefix: this.root, maxKeys: 1000, ...(token ? { continuationToken: token } : {}) }))
      for (const o of page.contents ?? []) {
        const [workspace_id, number_digest, erased_at, extra] = o.key.slice(this.root.length).split('_')
        if (workspace_id && number_digest && erased_at && extra === undefined && !Number.isNaN(Date.parse(erased_at))) out.push({ workspace_id, number_digest, erased_at })
      }
      token = page.isTruncated ? page.nextContinuationToken : undefined
    } while (token)
    return out
  }
}
