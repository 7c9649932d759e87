/** Workspaces: create with a unique slug, read, patch name/status/settings. */
import type { Queries } from '../../db/engine'
import type { Deps } from '../../deps'
import type { AuditRepo, Operator } from '../audit/repo'
import { notFound, validationFailed } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import { isCountry } from '../../http/phone'
import { type AdminWorkspace, DEFAULT_SETTINGS, type PublicWorkspace, type WorkspaceSettings } from './model'
import { WorkspaceStore, type WorkspaceRow } from './store'

export interface PatchInput {
  name?: string
  status?: string
  settings?: {
    sending_policy?: Partial<WorkspaceSettings['sending_policy']>
    message_allowance?: number | null
    media?: Partial<WorkspaceSettings['media']>
    messages?: { content_retention_days?: number | null }
    contacts?: { default_country?: string | null }
  }
}

export function slugify(name: string): string {
  const base = name
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .toLowerCase()
    .replace(/[^a-z0-9]+/g, '-')
    .replace(/^-+|-+$/g, '')
    .slice(0, 48)
    .replace(/-+$/g, '')
  return base || 'workspace'
}

/** The fields of `o` that were given (a validated partial leaves the others undefined). */
const defined = <T extends object>(o: T) => Object.fromEntries(Object.entries(o).filter(([, v]) => v !== undefined)) as Partial<{ [K in keyof T]: Exclude<T[K], undefined> }>

export class WorkspaceService {
  private readonly store: WorkspaceStore
  /**
   * Every workspace, in memory (there are few): loaded at start (`load`), replaced by this
   * service's own writes, so the request path and the modules that check a workspace read it
   * without waiting for the database.
   */
  private rows = new Map<string, WorkspaceRow>()
  /** Called after a patch (the sending policy may have changed). */
  onChange: (workspaceId: string) => void = () => {}

  constructor(
    private readonly deps: Deps,
    private readonly audit: AuditRepo,
  ) {
    this.store = new WorkspaceStore(deps.engine)
  }

  /** Parsed settings per row object (a patch replaces the row, so this never goes stale). */
  private parsed = new WeakMap<WorkspaceRow, WorkspaceSettings>()

  /** The settings object with defaults filled in (older rows may miss newer keys). Do not mutate. */
  settings(row: WorkspaceRow): WorkspaceSettings {
    let s = this.parsed.get(row)
    if (!s) {
      s = this.parse(row)
      this.parsed.set(row, s)
    }
    return s
  }

  private parse(row: WorkspaceRow): WorkspaceSettings {
    const stored = JSON.parse(row.settings) as Partial<WorkspaceSettings>
    return {
      sending_policy: { ...DEFAULT_SETTINGS.sending_policy, ...stored.sending_policy },
      message_allowance: stored.message_allowance === undefined ? DEFAULT_SETTINGS.message_allowance : stored.message_allowance,
      media: { ...DEFAULT_SETTINGS.media, ...stored.media },
      messages: { ...DEFAULT_SETTINGS.messages, ...stored.messages },
      contacts: { ...DEFAULT_SETTINGS.contacts, ...stored.contacts },
    }
  }

  /** Public shape (GET /workspace). */
  toPublic(row: WorkspaceRow): PublicWorkspace {
    return { id: row.id, name: row.name, slug: row.slug, status: 'active' }
  }

  /** Admin shape: public fields plus settings and times. */
  toAdmin(row: WorkspaceRow): AdminWorkspace {
    return { ...this.toPublic(row), status: row.status, settings: this.settings(row), created_at: iso(row.created_at), updated_at: iso(row.updated_at) }
  }
  /** Every workspace (the jobs that walk them: retention, metrics). */
  /** Read every workspace into memory (at start, before anything else reads one). */
  async load() {
    const rows = await this.store.all()
    this.rows = new Map(rows.map((r) => [r.id, r]))
  }

  all(): WorkspaceRow[] {
    return [...this.rows.values()]
  }

  /** The row by id for the request path; a patch replaces it, so status changes apply at once. */
  cached(id: string): WorkspaceRow | null {
    return this.rows.get(id) ?? null
  }

  get(id: string): WorkspaceRow {
    const row = this.rows.get(id)
    if (!row) throw notFound('workspace')
    return row
  }

  /**
   * The row, from memory or else from the database (one another instance made a moment ago, before
   * its announcement arrived); null when there is none.
   */
  async fetch(id: string): Promise<WorkspaceRow | null> {
    return this.rows.get(id) ?? (await this.reload(id))
  }

  /** `fetch`, or 404. */
  async find(id: string): Promise<WorkspaceRow> {
    const row = await this.fetch(id)
    if (!row) throw notFound('workspace')
    return row
  }

  /** Read the row again (another instance changed it); returns it, or null when it is gone. */
  async reload(id: string): Promise<WorkspaceRow | null> {
    const row = await this.store.get(id)
    if (row) this.rows.set(id, row)
    else this.rows.delete(id)
    return row
  }

  async create(input: { name: string; slug?: string }): Promise<WorkspaceRow> {
    const row = await this.deps.engine.write(async (tx) => {
      let slug = input.slug
      if (slug) {
        if (await this.store.bySlug(slug, tx)) throw validationFailed({ slug: ['The slug has already been taken.'] })
      } else {
        const base = slugify(input.name)
        slug = base
        for (let i = 2; await this.store.bySlug(slug, tx); i++) slug = `${base}-${i}`
      }
      const now = this.deps.clock.now()
      const row: WorkspaceRow = { id: uuid(), name: input.name, slug, status: 'active', settings: JSON.stringify(DEFAULT_SETTINGS), created_at: now, updated_at: now }
      await this.store.insert(tx, row)
      await this.deps.engine.announce(tx, `workspace:${row.id}`)
      return row
    })
    this.rows.set(row.id, row)
    return row
  }

  async patch(id: string, input: PatchInput, by: Operator | null = null): Promise<WorkspaceRow> {
    const wait = this.deps.engine.propagated(`workspace:${id}`)
    const row = await this.patchRow(id, input, by)
    this.rows.set(id, row)
    this.onChange(id)
    // a status change holds on every instance before the operator hears it is done
    if (input.status !== undefined) await wait
    return row
  }

  private async patchRow(id: string, input: PatchInput, by: Operator | null): Promise<WorkspaceRow> {
    await this.find(id)
    return this.deps.engine.write(async (tx) => {
      // made from the row as it is, and written only over that row: changed meanwhile (another
      // operator's change on another instance), it is read again and the change made over it
      for (;;) {
        const next = await this.patched(tx, id, input)
        if (next) {
          await this.audit.addIn(tx, id, 'workspace.updated', null, next.updated_at, id, by)
          await this.deps.engine.announce(tx, `workspace:${id}`)
          return next
        }
      }
    })
  }

  /** The change made and written over the row as it is now (inside a write); null if another write changed the row first. */
  private async patched(tx: Queries, id: string, input: PatchInput): Promise<WorkspaceRow | null> {
    const row = await this.store.get(id, tx)
    if (!row) throw notFound('workspace')
    const settings = structuredClone(this.settings(row))
    // sending_policy and media merge: fields left out keep their value
    if (input.settings?.sending_policy) settings.sending_policy = { ...settings.sending_policy, ...defined(input.settings.sending_policy) }
    const policy = settings.sending_policy
    if (policy.min_gap_seconds > policy.max_gap_seconds) {
      const field = input.settings?.sending_policy?.min_gap_seconds !== undefined ? 'min_gap_seconds' : 'max_gap_seconds'
      throw validationFailed({ [`settings.sending_policy.${field}`]: ['The min_gap_seconds must not be greater than max_gap_seconds.'] })
    }
    if (input.settings && 'message_allowance' in input.settings && input.settings.message_allowance !== undefined) {
      settings.message_allowance = input.settings.message_allowance
    }
    if (input.settings?.media) settings.media = { ...settings.media, ...defined(input.settings.media) }
    if (input.settings?.messages) settings.messages = { ...settings.messages, ...defined(input.settings.messages) }
    const country = input.settings?.contacts?.default_country
    if (typeof country === 'string' && !isCountry(country)) throw validationFailed({ 'settings.contacts.default_country': ['The settings.contacts.default_country field must be a country whose numbers are known, such as DE or US.'] })
    if (input.settings?.contacts) settings.contacts = { ...settings.contacts, ...defined(input.settings.contacts) }
    const next: WorkspaceRow = {
      ...row,
      name: input.name ?? row.name,
      status: (input.status as WorkspaceRow['status']) ?? row.status,
      settings: JSON.stringify(settings),
      updated_at: this.deps.clock.now(),
    }
    return (await this.store.update(tx, next, row)) ? next : null
  }

  list(limit: number, offset: number) {
    return this.store.list(limit, offset)
  }
}

