/**
 * A small tmpfs for tests of a full disk: a real file system that fills up, mounted on a
 * directory of the test's. Root is needed; CI and these machines run as root.
 */
import { mkdirSync } from 'node:fs'

/** Mounts a tmpfs of `size` (`100k`, `3m`) on `dir`, created if missing. */
export function mountTmpfs(dir: string, size: string) {
  mkdirSync(dir, { recursive: true })
  const m = Bun.spawnSync(['mount', '-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir])
  if (m.exitCode !== 0) throw new Error(`this test needs to mount a tmpfs: ${m.stderr.toString()}`)
}

/** Gives the tmpfs on `dir` room: its new `size`. Whether that worked. */
export const growTmpfs = (dir: string, size: string) => Bun.spawnSync(['mount', '-o', `remount,size=${size}`, dir]).exitCode === 0

export const unmount = (dir: string) => Bun.spawnSync(['umount', dir])
