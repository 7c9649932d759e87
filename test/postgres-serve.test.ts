/**
 * `capstan serve` on PostgreSQL (CAPSTAN_DATABASE_URL), against a private server: a database it
 * cannot use stops the start with one line and exit code 2, never the URL's password nor a stack;
 * one that goes away while serving answers 503 and is used again when it returns, nothing
 * accepted lost.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import { LOCAL_MEDIA_ON_POSTGRES } from '../src/serve'
import { PgEngine, stmt } from '../src/db/engine'
import { Idempotency } from '../src/http/idempotency'
import { NumberLeases } from '../src/scheduler/leases'
import { migratePostgres } from '../src/db/postgres'
import type { Deps } from '../src/deps'
import { ClockCheck } from '../src/scheduler/clock-check'
import { activityMovesWithMessages } from './support/activity'
import { ADMIN_TOKEN, TestServer, freePort, hostEnv, newPhone } from './support/server'
import { TestS3 } from './support/s3'
import { TestClamd } from './support/clamd'
import * as files from './support/files'
import { inProcessOnPostgres } from './support/inproc'
import { HOLD_MS } from '../src/modules/media/holds'
import { certificates } from './support/tls'
import { holdRows } from './support/hold'
import { waitFor } from './support/wait'
import { DeafPooler } from './support/deaf-pooler'
import { PgProxy } from './support/pg-proxy'

setDefaultTimeout(120_000)

let dir: string
let pg: PrivatePostgres
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'capstan-pg-serve-'))
  pg = await PrivatePostgres.start(join(dir, 'pg'))
})
afterAll(async () => {
  await pg.stop()
  rmSync(dir, { recursive: true, force: true })
})

/** The same URL with another user, database or password. */
function urlWith(change: { user?: string; password?: string; database?: string }) {
  const u = new URL(pg.url)
  if (change.user) u.username = change.user
  if (change.password) u.password = change.password
  if (change.database) u.pathname = `/${change.database}`
  return u.toString()
}

/**
 * A Capstan serving a new, empty database `name` on the private server (its log quiet), `env`
 * besides, the database given `settings` first (ALTER DATABASE … SET, as a DBA would); the
 * database's URL.
 */
async function serveOn(name: string, env: Record<string, string> = {}, settings: Record<string, string> = {}) {
  const url = await pg.createDatabase(name)
  if (Object.keys(settings).length) {
    const admin = new Bun.SQL(pg.url, { max: 1 })
    for (const [setting, value] of Object.entries(settings)) await admin.unsafe(`ALTER DATABASE ${name} SET ${setting} = '${value}'`)
    await admin.close()
  }
  return { url, srv: await TestServer.start({ env: { CAPSTAN_DATABASE_URL: url, CAPSTAN_LOG_LEVEL: 'warn', ...env } }) }
}

/**
 * `serveOn`, with every instance given the same secret key (`env` besides); `another()` starts
 * one more instance on the database, as a second machine would.
 */
async function serveShared(name: string, env: Record<string, string> = {}, settings: Record<string, string> = {}) {
  const shared = { CAPSTAN_SECRET_KEY: `${name}-shared-test-secret-key-0123456789abcdef`, ...env }
  const { url, srv } = await serveOn(name, shared, settings)
  return { url, srv, another: () => TestServer.start({ env: { CAPSTAN_DATABASE_URL: url, CAPSTAN_LOG_LEVEL: 'warn', ...shared } }) }
}

/** Two instances on a new database (see serveShared) and a client of the database for `body`; all closed after it. */
async function twoShared(name: string, body: (t: { a: TestServer; b: TestServer; db: InstanceType<typeof Bun.SQL> }) => Promise<void>, { env = {}, settings = {} }: { env?: Record<string, string>; settings?: Record<string, string> } = {}) {
  const { url, srv: a, another } = await serveShared(name, env, settings)
  const b = await another()
  const db = new Bun.SQL(url, { max: 1 })
  try {
    await body({ a, b, db })
  } finally {
    await db.close()
    await b.close()
    await a.close()
  }
}

/** A `capstan serve` expected to stop at its start: its exit code, what it printed, and whether it made a SQLite file. */
const start = async (env: Record<string, string>) => {
  const data = join(dir, `start-${crypto.randomUUID()}`)
  const proc = Bun.spawn(['bun', 'src/main.ts', 'serve'], { env: { ...hostEnv(), CAPSTAN_DATA_DIR: data, CAPSTAN_PORT: '0', CAPSTAN_ADMIN_TOKEN: ADMIN_TOKEN, ...env }, stdout: 'pipe', stderr: 'pipe' })
  const code = await proc.exited
  return { code, err: (await new Response(proc.stderr).text()).trim(), out: await new Response(proc.stdout).text(), made: existsSync(join(data, 'capstan.db')) }
}

describe('a database capstan serve cannot use stops the start', () => {

  test.concurrent('a server nobody answers: one line naming where, exit 2, no password shown, no SQLite file made', async () => {
    const r = await start({ CAPSTAN_DATABASE_URL: 'postgres://capstan:s3cret-pass@127.0.0.1:9/capstan' })
    expect([r.code, r.err.split('\n').length, r.made]).toEqual([2, 1, false])
    expect(r.err).toStartWith('capstan: cannot reach the PostgreSQL server of CAPSTAN_DATABASE_URL (127.0.0.1:9/capstan): ')
    expect(r.err + r.out).not.toContain('s3cret-pass')
  })

  test.concurrent('a role the server does not know, a database that does not exist: one line each, exit 2', async () => {
    const role = await start({ CAPSTAN_DATABASE_URL: urlWith({ user: 'nobody', password: 'hunter2-pass' }) })
    expect(role.code).toBe(2)
    expect(role.err).toMatch(/^capstan: the database .+\/capstan refused the credentials in CAPSTAN_DATABASE_URL: role "nobody" does not exist$/)
    expect(role.err).not.toContain('hunter2-pass')
    const db = await start({ CAPSTAN_DATABASE_URL: urlWith({ database: 'elsewhere' }) })
    expect(db.code).toBe(2)
    expect(db.err).toMatch(/^capstan: the database .+\/elsewhere does not exist: database "elsewhere" does not exist \(create it, or correct CAPSTAN_DATABASE_URL\)$/)
  })

  test.concurrent("a second instance with a key of its own (no shared CAPSTAN_SECRET_KEY): one line, exit 2; given the first one's key, it starts", async () => {
    const { url, srv } = await serveOn('keys')
    try {
      const own = await start({ CAPSTAN_DATABASE_URL: url })
      expect([own.code, own.err]).toEqual([2, 'capstan: the secret key is not the one the secrets in this database were sealed with: give every instance the same CAPSTAN_SECRET_KEY (or CAPSTAN_SECRET_KEY_FILE), the one it was first started with — each data directory makes a key file of its own when neither is set'])
      const second = await TestServer.start({ env: { CAPSTAN_DATABASE_URL: url, CAPSTAN_SECRET_KEY_FILE: join(srv.dataDir, 'secret.key'), CAPSTAN_LOG_LEVEL: 'warn' } })
      await second.close()
    } finally {
      await srv.close()
    }
  })

  test.concurrent('reached through something that does not pass on notifications (a pooler in transaction mode): one line naming it, exit 2; the same database reached directly serves', async () => {
    const url = await pg.createDatabase('deaf')
    const pooler = new DeafPooler(join(dir, 'pg', '.s.PGSQL.5432'), join(dir, 'deaf'))
    try {
      const r = await start({ CAPSTAN_DATABASE_URL: pooler.via(url) })
      expect([r.code, r.made]).toEqual([2, false])
      expect(r.err).toMatch(/^capstan: the database .+\/deaf does not pass on what Capstan announces \(LISTEN\/NOTIFY\): a connection pooler in transaction or statement mode in front of it\? Capstan needs a direct connection or a pooler in session mode — without it a key revoked on one instance would still work on the others$/)
      expect(pooler.dropped).toBe(1)
    } finally {
      pooler.stop()
    }
    const srv = await TestServer.start({ env: { CAPSTAN_DATABASE_URL: url, CAPSTAN_LOG_LEVEL: 'warn' } })
    await srv.close()
  })

  test.concurrent('a database in another encoding than UTF8 (SQL_ASCII, LATIN1): one line saying how to make one, exit 2, nothing made in it', async () => {
    const admin = new Bun.SQL(pg.url, { max: 1 })
    try {
      for (const encoding of ['SQL_ASCII', 'LATIN1']) {
        const name = `enc_${encoding.toLowerCase()}`
        await admin.unsafe(`CREATE DATABASE ${name} ENCODING '${encoding}' TEMPLATE template0`)
        const r = await start({ CAPSTAN_DATABASE_URL: urlWith({ database: name }) })
        expect([r.code, r.made]).toEqual([2, false])
        expect(r.err).toMatch(new RegExp(`^capstan: the database .+/${name} is encoded ${encoding}, not UTF8: Capstan keeps text of every script and emoji — create it with CREATE DATABASE capstan ENCODING 'UTF8' TEMPLATE template0 \\(nothing was changed in this one\\)$`))
        const db = new Bun.SQL(urlWith({ database: name }), { max: 1 })
        const [t] = await db.unsafe("SELECT COUNT(*)::int AS n FROM information_schema.tables WHERE table_schema = 'public'")
        await db.close()
        expect(t.n).toBe(0)
      }
    } finally {
      await admin.close()
    }
  })

  test.concurrent('a database a newer Capstan migrated: one line, exit 2, nothing changed', async () => {
    const url = await pg.createDatabase('newer')
    const newer = new Bun.SQL(url, { max: 1 })
    await newer.unsafe('CREATE TABLE migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL, applied_at BIGINT NOT NULL)')
    await newer.unsafe("INSERT INTO migrations VALUES (9999, 'from_the_future', 0)")
    const r = await start({ CAPSTAN_DATABASE_URL: url })
    const tables = await newer.unsafe("SELECT COUNT(*)::int AS n FROM information_schema.tables WHERE table_schema = 'public'")
    await newer.close()
    expect(r.code).toBe(2)
    expect(r.err).toMatch(/^capstan: the database .+\/newer was migrated by a newer Capstan \(schema 9999; this binary knows up to \d+\): run that version or newer$/)
    expect(tables[0].n).toBe(1)
  })

  test.concurrent("a role that does not own the database (PostgreSQL 15+ lets only the owner create tables in it): one line saying how to make it the owner, exit 2", async () => {
    const url = await pg.createDatabase('not_owned')
    const db = new Bun.SQL(pg.url, { max: 1 })
    try {
      await db.unsafe('CREATE ROLE plain LOGIN')
    } finally {
      await db.close()
    }
    const r = await start({ CAPSTAN_DATABASE_URL: urlWith({ user: 'plain', database: 'not_owned' }) })
    expect(new URL(url).pathname).toBe('/not_owned')
    expect([r.code, r.err]).toEqual([2, `capstan: the role in CAPSTAN_DATABASE_URL may not create Capstan's tables in the database ${join(dir, 'pg')}/not_owned: permission denied for schema public (make the role the database's owner: ALTER DATABASE <name> OWNER TO <role>, or CREATE DATABASE capstan OWNER capstan)`])
  })

  test.concurrent('a database that takes no writes (a standby, or read-only by its settings): one line naming it, exit 2 — migrated before or not', async () => {
    const { url, srv } = await serveOn('standby')
    await srv.close()
    const fresh = await pg.createDatabase('standby_fresh')
    const db = new Bun.SQL(url, { max: 1 })
    try {
      for (const name of ['standby', 'standby_fresh']) await db.unsafe(`ALTER DATABASE ${name} SET default_transaction_read_only = on`)
    } finally {
      await db.close()
    }
    for (const [u, name] of [[url, 'standby'], [fresh, 'standby_fresh']] as const) {
      const r = await start({ CAPSTAN_DATABASE_URL: u })
      expect([r.code, r.err]).toEqual([2, `capstan: the database ${join(dir, 'pg')}/${name} takes no writes (a standby, or default_transaction_read_only is on): point CAPSTAN_DATABASE_URL at the primary`])
    }
  })

  test.concurrent('malformed settings: a URL that is not postgres://, one naming several hosts, a pool of no connections, or backups of the SQLite file beside a database URL', async () => {
    const bad = await start({ CAPSTAN_DATABASE_URL: 'mysql://root@localhost/capstan' })
    expect([bad.code, bad.err]).toEqual([2, 'capstan: CAPSTAN_DATABASE_URL must start with postgres:// (unset, Capstan uses its embedded SQLite file)'])
    for (const pool of ['0', '101', 'four', '-1'])
      expect([pool, (await start({ CAPSTAN_DATABASE_URL: pg.url, CAPSTAN_DATABASE_POOL: pool })).err]).toEqual([pool, 'capstan: CAPSTAN_DATABASE_POOL must be a whole number between 1 and 100'])
    // a password with a character the URL reads as its own (#: the rest is a fragment), never shown
    expect(await start({ CAPSTAN_DATABASE_URL: 'postgres://capstan:pa#ss-not-shown@db:5432/capstan' })).toMatchObject({ code: 2, err: 'capstan: CAPSTAN_DATABASE_URL must be a URL such as postgres://user:password@host:5432/capstan (a password holding : / ? # or % percent-encoded: # as %23)' })
    // libpq's list of hosts, with ports or without (the password never shown)
    for (const several of ['postgres://capstan:pw-not-shown@db1:5432,db2:5432/capstan?target_session_attrs=read-write', 'postgres://capstan:pw-not-shown@db1,db2/capstan'])
      expect(await start({ CAPSTAN_DATABASE_URL: several })).toMatchObject({ code: 2, err: "capstan: CAPSTAN_DATABASE_URL names several hosts: Capstan reaches PostgreSQL at one address — give it the primary's, kept by a virtual IP or Patroni's HAProxy through a failover" })
    const backups = await start({ CAPSTAN_DATABASE_URL: pg.url, CAPSTAN_BACKUP_DIR: join(dir, 'backups') })
    expect(backups.code).toBe(2)
    expect(backups.err).toStartWith('capstan: CAPSTAN_BACKUP_DIR backs up the embedded SQLite file; with CAPSTAN_DATABASE_URL back up PostgreSQL itself')
  })
})

describe('a role that signs in with a password (SCRAM-SHA-256, as managed services ask)', () => {
  test.concurrent('the right password, with characters a URL must percent-encode, serves; a wrong one stops the start with one line naming the credentials, exit 2, the password never shown', async () => {
    const port = await freePort()
    const server = await PrivatePostgres.start(join(dir, 'pg-scram'), { tcp: { port } })
    try {
      const password = 'p@ss:w/rd#1%x ?'
      const admin = new Bun.SQL(server.url, { max: 1 })
      await admin.unsafe(`CREATE ROLE app LOGIN PASSWORD '${password}'`)
      await admin.unsafe('CREATE DATABASE app_db OWNER app')
      // over TCP every sign-in now proves its password (the socket stays as it was, for this test)
      writeFileSync(join(server.dir, 'data', 'pg_hba.conf'), 'local all all trust\nhost all all 127.0.0.1/32 scram-sha-256\n')
      await admin`SELECT pg_reload_conf()`
      const [method] = await admin.unsafe("SELECT auth_method FROM pg_hba_file_rules WHERE type = 'host'")
      await admin.close()
      expect(method.auth_method).toBe('scram-sha-256')
      const url = (pw: string) => `postgres://app:${encodeURIComponent(pw)}@127.0.0.1:${port}/app_db`
      const wrong = await start({ CAPSTAN_DATABASE_URL: url('not-the-password') })
      expect([wrong.code, wrong.made]).toEqual([2, false])
      expect(wrong.err).toMatch(/^capstan: the database 127\.0\.0\.1:\d+\/app_db refused the credentials in CAPSTAN_DATABASE_URL: /)
      expect(wrong.err + wrong.out).not.toContain('not-the-password')
      const srv = await TestServer.start({ env: { CAPSTAN_DATABASE_URL: url(password), CAPSTAN_LOG_LEVEL: 'warn' } })
      try {
        const t = await srv.tenant()
        expect((await srv.api(t.key, 'GET', '/contacts')).status).toBe(200)
        expect(srv.output).not.toContain(encodeURIComponent(password))
      } finally {
        await srv.close()
      }
    } finally {
      await server.stop()
    }
  })
})

describe('PostgreSQL over TLS (as managed services ask)', () => {
  test.concurrent("verify-full with the server's CA in the URL (sslrootcert): every connection of the instance is encrypted; without that CA, with another certificate, with a file that is not there, or from a server without TLS: one line and exit 2", async () => {
    const certs = certificates(join(dir, 'tls'))
    const port = await freePort()
    const secure = await PrivatePostgres.start(join(dir, 'pg-tls'), { tcp: { port, tls: certs } })
    const role = new URL(secure.url).username
    const over = (query: string) => `postgres://${role}:pw-not-shown@localhost:${port}/capstan?${query}`
    let srv: TestServer | null = null
    const watch = new Bun.SQL(secure.url, { max: 1 })
    try {
      srv = await TestServer.start({ env: { CAPSTAN_DATABASE_URL: over(`sslmode=verify-full&sslrootcert=${encodeURIComponent(certs.ca)}`), CAPSTAN_LOG_LEVEL: 'warn' } })
      const t = await srv.tenant()
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone(), driver: 'sandbox' })).json.data
      expect((await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'Over TLS' } })).status).toBe(202)
      const [seen] = await watch.unsafe("SELECT count(*)::int AS n, count(*) FILTER (WHERE s.ssl)::int AS encrypted FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid) WHERE a.datname = 'capstan' AND a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()")
      // the pool and the connection that listens, at least
      expect(seen.n).toBeGreaterThanOrEqual(2)
      expect(seen.encrypted).toBe(seen.n)
    } finally {
      await srv?.close()
      await watch.close()
    }
    try {
      const unknownCa = await start({ CAPSTAN_DATABASE_URL: over('sslmode=verify-full') })
      expect([unknownCa.code, unknownCa.made]).toEqual([2, false])
      expect(unknownCa.err).toBe(`capstan: the PostgreSQL server of CAPSTAN_DATABASE_URL (localhost:${port}/capstan) has a certificate that could not be verified: unable to verify the first certificate (name the CA that signed it with sslrootcert=<file> in the URL, e.g. your provider's CA bundle)`)
      // a certificate that is not the CA's
      const notTheCa = await start({ CAPSTAN_DATABASE_URL: over(`sslmode=verify-full&sslrootcert=${encodeURIComponent(certs.cert)}`) })
      expect(notTheCa.err).toBe(unknownCa.err)
      const noFile = await start({ CAPSTAN_DATABASE_URL: over(`sslmode=verify-full&sslrootcert=${encodeURIComponent(join(dir, 'nowhere.crt'))}`) })
      expect([noFile.code, noFile.err]).toEqual([2, `capstan: the CA file named by sslrootcert in CAPSTAN_DATABASE_URL cannot be read (localhost:${port}/capstan)`])
      for (const r of [unknownCa, notTheCa, noFile]) expect(r.err + r.out).not.toContain('pw-not-shown')
    } finally {
      await secure.stop()
    }
    // the same server started without TLS: a URL that asks for it is refused
    const plain = await PrivatePostgres.start(join(dir, 'pg-tls'), { tcp: { port } })
    try {
      const noTls = await start({ CAPSTAN_DATABASE_URL: over('sslmode=require') })
      expect([noTls.code, noTls.err]).toEqual([2, `capstan: the PostgreSQL server of CAPSTAN_DATABASE_URL (localhost:${port}/capstan) does not offer TLS, which the URL's sslmode asks for`])
    } finally {
      await plain.stop()
    }
  })
})

describe('media on PostgreSQL', () => {
  test('kept in the data directory, the start says once that instances sharing the database need one bucket; with a bucket it says nothing', async () => {
    const { srv } = await serveOn('media_local')
    try {
      expect(srv.output.split(LOCAL_MEDIA_ON_POSTGRES).length - 1).toBe(1)
      expect(srv.output).toContain(`"media_dir":"${join(srv.dataDir, 'media')}"`)
    } finally {
      await srv.close()
    }
  })

  test("two instances, one bucket: a file one has written but not yet recorded outlives the other's retention (held in the database); a hold its instance never ended lapses after an hour, and the file goes", async () => {
    const s3 = await TestS3.start(['shared-media'])
    const clamd = await TestClamd.start()
    const url = await pg.createDatabase('media_holds')
    const opts = { clamd: `unix:${clamd.socket}`, env: s3.env('s3://shared-media/m') }
    const a = await inProcessOnPostgres(url, opts)
    const b = await inProcessOnPostgres(url, opts)
    const objects = () => s3.keys('shared-media', 'm/')
    const at = (t: number) => (a.clock.t = b.clock.t = t)
    try {
      const ws = await a.svc.workspaces.create({ name: 'Holds' })
      await a.svc.workspaces.patch(ws.id, { settings: { media: { retention_days: 1, max_bytes: 1 << 20 } } })
      const png = files.png()
      const first = await a.svc.media.upload(ws.id, new File([png], 'first.png'))
      at(first.expires_at + 1_000)
      // the same bytes again on the first instance, written to the bucket, their record not yet committed
      const again = await a.svc.media.prepare(ws.id, new File([png], 'again.png'))
      expect(again.blob).toBe(first.blob)
      // the other instance's retention: the expired record goes, the file it shares with the held one stays
      await b.svc.media.purgeExpired()
      expect(await b.svc.media.find(ws.id, first.id)).toBeNull()
      expect(await objects()).toEqual([`m/${first.blob}`])
      await a.engine.write((tx) => a.svc.media.insertIn(tx, again))
      await a.svc.media.settle(again, true)
      expect(Buffer.from(await b.svc.media.store.bytes(again.blob)).equals(Buffer.from(png))).toBe(true)
      // written, never recorded (its instance died): kept while held, removed once the hold lapsed
      const orphan = await a.svc.media.prepare(ws.id, new File([files.pdf()], 'orphan.pdf'))
      await b.svc.media.purgeExpired()
      expect((await objects()).sort()).toEqual([`m/${again.blob}`, `m/${orphan.blob}`].sort())
      at(b.clock.t + HOLD_MS + 1_000)
      await b.svc.media.purgeExpired()
      expect(await objects()).toEqual([`m/${again.blob}`])
      expect(await b.svc.media.find(ws.id, again.id)).not.toBeNull()
    } finally {
      await a.close()
      await b.close()
      await clamd.stop()
      await s3.stop()
    }
  })
})

describe("a workspace's media storage on two instances", () => {
  test('uploads at once on both, more than the limit has room for: exactly as many as fit are stored, the others get 422 media_quota_exceeded', async () => {
    const clamd = await TestClamd.start()
    const s3 = await TestS3.start(['quota-media'])
    const { url, srv: a, another } = await serveShared('quota_race', { CAPSTAN_CLAMD: `unix:${clamd.socket}`, ...s3.env('s3://quota-media/q') })
    const b = await another()
    try {
      const { ws, key } = await a.tenant()
      // room for two files of 400,000 bytes (1 MiB), not three
      expect((await a.admin('PATCH', `/workspaces/${ws.id}`, { settings: { media: { max_total_bytes: 1024 * 1024 } } })).status).toBe(200)
      await waitFor(async () => (await b.admin('GET', `/workspaces/${ws.id}`)).json.data.settings.media.max_total_bytes === 1024 * 1024)
      const upload = (srv: TestServer, i: number) => {
        const form = new FormData()
        form.append('file', new File([Buffer.concat([files.pdf(), Buffer.from(`% ${i} ${crypto.randomUUID()}\n`), Buffer.alloc(400_000 - files.pdf().length - 48, 32)])], `f${i}.pdf`, { type: 'application/pdf' }))
        return srv.api(key, 'POST', '/media', { multipart: form })
      }
      const answers = await Promise.all(Array.from({ length: 6 }, (_, i) => upload(i % 2 ? b : a, i)))
      expect(answers.filter((r) => r.status === 201).length).toBe(2)
      expect(answers.filter((r) => r.status !== 201).map((r) => [r.status, r.json.code])).toEqual(Array(4).fill([422, 'media_quota_exceeded']))
      const db = new Bun.SQL(url, { max: 1 })
      try {
        expect((await db`SELECT COUNT(*)::int AS n FROM media WHERE workspace_id = ${ws.id}`)[0].n).toBe(2)
      } finally {
        await db.close()
      }
    } finally {
      await b.close()
      await a.close()
      await s3.stop()
      await clamd.stop()
    }
  })
})

describe('backups on PostgreSQL', () => {
  test("GET /backups says the data is in PostgreSQL; POST /backups and `capstan backups list` say to use PostgreSQL's own tools", async () => {
    const { srv } = await serveOn('backups')
    try {
      const state = (await srv.admin('GET', '/backups')).json.data
      expect([state.database, state.directory, state.state, state.backups]).toEqual(['postgres', null, 'off', []])
      const now = await srv.admin('POST', '/backups')
      expect([now.status, now.json.code, now.json.message]).toEqual([422, 'backups_not_configured', 'This installation keeps its data in PostgreSQL: back it up with PostgreSQL’s own tools (pg_dump, continuous archiving); Capstan’s backups copy the embedded SQLite file.'])
      const cli = Bun.spawnSync(['bun', 'src/main.ts', 'backups', 'list'], { env: { ...hostEnv(), CAPSTAN_URL: srv.base, CAPSTAN_ADMIN_TOKEN: ADMIN_TOKEN } })
      expect([cli.exitCode, cli.stdout.toString().trim()]).toEqual([0, 'the data is in PostgreSQL: back it up with its own tools (pg_dump, continuous archiving); Capstan backs up only its embedded SQLite file'])
    } finally {
      await srv.close()
    }
  })
})

describe('changes announced while an instance was not listening', () => {
  test('its listening connection dropped: once back, it reads keys, workspaces and numbers again, so a change it never heard of applies', async () => {
    const { url, srv } = await serveOn('resync')
    const db = new Bun.SQL(url, { max: 1 })
    try {
      const t = await srv.tenant()
      expect((await srv.api(t.key, 'GET', '/workspace')).status).toBe(200)
      const paused = await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone(), driver: 'sandbox' })
      // changed in the database without a word to the instance (as if its announcement were missed)
      await db`UPDATE api_keys SET status = 'revoked', revoked_at = ${Date.now()} WHERE id = ${t.keyId}`
      await db`UPDATE connections SET name = 'Renamed elsewhere' WHERE id = ${paused.json.data.id}`
      // the instance still holds the key as it was
      expect((await srv.api(t.key, 'GET', '/workspace')).status).toBe(200)
      await db`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`
      await waitFor(async () => (await srv.api(t.key, 'GET', '/workspace')).status === 401, 10_000)
      expect(srv.output).toContain("the connection that hears other instances' changes was lost and is back")
      expect((await srv.admin('GET', `/connections/${paused.json.data.id}`)).json.data.name).toBe('Renamed elsewhere')
    } finally {
      await db.close()
      await srv.close()
    }
  })
})

describe('a rolling upgrade: a newer Capstan migrates the database while this one runs', () => {
  /** What a newer Capstan's start does to the database: one more migration, announced at its commit (or not heard). */
  const migrateAsNewer = async (db: InstanceType<typeof Bun.SQL>, announce: boolean) => {
    const [{ version }] = await db`SELECT MAX(version)::int AS version FROM migrations`
    await db.begin(async (tx) => {
      await tx`INSERT INTO migrations (version, name, applied_at) VALUES (${version + 1}, 'from_a_newer_capstan', ${Date.now()})`
      if (announce) await tx`SELECT pg_notify('capstan_changes', ${`schema:${version + 1}`})`
    })
    return version + 1
  }
  const line = /the database was migrated by a newer Capstan \(schema (\d+); this binary knows up to (\d+)\): stopping; run that version or newer here/

  test('announced: the older instance stops as on SIGTERM (what it accepted is kept), with exit code 2 and one line; a version it knows changes nothing', async () => {
    const { url, srv } = await serveOn('rolling', { CAPSTAN_LOG_LEVEL: 'info' })
    const db = new Bun.SQL(url, { max: 1 })
    try {
      const t = await srv.tenant()
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone(), driver: 'sandbox' })).json.data
      const ids: string[] = []
      for (let i = 0; i < 5; i++) ids.push((await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: `before the upgrade ${i}` } })).json.data.id)
      // its own version announced again (another instance of this version migrated): it serves on
      const [{ version }] = await db`SELECT MAX(version)::int AS version FROM migrations`
      await db`SELECT pg_notify('capstan_changes', ${`schema:${version}`})`
      await Bun.sleep(500)
      expect([srv.proc.exitCode, (await srv.api(t.key, 'GET', '/workspace')).status]).toEqual([null, 200])
      const newer = await migrateAsNewer(db, true)
      expect(await Promise.race([srv.proc.exited, Bun.sleep(15_000).then(() => 'still running')])).toBe(2)
      expect(srv.output).toMatch(line)
      expect(line.exec(srv.output)!.slice(1).map(Number)).toEqual([newer, version])
      // the graceful stop's way: its numbers handed over, the contacts' activity written
      expect(srv.output).toContain('"msg":"capstan stopping","signal":"newer schema"')
      expect(srv.output).toContain('"msg":"capstan stopped"')
      // nothing it accepted is lost: each message is in the database, sent or still queued for the instances left
      const kept = await db`SELECT status FROM messages WHERE id IN ${db(ids)}`
      expect(kept.map((r: any) => r.status).filter((s: string) => s === 'failed' || s === 'sending')).toEqual([])
      expect(kept).toHaveLength(5)
    } finally {
      await db.close()
      await srv.close()
    }
  })

  test('not heard (its listening connection was down): it finds the new version when it listens again, and stops the same way', async () => {
    const { url, srv } = await serveOn('rolling-unheard')
    const db = new Bun.SQL(url, { max: 1 })
    try {
      await migrateAsNewer(db, false)
      await Bun.sleep(300)
      expect(srv.proc.exitCode).toBeNull()
      await db`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`
      expect(await Promise.race([srv.proc.exited, Bun.sleep(15_000).then(() => 'still running')])).toBe(2)
      expect(srv.output).toMatch(line)
    } finally {
      await db.close()
      await srv.close()
    }
  })
})

describe("a number taken over keeps its caps", () => {
  test.concurrent("the new holder counts what the dead one released, though it had looked at the number before (the live view); that view, from an instance that does not release the number, reads the releases afresh", async () => {
    // a number of the first instance's (made before the second starts, so the first holds its lease)
    const { url, srv: a, another } = await serveShared('takeover-caps')
    const { ws, key } = await a.tenant()
    await a.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 2, max_gap_seconds: 2, hourly_cap: 3 } } })
    const conn = (await a.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone(), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
    const db = new Bun.SQL(url, { max: 1 })
    const holder = async () => (await db`SELECT owner FROM number_leases WHERE connection_id = ${conn.id}`)[0]?.owner as string | undefined
    const first = await waitFor(holder)
    const b = await another()
    try {
      const live = async (s: TestServer) => (await s.admin('GET', `/workspaces/${ws.id}/numbers/live`)).json.data[0]
      for (let i = 0; i < 5; i++) expect((await a.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: `capped ${i}` } })).status).toBe(202)
      // the second instance looks at the number (its next release) while the first releases one every 2 s
      const early = await live(b)
      expect([early.queue_depth > 0, early.sent_last_hour < 3, early.next_release_at !== null]).toEqual([true, true, true])
      const sent = async () => (await db`SELECT COUNT(*)::int AS n FROM messages WHERE connection_id = ${conn.id} AND status <> 'queued'`)[0].n as number
      await waitFor(async () => (await sent()) === 3)
      // the cap is reached: the next release is an hour after the first, on either instance
      for (const s of [a, b]) {
        const view = await live(s)
        expect([view.queue_depth, view.sent_last_hour]).toEqual([2, 3])
        expect(Date.parse(view.next_release_at)).toBeGreaterThan(Date.now() + 59 * 60_000)
      }
      await a.stop('SIGKILL')
      // its lease runs out at once (the clock moved on: the real 15 s is test/cluster.test.ts's)
      await db`UPDATE number_leases SET expires_at = 0 WHERE owner = ${first}`
      await waitFor(async () => (await holder()) !== first, 15_000)
      // the second instance now releases the number: still three in the hour (past its 2 s gap)
      await Bun.sleep(4_000)
      expect(await sent()).toBe(3)
      expect(await live(b)).toMatchObject({ queue_depth: 2, sent_last_hour: 3 })
    } finally {
      await db.close()
      await b.close()
      await a.close()
    }
  })
})

describe('a campaign scheduled on one instance and moved on another', () => {
  test.concurrent('it starts at its new time: the first instance, whose timer was set for the old one, starts nothing then', async () => {
    const { url, srv: a, another } = await serveShared('campaign-moved')
    const b = await another()
    try {
      const { ws, key } = await a.tenant()
      const conn = (await a.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone(), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
      const tpl = (await a.api(key, 'POST', '/templates', { json: { name: 'Promo', body: 'Hi {{name}}', category: 'marketing' } })).json.data
      await a.api(key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'Opted', consent_status: 'opted_in' } })
      const c = (await a.api(key, 'POST', '/campaigns', { json: { name: 'Moved', template_id: tpl.id, connection_id: conn.id } })).json.data
      const soon = new Date(Date.now() + 3_000).toISOString()
      expect((await a.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: { at: soon } })).json.data).toMatchObject({ status: 'scheduled', scheduled_at: soon })
      const later = new Date(Date.now() + 3_600_000).toISOString()
      expect((await b.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: { at: later } })).json.data).toMatchObject({ status: 'scheduled', scheduled_at: later })
      await Bun.sleep(5_000)
      for (const s of [a, b]) expect((await s.api(key, 'GET', `/campaigns/${c.id}`)).json.data).toMatchObject({ status: 'scheduled', scheduled_at: later })
      expect((await a.api(key, 'GET', '/messages')).json.data).toEqual([])
    } finally {
      await b.close()
      await a.close()
    }
  })
})

describe('an erasure outlives a database put back from before it', () => {
  test.concurrent("recorded in the media bucket: an instance whose data directory never saw the erasure does it again at its start, before it serves", async () => {
    const s3 = await TestS3.start(['erasures'])
    const env = { CAPSTAN_SECRET_KEY: 'erasure-test-secret-key-0123456789abcdef01234', ...s3.env('s3://erasures/shop') }
    const { url, srv: a } = await serveOn('erasure_put_back', env)
    const admin = new Bun.SQL(pg.url, { max: 1 })
    let b: TestServer | null = null
    try {
      const { ws, key } = await a.tenant()
      const phone = newPhone()
      const person = (await a.api(key, 'POST', '/contacts', { json: { phone, name: 'To Be Forgotten' } })).json.data
      const contacts = async (s: TestServer) => (await s.api(key, 'GET', '/contacts')).json.data.map((c: any) => c.id)
      expect(await contacts(a)).toEqual([person.id])
      // the database as a dump taken now would hold it (a copy, made while no instance is connected)
      await a.stop()
      await admin.unsafe('CREATE DATABASE erasure_before TEMPLATE erasure_put_back')
      await a.boot()
      expect((await a.admin('POST', `/workspaces/${ws.id}/contacts/erase`, { phone })).status).toBe(200)
      expect(await contacts(a)).toEqual([])
      expect(await s3.keys('erasures', 'shop/erasures/')).toEqual([expect.stringMatching(new RegExp(`^shop/erasures/${ws.id}_[0-9a-f]{64}_\\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z$`))])
      await a.close()
      // put back from before the erasure, and served by an instance with a new data directory
      await admin.unsafe('DROP DATABASE erasure_put_back')
      await admin.unsafe('ALTER DATABASE erasure_before RENAME TO erasure_put_back')
      b = await TestServer.start({ env: { CAPSTAN_DATABASE_URL: url, CAPSTAN_LOG_LEVEL: 'info', ...env } })
      expect(await contacts(b)).toEqual([])
      expect(b.output).toContain('"msg":"erasures done again after a restore","contacts":1')
      expect(b.output).not.toContain(LOCAL_MEDIA_ON_POSTGRES)
    } finally {
      await b?.close()
      await admin.close()
      await s3.stop()
    }
  })
})

describe('an Idempotency-Key held by a request under way on another instance', () => {
  test.concurrent('held by an instance that is alive: 409 on every instance; held by one not seen for 10 s (it died with the request), or seen never: taken over at once, sent once, replayed after', async () => {
    await twoShared('idem_holds', async ({ a, b, db }) => {
      const { ws, key, keyId } = await a.tenant()
      const conn = (await a.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone(), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
      const to = newPhone('+1689')
      const send = (on: TestServer, idem: string, body: string) => on.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: to, body }, headers: { 'idempotency-key': idem } })
      // a placeholder, as a request of instance `by` leaves it while it runs
      const held = async (idem: string, by: string) => {
        await db`INSERT INTO idempotency_keys (api_key_id, method, path, idem_key, fingerprint, status, body, created_at, claimed_by) VALUES (${keyId}, 'POST', '/api/v1/messages', ${idem}, 'a request under way', 0, '', ${Date.now()}, ${by})`
        return idem
      }
      const [alive] = await db`SELECT name FROM instances ORDER BY seen_at DESC LIMIT 1`
      await db`INSERT INTO instances (name, seen_at) VALUES ('stood-still', ${Date.now() - 11_000})`
      const live = await held('held-by-a-live-instance', alive.name)
      for (const on of [a, b]) {
        const r = await send(on, live, 'live hold')
        expect([r.status, r.json.code]).toEqual([409, 'idempotency_in_progress'])
      }
      for (const [idem, by] of [['held-by-one-not-seen', 'stood-still'], ['held-by-one-never-seen', crypto.randomUUID()]] as const) {
        await held(idem, by)
        const first = await send(b, idem, idem)
        expect(first.status).toBe(202)
        const again = await send(a, idem, idem)
        expect([again.status, again.headers.get('idempotency-replayed'), again.json.data.id]).toEqual([202, 'true', first.json.data.id])
        expect((await db`SELECT COUNT(*)::int AS n FROM messages WHERE body = ${idem}`)[0].n).toBe(1)
      }
      expect((await db`SELECT COUNT(*)::int AS n FROM messages WHERE body = 'live hold'`)[0].n).toBe(0)
    })
  })

  test.concurrent('a request whose instance stood still while another took its key over writes nothing: its send is undone and it answers 409; the key is the other request\'s', async () => {
    const url = await pg.createDatabase('idem_stood_still')
    const admin = new Bun.SQL(url, { max: 1 })
    await migratePostgres(admin)
    await admin.close()
    const engine = PgEngine.connect(url, 2)
    try {
      const clock = { now: () => Date.now() }
      const stood = new Idempotency({ engine, clock } as unknown as Deps, 'stood-still')
      const begun = await stood.begin('key-1', 'POST', '/api/v1/messages', 'order-1001-confirmed', { body: 'hi' })
      const ticket = begun && 'ticket' in begun ? begun.ticket : null
      expect(ticket).not.toBeNull()
      // meanwhile another instance found it not seen and took the key (its claim names itself)
      await engine.write((tx) => tx.run(stmt("UPDATE idempotency_keys SET claimed_by = 'took-over', created_at = ? WHERE idem_key = 'order-1001-confirmed'"), Date.now()))
      const written = engine.write(async (tx) => {
        await tx.run(stmt("INSERT INTO instances (name, seen_at) VALUES ('written-with-the-send', 0)"))
        await stood.recordIn(tx, ticket!, 202, '{"data":{}}')
      })
      await expect(written).rejects.toMatchObject({ status: 409, code: 'idempotency_in_progress' })
      expect(await engine.get(stmt("SELECT name FROM instances WHERE name = 'written-with-the-send'"))).toBeNull()
      // its end leaves the other request's hold alone
      await stood.end(ticket!)
      expect(await engine.get(stmt("SELECT status, claimed_by FROM idempotency_keys WHERE idem_key = 'order-1001-confirmed'"))).toEqual({ status: 0, claimed_by: 'took-over' })
      // (the hourly job clears the rows of instances not seen for an hour, and only those)
      await engine.write(async (tx) => {
        await tx.run(stmt("INSERT INTO instances (name, seen_at) VALUES ('gone', ?), ('seen', ?)"), Date.now() - 3_700_000, Date.now() - 3_500_000)
      })
      await new NumberLeases(engine).forgetGone()
      expect(await engine.all(stmt("SELECT name FROM instances WHERE name IN ('gone', 'seen')"))).toEqual([{ name: 'seen' }])
    } finally {
      await engine.close()
    }
  })
})

describe("a server that closes idle sessions (idle_session_timeout)", () => {
  test.concurrent("Capstan's sessions, named capstan and the instance, are exempt: the connection that listens stays, nothing is read again, and a change made by another instance still arrives", async () => {
    await twoShared(
      'idle_sessions',
      async ({ a, b, db }) => {
        const t = await a.tenant()
        expect((await b.api(t.key, 'GET', '/contacts')).status).toBe(200)
        // every session idles well past the server's limit
        await Bun.sleep(2_000)
        for (const on of [a, b]) expect(on.output).not.toContain('was lost and is back')
        const [named] = await db.unsafe("SELECT COUNT(*)::int AS n FROM pg_stat_activity WHERE datname = 'idle_sessions' AND application_name LIKE 'capstan %'")
        // each instance: its pool's connections in use so far and the one that listens
        expect(named.n).toBeGreaterThanOrEqual(4)
        // a key revoked on A stops working on B at once: B heard it
        expect((await a.admin('POST', `/keys/${t.keyId}/revoke`)).status).toBe(200)
        expect((await b.api(t.key, 'GET', '/contacts')).status).toBe(401)
      },
      { settings: { idle_session_timeout: '500ms' } },
    )
  })
})

describe('a database that goes away while serving', () => {
  test.concurrent("connections the server no longer knows, left open without a word (a failover behind the same address): what waits on them answers 503 within seconds, the instance says so, connects again and serves on; sends accepted before are sent, each once", async () => {
    const url = await pg.createDatabase('failover')
    const proxy = new PgProxy(join(pg.dir, '.s.PGSQL.5432'), join(dir, 'failover-proxy'), { state: () => null })
    const token = 'failover-metrics-token-0123456789abcdef'
    const srv = await TestServer.start({ env: { CAPSTAN_DATABASE_URL: proxy.via(url), CAPSTAN_LOG_LEVEL: 'warn', CAPSTAN_KEY_RATE_LIMIT: '100000', CAPSTAN_METRICS_TOKEN: token } })
    const reconnects = async () => Number(/^capstan_database_reconnects_total (\S+)$/m.exec(await (await fetch(`${srv.base}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text())![1])
    const db = new Bun.SQL(url, { max: 1 })
    try {
      const { ws, key } = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1686'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
      const send = (body: string) => fetch(`${srv.base}/api/v1/messages`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ connection_id: conn.id, recipient: newPhone('+1687'), body }) })
      const before: string[] = []
      for (let i = 0; i < 3; i++) before.push(((await (await send(`before ${i}`)).json()) as { data: { id: string } }).data.id)
      await waitFor(async () => (await db`SELECT COUNT(*)::int AS n FROM messages WHERE id IN ${db(before)} AND status = 'sent'`)[0].n === 3, 10_000)
      expect(await reconnects()).toBe(0)
      // every connection of the pool open (four reads and four writes at once): the send below
      // finds one of them, not a new one (which would reach the server)
      await Promise.all([...Array.from({ length: 4 }, () => srv.api(key, 'GET', '/contacts')), ...Array.from({ length: 4 }, () => srv.api(key, 'POST', '/contacts', { json: { phone: newPhone('+1688') } }))])
      proxy.silence()
      const started = Date.now()
      const during = await send('during the failover')
      expect([during.status, ((await during.json()) as { code: string }).code]).toEqual([503, 'database_unavailable'])
      expect(Date.now() - started).toBeLessThan(15_000)
      await waitFor(() => srv.output.includes("PostgreSQL answers, but not on this instance's connections"), 5_000)
      // serving again on new connections
      expect(await reconnects()).toBe(1)
      const after = await send('after the failover')
      expect(after.status).toBe(202)
      const afterId = ((await after.json()) as { data: { id: string } }).data.id
      await waitFor(async () => (await db`SELECT status FROM messages WHERE id = ${afterId}`)[0]?.status === 'sent', 15_000)
      const [refused] = await db`SELECT COUNT(*)::int AS n FROM messages WHERE body = 'during the failover'`
      expect(refused.n).toBe(0)
      const sends = (await db`SELECT message_id, COUNT(*)::int AS n FROM sandbox_sends WHERE message_id IN ${db([...before, afterId])} GROUP BY message_id ORDER BY message_id`) as { message_id: string; n: number }[]
      expect(sends).toEqual([...before, afterId].toSorted().map((message_id) => ({ message_id, n: 1 })))
      // (the database's URL is never in the log)
      expect(srv.output).not.toContain(url)
    } finally {
      await db.close()
      await srv.close()
      proxy.stop()
    }
  })

  test.concurrent("one that stops answering without closing anything (a hung server, a network dropping packets): readiness says so within seconds, requests answer 503 instead of waiting for minutes, what they asked is not stored; when it answers again the instance serves, and sends accepted before are settled: sent once, or failed as send_unconfirmed where the stillness cut off the COMMIT of the sandbox's record — never sent twice", async () => {
    const stilled = await PrivatePostgres.start(join(dir, 'pg-stilled'))
    const url = await stilled.createDatabase('stilled')
    const srv = await TestServer.start({ env: { CAPSTAN_DATABASE_URL: url, CAPSTAN_LOG_LEVEL: 'warn', CAPSTAN_KEY_RATE_LIMIT: '100000' } })
    const db = new Bun.SQL(url, { max: 1 })
    // the server and every process it started, stopped where they stand (SIGSTOP) and let go on
    const server = Number(Bun.spawnSync(['pgrep', '-o', '-f', '--', join(dir, 'pg-stilled', 'data')]).stdout.toString().trim())
    // (pid 0 would stop this whole process group)
    if (!(server > 1)) throw new Error('the private PostgreSQL server was not found')
    const processes = () => [server, ...Bun.spawnSync(['pgrep', '-P', String(server)]).stdout.toString().trim().split('\n').filter(Boolean).map(Number)]
    let stopped: number[] = []
    try {
      const { ws, key } = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1676'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
      const before: string[] = []
      for (let i = 0; i < 3; i++) before.push((await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1677'), body: `before ${i}` } })).json.data.id)
      stopped = processes()
      for (const pid of stopped) process.kill(pid, 'SIGSTOP')
      const started = Date.now()
      const timed = async (p: Promise<Response>) => {
        const r = await p
        return { status: r.status, code: ((await r.json()) as { code?: string; checks?: { database?: string } }), ms: Date.now() - started }
      }
      const [ready, read, send] = await Promise.all([
        timed(fetch(`${srv.base}/readyz`)),
        timed(fetch(`${srv.base}/api/v1/contacts`, { headers: { authorization: `Bearer ${key}` } })),
        timed(fetch(`${srv.base}/api/v1/messages`, { method: 'POST', headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: JSON.stringify({ connection_id: conn.id, recipient: newPhone('+1677'), body: 'during the stillness' }) })),
      ])
      expect(ready.status).toBe(503)
      expect(ready.ms).toBeLessThan(5_000)
      expect([read.status, read.code.code, send.status, send.code.code]).toEqual([503, 'database_unavailable', 503, 'database_unavailable'])
      // given up on once a fresh connection gets no answer either (STALL_MS, then PING_MS)
      expect(Math.max(read.ms, send.ms)).toBeLessThan(15_000)
      expect(srv.output).toContain('PostgreSQL does not answer (what waited 5 s was given up on, and a fresh connection got no answer in 5 s either): requests answer 503 until it does')
      for (const pid of stopped) process.kill(pid, 'SIGCONT')
      stopped = []
      await waitFor(async () => (await srv.api(key, 'GET', '/contacts')).status === 200, 10_000)
      // the send refused while it stood still was never committed: its transaction's connection was
      // closed before a COMMIT went
      const [during] = await db`SELECT COUNT(*)::int AS n FROM messages WHERE body = 'during the stillness'`
      expect(during.n).toBe(0)
      expect((await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1677'), body: 'after' } })).status).toBe(202)
      // each settles (a send whose tries met the stillness may wait out a retry's delay first):
      // sent, once — or, where the sandbox's record of it was in a COMMIT whose answer the
      // stillness cut off, failed as send_unconfirmed with no record (never handed over again:
      // a network that may have a message is not sent it twice; the record in such a COMMIT may
      // land late). Never left sending, never recorded twice.
      const settled = async () => (await db`SELECT id, status, error_code FROM messages WHERE id IN ${db(before)} ORDER BY id`) as { id: string; status: string; error_code: string | null }[]
      const rows = await waitFor(async () => {
        const r = await settled()
        return r.every((m) => m.status === 'sent' || m.status === 'failed') ? r : null
      }, 30_000).catch(async (e) => {
        // what to look at when they do not settle: the messages, the sandbox's record, the log
        const record = await db`SELECT message_id, external_id, at FROM sandbox_sends WHERE message_id IN ${db(before)}`
        console.error(`the messages: ${JSON.stringify(await settled())}\nthe sandbox's record: ${JSON.stringify(record)}\nthe instance's log:\n${srv.output}`)
        throw e
      })
      const sends = (await db`SELECT message_id, COUNT(*)::int AS n FROM sandbox_sends WHERE message_id IN ${db(before)} GROUP BY message_id ORDER BY message_id`) as { message_id: string; n: number }[]
      for (const m of rows) expect(m.status === 'sent' ? 'sent' : `${m.status}:${m.error_code}`).toBeOneOf(['sent', 'failed:send_unconfirmed'])
      expect(sends).toEqual(rows.filter((m) => m.status === 'sent').map((m) => ({ message_id: m.id, n: 1 })))
    } finally {
      for (const pid of stopped) process.kill(pid, 'SIGCONT')
      await db.close()
      await srv.close()
      await stilled.stop()
    }
  })
})

describe('sends taken by an instance that does not release their number', () => {
  test('its holder is told once per round trip, not once per send: forty sends at once make a few announcements, and every send (and one more after) is released', async () => {
    const { url, srv: a, another } = await serveShared('told-holder')
    const { ws, key } = await a.tenant()
    await a.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0, hourly_cap: 1000, daily_cap: 1000 } } })
    const conn = (await a.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone(), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
    const db = new Bun.SQL(url, { max: 2 })
    const holder = async () => (await db`SELECT owner FROM number_leases WHERE connection_id = ${conn.id}`)[0]?.owner as string | undefined
    await waitFor(holder)
    const told: string[] = []
    const listening = await db.listen('capstan_changes', (what: string) => {
      if (what === `queued:${conn.id}`) told.push(what)
    })
    const b = await another()
    try {
      const released = async () => (await db`SELECT COUNT(*)::int AS n FROM messages WHERE connection_id = ${conn.id} AND status = 'sent'`)[0].n as number
      const sends = await Promise.all(Array.from({ length: 40 }, (_, i) => b.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: `through b ${i}` } })))
      expect(sends.map((r) => r.status)).toEqual(Array(40).fill(202))
      await waitFor(async () => (await released()) === 40, 15_000)
      // one per send before (40); now the wakes while an announcement is on its way make one more after it
      expect(told.length).toBeGreaterThanOrEqual(1)
      expect(told.length).toBeLessThanOrEqual(12)
      // nothing left owed or stuck: a send made after the burst is released too
      expect((await b.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'after' } })).status).toBe(202)
      await waitFor(async () => (await released()) === 41, 15_000)
    } finally {
      await listening.unlisten()
      await db.close()
      await b.close()
      await a.close()
    }
  })
})

describe('sends at once on PostgreSQL', () => {
  test('twenty sends to one number that is not yet a contact, at once: every one is accepted, and the number becomes one contact', async () => {
    const { srv } = await serveOn('together')
    try {
      const { ws, key } = await srv.tenant()
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1666'), driver: 'sandbox' })).json.data
      const phone = newPhone('+1668')
      const sends = await Promise.all(Array.from({ length: 20 }, (_, i) => srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: phone, body: `together ${i}` } })))
      expect(sends.map((r) => r.status)).toEqual(Array(20).fill(202))
      const contacts = await srv.api(key, 'GET', `/contacts?phone=${encodeURIComponent(phone)}`)
      expect(contacts.json.meta.total).toBe(1)
      const contactId = contacts.json.data[0].id
      expect(new Set(sends.map((r) => r.json.data.contact_id))).toEqual(new Set([contactId]))
    } finally {
      await srv.close()
    }
  })
})

describe("a contact's last activity on PostgreSQL", () => {
  test('a send moves it: shown at once by the instance that took the send, written to the database within a moment (the list orders by it), and written by a graceful stop', async () => {
    const { url, srv } = await serveOn('activity')
    const db = new Bun.SQL(url, { max: 1 })
    try {
      await activityMovesWithMessages(srv, async (id) => Number((await db`SELECT last_activity_at FROM contacts WHERE id = ${id}`)[0].last_activity_at))
    } finally {
      await db.close()
      await srv.close()
    }
  })
})

describe('the connection pool', () => {
  test('an instance holds at most CAPSTAN_DATABASE_POOL connections (and one that listens), however many requests come at once; each is answered', async () => {
    const { srv } = await serveOn('pooled', { CAPSTAN_DATABASE_POOL: '2', CAPSTAN_KEY_RATE_LIMIT: '1000' })
    const watch = new Bun.SQL(pg.url, { max: 1 })
    try {
      const { ws, key } = await srv.tenant()
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1666'), driver: 'sandbox' })).json.data
      // the instance's own connections to its database, sampled while 60 sends and 20 reads are in flight
      const theirs = async () => Number((await watch`SELECT COUNT(*)::int AS n FROM pg_stat_activity WHERE datname = 'pooled' AND backend_type = 'client backend'`)[0].n)
      let most = 0
      let sampling = true
      const sampler = (async () => {
        while (sampling) {
          most = Math.max(most, await theirs())
          await Bun.sleep(2)
        }
      })()
      const answers = await Promise.all([
        ...Array.from({ length: 60 }, (_, i) => srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1670'), body: `pooled ${i}` } })),
        ...Array.from({ length: 20 }, () => srv.api(key, 'GET', '/messages?per_page=5')),
      ])
      sampling = false
      await sampler
      expect(answers.map((r) => r.status).sort()).toEqual([...Array(20).fill(200), ...Array(60).fill(202)])
      expect((await srv.api(key, 'GET', '/messages?per_page=1')).json.meta.total).toBe(60)
      // two in the pool and the one that listens for other instances' changes; it did use both
      expect(most).toBeGreaterThanOrEqual(2)
      expect(most).toBeLessThanOrEqual(3)
    } finally {
      await watch.close()
      await srv.close()
    }
  })
})

describe("a key's limit on PostgreSQL", () => {
  test('twelve sends at once with a limit of 5: five are queued and seven get 429 with nothing written; the 429 still comes before a bad body, an unknown contact or an Idempotency-Key', async () => {
    const { url, srv } = await serveOn('limited', { CAPSTAN_KEY_RATE_LIMIT: '5' })
    try {
      const { ws, key } = await srv.tenant()
      const reader = (await srv.key(ws.id)).key
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1666'), driver: 'sandbox' })).json.data
      const sends = await Promise.all(Array.from({ length: 12 }, () => srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1669'), body: 'limited' } })))
      expect(sends.filter((r) => r.status === 202).length).toBe(5)
      expect(sends.filter((r) => r.status === 429).every((r) => r.json.code === 'rate_limited')).toBe(true)
      expect(sends.filter((r) => r.status === 429).length).toBe(7)
      // each answer says what is left of the window: 4, 3, 2, 1, 0 for those queued, 0 for the others
      expect(sends.filter((r) => r.status === 202).map((r) => Number(r.headers.get('x-ratelimit-remaining'))).sort()).toEqual([0, 1, 2, 3, 4])
      expect(sends.filter((r) => r.status === 429).every((r) => r.headers.get('x-ratelimit-remaining') === '0' && r.headers.get('x-ratelimit-limit') === '5')).toBe(true)
      // over the limit, whatever else the request would have been answered
      const over = [
        await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, body: 'no recipient' } }),
        await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, contact_id: crypto.randomUUID(), body: 'nobody' } }),
        await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1669'), body: 'keyed' }, headers: { 'idempotency-key': 'over-the-limit' } }),
      ]
      expect(over.map((r) => [r.status, r.json.code])).toEqual(Array(3).fill([429, 'rate_limited']))
      // only the five queued were written: their messages and contacts, no idempotency record
      const log = await srv.api(reader, 'GET', '/messages?per_page=100')
      expect(log.json.meta.total).toBe(5)
      expect(new Set(log.json.data.map((m: { id: string }) => m.id))).toEqual(new Set(sends.filter((r) => r.status === 202).map((r) => r.json.data.id)))
      expect((await srv.api(reader, 'GET', '/contacts?per_page=100')).json.meta.total).toBe(5)
      const db = new Bun.SQL(url, { max: 1 })
      try {
        expect((await db`SELECT COUNT(*)::int AS n FROM idempotency_keys`)[0].n).toBe(0)
      } finally {
        await db.close()
      }
    } finally {
      await srv.close()
    }
  })
})

describe("a key's places ahead on PostgreSQL", () => {
  test('a key hit often takes places ahead of its window (fewer statements); each answer still says what is left, one less each time; a graceful stop gives back the places not used', async () => {
    const { url, srv } = await serveOn('ahead', { CAPSTAN_KEY_RATE_LIMIT: '6400' })
    const db = new Bun.SQL(url, { max: 1 })
    const counted = async () => Number((await db`SELECT n FROM rate_windows WHERE subject LIKE 'key:%'`)[0].n)
    try {
      const { key } = await srv.tenant()
      const left: number[] = []
      for (let i = 0; i < 12; i++) left.push(Number((await srv.api(key, 'GET', '/workspace')).headers.get('x-ratelimit-remaining')))
      expect(left).toEqual(Array.from({ length: 12 }, (_, i) => 6399 - i))
      // places ahead (1, 2, 4, 8: the next asked for when half are used): the window counts more than the 12 requests
      expect(await counted()).toBeGreaterThan(12)
      await srv.stop()
      expect(await counted()).toBe(12)
    } finally {
      await db.close()
      await srv.close()
    }
  })
})

describe('the monthly allowance on PostgreSQL', () => {
  test('sends at once on two instances, more than the allowance has room for: exactly that many are queued, the others get 422 allowance_exhausted with nothing written', async () => {
    await twoShared('allowance', async ({ a, b, db }) => {
      const { ws, key } = await a.tenant()
      await a.admin('PATCH', `/workspaces/${ws.id}`, { settings: { message_allowance: 10 } })
      const conn = (await a.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1666'), driver: 'sandbox' })).json.data
      for (let round = 0; round < 2; round++) {
        const sends = await Promise.all(Array.from({ length: 16 }, (_, i) => (i % 2 ? b : a).api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1669'), body: `round ${round}` } })))
        // ten of the first sixteen; none of the second
        expect(sends.filter((r) => r.status === 202).length).toBe(round === 0 ? 10 : 0)
        expect(sends.filter((r) => r.status !== 202).map((r) => [r.status, r.json.code])).toEqual(Array(round === 0 ? 6 : 16).fill([422, 'allowance_exhausted']))
      }
      const log = await a.api(key, 'GET', '/messages?per_page=100')
      expect(log.json.meta.total).toBe(10)
      expect((await db`SELECT SUM(messages)::int AS n FROM usage_monthly WHERE workspace_id = ${ws.id}`)[0].n).toBe(10)
    })
  })
})

describe("a contact's consent on PostgreSQL", () => {
  test('an update that read the contact before a STOP (or another update) committed never writes the old values back: the STOP holds, once in the ledger', async () => {
    const { url, srv } = await serveOn('consent_race')
    const db = new Bun.SQL(url, { max: 1 })
    try {
      const { ws, key } = await srv.tenant()
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1666'), driver: 'sandbox' })).json.data
      const phone = newPhone('+1667')
      expect((await srv.api(key, 'POST', '/contacts', { json: { phone, consent_status: 'opted_in' } })).status).toBe(201)
      // fault injection on the real database: the STOP's transaction, the contact's row changed and
      // locked, waits half a second before it commits; the update reads the contact meanwhile
      await holdRows(db, 'slow_stop', 'BEFORE INSERT ON consent_ledger', "NEW.status = 'opted_out'")
      const stop = srv.admin('POST', `/connections/${conn.id}/sandbox/inbound`, { from: phone, body: 'STOP' })
      await Bun.sleep(150)
      const renamed = await srv.api(key, 'POST', '/contacts', { json: { phone, name: 'Renamed' } })
      expect([(await stop).status, renamed.status]).toEqual([201, 200])
      const row = (await db`SELECT c.name, c.consent_status, (SELECT json_agg(l.status ORDER BY l.id) FROM consent_ledger l WHERE l.contact_id = c.id) AS ledger FROM contacts c WHERE c.workspace_id = ${ws.id} AND c.phone = ${phone}`)[0]
      expect([row.name, row.consent_status, row.ledger]).toEqual(['Renamed', 'opted_out', ['opted_in', 'opted_out']])
      expect(renamed.json.data).toMatchObject({ name: 'Renamed', consent_status: 'opted_out' })
      // two updates of different fields at once: the second, read before the first committed, keeps the first's name
      await holdRows(db, 'slow_rename', 'BEFORE UPDATE ON contacts', "NEW.name = 'Slow'")
      const slow = srv.api(key, 'POST', '/contacts', { json: { phone, name: 'Slow' } })
      await Bun.sleep(150)
      const tagged = await srv.api(key, 'POST', '/contacts', { json: { phone, metadata: { tier: 'gold' } } })
      expect([(await slow).status, tagged.status]).toEqual([200, 200])
      expect(tagged.json.data).toMatchObject({ name: 'Slow', consent_status: 'opted_out', metadata: { tier: 'gold' } })
    } finally {
      await db.close()
      await srv.close()
    }
  })
})

describe('an erasure and a release at once on PostgreSQL', () => {
  test('a message being claimed for sending while the erasure reads the contact: the erasure waits for the claim and answers 409 contact_busy, as on one machine; once sent, it erases', async () => {
    const { url, srv } = await serveOn('erase_race')
    const db = new Bun.SQL(url, { max: 1 })
    try {
      const { ws, key } = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1666'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
      const phone = newPhone('+1669')
      // fault injection on the real database: the release's claim holds the message's row half a second before it commits
      await holdRows(db, 'slow_claim', 'BEFORE UPDATE ON messages', "NEW.status = 'sending' AND OLD.status = 'queued'")
      const sent = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: phone, body: 'Your order shipped' } })
      expect(sent.status).toBe(202)
      await Bun.sleep(150)
      const busy = await srv.admin('POST', `/workspaces/${ws.id}/contacts/erase`, { phone })
      expect([busy.status, busy.json.code]).toEqual([409, 'contact_busy'])
      await waitFor(async () => (await srv.api(key, 'GET', `/messages/${sent.json.data.id}`)).json.data.status === 'sent')
      const erased = await srv.admin('POST', `/workspaces/${ws.id}/contacts/erase`, { phone })
      expect([erased.status, erased.json.data?.messages]).toEqual([200, 1])
    } finally {
      await db.close()
      await srv.close()
    }
  })
})

describe('a number removed on one instance while another takes a send for it', () => {
  test('the send, written after the removal failed the queue, fails too (connection_removed) once the other instance has heard, not a day later', async () => {
    await twoShared('removed_race', async ({ a, b, db }) => {
      const { ws, key } = await a.tenant()
      // long gaps: nothing is released while the test looks
      await a.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 600, max_gap_seconds: 600 } } })
      const conn = (await a.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1666'), driver: 'sandbox' })).json.data
      await waitFor(async () => (await b.admin('GET', `/connections/${conn.id}`)).status === 200)
      expect((await b.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1669'), body: 'first' } })).status).toBe(202)
      // fault injection on the real database: the send on the second instance is written half a second late
      await holdRows(db, 'slow_send', 'BEFORE INSERT ON messages', "NEW.body = 'late'")
      const late = b.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1669'), body: 'late' } })
      await Bun.sleep(150)
      expect((await a.admin('DELETE', `/connections/${conn.id}`)).status).toBe(204)
      const taken = await late
      expect(taken.status).toBe(202)
      const status = async () => (await db`SELECT status, error_code FROM messages WHERE id = ${taken.json.data.id}`)[0]
      expect(await waitFor(async () => ((await status()).status === 'failed' ? status() : null), 10_000)).toMatchObject({ status: 'failed', error_code: 'connection_removed' })
      expect((await db`SELECT COUNT(*)::int AS n FROM messages WHERE connection_id = ${conn.id} AND status = 'queued'`)[0].n).toBe(0)
    })
  })
})

describe("a workspace's settings on PostgreSQL", () => {
  test('two operators change different settings at once, on two instances: both changes hold (the later one, read before the first committed, is made again over it)', async () => {
    await twoShared('settings_race', async ({ a, b, db }) => {
      const ws = (await a.admin('POST', '/workspaces', { name: 'Shop' })).json.data
      // fault injection on the real database: the rename holds the workspace's row half a second before it commits
      await holdRows(db, 'slow_rename', 'BEFORE UPDATE ON workspaces', "NEW.name = 'Slow Shop'")
      const renamed = a.admin('PATCH', `/workspaces/${ws.id}`, { name: 'Slow Shop' })
      await Bun.sleep(150)
      const capped = await b.admin('PATCH', `/workspaces/${ws.id}`, { settings: { message_allowance: 500, sending_policy: { hourly_cap: 40 } } })
      expect([(await renamed).status, capped.status]).toEqual([200, 200])
      // on each instance (the other one hears the later change within a second)
      for (const srv of [a, b]) {
        const seen = async () => {
          const now = (await srv.admin('GET', `/workspaces/${ws.id}`)).json.data
          return [now.name, now.settings.message_allowance, now.settings.sending_policy.hourly_cap]
        }
        await waitFor(async () => Bun.deepEquals(await seen(), ['Slow Shop', 500, 40]), 1_000).catch(() => {})
        expect(await seen()).toEqual(['Slow Shop', 500, 40])
      }
    })
  })
})

describe("a number's changes on PostgreSQL", () => {
  test('a rename on one instance while another was taking the number offline: both hold (the rename, made from the number as it was, is made again over the change)', async () => {
    await twoShared('number_race', async ({ a, b, db }) => {
      const ws = (await a.admin('POST', '/workspaces', { name: 'Shop' })).json.data
      const conn = (await a.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1666'), driver: 'sandbox' })).json.data
      await waitFor(async () => (await b.admin('GET', `/connections/${conn.id}`)).status === 200)
      // fault injection on the real database: taking it offline holds the number's row half a second before it commits
      await holdRows(db, 'slow_offline', 'BEFORE UPDATE ON connections', "NEW.status = 'offline'")
      const offline = a.admin('PATCH', `/connections/${conn.id}`, { status: 'offline' })
      await Bun.sleep(150)
      const renamed = await b.admin('PATCH', `/connections/${conn.id}`, { name: 'Front desk' })
      expect([(await offline).status, renamed.status]).toEqual([200, 200])
      expect(renamed.json.data).toMatchObject({ name: 'Front desk', status: 'offline' })
      const row = (await db`SELECT name, status FROM connections WHERE id = ${conn.id}`)[0]
      expect([row.name, row.status]).toEqual(['Front desk', 'offline'])
    })
  })
})

describe("a campaign's state on PostgreSQL", () => {
  test('a pause that read the campaign running while a cancel was committing is refused (409), not applied over the cancel', async () => {
    const { url, srv } = await serveOn('campaign_race')
    const db = new Bun.SQL(url, { max: 1 })
    try {
      const { ws, key } = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 60, max_gap_seconds: 60 } } })
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1666'), driver: 'sandbox' })).json.data
      const tpl = (await srv.api(key, 'POST', '/templates', { json: { name: 'Promo', body: 'Hi {{name}}', category: 'marketing' } })).json.data
      for (let i = 0; i < 3; i++) await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone('+1668'), consent_status: 'opted_in' } })
      const c = (await srv.api(key, 'POST', '/campaigns', { json: { name: 'Spring', template_id: tpl.id, connection_id: conn.id } })).json.data
      expect((await srv.api(key, 'POST', `/campaigns/${c.id}/schedule`, { json: {} })).json.data.status).toBe('running')
      // fault injection on the real database: the cancel holds the campaign's row half a second before it commits
      await holdRows(db, 'slow_cancel', 'BEFORE UPDATE ON campaigns', "NEW.status = 'cancelled'")
      const cancel = srv.api(key, 'POST', `/campaigns/${c.id}/cancel`)
      await Bun.sleep(150)
      const pause = await srv.api(key, 'POST', `/campaigns/${c.id}/pause`)
      expect((await cancel).status).toBe(200)
      expect([pause.status, pause.json.code]).toEqual([409, 'invalid_campaign_state'])
      expect((await srv.api(key, 'GET', `/campaigns/${c.id}`)).json.data.status).toBe('cancelled')
    } finally {
      await db.close()
      await srv.close()
    }
  })
})

describe('webhook deliveries on PostgreSQL', () => {
  test('a due delivery another instance wrote and never claimed (it died first) goes out within seconds, with nothing here to wake the dispatcher', async () => {
    const { url, srv } = await serveOn('orphans')
    const got: { type: string; id: string }[] = []
    const receiver = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      async fetch(req) {
        const body = (await req.json()) as { type: string; data: { id: string } }
        got.push({ type: body.type, id: body.data.id })
        return new Response(null, { status: 204 })
      },
    })
    const db = new Bun.SQL(url, { max: 1 })
    try {
      const ws = await srv.workspace()
      const hook = await srv.admin('POST', `/workspaces/${ws.id}/webhooks`, { url: `http://127.0.0.1:${receiver.port}/hook`, events: ['message.sent'] })
      expect(hook.status).toBe(201)
      // let the dispatcher's passes after the endpoint's creation go by
      await Bun.sleep(300)
      const now = Date.now()
      const payload = JSON.stringify({ type: 'message.sent', timestamp: new Date(now).toISOString(), data: { id: 'left-by-another' } })
      await db`INSERT INTO webhook_deliveries (id, endpoint_id, workspace_id, type, payload, status, attempts, next_attempt_at, created_at, updated_at)
               VALUES (${`msg_${crypto.randomUUID().replaceAll('-', '')}`}, ${hook.json.data.id}, ${ws.id}, 'message.sent', ${payload}, 'pending', 0, ${now}, ${now}, ${now})`
      const by = Date.now() + 5000
      while (got.length === 0 && Date.now() < by) await Bun.sleep(50)
      expect(got).toEqual([{ type: 'message.sent', id: 'left-by-another' }])
    } finally {
      await db.close()
      await srv.close()
      void receiver.stop(true)
    }
  })
})

describe('the admin token on several instances', () => {
  test('an instance started with a new CAPSTAN_ADMIN_TOKEN replaces it on every instance within a moment: the old one stops working everywhere, the other instance says so, and a dashboard session is good on both', async () => {
    const { url, srv: a } = await serveShared('admin_token')
    const renewed = 'a-new-admin-token-after-a-leak-0123456789'
    const b = await TestServer.start({ env: { CAPSTAN_DATABASE_URL: url, CAPSTAN_LOG_LEVEL: 'warn', CAPSTAN_SECRET_KEY: 'admin_token-shared-test-secret-key-0123456789abcdef', CAPSTAN_ADMIN_TOKEN: renewed } })
    try {
      const status = (on: TestServer, token: string) => fetch(`${on.base}/admin/api/workspaces`, { headers: { authorization: `Bearer ${token}` } }).then((r) => r.status)
      // A, started with the old token, takes the new one as soon as it hears
      await waitFor(async () => (await status(a, renewed)) === 200, 5_000)
      expect([await status(a, ADMIN_TOKEN), await status(b, ADMIN_TOKEN), await status(b, renewed)]).toEqual([401, 401, 200])
      expect(a.output).toContain('another instance stored its CAPSTAN_ADMIN_TOKEN as the admin token: this instance now takes that token, not the one it was started with — give every instance the same CAPSTAN_ADMIN_TOKEN')
      // signed in on B, the dashboard's cookie is good on A (a load balancer may send it to either)
      const signedIn = await fetch(`${b.base}/admin/session`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-capstan-csrf': '1' }, body: JSON.stringify({ token: renewed }) })
      expect(signedIn.status).toBe(204)
      const cookie = signedIn.headers.get('set-cookie')!.split(';')[0]!
      for (const on of [a, b]) expect((await fetch(`${on.base}/admin/api/session`, { headers: { cookie } })).status).toBe(200)
    } finally {
      await b.close()
      await a.close()
    }
  })
})

describe('the limits of several instances', () => {
  test('an instance started with other limits than those running says so, and each running instance says so too; instances that agree say nothing; /metrics counts it', async () => {
    const token = 'settings-metrics-token-0123456789abcdef'
    const { url, srv: a, another } = await serveShared('settings_check', { CAPSTAN_METRICS_TOKEN: token })
    const b = await another()
    const c = await TestServer.start({ env: { CAPSTAN_DATABASE_URL: url, CAPSTAN_LOG_LEVEL: 'warn', CAPSTAN_SECRET_KEY: 'settings_check-shared-test-secret-key-0123456789abcdef', CAPSTAN_METRICS_TOKEN: token, CAPSTAN_KEY_RATE_LIMIT: '120', CAPSTAN_MAX_JSON_BYTES: '4096' } })
    try {
      const said = (on: TestServer) => on.output.split('\n').filter((l) => l.includes('has other limits'))
      const counted = async (on: TestServer) => Number(/^capstan_settings_differences_total (\S+)$/m.exec(await (await fetch(`${on.base}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text())![1])
      // C heard the two running instances' answers; each of them heard C's start
      await waitFor(() => said(c).length === 2 && said(a).length === 1 && said(b).length === 1, 10_000)
      const theirs = 'has other limits: CAPSTAN_KEY_RATE_LIMIT is 60 there and 120 here; CAPSTAN_MAX_JSON_BYTES is 1048576 there and 4096 here. Instances sharing a database need the same limits'
      const its = 'has other limits: CAPSTAN_KEY_RATE_LIMIT is 120 there and 60 here; CAPSTAN_MAX_JSON_BYTES is 4096 there and 1048576 here. Instances sharing a database need the same limits'
      for (const line of said(c)) expect(line).toContain(theirs)
      for (const on of [a, b]) expect(said(on)[0]).toContain(its)
      expect([await counted(a), await counted(b), await counted(c)]).toEqual([1, 1, 2])
      // A and B agree: B's start raised nothing on either (only C's did, once each)
      await Bun.sleep(300)
      expect([said(a).length, said(b).length, said(c).length]).toEqual([1, 1, 2])
    } finally {
      await c.close()
      await b.close()
      await a.close()
    }
  })
})

describe("this machine's clock against the database server's", () => {
  test('more than 2 s apart, ahead or behind, the instance says so in its log; in step it says nothing; the offset is on /metrics from the start', async () => {
    const url = await pg.createDatabase('clocks')
    const engine = PgEngine.connect(url, 2)
    try {
      const warned: string[] = []
      const log = { warn: (msg: string, fields?: Record<string, unknown>) => void warned.push(`${msg} ${JSON.stringify(fields)}`) }
      const inStep = new ClockCheck(engine, log)
      await inStep.run()
      expect(Math.abs(inStep.offsetMs!)).toBeLessThan(1000)
      const ahead = new ClockCheck(engine, log, () => Date.now() + 30_000)
      await ahead.run()
      expect(Math.round(ahead.offsetMs! / 1000)).toBe(30)
      await new ClockCheck(engine, log, () => Date.now() - 5_000).run()
      expect(warned).toEqual([
        expect.stringMatching(/^this machine's clock is 30\.\d s ahead of the database server's: instances sharing a database need their clocks in step \(run NTP\) — .* \{"offset_seconds":30(\.\d)?\}$/),
        expect.stringMatching(/^this machine's clock is [45]\.\d s behind the database server's: .* \{"offset_seconds":-[45](\.\d)?\}$/),
      ])
    } finally {
      await engine.close()
    }
    const token = 'clock-metrics-token-0123456789abcdef'
    const { srv } = await serveOn('clocks_served', { CAPSTAN_METRICS_TOKEN: token })
    try {
      const text = await (await fetch(`${srv.base}/metrics`, { headers: { authorization: `Bearer ${token}` } })).text()
      const offset = /^capstan_clock_offset_seconds (\S+)$/m.exec(text)
      expect(offset).not.toBeNull()
      expect(Math.abs(Number(offset![1]))).toBeLessThan(1)
      expect(srv.output).not.toContain('clock is')
    } finally {
      await srv.close()
    }
  })
})

describe('a database with short statement and lock timeouts (statement_timeout, lock_timeout)', () => {
  test("Capstan's sessions wait as long as their work takes, whatever the server, role or database says: the instance migrates and starts, sends go out, and a change waiting for a row another session holds is made once it is let go", async () => {
    const { url, srv } = await serveOn('timeouts', { CAPSTAN_KEY_RATE_LIMIT: '100000' }, { statement_timeout: '1ms', lock_timeout: '1ms' })
    // (this test's own session waits as long as it likes)
    const db = new Bun.SQL(url, { max: 1, connection: { statement_timeout: 0, lock_timeout: 0 } })
    try {
      const { ws, key } = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1696'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
      const ids: string[] = []
      for (let i = 0; i < 5; i++) {
        const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1697'), body: `timeouts ${i}` } })
        expect(r.status).toBe(202)
        ids.push(r.json.data.id)
      }
      await waitFor(async () => (await db`SELECT COUNT(*)::int AS n FROM messages WHERE id IN ${db(ids)} AND status = 'sent'`)[0].n === 5, 15_000)
      // the workspace's row held by another session for a moment: the rename waits for it
      let renamed: Promise<{ status: number }> | null = null
      await db.begin(async (tx) => {
        await tx`SELECT id FROM workspaces WHERE id = ${ws.id} FOR UPDATE`
        renamed = srv.admin('PATCH', `/workspaces/${ws.id}`, { name: 'Renamed while held' })
        await Bun.sleep(300)
      })
      expect((await renamed!).status).toBe(200)
      expect((await db`SELECT name FROM workspaces WHERE id = ${ws.id}`)[0].name).toBe('Renamed while held')
    } finally {
      await db.close()
      await srv.close()
    }
  })
})

describe('a database whose transactions default to serializable (default_transaction_isolation)', () => {
  test("Capstan's sessions run read committed, as its writes are made for: sends at once on two instances to the same contacts are each taken, none refused", async () => {
    await twoShared(
      'serializable',
      async ({ a, b, db }) => {
        const t = await a.tenant()
        const conn = (await a.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone(), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
        const recipients = Array.from({ length: 8 }, () => newPhone())
        const statuses = await Promise.all(
          Array.from({ length: 300 }, (_, i) => (i % 2 ? a : b).api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: recipients[i % 8], body: `at once ${i}` } }).then((r) => r.status)),
        )
        expect(statuses.filter((s) => s !== 202)).toEqual([])
        const [n] = await db`SELECT COUNT(*)::int AS n FROM messages WHERE connection_id = ${conn.id}`
        expect(n.n).toBe(300)
      },
      { env: { CAPSTAN_KEY_RATE_LIMIT: '100000' }, settings: { default_transaction_isolation: 'serializable' } },
    )
  })
})

describe('a database that goes away while serving', () => {
  test('requests answer 503 database_unavailable while it is away; when it is back the instance serves again, and sends released before it went are sent, each once', async () => {
    // (the polls below may pass the default 60 requests a minute on a slow machine)
    const { url, srv } = await serveOn('away', { CAPSTAN_KEY_RATE_LIMIT: '100000' })
    try {
      const { ws, key } = await srv.tenant()
      await srv.admin('PATCH', `/workspaces/${ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
      // a network that takes two seconds to take each send: they reach it (the sandbox writes its
      // record of sends in the database) while the database is away
      const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone('+1666'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [], accept_after_ms: 2000 } })).json.data
      const waiting: string[] = []
      const queuedAt = Date.now()
      for (let i = 0; i < 3; i++) {
        const r = await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1667'), body: `waiting ${i}` } })
        expect(r.status).toBe(202)
        waiting.push(r.json.data.id as string)
      }
      // every connection of the pool open (four reads and four writes at once)
      await Promise.all([...Array.from({ length: 4 }, () => srv.api(key, 'GET', '/contacts')), ...Array.from({ length: 4 }, () => srv.api(key, 'POST', '/contacts', { json: { phone: newPhone('+1668') } }))])
      await pg.stop()
      // (raw requests: the answers of an outage are not the document's)
      const raw = (method: string, path: string, json?: unknown) =>
        fetch(`${srv.base}/api/v1${path}`, { method, headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' }, body: json === undefined ? undefined : JSON.stringify(json) }).then(async (r) => ({ status: r.status, json: (await r.json()) as { code?: string } }))
      const away = await raw('GET', '/contacts')
      expect([away.status, away.json.code]).toEqual([503, 'database_unavailable'])
      const refused = await raw('POST', '/messages', { connection_id: conn.id, recipient: newPhone('+1667'), body: 'while away' })
      expect([refused.status, refused.json.code]).toEqual([503, 'database_unavailable'])
      // away long enough that the sends' first try (after 2 s) and their first retry (1 s later)
      // both find it gone
      await Bun.sleep(Math.max(0, queuedAt + 4500 - Date.now()))
      pg = await PrivatePostgres.start(join(dir, 'pg'))
      // once it is back, the first requests are served at once — reads and writes — though every
      // connection the pool had open went down with it
      const firsts = await Promise.all([...Array.from({ length: 4 }, () => raw('GET', '/contacts')), ...Array.from({ length: 4 }, () => raw('POST', '/contacts', { phone: newPhone('+1668') }))])
      expect(firsts.map((r) => r.status)).toEqual([200, 200, 200, 200, 201, 201, 201, 201])
      // and every send accepted before is recorded as sent
      for (const id of waiting) {
        let status = ''
        for (let i = 0; i < 100 && status !== 'sent'; i++) {
          status = (await srv.api(key, 'GET', `/messages/${id}`)).json.data.status
          if (status !== 'sent') await Bun.sleep(200)
        }
        expect(status).toBe('sent')
      }
      // each went to the network once: their first tries found the database away and were not sent
      const db = new Bun.SQL(url, { max: 1 })
      try {
        const records = (await db`SELECT message_id, COUNT(*)::int AS n FROM sandbox_sends WHERE message_id IN ${db(waiting)} GROUP BY message_id ORDER BY message_id`) as { message_id: string; n: number }[]
        expect(records).toEqual(waiting.toSorted().map((message_id) => ({ message_id, n: 1 })))
      } finally {
        await db.close()
      }
      expect((await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone('+1667'), body: 'after' } })).status).toBe(202)
    } finally {
      await srv.close()
    }
  })
})
