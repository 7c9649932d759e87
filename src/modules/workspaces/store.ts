/** The workspaces' store on the seam (docs/design/two-engines.md): each statement once, for both engines. */
import { type Queries, stmt } from '../../db/engine'

export interface WorkspaceRow {
  id: string
  name: string
  slug: string
  status: 'active' | 'inactive'
  settings: string
  created_at: number
  updated_at: number
}

const Q = {
  all: stmt('SELECT * FROM workspaces'),
  byId: stmt('SELECT * FROM workspaces WHERE id = ?'),
  bySlug: stmt('SELECT * FROM workspaces WHERE slug = ?'),
  insert: stmt('INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)'),
  // only over the row it was made from: a change another instance made meanwhile is not written over
  update: stmt('UPDATE workspaces SET name = ?, status = ?, settings = ?, updated_at = ? WHERE id = ? AND name = ? AND status = ? AND settings = ?'),
  list: stmt('SELECT * FROM workspaces ORDER BY created_at DESC, id LIMIT ? OFFSET ?'),
  count: stmt('SELECT COUNT(*) AS n FROM workspaces'),
}

export class WorkspaceStore {
  constructor(private readonly db: Queries) {}

  /** Every workspace (there are few: the service holds them all in memory). */
  all() {
    return this.db.all<WorkspaceRow>(Q.all)
  }
  get(id: string, q: Queries = this.db) {
    return q.get<WorkspaceRow>(Q.byId, id)
  }
  bySlug(slug: string, q: Queries = this.db) {
    return q.get<WorkspaceRow>(Q.bySlug, slug)
  }
  async insert(tx: Queries, r: WorkspaceRow) {
    await tx.run(Q.insert, r.id, r.name, r.slug, r.status, r.settings, r.created_at, r.updated_at)
  }
  /** Write the row, if its name, status and settings are still those of `read` (the row it was made from); whether they were. */
  async update(tx: Queries, r: WorkspaceRow, read: WorkspaceRow): Promise<boolean> {
    return (await tx.run(Q.update, r.name, r.status, r.settings, r.updated_at, r.id, read.name, read.status, read.settings)) > 0
  }
  async list(limit: number, offset: number) {
    const [rows, count] = await Promise.all([this.db.all<WorkspaceRow>(Q.list, limit, offset), this.db.get<{ n: number }>(Q.count)])
    return { rows, total: count!.n }
  }
}
