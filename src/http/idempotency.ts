/**
 * Idempotency-Key for sends (spec §4, CONTRACT §4), reusable by every send endpoint.
 *
 * The fingerprint is SHA-256 over method, path and the parsed body with keys sorted (files by
 * name, type and SHA-256), so the same multipart request with a new boundary matches. A record
 * is kept 24 h per (API key, method, path, key). A successful send stores its record in the same
 * transaction as the message (so a crash can never leave one without the other); a refusal
 * (404/422) is stored right after. A second request while the first runs gets 409.
 */
import { type Queries, stmt } from '../db/engine'
import type { Deps } from '../deps'
import { ApiError, conflict } from './errors'
import { LEASE_MS } from '../scheduler/leases'

export const IDEMPOTENCY_TTL_MS = 86_400_000
/** A placeholder older than this is of a request whose instance died: the key may be taken again. */
const IN_PROGRESS_MS = 30_000
const inProgress = () => conflict('idempotency_in_progress', 'A request with this Idempotency-Key is still being processed.')
const KEY_FORMAT = /^[A-Za-z0-9._:-]{8,255}$/

export interface Ticket {
  id: string
  apiKeyId: string
  method: string
  path: string
  key: string
  fingerprint: string
}

export type Begin = { replay: { status: number; body: string } } | { ticket: Ticket } | null

async function canonical(value: unknown): Promise<unknown> {
  if (value instanceof File) {
    const sha = Bun.CryptoHasher.hash('sha256', new Uint8Array(await value.arrayBuffer())).toString('hex')
    return { $file: { name: value.name, type: value.type, sha256: sha } }
  }
  if (Array.isArray(value)) return Promise.all(value.map(canonical))
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = Object.create(null) // every key kept, `__proto__` included
    for (const k of Object.keys(value).sort()) out[k] = await canonical((value as Record<string, unknown>)[k])
    return out
  }
  return value
}

/** Whether the instance a placeholder names was seen since `?` (see NumberLeases.owner): alive. */
const HOLDER_SEEN = 'EXISTS (SELECT 1 FROM instances i WHERE i.name = idempotency_keys.claimed_by AND i.seen_at > ?)'

const Q = {
  // (with whether the instance that holds a placeholder is alive; one of an older Capstan names none)
  get: stmt(
    `SELECT fingerprint, status, body, created_at, claimed_by IS NULL OR ${HOLDER_SEEN} AS alive
     FROM idempotency_keys WHERE api_key_id = ? AND method = ? AND path = ? AND idem_key = ?`,
  ),
  // (a record past its 24 h is replaced)
  put: stmt(
    `INSERT INTO idempotency_keys (api_key_id, method, path, idem_key, fingerprint, status, body, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)
     ON CONFLICT (api_key_id, method, path, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status, body = excluded.body, created_at = excluded.created_at`,
  ),
  purge: stmt('DELETE FROM idempotency_keys WHERE created_at <= ?'),
  // instances sharing the database: a request takes its key with a placeholder (status 0) naming
  // its instance before it runs — unless a response is stored (not expired) or another request
  // holds it (not stale: its instance alive, and for at most IN_PROGRESS_MS)
  claim: stmt(
    `INSERT INTO idempotency_keys (api_key_id, method, path, idem_key, fingerprint, status, body, created_at, claimed_by) VALUES (?, ?, ?, ?, ?, 0, '', ?, ?)
     ON CONFLICT (api_key_id, method, path, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, status = 0, body = '', created_at = excluded.created_at, claimed_by = excluded.claimed_by
     WHERE idempotency_keys.created_at <= ? OR (idempotency_keys.status = 0 AND (idempotency_keys.created_at <= ?
       OR (idempotency_keys.claimed_by IS NOT NULL AND NOT ${HOLDER_SEEN})))`,
  ),
  // the response, in place of this request's own placeholder — none if another instance took the
  // key over meanwhile (this one stood still past its hold): then nothing of this request is written
  settle: stmt(
    `UPDATE idempotency_keys SET fingerprint = ?, status = ?, body = ?, created_at = ?, claimed_by = NULL
     WHERE api_key_id = ? AND method = ? AND path = ? AND idem_key = ? AND status = 0 AND claimed_by = ?`,
  ),
  unclaim: stmt('DELETE FROM idempotency_keys WHERE api_key_id = ? AND method = ? AND path = ? AND idem_key = ? AND status = 0 AND claimed_by = ?'),
  forget: stmt(
    'DELETE FROM idempotency_keys WHERE api_key_id IN (SELECT id FROM api_keys WHERE workspace_id = ?) AND instr(body, ?) > 0',
    'DELETE FROM idempotency_keys WHERE api_key_id IN (SELECT id FROM api_keys WHERE workspace_id = $1) AND strpos(body, $2) > 0',
  ),
}

export class Idempotency {
  private inflight = new Set<string>()

  /** `instance`: this instance's name among those sharing the database (NumberLeases.owner). */
  constructor(
    private readonly deps: Deps,
    private readonly instance: string,
  ) {}

  /** Forget the workspace's stored responses that mention `text` (an erased contact's id), inside a write. */
  async forgetMentioningIn(tx: Queries, workspaceId: string, text: string) {
    await tx.run(Q.forget, workspaceId, text)
  }

  /**
   * Look the key up. null: no header, just run. replay: answer with the stored response.
   * ticket: run, then record. Throws 422 for a malformed key, 409 for a conflict or a request in progress.
   */
  async begin(apiKeyId: string, method: string, path: string, header: string | null | undefined, body: unknown): Promise<Begin> {
    if (header === undefined || header === null) return null
    if (!KEY_FORMAT.test(header)) throw new ApiError(422, 'invalid_idempotency_key', 'The Idempotency-Key header must be 8 to 255 characters from A-Z, a-z, 0-9, dot, underscore, colon and hyphen.')
    const fingerprint = Bun.CryptoHasher.hash('sha256', JSON.stringify([method, path, await canonical(body ?? {})])).toString('hex')
    const id = JSON.stringify([apiKeyId, method, path, header])
    const { engine } = this.deps
    const answer = async (): Promise<Begin> => {
      const now = this.deps.clock.now()
      const stored = await engine.get<{ fingerprint: string; status: number; body: string; created_at: number; alive: boolean | number }>(Q.get, Date.now() - LEASE_MS, apiKeyId, method, path, header)
      if (stored && stored.status !== 0 && stored.created_at > now - IDEMPOTENCY_TTL_MS) {
        if (stored.fingerprint !== fingerprint) throw conflict('idempotency_conflict', 'This Idempotency-Key was already used with a different request body.')
        return { replay: { status: stored.status, body: stored.body } }
      }
      // (a placeholder of another instance's request still running)
      if (this.inflight.has(id) || (stored?.status === 0 && stored.created_at > now - IN_PROGRESS_MS && stored.alive)) throw inProgress()
      return null
    }
    const known = await answer()
    if (known) return known
    if (engine.shared) {
      const now = this.deps.clock.now()
      const took = await engine.write((tx) => tx.run(Q.claim, apiKeyId, method, path, header, fingerprint, now, this.instance, now - IDEMPOTENCY_TTL_MS, now - IN_PROGRESS_MS, Date.now() - LEASE_MS))
      // another instance took it between the look and the claim: its answer, or 409 while it runs
      if (!took) return (await answer()) ?? Promise.reject(inProgress())
    }
    if (this.inflight.has(id)) throw inProgress()
    this.inflight.add(id)
    return { ticket: { id, apiKeyId, method, path, key: header, fingerprint } }
  }

  /** Store the response inside the write that made it. */
  async recordIn(tx: Queries, t: Ticket, status: number, body: string) {
    if (!this.deps.engine.shared) await tx.run(Q.put, t.apiKeyId, t.method, t.path, t.key, t.fingerprint, status, body, this.deps.clock.now())
    // (another instance took the key over while this one stood still: what this request wrote is undone, and it answers 409)
    else if ((await tx.run(Q.settle, t.fingerprint, status, body, this.deps.clock.now(), t.apiKeyId, t.method, t.path, t.key, this.instance)) === 0) throw inProgress()
  }

  /** Store a refusal (nothing else was written). */
  async record(t: Ticket, status: number, body: string) {
    await this.deps.engine.write((tx) => this.recordIn(tx, t, status, body))
  }

  /** The request is answered: its key is free again here, and a placeholder it left (no response stored) goes. */
  async end(t: Ticket | undefined) {
    if (!t) return
    this.inflight.delete(t.id)
    if (this.deps.engine.shared) await this.deps.engine.write((tx) => tx.run(Q.unclaim, t.apiKeyId, t.method, t.path, t.key, this.instance))
  }

  /** Forget records older than 24 h. */
  purge(): Promise<number> {
    return this.deps.engine.write((tx) => tx.run(Q.purge, this.deps.clock.now() - IDEMPOTENCY_TTL_MS))
  }

  /**
   * Run a send under an optional Idempotency-Key. `run` gets a function to call inside its write
   * with the response body; replays and stored refusals come back as a Response-like result.
   */
  async handle(
    opts: { apiKeyId: string; method: string; path: string; header: string | null | undefined; body: unknown },
    run: (record: (tx: Queries, status: number, body: unknown) => Promise<string>) => Promise<{ status: number; body: string }>,
  ): Promise<{ status: number; body: string; replayed: boolean }> {
    // no Idempotency-Key: nothing to look up, record or release
    if (opts.header === null || opts.header === undefined) return { ...(await run(async (_tx, _status, body) => JSON.stringify(body))), replayed: false }
    const begun = await this.begin(opts.apiKeyId, opts.method, opts.path, opts.header, opts.body)
    if (begun && 'replay' in begun) return { ...begun.replay, replayed: true }
    const ticket = begun?.ticket
    try {
      const out = await run(async (tx, status, body) => {
        const text = JSON.stringify(body)
        if (ticket) await this.recordIn(tx, ticket, status, text)
        return text
      })
      return { ...out, replayed: false }
    } catch (e) {
      if (ticket && e instanceof ApiError && (e.status === 404 || e.status === 422)) await this.record(ticket, e.status, JSON.stringify(e.toBody()))
      throw e
    } finally {
      await this.end(ticket).catch(() => {})
    }
  }

  /**
   * A send endpoint's whole answer: run `queue` under the optional Idempotency-Key; it calls
   * `inTx(tx, row)` inside the write that queued the message, which records the 202 body. Sets the
   * status and headers (Idempotency-Replayed on a replay) and returns the JSON text.
   */
  async send202<R>(
    opts: { apiKeyId: string; method: string; path: string; header: string | null | undefined; body: unknown },
    set: { status?: number | string; headers: Record<string, string | number> },
    queue: (inTx: (tx: Queries, row: R) => Promise<void>) => Promise<unknown>,
    present: (row: R) => unknown,
  ): Promise<string> {
    const out = await this.handle(opts, async (record) => {
      let text = ''
      await queue(async (tx, row) => {
        text = await record(tx, 202, { data: present(row) })
      })
      return { status: 202, body: text }
    })
    set.status = out.status
    set.headers['content-type'] = 'application/json; charset=utf-8'
    if (out.replayed) set.headers['idempotency-replayed'] = 'true'
    return out.body
  }
}
