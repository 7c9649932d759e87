/**
 * A proxy between clients and a real PostgreSQL, for fault injection: it listens on a Unix socket
 * of its own (`dir`/.s.PGSQL.5432, so a URL's `?host=` reaches it) and opens, for each client
 * connection, one to the server. Everything passes through, except what the hooks change: what
 * the server sends goes through `toClient`, and `sent` sees what the client sent once it went on.
 */
import { mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Socket } from 'bun'

/** One client connection and its connection to the server; `state` is the hooks' own. */
export type Link<S> = { client: Socket<Link<S>>; up: Socket<unknown> | null; queue: Uint8Array[]; state: S; silent?: boolean }

export interface ProxyHooks<S> {
  /** A new client connection's state. */
  state(): S
  /** What the client gets of what the server sent (null: nothing). */
  toClient?(link: Link<S>, chunk: Buffer): Uint8Array | null
  /** What the client sent, once it went on to the server. */
  sent?(link: Link<S>, chunk: Uint8Array): void
}

export class PgProxy<S> {
  /** The client connections open now. */
  readonly links = new Set<Link<S>>()
  private readonly server

  constructor(
    /** PostgreSQL's socket file. */
    target: string,
    readonly dir: string,
    hooks: ProxyHooks<S>,
  ) {
    rmSync(dir, { recursive: true, force: true })
    mkdirSync(dir, { recursive: true })
    this.server = Bun.listen<Link<S>>({
      unix: join(dir, '.s.PGSQL.5432'),
      socket: {
        open: (client) => {
          const link: Link<S> = { client, up: null, queue: [], state: hooks.state() }
          client.data = link
          this.links.add(link)
          void Bun.connect({
            unix: target,
            socket: {
              open: (up) => {
                link.up = up
                for (const chunk of link.queue) up.write(chunk)
                link.queue = []
              },
              data: (_up, chunk) => {
                if (link.silent) return
                const out = hooks.toClient ? hooks.toClient(link, chunk) : chunk
                if (out?.length) client.write(out)
              },
              close: () => void (link.silent || client.end()),
              error: () => void (link.silent || client.end()),
            },
          }).catch(() => void client.end())
        },
        data: (client, chunk) => {
          const link = client.data
          if (link.silent) return
          const copy = new Uint8Array(chunk)
          if (link.up) link.up.write(copy)
          else link.queue.push(copy)
          hooks.sent?.(link, copy)
        },
        close: (client) => {
          this.links.delete(client.data)
          void client.data.up?.end()
        },
        error: (client) => void client.data.up?.end(),
      },
    })
  }

  /**
   * The connections open now lose their server without a word, as after a failover behind the
   * same address or a server host gone at once: their server side is closed (PostgreSQL ends
   * those sessions), while the clients' sides stay open and hear nothing more — what a client
   * sends there goes nowhere, and it is never told. New connections reach the server as before.
   */
  silence() {
    for (const link of this.links) {
      link.silent = true
      void link.up?.end()
    }
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
