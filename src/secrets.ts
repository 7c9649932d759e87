/**
 * Encryption at rest for secrets Capstan must be able to read back (webhook signing secrets).
 * AES-256-GCM with a key from CAPSTAN_SECRET_KEY (hashed to 32 bytes), or else a random key in
 * CAPSTAN_DATA_DIR/secret.key created on first start with mode 0600. Back that file up with the
 * database: without it stored secrets cannot be read.
 */
import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto'
import { existsSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'

export class SecretBox {
  constructor(private readonly key: Uint8Array) {}

  static load(dataDir: string, fromEnv: string | null): SecretBox {
    if (fromEnv) return new SecretBox(new Uint8Array(Bun.CryptoHasher.hash('sha256', fromEnv) as Buffer))
    const path = join(dataDir, 'secret.key')
    if (!existsSync(path)) writeFileSync(path, randomBytes(32).toString('base64') + '\n', { mode: 0o600, flag: 'wx' })
    const key = Buffer.from(readFileSync(path, 'utf8').trim(), 'base64')
    if (key.length !== 32) throw new Error(`${path} does not hold a 32-byte key`)
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
