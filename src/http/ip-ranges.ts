/**
 * IP addresses and CIDR ranges (an API key's `allowed_ips`): parsed once into node:net's
 * BlockList, which matches IPv4, IPv6 and IPv4-mapped IPv6 (`::ffff:10.0.0.1`) addresses.
 */
import { BlockList, isIP } from 'node:net'

/** The address and prefix of `10.0.0.0/8`, `2001:db8::/32` or a single address; null when it is neither. */
function parseRange(text: string): { address: string; family: 'ipv4' | 'ipv6'; prefix: number } | null {
  const [address = '', bits, extra] = text.split('/')
  const version = isIP(address)
  if (version === 0 || extra !== undefined) return null
  const max = version === 4 ? 32 : 128
  if (bits !== undefined && !/^\d{1,3}$/.test(bits)) return null
  const prefix = bits === undefined ? max : Number(bits)
  if (prefix > max) return null
  return { address, family: version === 4 ? 'ipv4' : 'ipv6', prefix }
}

/** Whether `text` is an IP address or a CIDR range. */
export const isIpRange = (text: string) => parseRange(text) !== null

/** A matcher for `ranges` (each already checked with isIpRange). */
export function ipRanges(ranges: readonly string[]): BlockList {
  const list = new BlockList()
  for (const r of ranges) {
    const p = parseRange(r)!
    list.addSubnet(p.address, p.prefix, p.family)
  }
  return list
}

/** Whether `address` (a client address, possibly `unknown`) is in `list`. */
export function inRanges(list: BlockList, address: string): boolean {
  const version = isIP(address)
  return version !== 0 && list.check(address, version === 4 ? 'ipv4' : 'ipv6')
}

/** `::ffff:10.0.0.1` → `10.0.0.1`; a zone (`fe80::1%eth0`) dropped; anything else as it is. */
export function plainAddress(address: string): string {
  const zone = address.indexOf('%')
  const a = zone === -1 ? address : address.slice(0, zone)
  if (a.length > 7 && a.slice(0, 7).toLowerCase() === '::ffff:' && isIP(a.slice(7)) === 4) return a.slice(7)
  return a
}

/** The first four 16-bit groups of an IPv6 address, written out in full (`2001:db8:0:1`). */
function prefix64(address: string): string {
  const [head = '', tail] = address.split('::')
  const left = head ? head.split(':') : []
  const right = tail ? tail.split(':') : []
  // a dotted IPv4 tail holds two groups
  const size = (groups: string[]) => groups.reduce((n, g) => n + (g.includes('.') ? 2 : 1), 0)
  const groups = tail === undefined ? left : [...left, ...Array<string>(Math.max(0, 8 - size(left) - size(right))).fill('0'), ...right]
  return groups
    .slice(0, 4)
    .map((g) => (g.includes('.') ? g : String(parseInt(g, 16).toString(16))))
    .join(':')
}

/**
 * The name a client address is counted under for the per-IP limits: an IPv4 address as it is, an
 * IPv6 address by its /64 (one host is normally given a whole /64, so counting single addresses
 * would let it escape the limit and grow the table by 2^64 names).
 */
export function limitName(address: string): string {
  return isIP(address) === 6 ? `${prefix64(address.toLowerCase())}::/64` : address
}
