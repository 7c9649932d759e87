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
