/**
 * Importing contacts in bulk (admin API, CLI, dashboard): a CSV file, or a JSON list of the
 * objects POST /contacts takes (see http/bulk.ts). Each row is an upsert exactly as POST /contacts
 * makes one — keyed by phone, consent changed only where given, each change in the consent ledger
 * (source `admin:import`) and announced as `contact.consent_changed`.
 *
 * Nothing is written unless every row passed. The rows are then written in slices with requests
 * served between; an import cut off half-way (a full disk) can be run again as it is, the rows
 * already written being upserted to the same values.
 */
import { nextTurn } from '../../db/writer'
import type { Deps } from '../../deps'
import { type BulkSpec, bulkRows } from '../../http/bulk'
import { toE164 } from '../../http/phone'
import type { AuditRepo, Operator } from '../audit/repo'
import { upsertContactBody } from './model'
import type { ContactService, UpsertInput } from './service'

const SOURCE = 'admin:import'
const META = /^[A-Za-z0-9_.-]{1,64}$/

/**
 * A contact import's rows: phone, name, consent_status and metadata.<key> columns. With the
 * workspace's default country, a phone written nationally (`030 1234567`, `(415) 555-0100`) is
 * read in that country and stored in E.164.
 */
export const contactRows = (defaultCountry: string | null): BulkSpec<UpsertInput> => ({
  noun: 'contact',
  list: 'contacts',
  schema: upsertContactBody as unknown as BulkSpec<UpsertInput>['schema'],
  column(cell) {
    const name = cell.toLowerCase()
    if (name === 'phone' || name === 'name' || name === 'consent_status') return [name]
    return name.startsWith('metadata.') && META.test(cell.slice(9)) ? ['metadata', cell.slice(9)] : null
  },
  columns: 'phone, name, consent_status or metadata.<key> (metadata keys: 1 to 64 letters, digits, dots, dashes or underscores)',
  header: 'phone, and name, consent_status or metadata.<key> columns if you like',
  checkHeader: (keys) => (keys.filter((k) => k.startsWith('metadata.')).length > 50 ? 'The header has more than 50 metadata columns; a contact keeps at most 50 metadata keys.' : null),
  cell: (field, value) => (field === 'consent_status' ? value.toLowerCase() : value),
  phone: (value) => toE164(value, defaultCountry) ?? value,
})

/** The rows of a contact import request (see http/bulk.ts), national numbers read in `defaultCountry`. */
export const importRows = (body: unknown, defaultCountry: string | null) => bulkRows(body, contactRows(defaultCountry))

export class ContactImport {
  /** Rows per write: ~1,000 upserts hold the server a few tens of milliseconds. */
  sliceSize = 1_000

  constructor(
    private readonly deps: Deps,
    private readonly contacts: ContactService,
    private readonly audit: AuditRepo,
  ) {}

  /** Upsert the rows (checked by `importRows`), a slice per write; audited as `contacts.imported` with the first. */
  async run(workspaceId: string, rows: UpsertInput[], by: Operator | null = null): Promise<{ created: number; updated: number }> {
    let created = 0
    let updated = 0
    for (let at = 0; at < rows.length; at += this.sliceSize) {
      if (at > 0) await nextTurn()
      const made = await this.deps.engine.write(async (tx) => {
        if (at === 0) await this.audit.addIn(tx, workspaceId, 'contacts.imported', null, this.deps.clock.now(), workspaceId, by)
        let n = 0
        for (const input of rows.slice(at, at + this.sliceSize)) if ((await this.contacts.upsertIn(tx, workspaceId, input, SOURCE)).created) n++
        return n
      })
      created += made
      updated += Math.min(this.sliceSize, rows.length - at) - made
    }
    return { created, updated }
  }
}
