/** Media SQL. */
import type { Database } from 'bun:sqlite'

export interface MediaRow {
  id: string
  workspace_id: string
  sha256: string
  filename: string
  mime_type: string
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

  constructor(db: Database) {
    this.insertStmt = db.query('INSERT INTO media (id, workspace_id, sha256, filename, mime_type, size, created_at, expires_at) VALUES ($id, $workspace_id, $sha256, $filename, $mime_type, $size, $created_at, $expires_at)')
    this.getStmt = db.query<MediaRow, [string, string]>('SELECT * FROM media WHERE id = ? AND workspace_id = ?')
    // media a campaign that has not ended still sends is kept until it ends (index campaigns_media)
    this.expiredStmt = db.query<MediaRow, [number, number]>(
      "SELECT * FROM media m WHERE m.expires_at <= ? AND NOT EXISTS (SELECT 1 FROM campaigns c WHERE c.media_id = m.id AND c.status IN ('scheduled', 'running', 'paused') AND c.deleted_at IS NULL) LIMIT ?",
    )
    this.deleteStmt = db.query('DELETE FROM media WHERE id = ?')
    this.refsStmt = db.query<{ n: number }, [string]>('SELECT COUNT(*) AS n FROM media WHERE sha256 = ?')
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
  references(sha: string) {
    return this.refsStmt.get(sha)!.n
  }
}
