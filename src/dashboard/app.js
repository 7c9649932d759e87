// Capstan operator dashboard: a small single-page app over the admin API (/admin/api), signed in
// with the admin token (exchanged for an HttpOnly session cookie). Every value from the server is
// HTML-escaped before it is put on the page.
'use strict'

/** What the server offers, from GET /admin/api/session (read before any page is drawn). */
let SCOPES = []
let EVENTS = []
const $ = (sel) => document.querySelector(sel)
const main = $('#main')

const esc = (v) => String(v ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c])
const badge = (v) => `<span class="badge ${esc(v)}">${esc(v)}</span>`
/** How far back "Send failed deliveries again" reaches (finished deliveries are kept 30 days). */
const RECOVER_PERIODS = [[24, 'last 24 hours'], [72, 'last 3 days'], [168, 'last 7 days'], [720, 'last 30 days']]
const when = (t) => (t ? new Date(t).toLocaleString() : '—')
/** A short time for a line of a list: "Nov 27, 07:14". */
const short = (t) => (t ? new Date(t).toLocaleString(undefined, { month: 'short', day: 'numeric', hour: '2-digit', minute: '2-digit', hour12: false }) : '—')
const cell = (label, html) => `<td data-label="${esc(label)}">${html}</td>`

class ApiError extends Error {
  constructor(status, body) {
    super((body && body.message) || `HTTP ${status}`)
    this.status = status
    this.body = body
  }
}

async function api(method, path, body) {
  // a form (a file upload) goes as multipart, with the content type the browser gives it
  const form = body instanceof FormData
  const res = await fetch(`/admin/api${path}`, {
    method,
    credentials: 'same-origin',
    headers: { accept: 'application/json', 'x-capstan-csrf': '1', ...(body === undefined || form ? {} : { 'content-type': 'application/json' }) },
    body: body === undefined ? undefined : form ? body : JSON.stringify(body),
  })
  const text = await res.text()
  const json = text ? JSON.parse(text) : null
  if (res.status === 401) {
    showLogin()
    throw new ApiError(401, json)
  }
  if (!res.ok) throw new ApiError(res.status, json)
  return json
}

let toastTimer = 0
function toast(text, error = false) {
  const t = $('#toast')
  t.textContent = text
  t.className = `toast show${error ? ' error' : ''}`
  clearTimeout(toastTimer)
  toastTimer = setTimeout(() => (t.className = 'toast'), 3500)
}

function errorText(e) {
  if (e.body && e.body.errors) return `${e.message} ${Object.entries(e.body.errors).map(([k, v]) => `${k}: ${v.join(' ')}`).join('; ')}`
  return e.message
}

/** Run an action, report failures, re-render on success (unless `stay`: a download changes nothing). */
async function act(fn, done, { stay = false } = {}) {
  try {
    const r = await fn()
    if (done) toast(done)
    if (!stay) await route()
    return r
  } catch (e) {
    if (e.status !== 401) toast(errorText(e), true)
  }
}

/**
 * A page of a list, or — when its filter is refused (a malformed number, a number that is no
 * contact) — an empty page and the reason, so the page keeps its filter form to correct it.
 */
async function listOrProblem(path) {
  try {
    return { ...(await api('GET', path)), problem: '' }
  } catch (e) {
    if (e.status === 401) throw e
    return { data: [], meta: { total: 0, page: 1, last_page: 1 }, problem: errorText(e) }
  }
}

function formData(form) {
  const out = {}
  for (const [k, v] of new FormData(form).entries()) out[k] = v
  return out
}

// ---------------------------------------------------------------- sign in

function showLogin(message) {
  $('#tabs').hidden = true
  $('#sign-out').hidden = true
  $('#backups-link').hidden = true
  $('#ws-name').textContent = ''
  document.title = 'Sign in · Capstan'
  drawnPath = null
  main.innerHTML = `<div class="card login"><h1>Sign in</h1>
    <p class="muted">Use the admin token printed at Capstan's first start (or CAPSTAN_ADMIN_TOKEN).</p>
    <form id="login" class="inline"><label style="flex:1">Admin token<input name="token" type="password" autocomplete="current-password" required></label>
    <button type="submit">Sign in</button></form>${message ? `<p class="muted">${esc(message)}</p>` : ''}</div>`
  $('#login').onsubmit = async (ev) => {
    ev.preventDefault()
    const res = await fetch('/admin/session', { method: 'POST', credentials: 'same-origin', headers: { 'content-type': 'application/json', 'x-capstan-csrf': '1' }, body: JSON.stringify(formData(ev.target)) })
    if (res.ok) {
      // one drawing of the list: a changed hash routes by itself (routing here too drew it twice,
      // and the second drawing took the focus its heading had been given)
      if (location.hash === '#/workspaces') route()
      else location.hash = '#/workspaces'
    } else showLogin(res.status === 429 ? 'Too many attempts; wait a minute.' : 'That token is not valid.')
  }
}

$('#sign-out').onclick = async () => {
  await fetch('/admin/session', { method: 'DELETE', credentials: 'same-origin', headers: { 'x-capstan-csrf': '1' } })
  showLogin('Signed out.')
}

// ---------------------------------------------------------------- workspaces

async function workspacesPage() {
  const { data } = await api('GET', '/workspaces?per_page=100')
  $('#tabs').hidden = true
  $('#ws-name').textContent = ''
  main.innerHTML = `<h1>Workspaces</h1>
    <div class="card"><form id="new-ws" class="inline"><label>Name<input name="name" required maxlength="120"></label>
    <label>Slug (optional)<input name="slug" pattern="[a-z0-9]+(-[a-z0-9]+)*"></label><button type="submit">Create workspace</button></form></div>
    <table class="stack"><thead><tr><th>Name</th><th>Slug</th><th>Status</th><th></th></tr></thead><tbody>
    ${data.map((w) => `<tr>${cell('Name', `<a href="#/w/${esc(w.id)}/overview">${esc(w.name)}</a>`)}${cell('Slug', esc(w.slug))}${cell('Status', badge(w.status))}
      ${cell('', `<button class="secondary" data-rename="${esc(w.id)}">Rename</button> <button class="${w.status === 'active' ? 'danger' : 'secondary'}" data-status="${esc(w.id)}" data-to="${w.status === 'active' ? 'inactive' : 'active'}">${w.status === 'active' ? 'Deactivate' : 'Activate'}</button>`)}</tr>`).join('')}
    </tbody></table>`
  $('#new-ws').onsubmit = (ev) => {
    ev.preventDefault()
    const body = formData(ev.target)
    if (!body.slug) delete body.slug
    act(() => api('POST', '/workspaces', body), 'Workspace created')
  }
  main.querySelectorAll('[data-rename]').forEach((b) => (b.onclick = () => {
    const name = prompt('New name')
    if (name) act(() => api('PATCH', `/workspaces/${b.dataset.rename}`, { name }), 'Renamed')
  }))
  main.querySelectorAll('[data-status]').forEach((b) => (b.onclick = () => {
    // deactivating stops a business's sending and API access: asked first
    if (b.dataset.to === 'inactive' && !confirm('Deactivate this workspace? Its API keys are refused (403) and its numbers and campaigns stop sending until it is activated again.')) return
    act(() => api('PATCH', `/workspaces/${b.dataset.status}`, { status: b.dataset.to }), 'Status changed')
  }))
}

/**
 * The page's CSV import form (#import, outcome in #import-result): the file goes up as it is; on
 * success the page is drawn again and `done` says what changed, else the rows to fix are listed.
 */
function importForm(path, done) {
  $('#import').onsubmit = async (ev) => {
    ev.preventDefault()
    const button = ev.target.querySelector('button')
    button.disabled = true
    try {
      const { data: r } = await api('POST', path, new FormData(ev.target))
      await route()
      toast(done(r))
    } catch (e) {
      if (e.status === 401) return
      // every row was checked and nothing was written: say which rows to fix
      $('#import-result').innerHTML = `<div class="card"><strong>Nothing was imported. ${esc(e.message)}</strong>${e.body && e.body.errors ? `<ul>${Object.entries(e.body.errors).map(([k, v]) => `<li>${esc(k)}: ${esc(v.join(' '))}</li>`).join('')}</ul>` : ''}</div>`
    } finally {
      button.disabled = false
    }
  }
}

// ---------------------------------------------------------------- backups

/** The appliance's automatic backups: where, how often, the last outcome, the list; one now. */
async function backupsPage() {
  const { data: b } = await api('GET', '/backups')
  $('#tabs').hidden = true
  $('#ws-name').textContent = ''
  if (b.database === 'postgres') {
    main.innerHTML = `<h1>Backups</h1><p class="card">This installation keeps its data in PostgreSQL: back it up with PostgreSQL’s own tools — <code>pg_dump</code> every night, and continuous WAL archiving (pgBackRest or WAL-G) to restore to any moment — and its media with it (a bucket: keep versioning on). Capstan’s own backups copy the embedded SQLite file, so there are none here; see docs/several-machines.md.</p>`
    return
  }
  if (b.directory === null) {
    main.innerHTML = `<h1>Backups</h1><p class="card">Automatic backups are off. Set <code>CAPSTAN_BACKUP_DIR</code> to a directory outside the data directory — on another disk if you can — and restart the server: a backup is then written every 24 hours (<code>CAPSTAN_BACKUP_HOURS</code>) and the newest 7 are kept (<code>CAPSTAN_BACKUP_KEEP</code>). <code>capstan backup &lt;dir&gt;</code> writes one by hand.</p>`
    return
  }
  main.innerHTML = `<h1>Backups</h1>
    <div class="card"><p>Every ${esc(b.every_hours)} h into <code>${esc(b.directory)}</code>; the newest ${esc(b.keep)} are kept. ${b.running ? 'A backup is being written now.' : ''}</p>
    <button id="backup-now">Back up now</button></div>
    ${b.state === 'failed' ? `<p class="card">The last backup failed (${esc(when(b.last_failure.at))}): ${esc(b.last_failure.error)}</p>` : ''}
    <table class="stack"><thead><tr><th>Backup</th><th>Made</th><th>Messages</th><th>Media files</th></tr></thead><tbody>
    ${b.backups.map((x) => `<tr>${cell('Backup', `<code>${esc(x.name)}</code>`)}${cell('Made', x.complete ? esc(when(x.created_at)) : 'being written (or cut off)')}${cell('Messages', esc(x.messages ?? ''))}${cell('Media files', esc(x.media_files ?? ''))}</tr>`).join('')}
    </tbody></table>
    <p class="muted">To restore one, stop the server and run <code>capstan restore ${esc(b.directory)}/&lt;backup&gt;</code> with an empty <code>CAPSTAN_DATA_DIR</code> (or <code>--force</code>); see docs/operations.md.</p>`
  $('#backup-now').onclick = async (ev) => {
    ev.target.disabled = true
    try {
      await api('POST', '/backups')
      toast('Backup written')
    } catch (e) {
      if (e.status === 401) return
      toast(errorText(e), true)
    }
    // either way the page and the banner show the outcome
    await route()
  }
}

// ---------------------------------------------------------------- one workspace

const TABS = [
  ['overview', 'Overview'], ['keys', 'API keys'], ['numbers', 'Numbers'], ['policy', 'Sending policy'], ['messages', 'Messages'],
  ['contacts', 'Contacts'], ['templates', 'Templates'], ['campaigns', 'Campaigns'], ['groups', 'Groups'], ['media', 'Media'], ['webhooks', 'Webhooks'], ['suppressions', 'Suppressions'], ['audit', 'Audit log'],
]

function tabs(ws, current) {
  const nav = $('#tabs')
  nav.hidden = false
  nav.innerHTML = TABS.map(([k, label]) => `<a href="#/w/${esc(ws.id)}/${k}"${k === current ? ' class="active" aria-current="page"' : ''}>${esc(label)}</a>`).join('')
  $('#ws-name').textContent = `${ws.name} (${ws.status})`
}

/** The chart's series: a name and its colour (each also named in the legend). */
const SERIES = [['sent', '#1f6feb'], ['delivered', '#2e7d32'], ['read', '#7b61ff'], ['failed', '#c62828'], ['received', '#b26a00']]

/** Messages per day as lines over a grid, with a y axis of counts, an x axis of days and a legend. */
function chart(days) {
  const max = Math.max(1, ...days.flatMap((d) => SERIES.map(([k]) => d[k])))
  // four even steps up the y axis, each 1, 2 or 5 times a power of ten
  const raw = max / 4
  const power = 10 ** Math.floor(Math.log10(raw))
  const step = Math.max(1, [1, 2, 5, 10].map((m) => m * power).find((v) => v >= raw))
  const top = step * 4
  const [w, h, left, bottom, pad] = [720, 200, 44, 22, 8]
  const x = (i) => left + (days.length === 1 ? (w - left - pad) / 2 : (i * (w - left - pad)) / (days.length - 1))
  const y = (v) => pad + (h - pad - bottom) * (1 - v / top)
  const ticks = [0, 1, 2, 3, 4].map((i) => i * step)
  const grid = ticks.map((v) => `<line x1="${left}" x2="${w - pad}" y1="${y(v)}" y2="${y(v)}" stroke="#e4e7ec"/><text x="${left - 6}" y="${y(v) + 4}" text-anchor="end" font-size="11" fill="#667085">${v.toLocaleString()}</text>`).join('')
  const every = Math.ceil(days.length / 10)
  const xLabels = days.map((d, i) => (i % every === 0 || i === days.length - 1 ? `<text x="${x(i)}" y="${h - 6}" text-anchor="middle" font-size="11" fill="#667085">${esc(d.day.slice(5))}</text>` : '')).join('')
  const lines = SERIES.map(([k, color]) => `<polyline fill="none" stroke="${color}" stroke-width="2" points="${days.map((d, i) => `${x(i).toFixed(1)},${y(d[k]).toFixed(1)}`).join(' ')}"><title>${k}</title></polyline>
    ${days.map((d, i) => `<circle cx="${x(i).toFixed(1)}" cy="${y(d[k]).toFixed(1)}" r="2.5" fill="${color}"><title>${esc(d.day)} ${k}: ${d[k]}</title></circle>`).join('')}`).join('')
  return `<svg class="chart" viewBox="0 0 ${w} ${h}" role="img" aria-label="Messages per day: ${SERIES.map(([k]) => k).join(', ')}">
    <line x1="${left}" x2="${left}" y1="${pad}" y2="${h - bottom}" stroke="#98a2b3"/><line x1="${left}" x2="${w - pad}" y1="${h - bottom}" y2="${h - bottom}" stroke="#98a2b3"/>${grid}${xLabels}${lines}</svg>
    <div class="legend">${SERIES.map(([k, c]) => `<span><span class="swatch" style="background:${c}"></span>${k}</span>`).join('')}</div>`
}

/** Sums of the last `n` days (the newest last in `days`), with the rates that matter. */
function headline(days, n) {
  const part = days.slice(-n)
  const sum = (k) => part.reduce((a, d) => a + d[k], 0)
  const t = { sent: sum('sent'), delivered: sum('delivered'), read: sum('read'), failed: sum('failed'), received: sum('received') }
  const pct = (a, b) => (b ? `${Math.round((a / b) * 100)}%` : '—')
  return { ...t, deliveryRate: pct(t.delivered, t.sent), failureRate: pct(t.failed, t.sent + t.failed) }
}

/** Numbers that want a look: offline, failing, at a cap, or with a long queue. */
function attention(numbersNow) {
  const out = []
  for (const n of numbersNow) {
    if (n.status !== 'online') out.push([n, `offline${n.status_reason ? `: ${n.status_reason}` : ''}`])
    else if (n.failed_last_day > 0) out.push([n, `${n.failed_last_day} failed in 24 h${n.last_failure ? ` — last: ${n.last_failure.code} ${n.last_failure.message}` : ''}`])
    else if (n.sent_last_day >= n.daily_cap && n.queue_depth > 0) out.push([n, `at its daily cap (${n.daily_cap}) with ${n.queue_depth} waiting`])
    else if (n.sent_last_hour >= n.hourly_cap && n.queue_depth > 0) out.push([n, `at its hourly cap (${n.hourly_cap}) with ${n.queue_depth} waiting`])
  }
  return out
}

function numbersLive(rows) {
  if (!rows.length) return '<p class="muted">No numbers yet.</p>'
  return `<table class="stack"><thead><tr><th>Number</th><th>Status</th><th>Queue</th><th>Last hour</th><th>Last 24 h</th><th>Next release</th></tr></thead><tbody>
  ${rows.map((n) => `<tr>${cell('Number', esc(n.phone))}${cell('Status', badge(n.status))}${cell('Queue', esc(n.queue_depth))}
    ${cell('Last hour', `${esc(n.sent_last_hour)} / ${esc(n.hourly_cap)}`)}${cell('Last 24 h', `${esc(n.sent_last_day)} / ${esc(n.daily_cap)}${n.warming_up ? ' <span class="muted">(warming up)</span>' : ''}`)}${cell('Next release', when(n.next_release_at))}</tr>`).join('')}</tbody></table>`
}

/** Links to the pages before and after this one of a list (`href(n)`: page n's address). */
function pager(meta, href, [back, forward] = ['← newer', 'older →']) {
  return `<p class="pager">${meta.page > 1 ? `<a href="${href(meta.page - 1)}">${back}</a>` : ''}${meta.page < meta.last_page ? `<a href="${href(meta.page + 1)}">${forward}</a>` : ''}</p>`
}

/**
 * Show `html` (with an h2#drawer-title) in the page's drawer beside the list, opened from `from`:
 * focus goes to its title, and back to `from` when Escape or its Close button closes it. Returns
 * the function that closes it.
 */
function openDrawer(html, from) {
  const drawer = $('#drawer')
  const close = () => {
    drawer.hidden = true
    drawer.innerHTML = ''
    if (from) from.focus()
  }
  drawer.innerHTML = `<button class="secondary close" id="drawer-close">Close</button>${html}`
  drawer.hidden = false
  drawer.onkeydown = (ev) => ev.key === 'Escape' && close()
  $('#drawer-close').onclick = close
  $('#drawer-title').focus()
  return close
}

/** A list whose lines open a detail: by its button (data-open) or a click anywhere on the line (data-row). */
function openRows(open) {
  main.querySelectorAll('[data-open]').forEach((b) => (b.onclick = (ev) => {
    ev.stopPropagation()
    void open(b.dataset.open, b)
  }))
  main.querySelectorAll('tr[data-row]').forEach((tr) => (tr.onclick = () => void open(tr.dataset.row, tr.querySelector('[data-open]'))))
}

/**
 * One webhook endpoint's delivery history: every delivery with its times, a page at a time, by
 * status; a delivery opens beside the list with the event it carried, its attempts and the last
 * answer, and can be sent again.
 */
async function webhookHistory(ws, params) {
  const { data: hook } = await api('GET', `/webhooks/${params.endpoint}`)
  const q = new URLSearchParams({ per_page: '50', page: params.page || '1', ...(params.status ? { status: params.status } : {}) })
  const { data, meta, problem } = await listOrProblem(`/webhooks/${hook.id}/deliveries?${q}`)
  const hashOf = (over) => `#/w/${ws.id}/webhooks?${new URLSearchParams(Object.entries({ ...params, ...over }).filter(([, v]) => v))}`
  const link = (over) => esc(hashOf(over))
  main.innerHTML = `<h1>Delivery history</h1>
    <p><a href="#/w/${esc(ws.id)}/webhooks">← Webhooks</a> · <span class="mono">${esc(hook.url)}</span> ${badge(hook.status)}</p>
    <form id="history-filter" class="filters card"><label>Status<select name="status"><option value="">any</option>${['pending', 'delivered', 'failed'].map((v) => `<option ${params.status === v ? 'selected' : ''}>${v}</option>`).join('')}</select></label><button type="submit" class="secondary">Show</button></form>${problem ? `<p class="card">${esc(problem)}</p>` : ''}
    <p class="muted" id="history-total">${esc(Number(meta.total).toLocaleString())}${params.status && meta.total >= 10000 ? '+' : ''} ${meta.total === 1 ? 'delivery' : 'deliveries'} · page ${esc(meta.page)} of ${esc(meta.last_page)}</p>
    <table class="log"><thead><tr><th class="c-when">Created</th><th>Event</th><th class="c-status">Status</th><th class="c-n">Tries</th><th>Last answer</th><th class="c-when">Delivered / next</th></tr></thead><tbody>
    ${data.map((d) => `<tr class="row" data-row="${esc(d.id)}"><td class="c-when" title="${esc(when(d.created_at))}">${esc(short(d.created_at))}</td>
      <td><button class="open" data-open="${esc(d.id)}" aria-label="Open the ${esc(d.type)} delivery of ${esc(when(d.created_at))}">${esc(d.type)}</button></td><td class="c-status">${badge(d.status)}</td><td class="c-n">${esc(d.attempts)}</td>
      <td>${esc(d.last_status_code ?? d.last_error ?? '—')}</td><td class="c-when">${esc(d.delivered_at ? short(d.delivered_at) : d.next_attempt_at ? `next ${short(d.next_attempt_at)}` : '—')}</td></tr>`).join('')}</tbody></table>
    ${data.length ? '' : '<p class="muted">No deliveries.</p>'}
    ${pager(meta, (n) => link({ page: String(n) }))}
    <aside id="drawer" class="drawer" role="dialog" aria-modal="false" aria-labelledby="drawer-title" hidden></aside>`
  $('#history-filter').onsubmit = (ev) => {
    ev.preventDefault()
    const { status } = formData(ev.target)
    location.hash = hashOf({ status, page: '' })
  }
  openRows(async (id, from) => {
    const { data: d } = await api('GET', `/webhooks/${hook.id}/deliveries/${encodeURIComponent(id)}`)
    const close = openDrawer(`<h2 id="drawer-title" tabindex="-1">${esc(d.type)}</h2>
      <dl><dt>Status</dt><dd>${badge(d.status)}</dd><dt>Attempts</dt><dd>${esc(d.attempts)}</dd>
      <dt>Last answer</dt><dd>${d.last_status_code !== null ? `HTTP ${esc(d.last_status_code)}` : '—'}${d.last_error ? ` · ${esc(d.last_error)}` : ''}</dd>
      <dt>Created</dt><dd>${esc(when(d.created_at))}</dd><dt>Delivered</dt><dd>${esc(when(d.delivered_at))}</dd>
      ${d.next_attempt_at ? `<dt>Next attempt</dt><dd>${esc(when(d.next_attempt_at))}</dd>` : ''}
      <dt>webhook-id</dt><dd class="mono">${esc(d.id)}</dd></dl>
      <h3>Payload</h3><pre class="body mono" id="payload">${esc(JSON.stringify(d.payload, null, 2))}</pre>
      ${d.status === 'pending' ? '<p class="muted">Still being attempted.</p>' : hook.status === 'active' ? `<p><button id="resend">Send again</button> <span class="muted">with the same webhook-id, from the first attempt</span></p>` : '<p class="muted">Enable the endpoint to send it again.</p>'}`, from)
    const resend = $('#resend')
    if (resend) resend.onclick = () => {
      close()
      act(() => api('POST', `/webhooks/${hook.id}/deliveries/${encodeURIComponent(d.id)}/resend`), 'Delivery sent again')
    }
  })
}

/** The sandbox's settings as form fields (a number's, or the defaults). */
function sandboxFields(c) {
  const v = (x, d) => (x === undefined ? d : x === null ? '' : x)
  return `<label>Delivered after (ms; empty: never)<input name="delivered_after_ms" type="number" min="0" max="86400000" value="${esc(v(c.delivered_after_ms, 1000))}"></label>
    <label>Read after (ms; empty: never)<input name="read_after_ms" type="number" min="0" max="86400000" value="${esc(v(c.read_after_ms, 3000))}"></label>
    <label>Accepts after (ms)<input name="accept_after_ms" type="number" min="0" value="${esc(v(c.accept_after_ms, 0))}"></label>
    <label style="flex:1">Recipients that fail (comma-separated)<input name="fail_recipients" value="${esc((c.fail_recipients || []).join(', '))}"></label>`
}

/** The Cloud API settings as form fields; secrets are write-only (shown empty; empty on a change = unchanged). */
function cloudFields(c, existing) {
  const secret = (name, label) => `<label>${label}${existing ? ' (empty: unchanged)' : ''}<input name="${name}" type="password" autocomplete="off"${existing ? '' : ' required'}></label>`
  return `<label>Phone number ID<input name="phone_number_id" ${existing ? '' : 'required'} value="${esc(c.phone_number_id || '')}"></label>
    ${secret('access_token', 'Access token')}${secret('app_secret', 'App secret')}${secret('verify_token', 'Verify token')}
    <label>Business account ID (waba_id, to import templates)<input name="waba_id" value="${esc(c.waba_id || '')}"></label>
    <label>Graph API version<input name="graph_version" placeholder="v26.0" value="${esc(c.graph_version || '')}"></label>
    <label>Graph API address<input name="graph_base_url" type="url" placeholder="https://graph.facebook.com" value="${esc(c.graph_base_url || '')}"></label>
    <label>Wait for Meta's word (s)<input name="confirm_wait_seconds" type="number" min="0" max="3600" value="${esc(c.confirm_wait_seconds ?? '')}"></label>`
}

/** A driver's config from its form fields; on a change, empty secrets are left out (unchanged). */
function configOf(driver, v, change) {
  if (driver === 'sandbox') {
    const ms = (x) => (x === '' || x === undefined ? null : Number(x))
    return { delivered_after_ms: ms(v.delivered_after_ms), read_after_ms: ms(v.read_after_ms), accept_after_ms: Number(v.accept_after_ms || 0), fail_recipients: (v.fail_recipients || '').split(',').map((x) => x.trim()).filter(Boolean) }
  }
  const out = {}
  for (const k of ['phone_number_id', 'access_token', 'app_secret', 'verify_token', 'waba_id', 'graph_version', 'graph_base_url']) if (v[k]) out[k] = v[k]
  if (change && v.waba_id === '') out.waba_id = null
  if (v.confirm_wait_seconds !== '' && v.confirm_wait_seconds !== undefined) out.confirm_wait_seconds = Number(v.confirm_wait_seconds)
  return out
}

/** A number's moving figures: its queue and sends against its caps, its failures and the last one's words. */
function numberNow(n) {
  if (!n) return ''
  return `<p class="counts">Queue ${esc(n.queue_depth)} · last hour ${esc(n.sent_last_hour)} / ${esc(n.hourly_cap)} · last 24 h ${esc(n.sent_last_day)} / ${esc(n.daily_cap)}${n.warming_up ? ' (warming up)' : ''} · failed in 24 h ${esc(n.failed_last_day)}${n.next_release_at ? ` · next ${esc(when(n.next_release_at))}` : ''}</p>
    ${n.last_failure ? `<p class="muted" data-last-failure>Last failure (${esc(when(n.last_failure.at))}): <code>${esc(n.last_failure.code)}</code> ${esc(n.last_failure.message)}</p>` : ''}`
}

/** An endpoint's health: a coloured word, the share delivered and failures in a row, the last error. */
function hookHealth(id, x) {
  const words = { healthy: 'healthy', degraded: 'some failures', failing: 'failing', disabled: 'disabled', unknown: 'no deliveries yet' }
  const parts = []
  if (x.success_rate !== null) parts.push(`${Math.round(x.success_rate * 100)}% of the last ${x.recent} delivered`)
  if (x.consecutive_failures) parts.push(`${x.consecutive_failures} failed in a row`)
  if (x.last_success_at) parts.push(`last delivered ${when(x.last_success_at)}`)
  return `<span class="badge hb ${esc(x.state)}" data-health="${esc(id)}">${esc(words[x.state] || x.state)}</span>
    <p class="muted">${esc(parts.join(' · '))}</p>${x.last_error ? `<p class="error-line">Last error (${esc(when(x.last_error_at))}): ${esc(x.last_error)}</p>` : ''}`
}

/** Words for why a campaign is paused. */
const PAUSED_WHY = {
  requested: 'Paused by an operator: resume it to go on.',
  allowance_exhausted: 'Paused: the workspace has used its message allowance for this month. It goes on by itself when there is room (next month, or a higher allowance).',
  template_refused: 'Paused: the network refused its template (paused for low quality, disabled, or not matching). Fix the template, or wait out the network’s pause, then resume it.',
}

/** Whether the local time in `zone` is within [from, to) ("09:00", "20:00"; to < from runs over midnight). */
function inWindow(w, at = new Date()) {
  try {
    const hm = new Intl.DateTimeFormat('en-GB', { timeZone: w.time_zone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).format(at)
    return w.from <= w.to ? hm >= w.from && hm < w.to : hm >= w.from || hm < w.to
  } catch {
    return true
  }
}

/**
 * A campaign's live figures: progress, counts, the send rate and an estimated finish, and — when
 * it is not moving — why (its number offline or at a cap, warming up, outside its send window,
 * paused and for what).
 */
function campaignProgress(c, numbersNow = []) {
  const k = c.counts
  const done = k.sent + k.delivered + k.read + k.failed + k.skipped
  const pct = k.total ? Math.round((done / k.total) * 100) : 0
  const started = c.started_at ? Date.parse(c.started_at) : null
  const minutes = started ? Math.max((Date.now() - started) / 60_000, 1 / 60) : null
  const rate = minutes && done ? done / minutes : 0
  const left = k.total - done
  let why = ''
  if (c.status === 'paused') why = PAUSED_WHY[c.paused_reason] || 'Paused.'
  else if (c.status === 'running' && left > 0) {
    const n = numbersNow.find((x) => x.id === c.connection_id)
    if (n && n.status !== 'online') why = `Waiting: its number ${n.phone} is offline.`
    else if (c.send_window && !inWindow(c.send_window)) why = `Waiting: outside its send window (${c.send_window.from}–${c.send_window.to} ${c.send_window.time_zone}).`
    else if (n && n.sent_last_hour >= n.hourly_cap) why = `Waiting: its number reached its ${n.warming_up ? 'warm-up ' : ''}hourly cap (${n.hourly_cap})${n.next_release_at ? `; next message ${when(n.next_release_at)}` : ''}.`
    else if (n && n.sent_last_day >= n.daily_cap) why = `Waiting: its number reached its ${n.warming_up ? 'warm-up ' : ''}daily cap (${n.daily_cap})${n.next_release_at ? `; next message ${when(n.next_release_at)}` : ''}.`
    else if (n && n.next_release_at) why = `Sending: next message ${when(n.next_release_at)}${n.warming_up ? ' (the number is warming up)' : ''}.`
  }
  // an estimate only while it is moving: a number at its cap finishes when the cap allows
  const eta = c.status === 'running' && rate > 0 && left > 0 && (!why || why.startsWith('Sending')) ? ` · about ${Math.max(1, Math.round(left / rate))} min left` : ''
  return `<div class="bar" role="progressbar" aria-valuenow="${pct}" aria-valuemin="0" aria-valuemax="100" aria-label="Progress"><span style="width:${pct}%"></span></div>
    <p class="counts">${pct}% · total ${esc(k.total)} · <b>queued ${esc(k.queued)}</b> · sent ${esc(k.sent)} · delivered ${esc(k.delivered)} · read ${esc(k.read)} · failed ${esc(k.failed)} · skipped ${esc(k.skipped)}${rate ? ` · ${rate < 10 ? rate.toFixed(1) : Math.round(rate)} a minute` : ''}${eta}</p>
    ${why ? `<p class="why">${esc(why)}</p>` : ''}`
}

/** One campaign: what it sends, from which number, its live figures and what can be done with it now. */
function campaignCard(ws, c, templates, numbers, numbersNow = []) {
  const t = templates.find((x) => x.id === c.template_id)
  const n = numbers.find((x) => x.id === c.connection_id)
  const b = (action, label, cls = 'secondary') => `<button class="${cls}" data-campaign-action="${action}" data-id="${esc(c.id)}">${label}</button>`
  const actions = {
    draft: `<a class="button secondary" href="#/w/${esc(ws.id)}/campaigns?edit=${esc(c.id)}">Edit</a> <label class="inline-label">Start at (empty: now)<input type="datetime-local" data-start-at="${esc(c.id)}"></label> ${b('schedule', 'Launch', '')} ${b('delete', 'Delete', 'danger')}`,
    scheduled: `<a class="button secondary" href="#/w/${esc(ws.id)}/campaigns?edit=${esc(c.id)}">Edit</a> ${b('cancel', 'Cancel', 'danger')}`,
    running: `${b('pause', 'Pause')} ${b('cancel', 'Cancel', 'danger')}`,
    paused: `${b('resume', 'Resume', '')} ${b('cancel', 'Cancel', 'danger')}`,
    completed: b('delete', 'Delete', 'danger'),
    cancelled: b('delete', 'Delete', 'danger'),
  }[c.status]
  return `<div class="card" data-campaign="${esc(c.id)}" data-status="${esc(c.status)}"><strong>${esc(c.name)}</strong> ${badge(c.status)}
    <p class="muted">${esc(t ? t.name : 'a removed template')} · from ${esc(n ? n.phone : 'a removed number')}${Object.keys((c.audience && c.audience.metadata) || {}).length ? ` · to ${esc(Object.entries(c.audience.metadata).map(([k, v]) => `${k}=${v}`).join(', '))}` : ' · to every opted-in contact'}${c.send_window ? ` · sends ${esc(c.send_window.from)}–${esc(c.send_window.to)} ${esc(c.send_window.time_zone)}` : ''}</p>
    <div class="progress">${campaignProgress(c, numbersNow)}</div>
    <p class="muted">Scheduled ${when(c.scheduled_at)} · started ${when(c.started_at)} · finished ${when(c.finished_at)} · <a href="#/w/${esc(ws.id)}/campaigns?campaign=${esc(c.id)}">Recipients</a></p>
    <p class="actions">${actions || ''}</p></div>`
}

/** The campaign buttons: launching, and — asked first where it stops sending — pausing, cancelling, deleting. */
function bindCampaignActions(ws) {
  const base = `/workspaces/${ws.id}/campaigns`
  const ask = { pause: 'Pause this campaign? Nothing more is sent until it is resumed.', cancel: 'Cancel this campaign? Nothing more is sent, for good; what was sent stays.', delete: 'Delete this campaign?' }
  const done = { schedule: 'Campaign launched', pause: 'Campaign paused', resume: 'Campaign resumed', cancel: 'Campaign cancelled', delete: 'Campaign deleted' }
  main.querySelectorAll('[data-campaign-action]').forEach((btn) => (btn.onclick = () => {
    const { campaignAction: action, id } = btn.dataset
    if (ask[action] && !confirm(ask[action])) return
    if (action === 'delete') return act(() => api('DELETE', `${base}/${id}`), done.delete)
    let body = {}
    if (action === 'schedule') {
      const at = main.querySelector(`[data-start-at="${CSS.escape(id)}"]`).value
      if (at) body = { at: new Date(at).toISOString() }
    }
    act(() => api('POST', `${base}/${id}/${action}`, body), done[action])
  }))
}

/** A campaign's recipients, 50 a page, each with its message's status or why it was skipped. */
async function campaignRecipients(ws, params) {
  const base = `/workspaces/${ws.id}/campaigns/${params.campaign}`
  const { data: c } = await api('GET', base)
  const { data, meta } = await api('GET', `${base}/recipients?per_page=50&page=${encodeURIComponent(params.page || '1')}`)
  const page = (p) => `#/w/${esc(ws.id)}/campaigns?campaign=${esc(c.id)}&page=${p}`
  main.innerHTML = `<h1>Recipients</h1><p><a href="#/w/${esc(ws.id)}/campaigns">← Campaigns</a> · ${esc(c.name)} ${badge(c.status)}</p>
    <p class="muted" id="recipients-total">${esc(Number(meta.total).toLocaleString())} recipients · page ${esc(meta.page)} of ${esc(meta.last_page)}</p>
    <table class="log"><thead><tr><th class="c-num">Phone</th><th class="c-status">Status</th><th>Skipped because</th><th class="c-when">Updated</th></tr></thead><tbody>
    ${data.map((r) => `<tr><td class="c-num">${esc(r.phone)}</td><td class="c-status">${badge(r.status)}</td><td>${esc(r.skipped_reason || '')}</td><td class="c-when">${esc(short(r.updated_at))}</td></tr>`).join('')}</tbody></table>
    ${pager(meta, page, ['← previous', 'next →'])}`
}

const pages = {
  async overview(ws) {
    /** @returns {Promise<[any[], any[]]>} */
    const load = () => Promise.all([api('GET', `/workspaces/${ws.id}/stats/daily?days=30`), api('GET', `/workspaces/${ws.id}/numbers/live`)]).then(([a, b]) => [a.data, b.data])
    const draw = ([days, numbersNow]) => {
      const cards = [['Today', 1], ['Last 7 days', 7], ['Last 30 days', 30]].map(([label, n]) => {
        const x = headline(days, n)
        return `<div class="card figure" data-period="${n}"><h2>${label}</h2><p class="big">${x.sent.toLocaleString()} <span>sent</span></p>
          <p>${x.delivered.toLocaleString()} delivered · ${x.read.toLocaleString()} read · ${x.failed.toLocaleString()} failed · ${x.received.toLocaleString()} received</p>
          <p class="muted">delivery rate ${x.deliveryRate} · failure rate ${x.failureRate}</p></div>`
      }).join('')
      const look = attention(numbersNow)
      return `<div class="figures">${cards}</div>
        <div class="card"><h2>Messages per day (30 days, UTC)</h2>${chart(days.slice(-30))}</div>
        <div class="card"><h2>Numbers that need a look</h2>${look.length ? `<ul class="attention">${look.map(([n, why]) => `<li><a href="#/w/${esc(ws.id)}/numbers">${esc(n.phone)}</a> ${esc(why)}</li>`).join('')}</ul>` : '<p class="muted">None: every number is online, without failures, under its caps.</p>'}</div>
        <div class="card"><h2>Numbers right now</h2>${numbersLive(numbersNow)}</div>`
    }
    main.innerHTML = `<h1>Overview</h1><div id="overview">${draw(await load())}</div>`
    live(10_000, async () => {
      const next = draw(await load())
      const el = $('#overview')
      if (el) el.innerHTML = next
    })
  },

  async keys(ws) {
    const { data } = await api('GET', `/workspaces/${ws.id}/keys`)
    main.innerHTML = `<h1>API keys</h1>
      <div class="card"><form id="new-key"><div class="inline"><label style="flex:1">Name<input name="name" required maxlength="100" placeholder="shop backend"></label>
      <label>Expires (optional)<input name="expires_at" type="datetime-local"></label></div>
      <label>Allowed IPs (optional: addresses or CIDR ranges, comma-separated; empty = any)<input name="allowed_ips" placeholder="203.0.113.7, 10.0.0.0/8"></label>
      <p class="muted">Scopes (none ticked = all twelve, fixed now):</p>
      <div class="scopes">${SCOPES.map((s) => `<label><input type="checkbox" name="scope" value="${s}">${s}</label>`).join('')}</div>
      <button type="submit">Create key</button></form><div id="new-secret"></div></div>
      <div class="card muted">Rotation: create the new key, deploy it, wait until the old one's “Last used” stops moving (it is kept to the minute), revoke the old one (it is refused on its very next request), then remove it from the list.</div>
      <table class="stack"><thead><tr><th>Name</th><th>Prefix</th><th>Scopes</th><th>From</th><th>Status</th><th>Created</th><th>Last used</th><th></th></tr></thead><tbody>
      ${data.map((k) => `<tr>${cell('Name', esc(k.name))}${cell('Prefix', `<span class="mono">${esc(k.prefix)}</span>`)}${cell('Scopes', `<span class="muted">${k.scopes.length === 12 ? 'all twelve' : esc(k.scopes.join(', '))}</span>`)}${cell('From', `<span class="muted">${k.allowed_ips ? esc(k.allowed_ips.join(', ')) : 'any address'}</span>`)}
        ${cell('Status', badge(k.status))}${cell('Created', when(k.created_at))}${cell('Last used', k.last_used_at ? when(k.last_used_at) : '<span class="muted">never</span>')}
        ${cell('', k.status === 'active' ? `<button class="danger" data-revoke="${esc(k.id)}">Revoke</button>` : `<button class="secondary" data-remove="${esc(k.id)}">Remove</button>`)}</tr>`).join('')}
      </tbody></table>`
    $('#new-key').onsubmit = async (ev) => {
      ev.preventDefault()
      const f = ev.target
      const scopes = [...f.querySelectorAll('input[name=scope]:checked')].map((i) => i.value)
      /** @type {Record<string, unknown>} */
      const body = { name: f.name.value, ...(scopes.length ? { scopes } : {}) }
      if (f.expires_at.value) body.expires_at = new Date(f.expires_at.value).toISOString()
      const ips = f.allowed_ips.value.split(',').map((v) => v.trim()).filter(Boolean)
      if (ips.length) body.allowed_ips = ips
      try {
        const { data } = await api('POST', `/workspaces/${ws.id}/keys`, body)
        await pages.keys(ws)
        $('#new-secret').innerHTML = `<div class="secret"><strong>Copy this key now — it will not be shown again.</strong>
          <span class="mono" id="key-plain">${esc(data.key)}</span><button class="secondary" id="copy-key">Copy</button></div>`
        $('#copy-key').onclick = () => navigator.clipboard.writeText(data.key).then(() => toast('Copied'), () => toast('Copy failed; select the key and copy it', true))
      } catch (e) {
        toast(errorText(e), true)
      }
    }
    main.querySelectorAll('[data-revoke]').forEach((b) => (b.onclick = () => confirm('Revoke this key? It stops working at once, for good.') && act(() => api('POST', `/keys/${b.dataset.revoke}/revoke`), 'Key revoked')))
    main.querySelectorAll('[data-remove]').forEach((b) => (b.onclick = () => act(() => api('DELETE', `/keys/${b.dataset.remove}`), 'Key removed')))
  },

  async numbers(ws) {
    const [{ data }, { data: numbersNow }] = await Promise.all([api('GET', `/workspaces/${ws.id}/connections`), api('GET', `/workspaces/${ws.id}/numbers/live`)])
    const now = new Map(numbersNow.map((n) => [n.id, n]))
    const field = (name, label, attrs = '') => `<label>${label}<input name="${name}" ${attrs}></label>`
    main.innerHTML = `<h1>Numbers</h1>
      <form id="new-conn" class="card"><h2>Add a number</h2>
        <div class="filters"><label>Phone (E.164)<input name="phone" required placeholder="+14155550100"></label><label>Name<input name="name"></label>
        <label>Network<select name="driver"><option value="sandbox">sandbox (no phone needed)</option><option value="cloud_api">WhatsApp Cloud API</option></select></label></div>
        <fieldset class="filters" data-driver="sandbox"><legend class="muted">Sandbox</legend>${sandboxFields({})}</fieldset>
        <fieldset class="filters" data-driver="cloud_api"><legend class="muted">Cloud API (from Meta's app dashboard; secrets are stored encrypted and never shown again)</legend>${cloudFields({}, false)}</fieldset>
        <button type="submit">Add number</button></form>
      ${data.map((c) => {
        const n = now.get(c.id)
        return `<div class="card" data-number="${esc(c.id)}"><strong>${esc(c.phone)}</strong> ${esc(c.name || '')} ${badge(c.status)} <span class="muted">${esc(c.driver)}</span>
        ${c.status_reason ? `<p class="error-line">Offline: ${esc(c.status_reason)}</p>` : ''}
        <div class="number-now">${numberNow(n)}</div>
        ${c.driver === 'cloud_api' ? `<p class="muted">Meta's callback URL for it: <span class="mono">${esc(location.origin)}/hooks/whatsapp/${esc(c.id)}</span></p>` : ''}
        ${c.warmup?.day ? `<div class="muted">Warming up: day ${esc(c.warmup.day)} of ${esc(c.warmup.days)} (daily cap rising from ${esc(c.warmup.start_daily_cap)} to the workspace's)</div>` : ''}
        <details><summary>Settings</summary><form class="filters" data-settings="${esc(c.id)}" data-kind="${esc(c.driver)}">${c.driver === 'cloud_api' ? cloudFields(c.config, true) : sandboxFields(c.config)}<button class="secondary" type="submit">Save settings</button></form></details>
        <form class="inline" data-warmup="${esc(c.id)}"><label>Warm up over (days)<input name="days" type="number" min="1" max="90" required value="${esc(c.warmup?.days ?? 14)}"></label>
          <label>First day's cap<input name="start_daily_cap" type="number" min="1" required value="${esc(c.warmup?.start_daily_cap ?? 20)}"></label>
          <button class="secondary" type="submit">${c.warmup?.day ? 'Restart warm-up' : 'Start warm-up'}</button>${c.warmup?.day ? ` <button class="secondary" type="button" data-warmup-end="${esc(c.id)}">End warm-up</button>` : ''}</form>
        <p><button class="secondary" data-toggle="${esc(c.id)}" data-to="${c.status === 'online' ? 'offline' : 'online'}">${c.status === 'online' ? 'Go offline' : 'Go online'}</button>
        ${c.driver === 'cloud_api' ? `<button class="secondary" data-import="${esc(c.id)}"${c.config?.waba_id ? '' : ' disabled title="Set config.waba_id (the WhatsApp Business Account id) first"'}>Import templates from Meta</button>` : ''}
        <button class="danger" data-del="${esc(c.id)}">Remove</button></p>
        <div id="imported-${esc(c.id)}"></div>
        ${c.driver === 'sandbox' ? `<form class="inline" data-inbound="${esc(c.id)}"><label>Simulate inbound from<input name="from" required placeholder="+14155550123"></label>
          <label style="flex:1">Text<input name="body" required></label><button class="secondary" type="submit">Receive</button></form>` : ''}</div>`
      }).join('') || '<p class="muted">No numbers yet.</p>'}`
    // the figures move: refreshed every 5 s, the forms left as they are
    live(5000, async () => {
      const { data: fresh } = await api('GET', `/workspaces/${ws.id}/numbers/live`)
      for (const n of fresh) {
        const el = document.querySelector(`[data-number="${CSS.escape(n.id)}"] .number-now`)
        if (el) el.innerHTML = numberNow(n)
      }
    })
    const driverSelect = $('#new-conn select[name=driver]')
    const showDriver = () => main.querySelectorAll('#new-conn [data-driver]').forEach((f) => {
      f.hidden = f.dataset.driver !== driverSelect.value
      f.disabled = f.hidden
    })
    driverSelect.onchange = showDriver
    showDriver()
    $('#new-conn').onsubmit = (ev) => {
      ev.preventDefault()
      const v = formData(ev.target)
      act(() => api('POST', `/workspaces/${ws.id}/connections`, { phone: v.phone, name: v.name || undefined, driver: v.driver, config: configOf(v.driver, v, false) }), 'Number added')
    }
    main.querySelectorAll('form[data-settings]').forEach((f) => (f.onsubmit = (ev) => {
      ev.preventDefault()
      act(() => api('PATCH', `/connections/${f.dataset.settings}`, { config: configOf(f.dataset.kind, formData(f), true) }), 'Settings saved')
    }))
    main.querySelectorAll('[data-toggle]').forEach((b) => (b.onclick = () => act(() => api('PATCH', `/connections/${b.dataset.toggle}`, { status: b.dataset.to }), `Number ${b.dataset.to}`)))
    main.querySelectorAll('[data-del]').forEach((b) => (b.onclick = () => confirm('Remove this number? Its queued messages fail.') && act(() => api('DELETE', `/connections/${b.dataset.del}`), 'Number removed')))
    main.querySelectorAll('[data-warmup]').forEach((f) => (f.onsubmit = (ev) => {
      ev.preventDefault()
      const v = formData(f)
      act(() => api('PATCH', `/connections/${f.dataset.warmup}`, { warmup: { days: Number(v.days), start_daily_cap: Number(v.start_daily_cap) } }), 'Warm-up started')
    }))
    main.querySelectorAll('[data-warmup-end]').forEach((b) => (b.onclick = () => act(() => api('PATCH', `/connections/${b.dataset.warmupEnd}`, { warmup: null }), 'Warm-up ended')))
    main.querySelectorAll('[data-import]').forEach((b) => (b.onclick = async () => {
      b.disabled = true
      try {
        const { data: r } = await api('POST', `/connections/${b.dataset.import}/import-templates`)
        $(`#imported-${CSS.escape(b.dataset.import)}`).innerHTML = `<div class="card"><strong>Templates imported: ${r.created.length} new, ${r.updated.length} updated, ${r.existing.length} already here, ${r.skipped.length} skipped</strong>
          ${r.created.length ? `<p>New: ${r.created.map((t) => esc(t.name)).join(', ')}</p>` : ''}
          ${r.updated.length ? `<p>Updated to Meta's text: ${r.updated.map((t) => esc(t.name)).join(', ')}</p>` : ''}
          ${r.skipped.length ? `<ul>${r.skipped.map((t) => `<li>${esc(t.name)} (${esc(t.language)}): ${esc(t.reason)}</li>`).join('')}</ul>` : ''}</div>`
        toast('Templates imported')
      } catch (e) {
        if (e.status !== 401) toast(errorText(e), true)
      } finally {
        b.disabled = false
      }
    }))
    main.querySelectorAll('[data-inbound]').forEach((f) => (f.onsubmit = (ev) => {
      ev.preventDefault()
      act(() => api('POST', `/connections/${f.dataset.inbound}/sandbox/inbound`, formData(f)), 'Inbound message logged')
    }))
  },

  async policy(ws) {
    const full = (await api('GET', `/workspaces/${ws.id}`)).data
    const p = full.settings.sending_policy
    const { data: numbersNow } = await api('GET', `/workspaces/${ws.id}/numbers/live`)
    main.innerHTML = `<h1>Sending policy and limits</h1>
      <div class="card"><form id="policy" class="inline">
        <label>Hourly cap per number<input name="hourly_cap" type="number" min="1" value="${esc(p.hourly_cap)}"></label>
        <label>Daily cap per number<input name="daily_cap" type="number" min="1" value="${esc(p.daily_cap)}"></label>
        <label>Min gap (s)<input name="min_gap_seconds" type="number" min="0" step="0.1" value="${esc(p.min_gap_seconds)}"></label>
        <label>Max gap (s)<input name="max_gap_seconds" type="number" min="0" step="0.1" value="${esc(p.max_gap_seconds)}"></label>
        <button type="submit">Save policy</button></form></div>
      <div class="card"><form id="limits" class="inline">
        <label>Messages per month (empty = unlimited)<input name="message_allowance" type="number" min="0" value="${esc(full.settings.message_allowance ?? '')}"></label>
        <label>Media max bytes<input name="max_bytes" type="number" min="1024" value="${esc(full.settings.media.max_bytes)}"></label>
        <label>Media retention (days)<input name="retention_days" type="number" min="1" value="${esc(full.settings.media.retention_days)}"></label>
        <label>Media storage in all (bytes; empty = the disk)<input name="max_total_bytes" type="number" min="1048576" value="${esc(full.settings.media.max_total_bytes ?? '')}"></label>
        <label>Message content kept (days; empty = for good)<input name="content_retention_days" type="number" min="1" value="${esc(full.settings.messages.content_retention_days ?? '')}"></label>
        <button type="submit">Save limits</button></form></div>
      <div class="card"><h2>Per number</h2><div id="per-number">${numbersLive(numbersNow)}</div></div>`
    live(5000, async () => {
      const { data: fresh } = await api('GET', `/workspaces/${ws.id}/numbers/live`)
      const el = $('#per-number')
      if (el) el.innerHTML = numbersLive(fresh)
    })
    $('#policy').onsubmit = (ev) => {
      ev.preventDefault()
      const f = formData(ev.target)
      act(() => api('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { hourly_cap: Number(f.hourly_cap), daily_cap: Number(f.daily_cap), min_gap_seconds: Number(f.min_gap_seconds), max_gap_seconds: Number(f.max_gap_seconds) } } }), 'Policy saved')
    }
    $('#limits').onsubmit = (ev) => {
      ev.preventDefault()
      const f = formData(ev.target)
      act(() => api('PATCH', `/workspaces/${ws.id}`, { settings: { message_allowance: f.message_allowance === '' ? null : Number(f.message_allowance), media: { max_bytes: Number(f.max_bytes), retention_days: Number(f.retention_days), max_total_bytes: f.max_total_bytes === '' ? null : Number(f.max_total_bytes) }, messages: { content_retention_days: f.content_retention_days === '' ? null : Number(f.content_retention_days) } } }), 'Limits saved')
    }
  },

  async messages(ws, params) {
    // a date range is whole local days: from the start of `from` to the end of `to`
    const day = (v, end) => (v ? new Date(`${v}T00:00:00`).getTime() + (end ? 86_400_000 : 0) : null)
    const range = { from: day(params.from, false), to: day(params.to, true) }
    const q = new URLSearchParams({
      per_page: '50',
      page: params.page || '1',
      ...(params.direction ? { direction: params.direction } : {}),
      ...(params.status ? { status: params.status } : {}),
      ...(params.phone ? { phone: params.phone } : {}),
      ...(params.q ? { q: params.q } : {}),
      ...(range.from ? { from: new Date(range.from).toISOString() } : {}),
      ...(range.to ? { to: new Date(range.to).toISOString() } : {}),
    })
    const { data, meta, problem } = await listOrProblem(`/workspaces/${ws.id}/messages?${q}`)
    const opt = (name, label, values) => `<label>${label}<select name="${name}"><option value="">any</option>${values.map((v) => `<option ${params[name] === v ? 'selected' : ''}>${v}</option>`).join('')}</select></label>`
    const searching = Boolean(params.q || params.from || params.to)
    const total = `${Number(meta.total).toLocaleString()}${searching && meta.total >= 10000 ? '+' : ''} ${meta.total === 1 ? 'message' : 'messages'}`
    const who = (m) => {
      const phone = m.direction === 'inbound' ? m.sender : m.recipient
      if (m.group_id) return '<span class="muted">a group</span>'
      return m.contact_name ? `${esc(m.contact_name)} <span class="muted">${esc(phone || '')}</span>` : esc(phone || '')
    }
    const link = (over) => `#/w/${esc(ws.id)}/messages?${esc(new URLSearchParams(Object.entries({ ...params, ...over }).filter(([, v]) => v)))}`
    main.innerHTML = `<h1>Messages</h1>
      <form id="filter" class="filters card">
        <label>Text<input name="q" type="search" maxlength="200" placeholder="words in the message" value="${esc(params.q || '')}"></label>
        <label>Contact's number<input name="phone" placeholder="+14155550123" value="${esc(params.phone || '')}"></label>
        ${opt('direction', 'Direction', ['inbound', 'outbound'])}${opt('status', 'Status', ['queued', 'sending', 'sent', 'delivered', 'read', 'failed'])}
        <label>From<input name="from" type="date" value="${esc(params.from || '')}"></label><label>To<input name="to" type="date" value="${esc(params.to || '')}"></label>
        <button type="submit" class="secondary">Search</button> <a href="#/w/${esc(ws.id)}/messages">Clear</a>
      </form>${problem ? `<p class="card">${esc(problem)}</p>` : ''}
      <p class="muted" id="log-total">${esc(total)} · page ${esc(meta.page)} of ${esc(meta.last_page)}</p>
      <table class="log"><thead><tr><th class="c-when">When</th><th class="c-num">Number</th><th class="c-who">Contact</th><th class="c-dir" title="Direction"><span aria-hidden="true">⇅</span><span class="sr-only">Direction</span></th><th class="c-status">Status</th><th>Message</th></tr></thead><tbody>
      ${data.map((m) => `<tr class="row" data-row="${esc(m.id)}">
        <td class="c-when" title="${esc(when(m.created_at))}">${esc(short(m.created_at))}</td><td class="c-num">${esc(m.number || '—')}</td><td class="c-who">${who(m)}</td>
        <td class="c-dir" title="${esc(m.direction)}"><span aria-hidden="true">${m.direction === 'inbound' ? '←' : '→'}</span><span class="sr-only">${esc(m.direction)}</span></td><td class="c-status">${badge(m.status)}</td>
        <td class="c-msg"><button class="open" data-open="${esc(m.id)}" aria-label="Open the message of ${esc(when(m.created_at))}">${esc((m.body || (m.attachments.length ? `[${m.attachments.length} file${m.attachments.length > 1 ? 's' : ''}]` : '')).slice(0, 140))}</button></td></tr>`).join('')}</tbody></table>
      ${data.length ? '' : '<p class="muted">No messages.</p>'}
      ${pager(meta, (n) => link({ page: String(n) }))}
      <aside id="drawer" class="drawer" role="dialog" aria-modal="false" aria-labelledby="drawer-title" hidden></aside>`
    const rows = new Map(data.map((m) => [m.id, m]))
    openRows((id, from) => {
      const m = rows.get(id)
      const files = m.attachments.map((id, i) => `<a class="file" href="/admin/api/workspaces/${esc(ws.id)}/media/${esc(id)}/download">file ${i + 1}</a>`).join(' ')
      const close = openDrawer(`<h2 id="drawer-title" tabindex="-1">${m.direction === 'inbound' ? 'Received' : 'Sent'} message</h2>
        <dl><dt>Status</dt><dd>${badge(m.status)}</dd>
        <dt>Number</dt><dd>${esc(m.number || '—')}</dd>
        <dt>${m.direction === 'inbound' ? 'From' : 'To'}</dt><dd>${who(m)}</dd>
        <dt>Created</dt><dd>${esc(when(m.created_at))}</dd>
        ${m.error ? `<dt>Error</dt><dd><code>${esc(m.error.code)}</code> ${esc(m.error.message)}</dd>` : ''}
        ${m.campaign ? `<dt>Campaign</dt><dd><a href="#/w/${esc(ws.id)}/campaigns">${esc(m.campaign.name)}</a></dd>` : ''}
        ${m.reply_to ? `<dt>Answers</dt><dd class="mono">${esc(m.reply_to)}</dd>` : ''}
        ${files ? `<dt>Files</dt><dd>${files}</dd>` : ''}
        <dt>Id</dt><dd class="mono">${esc(m.id)}</dd></dl>
        ${m.body ? `<div class="body">${esc(m.body)}</div>` : ''}
        <h3>Timeline</h3><ol class="timeline">${m.timeline.map((e) => `<li>${esc(e.status)} · ${esc(when(e.at))}</li>`).join('')}</ol>
        ${m.direction === 'outbound' && !m.group_id ? `<p class="muted">Sandbox receipt: ${['delivered', 'read', 'failed'].map((st) => `<button class="link" data-receipt="${esc(m.id)}" data-to="${st}">${st}</button>`).join(' ')}</p>` : ''}`, from)
      // an action closes the drawer at once; the page is drawn again with its outcome
      $('#drawer').querySelectorAll('[data-receipt]').forEach((b) => (b.onclick = () => {
        close()
        act(() => api('POST', `/messages/${b.dataset.receipt}/sandbox/receipt`, { status: b.dataset.to }), `Receipt: ${b.dataset.to}`)
      }))
    })
    $('#filter').onsubmit = (ev) => {
      ev.preventDefault()
      const f = formData(ev.target)
      location.hash = `#/w/${ws.id}/messages?${new URLSearchParams(Object.fromEntries(Object.entries(f).filter(([, v]) => v)))}`
    }
  },

  async contacts(ws, params) {
    const q = new URLSearchParams({ per_page: '50', page: params.page || '1', ...(params.phone ? { phone: params.phone } : {}), ...(params.search ? { search: params.search } : {}), ...(params.consent ? { consent: params.consent } : {}) })
    const { data, meta, problem } = await listOrProblem(`/workspaces/${ws.id}/contacts?${q}`)
    main.innerHTML = `<h1>Contacts</h1><form id="find" class="filters card"><label>Contact's number<input name="phone" placeholder="+14155550123" value="${esc(params.phone || '')}"></label>
      <label>Name<input name="search" type="search" maxlength="100" value="${esc(params.search || '')}"></label>
      <label>Consent<select name="consent"><option value="">any</option>${['opted_in', 'opted_out', 'unknown'].map((c) => `<option ${params.consent === c ? 'selected' : ''}>${c}</option>`).join('')}</select></label>
      <button type="submit" class="secondary">Find</button> <a href="#/w/${esc(ws.id)}/contacts">Clear</a></form>
      <p class="muted" id="contacts-total">${esc(Number(meta.total).toLocaleString())}${(params.search || params.consent) && meta.total >= 10000 ? '+' : ''} contacts · page ${esc(meta.page)} of ${esc(meta.last_page)}</p>${problem ? `<p class="card">${esc(problem)}</p>` : ''}
      <form id="import" class="inline card"><label>Import contacts from a CSV file (a header line with phone, and name, consent_status or metadata.&lt;key&gt; if you like; up to 100,000 rows) <input type="file" name="file" accept=".csv,text/csv" required></label><button type="submit" class="secondary">Import</button> <a href="/admin/api/workspaces/${esc(ws.id)}/contacts.csv" download>Download all as CSV</a></form><div id="import-result"></div>
      <p class="muted">Someone who asks for their data: <b>Export</b> downloads everything kept about them as JSON. Someone who asks to be forgotten: <b>Erase</b> deletes their contact, consent history and the files they sent, and leaves their messages in the log without their number, text or attachments — for good. To keep them from being messaged again, suppress the number first.</p>
      <table class="stack"><thead><tr><th>Phone</th><th>Name</th><th>Consent</th><th>Last activity</th><th></th></tr></thead><tbody>
      ${data.map((c) => `<tr>${cell('Phone', esc(c.phone))}${cell('Name', esc(c.name || ''))}${cell('Consent', badge(c.consent_status))}${cell('Last activity', when(c.last_activity_at))}
        ${cell('', `<a href="#/w/${esc(ws.id)}/messages?${new URLSearchParams({ phone: c.phone })}">Messages</a> <button class="secondary" data-export="${esc(c.phone)}">Export</button> <button class="danger" data-erase="${esc(c.phone)}">Erase</button>`)}</tr>`).join('')}</tbody></table>
      ${pager(meta, (n) => `#/w/${esc(ws.id)}/contacts?${esc(new URLSearchParams({ ...params, page: String(n) }))}`)}`
    $('#find').onsubmit = (ev) => {
      ev.preventDefault()
      const found = Object.fromEntries(Object.entries(formData(ev.target)).filter(([, v]) => v))
      location.hash = `#/w/${ws.id}/contacts${Object.keys(found).length ? `?${new URLSearchParams(found)}` : ''}`
    }
    importForm(`/workspaces/${ws.id}/contacts/import`, (r) => `Contacts imported: ${r.created} new, ${r.updated} updated`)
    main.querySelectorAll('[data-export]').forEach((b) => (b.onclick = () => {
      const phone = b.dataset.export
      act(async () => {
        const { data } = await api('POST', `/workspaces/${ws.id}/contacts/export`, { phone })
        const link = Object.assign(document.createElement('a'), { href: URL.createObjectURL(new Blob([JSON.stringify(data, null, 2)], { type: 'application/json' })), download: `contact-${phone.replace(/[^0-9]/g, '')}.json` })
        link.click()
        setTimeout(() => URL.revokeObjectURL(link.href), 10_000)
      }, 'Contact exported', { stay: true })
    }))
    main.querySelectorAll('[data-erase]').forEach((b) => (b.onclick = () => confirm(`Erase the contact ${b.dataset.erase} for good?`) && act(() => api('POST', `/workspaces/${ws.id}/contacts/erase`, { phone: b.dataset.erase }), 'Contact erased')))
  },

  async campaigns(ws, params = {}) {
    if (params.campaign) return campaignRecipients(ws, params)
    const base = `/workspaces/${ws.id}`
    const [{ data }, { data: templates }, { data: numbers }, { data: numbersNow }] = await Promise.all([api('GET', `${base}/campaigns?per_page=100`), api('GET', `${base}/templates?per_page=100`), api('GET', `${base}/connections`), api('GET', `${base}/numbers/live`)])
    const editing = params.edit ? data.find((c) => c.id === params.edit) : null
    const pick = (name, items, label, selected) => `<select name="${name}" required>${items.map((x) => `<option value="${esc(x.id)}" ${x.id === selected ? 'selected' : ''}>${esc(label(x))}</option>`).join('')}</select>`
    const audienceText = (a) => Object.entries((a && a.metadata) || {}).map(([k, v]) => `${k}=${v}`).join('\n')
    const form = templates.length && numbers.length
      ? `<form id="campaign-form" class="card"><h2>${editing ? `Edit “${esc(editing.name)}”` : 'New campaign'}</h2>
        <div class="filters"><label style="flex:1">Name<input name="name" required maxlength="120" value="${esc(editing ? editing.name : '')}"></label>
        <label>Template${pick('template_id', templates, (t) => t.name, editing && editing.template_id)}</label>
        <label>Number${pick('connection_id', numbers, (n) => `${n.phone}${n.name ? ` (${n.name})` : ''}`, editing && editing.connection_id)}</label></div>
        <div class="filters"><label style="flex:1">Audience: opted-in contacts whose metadata has each of these (one key=value a line; empty = all opted in)<textarea name="audience" rows="2" placeholder="plan=pro">${esc(editing ? audienceText(editing.audience) : '')}</textarea></label>
        <p class="muted" id="audience-count" aria-live="polite"></p></div>
        <div class="filters"><label>Values for {{1}}, {{2}}… (one n=value a line)<textarea name="variables" rows="2" placeholder="1=SPRING20">${esc(editing ? Object.entries(editing.variables).map(([k, v]) => `${k}=${v}`).join('\n') : '')}</textarea></label>
        <label>Send from (local time)<input name="window_from" type="time" value="${esc(editing && editing.send_window ? editing.send_window.from : '')}"></label>
        <label>until<input name="window_to" type="time" value="${esc(editing && editing.send_window ? editing.send_window.to : '')}"></label>
        <label>Time zone<input name="window_zone" placeholder="Europe/Berlin" value="${esc(editing && editing.send_window ? editing.send_window.time_zone : Intl.DateTimeFormat().resolvedOptions().timeZone)}"></label></div>
        <button type="submit">${editing ? 'Save changes' : 'Create draft'}</button>${editing ? ` <a href="#/w/${esc(ws.id)}/campaigns">Cancel editing</a>` : ''}</form>`
      : `<p class="card muted">A campaign needs a template and a number: add them on the <a href="#/w/${esc(ws.id)}/templates">Templates</a> and <a href="#/w/${esc(ws.id)}/numbers">Numbers</a> pages.</p>`
    main.innerHTML = `<h1>Campaigns</h1>${form}<div id="campaign-list">${data.map((c) => campaignCard(ws, c, templates, numbers, numbersNow)).join('') || '<p class="muted">No campaigns yet.</p>'}</div>`
    const f = $('#campaign-form')
    const lines = (text, sep) => Object.fromEntries(text.split('\n').map((l) => l.trim()).filter(Boolean).map((l) => [l.slice(0, l.indexOf(sep)).trim(), l.slice(l.indexOf(sep) + 1).trim()]))
    const bodyOf = () => {
      const v = formData(f)
      const metadata = lines(v.audience, '=')
      const body = { name: v.name, template_id: v.template_id, connection_id: v.connection_id, audience: Object.keys(metadata).length ? { metadata } : {}, variables: lines(v.variables, '='), send_window: v.window_from && v.window_to ? { from: v.window_from, to: v.window_to, time_zone: v.window_zone } : null }
      return body
    }
    if (f) {
      // the audience counted as it is typed
      let timer = null
      const count = async () => {
        try {
          const { data: p } = await api('POST', `${base}/campaigns/audience/preview`, { audience: bodyOf().audience })
          $('#audience-count').textContent = `${p.count.toLocaleString()} ${p.count === 1 ? 'contact' : 'contacts'} now`
        } catch (e) {
          if (e.status !== 401) $('#audience-count').textContent = errorText(e)
        }
      }
      f.audience.oninput = () => {
        clearTimeout(timer)
        timer = setTimeout(count, 300)
      }
      void count()
      f.onsubmit = (ev) => {
        ev.preventDefault()
        if (editing) act(() => api('PUT', `${base}/campaigns/${editing.id}`, bodyOf()).then(() => (location.hash = `#/w/${ws.id}/campaigns`)), 'Campaign saved')
        else act(() => api('POST', `${base}/campaigns`, bodyOf()), 'Draft created')
      }
    }
    bindCampaignActions(ws)
    // progress without reloading: each card's figures every few seconds; the form is left alone
    live(3000, async () => {
      const [{ data: now }, { data: numbersNow }] = await Promise.all([api('GET', `${base}/campaigns?per_page=100`), api('GET', `${base}/numbers/live`)])
      for (const c of now) {
        const el = /** @type {HTMLElement | null} */ (document.querySelector(`[data-campaign="${CSS.escape(c.id)}"]`))
        if (!el) continue
        if (el.dataset.status !== c.status) {
          el.outerHTML = campaignCard(ws, c, templates, numbers, numbersNow)
          bindCampaignActions(ws)
        } else el.querySelector('.progress').innerHTML = campaignProgress(c, numbersNow)
      }
    })
  },

  async templates(ws, params = {}) {
    const base = `/workspaces/${ws.id}`
    const [{ data }, { data: numbers }] = await Promise.all([api('GET', `${base}/templates?per_page=100`), api('GET', `${base}/connections`)])
    const editing = params.edit ? data.find((t) => t.id === params.edit) : null
    const w = editing && editing.whatsapp
    const cloud = numbers.filter((n) => n.driver === 'cloud_api')
    main.innerHTML = `<h1>Templates</h1>
      <form id="template-form" class="card"><h2>${editing ? `Edit “${esc(editing.name)}”` : 'New template'}</h2>
        <div class="filters"><label style="flex:1">Name<input name="name" required maxlength="120" value="${esc(editing ? editing.name : '')}"></label>
        <label>Category<select name="category">${['utility', 'marketing'].map((c) => `<option ${editing && editing.category === c ? 'selected' : ''}>${c}</option>`).join('')}</select></label></div>
        <label>Text, with {{name}}, {{phone}}, {{metadata.key}} and numbered {{1}}<textarea name="body" rows="4" required maxlength="4096">${esc(editing ? editing.body : '')}</textarea></label>
        <div class="filters"><label>Meta template name (for Cloud API numbers; optional)<input name="wa_name" pattern="[a-z0-9_]+" value="${esc(w ? w.name : '')}"></label>
        <label>Language<input name="wa_language" placeholder="en_US" value="${esc(w ? w.language : '')}"></label>
        <label>Media header<select name="wa_header_media"><option value="">none</option>${['image', 'video', 'document'].map((k) => `<option ${w && w.header_media === k ? 'selected' : ''}>${k}</option>`).join('')}</select></label></div>
        <button type="submit">${editing ? 'Save changes' : 'Create template'}</button>${editing ? ` <a href="#/w/${esc(ws.id)}/templates">Cancel editing</a>` : ''}
      </form>
      ${cloud.length ? `<div class="card"><form id="import-templates" class="filters"><label>Import approved templates from Meta for<select name="connection">${cloud.map((n) => `<option value="${esc(n.id)}">${esc(n.phone)}</option>`).join('')}</select></label><button type="submit" class="secondary">Import</button></form><div id="import-outcome"></div></div>` : ''}
      <table class="log"><thead><tr><th>Name</th><th class="c-status">Category</th><th>Text</th><th class="c-num">WhatsApp</th><th class="c-when"></th></tr></thead><tbody>
      ${data.map((t) => `<tr data-template="${esc(t.id)}"><td>${esc(t.name)}</td><td class="c-status">${badge(t.category)}</td><td title="${esc(t.body)}">${esc(t.body.slice(0, 120))}</td><td class="c-num">${t.whatsapp ? esc(`${t.whatsapp.name} (${t.whatsapp.language})`) : '—'}</td>
        <td class="c-when"><button class="link" data-preview="${esc(t.id)}">Preview</button> <a href="#/w/${esc(ws.id)}/templates?edit=${esc(t.id)}">Edit</a> <button class="link" data-del-template="${esc(t.id)}">Delete</button></td></tr>`).join('')}</tbody></table>
      ${data.length ? '' : '<p class="muted">No templates yet.</p>'}
      <aside id="drawer" class="drawer" role="dialog" aria-modal="false" aria-labelledby="drawer-title" hidden></aside>`
    $('#template-form').onsubmit = (ev) => {
      ev.preventDefault()
      const v = formData(ev.target)
      const whatsapp = v.wa_name ? { name: v.wa_name, language: v.wa_language, header_media: v.wa_header_media || null } : null
      const body = { name: v.name, body: v.body, category: v.category, whatsapp }
      if (editing) act(() => api('PUT', `${base}/templates/${editing.id}`, body).then(() => (location.hash = `#/w/${ws.id}/templates`)), 'Template saved')
      else act(() => api('POST', `${base}/templates`, body), 'Template created')
    }
    const importForm = $('#import-templates')
    if (importForm) importForm.onsubmit = async (ev) => {
      ev.preventDefault()
      try {
        const { data: r } = await api('POST', `/connections/${formData(ev.target).connection}/import-templates`)
        await route()
        toast(`Templates imported: ${r.created.length} new, ${r.updated.length} updated, ${r.skipped.length} skipped`)
      } catch (e) {
        if (e.status !== 401) toast(errorText(e), true)
      }
    }
    main.querySelectorAll('[data-del-template]').forEach((b) => (b.onclick = () => confirm('Delete this template?') && act(() => api('DELETE', `${base}/templates/${b.dataset.delTemplate}`), 'Template deleted')))
    main.querySelectorAll('[data-preview]').forEach((b) => (b.onclick = () => {
      const t = data.find((x) => x.id === b.dataset.preview)
      const numbered = t.variables.filter((v) => /^\d+$/.test(v))
      openDrawer(`<h2 id="drawer-title" tabindex="-1">Preview: ${esc(t.name)}</h2>
        <form id="preview-form" class="filters"><label>For the contact with the number<input name="phone" placeholder="+14155550123"></label>
        ${numbered.map((n) => `<label>{{${esc(n)}}}<input name="n${esc(n)}"></label>`).join('')}<button type="submit" class="secondary">Render</button></form>
        <div class="body" id="preview-text">${esc(t.body)}</div><p class="muted" id="preview-missing"></p>`, b)
      $('#preview-form').onsubmit = async (ev) => {
        ev.preventDefault()
        const v = formData(ev.target)
        try {
          const q = new URLSearchParams()
          if (v.phone) {
            const { data: found } = await api('GET', `${base}/contacts?${new URLSearchParams({ phone: v.phone })}`)
            if (!found.length) throw new Error('No contact has that number.')
            q.set('contact_id', found[0].id)
          }
          for (const n of numbered) if (v[`n${n}`]) q.set(n, v[`n${n}`])
          const { data: r } = await api('GET', `${base}/templates/${t.id}/preview?${q}`)
          $('#preview-text').textContent = r.body
          $('#preview-missing').textContent = r.missing.length ? `No value for ${r.missing.map((m) => `{{${m}}}`).join(', ')} (rendered empty).` : ''
        } catch (e) {
          if (e.status !== 401) $('#preview-missing').textContent = errorText(e)
        }
      }
    }))
  },

  async groups(ws, params = {}) {
    const q = new URLSearchParams({ per_page: '50', page: params.page || '1', ...(params.search ? { search: params.search } : {}) })
    const { data, meta } = await api('GET', `/workspaces/${ws.id}/groups?${q}`)
    const page = (p) => `#/w/${esc(ws.id)}/groups?${esc(new URLSearchParams({ ...params, page: String(p) }))}`
    main.innerHTML = `<h1>Groups</h1>
      <form id="group-search" class="filters card"><label>Name<input name="search" type="search" value="${esc(params.search || '')}"></label><button type="submit" class="secondary">Search</button>
      <button type="button" id="group-sync">Sync every number's groups</button></form><div id="sync-outcome"></div>
      <p class="muted" id="groups-total">${esc(Number(meta.total).toLocaleString())} ${meta.total === 1 ? 'group' : 'groups'} · page ${esc(meta.page)} of ${esc(meta.last_page)}</p>
      <table class="log"><thead><tr><th>Name</th><th class="c-num">Number</th><th class="c-n">People</th><th class="c-status">Can post</th><th class="c-when">Synced</th></tr></thead><tbody>
      ${data.map((g) => `<tr><td>${esc(g.name)}${g.announce ? ' <span class="muted">(announcements)</span>' : ''}</td><td class="c-num">${esc(g.number || '—')}</td><td class="c-n">${esc(g.participant_count)}</td><td class="c-status">${g.can_send ? 'yes' : 'no'}</td><td class="c-when">${esc(short(g.synced_at))}</td></tr>`).join('')}</tbody></table>
      ${data.length ? '' : '<p class="muted">No groups. A sandbox number is given groups with the admin API; a sync reads each number\'s.</p>'}
      ${pager(meta, page, ['← previous', 'next →'])}`
    $('#group-search').onsubmit = (ev) => {
      ev.preventDefault()
      const { search } = formData(ev.target)
      location.hash = `#/w/${ws.id}/groups${search ? `?${new URLSearchParams({ search })}` : ''}`
    }
    $('#group-sync').onclick = async (ev) => {
      ev.target.disabled = true
      try {
        const { data: r } = await api('POST', `/workspaces/${ws.id}/groups/sync`)
        await route()
        $('#sync-outcome').innerHTML = `<div class="card"><strong>Synced</strong><ul>${r.numbers.map((n) => `<li>${esc(n.number)}: ${esc(n.status)}${n.groups !== null ? ` · ${esc(n.groups)} groups` : ''}${n.error ? ` — ${esc(n.error)}` : ''}</li>`).join('')}</ul></div>`
      } catch (e) {
        if (e.status !== 401) toast(errorText(e), true)
      } finally {
        ev.target.disabled = false
      }
    }
  },

  async media(ws, params = {}) {
    const { data, meta } = await api('GET', `/workspaces/${ws.id}/media?per_page=50&page=${encodeURIComponent(params.page || '1')}`)
    const size = (n) => (n >= 1048576 ? `${(n / 1048576).toFixed(1)} MB` : n >= 1024 ? `${Math.round(n / 1024)} KB` : `${n} B`)
    const page = (p) => `#/w/${esc(ws.id)}/media?page=${p}`
    main.innerHTML = `<h1>Media</h1><p class="muted">Files uploaded or sent by customers, each scanned for malware before it was stored (one that failed the scan was refused and never kept). They are kept until their expiry (the workspace's media retention), longer while a message or campaign still has to send them.</p>
      <p class="muted" id="media-total">${esc(Number(meta.total).toLocaleString())} ${meta.total === 1 ? 'file' : 'files'} · page ${esc(meta.page)} of ${esc(meta.last_page)}</p>
      <table class="log"><thead><tr><th>File</th><th class="c-num">Type</th><th class="c-n">Size</th><th class="c-status">Scan</th><th class="c-when">Added</th><th class="c-when">Expires</th></tr></thead><tbody>
      ${data.map((m) => `<tr data-media="${esc(m.id)}"><td>${m.expired ? esc(m.filename) : `<a href="/admin/api/workspaces/${esc(ws.id)}/media/${esc(m.id)}/download">${esc(m.filename || m.id)}</a>`}</td><td class="c-num">${esc(m.mime_type)}</td><td class="c-n">${esc(size(m.size))}</td>
        <td class="c-status">${badge(m.scan)}</td><td class="c-when">${esc(short(m.created_at))}</td><td class="c-when">${m.expired ? 'expired' : esc(short(m.expires_at))}</td></tr>`).join('')}</tbody></table>
      ${data.length ? '' : '<p class="muted">No files.</p>'}
      ${pager(meta, page)}`
  },

  async webhooks(ws, params = {}) {
    if (params.endpoint) return webhookHistory(ws, params)
    const { data } = await api('GET', `/workspaces/${ws.id}/webhooks`)
    const healths = await Promise.all(data.map((h) => api('GET', `/webhooks/${h.id}/health`).then((r) => r.data)))
    main.innerHTML = `<h1>Webhooks</h1>
      <div class="card"><form id="new-hook"><div class="inline"><label style="flex:1">URL<input name="url" required placeholder="https://shop.example/capstan"></label></div>
      <fieldset class="scopes"><legend class="muted">Events (none ticked = every event)</legend>${EVENTS.map((e) => `<label><input type="checkbox" name="event" value="${e}">${e}</label>`).join('')}</fieldset>
      <button type="submit">Add endpoint</button></form><div id="new-hook-secret"></div></div>
      ${data.map((h, i) => `<div class="card health-${esc(healths[i].state)}" data-hook="${esc(h.id)}"><span class="mono">${esc(h.url)}</span> ${badge(h.status)} <span class="health-now">${hookHealth(h.id, healths[i])}</span>
        <p class="muted">${esc(h.events.join(', '))}${h.headers.length ? ` · extra headers: ${esc(h.headers.join(', '))}` : ''}</p>
        <p><a class="button secondary" href="#/w/${esc(ws.id)}/webhooks?endpoint=${esc(h.id)}">Delivery history</a> <button class="secondary" data-secret="${esc(h.id)}">Show signing secret</button> <button class="secondary" data-rotate="${esc(h.id)}">Rotate secret</button> <button class="secondary" data-headers="${esc(h.id)}">Extra headers…</button> ${h.status === 'disabled' ? `<button data-enable="${esc(h.id)}">Enable again</button>` : `<button class="secondary" data-test="${esc(h.id)}">Send test event</button> <button class="secondary" data-disable="${esc(h.id)}">Disable</button>`} <button class="danger" data-del="${esc(h.id)}">Remove</button></p>
        ${h.status === 'active' ? `<p class="inline"><select data-since="${esc(h.id)}" aria-label="Failed deliveries of events from the">${RECOVER_PERIODS.map(([hours, label]) => `<option value="${hours}">${label}</option>`).join('')}</select> <button class="secondary" data-recover="${esc(h.id)}">Send failed deliveries again</button></p>` : ''}
        ${h.previous_secret_expires_at ? `<p class="muted">The previous secret also signs until ${when(h.previous_secret_expires_at)}: switch the receiver to the new one before then.</p>` : ''}
        ${h.status === 'disabled' ? '<p class="muted">Disabled: no events are written for it. Enabling it again sends the deliveries that were pending when it was disabled.</p>' : ''}
        <div id="secret-${esc(h.id)}"></div></div>`).join('') || '<p class="muted">No endpoints yet.</p>'}`
    // health moves with every delivery: refreshed every 10 s
    live(10_000, async () => {
      for (const h of data) {
        const { data: x } = await api('GET', `/webhooks/${h.id}/health`)
        const card = document.querySelector(`[data-hook="${CSS.escape(h.id)}"]`)
        if (!card) continue
        card.className = `card health-${x.state}`
        card.querySelector('.health-now').innerHTML = hookHealth(h.id, x)
      }
    })
    $('#new-hook').onsubmit = async (ev) => {
      ev.preventDefault()
      const f = ev.target
      const events = [...f.querySelectorAll('input[name=event]:checked')].map((i) => i.value)
      try {
        const { data: hook } = await api('POST', `/workspaces/${ws.id}/webhooks`, { url: f.url.value, ...(events.length ? { events } : {}) })
        await pages.webhooks(ws)
        $('#new-hook-secret').innerHTML = `<div class="secret"><strong>Signing secret</strong> (verify the webhook-signature header with it)<span class="mono">${esc(hook.secret)}</span></div>`
      } catch (e) {
        toast(errorText(e), true)
      }
    }
    main.querySelectorAll('[data-secret]').forEach((b) => (b.onclick = async () => {
      const { data: h } = await api('GET', `/webhooks/${b.dataset.secret}`)
      $(`#secret-${CSS.escape(h.id)}`).innerHTML = `<div class="secret"><span class="mono">${esc(h.secret)}</span></div>`
    }))
    // extra request headers: the current ones (values come with the secret) in a form, one "Name: value" a line
    main.querySelectorAll('[data-headers]').forEach((b) => (b.onclick = async () => {
      const { data: h } = await api('GET', `/webhooks/${b.dataset.headers}`)
      const box = $(`#secret-${CSS.escape(h.id)}`)
      box.innerHTML = `<form data-headers-form="${esc(h.id)}"><label>Extra headers, one "Name: value" a line (empty: none)<textarea name="headers" rows="3">${esc(Object.entries(h.header_values).map(([k, v]) => `${k}: ${v}`).join('\n'))}</textarea></label><button type="submit">Save headers</button></form>`
      box.querySelector('form').onsubmit = (ev) => {
        ev.preventDefault()
        const lines = ev.target.headers.value.split('\n').map((l) => l.trim()).filter(Boolean)
        const headers = Object.fromEntries(lines.map((l) => [l.slice(0, l.indexOf(':')).trim(), l.slice(l.indexOf(':') + 1).trim()]))
        if (lines.some((l) => l.indexOf(':') <= 0)) return toast('Each line needs "Name: value"', true)
        act(() => api('PATCH', `/webhooks/${h.id}`, { headers: lines.length ? headers : null }), 'Headers saved')
      }
    }))
    main.querySelectorAll('[data-rotate]').forEach((b) => (b.onclick = async () => {
      if (!confirm('Make a new signing secret? The current one keeps signing beside it for 24 hours, so the receiver can be switched over without missing an event.')) return
      try {
        const { data: h } = await api('POST', `/webhooks/${b.dataset.rotate}/rotate-secret`, {})
        await pages.webhooks(ws)
        $(`#secret-${CSS.escape(h.id)}`).innerHTML = `<div class="secret"><strong>New signing secret</strong><span class="mono">${esc(h.secret)}</span></div>`
        toast('Secret rotated')
      } catch (e) {
        toast(errorText(e), true)
      }
    }))
    main.querySelectorAll('[data-recover]').forEach((b) => (b.onclick = async () => {
      const hours = Number(main.querySelector(`select[data-since="${CSS.escape(b.dataset.recover)}"]`).value)
      const since = new Date(Date.now() - hours * 3_600_000).toISOString()
      const r = await act(() => api('POST', `/webhooks/${b.dataset.recover}/recover`, { since }), null)
      if (r) toast(r.data.requeued ? `${r.data.requeued} ${r.data.requeued === 1 ? 'delivery goes' : 'deliveries go'} out again` : 'No failed deliveries in that time')
    }))
    main.querySelectorAll('[data-test]').forEach((b) => (b.onclick = () => act(() => api('POST', `/webhooks/${b.dataset.test}/test`), 'Test event queued')))
    main.querySelectorAll('[data-del]').forEach((b) => (b.onclick = () => confirm('Remove this endpoint?') && act(() => api('DELETE', `/webhooks/${b.dataset.del}`), 'Endpoint removed')))
    main.querySelectorAll('[data-enable]').forEach((b) => (b.onclick = () => act(() => api('PATCH', `/webhooks/${b.dataset.enable}`, { status: 'active' }), 'Endpoint enabled')))
    main.querySelectorAll('[data-disable]').forEach((b) => (b.onclick = () => confirm('Disable this endpoint? Its pending deliveries are held until it is enabled again.') && act(() => api('PATCH', `/webhooks/${b.dataset.disable}`, { status: 'disabled' }), 'Endpoint disabled')))
  },

  async suppressions(ws, params = {}) {
    const q = new URLSearchParams({ per_page: '50', page: params.page || '1', ...(params.phone ? { phone: params.phone } : {}) })
    const { data, meta, problem } = await listOrProblem(`/workspaces/${ws.id}/suppressions?${q}`)
    const page = (p) => `#/w/${esc(ws.id)}/suppressions?page=${p}`
    main.innerHTML = `<h1>Suppression list</h1><p class="muted">Numbers here are never messaged, whatever their consent.</p>
      <div class="card"><form id="new-sup" class="inline"><label>Phone (E.164)<input name="phone" required></label><label style="flex:1">Reason<input name="reason"></label><button type="submit">Suppress</button></form></div>
      <form id="import" class="inline card"><label>Import a do-not-contact list from a CSV file (a header line with phone, and reason if you like; up to 100,000 rows) <input type="file" name="file" accept=".csv,text/csv" required></label><button type="submit" class="secondary">Import</button></form><div id="import-result"></div>
      <form id="find-suppressed" class="filters card"><label>Find a number<input name="phone" placeholder="+14155550123" value="${esc(params.phone || '')}"></label><button type="submit" class="secondary">Find</button> <a href="#/w/${esc(ws.id)}/suppressions">All</a></form>${problem ? `<p class="card">${esc(problem)}</p>` : ''}
      <p class="muted" id="suppressions-total">${esc(Number(meta.total).toLocaleString())} ${meta.total === 1 ? 'number' : 'numbers'} · page ${esc(meta.page)} of ${esc(meta.last_page)}</p>
      <table class="stack"><thead><tr><th>Phone</th><th>Reason</th><th>Since</th><th></th></tr></thead><tbody>
      ${data.map((s) => `<tr>${cell('Phone', esc(s.phone))}${cell('Reason', esc(s.reason || ''))}${cell('Since', when(s.created_at))}${cell('', `<button class="secondary" data-unsup="${esc(s.phone)}">Remove</button>`)}</tr>`).join('')}</tbody></table>
      ${pager(meta, page)}`
    $('#new-sup').onsubmit = (ev) => {
      ev.preventDefault()
      const f = formData(ev.target)
      act(() => api('POST', `/workspaces/${ws.id}/suppressions`, { phone: f.phone, ...(f.reason ? { reason: f.reason } : {}) }), 'Number suppressed')
    }
    $('#find-suppressed').onsubmit = (ev) => {
      ev.preventDefault()
      const { phone } = formData(ev.target)
      location.hash = `#/w/${ws.id}/suppressions${phone ? `?${new URLSearchParams({ phone })}` : ''}`
    }
    importForm(`/workspaces/${ws.id}/suppressions/import`, (r) => `Numbers suppressed: ${r.added} added, ${r.already} already on the list`)
    main.querySelectorAll('[data-unsup]').forEach((b) => (b.onclick = () => act(() => api('DELETE', `/workspaces/${ws.id}/suppressions/${encodeURIComponent(b.dataset.unsup)}`), 'Removed')))
  },

  async audit(ws, params = {}) {
    const q = new URLSearchParams({ per_page: '50', page: params.page || '1', ...(params.action ? { action: params.action } : {}) })
    const { data, meta } = await api('GET', `/workspaces/${ws.id}/audit-log?${q}`)
    const KINDS = [['api_key', 'API keys'], ['workspace', 'workspace settings'], ['connection', 'numbers'], ['webhook', 'webhooks'], ['templates', 'template imports'], ['suppression', 'suppressions'], ['suppressions', 'suppression imports'], ['contact', 'contact exports and erasures'], ['contacts', 'contact imports and exports']]
    const page = (p) => `#/w/${esc(ws.id)}/audit?${esc(new URLSearchParams({ ...params, page: String(p) }))}`
    const VIA = { dashboard: 'the dashboard', cli: 'the CLI', admin_token: 'the admin token' }
    // how the operator signed the request, and from where (older entries: just "operator")
    const by = (e) => (e.via ? `${VIA[e.via] ?? e.via}${e.ip ? ` from ${e.ip}` : ''}` : e.actor)
    const about = (e) => (e.key_id ? `key ${e.key_name ? `“${e.key_name}”` : '(removed)'}` : e.subject_id ? (e.subject_name ? e.subject_name : `${e.subject_id} (removed)`) : '<span class="muted">— (a person: not named here)</span>')
    main.innerHTML = `<h1>Audit log</h1>
      <form id="audit-filter" class="filters card"><label>What<select name="action"><option value="">everything</option>${KINDS.map(([k, label]) => `<option value="${k}" ${params.action === k ? 'selected' : ''}>${label}</option>`).join('')}</select></label><button type="submit" class="secondary">Show</button></form>
      <p class="muted" id="audit-total">${esc(Number(meta.total).toLocaleString())} ${meta.total === 1 ? 'entry' : 'entries'} · page ${esc(meta.page)} of ${esc(meta.last_page)} · every entry is an operator's: “By” says how they signed in (this dashboard, the CLI or the admin token) and from which address</p>
      <table class="stack"><thead><tr><th>When</th><th>Action</th><th>By</th><th>About</th></tr></thead><tbody>
      ${data.map((e) => `<tr>${cell('When', esc(when(e.at)))}${cell('Action', `<code>${esc(e.action)}</code>`)}${cell('By', esc(by(e)))}${cell('About', e.key_id || e.subject_id ? esc(about(e)) : about(e))}</tr>`).join('')}</tbody></table>
      ${pager(meta, page)}`
    $('#audit-filter').onsubmit = (ev) => {
      ev.preventDefault()
      const { action } = formData(ev.target)
      location.hash = `#/w/${ws.id}/audit${action ? `?${new URLSearchParams({ action })}` : ''}`
    }
  },
}

// ---------------------------------------------------------------- routing

const mib = (n) => `${Math.floor(n / 2 ** 20).toLocaleString()} MiB`

/** What /readyz says is wrong with the appliance, shown above every page (nothing when all is well). */
async function health() {
  let r = null
  try {
    r = await (await fetch('/readyz', { headers: { accept: 'application/json' } })).json()
  } catch {
    return
  }
  const problems = []
  if (r.database === 'read_only') problems.push('The database takes no writes right now (a standby, or a failover under way): changes and sends are refused (503) until it does.')
  else if (r.database !== 'ok') problems.push('The database cannot be read.')
  if (r.scanner && r.scanner !== 'ok') problems.push('The malware scanner (clamd) is unreachable: uploads and sends with a file are refused (503).')
  if (r.backup && r.backup.state === 'failed') problems.push('The last automatic backup failed; see Backups.')
  if (r.backup && r.backup.state === 'overdue') problems.push(`No automatic backup ${r.backup.last_success_at ? `since ${new Date(r.backup.last_success_at).toLocaleString()}` : 'yet'}; see Backups.`)
  if (r.disk && r.disk.state !== 'ok') problems.push(`The data directory's disk is nearly full: ${mib(r.disk.free_bytes)} of ${mib(r.disk.total_bytes)} free. Writes are refused (507) once it is full.`)
  const el = $('#health')
  el.innerHTML = problems.map((p) => `<p>${esc(p)}</p>`).join('')
  el.hidden = problems.length === 0
}

/**
 * Render the page the location names. Calls do not overlap: one made while a render is under way
 * (a filter submitted while an action re-renders) runs again once it ends, so the page on screen
 * is always the one the location names now, never an older render that finished later.
 */
/**
 * A page's figures that move, refreshed every `ms` while it is on screen (and the tab is
 * visible); a new render of any page stops it. Only what `refresh` touches changes: a form being
 * filled in or the scroll position stays as it is.
 */
let liveTimer = null
function live(ms, refresh) {
  clearInterval(liveTimer)
  liveTimer = setInterval(() => {
    if (!document.hidden) refresh().catch(() => {})
  }, ms)
}

let routing = null
let routeAgain = false
async function route() {
  if (routing) {
    routeAgain = true
    return routing
  }
  routing = (async () => {
    do {
      routeAgain = false
      await renderLocation()
    } while (routeAgain)
  })()
  try {
    await routing
  } finally {
    routing = null
  }
}

/** The path last drawn: a new one moves focus to the page's heading (an action's re-render keeps it where it is). */
let drawnPath = null

/** After a page is drawn: the document's title names it; on a navigation, focus goes to its heading. */
function announce(path) {
  const h1 = main.querySelector('h1')
  const ws = $('#tabs').hidden ? '' : $('#ws-name').textContent.replace(/ \((active|inactive)\)$/, '')
  document.title = [h1 ? h1.textContent : '', ws, 'Capstan'].filter(Boolean).join(' · ')
  if (path === drawnPath || !h1) return
  drawnPath = path
  h1.tabIndex = -1
  h1.focus({ preventScroll: true })
}

async function renderLocation() {
  clearInterval(liveTimer)
  try {
    const { data } = await api('GET', '/session')
    SCOPES = data.scopes
    EVENTS = data.event_types
  } catch {
    return
  }
  $('#sign-out').hidden = false
  $('#backups-link').hidden = false
  void health()
  const [path, query] = (location.hash.slice(1) || '/workspaces').split('?')
  const parts = path.split('/').filter(Boolean)
  try {
    if (parts[0] === 'w' && parts[1]) {
      const ws = (await api('GET', `/workspaces/${parts[1]}`)).data
      const page = pages[parts[2]] ? parts[2] : 'overview'
      tabs(ws, page)
      await pages[page](ws, Object.fromEntries(new URLSearchParams(query || '')))
    } else if (parts[0] === 'backups') await backupsPage()
    else await workspacesPage()
  } catch (e) {
    if (e.status !== 401) main.innerHTML = `<h1>Something went wrong</h1><p class="card">${esc(errorText(e))}</p>`
  }
  announce(location.hash)
}

window.addEventListener('hashchange', route)
route()
