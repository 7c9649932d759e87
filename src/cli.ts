/**
 * Admin subcommands of `capstan`: thin clients of the admin API (CONTRACT §6) for operators on
 * the VPS. They read CAPSTAN_URL (default: the server on this machine, see `localBase`) and CAPSTAN_ADMIN_TOKEN.
 * Output is a table or key: value lines by default, the API's JSON on one line with --json.
 */
import { parseArgs } from 'node:util'
import { VERSION } from './version'

/**
 * One subcommand: its admin API call and the options it reads (any other option is refused, so a
 * misspelt `--scope` cannot quietly issue a key with every scope). `document`: the answer is a
 * document to keep (an export), printed as indented JSON either way; `raw`: a file (a CSV), printed
 * as it comes. `summary`: how a successful
 * answer is printed without --json, where a table or key: value lines would not read well.
 */
type Route = { method: string; path: (a: Args) => string; body?: (a: Args) => unknown; upload?: (a: Args) => Promise<FormData | { json: unknown }>; options?: string[]; repeated?: string[]; document?: boolean; raw?: boolean; summary?: (data: any) => string }
type Args = { positionals: string[]; values: Record<string, string | string[] | boolean | undefined> }

const csv = (v: unknown) => (typeof v === 'string' && v.length ? v.split(',').map((x) => x.trim()).filter(Boolean) : undefined)
/** A query string: each key a fixed value (`per_page: '100'`) or, when it names a given flag, that flag's value. */
const query = (a: Args, from: Record<string, string>) => {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(from)) {
    if (k === 'per_page') q.set(k, v)
    else if (a.values[v] !== undefined) q.set(k, String(a.values[v]))
  }
  return q.toString()
}

const pos = (a: Args, i: number, name: string) => {
  const v = a.positionals[i]
  if (!v) throw new UsageError(`missing ${name}`)
  return encodeURIComponent(v)
}
const ws = (a: Args) => {
  const v = a.values.workspace
  if (typeof v !== 'string' || !v) throw new UsageError('missing --workspace ID')
  return encodeURIComponent(v)
}

class UsageError extends Error {}

/**
 * `contacts import FILE`, `suppressions import FILE`: a CSV file goes up as it is (multipart,
 * field `file`); a `.json` one holds `{"<list>": [...]}` or the list alone.
 */
const listFile = (list: string) =>
  async function (a: Args): Promise<FormData | { json: unknown }> {
    const path = a.positionals[0]
    if (!path) throw new UsageError('missing FILE (CSV, or .json)')
    const file = Bun.file(path)
    if (!(await file.exists())) throw new UsageError(`cannot read ${path}`)
    if (path.toLowerCase().endsWith('.json')) {
      let json: unknown
      try {
        json = JSON.parse(await file.text())
      } catch {
        throw new UsageError(`${path} is not JSON`)
      }
      return { json: Array.isArray(json) ? { [list]: json } : json }
    }
    const form = new FormData()
    form.set('file', new Blob([await file.arrayBuffer()], { type: 'text/csv' }), `${list}.csv`)
    return form
  }

/**
 * The server started on this machine with the same environment: CAPSTAN_HOST and CAPSTAN_PORT,
 * with a listen-everywhere host read as loopback (`0.0.0.0` → 127.0.0.1, `::` → [::1]).
 */
export function localBase(env: Record<string, string | undefined>): string {
  let host = (env.CAPSTAN_HOST || '').trim().replace(/^\[(.*)\]$/, '$1')
  if (host === '' || host === '0.0.0.0') host = '127.0.0.1'
  else if (host === '::') host = '::1'
  return `http://${host.includes(':') ? `[${host}]` : host}:${(env.CAPSTAN_PORT || '').trim() || 8080}`
}

/** A flag's value as a number (a usage error for anything else). */
function numberFlag(a: Args, flag: string): number {
  const v = a.values[flag]
  const n = typeof v === 'string' && v.trim() !== '' ? Number(v) : NaN
  if (!Number.isFinite(n)) throw new UsageError(`--${flag} must be a number`)
  return n
}

/** `--warmup-days N --warmup-start-cap N` → a warm-up starting now; `--warmup-days 0` ends one; neither: unchanged. */
function warmupBody(a: Args) {
  if (a.values['warmup-days'] === undefined && a.values['warmup-start-cap'] === undefined) return undefined
  const days = numberFlag(a, 'warmup-days')
  return days === 0 ? null : { days, start_daily_cap: numberFlag(a, 'warmup-start-cap') }
}

/** `--header 'Name: value'` (repeated) → the endpoint's extra headers, replacing its set; none given removes them. */
function headersBody(a: Args) {
  const given = (a.values.header as string[] | undefined) ?? []
  const headers = Object.fromEntries(
    given.map((h) => {
      const at = h.indexOf(':')
      if (at <= 0) throw new UsageError(`--header needs "Name: value"`)
      return [h.slice(0, at).trim(), h.slice(at + 1).trim()]
    }),
  )
  return { headers: given.length ? headers : null }
}

/** `workspaces policy` flags → the sending_policy fields they set. */
const POLICY_FLAGS: Record<string, string> = { 'hourly-cap': 'hourly_cap', 'daily-cap': 'daily_cap', 'min-gap': 'min_gap_seconds', 'max-gap': 'max_gap_seconds' }

/** The flags given; the admin API keeps the others (`--hourly-cap 120` alone changes only the hourly cap). */
function policyBody(a: Args) {
  const given = Object.keys(POLICY_FLAGS).filter((flag) => a.values[flag] !== undefined)
  if (!given.length) throw new UsageError('give at least one of --hourly-cap, --daily-cap, --min-gap, --max-gap')
  const numbers = given.map((flag) => [POLICY_FLAGS[flag]!, numberFlag(a, flag)] as const)
  return { settings: { sending_policy: Object.fromEntries(numbers) } }
}

const COMMANDS: Record<string, Route> = {
  'workspaces create': { method: 'POST', path: () => '/workspaces', body: (a) => ({ name: a.values.name, slug: a.values.slug }), options: ['name', 'slug'] },
  'workspaces list': { method: 'GET', path: () => '/workspaces?per_page=100' },
  'workspaces get': { method: 'GET', path: (a) => `/workspaces/${pos(a, 0, 'workspace id')}` },
  'workspaces update': {
    method: 'PATCH',
    path: (a) => `/workspaces/${pos(a, 0, 'workspace id')}`,
    body: (a) => ({ name: a.values.name, status: a.values.status }),
    options: ['name', 'status'],
  },
  'workspaces policy': { method: 'PATCH', path: (a) => `/workspaces/${pos(a, 0, 'workspace id')}`, body: policyBody, options: Object.keys(POLICY_FLAGS) },
  'keys create': {
    method: 'POST',
    path: (a) => `/workspaces/${ws(a)}/keys`,
    body: (a) => ({ name: a.values.name, scopes: csv(a.values.scopes), expires_at: a.values['expires-at'], allowed_ips: csv(a.values['allowed-ips']) }),
    options: ['workspace', 'name', 'scopes', 'expires-at', 'allowed-ips'],
  },
  'keys list': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/keys`, options: ['workspace'] },
  'keys revoke': { method: 'POST', path: (a) => `/keys/${pos(a, 0, 'key id')}/revoke` },
  'keys remove': { method: 'DELETE', path: (a) => `/keys/${pos(a, 0, 'key id')}` },
  'audit-log': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/audit-log?${query(a, { per_page: '100', action: 'action' })}`, options: ['workspace', 'action'] },
  'messages list': {
    method: 'GET',
    path: (a) => `/workspaces/${ws(a)}/messages?${query(a, { per_page: '100', q: 'text', phone: 'phone', status: 'status', direction: 'direction', from: 'from', to: 'to' })}`,
    options: ['workspace', 'text', 'phone', 'status', 'direction', 'from', 'to'],
  },
  'contacts list': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/contacts?${query(a, { per_page: '100', phone: 'phone', search: 'name', consent: 'consent' })}`, options: ['workspace', 'phone', 'name', 'consent'] },
  'groups list': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/groups?${query(a, { per_page: '100', search: 'search' })}`, options: ['workspace', 'search'] },
  'groups sync': { method: 'POST', path: (a) => `/workspaces/${ws(a)}/groups/sync`, options: ['workspace'] },
  'media list': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/media?per_page=100`, options: ['workspace'] },
  'connections create': {
    method: 'POST',
    path: (a) => `/workspaces/${ws(a)}/connections`,
    body: (a) => ({ phone: a.values.phone, name: a.values.name, driver: a.values.driver ?? 'sandbox', config: a.values.config ? JSON.parse(String(a.values.config)) : undefined, warmup: warmupBody(a) }),
    options: ['workspace', 'phone', 'name', 'driver', 'config', 'warmup-days', 'warmup-start-cap'],
  },
  'connections list': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/connections`, options: ['workspace'] },
  'connections update': {
    method: 'PATCH',
    path: (a) => `/connections/${pos(a, 0, 'connection id')}`,
    body: (a) => ({ name: a.values.name, status: a.values.status, config: a.values.config ? JSON.parse(String(a.values.config)) : undefined, warmup: warmupBody(a) }),
    options: ['name', 'status', 'config', 'warmup-days', 'warmup-start-cap'],
  },
  'connections remove': { method: 'DELETE', path: (a) => `/connections/${pos(a, 0, 'connection id')}` },
  'connections import-templates': { method: 'POST', path: (a) => `/connections/${pos(a, 0, 'connection id')}/import-templates`, summary: importSummary },
  'webhooks create': { method: 'POST', path: (a) => `/workspaces/${ws(a)}/webhooks`, body: (a) => ({ url: a.values.url, events: csv(a.values.events) }), options: ['workspace', 'url', 'events'] },
  'webhooks list': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/webhooks`, options: ['workspace'] },
  'webhooks remove': { method: 'DELETE', path: (a) => `/webhooks/${pos(a, 0, 'webhook id')}` },
  'webhooks enable': { method: 'PATCH', path: (a) => `/webhooks/${pos(a, 0, 'webhook id')}`, body: () => ({ status: 'active' }) },
  'webhooks disable': { method: 'PATCH', path: (a) => `/webhooks/${pos(a, 0, 'webhook id')}`, body: () => ({ status: 'disabled' }) },
  'webhooks headers': { method: 'PATCH', path: (a) => `/webhooks/${pos(a, 0, 'webhook id')}`, body: headersBody, repeated: ['header'] },
  'webhooks rotate-secret': {
    method: 'POST',
    path: (a) => `/webhooks/${pos(a, 0, 'webhook id')}/rotate-secret`,
    body: (a) => (a.values['keep-previous-hours'] === undefined ? {} : { keep_previous_hours: numberFlag(a, 'keep-previous-hours') }),
    options: ['keep-previous-hours'],
  },
  'webhooks recover': {
    method: 'POST',
    path: (a) => `/webhooks/${pos(a, 0, 'webhook id')}/recover`,
    body: (a) => ({ since: a.values.since }),
    options: ['since'],
  },
  'webhooks deliveries': {
    method: 'GET',
    path: (a) => `/webhooks/${pos(a, 0, 'webhook id')}/deliveries?per_page=100${a.values.status ? `&status=${encodeURIComponent(String(a.values.status))}` : ''}`,
    options: ['status'],
  },
  'webhooks delivery': { method: 'GET', path: (a) => `/webhooks/${pos(a, 0, 'webhook id')}/deliveries/${pos(a, 1, 'delivery id')}` },
  'webhooks resend': { method: 'POST', path: (a) => `/webhooks/${pos(a, 0, 'webhook id')}/deliveries/${pos(a, 1, 'delivery id')}/resend` },
  'webhooks health': { method: 'GET', path: (a) => `/webhooks/${pos(a, 0, 'webhook id')}/health` },
  'suppressions add': { method: 'POST', path: (a) => `/workspaces/${ws(a)}/suppressions`, body: (a) => ({ phone: a.values.phone, reason: a.values.reason }), options: ['workspace', 'phone', 'reason'] },
  'suppressions list': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/suppressions?per_page=100`, options: ['workspace'] },
  'suppressions import': {
    method: 'POST',
    path: (a) => `/workspaces/${ws(a)}/suppressions/import`,
    upload: listFile('suppressions'),
    options: ['workspace'],
    summary: (d: { added: number; already: number }) => `added ${d.added}, already on the list ${d.already}`,
  },
  'suppressions remove': { method: 'DELETE', path: (a) => `/workspaces/${ws(a)}/suppressions/${pos(a, 0, 'phone')}`, options: ['workspace'] },
  'contacts export': { method: 'POST', path: (a) => `/workspaces/${ws(a)}/contacts/export`, body: (a) => ({ phone: a.values.phone }), options: ['workspace', 'phone'], document: true },
  'backups list': { method: 'GET', path: () => '/backups', summary: backupsSummary },
  'backups run': {
    method: 'POST',
    path: () => '/backups',
    summary: (d: BackupLine) => `backup written: ${d.name} (${d.messages} messages, ${d.media_files} media files)`,
  },
  'contacts csv': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/contacts.csv`, options: ['workspace'], raw: true },
  'contacts import': {
    method: 'POST',
    path: (a) => `/workspaces/${ws(a)}/contacts/import`,
    upload: listFile('contacts'),
    options: ['workspace'],
    summary: (d: { created: number; updated: number }) => `created ${d.created}, updated ${d.updated}`,
  },
  'contacts erase': { method: 'POST', path: (a) => `/workspaces/${ws(a)}/contacts/erase`, body: (a) => ({ phone: a.values.phone }), options: ['workspace', 'phone'] },
  'templates list': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/templates?per_page=100`, options: ['workspace'] },
  'templates create': {
    method: 'POST',
    path: (a) => `/workspaces/${ws(a)}/templates`,
    body: (a) => ({ name: a.values.name, body: a.values.text, category: a.values.category }),
    options: ['workspace', 'name', 'text', 'category'],
  },
  'templates remove': { method: 'DELETE', path: (a) => `/workspaces/${ws(a)}/templates/${pos(a, 0, 'template id')}`, options: ['workspace'] },
  'campaigns list': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/campaigns?per_page=100`, options: ['workspace'] },
  'campaigns get': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/campaigns/${pos(a, 0, 'campaign id')}`, options: ['workspace'] },
  'campaigns recipients': { method: 'GET', path: (a) => `/workspaces/${ws(a)}/campaigns/${pos(a, 0, 'campaign id')}/recipients?per_page=100`, options: ['workspace'] },
  'campaigns create': {
    method: 'POST',
    path: (a) => `/workspaces/${ws(a)}/campaigns`,
    body: (a) => ({ name: a.values.name, template_id: a.values.template, connection_id: a.values.connection, audience: a.values.audience ? { metadata: JSON.parse(String(a.values.audience)) } : undefined }),
    options: ['workspace', 'name', 'template', 'connection', 'audience'],
  },
  'campaigns schedule': {
    method: 'POST',
    path: (a) => `/workspaces/${ws(a)}/campaigns/${pos(a, 0, 'campaign id')}/schedule`,
    body: (a) => (a.values.at ? { at: a.values.at } : {}),
    options: ['workspace', 'at'],
  },
  'campaigns pause': { method: 'POST', path: (a) => `/workspaces/${ws(a)}/campaigns/${pos(a, 0, 'campaign id')}/pause`, options: ['workspace'] },
  'campaigns resume': { method: 'POST', path: (a) => `/workspaces/${ws(a)}/campaigns/${pos(a, 0, 'campaign id')}/resume`, options: ['workspace'] },
  'campaigns cancel': { method: 'POST', path: (a) => `/workspaces/${ws(a)}/campaigns/${pos(a, 0, 'campaign id')}/cancel`, options: ['workspace'] },
}

export const CLI_HELP = `Admin commands (talk to a running server's admin API; need CAPSTAN_ADMIN_TOKEN; CAPSTAN_URL when the server is not the one CAPSTAN_HOST and CAPSTAN_PORT name here):
  capstan workspaces create --name NAME [--slug SLUG]
  capstan workspaces list | get ID | update ID [--name N] [--status active|inactive]
  capstan workspaces policy ID [--hourly-cap N] [--daily-cap N] [--min-gap S] [--max-gap S]   (flags left out keep their value)
  capstan keys create --workspace ID --name NAME [--scopes a:b,c:d] [--expires-at ISO] [--allowed-ips 203.0.113.7,10.0.0.0/8]
  capstan keys list --workspace ID | revoke KEY_ID | remove KEY_ID
  capstan audit-log --workspace ID [--action webhook | webhook.removed]
  capstan messages list --workspace ID [--text WORDS] [--phone +E164] [--status S] [--direction inbound|outbound] [--from ISO] [--to ISO]
  capstan contacts list --workspace ID [--phone +E164 | --name TEXT] [--consent opted_in|opted_out|unknown]
  capstan groups list --workspace ID [--search NAME] | sync --workspace ID
  capstan media list --workspace ID
  capstan connections create --workspace ID --phone +E164 [--name N] [--driver sandbox] [--config JSON] [--warmup-days N --warmup-start-cap N]
  capstan connections list --workspace ID | update ID [--status online|offline] [--config JSON] [--warmup-days N --warmup-start-cap N | --warmup-days 0] | remove ID
  capstan connections import-templates ID   (a Cloud API number's approved WhatsApp templates become templates of its workspace)
  capstan webhooks create --workspace ID --url URL [--events message.sent,message.failed]
  capstan webhooks list --workspace ID | remove ID | enable ID | disable ID | health ID
  capstan webhooks deliveries ID [--status pending|delivered|failed] | delivery ID DELIVERY_ID | resend ID DELIVERY_ID
  capstan webhooks headers ID [--header 'Name: value' ...]   (extra request headers, replacing the set; none: removes them)
  capstan webhooks recover ID --since ISO   (send again the deliveries that failed, of events since then)
  capstan webhooks rotate-secret ID [--keep-previous-hours N]   (new signing secret; the old one also signs for N hours, default 24)
  capstan suppressions add --workspace ID --phone +E164 [--reason TEXT]
  capstan suppressions list --workspace ID | remove --workspace ID +E164
  capstan suppressions import --workspace ID FILE   (a CSV with a header: phone, reason; or a .json {"suppressions": [...]})
  capstan contacts export --workspace ID --phone +E164 > FILE   (everything kept about the contact, as JSON)
  capstan contacts csv --workspace ID > FILE   (every contact, as CSV that contacts import reads)
  capstan contacts import --workspace ID FILE   (a CSV with a header: phone, name, consent_status, metadata.<key>; or a .json {"contacts": [...]})
  capstan contacts erase --workspace ID --phone +E164   (the contact and its personal data, for good)
  capstan templates list --workspace ID | create --workspace ID --name N --text 'Hi {{name}}' [--category utility|marketing] | remove --workspace ID TEMPLATE_ID
  capstan campaigns list --workspace ID | get --workspace ID CAMPAIGN_ID | recipients --workspace ID CAMPAIGN_ID
  capstan campaigns create --workspace ID --name N --template TEMPLATE_ID --connection CONNECTION_ID [--audience '{"plan":"pro"}']
  capstan campaigns schedule --workspace ID CAMPAIGN_ID [--at ISO] | pause … | resume … | cancel --workspace ID CAMPAIGN_ID
  capstan backups list | run   (the automatic backups in CAPSTAN_BACKUP_DIR; run: one now, through the server)
  capstan admin METHOD PATH [JSON]      any admin API call, e.g. capstan admin GET /workspaces
Add --json for the API's JSON on one line.`

/** Run an admin subcommand; returns the process exit code, or null when `argv` is not one. */
export async function runAdminCommand(argv: string[], env: Record<string, string | undefined>): Promise<number | null> {
  const [group, sub] = argv
  let route: Route | null = null // the raw admin call's is made from its arguments once parsed
  let name: string
  let rest: string[]
  if (group === 'admin') {
    name = group
    rest = argv.slice(1)
  } else if (group && COMMANDS[`${group} ${sub}`]) {
    route = COMMANDS[`${group} ${sub}`]
    name = `${group} ${sub}`
    rest = argv.slice(2)
  } else if (group && COMMANDS[group]) {
    route = COMMANDS[group]
    name = group
    rest = argv.slice(1)
  } else {
    // a known group with a missing or misspelt subcommand: name the ones it has
    const subs = Object.keys(COMMANDS).filter((c) => c.startsWith(`${group} `)).map((c) => c.slice(group!.length + 1))
    if (!subs.length) return null
    console.error(`capstan: ${sub ? `unknown subcommand "${group} ${sub}"` : `"${group}" needs a subcommand`}: ${subs.join(', ')}; run \`capstan help\``)
    return 2
  }

  let args: Args
  try {
    const parsed = parseArgs({
      args: rest,
      allowPositionals: true,
      strict: true,
      options: {
        json: { type: 'boolean' },
        ...Object.fromEntries((route?.options ?? []).map((o) => [o, { type: 'string' as const }])),
        ...Object.fromEntries((route?.repeated ?? []).map((o) => [o, { type: 'string' as const, multiple: true }])),
      },
    })
    args = { positionals: parsed.positionals, values: parsed.values as Args['values'] }
  } catch (e) {
    const unknown = (e as { code?: string }).code === 'ERR_PARSE_ARGS_UNKNOWN_OPTION' ? /'([^']+)'/.exec((e as Error).message)?.[1] : undefined
    console.error(`capstan: ${unknown ? `${name} does not take ${unknown}` : (e as Error).message}; run \`capstan help\``)
    return 2
  }
  if (!route) {
    const [method, path, json] = args.positionals
    if (!method || !path?.startsWith('/')) {
      console.error('usage: capstan admin METHOD /path [JSON]')
      return 2
    }
    route = { method: method.toUpperCase(), path: () => path, body: json ? () => JSON.parse(json) : undefined }
  }
  const token = env.CAPSTAN_ADMIN_TOKEN
  if (!token) {
    console.error('capstan: set CAPSTAN_ADMIN_TOKEN to the admin token printed at first start')
    return 2
  }
  const base = (env.CAPSTAN_URL || localBase(env)).replace(/\/+$/, '')
  const render = (text: string, ok: boolean) => {
    if (!text) return ok ? 'done' : ''
    try {
      const json = JSON.parse(text)
      if (route?.document && ok) return JSON.stringify(json, null, 2)
      if (route?.summary && ok && !args.values.json) return route.summary(json.data)
      return args.values.json ? JSON.stringify(json) : human(json)
    } catch {
      return text // not JSON: print as it came
    }
  }
  let path: string
  let body: unknown
  let form: FormData | undefined
  try {
    path = route.path(args)
    body = route.body?.(args)
    const upload = await route.upload?.(args)
    if (upload instanceof FormData) form = upload
    else if (upload) body = upload.json
  } catch (e) {
    console.error(`capstan: ${(e as Error).message}\n\n${CLI_HELP}`)
    return 2
  }
  let res: Response
  try {
    res = await fetch(`${base}/admin/api${path}`, {
      method: route.method,
      // a form sets its own multipart content type
      headers: { authorization: `Bearer ${token}`, accept: 'application/json', 'user-agent': `capstan-cli/${VERSION}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: form ?? (body !== undefined ? JSON.stringify(body) : undefined),
    })
  } catch (e) {
    console.error(`capstan: cannot reach ${base} (${(e as Error).message})`)
    return 1
  }
  // a file is passed through as it arrives (a million contacts need not be held here first)
  if (route.raw && res.ok) {
    await Bun.write(Bun.stdout, res)
    return 0
  }
  const out = render(await res.text(), res.ok)
  if (out) (res.ok ? console.log : console.error)(out)
  return res.ok ? 0 : 1
}

type BackupLine = { name: string; created_at: string | null; complete: boolean; messages: number | null; media_files: number | null }

/** The automatic backups: where and how often, the last outcome, then one line per backup. */
function backupsSummary(d: { database?: string; directory: string | null; every_hours: number; keep: number; state: string; last_success_at: string | null; last_failure: { at: string; error: string } | null; backups: BackupLine[] }): string {
  if (d.database === 'postgres') return 'the data is in PostgreSQL: back it up with its own tools (pg_dump, continuous archiving); Capstan backs up only its embedded SQLite file'
  if (d.directory === null) return 'automatic backups are off: set CAPSTAN_BACKUP_DIR (and restart the server)'
  const lines = [`every ${d.every_hours} h into ${d.directory}, newest ${d.keep} kept; state ${d.state}; last success ${d.last_success_at ?? 'never'}`]
  if (d.state === 'failed' && d.last_failure) lines.push(`last failure ${d.last_failure.at}: ${d.last_failure.error}`)
  for (const b of d.backups) lines.push(`  ${b.name}  ${b.complete ? `${b.created_at}  ${b.messages} messages, ${b.media_files} media files` : 'incomplete'}`)
  return lines.join('\n')
}

type Imported = { id: string; name: string; variables: string[] }

/** An import's outcome: what was created or brought up to date, what was there already, and why the rest was not. */
function importSummary(data: { created: Imported[]; updated: Imported[]; existing: { id: string; name: string }[]; skipped: { name: string; language: string; reason: string }[] }): string {
  const lines = [`created ${data.created.length}, updated ${data.updated.length}, already there ${data.existing.length}, skipped ${data.skipped.length}`]
  const values = (t: Imported) => (t.variables.length ? `  (values: ${t.variables.map((v) => `{{${v}}}`).join(' ')})` : '')
  for (const t of data.created) lines.push(`  created  ${t.id}  ${t.name}${values(t)}`)
  for (const t of data.updated) lines.push(`  updated  ${t.id}  ${t.name}${values(t)}`)
  for (const t of data.existing) lines.push(`  kept     ${t.id}  ${t.name}`)
  for (const t of data.skipped) lines.push(`  skipped  ${t.name} (${t.language}): ${t.reason}`)
  return lines.join('\n')
}

const COLUMNS = ['id', 'name', 'phone', 'slug', 'prefix', 'status', 'driver', 'scopes', 'url', 'events', 'type', 'action', 'key_id', 'subject_name', 'via', 'ip', 'attempts', 'reason', 'created_at', 'at']

const show = (v: unknown): string => (v === null || v === undefined ? '' : Array.isArray(v) ? v.join(',') : typeof v === 'object' ? JSON.stringify(v) : String(v))

/** A table for lists, key: value lines for one record, the message for errors. */
export function human(json: any): string {
  if (json && typeof json.message === 'string' && json.code) {
    const errs = json.errors ? Object.entries(json.errors).map(([k, v]) => `  ${k}: ${(v as string[]).join(' ')}`).join('\n') : ''
    return `${json.message} (${json.code})${errs ? `\n${errs}` : ''}`
  }
  const data = json?.data ?? json
  if (Array.isArray(data)) {
    if (data.length === 0) return '(none)'
    const cols = COLUMNS.filter((c) => data.some((r) => r && r[c] !== undefined))
    const rows = data.map((r) => cols.map((c) => show(r[c])))
    const widths = cols.map((c, i) => Math.min(60, Math.max(c.length, ...rows.map((r) => r[i]!.length))))
    const line = (cells: string[]) => cells.map((x, i) => x.slice(0, 60).padEnd(widths[i]!)).join('  ').trimEnd()
    const meta = json?.meta ? `\n(page ${json.meta.page} of ${json.meta.last_page}, ${json.meta.total} in all)` : ''
    return [line(cols.map((c) => c.toUpperCase())), ...rows.map(line)].join('\n') + meta
  }
  if (data && typeof data === 'object') return Object.entries(data).map(([k, v]) => `${k}: ${show(v)}`).join('\n')
  return show(data)
}
