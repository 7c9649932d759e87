/**
 * `capstan serve`: the HTTP API, admin API, docs and scheduler in this process. Loaded by main.ts
 * only for this command, so the admin subcommands and `version` start without the server's code.
 */
import { AdminToken, resolveAdminToken } from './admin-token'
import { systemClock } from './clock'
import { startCheckpointer } from './db/checkpoint'
import { PgEngine, SqliteEngine } from './db/engine'
import { PG_LATEST } from './db/postgres'
import { Writer } from './db/writer'
import { Logger } from './http/log'
import { sha256 } from './modules/keys/service'
import { S3MediaStore } from './modules/media/store'
import { buildApp } from './server'
import { startJobs, warnIfDiskLow } from './scheduler/jobs'
import { buildServices, settleServices, startServices, stopServices } from './services'
import { configOrExit, databaseOrExit, databaseWhere, fail, lockOrExit, postgresOrExit, reasonOf, secretBoxOrExit, secretKeyMatchesOrExit } from './startup'
import { VERSION } from './version'

/** Said at a start on PostgreSQL with media in the data directory. */
export const LOCAL_MEDIA_ON_POSTGRES = 'media is kept in this data directory (CAPSTAN_MEDIA_STORE is not set): right for one instance, but instances sharing this database must share one bucket, or a file one of them took is missing on the others'

/** Why Bun.serve could not listen, for the one line the start stops with. */
function listenFailure(e: unknown): string {
  switch ((e as { code?: string })?.code) {
    case 'EADDRINUSE':
      return 'the address is in use (is another Capstan running?)'
    case 'EACCES':
      return 'permission denied (ports below 1024 need root or CAP_NET_BIND_SERVICE)'
    case 'EADDRNOTAVAIL':
      return 'no network interface of this machine has that address (check CAPSTAN_HOST)'
    default:
      return `${reasonOf(e)} (check CAPSTAN_HOST and CAPSTAN_PORT)`
  }
}

/** The embedded engine: the data directory's SQLite file (opened and migrated, or one line and exit 2) through the group commit. */
function sqliteEngine(path: string) {
  const { db, applied, fullDisk } = databaseOrExit(path)
  return { db, engine: new SqliteEngine(db, new Writer(db)), applied, fullDisk }
}

export async function serve() {
  // Everything that can stop the start is checked before anything is written or shown: the
  // settings, the port, the data directory's lock and the secret key. A start that then fails must
  // not leave a new database behind, nor print a one-time admin token nobody can use.
  const config = configOrExit()
  // A second Capstan on the same port stops here with one line, before it touches a database
  // another one may be serving.
  if (config.port !== 0) {
    try {
      void Bun.serve({ hostname: config.host, port: config.port, reusePort: false, fetch: () => new Response(null) }).stop(true)
    } catch (e) {
      fail(`cannot listen on ${config.host}:${config.port}: ${listenFailure(e)}`)
    }
  }
  // media in a bucket: it must be there and take the credentials, before anything is written
  if (config.mediaStore.kind === 's3') {
    const why = await new S3MediaStore(config.mediaStore).check()
    if (why) fail(`CAPSTAN_MEDIA_STORE: ${why}`)
  }
  const lock = lockOrExit(config.dataDir)
  const box = secretBoxOrExit(config)
  const log = new Logger(config.logLevel)
  // the database: PostgreSQL when CAPSTAN_DATABASE_URL names one, else the SQLite file in the data directory
  const { db, engine, applied, fullDisk } = config.databaseUrl ? { db: null, ...(await postgresOrExit(config.databaseUrl, config.databasePool)), fullDisk: false } : sqliteEngine(config.dbPath)
  if (fullDisk) log.error('the disk of the data directory is full: the database is opened for this process alone (no checkpointer thread, no backups) until Capstan is restarted with room on the disk', { data_dir: config.dataDir })
  await secretKeyMatchesOrExit(engine, box)
  const admin = await resolveAdminToken(engine, config.adminToken)
  if (admin.generated) {
    // set apart from the log lines, so that it is found in `docker logs` or a terminal's scrollback
    const rule = '='.repeat(78)
    process.stdout.write(`${rule}\nCapstan admin token (shown once; only its hash is stored): ${admin.generated}\nKeep it: it signs in to /admin and authorizes the admin API and CLI (CAPSTAN_ADMIN_TOKEN).\n${rule}\n`)
  }
  if (admin.unsaved) log.warn('CAPSTAN_ADMIN_TOKEN is used but could not be stored as the admin token (is the disk full?): the previous one would be valid again if the variable were removed')
  // A background task that fails unexpectedly (a write on a full disk from a timer, say) is
  // logged; it must not take the server down, and with it every send in a network's hands
  const unexpected = (e: unknown) => log.error('background task failed', { error: String((e as Error)?.stack ?? e) })
  process.on('uncaughtException', unexpected)
  process.on('unhandledRejection', unexpected)
  const checkpointer = db && config.walCheckpointer && !fullDisk ? startCheckpointer(config.dbPath, log) : null
  if (engine instanceof PgEngine)
    engine.onHung = (hung) =>
      hung
        ? log.error('PostgreSQL does not answer (what waited 5 s was given up on, and a fresh connection got no answer in 5 s either): requests answer 503 until it does', { database: databaseWhere(config.databaseUrl!) })
        : log.info('PostgreSQL answers again')
  if (engine instanceof PgEngine)
    engine.onReconnect = () =>
      log.warn("PostgreSQL answers, but not on this instance's connections (what waited on them was given up on: a failover behind the same address, or a server gone without closing them): connecting again", { database: databaseWhere(config.databaseUrl!) })
  const deps = { config, engine, clock: systemClock }
  const svc = buildServices(deps, log, box)
  // (before the start listens for what other instances announce: a new admin token is one)
  svc.adminToken = new AdminToken(admin.hash, engine, config.adminToken === null ? null : sha256(config.adminToken), log)
  try {
    await startServices(svc)
  } catch (e) {
    // (the handlers above would log it as a background task and leave a process that never listens)
    log.error('the start failed', { error: String((e as Error)?.stack ?? e) })
    log.flush()
    fail(`the start failed: ${reasonOf(e)}`)
  }
  const jobs = startJobs(svc)
  // this machine's clock against the database's, before the first request (its offset is on
  // /metrics from then on); a check that cannot be made now is made by the job in ten minutes
  await svc.clockCheck.run().catch(() => {})
  // this instance's limits to the others already running, which answer with theirs
  await svc.settingsCheck.announce().catch((e) => log.warn('could not tell the other instances this one\'s limits', { error: String((e as Error)?.message ?? e).slice(0, 200) }))
  // the bucket, where media is kept in one (a local folder is the data directory's disk, reported as such)
  const store = svc.media.store
  const closers: (() => Promise<void>)[] = []
  const app = buildApp({ svc, adminToken: svc.adminToken, closers, probes: { scanner: () => svc.media.scannerReachable(), ...(store.reachable ? { media: () => store.reachable!() } : {}) } })
  app.listen({ hostname: config.host, port: config.port })
  log.info('capstan started', { version: VERSION, host: config.host, port: app.server?.port, data_dir: config.dataDir, database: config.databaseUrl ? `postgres ${databaseWhere(config.databaseUrl)}` : 'sqlite', migrations_applied: applied })
  warnIfDiskLow(svc)
  // instances sharing a database see one another's messages, but files only in one bucket
  if (config.databaseUrl && config.mediaStore.kind !== 's3') log.warn(LOCAL_MEDIA_ON_POSTGRES, { media_dir: config.mediaDir })
  log.flush()

  let stopping = false
  /**
   * Graceful stop: release nothing more (the queue stays intact in the database), answer the
   * requests already received, let sends already handed to a network (up to 10 s) and webhook
   * deliveries already sent (up to 3 s) record their outcome — whatever is left is settled by crash
   * recovery, or delivered again, at the next start — then close.
   */
  const stop = async (signal: string, code = 0) => {
    if (stopping) return
    stopping = true
    log.info('capstan stopping', { signal })
    for (const j of jobs) j.stop()
    stopServices(svc)
    await app.stop()
    // (bounded: a database that does not answer does not hold the stop up)
    await Promise.race([Promise.all(closers.map((close) => close().catch((e) => log.warn('a step of the stop failed', { error: String(e) })))), Bun.sleep(2000)])
    const left = await settleServices(svc)
    // a tick's claims whose COMMIT's answer was lost, not settled yet: handed back, not left to fail
    await svc.pacer.handBackInDoubt().then(
      (n) => n > 0 && log.warn('claims whose write\'s answer was lost were handed back; they go on at the next start', { messages: n }),
      (e) => log.warn('could not hand back the claims whose write\'s answer was lost; the next start fails them as interrupted', { error: String((e as Error)?.message ?? e).slice(0, 200) }),
    )
    // the numbers this instance released go to the others at once (not after their lease runs out)
    await svc.pacer.leases.releaseAll().catch((e) => log.warn('could not hand the number leases over; they pass to another instance within 15 s', { error: String((e as Error)?.message ?? e).slice(0, 200) }))
    try {
      await svc.keys.flushUse()
    } catch (e) {
      log.warn('could not record when the API keys were last used', { error: String((e as Error)?.message ?? e).slice(0, 200) })
    }
    try {
      await svc.contacts.flushActivity()
    } catch (e) {
      log.warn("could not record the contacts' last activity of the last moment", { error: String((e as Error)?.message ?? e).slice(0, 200) })
    }
    if (left.sends > 0) log.warn('stopping with sends in flight; the next start settles them', { in_flight: left.sends })
    if (left.deliveries > 0) log.warn('stopping with webhook deliveries in flight; the next start retries them', { in_flight: left.deliveries })
    await checkpointer?.stop()
    log.info('capstan stopped', { signal })
    log.flush()
    await engine.close()
    db?.close()
    lock.release()
    process.exit(code)
  }
  process.on('SIGTERM', () => void stop('SIGTERM'))
  process.on('SIGINT', () => void stop('SIGINT'))
  // A newer Capstan migrated the database while this one runs (a rolling upgrade): this binary may
  // not read or write the new schema right, and would not start on it, so it stops as on SIGTERM —
  // its queue stays in the database for the others — with exit code 2, as a refused start
  if (config.databaseUrl) {
    svc.schema.onNewer((version) => {
      if (version <= PG_LATEST) return
      log.error(`the database was migrated by a newer Capstan (schema ${version}; this binary knows up to ${PG_LATEST}): stopping; run that version or newer here`)
      void stop('newer schema', 2)
    })
  }
}
