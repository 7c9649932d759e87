/**
 * GET /metrics: Prometheus' text format, for an operator's monitoring (enabled by setting
 * CAPSTAN_METRICS_TOKEN; scraped with `Authorization: Bearer <that token>`).
 *
 * Everything is read when scraped — from the database through its indexes, from the live
 * connections, the disk and the scanner — except the count of responses by status, which the
 * request path keeps in one array (`ResponseCounts`). Labels carry ids only: workspace,
 * connection and campaign ids, never a phone number or a name.
 */
import { readFileSync, readdirSync } from 'node:fs'
import { databaseState, PgEngine } from './db/engine'
import { diskSpace } from './disk'
import { NETWORK_CODE_PATTERN, OUTCOME_CODES } from './modules/messages/outcomes'
import type { Services } from './services'
import { VERSION } from './version'

/** Responses sent, by status code: one array slot per code, bumped for every response. */
export class ResponseCounts {
  private readonly counts = new Float64Array(600)

  add(status: number) {
    if (status >= 100 && status < 600) this.counts[status]!++
  }

  *entries(): Generator<[number, number]> {
    for (let code = 100; code < 600; code++) if (this.counts[code]! > 0) yield [code, this.counts[code]!]
  }
}

/** Upper bounds (seconds) of the request duration histogram's buckets. */
const DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10]
const CLASSES = ['1xx', '2xx', '3xx', '4xx', '5xx'] as const

/**
 * `http_request_duration_seconds` by route pattern and status class, kept as the request path
 * goes: one array per route and class (bucket counts, then sum and count), found through one Map
 * lookup by the route string. Routes are a fixed set (the pattern, never the path).
 */
export class RequestDurations {
  private readonly routes = new Map<string, (Float64Array | undefined)[]>()

  observe(route: string, status: number, seconds: number) {
    let byClass = this.routes.get(route)
    if (!byClass) {
      // an unknown path is logged as one route; the table never grows past the routes there are
      if (this.routes.size >= 500) return
      this.routes.set(route, (byClass = []))
    }
    const cls = Math.floor(status / 100) - 1
    if (cls < 0 || cls > 4) return
    const h = (byClass[cls] ??= new Float64Array(DURATION_BUCKETS.length + 2))
    let i = 0
    while (i < DURATION_BUCKETS.length && seconds > DURATION_BUCKETS[i]!) i++
    // (longer than the last bound: only +Inf, which is the count, holds it)
    if (i < DURATION_BUCKETS.length) h[i]!++
    h[DURATION_BUCKETS.length]! += seconds
    h[DURATION_BUCKETS.length + 1]!++
  }

  /** The histogram's lines in the text format. */
  lines(): string[] {
    const out = ['# HELP http_request_duration_seconds Time from the request\'s first step (body parsing or authentication) to its response, by route pattern and status class.', '# TYPE http_request_duration_seconds histogram']
    for (const [route, byClass] of this.routes) {
      for (const [c, h] of byClass.entries()) {
        if (!h) continue
        const l = `route="${label(route)}",status="${CLASSES[c]}"`
        let cumulative = 0
        for (const [i, le] of DURATION_BUCKETS.entries()) {
          cumulative += h[i]!
          out.push(`http_request_duration_seconds_bucket{${l},le="${le}"} ${cumulative}`)
        }
        out.push(`http_request_duration_seconds_bucket{${l},le="+Inf"} ${h[DURATION_BUCKETS.length + 1]}`)
        out.push(`http_request_duration_seconds_sum{${l}} ${h[DURATION_BUCKETS.length]}`)
        out.push(`http_request_duration_seconds_count{${l}} ${h[DURATION_BUCKETS.length + 1]}`)
      }
    }
    return out
  }
}

/** The clamd VERSION answer's signature date (`ClamAV 1.4.6/27463/Mon Nov 24 08:35:13 2026`) in ms; null without one. */
export function signatureTime(version: string): number | null {
  const parts = version.replace(/\0+$/, '').trim().split('/')
  if (parts.length < 3) return null
  const t = Date.parse(parts.slice(2).join('/').trim())
  return Number.isFinite(t) ? t : null
}

/** process_* (the names every Prometheus client library uses), read from /proc where Linux has it. */
function processMetrics(out: Exposition, startedAt: number) {
  const cpu = process.cpuUsage()
  out.metric('process_cpu_seconds_total', 'counter', 'User and system CPU time spent, in seconds.', [[{}, (cpu.user + cpu.system) / 1e6]])
  out.metric('process_resident_memory_bytes', 'gauge', 'Resident memory size in bytes.', [[{}, process.memoryUsage.rss()]])
  out.metric('process_start_time_seconds', 'gauge', 'Start time of the process since the Unix epoch, in seconds.', [[{}, Math.round(startedAt / 1000)]])
  try {
    const status = readFileSync('/proc/self/status', 'utf8')
    const vm = /^VmSize:\s+(\d+) kB/m.exec(status)
    if (vm) out.metric('process_virtual_memory_bytes', 'gauge', 'Virtual memory size in bytes.', [[{}, Number(vm[1]) * 1024]])
    out.metric('process_open_fds', 'gauge', 'Number of open file descriptors.', [[{}, readdirSync('/proc/self/fd').length]])
    const max = /^Max open files\s+(\d+)/m.exec(readFileSync('/proc/self/limits', 'utf8'))
    if (max) out.metric('process_max_fds', 'gauge', 'Maximum number of open file descriptors.', [[{}, Number(max[1])]])
  } catch {
    // not Linux: the portable ones above are there
  }
}

/** A label value as the text format wants it (our values are ids and fixed words; escaped anyway). */
const label = (v: string) => v.replace(/\\/g, '\\\\').replace(/"/g, '\\"').replace(/\n/g, '\\n')

/** One sample: its labels and value. */
type Sample = [Record<string, string>, number]

class Exposition {
  private readonly lines: string[] = []

  metric(name: string, type: 'gauge' | 'counter', help: string, samples: Sample[]) {
    this.lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`)
    for (const [labels, value] of samples) {
      const l = Object.entries(labels).map(([k, v]) => `${k}="${label(v)}"`)
      this.lines.push(`${name}${l.length ? `{${l.join(',')}}` : ''} ${value}`)
    }
  }

  raw(lines: string[]) {
    this.lines.push(...lines)
  }

  text() {
    return `${this.lines.join('\n')}\n`
  }
}

export class Metrics {
  private readonly startedAt = Date.now()

  constructor(
    private readonly svc: Services,
    private readonly responses: ResponseCounts,
    private readonly probes: Record<string, () => Promise<boolean>>,
    private readonly durations: RequestDurations = new RequestDurations(),
  ) {
  }

  /** The outcome counts, error codes Capstan documents kept apart, any other (a code given to a sandbox receipt) as `other`. */
  private outcomes(rows: { status: string; code: string; n: number }[]): Sample[] {
    const by = new Map<string, Sample>()
    for (const r of rows) {
      const code = r.status !== 'failed' ? '' : r.code in OUTCOME_CODES || NETWORK_CODE_PATTERN.test(r.code) ? r.code : 'other'
      const key = `${r.status} ${code}`
      const labels: Record<string, string> = r.status === 'failed' ? { status: r.status, code } : { status: r.status }
      const sample: Sample = by.get(key) ?? [labels, 0]
      sample[1] += r.n
      by.set(key, sample)
    }
    return [...by.values()]
  }

  async render(): Promise<string> {
    const { svc } = this
    const now = svc.deps.clock.now()
    const out = new Exposition()
    out.metric('capstan_build_info', 'gauge', 'The running version (always 1).', [[{ version: VERSION, bun: Bun.version }, 1]])
    out.metric('capstan_uptime_seconds', 'gauge', 'Seconds since this process started.', [[{}, Math.round((Date.now() - this.startedAt) / 1000)]])
    out.metric('capstan_resident_memory_bytes', 'gauge', 'Resident memory of this process.', [[{}, process.memoryUsage.rss()]])
    out.metric('capstan_http_responses_total', 'counter', 'HTTP responses sent since start, by status code.', [...this.responses.entries()].map(([code, n]) => [{ code: String(code) }, n]))
    processMetrics(out, this.startedAt)
    out.raw(this.durations.lines())
    const counted = (map: Map<string, number>, name: string): Sample[] => [...map].sort().map(([k, n]) => [{ [name]: k }, n])
    const events = svc.events
    out.metric('capstan_webhook_attempts_total', 'counter', 'Webhook delivery attempts since start, by result (delivered: a 2xx; http_error: another status; timeout; connection_failed).', counted(events.webhookAttempts, 'result'))
    out.metric('capstan_media_scans_total', 'counter', 'Uploads scanned by ClamAV since start, by verdict (clean, malware, too_large, unavailable).', counted(events.scans, 'verdict'))
    out.metric('capstan_inbound_messages_total', 'counter', 'Inbound messages received since start, by network driver.', counted(events.inbound, 'driver'))
    const version = await svc.media.scannerVersion().catch(() => null)
    const signed = version === null ? null : signatureTime(version)
    if (signed !== null) out.metric('capstan_clamav_signatures_age_seconds', 'gauge', 'Age of the ClamAV signature database clamd has loaded (from its VERSION answer): alert when freshclam stops updating it.', [[{}, Math.max(0, Math.round((Date.now() - signed) / 1000))]])
    const database = await databaseState(svc.deps.engine)
    out.metric('capstan_database_up', 'gauge', 'Whether the database can be read (1) or not (0).', [[{}, database === 'unavailable' ? 0 : 1]])
    out.metric('capstan_database_writable', 'gauge', 'Whether the database takes writes (1) or not (0: away, or read-only — a failover under way).', [[{}, database === 'ok' ? 1 : 0]])
    for (const [name, probe] of Object.entries(this.probes)) {
      out.metric(`capstan_${name}_up`, 'gauge', `Whether the ${name} is reachable (1) or not (0).`, [[{}, (await probe().catch(() => false)) ? 1 : 0]])
    }
    const disk = diskSpace(svc.deps.config.dataDir)
    if (disk) {
      out.metric('capstan_disk_free_bytes', 'gauge', 'Free space on the data directory’s file system.', [[{}, disk.free_bytes]])
      out.metric('capstan_disk_total_bytes', 'gauge', 'Size of the data directory’s file system.', [[{}, disk.total_bytes]])
    }
    const offset = svc.clockCheck.offsetMs
    if (offset !== null) out.metric('capstan_clock_offset_seconds', 'gauge', "This machine's clock minus the database server's, at the last check (every ten minutes; instances sharing a database need their clocks in step).", [[{}, offset / 1000]])
    if (svc.deps.engine instanceof PgEngine)
      out.metric('capstan_database_reconnects_total', 'counter', "Times this instance made its PostgreSQL connections again because the server answered a fresh one while none of its own was working there (a failover behind the same address), since start.", [[{}, svc.deps.engine.reconnects]])
    if (svc.deps.engine.shared)
      out.metric('capstan_settings_differences_total', 'counter', "Other instances on this database heard with limits (CAPSTAN_KEY_RATE_LIMIT, …) that differ from this instance's: at their start, or in their answer to this one's.", [[{}, svc.settingsCheck.differences]])
    const backup = svc.backups.status()
    if (backup.state !== 'off') {
      out.metric('capstan_backup_last_success_timestamp_seconds', 'gauge', 'When the newest complete automatic backup was made (Unix time; 0 when none is).', [[{}, backup.last_success_at === null ? 0 : Math.round(Date.parse(backup.last_success_at) / 1000)]])
      out.metric('capstan_backup_failing', 'gauge', 'Whether the last automatic backup failed (1) or not (0).', [[{}, backup.state === 'failed' ? 1 : 0]])
    }
    if (database === 'unavailable') return out.text()
    const [messages, webhookGauges, campaignCounts] = await Promise.all([svc.messages.gauges(), svc.webhooks.pendingGauges(), svc.campaigns.countByStatus()])
    out.metric('capstan_message_outcomes_total', 'counter', 'Outbound messages that reached sent, delivered, read or failed (by error code; codes outside the documented table count as other), ever.', this.outcomes(messages.outcomes))
    out.metric('capstan_messages', 'gauge', 'Messages in the log, by workspace, direction and status.', messages.counts.map((r) => [{ workspace: r.workspace_id, direction: r.direction, status: r.status }, r.n]))
    const queued = new Map(messages.queued.map((r) => [r.connection_id, r.n]))
    const connections = svc.connections.all()
    out.metric('capstan_connection_up', 'gauge', 'Whether a connected number is online (1) or offline (0).', connections.map((c) => [{ connection: c.row.id, workspace: c.row.workspace_id, driver: c.row.driver }, c.row.status === 'online' ? 1 : 0]))
    out.metric('capstan_queue_depth', 'gauge', 'One-to-one and group messages queued on a number (campaign recipients not yet released are not counted).', connections.map((c) => [{ connection: c.row.id, workspace: c.row.workspace_id }, queued.get(c.row.id) ?? 0]))
    out.metric('capstan_messages_sending', 'gauge', 'Messages handed to a network whose outcome is not recorded yet.', [[{}, messages.sending]])
    const { pending: hooks, perEndpoint } = webhookGauges
    out.metric('capstan_webhook_deliveries_pending', 'gauge', 'Webhook deliveries not yet delivered (first attempts and retries).', [[{}, hooks.n]])
    out.metric('capstan_webhook_oldest_pending_seconds', 'gauge', 'Age of the oldest webhook delivery still pending (0 when none).', [[{}, hooks.oldest === null ? 0 : Math.max(0, Math.round((now - hooks.oldest) / 1000))]])
    out.metric('capstan_webhook_endpoint_pending', 'gauge', 'Webhook deliveries not yet delivered, per endpoint (endpoints with none are left out).', perEndpoint.map((r) => [{ endpoint: r.endpoint_id, workspace: r.workspace_id }, r.n]))
    out.metric('capstan_campaigns', 'gauge', 'Campaigns by status.', campaignCounts.map((r) => [{ status: r.status }, r.n]))
    // the cap a number sends under today (lower while it warms up)
    const caps = connections.flatMap((c): Sample[] => {
      const ws = svc.workspaces.cached(c.row.workspace_id)
      return ws ? [[{ connection: c.row.id, workspace: c.row.workspace_id }, svc.connections.policyFor(c.row, svc.workspaces.settings(ws).sending_policy, now).daily_cap]] : []
    })
    out.metric('capstan_number_daily_cap', 'gauge', 'The daily cap a number sends under today (lower while it warms up).', caps)
    const media = await svc.media.bytesPerWorkspace(now)
    out.metric('capstan_media_bytes', 'gauge', 'Bytes of a workspace’s kept media (each record counted).', media.map((r) => [{ workspace: r.workspace_id }, r.n]))
    const quotas = svc.workspaces.all().flatMap((w): Sample[] => {
      const max = svc.workspaces.settings(w).media.max_total_bytes
      return max === null ? [] : [[{ workspace: w.id }, max]]
    })
    out.metric('capstan_media_quota_bytes', 'gauge', 'A workspace’s media storage limit (max_total_bytes; workspaces without one are left out).', quotas)
    return out.text()
  }
}
