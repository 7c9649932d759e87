/** Suppression list SQL. */
import type { Database } from 'bun:sqlite'

export interface SuppressionRow {
  workspace_id: string
  phone: string
  reason: string | null
  created_at: number
}

export class SuppressionRepo {
  private getStmt
  private insertStmt
  private deleteStmt
  private listStmt
  private countStmt

  constructor(db: Database) {
    this.getStmt = db.query<SuppressionRow, [string, string]>('SELECT * FROM suppressions WHERE workspace_id = ? AND phone = ?')
    this.insertStmt = db.query('INSERT INTO suppressions (workspace_id, phone, reason, created_at) VALUES (?, ?, ?, ?)')
    this.deleteStmt = db.query('DELETE FROM suppressions WHERE workspace_id = ? AND phone = ?')
    // in the order of suppressions_newest, and the count kept by triggers (migration 0035): a page
    // of 1,000,000 sorted and counted them all (~70 ms)
    this.listStmt = db.query<SuppressionRow, [string, number, number]>('SELECT * FROM suppressions WHERE workspace_id = ? ORDER BY created_at DESC, phone LIMIT ? OFFSET ?')
    this.countStmt = db.query<{ n: number }, [string]>('SELECT n FROM suppression_counts WHERE workspace_id = ?')
  }

  get(workspaceId: string, phone: string) {
    return this.getStmt.get(workspaceId, phone)
  }
  insert(row: SuppressionRow) {
    this.insertStmt.run(row.workspace_id, row.phone, row.reason, row.created_at)
  }
  remove(workspaceId: string, phone: string) {
    return this.deleteStmt.run(workspaceId, phone).changes > 0
  }
  list(workspaceId: string, limit: number, offset: number) {
    return { rows: this.listStmt.all(workspaceId, limit, offset), total: this.countStmt.get(workspaceId)?.n ?? 0 }
  }
}
