/**
 * API keys: `cap_<key_id>.<48-char secret>`. Only `cap_<key_id>` is stored in clear; the secret
 * is kept as its SHA-256 (48 random alphanumerics carry ~285 bits, so a fast hash is enough).
 * Authentication hashes the presented secret and compares in constant time whether or not the
 * key id exists, so unknown and revoked keys cost the same and answer the same.
 */
import { timingSafeEqual } from 'node:crypto'
import type { BlockList } from 'node:net'
import type { Queries } from '../../db/engine'
import type { Deps } from '../../deps'
import { conflict, notFound, validationFailed } from '../../http/errors'
import { iso, randomString, uuid } from '../../http/format'
import type { WorkspaceRow } from '../workspaces/store'
import type { WorkspaceService } from '../workspaces/service'
import { ipRanges, isIpRange } from '../../http/ip-ranges'
import { ALL_SCOPES, type AdminKey, type Scope } from './model'
import type { AuditRepo, Operator } from '../audit/repo'
import { KeyStore, type KeyRow } from './store'

/** `cap_` + 16-char key id + `.` + 48-char secret: the id is [4, 20), the secret [21, 69). */
const KEY_FORMAT = /^cap_[a-z0-9]{16}\.[A-Za-z0-9]{48}$/
const DUMMY_HASH = sha256('capstan-dummy-secret-for-constant-time-compare-000')

export function sha256(text: string): Uint8Array {
  return Bun.CryptoHasher.hash('sha256', text) as Uint8Array
}

/**
 * The hash of a presented secret is written here, not into a new buffer per request: buffers are
 * memory outside the JS heap, and one per request makes the collector run far more often.
 * Safe to share — it is filled and compared synchronously.
 */
const presentedHash = new Uint8Array(32)

/** A request's key and its workspace. */
export interface Authenticated {
  key: AuthenticatedKey
  workspace: WorkspaceRow
}

export interface AuthenticatedKey {
  id: string
  keyId: string
  workspaceId: string
  scopes: ReadonlySet<string>
  /** The addresses it may be used from (see ip-ranges.ts); null: any. */
  allowedFrom: BlockList | null
}

interface CachedKey {
  secretHash: Uint8Array
  status: KeyRow['status']
  expiresAt: number | null
  key: AuthenticatedKey
  /** its last use (ms), kept here per request and written by `flushUse`; 0 before any */
  usedAt: number
  /** the last use already written */
  writtenAt: number
}

/** Keys kept in memory after their first use; writes below drop them, so revocation is immediate. */
const CACHE_LIMIT = 10_000

export class KeyService {
  private readonly store: KeyStore
  private cache = new Map<string, CachedKey>()

  constructor(
    private readonly deps: Deps,
    private readonly workspaces: WorkspaceService,
    private readonly audit: AuditRepo,
  ) {
    this.store = new KeyStore(deps.engine)
  }

  /** Admin shape; never includes the secret or its hash. */
  toAdmin(row: KeyRow): AdminKey {
    return {
      id: row.id,
      workspace_id: row.workspace_id,
      name: row.name,
      prefix: `cap_${row.key_id}`,
      scopes: JSON.parse(row.scopes) as Scope[],
      status: row.status,
      created_at: iso(row.created_at),
      expires_at: iso(row.expires_at),
      revoked_at: iso(row.revoked_at),
      allowed_ips: row.allowed_ips === null ? null : (JSON.parse(row.allowed_ips) as string[]),
      // the use in memory may be newer than the one written (see flushUse)
      last_used_at: iso(Math.max(row.last_used_at ?? 0, this.cache.get(row.key_id)?.usedAt ?? 0) || null),
    }
  }
  /** The workspace's keys, newest first. */
  /** A key's name, or null when there is no such key (removed). */
  async nameOf(id: string): Promise<string | null> {
    return (await this.store.get(id))?.name ?? null
  }

  listForWorkspace(workspaceId: string): Promise<KeyRow[]> {
    return this.store.listForWorkspace(workspaceId)
  }

  /**
   * Write each key's last use (kept in memory per request: no write on the request path). Runs
   * every minute and when the server stops, so the time shown is never more than a minute old.
   */
  async flushUse() {
    const used: { e: CachedKey; at: number }[] = []
    for (const e of this.cache.values()) if (e.usedAt > e.writtenAt) used.push({ e, at: e.usedAt })
    if (used.length === 0) return
    // a transaction of its own, its rows in one order: other instances write the same keys' uses
    used.sort((a, b) => (a.e.key.id < b.e.key.id ? -1 : 1))
    await this.deps.engine.writeApart(async (tx) => {
      for (const { e, at } of used) await this.store.used(tx, e.key.id, at)
    })
    for (const { e, at } of used) e.writtenAt = Math.max(e.writtenAt, at)
  }

  /** Inside a write that drops a key from the cache: keep its last use first. */
  private async keepUseIn(tx: Queries, keyId: string) {
    const e = this.cache.get(keyId)
    this.cache.delete(keyId)
    if (e && e.usedAt > e.writtenAt) await this.store.used(tx, e.key.id, e.usedAt)
  }

  /** Issue a key; returns the record and the plaintext (shown once). */
  async create(workspaceId: string, input: { name: string; scopes?: string[]; expires_at?: string | null; allowed_ips?: string[] | null }, by: Operator | null = null) {
    const now = this.deps.clock.now()
    const ranges = input.allowed_ips?.length ? [...new Set(input.allowed_ips)] : null
    const bad = (input.allowed_ips ?? []).flatMap((r, i) => (isIpRange(r) ? [] : [i]))
    if (bad.length) throw validationFailed(Object.fromEntries(bad.map((i) => [`allowed_ips.${i}`, ['The allowed_ips entry must be an IP address or a CIDR range (e.g. 203.0.113.7, 10.0.0.0/8, 2001:db8::/32).']])))
    let expiresAt: number | null = null
    if (input.expires_at) {
      expiresAt = Date.parse(input.expires_at)
      if (expiresAt <= now) throw validationFailed({ expires_at: ['The expires_at field must be a time in the future.'] })
    }
    // Scopes are stamped now: "all" means the twelve that exist today, in the spec's order.
    const scopes = input.scopes && input.scopes.length > 0 ? ALL_SCOPES.filter((sc) => input.scopes!.includes(sc)) : [...ALL_SCOPES]
    const keyId = randomString(16, 'abcdefghijklmnopqrstuvwxyz0123456789')
    const secret = randomString(48)
    const row: KeyRow = {
      id: uuid(),
      workspace_id: workspaceId,
      key_id: keyId,
      secret_hash: sha256(secret),
      name: input.name,
      scopes: JSON.stringify(scopes),
      status: 'active',
      created_at: now,
      expires_at: expiresAt,
      revoked_at: null,
      allowed_ips: ranges === null ? null : JSON.stringify(ranges),
    }
    await this.deps.engine.write(async (tx) => {
      await this.workspaces.find(workspaceId)
      await this.store.insert(tx, row)
      await this.audit.addIn(tx, workspaceId, 'api_key.created', row.id, now, null, by)
    })
    return { ...this.toAdmin(row), key: `cap_${keyId}.${secret}` }
  }

  async revoke(id: string, by: Operator | null = null): Promise<KeyRow> {
    // listened for from inside the write: its announcement can come back before the write resolves
    let propagated: Promise<void> | null = null
    const row = await this.deps.engine.write(async (tx) => {
      const row = await this.store.get(id, tx)
      if (!row) throw notFound('API key')
      await this.keepUseIn(tx, row.key_id)
      const now = this.deps.clock.now()
      // (revoked meanwhile by another request, on another instance: that one audits and announces it)
      if (row.status === 'active' && (await this.store.revoke(tx, id, now))) {
        await this.audit.addIn(tx, row.workspace_id, 'api_key.revoked', id, now, null, by)
        await this.deps.engine.announce(tx, `key:${row.key_id}`)
        propagated = this.deps.engine.propagated(`key:${row.key_id}`)
      }
      return (await this.store.get(id, tx))!
    })
    // and again once it is committed: a lookup that read the key meanwhile (on an engine whose
    // reads can come between, PostgreSQL) must not keep it
    this.cache.delete(row.key_id)
    // refused on every instance before the operator hears it is revoked
    if (propagated) await propagated
    return row
  }

  /** Remove a revoked key from the list (409 while it is still active). */
  async remove(id: string, by: Operator | null = null) {
    const keyId = await this.deps.engine.write(async (tx) => {
      const row = await this.store.get(id, tx)
      if (!row) throw notFound('API key')
      if (row.status !== 'revoked') throw conflict('key_active', 'Only a revoked key can be removed; revoke it first.')
      this.cache.delete(row.key_id)
      await this.store.remove(tx, id)
      await this.audit.addIn(tx, row.workspace_id, 'api_key.removed', id, this.deps.clock.now(), null, by)
      await this.deps.engine.announce(tx, `key:${row.key_id}`)
      return row.key_id
    })
    this.cache.delete(keyId)
  }

  /**
   * Resolve a bearer token to its key and workspace. Returns null for anything that is not an
   * active, unexpired key (the caller answers 401), doing the same hashing work every time. A key
   * in memory (every key after its first use) is answered at once, and so is any other where the
   * engine reads at once (SQLite); elsewhere it is read from the database first (a promise).
   */
  authenticate(token: string): Authenticated | null | Promise<Authenticated | null> {
    // test() then fixed slices: no match array per request
    if (!KEY_FORMAT.test(token)) return null
    const keyId = token.slice(4, 20)
    const hit = this.cache.get(keyId)
    if (hit) return this.admit(token, hit)
    const row = this.store.byKeyIdNow(keyId)
    if (row !== undefined) return this.admit(token, row && this.remember(row))
    return this.store.byKeyId(keyId).then(async (r) => {
      // its workspace too, when another instance made it a moment ago
      if (r) await this.workspaces.fetch(r.workspace_id)
      return this.admit(token, r && this.remember(r))
    })
  }

  /** Another instance revoked or removed the key: it is read again at its next use. */
  forget(keyId: string) {
    this.cache.delete(keyId)
  }

  /** Every key is read again at its next use (changes may have been missed: see Engine.listen). */
  forgetAll() {
    this.cache.clear()
  }

  /** Whether `authenticate` always answers at once (never a promise): the engine reads in the same turn. */
  get answersAtOnce() {
    return this.store.answersNow
  }

  private admit(token: string, entry: CachedKey | null): Authenticated | null {
    const presented = Bun.SHA256.hash(token.slice(21), presentedHash) as Uint8Array
    const same = timingSafeEqual(presented, entry ? entry.secretHash : DUMMY_HASH)
    if (!entry || !same || entry.status !== 'active') return null
    const now = this.deps.clock.now()
    if (entry.expiresAt !== null && entry.expiresAt <= now) return null
    const workspace = this.workspaces.cached(entry.key.workspaceId)
    if (!workspace) return null
    entry.usedAt = now
    return { key: entry.key, workspace }
  }

  /** A key read from the database, kept in memory while it is active. */
  private remember(row: KeyRow): CachedKey {
    // read while another request had it read too: one entry, so a use is never counted twice
    const known = this.cache.get(row.key_id)
    if (known) return known
    const entry: CachedKey = {
      secretHash: row.secret_hash,
      status: row.status,
      expiresAt: row.expires_at,
      key: {
        id: row.id,
        keyId: row.key_id,
        workspaceId: row.workspace_id,
        scopes: new Set(JSON.parse(row.scopes) as Scope[]),
        allowedFrom: row.allowed_ips === null ? null : ipRanges(JSON.parse(row.allowed_ips) as string[]),
      },
      usedAt: row.last_used_at ?? 0,
      writtenAt: row.last_used_at ?? 0,
    }
    if (row.status === 'active') {
      if (this.cache.size >= CACHE_LIMIT) {
        // the uses not yet written would go with the cache (losing them must not fail the request)
        this.flushUse().catch(() => {})
        this.cache.clear()
      }
      this.cache.set(row.key_id, entry)
    }
    return entry
  }
}
