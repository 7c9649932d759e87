/**
 * Dashboard sessions: a signed cookie `capstan_session=<expiry>.<HMAC-SHA256>` keyed by the
 * admin token's hash, so changing the admin token ends every session. HttpOnly, SameSite=Strict,
 * Path=/admin, Secure when the request came over TLS. Requests authenticated by the cookie that
 * change something must also carry `X-Capstan-CSRF: 1` — a header a cross-site page cannot send
 * without a CORS preflight, which Capstan never grants.
 */
import { timingSafeEqual } from 'node:crypto'

export const SESSION_COOKIE = 'capstan_session'
export const SESSION_TTL_MS = 8 * 3_600_000

export class Sessions {
  constructor(
    private readonly key: Uint8Array,
    private readonly now: () => number = Date.now,
  ) {}

  private sign(expiry: number) {
    return new Bun.CryptoHasher('sha256', this.key).update(`capstan-session.${expiry}`).digest('base64url')
  }

  issue(): { value: string; maxAge: number } {
    const expiry = this.now() + SESSION_TTL_MS
    return { value: `${expiry}.${this.sign(expiry)}`, maxAge: SESSION_TTL_MS / 1000 }
  }

  valid(cookieHeader: string | null): boolean {
    const raw = cookieHeader
      ?.split(';')
      .map((c) => c.trim())
      .find((c) => c.startsWith(`${SESSION_COOKIE}=`))
      ?.slice(SESSION_COOKIE.length + 1)
    if (!raw) return false
    const [exp, sig] = raw.split('.')
    const expiry = Number(exp)
    if (!sig || !Number.isFinite(expiry) || expiry <= this.now()) return false
    const want = Buffer.from(this.sign(expiry))
    const got = Buffer.from(sig)
    return got.length === want.length && timingSafeEqual(got, want)
  }
}

/** The Set-Cookie value; `secure` when the request arrived over TLS. */
export function sessionCookie(value: string, maxAge: number, secure: boolean) {
  return `${SESSION_COOKIE}=${value}; Path=/admin; HttpOnly; SameSite=Strict; Max-Age=${maxAge}${secure ? '; Secure' : ''}`
}
