/**
 * A private S3-compatible server for tests (the `s3rver` package, in this process, on a free
 * port, its objects in a temp folder), with the environment a Capstan needs to keep its media there.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { S3Client } from 'bun'
import S3rver from 's3rver'

export class TestS3 {
  private constructor(
    private readonly server: S3rver,
    private readonly dir: string,
    readonly endpoint: string,
  ) {}

  /** Started with these buckets made. */
  static async start(buckets: string[]): Promise<TestS3> {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-s3-'))
    const server = new S3rver({ port: 0, address: '127.0.0.1', directory: dir, silent: true, configureBuckets: buckets.map((name) => ({ name, configs: [] })) })
    const { port } = await server.run()
    return new TestS3(server, dir, `http://127.0.0.1:${port}`)
  }

  /** The variables Capstan (and Bun's S3 client) read: s3rver takes its own fixed key pair. */
  env(store: string): Record<string, string> {
    return { CAPSTAN_MEDIA_STORE: store, S3_ENDPOINT: this.endpoint, S3_ACCESS_KEY_ID: 'S3RVER', S3_SECRET_ACCESS_KEY: 'S3RVER', S3_REGION: 'us-east-1' }
  }

  client(bucket: string) {
    return new S3Client({ endpoint: this.endpoint, bucket, accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER', region: 'us-east-1' })
  }

  /** Every key in the bucket under `prefix`. */
  async keys(bucket: string, prefix = ''): Promise<string[]> {
    const r = await this.client(bucket).list({ prefix, maxKeys: 1000 })
    return (r.contents ?? []).map((o) => o.key).sort()
  }

  async stop() {
    await this.server.close()
    rmSync(this.dir, { recursive: true, force: true })
  }
}
