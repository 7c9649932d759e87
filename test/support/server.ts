/**
 * Starts a real Capstan process (`bun src/main.ts serve`) on a free port with a fresh data dir,
 * and offers scenario helpers over real HTTP. Every test file gets its own server.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Subprocess } from 'bun'
import { DocumentedResponses } from './documented'

let apiDocument: Promise<DocumentedResponses> | undefined
let adminDocument: Promise<DocumentedResponses> | undefined

export const ADMIN_TOKEN = 'test-admin-token-0123456789abcdef'
const ROOT = join(import.meta.dir, '..', '..')

export interface Res {
  status: number
  headers: Headers
  json: any
  text: string
}

let phoneSeq = Math.floor(Math.random() * 1_000_000)
/** A fresh E.164 number. */
export const newPhone = (prefix = '+1555') => `${prefix}${String(phoneSeq++ % 10_000_000).padStart(7, '0')}`

export interface StartOptions {
  env?: Record<string, string>
  dataDir?: string
  /** What is started (default `bun src/main.ts serve`; `bun run cluster`'s script for several instances). */
  command?: string[]
  /** How long it may take to answer /healthz (ms). */
  startMs?: number
}

/** This process's environment without any CAPSTAN_* variable: a child server gets only the settings its test gives it. */
export function hostEnv(): Record<string, string> {
  const env: Record<string, string> = {}
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('CAPSTAN_') && v !== undefined) env[k] = v
  return env
}

export class TestServer {
  proc!: Subprocess
  base = ''
  dataDir: string
  output = ''
  private ownsDir: boolean

  constructor(private readonly opts: StartOptions = {}) {
    this.ownsDir = !opts.dataDir
    this.dataDir = opts.dataDir ?? mkdtempSync(join(tmpdir(), 'capstan-test-'))
  }

  static async start(opts: StartOptions = {}) {
    const s = new TestServer(opts)
    await s.boot()
    return s
  }

  /** Start (or restart) the process on a new port over the same data dir. */
  async boot(extraEnv: Record<string, string> = {}) {
    const port = await freePort()
    this.base = `http://127.0.0.1:${port}`
    const env = hostEnv()
    Object.assign(env, {
      CAPSTAN_HOST: '127.0.0.1',
      CAPSTAN_PORT: String(port),
      CAPSTAN_DATA_DIR: this.dataDir,
      CAPSTAN_ADMIN_TOKEN: ADMIN_TOKEN,
      CAPSTAN_CLAMD: `unix:${join(this.dataDir, 'no-clamd.sock')}`,
      CAPSTAN_LOG_LEVEL: 'info',
      ...this.opts.env,
      ...extraEnv,
    })
    this.proc = Bun.spawn(this.opts.command ?? ['bun', 'src/main.ts', 'serve'], { cwd: ROOT, env, stdout: 'pipe', stderr: 'pipe' })
    void this.collect(this.proc.stdout as ReadableStream<Uint8Array>)
    void this.collect(this.proc.stderr as ReadableStream<Uint8Array>)
    const deadline = Date.now() + (this.opts.startMs ?? 20_000)
    while (Date.now() < deadline) {
      if (this.proc.exitCode !== null) throw new Error(`server exited ${this.proc.exitCode}: ${this.output}`)
      try {
        const r = await fetch(`${this.base}/healthz`)
        if (r.status === 200) return
      } catch {
        // not listening yet
      }
      await Bun.sleep(50)
    }
    throw new Error(`server did not become healthy: ${this.output}`)
  }

  private async collect(stream: ReadableStream<Uint8Array>) {
    const dec = new TextDecoder()
    for await (const chunk of stream) this.output += dec.decode(chunk)
  }

  /** Stop the process: SIGTERM (graceful) or SIGKILL (crash). */
  async stop(signal: 'SIGTERM' | 'SIGKILL' = 'SIGTERM') {
    if (this.proc.exitCode === null) {
      this.proc.kill(signal)
      await this.proc.exited
    }
  }

  async close() {
    await this.stop()
    if (this.ownsDir) rmSync(this.dataDir, { recursive: true, force: true })
  }

  /** One HTTP request; `body` objects are sent as JSON unless `form`/`multipart` is given. */
  async request(method: string, path: string, o: { bearer?: string; json?: unknown; form?: Record<string, string>; multipart?: FormData; raw?: string | Uint8Array; headers?: Record<string, string> } = {}): Promise<Res> {
    const headers: Record<string, string> = { accept: 'application/json', ...o.headers }
    if (o.bearer !== undefined) headers.authorization = `Bearer ${o.bearer}`
    let body: string | Uint8Array | FormData | undefined
    if (o.json !== undefined) {
      body = JSON.stringify(o.json)
      headers['content-type'] ??= 'application/json'
    } else if (o.form) {
      body = new URLSearchParams(o.form).toString()
      headers['content-type'] = 'application/x-www-form-urlencoded'
    } else if (o.multipart) body = o.multipart
    else if (o.raw !== undefined) body = o.raw
    const r = await fetch(this.base + path, { method, headers, body })
    const text = await r.text()
    // every answer of a documented operation must be what the API document says it can be (the
    // admin API's answers by the admin document)
    const admin = path.startsWith('/admin/api/')
    if (admin || path.startsWith('/api/v1/')) {
      const problems = (await this.documented(admin)).problems(method, path, r.status, r.headers.get('content-type'), text)
      if (problems.length) throw new Error(`response differs from ${admin ? '/admin/openapi.json' : '/openapi.json'}:\n${problems.join('\n')}\nbody: ${text.slice(0, 500)}`)
    }
    let json: any = null
    try {
      json = text ? JSON.parse(text) : null
    } catch {
      json = null
    }
    return { status: r.status, headers: r.headers, json, text }
  }

  /** The API document (or the admin API's) this server publishes, as a checker of its responses (fetched once per process). */
  private async documented(admin: boolean): Promise<DocumentedResponses> {
    const load = (path: string) => fetch(`${this.base}${path}`).then(async (r) => new DocumentedResponses((await r.json()) as Record<string, any>, path))
    if (admin) return (adminDocument ??= load('/admin/openapi.json'))
    return (apiDocument ??= load('/openapi.json'))
  }

  admin(method: string, path: string, json?: unknown) {
    return this.request(method, `/admin/api${path}`, { bearer: ADMIN_TOKEN, json })
  }

  async workspace(name = `WS ${crypto.randomUUID().slice(0, 8)}`) {
    const r = await this.admin('POST', '/workspaces', { name })
    if (r.status !== 201) throw new Error(`workspace: ${r.status} ${r.text}`)
    return r.json.data as { id: string; name: string; slug: string; status: string; settings: any }
  }

  async key(workspaceId: string, scopes?: string[], extra: Record<string, unknown> = {}) {
    const r = await this.admin('POST', `/workspaces/${workspaceId}/keys`, { name: 'test', ...(scopes ? { scopes } : {}), ...extra })
    if (r.status !== 201) throw new Error(`key: ${r.status} ${r.text}`)
    return r.json.data as { id: string; key: string; prefix: string; scopes: string[]; status: string; allowed_ips: string[] | null }
  }

  /** A workspace plus an all-scope key. */
  async tenant() {
    const ws = await this.workspace()
    const k = await this.key(ws.id)
    return { ws, key: k.key, keyId: k.id }
  }

  api(key: string, method: string, path: string, o: Parameters<TestServer['request']>[2] = {}) {
    return this.request(method, `/api/v1${path}`, { ...o, bearer: key })
  }

  /**
   * Sends a request's head (its lines, without Host or Content-Length) and the first 4 KiB of a
   * body it says is `declared` bytes long, then waits: what the server answers within `ms` while
   * the rest of the body never comes ('' if nothing), and whether it closed the connection.
   */
  async partialRequest(head: string, declared: number, ms = 3000): Promise<{ reply: string; closed: boolean }> {
    const url = new URL(this.base)
    let reply = ''
    let closed = false
    const sock = await Bun.connect({
      hostname: url.hostname,
      port: Number(url.port),
      socket: {
        data(_s, d) {
          reply += Buffer.from(d).toString()
        },
        close() {
          closed = true
        },
      },
    })
    sock.write(`${head}\r\nHost: ${url.host}\r\nContent-Length: ${declared}\r\nConnection: keep-alive\r\n\r\n${'x'.repeat(4096)}`)
    const end = Date.now() + ms
    while (!closed && Date.now() < end) await Bun.sleep(20)
    sock.end()
    return { reply, closed }
  }
}

export async function freePort(): Promise<number> {
  const srv = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response('') })
  const port = srv.port!
  srv.stop(true)
  return port
}
