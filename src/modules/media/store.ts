/**
 * The local media store: CAPSTAN_DATA_DIR/media/<name[0:2]>/<name>, named by a 64-hex digest (the
 * media record's `blob`: per workspace, see blobOf), so identical bytes of one workspace are
 * stored once. Every write goes to a temp file that is fsynced and renamed
 * into place; a partial file is removed on any error. Names are validated before any path is built.
 */
import { mkdir, open, rename, rm, stat } from 'node:fs/promises'
import { join } from 'node:path'

const SHA = /^[0-9a-f]{64}$/

export class MediaStore {
  private readonly tmp: string

  constructor(readonly root: string) {
    this.tmp = join(root, 'tmp')
  }

  /** Create the folders and remove temp files a crash may have left (`keepTemp`: only create them). */
  async init({ keepTemp = false } = {}) {
    if (!keepTemp) await rm(this.tmp, { recursive: true, force: true })
    await mkdir(this.tmp, { recursive: true, mode: 0o700 })
  }

  pathFor(sha: string): string {
    if (!SHA.test(sha)) throw new Error('invalid content address')
    return join(this.root, sha.slice(0, 2), sha)
  }

  async has(sha: string): Promise<boolean> {
    return stat(this.pathFor(sha)).then(
      (s) => s.isFile(),
      () => false,
    )
  }

  /** Store the bytes under their SHA-256 (durably); a no-op when they are already there. */
  async put(sha: string, bytes: Uint8Array): Promise<void> {
    const final = this.pathFor(sha)
    if (await this.has(sha)) return
    const temp = join(this.tmp, `${crypto.randomUUID()}.part`)
    try {
      const fh = await open(temp, 'wx', 0o600)
      try {
        let off = 0
        while (off < bytes.length) off += (await fh.write(bytes, off, bytes.length - off)).bytesWritten
        await fh.sync()
      } finally {
        await fh.close()
      }
      const dir = join(this.root, sha.slice(0, 2))
      await mkdir(dir, { recursive: true, mode: 0o700 })
      await rename(temp, final)
      const dh = await open(dir, 'r')
      try {
        await dh.sync()
      } finally {
        await dh.close()
      }
    } catch (e) {
      await rm(temp, { force: true })
      throw e
    }
  }

  file(sha: string) {
    return Bun.file(this.pathFor(sha))
  }

  async remove(sha: string) {
    await rm(this.pathFor(sha), { force: true })
  }
}
