/**
 * The caller, loaded once per request, in the order of CONTRACT §1:
 * failed-auth limit for the client IP → bearer (401) → workspace active (403) → per-key limit
 * (429, counting every authenticated request) → scope (403) → unreadable body (400).
 *
 * An /api/v1 route declares its operation once — `{ api: { summary, tag, scope: 'contacts:read',
 * ... } }` — which is both its OpenAPI entry and the scope enforced here. Admin routes declare
 * `{ admin: true }`; a wrong admin token counts toward the same per-IP failed-auth limit.
 */
import { timingSafeEqual } from 'node:crypto'
import { Elysia } from 'elysia'
import type { Config } from '../config'
import type { Operator } from '../modules/audit/repo'
import type { Scope } from '../modules/keys/model'
import { type Authenticated, type AuthenticatedKey, type KeyService, sha256 } from '../modules/keys/service'
import type { WorkspaceRow } from '../modules/workspaces/store'
import { UNREADABLE } from './body'
import type { ClientAddresses } from './client'
import { inRanges, limitName } from './ip-ranges'
import { UUID } from './schema'
import { ApiError, adminUnauthenticated, authRateLimited, badRequest, insufficientScope, rateLimited, unauthenticated, workspaceUnavailable } from './errors'
import { WindowCounter, type Windows } from './limits'
import { noteOf } from './log'
import { type OpOptions, op } from './docs'
import type { Sessions } from './session'

/**
 * A UUID in the path is read case-insensitively (RFC 9562) and ids are stored lower-case, so
 * `/messages/01A1FF31-…` finds the same message as `/messages/01a1ff31-…`.
 */
function lowerPathId(params: Record<string, string> | undefined) {
  const id = params?.id
  if (id !== undefined && UUID.test(id) && id !== id.toLowerCase()) params!.id = id.toLowerCase()
}

export interface Caller {
  key: AuthenticatedKey
  workspace: WorkspaceRow
}

const BEARER = /^Bearer +(\S+) *$/i

/** The token of an `Authorization: Bearer <token>` header; the plain form is read without a regex. */
function bearerToken(header: string | null): string | null {
  if (header === null) return null
  if (header.startsWith('Bearer ') && header.indexOf(' ', 7) === -1 && header.length > 7) return header.slice(7)
  return BEARER.exec(header)?.[1] ?? null
}

/** The dashboard's sign-in: its credential comes in the body. */
export const SIGN_IN = '/admin/session'
/** The User-Agent the CLI sends (src/cli.ts): the audit log names its changes `cli`. */
const CLI_AGENT = /^capstan-cli\//
const operatorAddress = (ip: string) => (ip === 'unknown' ? null : ip)

const csrfFailed = () => new ApiError(403, 'csrf_failed', 'This request needs the X-Capstan-CSRF header.')

/**
 * Sent on every API, admin and error response (set where those responses build their headers).
 * JSON responses need no frame or referrer policy; the HTML pages (docs) send those themselves.
 */
export const SECURITY_HEADERS = {
  'x-content-type-options': 'nosniff',
  'cache-control': 'no-store',
}

/** A request's client address (see ClientAddresses.ip). */
export type ClientAddress = (request: Request) => string

export interface AuthOptions {
  config: Config
  clients: ClientAddresses
  keys: KeyService
  /** SHA-256 of the admin token. */
  /** The admin token's hash, read at each use (it follows the stored one: see AdminToken). */
  adminToken: { readonly hash: Uint8Array }
  sessions: Sessions
  /** The limits' windows when several instances count together (else in memory). */
  windows?: { failures: Windows; perKey: Windows }
}

export function authPlugin({ config, clients, keys, adminToken, sessions, windows }: AuthOptions) {
  const ipOf = (request: Request) => clients.ip(request)
  const failures: Windows = windows?.failures ?? new WindowCounter(config.authFailLimit, config.rateWindowMs)
  const perKey: Windows = windows?.perKey ?? new WindowCounter(config.keyRateLimit, config.rateWindowMs)
  const limitHeader = String(config.keyRateLimit)

  const matches = (token: unknown, hash: Uint8Array) => typeof token === 'string' && timingSafeEqual(sha256(token), hash)
  const isAdminToken = (token: unknown) => matches(token, adminToken.hash)
  /**
   * A failed credential from the request's client: counted against its address (an IPv6 client by
   * its /64); 429 in place of the 401 while that address is over the failed-auth limit.
   */
  const failed = (request: Request, ip: string = ipOf(request)): void | Promise<void> => {
    const name = limitName(ip)
    if (failures instanceof WindowCounter) {
      if (failures.exceeded(name)) throw authRateLimited()
      failures.hit(name)
      return
    }
    // counted together (instances sharing the database): one statement counts and answers, so
    // failures arriving at once on several instances are each counted once
    return Promise.resolve(failures.hit(name)).then((left) => {
      if (left < 0) throw authRateLimited()
    })
  }
  /** `failed`, then `error` (or the 429 in its place). */
  const refuse = (request: Request, error: ApiError, ip?: string): never | Promise<never> => {
    const counted = failed(request, ip)
    if (counted)
      return counted.then(() => {
        throw error
      })
    throw error
  }
  /** Before a body is read where the credential is in the body (sign-in): 429 past the limit. */
  const refuseIfOverLimit = async (request: Request) => {
    if (failures.active() && (await failures.exceeded(limitName(ipOf(request))))) throw authRateLimited()
  }
  /**
   * A presented token against a stored hash. A token that verifies is accepted even from an
   * address over the failed-auth limit (spec §8: the limit is for invalid bearers, so one abuser
   * behind a shared address locks nobody out); one that does not is counted, and 429 past it.
   */
  const checkToken = async (request: Request, token: unknown, hash: Uint8Array): Promise<boolean> => {
    if (matches(token, hash)) return true
    await failed(request)
    return false
  }
  /** Dashboard sign-in: the admin token. */
  const checkAdminToken = (request: Request, token: unknown) => checkToken(request, token, adminToken.hash)
  const metricsTokenHash = config.metricsToken === null ? null : sha256(config.metricsToken)
  /** GET /metrics: `Authorization: Bearer <CAPSTAN_METRICS_TOKEN>`, else 401 (429 past the limit). */
  const checkMetricsToken = async (request: Request) => {
    if (metricsTokenHash === null || !(await checkToken(request, bearerToken(request.headers.get('authorization')), metricsTokenHash))) {
      throw new ApiError(401, 'unauthenticated', 'A valid metrics token is required.')
    }
  }

  /**
   * The API key a request presents; without a valid one 401, counted against the client address
   * (429 in its place while the address is over the failed-auth limit). A valid key is served
   * whatever its address's count: the address is only looked at for a key with `allowed_ips`.
   */
  const keyHolder = (request: Request): Authenticated | Promise<Authenticated> => {
    const token = bearerToken(request.headers.get('authorization'))
    const found = token ? keys.authenticate(token) : null
    // a key in memory is answered at once; another is read from the database first
    return found instanceof Promise ? found.then((f) => held(request, f)) : held(request, found)
  }
  const held = (request: Request, found: Authenticated | null): Authenticated | Promise<never> => {
    if (!found) return refuse(request, unauthenticated())
    // a key limited to some addresses is, from any other, no valid key (the same 401, counted)
    if (found.key.allowedFrom !== null) {
      const from = ipOf(request)
      if (!inRanges(found.key.allowedFrom, from)) return refuse(request, unauthenticated(), from)
    }
    return found
  }

  /** How an operator signed a request — the admin token, or a dashboard session — else 429/401 like keyHolder. */
  const operatorVia = async (request: Request): Promise<'token' | 'session'> => {
    const header = request.headers.get('authorization')
    if (isAdminToken(bearerToken(header))) return 'token'
    if (!header && (await sessions.valid(request.headers.get('cookie')))) return 'session'
    return refuse(request, adminUnauthenticated())
  }

  /**
   * Before a body is read: a request to the API or the admin API without valid credentials is
   * refused here, so nobody without them makes the server read and hold a body (up to 64 MiB of
   * multipart) only to be refused after it. The route checks again, in full, once the body is in.
   * Returns the key and workspace of an /api/v1 request (null for any other).
   */
  const admitBody = async (request: Request, path: string) => {
    if (path.startsWith('/api/v1/')) return keyHolder(request)
    if (path.startsWith('/admin/api/')) await operatorVia(request)
    else if (path === SIGN_IN) await refuseIfOverLimit(request)
    return null
  }

  /**
   * The API caller for a route that needs `scope` (see the order of checks above). Where every key
   * is answered in the same turn (the engine reads at once: SQLite) the resolve is synchronous —
   * Elysia awaits a resolve it finds async on every request, which cost GET /workspace ~30% of its
   * rate; elsewhere (PostgreSQL) it is async and waits for a key not yet in memory. Elysia tells
   * the two apart by the function's text: the synchronous one must not call anything right after
   * `return` or `=>`. Both name the context's fields they read in their parameters: from those
   * Elysia decides what to prepare for a request (an undestructured context costs ~20%).
   */
  const resolveCaller = (scope: Scope) =>
    keys.answersAtOnce
      ? function resolve({ request, set, body, params }: ResolveContext): { caller: Caller } {
          const found = admitted(set, keyHolder(request) as Authenticated)
          const left = perKey.hit(found.key.id) as number
          return { caller: callerOf(scope, set, body, params, found, left) }
        }
      : async function resolve({ request, set, body, params }: ResolveContext): Promise<{ caller: Caller }> {
          const found = admitted(set, await keyHolder(request))
          const left = await perKey.hit(found.key.id)
          return { caller: callerOf(scope, set, body, params, found, left) }
        }
  type ResolveContext = { request: Request; set: { headers: Record<string, string | number> }; body: unknown; params?: Record<string, string> }
  /** The key's workspace noted for the log; 403 for an inactive one (before its key's limit counts). */
  const admitted = (set: ResolveContext['set'], found: Authenticated): Authenticated => {
    const note = noteOf(set)
    note.workspaceId = found.workspace.id
    note.keyId = found.key.keyId
    if (found.workspace.status !== 'active') throw workspaceUnavailable()
    return found
  }
  const callerOf = (scope: Scope, set: ResolveContext['set'], body: unknown, params: Record<string, string> | undefined, found: Authenticated, left: number): Caller => {
    // a fresh object of one fixed shape (nothing has set a header yet): cheaper for the engine,
    // and for Bun to turn into response headers, than adding to Elysia's null-prototype one
    set.headers = {
      ...SECURITY_HEADERS,
      'x-ratelimit-limit': limitHeader,
      'x-ratelimit-remaining': String(left > 0 ? left : 0),
      // filled in as the response is mapped (server.ts); named here so the object keeps one shape
      'x-request-id': '',
    } as typeof set.headers
    if (left < 0) throw rateLimited()
    if (!found.key.scopes.has(scope)) throw insufficientScope()
    if (body === UNREADABLE) throw badRequest()
    lowerPathId(params)
    return found
  }

  const plugin = new Elysia({ name: 'capstan-auth' }).decorate('checkAdminToken', checkAdminToken).macro({
    /**
     * An /api/v1 route, stated once: `api: { summary, tag, scope, ... }` is the OpenAPI operation
     * (see `op`) and the scope this route enforces — the two cannot drift apart.
     */
    api: (operation: OpOptions & { scope: Scope }) => ({ detail: op(operation), resolve: resolveCaller(operation.scope) }),
    admin: (enabled: boolean) => ({
      /** `operator`: who the audit log names for the changes this request makes (modules/audit). */
      async resolve({ request, body, set, params }): Promise<{ operator: Operator | null }> {
        lowerPathId(params as Record<string, string> | undefined)
        if (!enabled) return { operator: null }
        noteOf(set)
        Object.assign(set.headers, SECURITY_HEADERS)
        const via = await operatorVia(request)
        // the dashboard's session cookie needs the CSRF header on anything that changes state
        if (via === 'session' && request.method !== 'GET' && request.method !== 'HEAD' && request.headers.get('x-capstan-csrf') !== '1') throw csrfFailed()
        if (body === UNREADABLE) throw badRequest()
        return { operator: { via: via === 'session' ? 'dashboard' : CLI_AGENT.test(request.headers.get('user-agent') ?? '') ? 'cli' : 'admin_token', ip: operatorAddress(ipOf(request)) } }
      },
    }),
  })
  // the body-parsing step (server.ts) is not a route of this plugin: it gets the checks as such —
  // the early one, and a route's full one for refusing a body it will not read
  return Object.assign(plugin, { admitBody, resolveCaller, checkMetricsToken })
}
