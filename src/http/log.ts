/**
 * One JSON line per request (time, method, route, status, ms, workspace id, key id) and a few
 * event lines. Never the bearer token, never a request body (spec §5.12).
 */
import { writeSync } from 'node:fs'
import type { Config } from '../config'

const ORDER = { debug: 10, info: 20, warn: 30, error: 40, silent: 100 } as const
type Level = keyof typeof ORDER

const BUFFER_BYTES = 64 * 1024

export class Logger {
  private readonly min: number
  /**
   * Lines are copied into one reusable byte buffer as they are made, so each line's string dies
   * young; holding hundreds of strings until a flush costs the garbage collector more than the copy.
   */
  private readonly out = Buffer.allocUnsafe(BUFFER_BYTES)
  private used = 0
  private flushTimer: Timer | null = null

  constructor(level: Config['logLevel']) {
    this.min = ORDER[level]
  }

  /** Lines are buffered and written together: at most 50 ms later, when the buffer fills, or at once for warnings and errors. */
  private emit(line: string) {
    const worst = line.length * 3 // UTF-8 bytes at most
    if (worst > BUFFER_BYTES - this.used) {
      this.flush()
      if (worst > BUFFER_BYTES) return this.writeOut(Buffer.from(line))
    }
    this.used += this.out.write(line, this.used)
    if (!this.flushTimer) this.flushTimer = setTimeout(() => this.flush(), 50)
  }

  flush() {
    if (this.flushTimer) clearTimeout(this.flushTimer)
    this.flushTimer = null
    if (this.used === 0) return
    const n = this.used
    this.used = 0
    this.writeOut(this.out.subarray(0, n))
  }

  private writeOut(bytes: Uint8Array) {
    try {
      for (let done = 0; done < bytes.length; ) done += writeSync(1, bytes, done, bytes.length - done)
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

  /** `"level":…,"route":…,"status":` per method and route pattern, built once (routes are few). */
  private readonly middles = new Map<string, string>()

  private middle(method: string, route: string): string {
    const id = method + ' ' + route
    let m = this.middles.get(id)
    if (m === undefined) {
      const q = (v: string) => (SAFE.test(v) ? `"${v}"` : JSON.stringify(v))
      m = `","level":"info","msg":"request","method":${q(method)},"route":${q(route)},"status":`
      // an unknown path is logged as itself: those are not kept
      if (this.middles.size < 1000) this.middles.set(id, m)
    }
    return m
  }

  /** The per-request line: time, method, route, status, ms, workspace id, key id. */
  request(method: string, route: string, status: number, note: RequestNote | undefined) {
    const tail = note
      ? `,"ms":${Math.round((performance.now() - note.start) * 100) / 100},"workspace_id":${note.workspaceId ? `"${note.workspaceId}"` : 'null'},"key_id":${note.keyId ? `"${note.keyId}"` : 'null'}}\n`
      : ',"ms":null,"workspace_id":null,"key_id":null}\n'
    this.emit(`{"time":"${this.now()}${this.middle(method, route)}${status}${tail}`)
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

/**
 * What a request line names beyond method/route/status. Opened by the first step that runs for a
 * request (body parsing or authentication) — which is where its `ms` counts from — and filled in
 * by authentication. Routes with neither (health, docs, an unknown path) log `ms: null`.
 *
 * It rides on the request's own response-settings object (Elysia's `set`), not in a WeakMap
 * keyed by the Request: weak tables cost the garbage collector work on every request.
 */
export interface RequestNote {
  start: number
  workspaceId?: string
  keyId?: string
}

const NOTE: unique symbol = Symbol('capstan request note')
type Noted = { [NOTE]?: RequestNote }

/** The request's note, opened now if no step has yet. */
export function noteOf(set: object): RequestNote {
  return ((set as Noted)[NOTE] ??= { start: performance.now() })
}

/** The request's note if a step opened one. */
export function peekNote(set: object): RequestNote | undefined {
  return (set as Noted)[NOTE]
}

/** Characters that never need escaping in a JSON string (route patterns, methods). */
const SAFE = /^[A-Za-z0-9/_.:{}-]*$/
