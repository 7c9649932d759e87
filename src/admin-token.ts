/**
 * The admin bearer token. CAPSTAN_ADMIN_TOKEN wins when set, and its SHA-256 replaces the stored
 * one: setting it is how the token is changed, and a token it replaced (a generated one that may
 * have leaked) does not come back when the variable is later taken away. Without it, the first
 * start generates one, stores only its SHA-256 and prints the token once; later starts reuse the
 * stored hash. The token itself is never stored or logged. Several instances starting at once on
 * one database agree: the first hash stored is the token, and only its maker prints it. Instances
 * sharing a database follow the stored hash (`AdminToken`): one started with a new
 * CAPSTAN_ADMIN_TOKEN announces it, and every other takes it within a moment — a token changed
 * because it leaked stops working everywhere, and a dashboard session is valid on every instance.
 */
import { type Engine, stmt } from './db/engine'
import { randomString } from './http/format'
import { sha256 } from './modules/keys/service'

/** What an instance announces when it stores a new admin token (services.ts `heard`). */
export const ANNOUNCED = 'admin-token:'

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
    // written only when it changes (and then announced to the other instances); a start on a full
    // disk still uses the variable's token
    if (row?.value !== hex) {
      try {
        await engine.write(async (tx) => {
          await tx.run(Q.set, hex)
          await engine.announce(tx, ANNOUNCED)
        })
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

/**
 * The admin token's hash this instance checks bearers and signs dashboard sessions with. It
 * follows the stored one: another instance started with another CAPSTAN_ADMIN_TOKEN replaces it
 * here too (and this instance says so when that is not its own variable's token).
 */
export class AdminToken {
  constructor(
    public hash: Uint8Array,
    private readonly engine: Engine,
    /** The hash of this instance's CAPSTAN_ADMIN_TOKEN, when it has one. */
    private readonly own: Uint8Array | null,
    private readonly log: { warn(msg: string, fields?: Record<string, unknown>): void },
  ) {}

  /** Read the stored hash again (an instance announced a new one, or this one may have missed it). */
  async reload(): Promise<void> {
    const row = await this.engine.get<{ value: string }>(Q.get)
    if (!row) return
    const stored = new Uint8Array(Buffer.from(row.value, 'hex'))
    if (Buffer.from(stored).equals(Buffer.from(this.hash))) return
    this.hash = stored
    if (this.own && !Buffer.from(this.own).equals(Buffer.from(stored))) {
      this.log.warn("another instance stored its CAPSTAN_ADMIN_TOKEN as the admin token: this instance now takes that token, not the one it was started with — give every instance the same CAPSTAN_ADMIN_TOKEN")
    }
  }
}
