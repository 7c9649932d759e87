/**
 * One JSON line per request (time, method, route, status, ms, workspace id, key id) and a few
 * event lines. Never the bearer token, never a request body (spec §5.12).
 */
import type { Config } from '../config'

const ORDER = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 } as const
type Level = keyof typeof ORDER

export class Logger {
  private readonly min: number

  constructor(level: Config['logLevel']) {
    this.min = ORDER[level]
  }

  enabled(level: Exclude<Level, 'silent'>) {
    return ORDER[level] >= this.min
  }

  write(level: Exclude<Level, 'silent'>, fields: Record<string, unknown>) {
    if (ORDER[level] < this.min) return
    process.stdout.write(JSON.stringify({ time: new Date().toISOString(), level, ...fields }) + '\n')
  }

  info(msg: string, fields: Record<string, unknown> = {}) {
    this.write('info', { msg, ...fields })
  }
  warn(msg: string, fields: Record<string, unknown> = {}) {
    this.write('warn', { msg, ...fields })
  }
  error(msg: string, fields: Record<string, unknown> = {}) {
    this.write('error', { msg, ...fields })
  }
}

/** What a request line names beyond method/route/status: filled in by the auth step. */
export interface RequestNote {
  start: number
  workspaceId?: string
  keyId?: string
}

export const requestNotes = new WeakMap<Request, RequestNote>()
