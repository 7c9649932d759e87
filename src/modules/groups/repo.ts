/** Group mirror SQL. */
import type { Database } from 'bun:sqlite'

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

export class GroupRepo {
  private byConnection
  private insertStmt
  private updateStmt
  private deleteStmt
  private deleteMessages
  private getStmt
  private getAnyStmt
  private pageAll
  private countAll
  private matchIds
  private readonly db: Database

  constructor(db: Database) {
    this.db = db
    this.byConnection = db.query<GroupRow, [string]>('SELECT * FROM groups WHERE connection_id = ?')
    this.insertStmt = db.query(
      'INSERT INTO groups (id, workspace_id, connection_id, external_id, name, name_fold, participant_count, announce, is_admin, synced_at, created_at) VALUES ($id, $workspace_id, $connection_id, $external_id, $name, $name_fold, $participant_count, $announce, $is_admin, $synced_at, $created_at)',
    )
    this.updateStmt = db.query('UPDATE groups SET name = $name, name_fold = $name_fold, participant_count = $participant_count, announce = $announce, is_admin = $is_admin, synced_at = $synced_at WHERE id = $id')
    this.deleteStmt = db.query('DELETE FROM groups WHERE id = ?')
    this.deleteMessages = db.query('DELETE FROM messages WHERE group_id = ?')
    this.getStmt = db.query<GroupRow, [string, string]>('SELECT * FROM groups WHERE id = ? AND workspace_id = ?')
    this.getAnyStmt = db.query<GroupRow, [string]>('SELECT * FROM groups WHERE id = ?')
    const order = 'ORDER BY participant_count DESC, name_fold, id LIMIT ? OFFSET ?'
    this.pageAll = db.query<GroupRow, [string, number, number]>(`SELECT * FROM groups WHERE workspace_id = ? ${order}`)
    this.countAll = db.query<{ n: number }, [string]>('SELECT COUNT(*) AS n FROM groups WHERE workspace_id = ?')
    // one pass over the covering index yields the ordered matches: their number is the total
    this.matchIds = db.query<{ id: string }, [string, string]>('SELECT id FROM groups WHERE workspace_id = ? AND instr(name_fold, ?) > 0 ORDER BY participant_count DESC, name_fold, id')
  }

  forConnection(connectionId: string) {
    return this.byConnection.all(connectionId)
  }
  insert(row: GroupRow) {
    this.insertStmt.run(row as any)
  }
  update(row: GroupRow) {
    this.updateStmt.run({ id: row.id, name: row.name, name_fold: row.name_fold, participant_count: row.participant_count, announce: row.announce, is_admin: row.is_admin, synced_at: row.synced_at } as any)
  }
  /** Remove a group and the messages sent to it. */
  remove(id: string) {
    this.deleteMessages.run(id)
    this.deleteStmt.run(id)
  }
  get(workspaceId: string, id: string) {
    return this.getStmt.get(id, workspaceId)
  }
  getAny(id: string) {
    return this.getAnyStmt.get(id)
  }
  list(workspaceId: string, search: string | null, limit: number, offset: number) {
    if (search) {
      const ids = this.matchIds.all(workspaceId, search).map((r) => r.id)
      const pageIds = ids.slice(offset, offset + limit)
      if (pageIds.length === 0) return { rows: [], total: ids.length }
      const rows = this.db.query<GroupRow, string[]>(`SELECT * FROM groups WHERE id IN (${pageIds.map(() => '?').join(',')})`).all(...pageIds)
      const byId = new Map(rows.map((r) => [r.id, r]))
      return { rows: pageIds.map((id) => byId.get(id)!).filter(Boolean), total: ids.length }
    }
    return { rows: this.pageAll.all(workspaceId, limit, offset), total: this.countAll.get(workspaceId)!.n }
  }
}
