/** The workspace suppression list: numbers that must never be messaged. */
import { nextTurn } from '../../db/writer'
import type { Queries } from '../../db/engine'
import type { Deps } from '../../deps'
import type { AuditRepo, Operator } from '../audit/repo'
import { notFound } from '../../http/errors'
import { iso } from '../../http/format'
import { SuppressionStore, type SuppressionRow } from './store'

export class SuppressionService {
  private readonly store: SuppressionStore

  constructor(
    private readonly deps: Deps,
    private readonly audit: AuditRepo,
  ) {
    this.store = new SuppressionStore(deps.engine)
  }

  toPublic(row: SuppressionRow) {
    return { phone: row.phone, reason: row.reason, created_at: iso(row.created_at) }
  }

  /** Whether the number is on the list (`q`: the write it is checked in, if any). */
  async isSuppressed(workspaceId: string, phone: string, q?: Queries): Promise<boolean> {
    return (await this.store.get(workspaceId, phone, q)) !== null
  }

  /** The number's entry, or null. */
  find(workspaceId: string, phone: string): Promise<SuppressionRow | null> {
    return this.store.get(workspaceId, phone)
  }

  /** A page of the list, newest first. */
  list(workspaceId: string, limit: number, offset: number) {
    return this.store.list(workspaceId, limit, offset)
  }

  /** Add a number; adding it again keeps the first entry. Returns [row, created]. */
  add(workspaceId: string, phone: string, reason: string | null, by: Operator | null = null): Promise<[SuppressionRow, boolean]> {
    return this.deps.engine.write(async (tx): Promise<[SuppressionRow, boolean]> => {
      const existing = await this.store.get(workspaceId, phone, tx)
      if (existing) return [existing, false]
      const row = { workspace_id: workspaceId, phone, reason, created_at: this.deps.clock.now() }
      await this.store.insert(tx, row)
      await this.audit.addIn(tx, workspaceId, 'suppression.added', null, row.created_at, null, by)
      return [row, true]
    })
  }

  /** Rows per write of an import: inserts are cheap, a few milliseconds per thousand. */
  importSliceSize = 1_000

  /**
   * Add every number of a checked import (http/bulk.ts), a slice per write with requests served
   * between; a number already on the list keeps its entry. Audited once, as
   * `suppressions.imported`, with the first slice.
   */
  async importRows(workspaceId: string, rows: { phone: string; reason?: string | null }[], by: Operator | null = null): Promise<{ added: number; already: number }> {
    let added = 0
    for (let at = 0; at < rows.length; at += this.importSliceSize) {
      if (at > 0) await nextTurn()
      added += await this.deps.engine.write(async (tx) => {
        const now = this.deps.clock.now()
        if (at === 0) await this.audit.addIn(tx, workspaceId, 'suppressions.imported', null, now, workspaceId, by)
        let n = 0
        for (const r of rows.slice(at, at + this.importSliceSize)) if (await this.store.insertNew(tx, { workspace_id: workspaceId, phone: r.phone, reason: r.reason ?? null, created_at: now })) n++
        return n
      })
    }
    return { added, already: rows.length - added }
  }

  async remove(workspaceId: string, phone: string, by: Operator | null = null) {
    const removed = await this.deps.engine.write(async (tx) => {
      const gone = await this.store.remove(tx, workspaceId, phone)
      if (gone) await this.audit.addIn(tx, workspaceId, 'suppression.removed', null, this.deps.clock.now(), null, by)
      return gone
    })
    if (!removed) throw notFound('suppression')
  }
}
