/**
 * Where media files are kept, named by a 64-hex digest (the media record's `blob`: per workspace,
 * see blobOf), so identical bytes of one workspace are stored once: the data directory
 * (`LocalMediaStore`, the default) or an S3-compatible bucket (`S3MediaStore`,
 * CAPSTAN_MEDIA_STORE=s3://bucket/prefix). Files are scanned before they are put; a name is
 * checked before any path or key is built from it.
 */
import { mkdir, open, rename, rm, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { S3Client } from 'bun'
import type { MediaStoreConfig } from '../../config'

const SHA = /^[0-9a-f]{64}$/

/**
 * How long a bucket's answer is waited for — Bun's S3 client waits as long as its connection
 * stays open, and a bucket behind a network that drops packets, or a server that takes a request
 * and never answers, would hold an upload, a download or a send for many minutes: by then it is
 * taken for the bucket away (MediaStoreUnavailable). A put or a whole file waits longer with its
 * size (BUCKET_BYTES_PER_MS); a download, for its first bytes.
 */
export const BUCKET_ANSWER_MS = 15_000
/** The start's check of the bucket waits less: one that does not answer stops it with one line. */
export const BUCKET_CHECK_MS = 5_000
/** What a put or a whole file's read is given on top of BUCKET_ANSWER_MS: 1 s a MiB (a slow link's pace, not S3's). */
const BUCKET_BYTES_PER_MS = 1024 * 1024 / 1000
/** A whole file of unknown size: as for the largest upload one is likely to be. */
const BUCKET_WHOLE_FILE_MS = 120_000

/** A bucket's request not answered in time (see BUCKET_ANSWER_MS). */
export class BucketNoAnswer extends Error {
  readonly code = 'NoAnswer'
  constructor(readonly ms: number) {
    super(`no answer within ${ms / 1000} s`)
  }
}

/** `request`, or BucketNoAnswer once `ms` have passed without its answer (the request itself is left to end). */
export function answerWithin<T>(ms: number, request: Promise<T>): Promise<T> {
  let timer: Timer | undefined
  const late = new Promise<never>((_, failed) => {
    timer = setTimeout(() => failed(new BucketNoAnswer(ms)), ms)
  })
  return Promise.race([request, late]).finally(() => clearTimeout(timer))
}

/** The bucket could not be used — no answer, a server error, credentials refused; not a missing file: nothing was stored or read. */
export class MediaStoreUnavailable extends Error {
  constructor(readonly cause: unknown) {
    super(`the media store cannot be reached: ${String((cause as { code?: unknown })?.code ?? (cause as Error)?.message ?? cause)}`)
  }
}

export interface MediaStore {
  /** Make ready: create what is missing, remove what a crash left (`keepTemp`: only create). */
  init(opts?: { keepTemp?: boolean }): Promise<void>
  has(sha: string): Promise<boolean>
  /** Store the bytes under their name, durably; a no-op when they are already there. */
  put(sha: string, bytes: Uint8Array): Promise<void>
  /** The whole file (a send hands it to its network), or only its first `length` bytes. */
  bytes(sha: string, length?: number): Promise<Uint8Array>
  /** The file as an HTTP answer: streamed, with `headers`; one `Range: bytes=…` answered 206 (416 outside it). */
  response(sha: string, size: number, headers: Record<string, string>, range: string | null): Response | Promise<Response>
  remove(sha: string): Promise<void>
  /** Whether the store answers now, where it can be away (a bucket): for /readyz. */
  reachable?(): Promise<boolean>
}

/** The store CAPSTAN_MEDIA_STORE names. */
export function mediaStoreFor(config: MediaStoreConfig, mediaDir: string): MediaStore {
  return config.kind === 's3' ? new S3MediaStore(config) : new LocalMediaStore(mediaDir)
}

/**
 * CAPSTAN_DATA_DIR/media/<name[0:2]>/<name>. Every write goes to a temp file that is fsynced and
 * renamed into place; a partial file is removed on any error.
 */
export class LocalMediaStore implements MediaStore {
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

  async bytes(sha: string, length?: number) {
    const file = Bun.file(this.pathFor(sha))
    return new Uint8Array(await (length === undefined ? file : file.slice(0, length)).arrayBuffer())
  }

  // a file of the disk: Bun's server answers a Range itself
  response(sha: string, _size: number, headers: Record<string, string>): Response {
    return new Response(Bun.file(this.pathFor(sha)), { headers })
  }

  async remove(sha: string) {
    await rm(this.pathFor(sha), { force: true })
  }
}

/** A `Range` header's one range over `size` bytes: [first, last], 'unsatisfiable', or null (none, or one this does not answer: served whole). */
export function byteRange(header: string | null, size: number): [number, number] | 'unsatisfiable' | null {
  const m = header === null ? null : /^bytes=(\d*)-(\d*)$/.exec(header.trim())
  if (!m || (m[1] === '' && m[2] === '')) return null
  if (m[1] === '') {
    // the last n bytes
    const n = Number(m[2])
    return n === 0 ? 'unsatisfiable' : [Math.max(0, size - n), size - 1]
  }
  const first = Number(m[1])
  const last = m[2] === '' ? size - 1 : Math.min(Number(m[2]), size - 1)
  if (first >= size || first > last) return 'unsatisfiable'
  return [first, last]
}

/**
 * An S3-compatible bucket through Bun's S3 client: each file one object, <prefix><name>. A put is
 * one request that the service acknowledges once stored (S3's writes are durable when answered).
 */
export class S3MediaStore implements MediaStore {
  readonly client: S3Client
  readonly bucket: string
  readonly prefix: string

  constructor(
    config: Extract<MediaStoreConfig, { kind: 's3' }>,
    /** How long its answers are waited for (tests make it shorter): BUCKET_ANSWER_MS, BUCKET_CHECK_MS at the start's check. */
    readonly waits: { answerMs: number; checkMs: number } = { answerMs: BUCKET_ANSWER_MS, checkMs: BUCKET_CHECK_MS },
  ) {
    this.bucket = config.bucket
    this.prefix = config.prefix
    this.client = new S3Client({
      bucket: config.bucket,
      ...(config.endpoint ? { endpoint: config.endpoint } : {}),
      ...(config.region ? { region: config.region } : {}),
      ...(config.accessKeyId ? { accessKeyId: config.accessKeyId } : {}),
      ...(config.secretAccessKey ? { secretAccessKey: config.secretAccessKey } : {}),
      ...(config.sessionToken ? { sessionToken: config.sessionToken } : {}),
    })
  }

  private key(sha: string) {
    if (!SHA.test(sha)) throw new Error('invalid content address')
    return `${this.prefix}${sha}`
  }

  /** Nothing to create; the bucket's existence and the credentials are checked at start (`check`). */
  async init() {}

  /** Reach the bucket: null when it answers, else why not (for the one line a start stops with). */
  async check(): Promise<string | null> {
    const codeOf = (e: unknown) => String((e as { code?: unknown })?.code ?? '')
    try {
      // a listing of a name nothing has: the bucket and the credentials are checked, nothing is read
      await answerWithin(this.waits.checkMs, this.client.list({ prefix: `${this.prefix}.capstan-check`, maxKeys: 1 }))
    } catch (e) {
      const code = codeOf(e)
      if (e instanceof BucketNoAnswer) return `the bucket ${this.bucket} did not answer within ${e.ms / 1000} s; check S3_ENDPOINT (and that nothing between drops the traffic)`
      if (code === 'NoSuchBucket') return `the bucket ${this.bucket} does not exist`
      if (/AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|ERR_S3_MISSING_CREDENTIALS|ERR_S3_INVALID_SIGNATURE/.test(code)) return `the bucket ${this.bucket} refused the credentials (${code}); check S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY`
      return `the bucket ${this.bucket} cannot be reached (${code || (e as Error)?.message || e}); check S3_ENDPOINT`
    }
    // then what Capstan does with objects, once each, on an object of its own (instances starting
    // at once check apart; its name is outside the listing above, so no instance's listing meets
    // another's object as it goes): credentials allowed to list but not to write or delete would
    // otherwise pass here and fail every upload, retention and erasure later
    const probe = `${this.prefix}.capstan-probe-${crypto.randomUUID()}`
    const bytes = new TextEncoder().encode('capstan can write, read and delete here\n')
    // a refusal is said at once; anything else (a server error, a timeout) is tried twice more first
    const step = async (what: string, run: () => Promise<unknown>) => {
      for (let tries = 1; ; tries++) {
        try {
          await answerWithin(this.waits.checkMs, run())
          return null
        } catch (e) {
          const code = codeOf(e)
          if (/AccessDenied|Forbidden|NotImplemented|MethodNotAllowed/.test(code)) return `the bucket ${this.bucket} refused to ${what} an object (${code}): the credentials need s3:PutObject, s3:GetObject and s3:DeleteObject on its objects, and s3:ListBucket on it`
          if (tries === 3) return `the bucket ${this.bucket} could not ${what} an object (${code || (e as Error)?.message || e})`
          await Bun.sleep(200 * tries)
        }
      }
    }
    return (
      (await step('write', () => this.client.write(probe, bytes))) ??
      (await step('read', async () => {
        if (!Buffer.from(await this.client.file(probe).arrayBuffer()).equals(bytes)) throw new Error('what was read back is not what was written')
      })) ??
      (await step('delete', () => this.client.delete(probe)))
    )
  }

  /** The bucket answers a look at one key (whether it is there or not; one HEAD request). */
  async reachable() {
    return answerWithin(this.waits.answerMs, this.client.exists(`${this.prefix}.capstan-readyz`)).then(
      () => true,
      () => false,
    )
  }

  has(sha: string) {
    return away(answerWithin(this.waits.answerMs, this.client.exists(this.key(sha))))
  }

  async put(sha: string, bytes: Uint8Array) {
    if (await this.has(sha)) return
    await away(answerWithin(this.waits.answerMs + bytes.length / BUCKET_BYTES_PER_MS, this.client.write(this.key(sha), bytes)))
  }

  // the first bytes only: one ranged GET
  async bytes(sha: string, length?: number) {
    const file = this.client.file(this.key(sha))
    const ms = length === undefined ? BUCKET_WHOLE_FILE_MS : this.waits.answerMs + length / BUCKET_BYTES_PER_MS
    return new Uint8Array(await away(answerWithin(ms, (length === undefined ? file : file.slice(0, length)).arrayBuffer())))
  }

  // streamed as it arrives from the bucket: Bun's server sends a stream chunked, without a
  // Content-Length (a whole S3 file as the body would be a redirect to the bucket instead). The
  // answer waits for the first bytes, so a bucket that cannot be read is a 503, not a 200 cut off.
  async response(sha: string, size: number, { 'content-length': _, ...headers }: Record<string, string>, range: string | null): Promise<Response> {
    const file = this.client.file(this.key(sha))
    const r = byteRange(range, size)
    if (r === 'unsatisfiable') return new Response(null, { status: 416, headers: { 'content-range': `bytes */${size}` } })
    if (r === null) return new Response(await started(file.stream(), this.waits.answerMs), { headers: { ...headers, 'accept-ranges': 'bytes' } })
    const [first, last] = r
    return new Response(await started(file.slice(first, last + 1).stream(), this.waits.answerMs), {
      status: 206,
      headers: { ...headers, 'accept-ranges': 'bytes', 'content-range': `bytes ${first}-${last}/${size}` },
    })
  }

  async remove(sha: string) {
    await away(answerWithin(this.waits.answerMs, this.client.delete(this.key(sha))))
  }
}

/** A bucket's failure as MediaStoreUnavailable (no answer, a server error, credentials refused); a missing object stays what it is. */
async function away<T>(request: Promise<T>): Promise<T> {
  try {
    return await request
  } catch (e) {
    const code = String((e as { code?: unknown })?.code ?? '')
    if (code === 'NoSuchKey' || code === 'ERR_S3_INVALID_PATH') throw e
    throw new MediaStoreUnavailable(e)
  }
}

/**
 * The stream once its first chunk has come (a failure before it, or no chunk within `ms`:
 * MediaStoreUnavailable), the rest passed on as it arrives — a bucket that stops sending halfway
 * for `ms` ends it with an error (the client sees the download cut, never a wait without end).
 */
async function started(stream: ReadableStream<Uint8Array>, ms: number): Promise<ReadableStream<Uint8Array>> {
  const reader = stream.getReader()
  // each chunk within `ms`; a read that fails or does not come ends the bucket's stream
  const read = () =>
    answerWithin(ms, reader.read()).catch((e) => {
      void reader.cancel().catch(() => {})
      throw e
    })
  const first = await away(read())
  return new ReadableStream<Uint8Array>({
    start(controller) {
      if (first.done) controller.close()
      else controller.enqueue(first.value)
    },
    async pull(controller) {
      try {
        const next = await read()
        if (next.done) controller.close()
        else controller.enqueue(next.value)
      } catch (e) {
        controller.error(e)
      }
    },
    cancel(reason) {
      return reader.cancel(reason)
    },
  })
}
