#!/usr/bin/env bun
/**
 * The `capstan` command: serve (src/serve.ts, loaded only for it), migrate, version, and the admin
 * subcommands (src/cli.ts).
 *
 * A compiled binary reads a `.env` file beside itself (it never overrides variables already set
 * in the environment); Bun's own compile-time autoload of .env and bunfig.toml is switched off at
 * build time so a stray file in the working directory cannot change the appliance.
 */
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { backup, restore } from './backup'
import { CLI_HELP, localBase, runAdminCommand } from './cli'
import { emptyWal } from './db/open'
import { configOrExit, databaseOrExit, fail, lockOrExit, postgresOrExit, reasonOf } from './startup'
import { VERSION } from './version'

const HELP = `capstan ${VERSION} — self-hosted messaging API appliance

usage:
  capstan serve        run the HTTP API, admin API, docs and scheduler
  capstan migrate      apply database migrations and exit
  capstan migrate-to-postgres  copy this SQLite installation into CAPSTAN_DATABASE_URL (and its media
                       into the CAPSTAN_MEDIA_STORE bucket), verified by counts (server stopped)
  capstan backup DIR   consistent copy of the database, media, key file (while the server runs)
  capstan restore DIR  put a backup into CAPSTAN_DATA_DIR (server stopped; --force to overwrite)
  capstan vacuum       rewrite the database without its free space (server stopped)
  capstan version      print the version
  capstan healthcheck  exit 0 when the local server answers GET /healthz

${CLI_HELP}

Configuration comes from CAPSTAN_* environment variables (see docs/configuration.md).`

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
const BUILT_IN = new Set(['serve', 'migrate', 'migrate-to-postgres', 'vacuum', 'backup', 'restore', 'healthcheck', 'version', '--version'])

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
      return (await import('./serve')).serve()
    case 'migrate-to-postgres':
      return (await import('./migrate-to-postgres')).migrateToPostgres(configOrExit())
    case 'migrate': {
      const config = configOrExit()
      if (config.databaseUrl) {
        const { applied } = await postgresOrExit(config.databaseUrl, config.databasePool, { serving: false })
        console.log(applied.length ? `applied migrations ${applied.join(', ')}` : 'database is up to date')
        process.exit(0)
      }
      const lock = lockOrExit(config.dataDir)
      const { db, applied } = databaseOrExit(config.dbPath)
      db.close()
      lock.release()
      console.log(applied.length ? `applied migrations ${applied.join(', ')}` : 'database is up to date')
      return
    }
    case 'vacuum': {
      if (configOrExit().databaseUrl) fail('capstan vacuum is for the embedded SQLite file; PostgreSQL reclaims space with its own autovacuum')
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
        await emptyWal(db, 1)
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
      if (config.databaseUrl) fail(`capstan ${command} is for the embedded SQLite file; with CAPSTAN_DATABASE_URL back PostgreSQL up with its own tools (pg_dump, or continuous archiving for point-in-time recovery)`)
      const target = operands[0]!
      try {
        if (command === 'backup') {
          const bucket = config.mediaStore.kind === 's3' ? `s3://${config.mediaStore.bucket}/${config.mediaStore.prefix}` : null
          const r = backup(config.dataDir, target, bucket)
          console.log(`backup written to ${r.dir}: ${r.messages} messages, ${bucket ? `media kept in ${bucket} (not copied)` : `${r.media} media files`}${r.linked ? ` (${r.linked} shared with the backup beside it)` : ''}${r.missing.length ? ` (${r.missing.length} media files deleted by retention meanwhile)` : ''}`)
        } else {
          // held (referenced) until the restore is done: an unreferenced handle may be collected and closed
          const lock = lockOrExit(config.dataDir)
          const r = restore(target, config.dataDir, force)
          lock.release()
          console.log(`restored into ${config.dataDir}: ${r.messages} messages${r.erasures ? `; ${r.erasures} recorded erasures are done again when the server starts` : ''}; start the server with this CAPSTAN_DATA_DIR`)
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
