/**
 * Instances sharing a database count each key's requests, failed sign-ins and request sizes
 * against limits each holds from its own environment. With different limits, a request's answer
 * would depend on the instance it reached (60 a minute on one, 120 on another). Each instance
 * tells the others its limits when it starts (after it listens), and every instance that holds
 * others answers once with its own: wherever two differ, both logs say which variables and both
 * values, and `/metrics` counts it. Only running instances answer, so a stopped one with old
 * limits, or this instance's own previous run, raises nothing. On SQLite there is one process.
 */
import { hostname } from 'node:os'
import type { Config } from './config'
import type { Engine } from './db/engine'

/** The settings instances sharing a database must agree on: each variable and its value here. */
export function sharedSettings(config: Config): Record<string, number> {
  return {
    CAPSTAN_KEY_RATE_LIMIT: config.keyRateLimit,
    CAPSTAN_AUTH_FAIL_LIMIT: config.authFailLimit,
    CAPSTAN_RATE_WINDOW_SECONDS: config.rateWindowMs / 1000,
    CAPSTAN_MAX_JSON_BYTES: config.maxJsonBytes,
    CAPSTAN_MAX_UPLOAD_BYTES: config.maxUploadBytes,
  }
}

/** What an instance announces at its start (`settings:<json>`) and in answer to one (`settings-answer:<json>`). */
export const ANNOUNCED = { start: 'settings', answer: 'settings-answer' } as const

interface Told {
  /** The announcing instance (one per process). */
  id: string
  host: string
  settings: Record<string, number>
}

export class SettingsCheck {
  /** This instance, as the others hear it. */
  readonly id = crypto.randomUUID()
  /** Times an instance was heard whose limits differ from this one's (for /metrics). */
  differences = 0

  constructor(
    private readonly engine: Engine,
    private readonly own: Record<string, number>,
    private readonly log: { warn(msg: string, fields?: Record<string, unknown>): void },
  ) {}

  /** Tell the instances already running this one's limits (at the start, once it listens). */
  async announce(kind: string = ANNOUNCED.start): Promise<void> {
    if (!this.engine.shared) return
    const told: Told = { id: this.id, host: hostname(), settings: this.own }
    await this.engine.write((tx) => this.engine.announce(tx, `${kind}:${JSON.stringify(told)}`))
  }

  /** Another instance's limits were heard (`kind` one of ANNOUNCED, `payload` its JSON). */
  async heard(kind: string, payload: string): Promise<void> {
    let told: Told
    try {
      told = JSON.parse(payload) as Told
    } catch {
      return
    }
    if (told.id === this.id || typeof told.settings !== 'object' || told.settings === null) return
    const differing = Object.keys(this.own).filter((name) => told.settings[name] !== undefined && told.settings[name] !== this.own[name])
    if (differing.length > 0) {
      this.differences++
      const which = differing.map((name) => `${name} is ${told.settings[name]} there and ${this.own[name]} here`).join('; ')
      this.log.warn(
        `another instance on this database (${String(told.host).slice(0, 100)}) has other limits: ${which}. Instances sharing a database need the same limits, or a request's answer depends on the instance it reaches`,
        { settings: differing },
      )
    }
    // a new instance hears from every one already running (each answers once; answers get none)
    if (kind === ANNOUNCED.start) await this.announce(ANNOUNCED.answer)
  }
}
