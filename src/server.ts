/**
 * Composes the Elysia app: /api/v1, /admin/api, health, the OpenAPI document and its UI.
 * Owns the parts every route shares: the one body parser, the 413 guard, the error mapper and
 * the request log line.
 */
import { openapi } from '@elysiajs/openapi'
import { Elysia } from 'elysia'
import { dashboardAdminRoutes } from './dashboard/admin-views'
import { adminOps } from './http/workspace-ops'
import { dashboardRoutes } from './dashboard/routes'
import { databaseState } from './db/engine'
import { diskSpace } from './disk'
import { Metrics, RequestDurations, ResponseCounts } from './metrics'
import type { Scope } from './modules/keys/model'
import { fileTooLarge } from './modules/media/service'
import { docsUi } from './docs/ui'
import { handleCloudApiWebhook } from './network/cloud-api-webhook'
import { parseBody, TOO_LARGE } from './http/body'
import { SECURITY_HEADERS, SIGN_IN, authPlugin } from './http/auth'
import { AllowedMethods, methodNotAllowed } from './http/methods'
import { ClientAddresses } from './http/client'
import { ipRanges } from './http/ip-ranges'
import { SharedWindows, WindowCounter } from './http/limits'
import { DOC_COMPONENTS, DOC_LICENSE, adminDocument, hidden } from './http/docs'
import { ApiError, diskFull, payloadTooLarge, toErrorResponse } from './http/errors'
import { noteOf, peekNote, requestIdOf } from './http/log'
import { Sessions } from './http/session'
import { backupAdminRoutes } from './modules/backups/routes'
import { campaignApiRoutes, campaignOps } from './modules/campaigns/routes'
import { connectionAdminRoutes } from './modules/connections/routes'
import { contactAdminRoutes, contactApiRoutes } from './modules/contacts/routes'
import { groupApiRoutes } from './modules/groups/routes'
import { mediaApiRoutes } from './modules/media/routes'
import { messageApiRoutes } from './modules/messages/routes'
import { WEBHOOK_DOCS } from './modules/webhooks/docs'
import { webhookAdminRoutes } from './modules/webhooks/routes'
import { keyAdminRoutes } from './modules/keys/routes'
import { suppressionAdminRoutes } from './modules/suppressions/routes'
import { templateApiRoutes, templateOps } from './modules/templates/routes'
import { workspaceAdminRoutes, workspaceApiRoutes } from './modules/workspaces/routes'
import type { Services } from './services'
import { VERSION } from './version'

export interface ServerParts {
  svc: Services
  /** The admin token's hash, read at each use (see AdminToken). */
  adminToken: { readonly hash: Uint8Array }
  /** Extra readiness probes, e.g. the malware scanner: name → reachable? */
  probes?: Record<string, () => Promise<boolean>>
  /** Filled with what must run once the server stopped taking requests, before the database closes. */
  closers?: (() => Promise<void>)[]
}


/**
 * The routes that take a file (field `file`), with the scope spec §5 gives them. Their bodies are
 * held to the workspace's media max_bytes plus FORM_ROOM for the other fields (a 4096-character
 * body, ids, template values: far less).
 */
const UPLOADS = new Map<string, Scope>([
  ['/api/v1/media', 'messages:write'],
  ['/api/v1/messages', 'messages:write'],
])
const FORM_ROOM = 1024 * 1024
/** The route logged for a path no route matched (the path itself is never logged). */
const UNMATCHED = '(unmatched)'
/** Sent on responses to clients that came over TLS (through a trusted proxy): a year. */
const HSTS = 'max-age=31536000'
/** The dashboard's sign-in body: a token of at most a few hundred bytes, as JSON or a form. */
const SIGN_IN_MAX_BYTES = 4096
const signInForm = () => new ApiError(415, 'unsupported_media_type', 'Sign in with a JSON or urlencoded body.')

/** The body size a request declares (Content-Length; 0 when absent), read before the body is. */
const declaredLength = (request: Request) => Number(request.headers.get('content-length') ?? 0)

export function buildApp({ svc, adminToken, probes = {}, closers = [] }: ServerParts) {
  const { config } = svc.deps
  const sessions = new Sessions(adminToken, svc.deps.engine, () => svc.deps.clock.now())
  let root: Elysia<any, any, any, any, any, any, any> | null = null
  const clients = new ClientAddresses(config.trustedProxies.length ? ipRanges(config.trustedProxies) : null, (request) => root?.server?.requestIP(request) ?? null)
  const ipOf = (request: Request) => clients.ip(request)
  // instances sharing a database count the limits together there (60 a minute means 60 in all)
  const { engine } = svc.deps
  const windows: { failures: SharedWindows; perKey: SharedWindows } | undefined = engine.shared
    ? { failures: new SharedWindows(engine, 'auth', config.authFailLimit, config.rateWindowMs), perKey: new SharedWindows(engine, 'key', config.keyRateLimit, config.rateWindowMs, Date.now, true) }
    : undefined
  // places taken ahead in the per-key windows and not used go back to their windows at a stop
  if (windows) closers.push(() => windows.perKey.close())
  const auth = authPlugin({ config, clients, keys: svc.keys, adminToken, sessions, windows })
  const log = svc.log
  // bad signatures on Meta's webhooks count against the failed-auth limit too (by number and address)
  const webhookGuard = { failures: windows?.failures ?? new WindowCounter(config.authFailLimit, config.rateWindowMs), clientIp: ipOf }
  const responses = new ResponseCounts()
  const durations = new RequestDurations()
  const metrics = new Metrics(svc, responses, probes, durations)
  const fromProxy = clients.proxied ? (request: Request) => clients.viaProxy(request) : null
  const requestId = (request: Request, set: object) => requestIdOf(request, set, fromProxy)
  const logRequest = (request: Request, set: object, route: string, status: number, id: string) => {
    responses.add(status)
    const note = peekNote(set)
    if (note) durations.observe(route || UNMATCHED, status, (performance.now() - note.start) / 1000)
    if (!log.enabled('info')) return
    // the route's pattern, never the path: a path can hold a phone number (…/suppressions/{phone})
    log.request(request.method, route || UNMATCHED, status, note, id)
  }

  const api = new Elysia({ prefix: '/api/v1' })
    .use(workspaceApiRoutes(svc, auth))
    .use(contactApiRoutes(svc, auth))
    .use(messageApiRoutes(svc, auth))
    .use(mediaApiRoutes(svc, auth))
    .use(groupApiRoutes(svc, auth))
    .use(templateApiRoutes(svc, auth))
    .use(campaignApiRoutes(svc, auth))

  const admin = new Elysia({ prefix: '/admin/api' })
    .use(workspaceAdminRoutes(svc, auth))
    .use(keyAdminRoutes(svc, auth))
    .use(suppressionAdminRoutes(svc, auth))
    .use(contactAdminRoutes(svc, auth))
    .use(connectionAdminRoutes(svc, auth))
    .use(webhookAdminRoutes(svc, auth))
    .use(dashboardAdminRoutes(svc, auth))
    // templates and campaigns as the API has them, for the workspace in the path (the dashboard's)
    .use(adminOps(svc, auth, [...templateOps(svc), ...campaignOps(svc)]))
    .use(backupAdminRoutes(svc, auth))

  // Bun's own hard cap sits well above ours, so a declared Content-Length over our limit gets the
  // JSON 413 from the parse step (answered before the body is read); only bodies beyond twice the
  // limit meet Bun's. There is deliberately no onRequest hook: it would put an await in front of
  // every route, and everything it could do has a cheaper place below.
  // reusePort off (Elysia turns it on): a second Capstan started on the same port must fail, not
  // silently share the port and split the traffic between two processes and two databases.
  let adminDoc: Record<string, unknown> | undefined
  const allowed = new AllowedMethods(() => root?.routes ?? [])
  root = new Elysia({ serve: { maxRequestBodySize: config.maxUploadBytes * 2, idleTimeout: 30, reusePort: false, development: false } })
  return root
    .onError(({ code, error, set, request, route }) => {
      // a known path asked with a method it does not answer: 405 naming the ones it does
      const allow = code === 'NOT_FOUND' ? allowed.of(new URL(request.url).pathname) : []
      const { status, body } = allow.length ? { status: 405, body: methodNotAllowed().toBody() } : toErrorResponse(error, code)
      if (allow.length) set.headers['allow'] = allow.join(', ')
      if (status === 500) svc.log.error('request failed', { method: request.method, route: route || UNMATCHED, request_id: requestId(request, set), error: String((error as Error)?.stack ?? error) })
      else if (diskFull(error)) svc.log.error('request refused: the disk of the data directory is full', { method: request.method, route: route || UNMATCHED, request_id: requestId(request, set) })
      set.status = status
      Object.assign(set.headers, SECURITY_HEADERS)
      set.headers['content-type'] = 'application/json; charset=utf-8'
      if (status === 413) set.headers['connection'] = 'close'
      return body
    })
    // the request log line, written as the response is mapped — errors and unknown routes
    // included. It hands the value back unchanged: Elysia's not-found path uses what this returns.
    // It also stamps every response with the request's id (and, reached over TLS through a trusted
    // proxy, HSTS).
    .mapResponse(({ request, route, set, responseValue }) => {
      const id = requestId(request, set)
      const hsts = fromProxy !== null && clients.overTls(request)
      if (responseValue instanceof Response) {
        responseValue.headers.set('x-request-id', id)
        if (hsts) responseValue.headers.set('strict-transport-security', HSTS)
        logRequest(request, set, route, responseValue.status, id)
      } else {
        set.headers['x-request-id'] = id
        if (hsts) set.headers['strict-transport-security'] = HSTS
        logRequest(request, set, route, typeof set.status === 'number' ? set.status : 200, id)
      }
      return responseValue as Response
    })
    // network webhooks need the raw body (their signatures cover it): no body parsing here
    .all('/hooks/whatsapp/:id', ({ request, params }) => {
      if (declaredLength(request) > config.maxJsonBytes) throw payloadTooLarge()
      return handleCloudApiWebhook(request, params.id, svc, webhookGuard)
    }, { parse: 'none', detail: hidden })
    .onParse(async ({ request, contentType, set, path }) => {
      noteOf(set)
      // 413 before the body is read when its declared length is over the limit for its type
      const multipart = contentType.toLowerCase().startsWith('multipart/form-data')
      const signIn = path === SIGN_IN
      // the dashboard's sign-in takes its token in the body, so nothing can be checked before the
      // body is read: an address over the failed-auth limit is refused first, and the body is held
      // to a few KiB of JSON or form (nobody signs in with a file)
      if (signIn) {
        try {
          await auth.admitBody(request, path)
          if (multipart) throw signInForm()
        } catch (e) {
          set.headers['connection'] = 'close'
          throw e
        }
      }
      const max = signIn ? SIGN_IN_MAX_BYTES : multipart ? config.maxUploadBytes : config.maxJsonBytes
      if (declaredLength(request) > max) throw payloadTooLarge()
      // and 401 (or 429) before it is read when the request has no valid credentials; the unread
      // rest of the body means the connection cannot carry another request
      let holder
      try {
        holder = await auth.admitBody(request, path)
      } catch (e) {
        set.headers['connection'] = 'close'
        throw e
      }
      // an upload is read only as far as its workspace takes files: one declared (or, chunked,
      // running) longer than max_bytes plus room for the form's other fields gets the 422 a
      // too-large file gets, without the server reading and holding the rest
      const scope = multipart && holder && request.method === 'POST' ? UPLOADS.get(path) : undefined
      const fileMax = scope ? svc.media.maxFileBytes(holder!.workspace) : null
      const limit = fileMax === null ? max : Math.min(max, fileMax + FORM_ROOM)
      const refuseFile = async (): Promise<never> => {
        try {
          // the route's own checks first (403, 429, counted once), as if the body had been read
          await auth.resolveCaller(scope!)({ request, set, body: undefined })
        } finally {
          set.headers['connection'] = 'close'
        }
        throw fileTooLarge('file', fileMax!)
      }
      if (declaredLength(request) > limit) await refuseFile()
      // a body sent without a Content-Length (chunked) is held to the same limit while it is read
      const body = await parseBody(request, contentType, limit)
      if (body === TOO_LARGE) {
        if (limit < max) await refuseFile()
        throw payloadTooLarge()
      }
      return body
    })
    .use(
      openapi({
        path: '/openapi',
        specPath: '/openapi.json',
        provider: null,
        documentation: {
          info: {
            title: 'Capstan Messaging API',
            version: VERSION,
            license: DOC_LICENSE,
            description:
              'Workspace-scoped API for sending paced messages through connected numbers, managing contacts and consent, media, the message log, groups, templates and opt-in campaigns. Every request needs `Authorization: Bearer <API key>` and the scope named on each operation (`x-required-scope`). Errors are JSON `{message, code}`, plus `errors` on validation failures. Any write may answer 507 `storage_full` when the server\'s disk is full (nothing is stored).',
          },
          servers: [{ url: '/' }],
          components: DOC_COMPONENTS as any,
          webhooks: WEBHOOK_DOCS as any,
        },
        exclude: { paths: ['/healthz', '/readyz', '/docs', '/openapi.json', '/admin', '/admin/app.js', '/admin/app.css', '/admin/session'] },
      }),
    )
    .use(docsUi)
    .use(dashboardRoutes(sessions, auth, clients))
    // the admin API's own document, built once from the routes' adminOp descriptions
    .get('/admin/openapi.json', () => (adminDoc ??= adminDocument(root!.routes as never, VERSION)), { detail: hidden })
    .get('/healthz', ({ set }) => {
      Object.assign(set.headers, SECURITY_HEADERS)
      return { status: 'ok' }
    }, { detail: hidden })
    .get(
      '/readyz',
      async ({ set }) => {
        // (a database that takes no writes — a failover under way — is no more ready than one away)
        const database = await databaseState(svc.deps.engine)
        const checks: Record<string, unknown> = { database }
        for (const [name, probe] of Object.entries(probes)) checks[name] = (await probe().catch(() => false)) ? 'ok' : 'unavailable'
        // reported, not a reason to be unready: a low disk still serves (a full one answers 507)
        const disk = diskSpace(config.dataDir)
        if (disk) checks.disk = disk
        // likewise: automatic backups that fail or fall behind (when they are configured)
        const backup = svc.backups.status()
        if (backup.state !== 'off') checks.backup = { state: backup.state, last_success_at: backup.last_success_at }
        // started on a full disk: reads are served, but nothing is sent until the start-up's
        // writes are done (they are tried again every few seconds)
        const startup = svc.startup.state
        if (startup === 'storage_full') checks.storage = { state: 'full', reason: "The data directory's disk is full: writes are refused with 507 and nothing is sent until there is room; Capstan recovers by itself." }
        const ready = database === 'ok' && startup !== 'storage_full'
        if (!ready) set.status = 503
        return { status: ready ? 'ok' : 'unavailable', ...checks }
      },
      { detail: hidden },
    )
    // Prometheus metrics, served only when a token for them is set (otherwise an unknown route)
    .use(
      config.metricsToken === null
        ? new Elysia()
        : new Elysia().get(
            '/metrics',
            async ({ request, set }) => {
              await auth.checkMetricsToken(request)
              Object.assign(set.headers, SECURITY_HEADERS)
              set.headers['content-type'] = 'text/plain; version=0.0.4; charset=utf-8'
              return await metrics.render()
            },
            { detail: hidden },
          ),
    )
    .use(api)
    .use(admin)
}

export type App = ReturnType<typeof buildApp>
