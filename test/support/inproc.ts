/**
 * In-process services over a real SQLite file, with a controllable clock and timers, for tests of
 * time-driven behaviour (pacing caps and gaps, expiry, webhook disabling). The drivers, the
 * database and HTTP receivers stay real; only time is controlled.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Clock } from '../../src/clock'
import { loadConfig } from '../../src/config'
import { migrate, openDatabase } from '../../src/db/open'
import { SqliteEngine } from '../../src/db/engine'
import { Writer } from '../../src/db/writer'
import { Logger } from '../../src/http/log'
import type { Timers } from '../../src/scheduler/pacer'
import { SecretBox } from '../../src/secrets'
import { buildServices, startServices, stopServices } from '../../src/services'

export class ManualClock implements Clock {
  constructor(public t = Date.UTC(2026, 10, 21, 9, 0, 0)) {}
  now() {
    return this.t
  }
}

/** Timers that fire only when the test advances the clock. */
export class ManualTimers implements Timers {
  private seq = 0
  private pending = new Map<number, { at: number; fn: () => void }>()
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
  advanceTo(until: number) {
    for (;;) {
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
    this.advanceTo(this.clock.t + ms)
  }
}

export async function inProcess(opts: { clamd?: string; env?: Record<string, string> } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'capstan-inproc-'))
  const config = loadConfig({ CAPSTAN_DATA_DIR: dir, CAPSTAN_LOG_LEVEL: 'silent', ...(opts.clamd ? { CAPSTAN_CLAMD: opts.clamd } : {}), ...opts.env })
  const db = openDatabase(config.dbPath)
  migrate(db)
  const clock = new ManualClock()
  const timers = new ManualTimers(clock)
  const writer = new Writer(db)
  const deps = { config, db, writer, engine: new SqliteEngine(db, writer), clock }
  const svc = buildServices(deps, new Logger('silent'), SecretBox.load(dir, null), { timers, random: () => 0.5 })
  await startServices(svc)
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

/** Let pending promise callbacks and setImmediate batches (group commits) run. */
export const settle = async (rounds = 5) => {
  for (let i = 0; i < rounds; i++) await new Promise((r) => setImmediate(r))
}
