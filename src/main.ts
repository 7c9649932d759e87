#!/usr/bin/env bun
/**
 * The `capstan` command: serve, migrate, version, and the admin subcommands (src/cli.ts).
 *
 * A compiled binary reads a `.env` file beside itself (it never overrides variables already set
 * in the environment); Bun's own compile-time autoload of .env and bunfig.toml is switched off at
 * build time so a stray file in the working directory cannot change the appliance.
 */
import type { Database } from 'bun:sqlite'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { resolveAdminToken } from './admin-token'
import { backup, restore } from './backup'
import { systemClock } from './clock'
import { CLI_HELP, localBase, runAdminCommand } from './cli'
import { ConfigError, loadConfig } from './config'
import { emptyWal, migrate, openDatabase } from './db/open'
import { DataDirLocked, lockDataDir } from './db/lock'
import { Writer } from './db/writer'
import { Logger } from './http/log'
import { buildApp } from './server'
import { startJobs, warnIfDiskLow } from './scheduler/jobs'
import { SecretBox } from './secrets'
import { buildServices, settleServices, startServices, stopServices } from './services'
import { VERSION } from './version'

const HELP = `capstan ${VERSION} — self-hosted messaging API appliance

usage:
  capstan serve        run the HTTP API, admin API, docs and scheduler
  capstan migrate      apply database migrations and exit
  capstan backup DIR   consistent copy of the database, media, key file (while the server runs)
  capstan restore DIR  put a backup into CAPSTAN_DATA_DIR (server stopped; --force to overwrite)
  capstan vacuum       rewrite the database without its free space (server stopped)
  capstan version      print the version
  capstan healthcheck  exit 0 when the local server answers GET /healthz

${CLI_HELP}

Configuration comes from CAPSTAN_* environment variables (see README).`

/**
 * Parse a .env file the way dotenv files are written: `KEY=VALUE` lines, optional `export `,
 * `#` comment lines, and a trailing ` # comment` after a value; a value in single, double or back
 * quotes keeps `#` and spaces (`\n` in double quotes is a newline). Existing variables win.
 */
export function loadDotEnv(path: string, env: Record<string, string | undefined> = process.env) {
  if (!existsSync(path)) return
  for (const line of readFileSync(path, 'utf8').split(/\r?\n/)) {
    const m = /^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*)$/.exec(line)
    if (!m || line.trimStart().startsWith('#')) continue
    if (env[m[1]!] === undefined) env[m[1]!] = dotEnvValue(m[2]!)
  }
}

function dotEnvValue(raw: string): string {
  const quote = raw[0]
  if (quote === '"' || quote === "'" || quote === '`') {
    // the closing quote, then nothing but an optional comment
    const q = new RegExp(`^${quote}((?:\\\\.|[^${quote}\\\\])*)${quote}\\s*(?:#.*)?$`).exec(raw)
    if (q) return quote === '"' ? q[1]!.replace(/\\(.)/g, (_, c: string) => (c === 'n' ? '\n' : c === 'r' ? '\r' : c === 't' ? '\t' : c)) : q[1]!
  }
  // unquoted: a # after a space (or at the start) begins a comment
  return raw.replace(/(^|\s)#.*$/, '').trim()
}

/** The commands main() runs itself (the admin subcommands are in cli.ts). */
const BUILT_IN = new Set(['serve', 'migrate', 'vacuum', 'backup', 'restore', 'healthcheck', 'version', '--version'])

function fail(message: string): never {
  console.error(`capstan: ${message}`)
  process.exit(2)
}

function configOrExit() {
  try {
    return loadConfig()
  } catch (e) {
    if (e instanceof ConfigError) fail(e.message)
    throw e
  }
}

/** A system or SQLite error as one line: its message without the stack. */
function reasonOf(e: unknown): string {
  return String((e as Error)?.message ?? e).split('\n')[0]!
}

/**
 * The data directory's lock, or one line and exit 2: when another Capstan holds it, and when the
 * directory cannot be created or written (a wrong path, a read-only volume, another owner).
 */
function lockOrExit(dataDir: string) {
  try {
    return lockDataDir(dataDir)
  } catch (e) {
    if (e instanceof DataDirLocked) fail(e.message)
    fail(`CAPSTAN_DATA_DIR ${dataDir} cannot be used: ${reasonOf(e)}`)
  }
}

/**
 * The database, opened and migrated, or one line and exit 2: a file that is not a database, one
 * that cannot be written, or one migrated by a newer Capstan (nothing is changed in any of them).
 */
function databaseOrExit(path: string) {
  let db: Database | null = null
  try {
    db = openDatabase(path)
    return { db, applied: migrate(db) }
  } catch (e) {
    db?.close()
    fail(`cannot open the database ${path}: ${reasonOf(e)}`)
  }
}

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

async function serve() {
  const config = configOrExit()
  const lock = lockOrExit(config.dataDir)
  const log = new Logger(config.logLevel)
  const { db, applied } = databaseOrExit(config.dbPath)
  const admin = resolveAdminToken(db, config.adminToken)
  if (admin.generated) {
    process.stdout.write(`Capstan admin token (shown once; only its hash is stored): ${admin.generated}\n`)
  }
  if (admin.unsaved) log.warn('CAPSTAN_ADMIN_TOKEN is used but could not be stored as the admin token (is the disk full?): the previous one would be valid again if the variable were removed')
  // Before anything starts (crash recovery, the scheduler): is the port free? A second Capstan
  // must stop here with one line, not run its start-up against a database another one is serving.
  if (config.port !== 0) {
    try {
      Bun.serve({ hostname: config.host, port: config.port, reusePort: false, fetch: () => new Response(null) }).stop(true)
    } catch (e) {
      fail(`cannot listen on ${config.host}:${config.port}: ${listenFailure(e)}`)
    }
  }
  // A background task that fails unexpectedly (a write on a full disk from a timer, say) is
  // logged; it must not take the server down, and with it every send in a network's hands
  const unexpected = (e: unknown) => log.error('background task failed', { error: String((e as Error)?.stack ?? e) })
  process.on('uncaughtException', unexpected)
  process.on('unhandledRejection', unexpected)
  const deps = { config, db, writer: new Writer(db), clock: systemClock }
  const svc = buildServices(deps, log, SecretBox.load(config.dataDir, config.secretKey))
  await startServices(svc)
  const jobs = startJobs(svc)
  const app = buildApp({ svc, adminTokenHash: admin.hash, probes: { scanner: () => svc.media.scannerReachable() } })
  app.listen({ hostname: config.host, port: config.port })
  log.info('capstan started', { version: VERSION, host: config.host, port: app.server?.port, data_dir: config.dataDir, migrations_applied: applied })
  warnIfDiskLow(svc)
  log.flush()

  let stopping = false
  /**
   * Graceful stop: release nothing more (the queue stays intact in the database), answer the
   * requests already received, let sends already handed to a network (up to 10 s) and webhook
   * deliveries already sent (up to 3 s) record their outcome — whatever is left is settled by crash
   * recovery, or delivered again, at the next start — then close.
   */
  const stop = async (signal: string) => {
    if (stopping) return
    stopping = true
    log.info('capstan stopping', { signal })
    for (const j of jobs) j.stop()
    stopServices(svc)
    await app.stop()
    const left = await settleServices(svc)
    try {
      svc.keys.flushUse()
    } catch (e) {
      log.warn('could not record when the API keys were last used', { error: String((e as Error)?.message ?? e).slice(0, 200) })
    }
    if (left.sends > 0) log.warn('stopping with sends in flight; the next start settles them', { in_flight: left.sends })
    if (left.deliveries > 0) log.warn('stopping with webhook deliveries in flight; the next start retries them', { in_flight: left.deliveries })
    log.info('capstan stopped', { signal })
    log.flush()
    db.close()
    lock.release()
    process.exit(0)
  }
  process.on('SIGTERM', () => void stop('SIGTERM'))
  process.on('SIGINT', () => void stop('SIGINT'))
}

async function main(argv: string[]) {
  // Everything Capstan writes — the database and its WAL, media, the key file, sandbox records,
  // backups — holds customers' data or secrets: readable by the service's own user only, whatever
  // umask it was started with (a shell's 022, a container's entrypoint)
  process.umask(0o077)
  if (Bun.main.startsWith('/$bunfs/') || Bun.main.startsWith('B:\\~BUN')) loadDotEnv(join(dirname(process.execPath), '.env'))
  const [command] = argv
  // `--help` anywhere only prints the help: `capstan backup --help` must not write a backup
  // into a directory named "--help", nor `capstan serve -h` start a server
  if (argv.includes('--help') || argv.includes('-h')) {
    console.log(HELP)
    return
  }
  // the built-in commands take what their usage line says and nothing else: `serve --port 9000`
  // must not quietly start on the configured port, nor `restore --force DIR` read "--force" as DIR
  const rest = argv.slice(1)
  const force = command === 'restore' && rest.includes('--force')
  const operands = force ? rest.filter((a) => a !== '--force') : rest
  const wanted = command === 'backup' || command === 'restore' ? 1 : 0
  if (BUILT_IN.has(command!) && (operands.length !== wanted || operands.some((a) => a.startsWith('-')))) {
    fail(wanted ? `usage: capstan ${command} <dir>${command === 'restore' ? ' [--force]' : ''}` : `${command} takes no arguments; settings come from CAPSTAN_* variables (run \`capstan help\`)`)
  }
  switch (command) {
    case 'serve':
      return serve()
    case 'migrate': {
      const config = configOrExit()
      const lock = lockOrExit(config.dataDir)
      const { db, applied } = databaseOrExit(config.dbPath)
      db.close()
      lock.release()
      console.log(applied.length ? `applied migrations ${applied.join(', ')}` : 'database is up to date')
      return
    }
    case 'vacuum': {
      // The file rewritten with only what it holds: the free pages and free space left by what was
      // deleted or overwritten (before secure_delete zeroed it, or by a large purge) are gone, and
      // the file shrinks. The server must be stopped (the lock); it needs free disk space about
      // the size of the database for the while.
      const config = configOrExit()
      const lock = lockOrExit(config.dataDir)
      const { db } = databaseOrExit(config.dbPath)
      const size = () => ((db.query('PRAGMA page_count').get() as { page_count: number }).page_count * (db.query('PRAGMA page_size').get() as { page_size: number }).page_size)
      const before = size()
      try {
        db.run('VACUUM')
        emptyWal(db)
      } catch (e) {
        db.close()
        fail(`the database could not be rewritten and was left as it was: ${reasonOf(e)}`)
      }
      const after = size()
      db.close()
      lock.release()
      console.log(`database rewritten: ${before} → ${after} bytes`)
      return
    }
    case 'backup':
    case 'restore': {
      const config = configOrExit()
      const target = operands[0]!
      try {
        if (command === 'backup') {
          const r = backup(config.dataDir, target)
          console.log(`backup written to ${r.dir}: ${r.messages} messages, ${r.media} media files${r.missing.length ? ` (${r.missing.length} media files deleted by retention meanwhile)` : ''}`)
        } else {
          // held (referenced) until the restore is done: an unreferenced handle may be collected and closed
          const lock = lockOrExit(config.dataDir)
          const r = restore(target, config.dataDir, force)
          lock.release()
          console.log(`restored into ${config.dataDir}: ${r.messages} messages; start the server with this CAPSTAN_DATA_DIR`)
        }
      } catch (e) {
        fail((e as Error).message)
      }
      return
    }
    case 'healthcheck': {
      // for container HEALTHCHECK: exit 0 when GET /healthz answers 200 on this host
      const ok = await fetch(`${localBase(process.env)}/healthz`, { signal: AbortSignal.timeout(3000) }).then(
        (r) => r.ok,
        () => false,
      )
      process.exit(ok ? 0 : 1)
    }
    case 'version':
    case '--version':
      console.log(VERSION)
      return
    case undefined:
    case 'help':
      console.log(HELP)
      return
  }
  const code = await runAdminCommand(argv, process.env)
  if (code === null) fail(`unknown command "${command}"; run \`capstan help\``)
  process.exit(code)
}

if (import.meta.main) await main(process.argv.slice(2))
