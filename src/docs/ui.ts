/**
 * GET /docs: Swagger UI for /openapi.json (and, at /docs?api=admin, the admin API's
 * /admin/openapi.json), served from the binary (no CDN: the appliance works
 * offline). The UI's files are embedded as text imports.
 */
import { Elysia } from 'elysia'
import bundle from 'swagger-ui-dist/swagger-ui-bundle.js' with { type: 'text' }
import css from 'swagger-ui-dist/swagger-ui.css' with { type: 'text' }
import { hidden } from '../http/docs'

const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Capstan API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css">
</head>
<body>
<nav style="font: 14px sans-serif; padding: 8px 20px; border-bottom: 1px solid #ddd">
<a href="/docs">Messaging API</a> · <a href="/docs?api=admin">Admin API</a>
</nav>
<div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script>
<script src="/docs/init.js"></script>
</body>
</html>`

const init = `window.ui = SwaggerUIBundle({ url: new URLSearchParams(location.search).get('api') === 'admin' ? '/admin/openapi.json' : '/openapi.json', dom_id: '#swagger-ui', deepLinking: true, persistAuthorization: false });`

const cache = 'public, max-age=3600'

export const docsUi = new Elysia({ name: 'capstan-docs-ui' })
  .get('/docs', () => new Response(page, { headers: { 'content-type': 'text/html; charset=utf-8', 'x-content-type-options': 'nosniff', 'x-frame-options': 'DENY', 'referrer-policy': 'no-referrer', 'content-security-policy': "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'" } }), { detail: hidden })
  .get('/docs/swagger-ui.css', () => new Response(css, { headers: { 'content-type': 'text/css; charset=utf-8', 'cache-control': cache } }), { detail: hidden })
  .get('/docs/swagger-ui-bundle.js', () => new Response(bundle, { headers: { 'content-type': 'text/javascript; charset=utf-8', 'cache-control': cache } }), { detail: hidden })
  .get('/docs/init.js', () => new Response(init, { headers: { 'content-type': 'text/javascript; charset=utf-8' } }), { detail: hidden })
