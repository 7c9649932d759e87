/**
 * A private PostgreSQL for development and tests: `initdb` into a folder, the server listening on
 * a Unix socket in that folder only (no TCP port unless a test asks for one; no system service),
 * stopped with its owner.
 * Debian's `postgresql` package provides the binaries (/usr/lib/postgresql/<version>/bin, newest
 * first; CAPSTAN_PG_BIN overrides). `initdb` and `postgres` refuse to run as root, so under root
 * they run as the package's `postgres` user (setpriv: the server is then a direct child, and
 * signals reach it), on a folder that user owns (and may pass through the folders above it).
 */
import type { Subprocess } from 'bun'
import { chmodSync, chownSync, copyFileSync, existsSync, mkdirSync, readdirSync, statSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { userInfo } from 'node:os'

/** Where PostgreSQL's programs are: CAPSTAN_PG_BIN, else Debian's newest installed version. */
export function postgresBin(env: Record<string, string | undefined> = process.env): string {
  if (env.CAPSTAN_PG_BIN) return env.CAPSTAN_PG_BIN
  const root = '/usr/lib/postgresql'
  const versions = existsSync(root) ? readdirSync(root).filter((v) => /^\d+$/.test(v)).sort((a, b) => Number(b) - Number(a)) : []
  for (const v of versions) if (existsSync(join(root, v, 'bin', 'postgres'))) return join(root, v, 'bin')
  throw new Error('PostgreSQL is not installed (Debian: apt-get install postgresql), or set CAPSTAN_PG_BIN to its bin directory')
}

/** The uid/gid the server runs as: this process's, or the `postgres` user's when this is root. */
function serverUser(): { uid: number; gid: number; asOther: string[] } {
  if (process.getuid?.() !== 0) return { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0, asOther: [] }
  const id = (flag: string) => Number(Bun.spawnSync(['id', flag, 'postgres']).stdout.toString().trim())
  const uid = id('-u')
  if (!Number.isInteger(uid) || uid <= 0) throw new Error('running as root needs the `postgres` user that Debian\'s postgresql package creates')
  return { uid, gid: id('-g'), asOther: ['setpriv', '--reuid=postgres', '--regid=postgres', '--init-groups'] }
}

/**
 * The `postgres` user must pass through the folders above the cluster's: each one root owns that
 * others cannot enter gets search permission only (x, as 0711: no listing, and the files in them
 * stay readable by their owner alone).
 */
function letThrough(path: string) {
  for (let p = path; ; p = dirname(p)) {
    const st = statSync(p)
    if (st.uid === 0 && (st.mode & 0o001) === 0) chmodSync(p, (st.mode & 0o7777) | 0o001)
    if (p === dirname(p)) return
  }
}

export class PrivatePostgres {
  private constructor(
    private readonly proc: Subprocess,
    /** The folder holding the cluster (`data/`) and the socket. */
    readonly dir: string,
    /** A postgres:// URL for the `capstan` database, through the socket. */
    readonly url: string,
    private readonly log: () => string,
  ) {}

  /**
   * Start the cluster in `dir` (created; `initdb` on first use), and make the `capstan` database.
   * Under root the folder is handed to the `postgres` user, and its parent must let that user in.
   * `tcp`: also listen on 127.0.0.1:`port`, with TLS from the PEM files `tls.cert` and `tls.key`
   * when given (copied into the cluster) — for tests of a server reached over TLS, as managed
   * services are, or of one without it; `url` is still the socket's.
   */
  static async start(dir: string, { database = 'capstan', tcp }: { database?: string; tcp?: { port: number; tls?: { cert: string; key: string } } } = {}): Promise<PrivatePostgres> {
    const bin = postgresBin()
    const user = serverUser()
    mkdirSync(dir, { recursive: true, mode: 0o700 })
    if (user.asOther.length) {
      chownSync(dir, user.uid, user.gid)
      letThrough(dirname(dir))
    }
    chmodSync(dir, 0o700)
    const data = join(dir, 'data')
    const role = user.asOther.length ? 'capstan' : userInfo().username
    if (!existsSync(join(data, 'PG_VERSION'))) {
      const init = Bun.spawnSync([...user.asOther, join(bin, 'initdb'), '-D', data, '-U', role, '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-instructions'], { stdout: 'pipe', stderr: 'pipe' })
      if (init.exitCode !== 0) throw new Error(`initdb failed: ${init.stderr.toString().trim()}`)
    }
    let output = ''
    // the socket only, in the cluster's own folder (with `tcp`, 127.0.0.1 too); fsync stays on (it
    // is what is being measured)
    const listen = tcp ? ['-c', 'listen_addresses=127.0.0.1', '-p', String(tcp.port)] : ['-c', 'listen_addresses=']
    if (tcp?.tls) {
      for (const [from, to] of [[tcp.tls.cert, 'server.crt'], [tcp.tls.key, 'server.key']] as const) {
        copyFileSync(from, join(data, to))
        if (user.asOther.length) chownSync(join(data, to), user.uid, user.gid)
        chmodSync(join(data, to), 0o600)
      }
      listen.push('-c', 'ssl=on')
    }
    const proc = Bun.spawn([...user.asOther, join(bin, 'postgres'), '-D', data, '-k', dir, ...listen, '-c', 'max_connections=200'], { stdout: 'pipe', stderr: 'pipe' })
    const collect = async (s: ReadableStream<Uint8Array>) => {
      for await (const chunk of s) output += new TextDecoder().decode(chunk)
    }
    void collect(proc.stdout as ReadableStream<Uint8Array>)
    void collect(proc.stderr as ReadableStream<Uint8Array>)
    const url = (db: string) => `postgres://${role}@localhost${tcp ? `:${tcp.port}` : ''}/${db}?host=${encodeURIComponent(dir)}`
    const deadline = Date.now() + 30_000
    for (;;) {
      if (proc.exitCode !== null) throw new Error(`postgres exited ${proc.exitCode}: ${output.trim()}`)
      try {
        const sql = new Bun.SQL(url('postgres'), { max: 1 })
        try {
          const found = await sql`SELECT 1 FROM pg_database WHERE datname = ${database}`
          if (found.length === 0) await sql.unsafe(`CREATE DATABASE "${database}"`)
        } finally {
          await sql.close()
        }
        break
      } catch (e) {
        if (Date.now() > deadline) {
          proc.kill('SIGKILL')
          throw new Error(`postgres did not accept connections: ${String(e)} ${output.trim()}`)
        }
        await Bun.sleep(100)
      }
    }
    return new PrivatePostgres(proc, dir, url(database), () => output)
  }

  /** A new, empty database `name` on this server; its URL (through the socket, as `url`). */
  async createDatabase(name: string): Promise<string> {
    const admin = new Bun.SQL(this.url, { max: 1 })
    try {
      await admin.unsafe(`CREATE DATABASE "${name}"`)
    } finally {
      await admin.close()
    }
    const u = new URL(this.url)
    u.pathname = `/${name}`
    return u.toString()
  }

  /** What the server printed (for a failing test's message). */
  get output() {
    return this.log()
  }

  /** A fast shutdown (SIGINT: open transactions roll back), waiting for the server to exit. */
  async stop(signal: 'SIGINT' | 'SIGKILL' = 'SIGINT') {
    if (this.proc.exitCode === null) {
      this.proc.kill(signal)
      await this.proc.exited
    }
  }
}
