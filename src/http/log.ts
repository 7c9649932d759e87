/**
 * One JSON line per request (time, method, route, status, ms, workspace id, key id) and a few
 * event lines. Never the bearer token, never a request body (spec §5.12).
 */
import { writeSync } from 'node:fs'
import type { Config } from '../config'

const ORDER = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 } as const
type Level = keyof typeof ORDER

export class Logger {
  private readonly min: number
  private buffer = ''
  private flushTimer: Timer | null = null

  constructor(level: Config['logLevel']) {
    this.min = ORDER[level]
  }

  /** Lines are buffered and written together: at most 50 ms later, at 64 KiB, or at once for warnings and errors. */
  private emit(line: string) {
    this.buffer += line
    if (this.buffer.length >= 65536) this.flush()
    else if (!this.flushTimer) this.flushTimer = setTimeout(() => this.flush(), 50)
  }

  flush() {
    if (this.flushTimer) clearTimeout(this.flushTimer)
    this.flushTimer = null
    if (!this.buffer) return
    const out = this.buffer
    this.buffer = ''
    try {
      writeSync(1, out)
    } catch {
      // stdout closed or full: logging must never take the server down
    }
  }

  private stampMs = 0
  private stamp = ''

  /** ISO time, formatted at most once per millisecond. */
  private now(): string {
    const t = Date.now()
    if (t !== this.stampMs) {
      this.stampMs = t
      this.stamp = new Date(t).toISOString()
    }
    return this.stamp
  }

  /** The per-request line: time, method, route, status, ms, workspace id, key id. */
  request(method: string, route: string, status: number, note: RequestNote | undefined) {
    const ms = note ? Math.round((performance.now() - note.start) * 100) / 100 : null
    const ws = note?.workspaceId ? `"${note.workspaceId}"` : 'null'
    const key = note?.keyId ? `"${note.keyId}"` : 'null'
    const r = SAFE.test(route) ? `"${route}"` : JSON.stringify(route)
    const m = SAFE.test(method) ? `"${method}"` : JSON.stringify(method)
    this.emit(`{"time":"${this.now()}","level":"info","msg":"request","method":${m},"route":${r},"status":${status},"ms":${ms},"workspace_id":${ws},"key_id":${key}}\n`)
  }

  enabled(level: Exclude<Level, 'silent'>) {
    return ORDER[level] >= this.min
  }

  write(level: Exclude<Level, 'silent'>, fields: Record<string, unknown>) {
    if (ORDER[level] < this.min) return
    this.emit(JSON.stringify({ time: new Date().toISOString(), level, ...fields }) + '\n')
    if (ORDER[level] >= ORDER.warn) this.flush()
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

/** Characters that never need escaping in a JSON string (route patterns, methods). */
const SAFE = /^[A-Za-z0-9/_.:{}-]*$/
