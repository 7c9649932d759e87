/**
 * The audit log (admin `GET /workspaces/{id}/audit-log`): what operators and keys changed in a
 * workspace, by action and time. `key_id` names the API key an entry is about, `subject_id` the
 * workspace, number or webhook endpoint; an entry about a person (an erased or exported contact,
 * a suppressed number) names neither: it records that it happened, not whom.
 */
import { type Queries, stmt } from '../../db/engine'

const INSERT = stmt('INSERT INTO audit_log (workspace_id, action, key_id, subject_id, at, via, ip) VALUES (?, ?, ?, ?, ?, ?, ?)')
const LIST = stmt('SELECT * FROM audit_log WHERE workspace_id = ? ORDER BY id DESC LIMIT ? OFFSET ?')
const COUNT = stmt('SELECT COUNT(*) AS n FROM audit_log WHERE workspace_id = ?')
// one kind of entry (api_key, webhook, …) or one action: the workspace's entries walked newest first
const LIST_OF = stmt('SELECT * FROM audit_log WHERE workspace_id = ? AND (action = ? OR action LIKE ?) ORDER BY id DESC LIMIT ? OFFSET ?')
const COUNT_OF = stmt('SELECT COUNT(*) AS n FROM (SELECT 1 FROM audit_log WHERE workspace_id = ? AND (action = ? OR action LIKE ?) LIMIT 10000) AS found')

export type AuditAction =
  | 'api_key.created'
  | 'api_key.revoked'
  | 'api_key.removed'
  | 'workspace.updated'
  | 'connection.created'
  | 'connection.updated'
  | 'connection.removed'
  | 'webhook.created'
  | 'webhook.updated'
  | 'webhook.removed'
  | 'webhook.secret_rotated'
  | 'webhook.recovered'
  | 'webhook.resent'
  | 'suppression.added'
  | 'suppression.removed'
  | 'contact.exported'
  | 'contact.erased'
  | 'contacts.imported'
  | 'contacts.exported'
  | 'suppressions.imported'
  | 'templates.imported'

/**
 * The operator behind a change, as the admin API saw the request: how it was signed — the
 * dashboard's session, the admin token from the CLI (which says so in its User-Agent), or the
 * admin token from anything else — and the address it came from (the client's, behind a trusted
 * proxy). Every operator holds the same admin token, so this is what tells their changes apart.
 */
export interface Operator {
  via: OperatorVia
  ip: string | null
}
export type OperatorVia = 'dashboard' | 'cli' | 'admin_token'

export interface AuditRow {
  id: number
  workspace_id: string
  action: AuditAction
  key_id: string | null
  subject_id: string | null
  at: number
  /** Null for an entry written before Capstan recorded it, or by Capstan itself (an erasure applied again after a restore). */
  via: OperatorVia | null
  ip: string | null
}

/** One entry through a write of the store seam (`tx`: that write's queries), on either engine. */
export async function auditIn(tx: Queries, workspaceId: string, action: AuditAction, keyId: string | null, at: number, subjectId: string | null = null, by: Operator | null = null) {
  await tx.run(INSERT, workspaceId, action, keyId, subjectId, at, by?.via ?? null, by?.ip ?? null)
}

export class AuditRepo {
  /** `engine`: where the log is read. */
  constructor(private readonly engine: Queries) {}

  /** One entry through a write of the store seam (`tx`: that write's queries), on either engine. */
  addIn(tx: Queries, workspaceId: string, action: AuditAction, keyId: string | null, at: number, subjectId: string | null, by: Operator | null) {
    return auditIn(tx, workspaceId, action, keyId, at, subjectId, by)
  }

  /**
   * Newest first; `action`: only that action (`webhook.removed`) or that kind (`webhook`: every
   * webhook.* entry), counted up to 10,000.
   */
  async list(workspaceId: string, limit: number, offset: number, action?: string) {
    if (action) {
      const kind = action.includes('.') ? action : null
      const like = kind ? '' : `${action}.%`
      const [rows, count] = await Promise.all([this.engine.all<AuditRow>(LIST_OF, workspaceId, kind ?? '', like, limit, offset), this.engine.get<{ n: number }>(COUNT_OF, workspaceId, kind ?? '', like)])
      return { rows, total: Number(count!.n) }
    }
    const [rows, count] = await Promise.all([this.engine.all<AuditRow>(LIST, workspaceId, limit, offset), this.engine.get<{ n: number }>(COUNT, workspaceId)])
    return { rows, total: count!.n }
  }
}
