/**
 * Free space where the data directory lives. Everything Capstan keeps — the database and its WAL,
 * media, backups made beside it — shares that file system, and on a full one every write is
 * refused (507). So it is reported before it happens: in `GET /readyz` and as a warning line.
 */
import { statfsSync } from 'node:fs'

/** Low: under 1 GiB free, or under 5% of the file system when that is less (a small disk). */
const LOW_BYTES = 2 ** 30
const LOW_SHARE = 0.05

export interface DiskSpace {
  state: 'ok' | 'low'
  free_bytes: number
  total_bytes: number
}

/** The data directory's file system: free bytes (for an unprivileged user) and total; null when it cannot be read. */
export function diskSpace(dir: string): DiskSpace | null {
  try {
    const s = statfsSync(dir)
    const free = s.bavail * s.bsize
    const total = s.blocks * s.bsize
    return { state: free < Math.min(LOW_BYTES, total * LOW_SHARE) ? 'low' : 'ok', free_bytes: free, total_bytes: total }
  } catch {
    return null
  }
}
