/**
 * A workspace's contacts as a CSV file (admin API, CLI, dashboard): the columns the contact import
 * reads — phone, name, consent_status and one metadata.<key> column per key any contact has — so
 * the file goes into a spreadsheet, a CRM, or another Capstan as it is. Metadata values come out
 * as text (the import reads them so).
 *
 * Two walks through the (workspace_id, phone) index, a slice at a time with requests served
 * between: the first collects the metadata keys for the header, the second is streamed as the
 * client reads it. A cell a spreadsheet would run as a formula (one starting with =, +, -, @, a
 * tab or a carriage return) is written with a leading apostrophe, which the import takes off again.
 */
import { nextTurn } from '../../db/writer'
import type { Deps } from '../../deps'
import type { AuditRepo, Operator } from '../audit/repo'
import type { ContactService } from './service'

/** Contacts read per step of either walk. */
const SLICE = 2_000

/** A CSV cell: quoted when it must be, guarded when a spreadsheet would take it for a formula. */
export function csvCell(value: string, guard = true): string {
  const v = guard && /^[=+\-@\t\r]/.test(value) ? `'${value}` : value
  return /[",\r\n]|^\s|\s$/.test(v) ? `"${v.replace(/"/g, '""')}"` : v
}

export class ContactListExport {
  constructor(
    private readonly deps: Deps,
    private readonly contacts: ContactService,
    private readonly audit: AuditRepo,
  ) {}

  /** The metadata keys of the workspace's contacts, sorted; one slice per turn of the event loop. */
  private async keys(workspaceId: string): Promise<string[]> {
    const keys = new Set<string>()
    for (let after = ''; ; ) {
      const rows = await this.contacts.pageByPhone(workspaceId, after, SLICE)
      for (const r of rows) for (const k of Object.keys(JSON.parse(r.metadata) as object)) keys.add(k)
      if (rows.length < SLICE) break
      after = rows.at(-1)!.phone
      await nextTurn()
    }
    return [...keys].sort()
  }

  /** The CSV, header first, streamed a slice at a time as it is read; audited as `contacts.exported`. */
  async export(workspaceId: string, by: Operator | null = null): Promise<ReadableStream<Uint8Array>> {
    const keys = await this.keys(workspaceId)
    await this.deps.engine.write((tx) => this.audit.addIn(tx, workspaceId, 'contacts.exported', null, this.deps.clock.now(), workspaceId, by))
    const encoder = new TextEncoder()
    const header = ['phone', 'name', 'consent_status', ...keys.map((k) => `metadata.${k}`)].map((c) => csvCell(c)).join(',')
    let after: string | null = null // null: the header is not written yet
    return new ReadableStream<Uint8Array>({
      pull: async (out) => {
        if (after === null) {
          after = ''
          return out.enqueue(encoder.encode(`${header}\r\n`))
        }
        if (after !== '') await nextTurn()
        const rows = await this.contacts.pageByPhone(workspaceId, after, SLICE)
        if (rows.length) {
          const lines = rows.map((r) => {
            const metadata = JSON.parse(r.metadata) as Record<string, unknown>
            return [csvCell(r.phone, false), csvCell(r.name ?? ''), r.consent_status, ...keys.map((k) => csvCell(metadata[k] === undefined ? '' : String(metadata[k])))].join(',')
          })
          out.enqueue(encoder.encode(`${lines.join('\r\n')}\r\n`))
          after = rows.at(-1)!.phone
        }
        if (rows.length < SLICE) out.close()
      },
    })
  }
}
