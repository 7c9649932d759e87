/** Connected numbers on the store seam (docs/design/two-engines.md). */
import { type Queries, stmt } from '../../db/engine'
import type { DriverName } from './model'

export interface ConnectionRow {
  id: string
  workspace_id: string
  phone: string
  name: string | null
  driver: DriverName
  status: 'online' | 'offline'
  status_reason: string | null
  receives: number
  config: string
  /** JSON Warmup (scheduler/warmup.ts), or null */
  warmup: string | null
  created_at: number
  updated_at: number
  deleted_at: number | null
}

const Q = {
  insert: stmt(
    'INSERT INTO connections (id, workspace_id, phone, name, driver, status, status_reason, receives, config, warmup, created_at, updated_at, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)',
  ),
  // only over the row it was made from (each instance keeps its numbers in memory): a change
  // another instance made meanwhile is not written over
  update: stmt(
    'UPDATE connections SET name = ?, status = ?, status_reason = ?, config = ?, warmup = ?, updated_at = ? WHERE id = ? AND name IS ? AND status = ? AND status_reason IS ? AND config = ? AND warmup IS ?',
    'UPDATE connections SET name = $1, status = $2, status_reason = $3, config = $4, warmup = $5, updated_at = $6 WHERE id = $7 AND name IS NOT DISTINCT FROM $8 AND status = $9 AND status_reason IS NOT DISTINCT FROM $10 AND config = $11 AND warmup IS NOT DISTINCT FROM $12',
  ),
  remove: stmt('UPDATE connections SET deleted_at = ?, updated_at = ? WHERE id = ?'),
  all: stmt('SELECT * FROM connections WHERE deleted_at IS NULL ORDER BY created_at, id'),
  byPhone: stmt('SELECT * FROM connections WHERE workspace_id = ? AND phone = ? AND deleted_at IS NULL'),
  byId: stmt('SELECT * FROM connections WHERE id = ?'),
}

export class ConnectionStore {
  /** `db`: the engine, for reads outside a write. */
  constructor(private readonly db: Queries) {}

  async insert(tx: Queries, r: ConnectionRow) {
    await tx.run(Q.insert, r.id, r.workspace_id, r.phone, r.name, r.driver, r.status, r.status_reason, r.receives, r.config, r.warmup, r.created_at, r.updated_at)
  }
  /** Write the row, if what it may change is still as in `read` (the row it was made from); whether it was. */
  async update(tx: Queries, r: ConnectionRow, read: ConnectionRow): Promise<boolean> {
    return (await tx.run(Q.update, r.name, r.status, r.status_reason, r.config, r.warmup, r.updated_at, r.id, read.name, read.status, read.status_reason, read.config, read.warmup)) > 0
  }
  async markDeleted(tx: Queries, id: string, at: number) {
    await tx.run(Q.remove, at, at, id)
  }
  /** Every number not removed, oldest first. */
  all() {
    return this.db.all<ConnectionRow>(Q.all)
  }
  /** The row, removed or not. */
  byId(id: string) {
    return this.db.get<ConnectionRow>(Q.byId, id)
  }
  byPhone(workspaceId: string, phone: string, q: Queries = this.db) {
    return q.get<ConnectionRow>(Q.byPhone, workspaceId, phone)
  }
}
