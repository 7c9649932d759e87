/** Connection SQL. */
import type { DriverName } from './model'
import type { Database } from 'bun:sqlite'

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

export class ConnectionRepo {
  private insertStmt
  private updateStmt
  private deleteStmt
  private allStmt
  private byPhoneStmt

  constructor(db: Database) {
    this.insertStmt = db.query(
      'INSERT INTO connections (id, workspace_id, phone, name, driver, status, status_reason, receives, config, warmup, created_at, updated_at, deleted_at) VALUES ($id, $workspace_id, $phone, $name, $driver, $status, $status_reason, $receives, $config, $warmup, $created_at, $updated_at, NULL)',
    )
    this.updateStmt = db.query('UPDATE connections SET name = $name, status = $status, status_reason = $status_reason, config = $config, warmup = $warmup, updated_at = $updated_at WHERE id = $id')
    this.deleteStmt = db.query('UPDATE connections SET deleted_at = ?, updated_at = ? WHERE id = ?')
    this.allStmt = db.query<ConnectionRow, []>('SELECT * FROM connections WHERE deleted_at IS NULL ORDER BY created_at, id')
    this.byPhoneStmt = db.query<ConnectionRow, [string, string]>('SELECT * FROM connections WHERE workspace_id = ? AND phone = ? AND deleted_at IS NULL')
  }

  insert(row: ConnectionRow) {
    const { deleted_at: _, ...rest } = row
    this.insertStmt.run(rest as any)
  }
  update(row: ConnectionRow) {
    this.updateStmt.run({ id: row.id, name: row.name, status: row.status, status_reason: row.status_reason, config: row.config, warmup: row.warmup, updated_at: row.updated_at } as any)
  }
  markDeleted(id: string, at: number) {
    this.deleteStmt.run(at, at, id)
  }
  all() {
    return this.allStmt.all()
  }
  byPhone(workspaceId: string, phone: string) {
    return this.byPhoneStmt.get(workspaceId, phone)
  }
}
