/** The media records' store on the seam (docs/design/two-engines.md): each statement once, for both engines; the files are the MediaStore's (store.ts). */
import { pgPlaceholders, type Queries, stmt, TURNS, turnOf } from '../../db/engine'
import type { MediaType } from './sniff'

export interface MediaRow {
  id: string
  workspace_id: string
  sha256: string
  /** The stored file's name in the media store (see MediaService.blobOf). */
  blob: string
  filename: string
  mime_type: MediaType
  size: number
  created_at: number
  expires_at: number
}

// media still to be sent is kept: by a campaign that has not ended (index campaigns_media), and
// by a message waiting in a queue or being sent (the attachment ids of those messages are listed
// once per query, through the partial indexes messages_queue and messages_in_flight)
const EXPIRED = (elements: string) => `SELECT * FROM media m WHERE m.expires_at <= ?
     AND NOT EXISTS (SELECT 1 FROM campaigns c WHERE c.media_id = m.id AND c.status IN ('scheduled', 'running', 'paused') AND c.deleted_at IS NULL)
     AND m.id NOT IN (
       SELECT j.value FROM messages q, ${elements} WHERE q.status = 'queued' AND q.attachments <> '[]'
       UNION ALL
       SELECT j.value FROM messages q, ${elements} WHERE q.status = 'sending' AND q.attachments <> '[]')
   LIMIT ?`

const Q = {
  insert: stmt('INSERT INTO media (id, workspace_id, sha256, blob, filename, mime_type, size, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)'),
  get: stmt('SELECT * FROM media WHERE id = ? AND workspace_id = ?'),
  // through media_workspace (workspace_id, created_at DESC); counted at most as deep as a list pages
  list: stmt('SELECT * FROM media WHERE workspace_id = ? ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?'),
  count: stmt('SELECT COUNT(*) AS n FROM (SELECT 1 FROM media WHERE workspace_id = ? LIMIT 10000) AS found'),
  expired: stmt(EXPIRED('json_each(q.attachments) j'), pgPlaceholders(EXPIRED('json_array_elements_text(q.attachments::json) AS j(value)'))),
  remove: stmt('DELETE FROM media WHERE id = ?'),
  references: stmt('SELECT COUNT(*) AS n FROM media WHERE blob = ?'),
  bytesUsed: stmt('SELECT COALESCE(SUM(size), 0) AS n FROM media WHERE workspace_id = ? AND expires_at > ?'),
  // a workspace's uploads are recorded one transaction at a time where its storage is limited and
  // the database shared
  quotaTurn: turnOf(TURNS.mediaQuota),
  expire: stmt('UPDATE media SET expires_at = ? WHERE workspace_id = ? AND id = ? AND expires_at > ?'),
  // through media_usage
  perWorkspace: stmt('SELECT workspace_id, SUM(size) AS n FROM media WHERE expires_at > ? GROUP BY workspace_id ORDER BY workspace_id'),
}

export class MediaRecordStore {
  constructor(private readonly db: Queries) {}

  async insert(tx: Queries, r: MediaRow) {
    await tx.run(Q.insert, r.id, r.workspace_id, r.sha256, r.blob, r.filename, r.mime_type, r.size, r.created_at, r.expires_at)
  }
  /** A page of the workspace's media, newest first, and how many it has (up to 10,000). */
  async list(workspaceId: string, limit: number, offset: number) {
    const [rows, count] = await Promise.all([this.db.all<MediaRow>(Q.list, workspaceId, limit, offset), this.db.get<{ n: number }>(Q.count, workspaceId)])
    return { rows, total: Number(count?.n ?? 0) }
  }
  get(workspaceId: string, id: string, q: Queries = this.db) {
    return q.get<MediaRow>(Q.get, id, workspaceId)
  }
  /** Expired records nothing still has to send, at most `limit`. */
  expired(now: number, limit: number) {
    return this.db.all<MediaRow>(Q.expired, now, limit)
  }
  async remove(tx: Queries, id: string) {
    await tx.run(Q.remove, id)
  }
  /** Records that use the stored file `blob`. */
  async references(blob: string, q: Queries = this.db): Promise<number> {
    return (await q.get<{ n: number }>(Q.references, blob))!.n
  }
  /** Bytes of the workspace's live (unexpired) media, each record counted (a shared file once per record). */
  async bytesUsed(workspaceId: string, now: number, q: Queries = this.db): Promise<number> {
    return Number((await q.get<{ n: number }>(Q.bytesUsed, workspaceId, now))!.n)
  }
  /** Inside a write: wait for the workspace's uploads to be this transaction's to record (see Q.quotaTurn). */
  async quotaTurn(tx: Queries, workspaceId: string) {
    await tx.run(Q.quotaTurn, workspaceId)
  }
  /** Expire the record at `at` unless it already has; whether it did. */
  async expire(tx: Queries, workspaceId: string, id: string, at: number): Promise<boolean> {
    return (await tx.run(Q.expire, at, workspaceId, id, at)) > 0
  }
  /** For /metrics: bytes of each workspace's kept media. */
  async bytesPerWorkspace(now: number) {
    return (await this.db.all<{ workspace_id: string; n: number }>(Q.perWorkspace, now)).map((r) => ({ workspace_id: r.workspace_id, n: Number(r.n) }))
  }
}
