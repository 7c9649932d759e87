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

  /** `fd`: where lines go (standard output; a test passes a file). */
  constructor(
    level: Config['logLevel'],
    private readonly fd = 1,
  ) {
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
    this.flushLater()
  }

  /** Arm the 50 ms flush if it is not armed yet. */
  private flushLater() {
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
      for (let done = 0; done < bytes.length; ) done += writeSync(this.fd, bytes, done, bytes.length - done)
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

  /** `"level":…,"route":…,"status":` per route pattern and method, built once (routes are few). */
  private readonly middles = new Map<string, Record<string, string>>()

  private middle(method: string, route: string): string {
    // looked up by the two strings as they are: no key is built per request
    let byMethod = this.middles.get(route)
    let m = byMethod?.[method]
    if (m === undefined) {
      // ASCII only, so the line can be copied byte for byte (see `ascii`)
      const q = (v: string) => (SAFE.test(v) ? `"${v}"` : asciiJson(v))
      m = `","level":"info","msg":"request","method":${q(method)},"route":${q(route)},"status":`
      // an unknown path is logged as itself: those are not kept
      if (this.middles.size < 1000) {
        if (!byMethod) this.middles.set(route, (byMethod = Object.create(null) as Record<string, string>))
        byMethod[method] = m
      }
    }
    return m
  }

  /**
   * The per-request line: time, method, route, status, ms, workspace id, key id. Written piece by
   * piece into the buffer: no line string is built, so nothing is left for the collector (each
   * piece is an ASCII string that already exists, or digits written as bytes). Under load, a line
   * built as a string and then encoded cost several µs per request (BENCHMARKS.md).
   */
  request(method: string, route: string, status: number, note: RequestNote | undefined, requestId: string) {
    const middle = this.middle(method, route)
    if (middle.length + 400 > BUFFER_BYTES - this.used) this.flush()
    const out = this.out
    let at = this.used
    at = ascii(out, at, '{"time":"')
    at = ascii(out, at, this.now())
    at = ascii(out, at, middle)
    at = writeInt(out, at, status)
    at = ascii(out, at, ',"request_id":"')
    at = ascii(out, at, requestId)
    out[at++] = 0x22 // "
    if (note) {
      at = ascii(out, at, ',"ms":')
      at = writeHundredths(out, at, performance.now() - note.start)
      at = ascii(out, at, ',"workspace_id":')
      at = writeId(out, at, note.workspaceId)
      at = ascii(out, at, ',"key_id":')
      at = writeId(out, at, note.keyId)
      out[at++] = 0x7d // }
    } else {
      at = ascii(out, at, ',"ms":null,"workspace_id":null,"key_id":null}')
    }
    out[at++] = 0x0a // \n
    this.used = at
    this.flushLater()
  }

  enabled(level: Exclude<Level, 'silent'>) {
    return ORDER[level] >= this.min
  }

  write(level: Exclude<Level, 'silent'>, fields: Record<string, unknown>) {
    if (ORDER[level] < this.min) return
    this.emit(JSON.stringify({ time: new Date().toISOString(), level, ...fields }) + '\n')
    if (ORDER[level] >= ORDER.warn) this.flush()
  }

  private lastRepeated = new Map<string, number>()

  /**
   * `error`, at most once per `everyMs` for the same `msg`: a fault that lasts (a full disk) makes
   * a loop that tries each second fail each second, and one line a minute says as much.
   */
  errorAtMostEvery(everyMs: number, msg: string, fields: Record<string, unknown> = {}) {
    const now = Date.now()
    if (now - (this.lastRepeated.get(msg) ?? -Infinity) < everyMs) return
    this.lastRepeated.set(msg, now)
    this.error(msg, fields)
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

const REQUEST_ID: unique symbol = Symbol('capstan request id')
type WithId = { [REQUEST_ID]?: string }
/** What a request id taken from a trusted proxy may look like (ASCII: it goes into log lines as is). */
const GOOD_REQUEST_ID = /^[A-Za-z0-9._:@+=-]{1,128}$/

/**
 * The request's id, fixed at its first use: the `X-Request-Id` a trusted proxy sent (`fromProxy`
 * is only asked when the request has one), else a new UUIDv7. Sent back on the response and
 * written on each log line of the request.
 */
export function requestIdOf(request: Request, set: object, fromProxy: ((request: Request) => boolean) | null): string {
  const holder = set as WithId
  let id = holder[REQUEST_ID]
  if (id === undefined) {
    const given = fromProxy === null ? null : request.headers.get('x-request-id')
    id = given !== null && GOOD_REQUEST_ID.test(given) && fromProxy!(request) ? given : Bun.randomUUIDv7()
    holder[REQUEST_ID] = id
  }
  return id
}

/** Writes a non-negative integer's digits at `at`; returns the new end. */
function writeInt(out: Uint8Array, at: number, n: number): number {
  if (n >= 10) at = writeInt(out, at, Math.floor(n / 10))
  out[at] = 0x30 + (n % 10)
  return at + 1
}

/** Writes `v` rounded to hundredths as a JSON number (`12`, `0.5`, `3.07`); returns the new end. */
function writeHundredths(out: Uint8Array, at: number, v: number): number {
  const h = Math.round(v * 100)
  if (!(h > 0)) {
    out[at] = 0x30
    return at + 1
  }
  at = writeInt(out, at, Math.floor(h / 100))
  const frac = h % 100
  if (frac === 0) return at
  out[at++] = 0x2e // .
  out[at++] = 0x30 + Math.floor(frac / 10)
  if (frac % 10 !== 0) out[at++] = 0x30 + (frac % 10)
  return at
}

/**
 * Copies an ASCII string's characters as bytes at `at`; returns the new end. A plain loop: for the
 * short pieces of a log line it costs less than a call into the runtime per piece.
 */
function ascii(out: Uint8Array, at: number, text: string): number {
  for (let i = 0; i < text.length; i++) out[at + i] = text.charCodeAt(i)
  return at + text.length
}

/** A JSON string in ASCII only: characters beyond it as \u escapes (still the same JSON value). */
const asciiJson = (v: string) => JSON.stringify(v).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)

/** A quoted id (ASCII: a uuid or a key id), or null. */
function writeId(out: Uint8Array, at: number, id: string | undefined): number {
  if (!id) return ascii(out, at, 'null')
  out[at++] = 0x22 // "
  at = ascii(out, at, id)
  out[at++] = 0x22
  return at
}

/** Characters that never need escaping in a JSON string (route patterns, methods). */
const SAFE = /^[A-Za-z0-9/_.:{}-]*$/
