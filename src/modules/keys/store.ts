/**
 * The API keys' store (docs/design/two-engines.md): each statement once, for SQLite and
 * PostgreSQL, read through the engine or — inside a write — through that write's `tx`.
 */
import { type Queries, type ReadsNow, stmt } from '../../db/engine'

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

const Q = {
  byKeyId: stmt('SELECT * FROM api_keys WHERE key_id = ?'),
  byId: stmt('SELECT * FROM api_keys WHERE id = ?'),
  insert: stmt('INSERT INTO api_keys (id, workspace_id, key_id, secret_hash, name, scopes, status, created_at, expires_at, revoked_at, allowed_ips) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)'),
  revoke: stmt("UPDATE api_keys SET status = 'revoked', revoked_at = ? WHERE id = ? AND status = 'active'"),
  remove: stmt('DELETE FROM api_keys WHERE id = ?'),
  // the later of the two (the written use may be newer than this instance's)
  used: stmt('UPDATE api_keys SET last_used_at = MAX(COALESCE(last_used_at, 0), ?) WHERE id = ?', 'UPDATE api_keys SET last_used_at = GREATEST(COALESCE(last_used_at, 0), $1) WHERE id = $2'),
  list: stmt('SELECT * FROM api_keys WHERE workspace_id = ? ORDER BY created_at DESC, id'),
}

export class KeyStore {
  /** `db`: the engine, for reads outside a write. */
  constructor(private readonly db: Queries & { readonly now?: ReadsNow | null }) {}

  /** Whether `byKeyIdNow` answers (the engine reads at once). */
  get answersNow() {
    return !!this.db.now
  }
  /** The key by its key id, read in this turn; undefined where the engine cannot (see Engine.now). */
  byKeyIdNow(keyId: string): KeyRow | null | undefined {
    return this.db.now ? this.db.now.get<KeyRow>(Q.byKeyId, keyId) : undefined
  }

  byKeyId(keyId: string, q: Queries = this.db) {
    return q.get<KeyRow>(Q.byKeyId, keyId)
  }
  get(id: string, q: Queries = this.db) {
    return q.get<KeyRow>(Q.byId, id)
  }
  async insert(tx: Queries, r: KeyRow) {
    await tx.run(Q.insert, r.id, r.workspace_id, r.key_id, r.secret_hash, r.name, r.scopes, r.status, r.created_at, r.expires_at, r.revoked_at, r.allowed_ips)
  }
  async revoke(tx: Queries, id: string, at: number) {
    return (await tx.run(Q.revoke, at, id)) > 0
  }
  async remove(tx: Queries, id: string) {
    await tx.run(Q.remove, id)
  }
  async used(tx: Queries, id: string, at: number) {
    await tx.run(Q.used, at, id)
  }
  listForWorkspace(workspaceId: string) {
    return this.db.all<KeyRow>(Q.list, workspaceId)
  }
}
