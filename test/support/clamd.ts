/**
 * A private, real clamd for tests: a one-signature database that detects the EICAR test string
 * (no signature download is possible here), on a unix socket in a temp dir (src/dev/clamd.ts,
 * which `bun run clamd` also uses).
 */
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { EICAR, PrivateClamd } from '../../src/dev/clamd'
import { TestServer } from './server'

export { EICAR }

/** A private clamd in a fresh temp dir (see src/dev/clamd.ts), removed with it on stop. */
export class TestClamd {
  private constructor(private readonly clamd: PrivateClamd) {}
  get socket() {
    return this.clamd.socket
  }
  get proc() {
    return this.clamd.proc
  }
  get dir() {
    return this.clamd.dir
  }

  static async start(opts: { streamMaxLength?: string } = {}) {
    return new TestClamd(await PrivateClamd.start(mkdtempSync(join(tmpdir(), 'capstan-clamd-')), opts))
  }

  ping() {
    return this.clamd.ping()
  }

  stop() {
    return this.clamd.stop(true)
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
