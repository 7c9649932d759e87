/**
 * Dashboard sessions: a cookie `capstan_session=<expiry>.<id>.<HMAC-SHA256>`. The random id is
 * held server-side (its SHA-256 in `dashboard_sessions`), so signing out ends the session for
 * every copy of the cookie; the HMAC is keyed by the admin token's hash, so changing the admin
 * token ends every session (on every instance: they follow the stored token, see AdminToken).
 * HttpOnly, SameSite=Strict, Path=/admin, Secure when the request came over TLS. Requests
 * authenticated by the cookie that change something must also carry `X-Capstan-CSRF: 1` — a
 * header a cross-site page cannot send without a CORS preflight, which Capstan never grants.
 */
import { timingSafeEqual } from 'node:crypto'
import { type Engine, stmt } from '../db/engine'
import { randomString } from './format'

export const SESSION_COOKIE = 'capstan_session'
export const SESSION_TTL_MS = 8 * 3_600_000

/** What is stored of a session id: its SHA-256, so a copy of the database holds no live cookie. */
const storedId = (id: string) => new Bun.CryptoHasher('sha256').update(id).digest('hex')

const Q = {
  live: stmt('SELECT 1 AS one FROM dashboard_sessions WHERE id = ? AND expires_at > ?'),
  insert: stmt('INSERT INTO dashboard_sessions (id, expires_at) VALUES (?, ?)'),
  remove: stmt('DELETE FROM dashboard_sessions WHERE id = ?'),
  sweep: stmt('DELETE FROM dashboard_sessions WHERE expires_at <= ?'),
}

export class Sessions {
  constructor(
    /** The admin token's hash, read at each use. */
    private readonly token: { readonly hash: Uint8Array },
    private readonly engine: Engine,
    private readonly now: () => number = Date.now,
  ) {}

  private sign(expiry: number, id: string) {
    return new Bun.CryptoHasher('sha256', this.token.hash).update(`capstan-session.${expiry}.${id}`).digest('base64url')
  }

  /** A new session, stored (durably) before its cookie value is returned. */
  async issue(): Promise<{ value: string; maxAge: number }> {
    const now = this.now()
    const expiry = now + SESSION_TTL_MS
    const id = randomString(43)
    await this.engine.write(async (tx) => {
      await tx.run(Q.sweep, now)
      await tx.run(Q.insert, storedId(id), expiry)
    })
    return { value: `${expiry}.${id}.${this.sign(expiry, id)}`, maxAge: SESSION_TTL_MS / 1000 }
  }

  /** The session id of a well-formed, correctly signed, unexpired cookie; null otherwise. */
  private sessionId(cookieHeader: string | null): string | null {
    const raw = cookieHeader
      ?.split(';')
      .map((c) => c.trim())
      .find((c) => c.startsWith(`${SESSION_COOKIE}=`))
      ?.slice(SESSION_COOKIE.length + 1)
    if (!raw) return null
    const [exp, id, sig, extra] = raw.split('.')
    const expiry = Number(exp)
    if (!id || !sig || extra !== undefined || !Number.isFinite(expiry) || expiry <= this.now()) return null
    const want = Buffer.from(this.sign(expiry, id))
    const got = Buffer.from(sig)
    return got.length === want.length && timingSafeEqual(got, want) ? id : null
  }

  /** Whether the Cookie header holds a live session (signed, unexpired, not signed out). */
  async valid(cookieHeader: string | null): Promise<boolean> {
    const id = this.sessionId(cookieHeader)
    return id !== null && (await this.engine.get(Q.live, storedId(id), this.now())) !== null
  }

  /** Sign out: the session in the Cookie header (if any) ends for every copy of the cookie. */
  async end(cookieHeader: string | null): Promise<void> {
    const id = this.sessionId(cookieHeader)
    if (id !== null) await this.engine.write((tx) => tx.run(Q.remove, storedId(id)))
  }
}

/** The Set-Cookie value; `secure` when the request arrived over TLS. */
export function sessionCookie(value: string, maxAge: number, secure: boolean) {
  return `${SESSION_COOKIE}=${value}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${secure ? '; Secure' : ''}`
}
