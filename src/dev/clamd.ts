/**
 * A private clamd for trying uploads on a development machine, and for the tests: a real ClamAV
 * daemon (Debian's clamav-daemon package) on a Unix socket in a directory of its own, whose only
 * signature detects the EICAR test file — no signature download, no system service, no root.
 * `bun run clamd` starts one and prints the CAPSTAN_CLAMD value to give Capstan.
 */
import { mkdirSync, rmSync, writeFileSync } from 'node:fs'
import { join, resolve } from 'node:path'
import type { Subprocess } from 'bun'

/** The 68-byte EICAR test string, assembled so this file is not itself a match. */
export const EICAR = Buffer.from('X5O!P%@AP[4\\PZX54(P^)7CC)7}$' + 'EICAR-' + 'STANDARD-' + 'ANTIVIRUS-' + 'TEST-' + 'FILE!$H+H*', 'ascii')

export class PrivateClamd {
  private constructor(
    readonly proc: Subprocess,
    readonly dir: string,
    readonly socket: string,
  ) {}

  /**
   * Start clamd with its files in `dir` (made if missing); resolves once it answers PING.
   * `streamMaxLength`: clamd's limit on a scanned stream (Debian's default is 25M).
   */
  static async start(dir: string, opts: { streamMaxLength?: string; timeoutMs?: number } = {}) {
    const db = join(dir, 'db')
    mkdirSync(db, { recursive: true })
    const socket = join(resolve(dir), 'clamd.sock')
    writeFileSync(join(db, 'test.ndb'), `Eicar-Test-Signature:0:*:${EICAR.toString('hex')}\n`)
    const conf = join(dir, 'clamd.conf')
    writeFileSync(conf, `LocalSocket ${socket}\nForeground yes\nDatabaseDirectory ${resolve(db)}\nTemporaryDirectory ${resolve(dir)}\nLocalSocketMode 660\nStreamMaxLength ${opts.streamMaxLength ?? '64M'}\n`)
    const exe = Bun.which('clamd') ?? '/usr/sbin/clamd'
    const proc = Bun.spawn([exe, `--config-file=${conf}`], { stdout: 'ignore', stderr: 'ignore' })
    const c = new PrivateClamd(proc, dir, socket)
    const deadline = Date.now() + (opts.timeoutMs ?? 60_000)
    while (Date.now() < deadline) {
      if (proc.exitCode !== null) throw new Error(`clamd exited with ${proc.exitCode} (is clamav-daemon installed? apt-get install clamav-daemon)`)
      if (await c.ping()) return c
      await Bun.sleep(100)
    }
    proc.kill()
    throw new Error('clamd did not answer within its start time')
  }

  ping(): Promise<boolean> {
    return new Promise((done) => {
      Bun.connect({
        unix: this.socket,
        socket: {
          open(s) {
            s.write('zPING\0')
          },
          data(s, d) {
            done(Buffer.from(d).toString().startsWith('PONG'))
            s.end()
          },
          error() {
            done(false)
          },
          connectError() {
            done(false)
          },
        },
      }).catch(() => done(false))
    })
  }

  /** Stop it; `remove`: delete its directory too. */
  async stop(remove = false) {
    this.proc.kill()
    await this.proc.exited
    if (remove) rmSync(this.dir, { recursive: true, force: true })
  }
}

if (import.meta.main) {
  const dir = join(process.env.CAPSTAN_DATA_DIR ?? './data', 'clamd')
  try {
    const c = await PrivateClamd.start(dir)
    console.log(`A private clamd (EICAR test signature only) listens on ${c.socket}. In the shell that starts Capstan:\n\n  export CAPSTAN_CLAMD=unix:${c.socket}\n\nCtrl-C stops it.`)
    const stop = () => void c.stop().then(() => process.exit(0))
    process.on('SIGINT', stop)
    process.on('SIGTERM', stop)
    await c.proc.exited
  } catch (e) {
    console.error(String((e as Error).message ?? e))
    process.exit(2)
  }
}
