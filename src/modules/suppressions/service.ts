/** The workspace suppression list: numbers that must never be messaged. */
import type { Deps } from '../../deps'
import type { AuditRepo } from '../audit/repo'
import { notFound } from '../../http/errors'
import { iso } from '../../http/format'
import { SuppressionRepo, type SuppressionRow } from './repo'

export class SuppressionService {
  readonly repo: SuppressionRepo

  constructor(
    private readonly deps: Deps,
    private readonly audit: AuditRepo,
  ) {
    this.repo = new SuppressionRepo(deps.db)
  }

  toPublic(row: SuppressionRow) {
    return { phone: row.phone, reason: row.reason, created_at: iso(row.created_at) }
  }

  isSuppressed(workspaceId: string, phone: string) {
    return this.repo.get(workspaceId, phone) !== null
  }

  /** Add a number; adding it again keeps the first entry. Returns [row, created]. */
  add(workspaceId: string, phone: string, reason: string | null): [SuppressionRow, boolean] {
    return this.deps.writer.now(() => {
      const existing = this.repo.get(workspaceId, phone)
      if (existing) return [existing, false] as [SuppressionRow, boolean]
      const row = { workspace_id: workspaceId, phone, reason, created_at: this.deps.clock.now() }
      this.repo.insert(row)
      this.audit.add(workspaceId, 'suppression.added', null, row.created_at)
      return [row, true] as [SuppressionRow, boolean]
    })
  }

  remove(workspaceId: string, phone: string) {
    const removed = this.deps.writer.now(() => {
      const gone = this.repo.remove(workspaceId, phone)
      if (gone) this.audit.add(workspaceId, 'suppression.removed', null, this.deps.clock.now())
      return gone
    })
    if (!removed) throw notFound('suppression')
  }
}
