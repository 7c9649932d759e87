/** The group mirror on the store seam (docs/design/two-engines.md). */
import { type Queries, type Statement, stmt } from '../../db/engine'

export interface GroupRow {
  id: string
  workspace_id: string
  connection_id: string
  external_id: string
  name: string
  name_fold: string
  participant_count: number
  announce: number
  is_admin: number
  synced_at: number
  created_at: number
}

const ORDER = 'ORDER BY participant_count DESC, name_fold, id'
const Q = {
  byConnection: stmt('SELECT * FROM groups WHERE connection_id = ?'),
  insert: stmt('INSERT INTO groups (id, workspace_id, connection_id, external_id, name, name_fold, participant_count, announce, is_admin, synced_at, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)'),
  update: stmt('UPDATE groups SET name = ?, name_fold = ?, participant_count = ?, announce = ?, is_admin = ?, synced_at = ? WHERE id = ?'),
  remove: stmt('DELETE FROM groups WHERE id = ?'),
  removeMessages: stmt('DELETE FROM messages WHERE group_id = ?'),
  get: stmt('SELECT * FROM groups WHERE id = ? AND workspace_id = ?'),
  getAny: stmt('SELECT * FROM groups WHERE id = ?'),
  page: stmt(`SELECT * FROM groups WHERE workspace_id = ? ${ORDER} LIMIT ? OFFSET ?`),
  count: stmt('SELECT COUNT(*) AS n FROM groups WHERE workspace_id = ?'),
  // one pass over the covering index yields the ordered matches: their number is the total
  matches: stmt(`SELECT id FROM groups WHERE workspace_id = ? AND instr(name_fold, ?) > 0 ${ORDER}`, `SELECT id FROM groups WHERE workspace_id = $1 AND strpos(name_fold, $2) > 0 ${ORDER}`),
}

export class GroupStore {
  /** The rows of a page of ids, one statement per page size. */
  private readonly byIds = new Map<number, Statement>()

  /** `db`: the engine, for reads outside a write. */
  constructor(private readonly db: Queries) {}

  forConnection(connectionId: string, q: Queries = this.db) {
    return q.all<GroupRow>(Q.byConnection, connectionId)
  }
  async insert(tx: Queries, r: GroupRow) {
    await tx.run(Q.insert, r.id, r.workspace_id, r.connection_id, r.external_id, r.name, r.name_fold, r.participant_count, r.announce, r.is_admin, r.synced_at, r.created_at)
  }
  async update(tx: Queries, r: GroupRow) {
    await tx.run(Q.update, r.name, r.name_fold, r.participant_count, r.announce, r.is_admin, r.synced_at, r.id)
  }
  /** Remove a group and the messages sent to it. */
  async remove(tx: Queries, id: string) {
    await tx.run(Q.removeMessages, id)
    await tx.run(Q.remove, id)
  }
  get(workspaceId: string, id: string, q: Queries = this.db) {
    return q.get<GroupRow>(Q.get, id, workspaceId)
  }
  getAny(id: string, q: Queries = this.db) {
    return q.get<GroupRow>(Q.getAny, id)
  }
  async list(workspaceId: string, search: string | null, limit: number, offset: number): Promise<{ rows: GroupRow[]; total: number }> {
    if (search) {
      const ids = (await this.db.all<{ id: string }>(Q.matches, workspaceId, search)).map((r) => r.id)
      const pageIds = ids.slice(offset, offset + limit)
      if (pageIds.length === 0) return { rows: [], total: ids.length }
      let s = this.byIds.get(pageIds.length)
      if (!s) this.byIds.set(pageIds.length, (s = stmt(`SELECT * FROM groups WHERE id IN (${pageIds.map(() => '?').join(',')})`)))
      const byId = new Map((await this.db.all<GroupRow>(s, ...pageIds)).map((r) => [r.id, r]))
      return { rows: pageIds.map((id) => byId.get(id)!).filter(Boolean), total: ids.length }
    }
    const [rows, count] = await Promise.all([this.db.all<GroupRow>(Q.page, workspaceId, limit, offset), this.db.get<{ n: number }>(Q.count, workspaceId)])
    return { rows, total: count?.n ?? 0 }
  }
}
