/** The part of the `s3rver` package (no types of its own) the tests use. */
declare module 's3rver' {
  export default class S3rver {
    constructor(options: { port?: number; address?: string; directory: string; silent?: boolean; configureBuckets?: { name: string; configs: unknown[] }[] })
    run(): Promise<{ address: string; port: number }>
    close(): Promise<void>
  }
}
