/**
 * In-process services over a real SQLite file (or a real PostgreSQL: `inProcessOnPostgres`), with
 * a controllable clock and timers, for tests of time-driven behaviour (pacing caps and gaps,
 * expiry, webhook disabling). The drivers, the database and HTTP receivers stay real; only time is
 * controlled.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Clock } from '../../src/clock'
import { loadConfig } from '../../src/config'
import { migrate, openDatabase } from '../../src/db/open'
import { type Engine, PgEngine, SqliteEngine } from '../../src/db/engine'
import { migratePostgres } from '../../src/db/postgres'
import { Writer } from '../../src/db/writer'
import { Logger } from '../../src/http/log'
import type { Timers } from '../../src/scheduler/pacer'
import { SecretBox } from '../../src/secrets'
import { buildServices, settleServices, startServices, stopServices } from '../../src/services'

export class ManualClock implements Clock {
  constructor(public t = Date.UTC(2026, 10, 21, 9, 0, 0)) {}
  now() {
    return this.t
  }
}

/**
 * Timers that fire only when the test advances the clock. The work a timer starts (a pacer tick:
 * a write, then the next timer) is waited for before the next due timer fires (`quiet`).
 */
export class ManualTimers implements Timers {
  private seq = 0
  private pending = new Map<number, { at: number; fn: () => void }>()
  /** Resolves once what the fired timers started has settled. */
  quiet: () => Promise<void> = () => settle()
  constructor(private readonly clock: ManualClock) {}
  set(fn: () => void, ms: number) {
    const id = ++this.seq
    this.pending.set(id, { at: this.clock.t + ms, fn })
    return id
  }
  clear(h: unknown) {
    this.pending.delete(h as number)
  }
  /** Move time forward to `until`, firing due timers in order at their due times. */
  async advanceTo(until: number) {
    for (;;) {
      await this.quiet()
      let next: [number, { at: number; fn: () => void }] | null = null
      for (const e of this.pending) if (e[1].at <= until && (!next || e[1].at < next[1].at)) next = e
      if (!next) break
      this.pending.delete(next[0])
      this.clock.t = Math.max(this.clock.t, next[1].at)
      next[1].fn()
    }
    this.clock.t = until
  }
  advance(ms: number) {
    return this.advanceTo(this.clock.t + ms)
  }
}

/** The services over `engine`, on the test's clock and timers (a timer's work waited for), started. */
async function started(config: ReturnType<typeof loadConfig>, engine: Engine, dir: string) {
  const clock = new ManualClock()
  const timers = new ManualTimers(clock)
  const svc = buildServices({ config, engine, clock }, new Logger('silent'), SecretBox.load(dir, null), { timers, random: () => 0.5 })
  timers.quiet = async () => {
    await settle()
    await svc.pacer.settled()
  }
  await startServices(svc)
  return { svc, clock, timers }
}

export async function inProcess(opts: { clamd?: string; env?: Record<string, string> } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'capstan-inproc-'))
  const config = loadConfig({ CAPSTAN_DATA_DIR: dir, CAPSTAN_LOG_LEVEL: 'silent', ...(opts.clamd ? { CAPSTAN_CLAMD: opts.clamd } : {}), ...opts.env })
  const db = openDatabase(config.dbPath)
  migrate(db)
  const { svc, clock, timers } = await started(config, new SqliteEngine(db, new Writer(db)), dir)
  return {
    svc,
    clock,
    timers,
    db,
    dir,
    async close() {
      await settle()
      stopServices(svc)
      db.close()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/**
 * `inProcess` on PostgreSQL: the services on the database at `url` (migrated here), with the
 * same controlled clock and timers; the media (unless `env` names a bucket) and the sandbox's
 * files under a temporary directory. Two on one database are two instances.
 */
export async function inProcessOnPostgres(url: string, opts: { clamd?: string; env?: Record<string, string> } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'capstan-inproc-pg-'))
  const config = loadConfig({ CAPSTAN_DATA_DIR: dir, CAPSTAN_LOG_LEVEL: 'silent', CAPSTAN_DATABASE_URL: url, ...(opts.clamd ? { CAPSTAN_CLAMD: opts.clamd } : {}), ...opts.env })
  const admin = new Bun.SQL(url, { max: 1 })
  await migratePostgres(admin)
  await admin.close()
  const engine = PgEngine.connect(url, 8)
  const { svc, clock, timers } = await started(config, engine, dir)
  return {
    svc,
    clock,
    timers,
    engine,
    async close() {
      await settle()
      stopServices(svc)
      await settleServices(svc)
      await engine.close()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

/** Let pending promise callbacks and setImmediate batches (group commits) run. */
export const settle = async (rounds = 5) => {
  for (let i = 0; i < rounds; i++) await new Promise((r) => setImmediate(r))
}

/**
 * What `read` says at every turn of the event loop until `stop` is called: the states a piece of
 * work passed through where other work could run (between its writes), each one once, in order.
 */
export function eachTurn<T>(read: () => T) {
  const seen: T[] = []
  let on = true
  const look = () => {
    if (!on) return
    const v = read()
    if (!seen.some((s) => Bun.deepEquals(s, v))) seen.push(v)
    setImmediate(look)
  }
  setImmediate(look)
  return {
    stop() {
      on = false
      return seen
    },
  }
}
