/**
 * Media uploads: size limit, type from the bytes, malware scan by clamd, then the store — in that
 * order, so a refused file never touches the store. `prepare` does the slow part outside any
 * transaction; the row is inserted by the write that uses it (POST /media, or the message that
 * carries the file), so a refused send leaves no row behind.
 */
import type { Queries } from '../../db/engine'
import type { Deps } from '../../deps'
import { Tally } from '../../tally'
import { type FileHolds, LocalHolds, SharedHolds } from './holds'
import { ApiError, notFound, refused, validationFailed } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import type { Logger } from '../../http/log'
import { type Scanner, ScannerUnavailable, ScanTooLarge } from '../../scanner/clamd'
import type { WorkspaceRow } from '../workspaces/store'
import type { WorkspaceService } from '../workspaces/service'
import type { PublicMedia } from './model'
import { MediaRecordStore, type MediaRow } from './records'
import { cleanFilename, sniff } from './sniff'
import type { MediaStore } from './store'
import { noRoom } from '../../db/open'

const DAY = 86_400_000

/** An uploaded file over the workspace's media max_bytes: 422 naming its form field. */
export const fileTooLarge = (field: string, maxBytes: number) => validationFailed({ [field]: [`The ${field} field must not be larger than ${maxBytes} bytes.`] })

export const scannerUnavailable = () => new ApiError(503, 'scanner_unavailable', 'Media cannot be accepted right now because the malware scanner is unreachable.')

/**
 * The name a workspace's upload is stored under: a digest of the workspace and the content's
 * SHA-256. Identical bytes are stored once per workspace, never shared across workspaces — a
 * shared file would let a tenant learn, from a faster upload, that another holds the same file.
 */
export const blobOf = (workspaceId: string, sha: string) => new Bun.CryptoHasher('sha256').update(`capstan-media.${workspaceId}.${sha}`).digest('hex')

export class MediaService {
  private readonly records: MediaRecordStore
  /** Files prepared but whose rows are not committed yet: retention leaves them alone (see holds.ts). */
  private readonly holds: FileHolds

  constructor(
    private readonly deps: Deps,
    readonly store: MediaStore,
    private readonly scanner: Scanner,
    private readonly workspaces: WorkspaceService,
    private readonly log: Logger,
  ) {
    this.records = new MediaRecordStore(deps.engine)
    const remove = (blob: string) => this.store.remove(blob)
    this.holds = deps.engine.shared ? new SharedHolds(deps.engine, this.records, remove, () => deps.clock.now()) : new LocalHolds(this.records, remove)
  }

  /** A page of the workspace's media, newest first (the operators' list). */
  list(workspaceId: string, limit: number, offset: number) {
    return this.records.list(workspaceId, limit, offset)
  }

  toPublic(row: MediaRow): PublicMedia {
    return { id: row.id, filename: row.filename, mime_type: row.mime_type, size: row.size, sha256: row.sha256, created_at: iso(row.created_at), expires_at: iso(row.expires_at) }
  }

  scannerReachable() {
    return this.scanner.ping()
  }

  /** clamd's VERSION answer (its signature database and that database's date). */
  scannerVersion() {
    return this.scanner.version()
  }

  /** Each scan's verdict, for /metrics: clean, malware, too_large or unavailable. */
  onScan: (verdict: 'clean' | 'malware' | 'too_large' | 'unavailable') => void = () => {}

  /** The largest file the workspace takes, in bytes (its media max_bytes). */
  maxFileBytes(ws: WorkspaceRow): number {
    return this.workspaces.settings(ws).media.max_bytes
  }

  /**
   * Check, scan and store an uploaded file; returns the row to insert (not inserted yet).
   * 422 validation_failed (empty or over the workspace's max_bytes), 422 unsupported_media,
   * 422 malware_detected, 503 scanner_unavailable. `field` names the form field in errors.
   */
  async prepare(workspaceId: string, file: File, field = 'file'): Promise<MediaRow> {
    const ws = this.workspaces.cached(workspaceId)!
    const { max_bytes, retention_days, max_total_bytes } = this.workspaces.settings(ws).media
    if (file.size === 0) throw validationFailed({ [field]: [`The ${field} field must not be empty.`] })
    if (file.size > max_bytes) throw fileTooLarge(field, max_bytes)
    // the workspace's share of the disk: what it keeps, plus uploads under way, plus this one
    if (max_total_bytes !== null && (await this.records.bytesUsed(workspaceId, this.deps.clock.now())) + this.reserved.get(workspaceId) + file.size > max_total_bytes) {
      throw this.quotaExceeded(workspaceId, max_total_bytes)
    }
    this.reserved.add(workspaceId, file.size)
    try {
      return await this.check(workspaceId, file, field, retention_days)
    } finally {
      // the row is inserted (counted from then) or not, by the caller, right after this
      this.reserved.remove(workspaceId, file.size)
    }
  }

  /** Bytes of uploads being checked and scanned, per workspace (counted toward its max_total_bytes). */
  private readonly reserved = new Tally()

  private async check(workspaceId: string, file: File, field: string, retention_days: number): Promise<MediaRow> {
    const bytes = new Uint8Array(await file.arrayBuffer())
    const type = await sniff(bytes)
    if (!type) throw refused('unsupported_media', 'This type of file is not supported.')
    let verdict
    try {
      verdict = await this.scanner.scan(bytes)
    } catch (e) {
      if (e instanceof ScannerUnavailable) {
        this.onScan('unavailable')
        this.log.warn('malware scanner unavailable', { reason: e.message })
        throw scannerUnavailable()
      }
      if (e instanceof ScanTooLarge) {
        this.onScan('too_large')
        // the scanner is fine; the file is longer than it is set to take: a file it cannot scan is
        // refused like one over the workspace's limit (the operator's fix is in the log line)
        this.log.warn("upload refused: longer than the malware scanner takes; raise StreamMaxLength in clamd.conf or lower the workspace's media max_bytes", { workspace_id: workspaceId, size: bytes.length })
        throw validationFailed({ [field]: [`The ${field} field is larger than the malware scanner accepts.`] })
      }
      throw e
    }
    this.onScan(verdict.clean ? 'clean' : 'malware')
    if (!verdict.clean) {
      this.log.warn('upload refused: malware detected', { workspace_id: workspaceId, signature: verdict.signature })
      throw refused('malware_detected', 'The file was refused because malware was detected in it.')
    }
    const sha = Bun.CryptoHasher.hash('sha256', bytes).toString('hex')
    const blob = blobOf(workspaceId, sha)
    const id = uuid()
    await this.holds.hold(blob, id)
    try {
      await this.store.put(blob, bytes)
    } catch (e) {
      await this.holds.letGo(blob, id, { committed: false, remove: false }).catch(() => {})
      if (noRoom(e)) {
        this.log.error('media store full', { workspace_id: workspaceId })
        throw new ApiError(507, 'storage_full', 'The media store is full; the file was not stored.')
      }
      throw e
    }
    const now = this.deps.clock.now()
    return { id, workspace_id: workspaceId, sha256: sha, blob, filename: cleanFilename(file.name, type), mime_type: type, size: bytes.length, created_at: now, expires_at: now + retention_days * DAY }
  }

  /**
   * A prepared row for the content of live media `id` (404 otherwise): a new record of the same
   * stored file with a retention of its own — a sandbox customer's file, say. Settled like
   * `prepare`'s rows.
   */
  async copyOf(workspaceId: string, id: string): Promise<MediaRow> {
    const m = await this.get(workspaceId, id)
    const { retention_days } = this.workspaces.settings(this.workspaces.cached(workspaceId)!).media
    const copy = uuid()
    await this.holds.hold(m.blob, copy)
    // its record may have been removed (expired) before the hold: the file then goes with it
    if (!(await this.records.get(workspaceId, m.id))) {
      await this.holds.letGo(m.blob, copy, { committed: false, remove: true })
      throw notFound('media')
    }
    const now = this.deps.clock.now()
    return { ...m, id: copy, created_at: now, expires_at: now + retention_days * DAY }
  }

  /** An upload refused for the workspace's max_total_bytes (logged). */
  private quotaExceeded(workspaceId: string, maxTotalBytes: number) {
    this.log.warn('upload refused: the workspace has used its media storage', { workspace_id: workspaceId, max_total_bytes: maxTotalBytes })
    return refused('media_quota_exceeded', 'The workspace has used its media storage; the file was not stored.')
  }

  /**
   * Insert a prepared row (inside the write that uses it). `quota`: an upload, held to the
   * workspace's max_total_bytes here too where instances share the database — `prepare` counted
   * the uploads under way on this instance only: the workspace's uploads are recorded one
   * transaction at a time, and one past the limit with the others recorded is refused.
   */
  async insertIn(tx: Queries, row: MediaRow, { quota = false }: { quota?: boolean } = {}) {
    const limit = quota && this.deps.engine.shared ? this.workspaces.settings(this.workspaces.cached(row.workspace_id)!).media.max_total_bytes : null
    if (limit !== null) await this.records.quotaTurn(tx, row.workspace_id)
    await this.records.insert(tx, row)
    if (limit !== null && (await this.records.bytesUsed(row.workspace_id, this.deps.clock.now(), tx)) > limit) {
      throw this.quotaExceeded(row.workspace_id, limit)
    }
    await this.holds.keptIn(tx, row.blob, row.id)
  }

  /** After the write that inserted (or refused) a prepared row: drop an unreferenced file. */
  settle(row: MediaRow, committed: boolean) {
    return this.holds.letGo(row.blob, row.id, { committed, remove: true })
  }

  /** POST /media: prepare, then commit the row. */
  async upload(workspaceId: string, file: File): Promise<MediaRow> {
    const row = await this.prepare(workspaceId, file)
    let committed = false
    try {
      await this.deps.engine.write((tx) => this.insertIn(tx, row, { quota: true }))
      committed = true
      return row
    } finally {
      await this.settle(row, committed)
    }
  }
  /** Inside a write: the record expires now (the next purge removes it and, unless shared, its file); whether it was still kept. */
  expireIn(tx: Queries, workspaceId: string, id: string, now: number): Promise<boolean> {
    return this.records.expire(tx, workspaceId, id, now)
  }

  /** For /metrics: bytes of each workspace's kept media. */
  bytesPerWorkspace(now: number) {
    return this.records.bytesPerWorkspace(now)
  }

  /** The workspace's media record, or null (no 404). */
  find(workspaceId: string, id: string, q?: Queries): Promise<MediaRow | null> {
    return this.records.get(workspaceId, id, q)
  }

  /** A live (unexpired) media record of this workspace, else 404 "media". */
  async get(workspaceId: string, id: string, q?: Queries): Promise<MediaRow> {
    const row = await this.records.get(workspaceId, id, q)
    if (!row || row.expires_at <= this.deps.clock.now()) throw notFound('media')
    return row
  }

  /** Retention: delete expired rows, then files no row refers to any more (and those of holds that lapsed). */
  async purgeExpired() {
    for (const blob of await this.holds.lapsed(this.deps.clock.now())) await this.holds.removeIfUnused(blob)
    for (;;) {
      const batch = await this.records.expired(this.deps.clock.now(), 500)
      if (batch.length === 0) return
      await this.deps.engine.write(async (tx) => {
        for (const m of batch) await this.records.remove(tx, m.id)
      })
      for (const blob of new Set(batch.map((m) => m.blob))) await this.holds.removeIfUnused(blob)
    }
  }
}
