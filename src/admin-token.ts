/**
 * The admin bearer token. CAPSTAN_ADMIN_TOKEN wins when set. Otherwise the first start generates
 * one, stores only its SHA-256 in the database and prints the token once; later starts reuse the
 * stored hash. The token itself is never stored or logged.
 */
import type { Database } from 'bun:sqlite'
import { randomString } from './http/format'
import { sha256 } from './modules/keys/service'

export function resolveAdminToken(db: Database, fromEnv: string | null): { hash: Uint8Array; generated: string | null } {
  if (fromEnv) return { hash: sha256(fromEnv), generated: null }
  const row = db.query<{ value: string }, []>("SELECT value FROM system_settings WHERE name = 'admin_token_sha256'").get()
  if (row) return { hash: new Uint8Array(Buffer.from(row.value, 'hex')), generated: null }
  const token = `adm_${randomString(40)}`
  const hash = sha256(token)
  db.query("INSERT INTO system_settings (name, value) VALUES ('admin_token_sha256', ?)").run(Buffer.from(hash).toString('hex'))
  return { hash, generated: token }
}
