/**
 * Who sent a request: the client address behind the configured reverse proxies, whether the
 * request came through one of them (and so whether its X-Forwarded-* headers mean anything), and
 * whether the client reached Capstan over TLS.
 */
import type { BlockList } from 'node:net'
import { isIP } from 'node:net'
import { inRanges, plainAddress } from './ip-ranges'

/** The listening server's view of a request's socket (Bun's `server.requestIP`). */
export type PeerOf = (request: Request) => { address: string } | null

export class ClientAddresses {
  /**
   * `trusted`: the proxies' addresses/ranges (CAPSTAN_TRUSTED_PROXIES; null: none, and every
   * X-Forwarded-* header is ignored). `peer`: the socket's address, read when asked.
   */
  constructor(
    private readonly trusted: BlockList | null,
    private readonly peer: PeerOf,
  ) {}

  /** Whether any proxy is trusted (else no forwarded header is ever read). */
  get proxied(): boolean {
    return this.trusted !== null
  }

  private peerAddress(request: Request): string {
    const a = this.peer(request)?.address
    return a ? plainAddress(a) : 'unknown'
  }

  /** Whether the socket peer is one of the trusted proxies. */
  viaProxy(request: Request): boolean {
    return this.trusted !== null && inRanges(this.trusted, this.peerAddress(request))
  }

  /**
   * The client address: the socket peer; or, when the peer is a trusted proxy, the right-most
   * X-Forwarded-For address that is not a trusted proxy itself. Proxies append what they saw (nginx's
   * `$proxy_add_x_forwarded_for`), so everything left of that is the client's own say and is not
   * believed. Values that are not IP addresses are skipped; when every address is a proxy, the
   * left-most one is the client as far as anyone can tell.
   */
  ip(request: Request): string {
    const peer = this.peerAddress(request)
    if (this.trusted === null || !inRanges(this.trusted, peer)) return peer
    const forwarded = request.headers.get('x-forwarded-for')
    if (!forwarded) return peer
    const hops = forwarded.split(',')
    let furthest = peer
    for (let i = hops.length - 1; i >= 0; i--) {
      const hop = plainAddress(hops[i]!.trim().replace(/^\[(.*)\]$/, '$1'))
      if (isIP(hop) === 0) continue
      if (!inRanges(this.trusted, hop)) return hop
      furthest = hop
    }
    return furthest
  }

  /** Whether the client reached Capstan over TLS: directly, or as a trusted proxy says (X-Forwarded-Proto). */
  overTls(request: Request): boolean {
    if (request.url.startsWith('https:')) return true
    return this.viaProxy(request) && request.headers.get('x-forwarded-proto')?.split(',')[0]?.trim().toLowerCase() === 'https'
  }
}
