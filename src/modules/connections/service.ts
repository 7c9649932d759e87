/**
 * Connected numbers: the rows, plus a live registry holding each number's driver. The registry is
 * loaded at start and changed only through this service, so the request path and the pacer read
 * a number's state from memory.
 */
import { type Warmup, warmedPolicy, warmupDay, warmupEnd } from '../../scheduler/warmup'
import type { Policy } from '../../scheduler/pacer'
import type { Deps } from '../../deps'
import type { AuditRepo, Operator } from '../audit/repo'
import { ApiError, notFound, refused, validationFailed } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import type { Logger } from '../../http/log'
import { cloudApiDriver } from '../../network/cloud-api'
import { type ConnectionDriver, DriverError, type DriverEvents, type DriverFactory, type NetworkTemplateDefinition } from '../../network/driver'
import { sandboxDriver } from '../../network/sandbox'
import type { SecretBox } from '../../secrets'
import type { AdminConnection, ConnectionStatusEvent, DriverName } from './model'
import type { Queries } from '../../db/engine'
import { ConnectionStore, type ConnectionRow } from './store'

/** The longest network id relayed to the other instances (Meta's wamids are ~60 characters; an announcement holds 8,000 bytes). */
const MAX_RELAYED_ID = 256

export const DRIVERS: Record<string, DriverFactory> = { sandbox: sandboxDriver, cloud_api: cloudApiDriver }

type Config = Record<string, unknown>

export interface LiveConnection {
  row: ConnectionRow
  driver: ConnectionDriver
}

export interface WarmupInput {
  days: number
  start_daily_cap: number
}

/** The stored warm-up: started `now`, or none. */
const warmupColumn = (w: WarmupInput | null | undefined, now: number) => (w ? JSON.stringify({ days: w.days, start_daily_cap: w.start_daily_cap, started_at: now }) : null)

export class ConnectionService {
  private readonly store: ConnectionStore
  private live = new Map<string, LiveConnection>()
  private events: DriverEvents | null = null
  /** Called when a number comes online or changes, so the pacer can look at its queue. */
  onChange: (connectionId: string) => void = () => {}

  constructor(
    private readonly deps: Deps,
    private readonly box: SecretBox,
    private readonly log: Logger,
    private readonly audit: AuditRepo,
  ) {
    this.store = new ConnectionStore(deps.engine)
  }

  /** Secret config fields are stored sealed ({"$sealed": ...}); everything else as given. */
  private seal(driver: string, config: Config): string {
    const out: Config = { ...config }
    for (const f of DRIVERS[driver]!.secretFields ?? []) if (typeof out[f] === 'string') out[f] = { $sealed: this.box.seal(out[f] as string) }
    return JSON.stringify(out)
  }

  /** The config as the driver needs it (secrets opened). */
  private open(row: ConnectionRow): Config {
    const out = JSON.parse(row.config) as Config
    for (const [k, v] of Object.entries(out)) if (v && typeof v === 'object' && '$sealed' in (v as Config)) out[k] = this.box.open((v as { $sealed: string }).$sealed)
    return out
  }

  /** The config as operators see it: secrets are only said to be set. */
  private redacted(row: ConnectionRow): Config {
    const out = JSON.parse(row.config) as Config
    for (const f of DRIVERS[row.driver]?.secretFields ?? []) if (out[f] !== undefined) out[f] = '(set)'
    return out
  }

  /** Load every connection and start its driver; `events` receives receipts and inbound messages. */
  async start(events: DriverEvents) {
    this.events = events
    this.stopped = false
    for (const row of await this.store.all()) this.attach(await this.sealStored(row))
  }

  /**
   * A row stored by an older Capstan may hold a field in clear that is now secret (the Cloud API
   * verify token): sealed now, once, so the database holds no secret in clear.
   */
  private async sealStored(row: ConnectionRow): Promise<ConnectionRow> {
    const stored = JSON.parse(row.config) as Config
    if (!(DRIVERS[row.driver]?.secretFields ?? []).some((f) => typeof stored[f] === 'string')) return row
    const next = { ...row, config: this.seal(row.driver, this.open(row)) }
    try {
      // (another instance starting at the same moment sealed or changed it first: the row as it is now)
      if (!(await this.deps.engine.write((tx) => this.store.update(tx, next, row)))) return (await this.store.byId(row.id)) ?? row
    } catch {
      // no room to write it (a full disk): sealed at a later start
      return row
    }
    return next
  }

  stop() {
    this.stopped = true
    for (const c of this.live.values()) c.driver.close()
    this.live.clear()
  }

  /**
   * A number's row changes one write at a time, in the order asked (a driver reporting offline
   * and the operator setting it online must not cross): each change reads the row the one before
   * it wrote.
   */
  private turn: Promise<unknown> = Promise.resolve()
  private inTurn<T>(change: () => Promise<T>): Promise<T> {
    const done = this.turn.then(change, change)
    this.turn = done.catch(() => {})
    return done
  }

  /** Set while the server stops (a driver closed then was not removed). */
  stopped = false

  private attach(row: ConnectionRow): LiveConnection {
    const factory = DRIVERS[row.driver]
    if (!factory) throw new Error(`unknown driver ${row.driver}`)
    const entry: LiveConnection = { row, driver: null as unknown as ConnectionDriver }
    entry.driver = factory.create({
      connectionId: row.id,
      phone: row.phone,
      config: this.open(row),
      online: () => entry.row.status === 'online',
      reportStatus: (status, reason) =>
        void this.setStatus(row.id, status, reason).catch((e) => this.log.error('a number\'s status could not be written', { connection_id: row.id, error: String((e as Error)?.message ?? e) })),
      events: this.events!,
      log: this.log,
      dataDir: this.deps.config.dataDir,
      engine: this.deps.engine,
      now: () => this.deps.clock.now(),
    })
    this.live.set(row.id, entry)
    return entry
  }

  private warmups = new WeakMap<ConnectionRow, Warmup | null>()

  /** A number's warm-up, parsed once per row (a change replaces the row). */
  warmupOf(row: ConnectionRow): Warmup | null {
    let w = this.warmups.get(row)
    if (w === undefined) {
      w = row.warmup === null ? null : (JSON.parse(row.warmup) as Warmup)
      this.warmups.set(row, w)
    }
    return w
  }

  /** The policy a number sends under now: the workspace's, with its warm-up's caps while that lasts. */
  policyFor(row: ConnectionRow, workspacePolicy: Policy, now = this.deps.clock.now()): Policy {
    return warmedPolicy(workspacePolicy, this.warmupOf(row), now)
  }

  /** The admin view of a warm-up: its settings, start, end and which day it is on (null once over). */
  private warmupView(row: ConnectionRow) {
    const w = this.warmupOf(row)
    if (!w) return null
    const day = warmupDay(w, this.deps.clock.now())
    return { days: w.days, start_daily_cap: w.start_daily_cap, started_at: iso(w.started_at), ends_at: iso(warmupEnd(w)), day: day === null ? null : day + 1 }
  }

  /**
   * Called inside the write that takes a number online or offline (the operator, or its network:
   * a rejected token): services.ts turns it into the `connection.status_changed` event.
   */
  onStatusChangedIn: (tx: Queries, row: ConnectionRow, from: ConnectionRow['status']) => Promise<void> = async () => {}

  /** A number as the `connection.status_changed` event carries it: no config (it holds secrets). */
  toEvent(row: ConnectionRow, from: ConnectionRow['status']): ConnectionStatusEvent {
    return { id: row.id, phone: row.phone, name: row.name, driver: row.driver, status: row.status, previous_status: from, status_reason: row.status_reason, at: iso(row.updated_at) }
  }

  toAdmin(row: ConnectionRow): AdminConnection {
    return {
      id: row.id,
      workspace_id: row.workspace_id,
      phone: row.phone,
      name: row.name,
      driver: row.driver,
      status: row.status,
      status_reason: row.status_reason,
      receives: row.receives === 1,
      config: this.redacted(row),
      warmup: this.warmupView(row),
      created_at: iso(row.created_at),
      updated_at: iso(row.updated_at),
    }
  }

  /** A live connection by id (any workspace), or null. */
  find(id: string): LiveConnection | null {
    return this.live.get(id) ?? null
  }

  /**
   * The network named a send of ours still under way (see ConnectionDriver.reportedSend). The
   * instance sending it waits for that word, and with several instances the word may reach another
   * one (the load balancer chose): it goes round them all, each hands it to its driver of the
   * number, and the one waiting takes it. One instance alone hands it over at once.
   */
  async reportedSend(connectionId: string, messageId: string, externalId: string) {
    if (!this.deps.engine.shared || externalId.length > MAX_RELAYED_ID) return this.find(connectionId)?.driver.reportedSend?.(messageId, externalId)
    await this.deps.engine.announce(this.deps.engine, `reported:${connectionId}:${messageId}:${externalId}`)
  }

  /** A send another instance (or this one) heard the network name: `connectionId:messageId:externalId` (see reportedSend). */
  heardReported(what: string) {
    const [connectionId, messageId] = what.split(':', 2)
    const externalId = what.slice(`${connectionId}:${messageId}:`.length)
    if (messageId && externalId) this.find(connectionId!)?.driver.reportedSend?.(messageId, externalId)
  }

  /** A live connection of this workspace, else 404 "connection". */
  get(workspaceId: string, id: string): LiveConnection {
    const c = this.live.get(id)
    if (!c || c.row.workspace_id !== workspaceId) throw notFound('connection')
    return c
  }

  /** Admin: a connection by id, else 404. */
  getAny(id: string): LiveConnection {
    const c = this.live.get(id)
    if (!c) throw notFound('connection')
    return c
  }

  /**
   * The number, from memory or else from the database (one another instance added a moment ago,
   * before its announcement arrived); null when there is none.
   */
  async load(id: string): Promise<LiveConnection | null> {
    return this.live.get(id) ?? (await this.reload(id))
  }

  /** `load` for this workspace, else 404 "connection" (answered at once for a number known here). */
  obtain(workspaceId: string, id: string): LiveConnection | Promise<LiveConnection> {
    const ofWorkspace = (c: LiveConnection | null) => {
      if (!c || c.row.workspace_id !== workspaceId) throw notFound('connection')
      return c
    }
    const known = this.live.get(id)
    return known ? ofWorkspace(known) : this.reload(id).then(ofWorkspace)
  }

  /** `load`, else 404. */
  async obtainAny(id: string): Promise<LiveConnection> {
    const c = await this.load(id)
    if (!c) throw notFound('connection')
    return c
  }

  /**
   * Another instance changed the number (added, changed, went offline, removed): its row is read
   * again and its driver here follows — started, reconfigured or closed. Returns it, or null when
   * it is gone.
   */
  async reload(id: string): Promise<LiveConnection | null> {
    if (this.stopped || !this.events) return null
    const row = await this.store.byId(id)
    const c = this.live.get(id)
    if (!row || row.deleted_at !== null) {
      if (c) {
        c.driver.close()
        this.live.delete(id)
      }
      return null
    }
    if (!c) return this.attach(row)
    const reconfigured = c.row.config !== row.config
    c.row = row
    if (reconfigured) c.driver.configure(this.open(row))
    return c
  }

  /** Every number read again (changes may have been missed: see Engine.listen); the ids of those still connected. */
  async reloadAll(): Promise<string[]> {
    const ids: string[] = []
    for (const row of await this.store.all()) if (await this.reload(row.id)) ids.push(row.id)
    return ids
  }

  /** Whether the number is connected (not removed); only while the service runs. */
  has(id: string): boolean {
    return this.live.has(id)
  }

  listForWorkspace(workspaceId: string): LiveConnection[] {
    return [...this.live.values()].filter((c) => c.row.workspace_id === workspaceId)
  }

  all(): LiveConnection[] {
    return [...this.live.values()]
  }

  /** A driver told us the number's state changed (e.g. its token was rejected). */
  setStatus(id: string, status: 'online' | 'offline', reason: string | null): Promise<void> {
    return this.inTurn(() => this.writeStatus(id, status, reason))
  }

  private async writeStatus(id: string, status: 'online' | 'offline', reason: string | null) {
    let c = this.live.get(id)
    let next: ConnectionRow
    // made from the number as this instance has it, written only over that: changed meanwhile by
    // another instance (not heard yet), the number is read again and the change made over it
    for (;;) {
      if (!c || (c.row.status === status && c.row.status_reason === reason)) return
      const read = c.row
      next = { ...read, status, status_reason: reason, updated_at: this.deps.clock.now() }
      const written = await this.deps.engine.write(async (tx) => {
        if (!(await this.store.update(tx, next, read))) return false
        if (read.status !== status) await this.onStatusChangedIn(tx, next, read.status)
        await this.deps.engine.announce(tx, `connection:${id}`)
        return true
      })
      if (written) break
      c = (await this.reload(id)) ?? undefined
    }
    c.row = next
    if (status === 'offline') this.log.warn('connection offline', { connection_id: id, reason })
    this.onChange(id)
  }

  /**
   * The templates the number's network account holds (see ConnectionDriver.templates). 422 when
   * its network has none or its config cannot read them (the reason's code), 502 when the network
   * failed or could not be reached (try again).
   */
  async networkTemplates(id: string): Promise<NetworkTemplateDefinition[]> {
    const c = await this.obtainAny(id)
    if (!c.driver.templates) throw refused('templates_not_supported', 'This number’s network has no templates to import.')
    try {
      return await c.driver.templates()
    } catch (e) {
      if (!(e instanceof DriverError)) throw e
      if (e.retryable) throw new ApiError(502, 'network_error', `The network could not list the templates: ${e.message}`)
      throw refused(e.code, e.message)
    }
  }

  /** Ask the network about a number that can tell (cloud_api); sets online/offline with the reason. */
  async verify(id: string): Promise<ConnectionRow> {
    const c = await this.obtainAny(id)
    if (c.driver.probe && c.row.status === 'online') {
      const r = await c.driver.probe()
      await this.setStatus(id, r.online ? 'online' : 'offline', r.reason)
    }
    return c.row
  }

  /**
   * One connection per id the network knows a number by (the Cloud API's phone_number_id), in
   * all workspaces: the network's events for it are routed to that one connection.
   */
  private checkNetworkId(driver: DriverName, config: Record<string, unknown>, exceptId?: string) {
    const networkId = DRIVERS[driver]!.networkId
    const id = networkId?.(config)
    if (!networkId || !id) return
    if (this.all().some((c) => c.row.id !== exceptId && c.row.driver === driver && networkId(this.open(c.row)) === id)) {
      throw validationFailed({ 'config.phone_number_id': ['Another connection already uses this phone_number_id; each Meta number can be connected once.'] })
    }
  }

  async create(workspaceId: string, input: { phone: string; name?: string | null; driver: DriverName; receives?: boolean; config?: unknown; warmup?: WarmupInput | null }, by: Operator | null = null): Promise<ConnectionRow> {
    const factory = DRIVERS[input.driver]!
    const checked = factory.checkConfig(input.config)
    if ('errors' in checked) throw validationFailed(checked.errors)
    this.checkNetworkId(input.driver, checked.config)
    const row = await this.deps.engine.write(async (tx) => {
      if (await this.store.byPhone(workspaceId, input.phone, tx)) throw validationFailed({ phone: ['This workspace already has a connection for this phone number.'] })
      const now = this.deps.clock.now()
      const r: ConnectionRow = {
        id: uuid(),
        workspace_id: workspaceId,
        phone: input.phone,
        name: input.name ?? null,
        driver: input.driver,
        status: 'online',
        status_reason: null,
        receives: input.receives === false ? 0 : 1,
        config: this.seal(input.driver, checked.config),
        warmup: warmupColumn(input.warmup, now),
        created_at: now,
        updated_at: now,
        deleted_at: null,
      }
      await this.store.insert(tx, r)
      await this.audit.addIn(tx, workspaceId, 'connection.created', null, now, r.id, by)
      await this.deps.engine.announce(tx, `connection:${r.id}`)
      return r
    })
    this.attach(row)
    this.onChange(row.id)
    return row
  }

  /**
   * `warmup` (when given) starts a warm-up now, replacing one under way, or ends it (null).
   */
  patch(id: string, input: { name?: string | null; status?: string; config?: unknown; warmup?: WarmupInput | null }, by: Operator | null = null): Promise<ConnectionRow> {
    return this.inTurn(() => this.change(id, input, by))
  }

  private async change(id: string, input: { name?: string | null; status?: string; config?: unknown; warmup?: WarmupInput | null }, by: Operator | null): Promise<ConnectionRow> {
    let c = await this.obtainAny(id)
    let next: ConnectionRow
    // made from the number as this instance has it, written only over that (see writeStatus)
    for (;;) {
      const read = c.row
      let config = read.config
      if (input.config !== undefined) {
        const checked = DRIVERS[read.driver]!.checkConfig(input.config, this.open(read))
        if ('errors' in checked) throw validationFailed(checked.errors)
        this.checkNetworkId(read.driver, checked.config, id)
        config = this.seal(read.driver, checked.config)
      }
      const status = (input.status as ConnectionRow['status']) ?? read.status
      next = {
        ...read,
        name: input.name !== undefined ? input.name : read.name,
        status,
        status_reason: input.status !== undefined ? (status === 'offline' ? 'set offline by the operator' : null) : read.status_reason,
        config,
        warmup: input.warmup !== undefined ? warmupColumn(input.warmup, this.deps.clock.now()) : read.warmup,
        updated_at: this.deps.clock.now(),
      }
      const row = next
      const written = await this.deps.engine.write(async (tx) => {
        if (!(await this.store.update(tx, row, read))) return false
        await this.audit.addIn(tx, row.workspace_id, 'connection.updated', null, row.updated_at, id, by)
        if (row.status !== read.status) await this.onStatusChangedIn(tx, row, read.status)
        await this.deps.engine.announce(tx, `connection:${id}`)
        return true
      })
      if (written) break
      // (removed meanwhile, or this instance stopping: nothing to change here)
      const again = await this.reload(id)
      if (!again) throw notFound('connection')
      c = again
    }
    c.row = next
    if (input.config !== undefined) c.driver.configure(this.open(next))
    this.onChange(id)
    return next
  }

  /** A contact of the workspace was erased: each of its numbers' drivers forgets the person's number. */
  forgetNumber(workspaceId: string, number: string) {
    for (const c of this.liveOf(workspaceId)) {
      const told = (e: unknown) => this.log.error('an erased contact could not be removed from a network driver\'s record', { connection_id: c.row.id, error: String((e as Error)?.message ?? e) })
      try {
        void Promise.resolve(c.driver.forget?.(number)).catch(told)
      } catch (e) {
        told(e)
      }
    }
  }

  /** Message content retention for the workspace: its numbers' drivers drop the texts of sends before `before`; how many. */
  async forgetContentBefore(workspaceId: string, before: number): Promise<number> {
    let n = 0
    for (const c of this.liveOf(workspaceId)) {
      try {
        n += (await c.driver.forgetContent?.(before)) ?? 0
      } catch (e) {
        this.log.error('message content past its retention could not be removed from a network driver\'s record', { connection_id: c.row.id, error: String((e as Error)?.message ?? e) })
      }
    }
    return n
  }

  /** The workspace's numbers with their drivers, as they are now (a list: callers may wait between them). */
  private liveOf(workspaceId: string): LiveConnection[] {
    return [...this.live.values()].filter((c) => c.row.workspace_id === workspaceId)
  }

  /** Remove a connection; its queued messages are failed by the caller in the same step. */
  async remove(id: string, alsoIn: (tx: Queries) => Promise<void>, by: Operator | null = null) {
    const c = await this.obtainAny(id)
    await this.deps.engine.write(async (tx) => {
      await this.store.markDeleted(tx, id, this.deps.clock.now())
      await this.audit.addIn(tx, c.row.workspace_id, 'connection.removed', null, this.deps.clock.now(), id, by)
      await alsoIn(tx)
      await this.deps.engine.announce(tx, `connection:${id}`)
    })
    c.driver.close()
    await c.driver.discard?.()
    this.live.delete(id)
  }
}
