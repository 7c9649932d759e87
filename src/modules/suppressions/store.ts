/** The suppression list's store on the seam (docs/design/two-engines.md): each statement once, for both engines. */
import { oneByKey, type Queries, stmt } from '../../db/engine'

export interface SuppressionRow {
  workspace_id: string
  phone: string
  reason: string | null
  created_at: number
}

const Q = {
  get: oneByKey('suppressions', ['workspace_id', 'phone']),
  insert: stmt('INSERT INTO suppressions (workspace_id, phone, reason, created_at) VALUES (?, ?, ?, ?)'),
  // a number already on the list keeps its entry (an import)
  insertNew: stmt('INSERT INTO suppressions (workspace_id, phone, reason, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (workspace_id, phone) DO NOTHING'),
  remove: stmt('DELETE FROM suppressions WHERE workspace_id = ? AND phone = ?'),
  // in the order of suppressions_newest, and the count kept by triggers (migration 0035): a page
  // of 1,000,000 sorted and counted them all (~70 ms)
  list: stmt('SELECT * FROM suppressions WHERE workspace_id = ? ORDER BY created_at DESC, phone LIMIT ? OFFSET ?'),
  count: stmt('SELECT CAST(SUM(n) AS BIGINT) AS n FROM suppression_counts WHERE workspace_id = ?'),
}

export class SuppressionStore {
  constructor(private readonly db: Queries) {}

  get(workspaceId: string, phone: string, q: Queries = this.db) {
    return q.get<SuppressionRow>(Q.get, workspaceId, phone)
  }
  async insert(tx: Queries, r: SuppressionRow) {
    await tx.run(Q.insert, r.workspace_id, r.phone, r.reason, r.created_at)
  }
  /** Insert unless the number is on the list; whether it was added. */
  async insertNew(tx: Queries, r: SuppressionRow): Promise<boolean> {
    return (await tx.run(Q.insertNew, r.workspace_id, r.phone, r.reason, r.created_at)) > 0
  }
  async remove(tx: Queries, workspaceId: string, phone: string): Promise<boolean> {
    return (await tx.run(Q.remove, workspaceId, phone)) > 0
  }
  async list(workspaceId: string, limit: number, offset: number) {
    const [rows, count] = await Promise.all([this.db.all<SuppressionRow>(Q.list, workspaceId, limit, offset), this.db.get<{ n: number }>(Q.count, workspaceId)])
    return { rows, total: count?.n ?? 0 }
  }
}
