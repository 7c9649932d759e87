/** The workspace suppression list: numbers that must never be messaged. */
import type { Deps } from '../../deps'
import { notFound } from '../../http/errors'
import { iso } from '../../http/format'
import { SuppressionRepo, type SuppressionRow } from './repo'

export class SuppressionService {
  readonly repo: SuppressionRepo

  constructor(private readonly deps: Deps) {
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
      return [row, true] as [SuppressionRow, boolean]
    })
  }

  remove(workspaceId: string, phone: string) {
    const removed = this.deps.writer.now(() => this.repo.remove(workspaceId, phone))
    if (!removed) throw notFound('suppression')
  }
}
