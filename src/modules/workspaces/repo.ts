/** Workspace SQL. */
import type { Database } from 'bun:sqlite'

export interface WorkspaceRow {
  id: string
  name: string
  slug: string
  status: 'active' | 'inactive'
  settings: string
  created_at: number
  updated_at: number
}

export class WorkspaceRepo {
  private byId
  private bySlug
  private insertStmt
  private updateStmt
  private listStmt
  private countStmt

  constructor(db: Database) {
    this.byId = db.query<WorkspaceRow, [string]>('SELECT * FROM workspaces WHERE id = ?')
    this.bySlug = db.query<WorkspaceRow, [string]>('SELECT * FROM workspaces WHERE slug = ?')
    this.insertStmt = db.query('INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES ($id, $name, $slug, $status, $settings, $created_at, $updated_at)')
    this.updateStmt = db.query('UPDATE workspaces SET name = $name, status = $status, settings = $settings, updated_at = $updated_at WHERE id = $id')
    this.listStmt = db.query<WorkspaceRow, [number, number]>('SELECT * FROM workspaces ORDER BY created_at DESC, id LIMIT ? OFFSET ?')
    this.countStmt = db.query<{ n: number }, []>('SELECT COUNT(*) AS n FROM workspaces')
  }

  get(id: string) {
    return this.byId.get(id)
  }
  getBySlug(slug: string) {
    return this.bySlug.get(slug)
  }
  insert(row: WorkspaceRow) {
    this.insertStmt.run(row as any)
  }
  update(row: WorkspaceRow) {
    this.updateStmt.run({ id: row.id, name: row.name, status: row.status, settings: row.settings, updated_at: row.updated_at } as any)
  }
  /** Every workspace (housekeeping: there are few). */
  all() {
    return this.listStmt.all(-1, 0)
  }
  list(limit: number, offset: number) {
    return this.listStmt.all(limit, offset)
  }
  count() {
    return this.countStmt.get()!.n
  }
}
