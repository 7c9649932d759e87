/**
 * The audit log (admin `GET /workspaces/{id}/audit-log`): security-relevant changes to a
 * workspace, by action and time. `key_id` names the API key an entry is about; entries about
 * something else (an erased contact, a webhook secret) leave it null and name nobody.
 */
import type { Database } from 'bun:sqlite'

export type AuditAction = 'api_key.created' | 'api_key.revoked' | 'api_key.removed' | 'contact.erased' | 'webhook.secret_rotated'

export interface AuditRow {
  id: number
  workspace_id: string
  action: AuditAction
  key_id: string | null
  at: number
}

export class AuditRepo {
  private insertStmt
  private listStmt
  private countStmt

  constructor(db: Database) {
    this.insertStmt = db.query('INSERT INTO audit_log (workspace_id, action, key_id, at) VALUES (?, ?, ?, ?)')
    this.listStmt = db.query<AuditRow, [string, number, number]>('SELECT * FROM audit_log WHERE workspace_id = ? ORDER BY id DESC LIMIT ? OFFSET ?')
    this.countStmt = db.query<{ n: number }, [string]>('SELECT COUNT(*) AS n FROM audit_log WHERE workspace_id = ?')
  }

  /** One entry; runs inside the write that makes the change it records. */
  add(workspaceId: string, action: AuditAction, keyId: string | null, at: number) {
    this.insertStmt.run(workspaceId, action, keyId, at)
  }

  /** Newest first. */
  list(workspaceId: string, limit: number, offset: number) {
    return { rows: this.listStmt.all(workspaceId, limit, offset), total: this.countStmt.get(workspaceId)!.n }
  }
}
