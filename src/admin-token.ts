/**
 * The admin bearer token. CAPSTAN_ADMIN_TOKEN wins when set, and its SHA-256 replaces the stored
 * one: setting it is how the token is changed, and a token it replaced (a generated one that may
 * have leaked) does not come back when the variable is later taken away. Without it, the first
 * start generates one, stores only its SHA-256 and prints the token once; later starts reuse the
 * stored hash. The token itself is never stored or logged. Several instances starting at once on
 * one database agree: the first hash stored is the token, and only its maker prints it.
 */
import { type Engine, stmt } from './db/engine'
import { randomString } from './http/format'
import { sha256 } from './modules/keys/service'

const Q = {
  get: stmt("SELECT value FROM system_settings WHERE name = 'admin_token_sha256'"),
  set: stmt("INSERT INTO system_settings (name, value) VALUES ('admin_token_sha256', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value"),
  first: stmt("INSERT INTO system_settings (name, value) VALUES ('admin_token_sha256', ?) ON CONFLICT (name) DO NOTHING"),
}

export async function resolveAdminToken(engine: Engine, fromEnv: string | null): Promise<{ hash: Uint8Array; generated: string | null; unsaved?: boolean }> {
  const row = await engine.get<{ value: string }>(Q.get)
  if (fromEnv) {
    const hash = sha256(fromEnv)
    const hex = Buffer.from(hash).toString('hex')
    // written only when it changes; a start on a full disk still uses the variable's token
    if (row?.value !== hex) {
      try {
        await engine.write((tx) => tx.run(Q.set, hex))
      } catch {
        return { hash, generated: null, unsaved: true }
      }
    }
    return { hash, generated: null }
  }
  if (row) return { hash: new Uint8Array(Buffer.from(row.value, 'hex')), generated: null }
  const token = `adm_${randomString(40)}`
  const hash = sha256(token)
  if (await engine.write((tx) => tx.run(Q.first, Buffer.from(hash).toString('hex')))) return { hash, generated: token }
  // another instance made one first: that one is the token
  const stored = (await engine.get<{ value: string }>(Q.get))!
  return { hash: new Uint8Array(Buffer.from(stored.value, 'hex')), generated: null }
}
