/**
 * A private S3-compatible server for tests (the `s3rver` package, in this process, on a free
 * port, its objects in a temp folder), with the environment a Capstan needs to keep its media there.
 * s3rver is patched (patches/, applied by `bun install`) to page listings under Bun as under Node:
 * its continuation token's cipher by the name Bun knows (`des-cbc`), and its folders walked in
 * sorted order (Node's readdir sorts, Bun's does not), so a listing of more than 1,000 keys works;
 * and so that a put and a delete at once in one folder (instances starting together, each
 * checking the bucket with an object of its own) neither fail the delete nor crash the server: a
 * put answers once its file is written (or fails with its error), and a delete prunes folders
 * another delete may be pruning too.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { S3Client } from 'bun'
import S3rver from 's3rver'

export class TestS3 {
  private constructor(
    private server: S3rver | null,
    private readonly dir: string,
    private readonly port: number,
    private readonly buckets: string[],
  ) {}

  get endpoint() {
    return `http://127.0.0.1:${this.port}`
  }

  /** Started with these buckets made. */
  static async start(buckets: string[]): Promise<TestS3> {
    const dir = mkdtempSync(join(tmpdir(), 'capstan-s3-'))
    const server = TestS3.serve(dir, 0, buckets)
    const { port } = await server.run()
    return new TestS3(server, dir, port, buckets)
  }

  private static serve(dir: string, port: number, buckets: string[]) {
    return new S3rver({ port, address: '127.0.0.1', directory: dir, silent: true, configureBuckets: buckets.map((name) => ({ name, configs: [] })) })
  }

  /** The server goes away (its objects stay on disk), as a bucket's service in an outage. */
  async down() {
    const server = this.server
    this.server = null
    // the clients' kept-alive connections too: an outage answers nobody
    const http = (server as unknown as { httpServer?: { closeAllConnections?: () => void } } | null)?.httpServer
    const closed = server?.close()
    http?.closeAllConnections?.()
    await closed
  }

  /** Back on the same port with the same objects (the port may take a moment to be free). */
  async up() {
    if (this.server) return
    for (let tries = 0; ; tries++) {
      const server = TestS3.serve(this.dir, this.port, this.buckets)
      try {
        await server.run()
        this.server = server
        return
      } catch (e) {
        if (tries >= 50) throw e
        await Bun.sleep(100)
      }
    }
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
    const keys: string[] = []
    let token: string | undefined
    do {
      const r = await this.client(bucket).list({ prefix, maxKeys: 1000, ...(token ? { continuationToken: token } : {}) })
      keys.push(...(r.contents ?? []).map((o) => o.key))
      token = r.isTruncated ? r.nextContinuationToken : undefined
    } while (token)
    return keys.sort()
  }

  async stop() {
    await this.server?.close()
    rmSync(this.dir, { recursive: true, force: true })
  }
}
