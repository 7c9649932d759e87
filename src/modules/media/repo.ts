/** Media SQL. */
import type { MediaType } from './sniff'
import type { Database } from 'bun:sqlite'

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

export class MediaRepo {
  private insertStmt
  private getStmt
  private expiredStmt
  private deleteStmt
  private refsStmt
  private usedStmt

  constructor(private readonly db: Database) {
    this.insertStmt = db.query('INSERT INTO media (id, workspace_id, sha256, blob, filename, mime_type, size, created_at, expires_at) VALUES ($id, $workspace_id, $sha256, $blob, $filename, $mime_type, $size, $created_at, $expires_at)')
    this.getStmt = db.query<MediaRow, [string, string]>('SELECT * FROM media WHERE id = ? AND workspace_id = ?')
    // media still to be sent is kept: by a campaign that has not ended (index campaigns_media),
    // and by a message waiting in a queue or being sent (the attachment ids of those messages
    // are listed once per query, through the partial indexes messages_queue and messages_in_flight)
    this.expiredStmt = db.query<MediaRow, [number, number]>(
      `SELECT * FROM media m WHERE m.expires_at <= ?
         AND NOT EXISTS (SELECT 1 FROM campaigns c WHERE c.media_id = m.id AND c.status IN ('scheduled', 'running', 'paused') AND c.deleted_at IS NULL)
         AND m.id NOT IN (
           SELECT j.value FROM messages q, json_each(q.attachments) j WHERE q.status = 'queued' AND q.attachments <> '[]'
           UNION ALL
           SELECT j.value FROM messages q, json_each(q.attachments) j WHERE q.status = 'sending' AND q.attachments <> '[]')
       LIMIT ?`,
    )
    this.deleteStmt = db.query('DELETE FROM media WHERE id = ?')
    this.refsStmt = db.query<{ n: number }, [string]>('SELECT COUNT(*) AS n FROM media WHERE blob = ?')
    this.usedStmt = db.query<{ n: number }, [string, number]>('SELECT COALESCE(SUM(size), 0) AS n FROM media WHERE workspace_id = ? AND expires_at > ?')
  }

  /** Expire the record at `at` unless it already has; returns whether it did. */
  expire(workspaceId: string, id: string, at: number): boolean {
    return this.db.query('UPDATE media SET expires_at = ? WHERE workspace_id = ? AND id = ? AND expires_at > ?').run(at, workspaceId, id, at).changes > 0
  }

  /** For /metrics: bytes of each workspace's kept media (through media_usage). */
  bytesPerWorkspace(now: number) {
    return this.db.query<{ workspace_id: string; n: number }, [number]>('SELECT workspace_id, SUM(size) AS n FROM media WHERE expires_at > ? GROUP BY workspace_id ORDER BY workspace_id').all(now)
  }

  insert(row: MediaRow) {
    this.insertStmt.run(row as any)
  }
  get(workspaceId: string, id: string) {
    return this.getStmt.get(id, workspaceId)
  }
  expired(now: number, limit: number) {
    return this.expiredStmt.all(now, limit)
  }
  remove(id: string) {
    this.deleteStmt.run(id)
  }
  /** Records that use the stored file `blob`. */
  references(blob: string) {
    return this.refsStmt.get(blob)!.n
  }
  /** Bytes of the workspace's live (unexpired) media, each record counted (a shared file once per record). */
  bytesUsed(workspaceId: string, now: number) {
    return this.usedStmt.get(workspaceId, now)!.n
  }
}
