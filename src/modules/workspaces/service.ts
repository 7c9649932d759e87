/** Workspaces: create with a unique slug, read, patch name/status/settings. */
import type { Deps } from '../../deps'
import type { AuditRepo } from '../audit/repo'
import { notFound, validationFailed } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import { isCountry } from '../../http/phone'
import { type AdminWorkspace, DEFAULT_SETTINGS, type PublicWorkspace, type WorkspaceSettings } from './model'
import { WorkspaceRepo, type WorkspaceRow } from './repo'

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
  private readonly repo: WorkspaceRepo
  /** Rows read by authentication, kept until this service changes them. */
  private cache = new Map<string, WorkspaceRow>()
  /** Called after a patch (the sending policy may have changed). */
  onChange: (workspaceId: string) => void = () => {}

  constructor(
    private readonly deps: Deps,
    private readonly audit: AuditRepo,
  ) {
    this.repo = new WorkspaceRepo(deps.db)
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
  all(): WorkspaceRow[] {
    return this.repo.all()
  }

  /** The row by id for the request path; patch() below replaces it, so status changes apply at once. */
  cached(id: string): WorkspaceRow | null {
    let row = this.cache.get(id) ?? null
    if (!row) {
      row = this.repo.get(id)
      if (row) {
        if (this.cache.size >= 10_000) this.cache.clear()
        this.cache.set(id, row)
      }
    }
    return row
  }

  get(id: string): WorkspaceRow {
    const row = this.repo.get(id)
    if (!row) throw notFound('workspace')
    return row
  }

  create(input: { name: string; slug?: string }): WorkspaceRow {
    return this.deps.writer.now(() => {
      let slug = input.slug
      if (slug) {
        if (this.repo.getBySlug(slug)) throw validationFailed({ slug: ['The slug has already been taken.'] })
      } else {
        const base = slugify(input.name)
        slug = base
        for (let i = 2; this.repo.getBySlug(slug); i++) slug = `${base}-${i}`
      }
      const now = this.deps.clock.now()
      const row: WorkspaceRow = { id: uuid(), name: input.name, slug, status: 'active', settings: JSON.stringify(DEFAULT_SETTINGS), created_at: now, updated_at: now }
      this.repo.insert(row)
      return row
    })
  }

  patch(id: string, input: PatchInput): WorkspaceRow {
    const row = this.patchRow(id, input)
    this.onChange(id)
    return row
  }

  private patchRow(id: string, input: PatchInput): WorkspaceRow {
    return this.deps.writer.now(() => {
      const row = this.get(id)
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
      this.repo.update(next)
      this.audit.add(id, 'workspace.updated', null, next.updated_at, id)
      this.cache.delete(id)
      return next
    })
  }

  list(limit: number, offset: number) {
    return { rows: this.repo.list(limit, offset), total: this.repo.count() }
  }
}

