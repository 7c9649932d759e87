/**
 * Fault injection between a client and a real PostgreSQL: a proxy on a Unix socket of its own
 * (`dir`/.s.PGSQL.5432, so a URL's `?host=` reaches it) that passes everything through, except
 * that, once armed, the first message carrying a COMMIT goes on to PostgreSQL and its answer
 * never comes back: the client's connection is cut a moment later. The transaction commits; the
 * client cannot know it did.
 */
import { mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Socket } from 'bun'

type Pair = { up: Socket<unknown> | null; queue: Uint8Array[]; cut: boolean }

export class CommitCutter {
  private armed = false
  /** How many COMMITs were cut. */
  cuts = 0
  private readonly server

  constructor(
    /** PostgreSQL's socket file. */
    target: string,
    readonly dir: string,
  ) {
    rmSync(dir, { recursive: true, force: true })
    mkdirSync(dir, { recursive: true })
    this.server = Bun.listen<Pair>({
      unix: join(dir, '.s.PGSQL.5432'),
      socket: {
        open: (client) => {
          client.data = { up: null, queue: [], cut: false }
          void Bun.connect({
            unix: target,
            socket: {
              open: (up) => {
                client.data.up = up
                for (const chunk of client.data.queue) up.write(chunk)
                client.data.queue = []
              },
              data: (_up, chunk) => {
                if (!client.data.cut) client.write(chunk)
              },
              close: () => void client.end(),
              error: () => void client.end(),
            },
          }).catch(() => void client.end())
        },
        data: (client, chunk) => {
          const d = client.data
          const copy = new Uint8Array(chunk)
          if (d.up) d.up.write(copy)
          else d.queue.push(copy)
          if (this.armed && Buffer.from(copy).includes('COMMIT')) {
            this.armed = false
            this.cuts++
            d.cut = true
            // PostgreSQL has the COMMIT and runs it; the client hears nothing and loses the connection
            setTimeout(() => void client.end(), 100)
          }
        },
        close: (client) => void client.data.up?.end(),
        error: (client) => void client.data.up?.end(),
      },
    })
  }

  /** The next COMMIT's answer is lost. */
  arm() {
    this.armed = true
  }

  /** `url` (a socket URL of the same server) through this proxy. */
  via(url: string) {
    const u = new URL(url)
    u.searchParams.set('host', this.dir)
    return u.toString()
  }

  stop() {
    this.server.stop(true)
    rmSync(this.dir, { recursive: true, force: true })
  }
}
