/** Every service, built once from the deps; routes, the scheduler and the CLI share them. */
import { persist } from './db/writer'
import type { Deps } from './deps'
import { Idempotency } from './http/idempotency'
import type { Logger } from './http/log'
import { CampaignService } from './modules/campaigns/service'
import { ConnectionService } from './modules/connections/service'
import { ContactEraser } from './modules/contacts/erasure'
import { ContactExport } from './modules/contacts/export'
import { ContactImport } from './modules/contacts/import'
import { ContactListExport } from './modules/contacts/list-export'
import { AutoBackups, selfCommand } from './modules/backups/service'
import { ContactService } from './modules/contacts/service'
import { GroupService } from './modules/groups/service'
import { AuditRepo } from './modules/audit/repo'
import { KeyService } from './modules/keys/service'
import { MediaService } from './modules/media/service'
import { mediaStoreFor } from './modules/media/store'
import { ClamdScanner, type Scanner } from './scanner/clamd'
import { MessageService } from './modules/messages/service'
import { MessageRetention } from './modules/messages/retention'
import { SuppressionService } from './modules/suppressions/service'
import { TemplateService } from './modules/templates/service'
import { WebhookService } from './modules/webhooks/service'
import { WorkspaceService } from './modules/workspaces/service'
import { type Timers, Pacer, realTimers } from './scheduler/pacer'
import { ClockCheck } from './scheduler/clock-check'
import { ANNOUNCED as SETTINGS, SettingsCheck, sharedSettings } from './settings-check'
import type { AdminToken } from './admin-token'
import type { SecretBox } from './secrets'
import { EventCounters } from './counters'
import { noRoom } from './db/open'
import { stmt } from './db/engine'

/** When the server last started (a setting): written first, so a start on a full disk finds out at once. */
const STARTED_AT = stmt("INSERT INTO system_settings (name, value) VALUES ('started_at', ?) ON CONFLICT (name) DO UPDATE SET value = excluded.value")
/** The database's schema version (PostgreSQL's `migrations` table, read after a drop of the listening connection). */
const SCHEMA_NOW = stmt('', 'SELECT COALESCE(MAX(version), 0)::int AS version FROM migrations')

export interface Services {
  deps: Deps
  log: Logger
  /** What happened since start (webhook attempts, scans, inbound messages), for /metrics. */
  events: EventCounters
  /** Whether the start-up's writes are done (see startServices). */
  startup: StartupState
  /** The database schema other instances migrated to while this one runs (PostgreSQL). */
  schema: SchemaWatch
  /** This machine's clock against the database server's (PostgreSQL: instances compare times). */
  clockCheck: ClockCheck
  /** This instance's limits against the other instances' (PostgreSQL: they must agree). */
  settingsCheck: SettingsCheck
  /** The admin token's hash, following the stored one (serve.ts sets it; tests in process have none). */
  adminToken?: AdminToken
  workspaces: WorkspaceService
  keys: KeyService
  audit: AuditRepo
  contacts: ContactService
  eraser: ContactEraser
  contactExport: ContactExport
  contactImport: ContactImport
  contactList: ContactListExport
  backups: AutoBackups
  suppressions: SuppressionService
  connections: ConnectionService
  webhooks: WebhookService
  messages: MessageService
  messageRetention: MessageRetention
  media: MediaService
  groups: GroupService
  templates: TemplateService
  campaigns: CampaignService
  idempotency: Idempotency
  pacer: Pacer
}

export function buildServices(deps: Deps, log: Logger, box: SecretBox, opts: { timers?: Timers; random?: () => number; scanner?: Scanner } = {}): Services {
  const audit = new AuditRepo(deps.engine)
  const workspaces = new WorkspaceService(deps, audit)
  const contacts = new ContactService(deps)
  const suppressions = new SuppressionService(deps, audit)
  const connections = new ConnectionService(deps, box, log, audit)
  const webhooks = new WebhookService(deps, box, log, audit)
  const media = new MediaService(deps, mediaStoreFor(deps.config.mediaStore, deps.config.mediaDir), opts.scanner ?? new ClamdScanner(deps.config.clamd, deps.config.clamdTimeoutMs), workspaces, log)
  const templates = new TemplateService(deps, audit)
  const messages = new MessageService(deps, workspaces, contacts, suppressions, connections, webhooks, media, templates)
  const groups = new GroupService(deps, connections, messages, log)
  const campaigns = new CampaignService(deps, templates, connections, contacts, suppressions, messages, media, webhooks, log)
  const pacer = new Pacer(deps, messages, connections, workspaces, log, deps.clock, opts.timers ?? realTimers, opts.random ?? Math.random)
  // work started by an event and not awaited by it: a failure is logged (the next sweep or start goes on with it)
  const background = (what: string, work: () => Promise<unknown>) => void work().catch((e) => log.error(`${what} failed`, { error: String((e as Error)?.message ?? e) }))
  contacts.onConsentChanged = (tx, row, from, source) =>
    webhooks.enqueueIn(tx, row.workspace_id, 'contact.consent_changed', { ...contacts.toPublic(row), consent_change: { from, to: row.consent_status, source } })
  messages.onQueued = (id) => pacer.wake(id)
  // a number this instance now releases (at start, or a dead instance's): its sends cut off are settled first
  pacer.onTakenOver = async (ids) => {
    const taken = new Set(ids)
    await messages.recoverInterrupted((id) => taken.has(id))
    // the reports a driver makes itself (the sandbox's) went with the process that set their timers
    for (const id of ids) await connections.find(id)?.driver.resumeReports?.((since) => messages.awaitingReports(id, since))
  }
  pacer.tellHolder = (id) => deps.engine.announce(deps.engine, `queued:${id}`)
  messages.onThrottled = (id) => pacer.slowDown(id)
  messages.groupExternalId = (row) => groups.externalIdOf(row)
  messages.groupRefusal = (row, q) => groups.refusalAtRelease(row, q)
  pacer.campaignLane = (tx, connectionId, now) => campaigns.releaseNextIn(tx, connectionId, now)
  campaigns.onRunnable = (id) => pacer.wake(id)
  messages.onSettled = (row) => {
    if (row.campaign_id) background('campaign completion check', () => campaigns.checkComplete(row.campaign_id!))
  }
  messages.onTemplateRefused = async (row, code) => {
    if (!row.campaign_id) return
    await campaigns.templateRefused(row.campaign_id, code).catch((e) => {
      log.error('pausing a campaign whose template was refused failed', { error: String((e as Error)?.message ?? e) })
      throw e
    })
  }
  const idempotency = new Idempotency(deps, pacer.leases.owner)
  const eraser = new ContactEraser(deps, contacts, messages, media, campaigns, webhooks, idempotency, audit, log, box)
  eraser.onCampaignChanged = (id) => background('campaign completion check', () => campaigns.checkComplete(id))
  eraser.onErased = (workspaceId, number) => connections.forgetNumber(workspaceId, number)
  const messageRetention = new MessageRetention(deps, workspaces, webhooks, log)
  messageRetention.onContentExpired = (workspaceId, cutoff) => connections.forgetContentBefore(workspaceId, cutoff)
  contacts.onActivityError = (e) => log.errorAtMostEvery(60_000, "contacts' last activity could not be written yet", { error: String((e as Error)?.message ?? e) })
  messages.onDispatchError = (e, doing) => log.error(`could not ${doing}`, { error: String((e as Error)?.message ?? e) })
  messages.onDriverBug = (row, e) => log.error('network driver failed unexpectedly; the message fails as driver_error', { message_id: row.id, error: String((e as Error)?.stack ?? e) })
  const events = new EventCounters()
  webhooks.onAttempt = (result) => EventCounters.bump(events.webhookAttempts, result)
  media.onScan = (verdict) => EventCounters.bump(events.scans, verdict)
  messages.onInbound = (driver) => EventCounters.bump(events.inbound, driver)
  connections.onChange = (id) => pacer.wake(id)
  connections.onStatusChangedIn = (tx, row, from) => webhooks.enqueueIn(tx, row.workspace_id, 'connection.status_changed', connections.toEvent(row, from))
  workspaces.onChange = (id) => {
    pacer.wakeWorkspace(id)
    // a higher allowance lets campaigns paused for it go on
    background('resuming campaigns paused for the allowance', () => campaigns.resumeWhereRoom(id))
  }
  return {
    deps,
    log,
    events,
    startup: { state: 'starting', retry: null },
    schema: new SchemaWatch(),
    clockCheck: new ClockCheck(deps.engine, log),
    settingsCheck: new SettingsCheck(deps.engine, sharedSettings(deps.config), log),
    workspaces,
    keys: new KeyService(deps, workspaces, audit),
    audit,
    contacts,
    eraser,
    contactExport: new ContactExport(deps, contacts, messages, media, suppressions, campaigns, audit),
    contactImport: new ContactImport(deps, contacts, audit),
    contactList: new ContactListExport(deps, contacts, audit),
    backups: new AutoBackups(deps.config, log, deps.clock, selfCommand()),
    suppressions,
    connections,
    webhooks,
    messages,
    messageRetention,
    media,
    groups,
    templates,
    campaigns,
    idempotency,
    pacer,
  }
}

/** Whether the start-up's writes are done: `storage_full` while they wait for room on the disk. */
export interface StartupState {
  state: 'starting' | 'ready' | 'storage_full'
  /** The next try of the start-up's writes, while the disk is full. */
  retry: Timer | null
}

/**
 * The newest schema version the database was migrated to while this instance runs: another
 * instance announces it when it migrates (`schema:<version>`, db/postgres.ts), and after a drop of
 * the listening connection it is read again (resync). serve.ts stops an instance whose binary does
 * not know that version (a rolling upgrade: the first new instance migrates, the old ones step
 * aside), as it would refuse to start on that database.
 */
export class SchemaWatch {
  private newest = 0
  private handler: ((version: number) => void) | null = null

  heard(version: number) {
    if (!(version > this.newest)) return
    this.newest = version
    this.handler?.(version)
  }

  /** `handler` hears each newer version from now on, and at once the newest heard so far (if any). */
  onNewer(handler: (version: number) => void) {
    this.handler = handler
    if (this.newest > 0) handler(this.newest)
  }
}

/** How often a start on a full disk tries its writes again. */
export const STARTUP_RETRY_MS = 5_000

/**
 * Start the background parts in a safe order: numbers and their drivers, then crash recovery
 * (interrupted sends are settled before anything new is released), then the pacer and webhooks.
 *
 * On a full disk the recovery's writes fail: the server then serves what it can — reads, and 507
 * for writes — with `svc.startup.state` `storage_full` (readiness says why), and tries the
 * recovery again every STARTUP_RETRY_MS; once it is written, the pacer and webhooks start as usual.
 */
export async function startServices(svc: Services, retryMs = STARTUP_RETRY_MS) {
  // every workspace in memory before anything checks one
  await svc.workspaces.load()
  // (a directory the full disk has no room for is made by the recovery below, when it can be)
  await svc.media.store.init().catch((e) => {
    if (!noRoom(e)) throw e
  })
  // what a network reports is written even while writes fail for a while (a full disk): kept and
  // tried again (see persist) until it is, or until the server stops
  const keep = (what: string, write: () => Promise<unknown>) =>
    void persist(write, () => svc.connections.stopped, (e) => svc.log.error(`${what} could not be written yet`, { error: String((e as Error)?.message ?? e) })).catch((e) =>
      svc.log.error(`${what} failed`, { error: String(e) }),
    )
  await svc.connections.start({
    receipt: (_connectionId, messageId, status, error) => keep('receipt', () => svc.messages.receipt(messageId, status, error)),
    inbound: (connectionId, from, body) => keep('inbound message', () => svc.messages.inbound(connectionId, from, body)),
    marketingStopped: (connectionId, phone, source) => keep('consent change', () => svc.messages.marketingStopped(connectionId, phone, source)),
  })
  // what other instances on the same database change (PostgreSQL; nothing on SQLite)
  await svc.deps.engine.listen(
    (what) => void heard(svc, what).catch((e) => svc.log.error('an announced change could not be applied', { change: what.split(':')[0], error: String((e as Error)?.message ?? e) })),
    () => void resync(svc).catch((e) => svc.log.error('reading again what other instances changed failed', { error: String((e as Error)?.message ?? e) })),
  )
  // an admin token another instance stored after this one read it, and before it listened
  await svc.adminToken?.reload()
  try {
    await recoverAtStart(svc)
  } catch (e) {
    if (!noRoom(e)) throw e
    svc.startup.state = 'storage_full'
    svc.log.error('started on a full disk: reads are served, writes are refused with 507 and nothing is sent until there is room; trying again every few seconds', { data_dir: svc.deps.config.dataDir })
    const again = () => {
      svc.startup.retry = setTimeout(async () => {
        svc.startup.retry = null
        if (svc.connections.stopped) return
        try {
          await recoverAtStart(svc)
        } catch (e) {
          if (!noRoom(e)) svc.log.error('start-up recovery failed; trying again', { error: String((e as Error)?.message ?? e) })
          return again()
        }
        if (svc.connections.stopped) return
        await runBackground(svc)
        svc.log.info('there is room on the disk again: recovery done, sending resumed')
      }, retryMs)
    }
    again()
    return
  }
  await runBackground(svc)
}

/** How long after hearing that a number was removed its queue is failed again (see `heard`). */
export const REMOVED_SETTLE_MS = 1_000

/**
 * A change another instance made (Engine.announce): what this one keeps in memory follows. Its own
 * announcements come back too, and change nothing it does not already know.
 */
async function heard(svc: Services, what: string) {
  const at = what.indexOf(':')
  const kind = what.slice(0, at)
  const id = what.slice(at + 1)
  switch (kind) {
    case 'workspace':
      await svc.workspaces.reload(id)
      svc.pacer.wakeWorkspace(id)
      return
    case 'key':
      svc.keys.forget(id)
      return
    case 'connection':
      if (await svc.connections.reload(id)) svc.pacer.wake(id)
      // removed (by another instance, or by this one): a send this instance took before it heard
      // may have been written after the removal failed the number's queue; once such writes are
      // done (a moment), what they queued fails too, instead of waiting a day to expire
      else if (!svc.connections.stopped) {
        const again = () => {
          if (svc.connections.stopped) return
          void svc.messages.failQueuedOf(id).catch((e) => svc.log.error("failing a removed number's queue failed", { connection_id: id, error: String((e as Error)?.message ?? e) }))
        }
        setTimeout(again, REMOVED_SETTLE_MS).unref()
      }
      return
    case 'queued':
      svc.pacer.wakeHere(id)
      return
    case 'reported':
      svc.connections.heardReported(id)
      return
    case 'schema':
      svc.schema.heard(Number(id))
      return
    case 'admin-token':
      await svc.adminToken?.reload()
      return
    case SETTINGS.start:
    case SETTINGS.answer:
      await svc.settingsCheck.heard(kind, id)
      return
  }
}

/**
 * The listening connection is back after a drop: whatever the other instances announced meanwhile
 * was not heard, so the keys, workspaces and numbers kept in memory are read again (as each
 * announcement would have made this instance do), and every number looks at its queue.
 */
async function resync(svc: Services) {
  svc.log.warn('the connection that hears other instances\' changes was lost and is back: reading keys, workspaces and numbers again')
  // a migration announced meanwhile is found in the table itself
  svc.schema.heard(Number((await svc.deps.engine.get<{ version: number }>(SCHEMA_NOW))?.version ?? 0))
  svc.keys.forgetAll()
  await svc.adminToken?.reload()
  await svc.workspaces.load()
  for (const id of await svc.connections.reloadAll()) svc.pacer.wake(id)
}

/** The start-up's writes: settle what a crash left, then what expired while the server was down. */
async function recoverAtStart(svc: Services) {
  // one write whatever there is to recover: a start on a full disk finds out here, not at the
  // first request or send
  await svc.deps.engine.write((tx) => tx.run(STARTED_AT, new Date(svc.deps.clock.now()).toISOString()))
  await svc.media.store.init({ keepTemp: true })
  // the leases of the numbers this instance will release; taking them settles their interrupted
  // sends (and those of numbers since removed)
  await svc.pacer.claimLeases()
  await svc.messages.recoverInterrupted((id) => !svc.connections.has(id))
  // after a restore: erasures recorded since that backup was made are done again, before anything is sent or served
  await svc.eraser.reapply()
  await svc.messages.expireQueued()
  await svc.messages.failQueuedOfRemoved((id) => !svc.connections.has(id))
  await svc.media.purgeExpired()
}

async function runBackground(svc: Services) {
  await svc.pacer.start(await svc.campaigns.connectionsWithRunning())
  await svc.campaigns.armAll()
  await svc.campaigns.resumeWhereRoom()
  svc.webhooks.start()
  svc.startup.state = 'ready'
}

export function stopServices(svc: Services) {
  if (svc.startup.retry) clearTimeout(svc.startup.retry)
  svc.startup.retry = null
  svc.campaigns.stop()
  svc.pacer.stop()
  svc.messages.stop()
  svc.webhooks.stop()
  svc.connections.stop()
  svc.contacts.stop()
}

/**
 * How long a graceful stop waits for work already handed out. A send's outcome matters (without
 * it, crash recovery has to settle the message at the next start), so sends get 10 s. A webhook
 * answer only spares a second delivery that receivers tell apart by its webhook-id anyway, so
 * deliveries get 3 s: a receiver that hangs does not hold up a restart.
 */
export const SETTLE_SENDS_MS = 10_000
export const SETTLE_DELIVERIES_MS = 3_000

/**
 * After `stopServices`: wait until the sends handed to a driver and the webhook deliveries under
 * way have their outcome recorded, each within its time above. Returns what is still under way.
 */
export async function settleServices(svc: Services) {
  const start = Date.now()
  const waiting = () => {
    const spent = Date.now() - start
    return (svc.messages.inFlight > 0 && spent < SETTLE_SENDS_MS) || (svc.webhooks.inFlight > 0 && spent < SETTLE_DELIVERIES_MS)
  }
  while (waiting()) await Bun.sleep(20)
  return { sends: svc.messages.inFlight, deliveries: svc.webhooks.inFlight }
}
