/**
 * Encryption at rest for secrets Capstan must be able to read back (webhook signing secrets).
 * AES-256-GCM with a key from CAPSTAN_SECRET_KEY (hashed to 32 bytes), or else a random key in a
 * key file created on first start with mode 0600: CAPSTAN_SECRET_KEY_FILE, outside the data
 * directory (backups then never hold it), or CAPSTAN_DATA_DIR/secret.key (backups copy it). Without
 * the key, stored secrets cannot be read.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto'
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'

/** The key file cannot be used as configured: the start stops with this one line. */
export class SecretKeyMisplaced extends Error {}

export class SecretBox {
  constructor(private readonly key: Uint8Array) {}

  /**
   * The key: from `fromEnv` (CAPSTAN_SECRET_KEY, a passphrase hashed to 32 bytes), else from
   * `keyFile`, created on first start with mode 0600 (`secret.key` in the data directory unless
   * CAPSTAN_SECRET_KEY_FILE names one outside it). A key file outside the data directory while
   * `secret.key` is still inside is refused (SecretKeyMisplaced): the key would either be a new
   * one that cannot open the stored secrets, or still be carried by every backup.
   */
  static load(dataDir: string, fromEnv: string | null, keyFile: string = join(dataDir, 'secret.key')): SecretBox {
    if (fromEnv) return new SecretBox(new Uint8Array(Bun.CryptoHasher.hash('sha256', fromEnv) as Buffer))
    const inside = join(dataDir, 'secret.key')
    if (keyFile !== inside && existsSync(inside)) {
      throw new SecretKeyMisplaced(
        existsSync(keyFile)
          ? `${inside} is still in the data directory, so backups carry it; the key is now read from ${keyFile}: remove ${inside} once both hold the same key`
          : `CAPSTAN_SECRET_KEY_FILE names ${keyFile}, which does not exist, while the data directory holds its key in ${inside}: move that file there (mv ${inside} ${keyFile})`,
      )
    }
    if (!existsSync(keyFile)) {
      mkdirSync(dirname(keyFile), { recursive: true, mode: 0o700 })
      writeFileSync(keyFile, randomBytes(32).toString('base64') + '\n', { mode: 0o600, flag: 'wx' })
    }
    const key = Buffer.from(readFileSync(keyFile, 'utf8').trim(), 'base64')
    if (key.length !== 32) throw new SecretKeyMisplaced(`${keyFile} does not hold a 32-byte key`)
    return new SecretBox(key)
  }

  /**
   * A keyed digest of `text` for `purpose` (hex HMAC-SHA256 under a key derived from this box's):
   * lets a value be recognised later without being kept — a phone number's digest cannot be
   * turned back into the number by trying every number without the key.
   */
  digest(purpose: string, text: string): string {
    const key = new Bun.CryptoHasher('sha256', this.key).update(purpose).digest()
    return new Bun.CryptoHasher('sha256', key).update(text).digest('hex')
  }

  seal(plain: string): string {
    const iv = randomBytes(12)
    const c = createCipheriv('aes-256-gcm', this.key, iv)
    const body = Buffer.concat([c.update(plain, 'utf8'), c.final()])
    return `v1.${iv.toString('base64')}.${Buffer.concat([body, c.getAuthTag()]).toString('base64')}`
  }

  open(sealed: string): string {
    const [v, ivText, dataText] = sealed.split('.')
    if (v !== 'v1' || !ivText || !dataText) throw new Error('unknown sealed secret format')
    const data = Buffer.from(dataText, 'base64')
    const d = createDecipheriv('aes-256-gcm', this.key, Buffer.from(ivText, 'base64'))
    d.setAuthTag(data.subarray(data.length - 16))
    return Buffer.concat([d.update(data.subarray(0, data.length - 16)), d.final()]).toString('utf8')
  }
}
