/**
 * A small clamd client (the INSTREAM and PING commands of ClamAV's daemon protocol) over a unix
 * socket or TCP. INSTREAM sends the bytes in chunks, each prefixed with its length as a 4-byte
 * big-endian integer, ended by a zero-length chunk; clamd answers "stream: OK",
 * "stream: <name> FOUND" or "... ERROR". Commands use the z-prefix (NUL-terminated).
 */
import type { ClamdAddress } from '../config'

export type ScanResult = { clean: true } | { clean: false; signature: string }

/** The scanner could not give an answer (unreachable, timed out, or clamd reported an error). */
export class ScannerUnavailable extends Error {}

/** clamd refused the file as longer than it takes (its StreamMaxLength, 25 MiB by default). */
export class ScanTooLarge extends Error {}

export interface Scanner {
  scan(bytes: Uint8Array): Promise<ScanResult>
  ping(): Promise<boolean>
  /** The daemon's VERSION answer: `ClamAV 1.4.6/27463/Mon Nov 24 08:35:13 2026` (engine/signature database/its date). */
  version(): Promise<string>
}

const CHUNK = 64 * 1024

export class ClamdScanner implements Scanner {
  constructor(
    private readonly address: ClamdAddress,
    private readonly timeoutMs = 30_000,
  ) {}

  private exchange(payload: (write: (b: Uint8Array) => void) => void): Promise<string> {
    return new Promise((resolve, reject) => {
      const received: Uint8Array[] = []
      let settled = false
      const finish = (err: Error | null, text?: string) => {
        if (settled) return
        settled = true
        clearTimeout(timer)
        if (err) reject(err)
        else resolve(text!)
      }
      const timer = setTimeout(() => {
        finish(new ScannerUnavailable('clamd did not answer in time'))
        sock?.end()
      }, this.timeoutMs)
      let sock: Awaited<ReturnType<typeof Bun.connect>> | undefined
      const pending: Uint8Array[] = []
      let flushing = false
      const handlers = {
        data(_s: unknown, chunk: Uint8Array) {
          received.push(new Uint8Array(chunk))
          const all = Buffer.concat(received)
          const nul = all.indexOf(0)
          if (nul !== -1) {
            finish(null, all.subarray(0, nul).toString('utf8'))
            sock?.end()
          }
        },
        drain() {
          flush()
        },
        close() {
          if (!settled) {
            const all = Buffer.concat(received).toString('utf8').replace(/\0+$/, '')
            if (all) finish(null, all)
            else finish(new ScannerUnavailable('clamd closed the connection'))
          }
        },
        error(_s: unknown, e: Error) {
          finish(new ScannerUnavailable(`clamd connection failed: ${e.message}`))
        },
        connectError(_s: unknown, e: Error) {
          finish(new ScannerUnavailable(`clamd unreachable: ${e.message}`))
        },
      }
      const flush = () => {
        if (!sock || flushing) return
        flushing = true
        while (pending.length) {
          const head = pending[0]!
          const n = sock.write(head)
          if (n < head.length) {
            pending[0] = head.subarray(n)
            break
          }
          pending.shift()
        }
        flushing = false
      }
      const write = (b: Uint8Array) => {
        pending.push(b)
        flush()
      }
      const opts = this.address.kind === 'unix' ? { unix: this.address.path, socket: handlers } : { hostname: this.address.host, port: this.address.port, socket: handlers }
      Bun.connect(opts as Parameters<typeof Bun.connect>[0])
        .then((s) => {
          sock = s
          payload(write)
        })
        .catch((e: Error) => finish(new ScannerUnavailable(`clamd unreachable: ${e.message}`)))
    })
  }

  async ping(): Promise<boolean> {
    try {
      return (await this.exchange((w) => w(Buffer.from('zPING\0')))).trim() === 'PONG'
    } catch {
      return false
    }
  }

  async version(): Promise<string> {
    return (await this.exchange((w) => w(Buffer.from('zVERSION\0')))).trim()
  }

  async scan(bytes: Uint8Array): Promise<ScanResult> {
    const reply = await this.exchange((w) => {
      w(Buffer.from('zINSTREAM\0'))
      for (let off = 0; off < bytes.length; off += CHUNK) {
        const part = bytes.subarray(off, Math.min(off + CHUNK, bytes.length))
        const len = Buffer.alloc(4)
        len.writeUInt32BE(part.length)
        w(len)
        w(part)
      }
      w(Buffer.alloc(4))
    })
    const text = reply.trim()
    if (/^stream: OK$/.test(text)) return { clean: true }
    const found = /^stream: (.+) FOUND$/.exec(text)
    if (found) return { clean: false, signature: found[1]! }
    if (/^INSTREAM size limit exceeded/.test(text)) throw new ScanTooLarge('clamd refused the file as longer than its StreamMaxLength')
    throw new ScannerUnavailable(`clamd could not scan the file: ${text.slice(0, 200)}`)
  }
}
