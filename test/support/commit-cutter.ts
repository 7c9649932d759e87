/**
 * Fault injection between a client and a real PostgreSQL (a PgProxy) that passes everything
 * through, except that, once armed, the first message carrying a COMMIT goes on to PostgreSQL and
 * its answer never comes back: the client's connection is cut a moment later. The transaction
 * commits; the client cannot know it did.
 */
import { PgProxy } from './pg-proxy'

export class CommitCutter {
  private armed = false
  /** How many COMMITs were cut. */
  cuts = 0
  private readonly proxy

  constructor(
    /** PostgreSQL's socket file. */
    target: string,
    dir: string,
  ) {
    this.proxy = new PgProxy<{ cut: boolean }>(target, dir, {
      state: () => ({ cut: false }),
      toClient: (link, chunk) => (link.state.cut ? null : chunk),
      sent: (link, chunk) => {
        if (!this.armed || !Buffer.from(chunk).includes('COMMIT')) return
        this.armed = false
        this.cuts++
        link.state.cut = true
        // PostgreSQL has the COMMIT and runs it; the client hears nothing and loses the connection
        setTimeout(() => void link.client.end(), 100)
      },
    })
  }

  /** The next COMMIT's answer is lost. */
  arm() {
    this.armed = true
  }

  /** `url` (a socket URL of the same server) through this proxy. */
  via(url: string) {
    return this.proxy.via(url)
  }

  stop() {
    this.proxy.stop()
  }
}
