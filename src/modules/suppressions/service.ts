/** The workspace suppression list: numbers that must never be messaged. */
import { nextTurn } from '../../db/writer'
import type { Deps } from '../../deps'
import type { AuditRepo } from '../audit/repo'
import { notFound } from '../../http/errors'
import { iso } from '../../http/format'
import { SuppressionRepo, type SuppressionRow } from './repo'

export class SuppressionService {
  private readonly repo: SuppressionRepo

  constructor(
    private readonly deps: Deps,
    private readonly audit: AuditRepo,
  ) {
    this.repo = new SuppressionRepo(deps.db)
  }
  /** The number's entry, or null. */
  find(workspaceId: string, phone: string): SuppressionRow | null {
    return this.repo.get(workspaceId, phone)
  }

  /** A page of the list, newest first. */
  list(workspaceId: string, limit: number, offset: number) {
    return this.repo.list(workspaceId, limit, offset)
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

  /** Rows per write of an import: inserts are cheap, a few milliseconds per thousand. */
  importSliceSize = 1_000

  /**
   * Add every number of a checked import (http/bulk.ts), a slice per write with requests served
   * between; a number already on the list keeps its entry. Audited once, as
   * `suppressions.imported`, with the first slice.
   */
  async importRows(workspaceId: string, rows: { phone: string; reason?: string | null }[]): Promise<{ added: number; already: number }> {
    let added = 0
    for (let at = 0; at < rows.length; at += this.importSliceSize) {
      if (at > 0) await nextTurn()
      added += this.deps.writer.now(() => {
        const now = this.deps.clock.now()
        if (at === 0) this.audit.add(workspaceId, 'suppressions.imported', null, now, workspaceId)
        let n = 0
        for (const r of rows.slice(at, at + this.importSliceSize)) {
          if (this.repo.get(workspaceId, r.phone)) continue
          this.repo.insert({ workspace_id: workspaceId, phone: r.phone, reason: r.reason ?? null, created_at: now })
          n++
        }
        return n
      })
    }
    return { added, already: rows.length - added }
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
