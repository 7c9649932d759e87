/** API key SQL. */
import type { Database } from 'bun:sqlite'

export interface KeyRow {
  id: string
  workspace_id: string
  key_id: string
  secret_hash: Uint8Array
  name: string
  scopes: string
  status: 'active' | 'revoked'
  created_at: number
  expires_at: number | null
  revoked_at: number | null
  /** JSON array of addresses and CIDR ranges the key may be used from; null: any */
  allowed_ips: string | null
  /** null until its first use is written (see KeyService.flushUse) */
  last_used_at?: number | null
}

export class KeyRepo {
  private byKeyId
  private byId
  private insertStmt
  private revokeStmt
  private deleteStmt
  private usedStmt
  private listStmt

  constructor(db: Database) {
    this.byKeyId = db.query<KeyRow, [string]>('SELECT * FROM api_keys WHERE key_id = ?')
    this.byId = db.query<KeyRow, [string]>('SELECT * FROM api_keys WHERE id = ?')
    this.insertStmt = db.query(
      'INSERT INTO api_keys (id, workspace_id, key_id, secret_hash, name, scopes, status, created_at, expires_at, revoked_at, allowed_ips) VALUES ($id, $workspace_id, $key_id, $secret_hash, $name, $scopes, $status, $created_at, $expires_at, $revoked_at, $allowed_ips)',
    )
    this.revokeStmt = db.query("UPDATE api_keys SET status = 'revoked', revoked_at = ? WHERE id = ? AND status = 'active'")
    this.deleteStmt = db.query('DELETE FROM api_keys WHERE id = ?')
    this.usedStmt = db.query('UPDATE api_keys SET last_used_at = MAX(COALESCE(last_used_at, 0), ?) WHERE id = ?')
    this.listStmt = db.query<KeyRow, [string]>('SELECT * FROM api_keys WHERE workspace_id = ? ORDER BY created_at DESC, id')
  }

  findByKeyId(keyId: string) {
    return this.byKeyId.get(keyId)
  }
  get(id: string) {
    return this.byId.get(id)
  }
  insert(row: KeyRow) {
    this.insertStmt.run(row as any)
  }
  revoke(id: string, at: number) {
    return this.revokeStmt.run(at, id).changes > 0
  }
  remove(id: string) {
    this.deleteStmt.run(id)
  }
  used(id: string, at: number) {
    this.usedStmt.run(at, id)
  }
  listForWorkspace(workspaceId: string) {
    return this.listStmt.all(workspaceId)
  }
}
