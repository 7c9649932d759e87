/**
 * The operator dashboard at /admin: the page and its assets (embedded in the binary), and
 * sign-in/out that exchanges the admin token for a session cookie.
 */
import { Elysia } from 'elysia'
import type { ClientAddresses } from '../http/client'
import { type authPlugin, SECURITY_HEADERS } from '../http/auth'
import { adminOp, d, hidden } from '../http/docs'
import { type Sessions, sessionCookie } from '../http/session'
import { ALL_SCOPES } from '../modules/keys/model'
import { EVENT_TYPES } from '../modules/webhooks/service'
import appCss from './app.css' with { type: 'text' }
import appJs from './app.js' with { type: 'text' }
import favicon from './favicon.svg' with { type: 'text' }
import pageHtml from './index.html' with { type: 'text' }

// a text import; Bun's types describe .html imports as bundles
const page = pageHtml as unknown as string

const PAGE_HEADERS = {
  'x-content-type-options': 'nosniff',
  'x-frame-options': 'DENY',
  'referrer-policy': 'no-referrer',
  'cache-control': 'no-store',
  'content-security-policy': "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
}

export function dashboardRoutes(sessions: Sessions, auth: ReturnType<typeof authPlugin>, clients: ClientAddresses) {
  const secure = (request: Request) => clients.overTls(request)
  return new Elysia()
    .use(auth)
    .get('/admin', () => new Response(page, { headers: { ...PAGE_HEADERS, 'content-type': 'text/html; charset=utf-8' } }), { detail: hidden })
    .get('/admin/app.js', () => new Response(appJs, { headers: { ...PAGE_HEADERS, 'content-type': 'text/javascript; charset=utf-8' } }), { detail: hidden })
    .get('/admin/app.css', () => new Response(appCss, { headers: { ...PAGE_HEADERS, 'content-type': 'text/css; charset=utf-8' } }), { detail: hidden })
    .get('/admin/favicon.svg', () => new Response(favicon, { headers: { ...PAGE_HEADERS, 'content-type': 'image/svg+xml', 'cache-control': 'public, max-age=86400' } }), { detail: hidden })
    .post(
      '/admin/session',
      async ({ request, body, checkAdminToken }) => {
        const token = (body as Record<string, unknown> | null)?.token
        if (request.headers.get('x-capstan-csrf') !== '1' || !(await checkAdminToken(request, token))) {
          return new Response(JSON.stringify({ message: 'A valid admin token is required.', code: 'unauthenticated' }), { status: 401, headers: { ...SECURITY_HEADERS, 'content-type': 'application/json; charset=utf-8' } })
        }
        const s = await sessions.issue()
        return new Response(null, { status: 204, headers: { ...SECURITY_HEADERS, 'set-cookie': sessionCookie(s.value, s.maxAge, secure(request)) } })
      },
      { detail: hidden },
    )
    // sign-out ends the session on the server too, so a copy of the cookie is worthless after it
    .delete('/admin/session', async ({ request }) => {
      await sessions.end(request.headers.get('cookie'))
      return new Response(null, { status: 204, headers: { ...SECURITY_HEADERS, 'set-cookie': sessionCookie('', 0, secure(request)) } })
    }, { detail: hidden })
    // with the lists the dashboard offers (key scopes, webhook events): the server's own, never a copy
    .get('/admin/api/session', () => ({ data: { signed_in: true, scopes: ALL_SCOPES, event_types: EVENT_TYPES } }), {
      admin: true,
      detail: adminOp({ summary: 'Whether the caller is signed in, and the lists the dashboard offers', tag: 'Dashboard views', ok: { status: 200, data: d.object({ signed_in: d.constant(true), scopes: d.list(d.oneOf(ALL_SCOPES)), event_types: d.list(d.oneOf(EVENT_TYPES)) }), description: 'Signed in (401 when not).' } }),
    })
}
