/**
 * Between a client and a real PostgreSQL, what a connection pooler in transaction mode does to
 * LISTEN: everything passes, except the notifications — the server's NotificationResponse
 * messages ('A') never reach the client (or, with `deafen`, not those of the connections open
 * at that moment: a listening connection that went deaf while others work). A proxy on a Unix socket of its own
 * (`dir`/.s.PGSQL.5432, so a URL's `?host=` reaches it) that reads the server's messages (a type
 * byte and a length, from the first one: the client's startup message is the only one without a
 * type, and it goes the other way) and drops those.
 */
import { mkdirSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Socket } from 'bun'

type Pair = { up: Socket<unknown> | null; queue: Uint8Array[]; pending: Buffer; deaf: boolean }

export class DeafPooler {
  /** Notifications kept from the clients. */
  dropped = 0
  private readonly server
  private readonly open = new Set<Pair>()

  constructor(
    /** PostgreSQL's socket file. */
    target: string,
    readonly dir: string,
    /** Whether connections made from now on hear nothing (false: only those `deafen` names). */
    private deafFromStart = true,
  ) {
    rmSync(dir, { recursive: true, force: true })
    mkdirSync(dir, { recursive: true })
    this.server = Bun.listen<Pair>({
      unix: join(dir, '.s.PGSQL.5432'),
      socket: {
        open: (client) => {
          client.data = { up: null, queue: [], pending: Buffer.alloc(0), deaf: this.deafFromStart }
          this.open.add(client.data)
          void Bun.connect({
            unix: target,
            socket: {
              open: (up) => {
                client.data.up = up
                for (const chunk of client.data.queue) up.write(chunk)
                client.data.queue = []
              },
              data: (_up, chunk) => {
                const d = client.data
                let buf = Buffer.concat([d.pending, chunk])
                const out: Buffer[] = []
                while (buf.length >= 5) {
                  const size = 1 + buf.readUInt32BE(1)
                  if (buf.length < size) break
                  if (buf[0] === 0x41 && d.deaf) this.dropped++
                  else out.push(buf.subarray(0, size))
                  buf = buf.subarray(size)
                }
                d.pending = Buffer.from(buf)
                if (out.length) client.write(Buffer.concat(out))
              },
              close: () => void client.end(),
              error: () => void client.end(),
            },
          }).catch(() => void client.end())
        },
        data: (client, chunk) => {
          const copy = new Uint8Array(chunk)
          if (client.data.up) client.data.up.write(copy)
          else client.data.queue.push(copy)
        },
        close: (client) => {
          this.open.delete(client.data)
          void client.data.up?.end()
        },
        error: (client) => void client.data.up?.end(),
      },
    })
  }

  /** The connections open now hear nothing from here on (as a listening connection a middlebox forgot); new ones still do. */
  deafen() {
    for (const pair of this.open) pair.deaf = true
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
