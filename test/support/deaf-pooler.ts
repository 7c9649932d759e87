/**
 * Between a client and a real PostgreSQL (a PgProxy), what a connection pooler in transaction
 * mode does to LISTEN: everything passes, except the notifications — the server's
 * NotificationResponse messages ('A') never reach the client (or, with `deafen`, not those of the
 * connections open at that moment: a listening connection that went deaf while others work). It
 * reads the server's messages (a type byte and a length, from the first one: the client's startup
 * message is the only one without a type, and it goes the other way) and drops those.
 */
import { PgProxy } from './pg-proxy'

export class DeafPooler {
  /** Notifications kept from the clients. */
  dropped = 0
  private readonly proxy

  constructor(
    /** PostgreSQL's socket file. */
    target: string,
    dir: string,
    /** Whether connections made from now on hear nothing (false: only those `deafen` names). */
    deafFromStart = true,
  ) {
    this.proxy = new PgProxy<{ pending: Buffer; deaf: boolean }>(target, dir, {
      state: () => ({ pending: Buffer.alloc(0), deaf: deafFromStart }),
      toClient: ({ state }, chunk) => {
        let buf = Buffer.concat([state.pending, chunk])
        const out: Buffer[] = []
        while (buf.length >= 5) {
          const size = 1 + buf.readUInt32BE(1)
          if (buf.length < size) break
          if (buf[0] === 0x41 && state.deaf) this.dropped++
          else out.push(buf.subarray(0, size))
          buf = buf.subarray(size)
        }
        state.pending = Buffer.from(buf)
        return Buffer.concat(out)
      },
    })
  }

  /** The connections open now hear nothing from here on (as a listening connection a middlebox forgot); new ones still do. */
  deafen() {
    for (const link of this.proxy.links) link.state.deaf = true
  }

  /** `url` (a socket URL of the same server) through this proxy. */
  via(url: string) {
    return this.proxy.via(url)
  }

  stop() {
    this.proxy.stop()
  }
}
