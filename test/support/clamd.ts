/**
 * A private, real clamd for tests: a one-signature database that detects the EICAR test string
 * (no signature download is possible here), on a unix socket in a temp dir.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Subprocess } from 'bun'
import { TestServer } from './server'

/** The 68-byte EICAR test string, assembled so this file is not itself a match. */
export const EICAR = Buffer.from('X5O!P%@AP[4\\PZX54(P^)7CC)7}$' + 'EICAR-' + 'STANDARD-' + 'ANTIVIRUS-' + 'TEST-' + 'FILE!$H+H*', 'ascii')

export class TestClamd {
  proc!: Subprocess
  dir = mkdtempSync(join(tmpdir(), 'capstan-clamd-'))
  socket = join(this.dir, 'clamd.sock')

  /** `streamMaxLength`: clamd's limit on a scanned stream (Debian's default is 25M). */
  static async start(opts: { streamMaxLength?: string } = {}) {
    const c = new TestClamd()
    const db = join(c.dir, 'db')
    Bun.spawnSync(['mkdir', '-p', db])
    writeFileSync(join(db, 'test.ndb'), `Eicar-Test-Signature:0:*:${EICAR.toString('hex')}\n`)
    const conf = join(c.dir, 'clamd.conf')
    writeFileSync(conf, `LocalSocket ${c.socket}\nForeground yes\nDatabaseDirectory ${db}\nTemporaryDirectory ${c.dir}\nLocalSocketMode 660\nStreamMaxLength ${opts.streamMaxLength ?? '64M'}\n`)
    const exe = Bun.which('clamd') ?? '/usr/sbin/clamd'
    c.proc = Bun.spawn([exe, `--config-file=${conf}`], { stdout: 'ignore', stderr: 'ignore' })
    const deadline = Date.now() + 60_000
    while (Date.now() < deadline) {
      if (c.proc.exitCode !== null) throw new Error(`clamd exited with ${c.proc.exitCode} (is clamav-daemon installed?)`)
      if (await c.ping()) return c
      await Bun.sleep(100)
    }
    throw new Error('clamd did not start')
  }

  async ping(): Promise<boolean> {
    return new Promise((resolve) => {
      Bun.connect({
        unix: this.socket,
        socket: {
          open(s) {
            s.write('zPING\0')
          },
          data(s, d) {
            resolve(Buffer.from(d).toString().startsWith('PONG'))
            s.end()
          },
          error() {
            resolve(false)
          },
          connectError() {
            resolve(false)
          },
        },
      }).catch(() => resolve(false))
    })
  }

  async stop() {
    this.proc.kill()
    await this.proc.exited
    rmSync(this.dir, { recursive: true, force: true })
  }
}

/**
 * A server that scans uploads with a private clamd of its own (the per-key limit out of the way):
 * what a test file of uploads starts before its tests; `close` stops both.
 */
export async function scanningServer(env: Record<string, string> = {}) {
  const clamd = await TestClamd.start()
  const srv = await TestServer.start({ env: { CAPSTAN_CLAMD: `unix:${clamd.socket}`, CAPSTAN_KEY_RATE_LIMIT: '100000', ...env } })
  return {
    clamd,
    srv,
    async close() {
      await srv.close()
      await clamd.stop()
    },
  }
}
