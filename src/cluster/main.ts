/**
 * `bun run cluster`: Capstan as several machines run it, on this one, for development and tests —
 * a private PostgreSQL (Debian's package: initdb into the data directory, a Unix socket only), a
 * private S3-compatible server (s3rver), CAPSTAN_CLUSTER_INSTANCES `capstan serve` processes
 * (default 2) sharing them, and a round-robin HTTP proxy on CAPSTAN_HOST:CAPSTAN_PORT in front.
 * Every piece keeps its state under CAPSTAN_DATA_DIR; SIGTERM (or SIGINT) stops them all.
 *
 * The instances get every CAPSTAN_* variable this process got, except where each must differ (its
 * port and data directory) or the cluster decides (the database, the bucket, a shared secret key).
 * The proxy passes each request to the next instance in turn; one that cannot be reached (it
 * died) is skipped, as a load balancer's health check would.
 */
import { randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import type { Subprocess } from 'bun'
import S3rver from 's3rver'
import { PrivatePostgres } from './postgres'

const env = process.env
const dataDir = resolve(env.CAPSTAN_DATA_DIR || './data-cluster')
const host = env.CAPSTAN_HOST || '127.0.0.1'
const port = Number(env.CAPSTAN_PORT || 8080)
const count = Math.max(1, Number(env.CAPSTAN_CLUSTER_INSTANCES || 2))
const BUCKET = 'capstan'

const say = (line: string) => process.stderr.write(`cluster: ${line}\n`)

mkdirSync(dataDir, { recursive: true })

// one secret key for every instance (each seals and opens the same stored secrets)
const keyFile = join(dataDir, 'cluster-secret.key')
if (!existsSync(keyFile)) writeFileSync(keyFile, randomBytes(32).toString('hex'), { mode: 0o600 })
const secretKey = env.CAPSTAN_SECRET_KEY || readFileSync(keyFile, 'utf8').trim()

const pg = await PrivatePostgres.start(join(dataDir, 'postgres'))
const s3dir = join(dataDir, 's3')
mkdirSync(s3dir, { recursive: true })
const s3 = new S3rver({ port: 0, address: '127.0.0.1', directory: s3dir, silent: true, configureBuckets: [{ name: BUCKET, configs: [] }] })
const { port: s3port } = await s3.run()

/** A free TCP port on the loopback interface. */
function freePort(): number {
  const probe = Bun.serve({ hostname: '127.0.0.1', port: 0, fetch: () => new Response(null) })
  const p = probe.port!
  void probe.stop(true)
  return p
}

interface Instance {
  name: string
  url: string
  proc: Subprocess
}

const instances: Instance[] = []
for (let i = 1; i <= count; i++) {
  const instancePort = freePort()
  const name = `instance-${i}`
  const proc = Bun.spawn([process.execPath, join(import.meta.dir, '..', 'main.ts'), 'serve'], {
    env: {
      ...env,
      CAPSTAN_HOST: '127.0.0.1',
      CAPSTAN_PORT: String(instancePort),
      CAPSTAN_DATA_DIR: join(dataDir, name),
      CAPSTAN_DATABASE_URL: pg.url,
      CAPSTAN_MEDIA_STORE: `s3://${BUCKET}/media`,
      CAPSTAN_SECRET_KEY: secretKey,
      CAPSTAN_SECRET_KEY_FILE: '',
      // the client's address comes from the proxy's X-Forwarded-For
      CAPSTAN_TRUSTED_PROXIES: '127.0.0.1',
      S3_ENDPOINT: `http://127.0.0.1:${s3port}`,
      S3_ACCESS_KEY_ID: 'S3RVER',
      S3_SECRET_ACCESS_KEY: 'S3RVER',
      S3_REGION: 'us-east-1',
    },
    stdout: 'inherit',
    stderr: 'inherit',
  })
  instances.push({ name, url: `http://127.0.0.1:${instancePort}`, proc })
}

// (declared before stopAll, which an instance failing to start calls before the proxy exists)
let proxy: ReturnType<typeof Bun.serve> | null = null
let stopping = false
async function stopAll(code: number) {
  if (stopping) return
  stopping = true
  void proxy?.stop(true)
  for (const i of instances) if (i.proc.exitCode === null) i.proc.kill('SIGTERM')
  await Promise.all(instances.map((i) => i.proc.exited))
  await s3.close().catch(() => {})
  await pg.stop()
  process.exit(code)
}
process.on('SIGTERM', () => void stopAll(0))
process.on('SIGINT', () => void stopAll(0))

// every instance answering before the proxy listens (a start that fails stops the cluster)
for (const i of instances) {
  for (;;) {
    if (i.proc.exitCode !== null) {
      say(`${i.name} exited with code ${i.proc.exitCode} while starting`)
      await stopAll(i.proc.exitCode || 1)
    }
    const ok = await fetch(`${i.url}/healthz`)
      .then((r) => r.ok)
      .catch(() => false)
    if (ok) break
    await Bun.sleep(100)
  }
}

let next = 0
proxy = Bun.serve({
  hostname: host,
  port,
  idleTimeout: 120,
  maxRequestBodySize: 1024 * 1024 * 1024,
  async fetch(req, server) {
    const url = new URL(req.url)
    const headers = new Headers(req.headers)
    const client = server.requestIP(req)?.address
    if (client) headers.set('x-forwarded-for', [headers.get('x-forwarded-for'), client].filter(Boolean).join(', '))
    // the body is read once, so a request can go to the next instance when one cannot be reached
    const body = req.method === 'GET' || req.method === 'HEAD' ? undefined : await req.arrayBuffer()
    // a refused connection (an instance that died, or one whose queue of new connections is full
    // for a moment) goes to the next instance; after a round of refusals, a short wait
    for (let tried = 0; tried < instances.length * 20; tried++) {
      if (tried > 0 && tried % instances.length === 0) await Bun.sleep(50)
      const target = instances[next++ % instances.length]!
      if (target.proc.exitCode !== null) continue
      try {
        return await fetch(`${target.url}${url.pathname}${url.search}`, { method: req.method, headers, body, redirect: 'manual' })
      } catch (e) {
        // one that died while it had the request may have done it — the client decides (its Idempotency-Key)
        if ((e as { code?: string })?.code !== 'ECONNREFUSED') return Response.json({ code: 'bad_gateway', message: 'The instance stopped while it had the request.' }, { status: 502 })
      }
    }
    return Response.json({ code: 'unavailable', message: 'No Capstan instance is reachable.' }, { status: 503 })
  },
})
// which process is which (tests stop one of them the hard way)
writeFileSync(join(dataDir, 'instances.json'), JSON.stringify(instances.map((i) => ({ name: i.name, url: i.url, pid: i.proc.pid }))))
say(`${count} instance(s) on PostgreSQL (${pg.dir}) and s3rver (${s3dir}), proxied at http://${host}:${proxy.port}`)

// an instance that dies on its own is reported (the proxy skips it); the cluster keeps serving
for (const i of instances) void i.proc.exited.then((code) => !stopping && say(`${i.name} exited with code ${code}`))
