/**
 * Importing contacts in bulk (admin API, CLI, dashboard): a CSV file, or a JSON list of the
 * objects POST /contacts takes. Each row is an upsert exactly as POST /contacts makes one — keyed
 * by phone, consent changed only where given, each change in the consent ledger (source
 * `admin:import`) and announced as `contact.consent_changed`.
 *
 * Every row is checked before anything is written: one bad row refuses the whole import (422,
 * naming the rows and fields) and nothing changes. The rows are then written in slices with
 * requests served between; an import cut off half-way (a full disk) can be run again as it is,
 * the rows already written being upserted to the same values.
 */
import { nextTurn } from '../../db/writer'
import type { Deps } from '../../deps'
import { type FieldErrors, validationFailed } from '../../http/errors'
import { s } from '../../http/schema'
import type { AuditRepo } from '../audit/repo'
import { upsertContactBody } from './model'
import type { ContactService, UpsertInput } from './service'

/** Rows of one CSV file; a JSON list is bounded by the JSON body limit and this. */
export const MAX_CSV_ROWS = 100_000
export const MAX_JSON_ROWS = 10_000
/** Field errors listed in a refusal, at most (a file of 100,000 bad rows gets the first ones). */
const MAX_ERRORS = 100
const SOURCE = 'admin:import'
const META = /^[A-Za-z0-9_.-]{1,64}$/
const COLUMNS = 'phone, name, consent_status or metadata.<key>'

const importJson = s.object({ contacts: s.array(upsertContactBody).max(MAX_JSON_ROWS) })

const refuse = (message: string) => validationFailed({ file: [message] })

/**
 * The records of a CSV text (RFC 4180: quoted fields may hold the delimiter, line breaks and
 * doubled quotes), each with the file line it starts on. Lines with nothing on them are left out.
 * Fields are cut out with slices between the delimiters found, not built character by character
 * (5 MiB: ~0.3 s that way). Records are made as they are asked for, so a reader can stop at a
 * limit, or let the event loop turn, without the rest of a large file parsed first.
 */
export function* csvRecords(text: string, delimiter: string): Generator<{ line: number; cells: string[] }> {
  const stop = new RegExp(`[${delimiter === '\t' ? '\\t' : delimiter}\r\n]`, 'g')
  let cells: string[] = []
  let line = 1
  let start = 1
  let at = 0
  const n = text.length
  for (;;) {
    let cell: string
    if (text[at] === '"') {
      // a quoted field: up to the quote not doubled
      let from = at + 1
      cell = ''
      for (;;) {
        const q = text.indexOf('"', from)
        if (q === -1) throw refuse(`A quoted field opened on line ${start} is never closed.`)
        cell += text.slice(from, q)
        if (text[q + 1] === '"') {
          cell += '"'
          from = q + 2
        } else {
          at = q + 1
          break
        }
      }
      for (let i = cell.indexOf('\n'); i !== -1; i = cell.indexOf('\n', i + 1)) line++
      // anything between the closing quote and the next delimiter is kept, as typed
      stop.lastIndex = at
      const m = stop.exec(text)
      const end = m ? m.index : n
      cell += text.slice(at, end)
      at = end
    } else {
      stop.lastIndex = at
      const m = stop.exec(text)
      const end = m ? m.index : n
      cell = text.slice(at, end)
      at = end
    }
    cells.push(cell)
    if (at >= n || text[at] !== delimiter) {
      // the end of a record (a line break, or the end of the text)
      if (cells.length > 1 || cells[0] !== '') yield { line: start, cells }
      cells = []
      if (at >= n) break
      at += text[at] === '\r' && text[at + 1] === '\n' ? 2 : 1
      start = ++line
      if (at >= n) break
    } else at++
  }
}

/** All the records of a CSV text at once (see `csvRecords`). */
export const parseCsv = (text: string, delimiter: string) => [...csvRecords(text, delimiter)]

/** The header's delimiter: a comma, or the semicolon or tab some spreadsheets write instead. */
function delimiterOf(text: string): string {
  const first = text.slice(0, text.search(/\r|\n|$/))
  if (first.includes(',')) return ','
  if (first.includes(';')) return ';'
  return first.includes('\t') ? '\t' : ','
}

/**
 * Rows parsed and checked between turns of the event loop: parsing and checking 100,000 at once
 * held the server ~0.5-0.9 s.
 */
const CHECK_BATCH = 2_000

const noRows = () => refuse('The file has no rows: a header line (phone, and name, consent_status or metadata.<key> columns if you like), then one contact per line.')

/** The contacts of a CSV file, checked; 422 naming the rows (by file line) and fields. */
export async function csvRows(text: string): Promise<UpsertInput[]> {
  const records = csvRecords(text, delimiterOf(text))
  const first = records.next()
  if (first.done) throw noRows()
  const header = first.value
  const columns = header.cells.map((c) => c.trim())
  const seen = new Set<string>()
  for (const [i, c] of columns.entries()) {
    const name = c.toLowerCase()
    const known = name === 'phone' || name === 'name' || name === 'consent_status' || (name.startsWith('metadata.') && META.test(c.slice(9)))
    if (!known) throw refuse(`Column ${i + 1} of the header is not one of ${COLUMNS} (metadata keys: 1 to 64 letters, digits, dots, dashes or underscores).`)
    const key = name.startsWith('metadata.') ? `metadata.${c.slice(9)}` : name
    if (seen.has(key)) throw refuse(`Column ${i + 1} of the header names a column given before.`)
    seen.add(key)
  }
  if (!seen.has('phone')) throw refuse('The header has no phone column.')
  if ([...seen].filter((k) => k.startsWith('metadata.')).length > 50) throw refuse('The header has more than 50 metadata columns; a contact keeps at most 50 metadata keys.')
  const ctx: { errors: FieldErrors } = { errors: {} }
  const rows: UpsertInput[] = []
  const lineOf = new Map<string, number>()
  let count = 0
  for (const { line, cells } of records) {
    if (++count > MAX_CSV_ROWS) throw refuse(`The file has more than ${MAX_CSV_ROWS} rows; split it into several imports.`)
    if (count % CHECK_BATCH === 0) await nextTurn()
    const path = `rows.${line}`
    if (cells.length > columns.length) {
      ;(ctx.errors[path] ??= []).push(`Line ${line} has more cells than the header has columns.`)
      continue
    }
    const row: Record<string, unknown> = {}
    // no prototype: a `metadata.__proto__` column is a key like any other
    const metadata: Record<string, string> = Object.create(null)
    for (const [i, c] of columns.entries()) {
      const value = cells[i] ?? ''
      const name = c.toLowerCase()
      if (name.startsWith('metadata.')) {
        if (value !== '') metadata[c.slice(9)] = value
      } else if (value.trim() !== '') row[name] = name === 'consent_status' ? value.trim().toLowerCase() : value.trim()
    }
    if (Object.keys(metadata).length) row.metadata = metadata
    const checked = upsertContactBody.check(row, path, ctx)
    if (checked) rows.push(checked as UpsertInput)
    duplicate(ctx.errors, lineOf, row.phone, line, `${path}.phone`, 'line')
  }
  if (count === 0) throw noRows()
  refuseIfAny(ctx.errors)
  return rows
}

/** The contacts of a JSON body `{contacts: [...]}`, checked; 422 naming `contacts.<index>.<field>`. */
export function jsonRows(body: unknown): UpsertInput[] {
  const ctx: { errors: FieldErrors } = { errors: {} }
  const value = importJson.check(body, '', ctx)
  if (value && value.contacts.length === 0) ctx.errors.contacts = ['The contacts field must list at least one contact.']
  // the list as sent: a bad row elsewhere leaves no checked value to look in
  const sent = (body as { contacts?: unknown }).contacts
  const indexOf = new Map<string, number>()
  if (Array.isArray(sent)) for (const [i, row] of sent.entries()) duplicate(ctx.errors, indexOf, (row as { phone?: unknown } | null)?.phone, i, `contacts.${i}.phone`, 'contact')
  refuseIfAny(ctx.errors)
  return value!.contacts as UpsertInput[]
}

/** A phone given twice in one import: which of the two would stand is not clear, so it is refused. */
function duplicate(errors: FieldErrors, first: Map<string, number>, phone: unknown, at: number, field: string, noun: 'line' | 'contact') {
  if (typeof phone !== 'string') return
  const before = first.get(phone)
  if (before === undefined) first.set(phone, at)
  else (errors[field] ??= []).push(`The same phone is on ${noun} ${before} too; give each number once.`)
}

function refuseIfAny(errors: FieldErrors) {
  const fields = Object.keys(errors)
  if (fields.length === 0) return
  const listed: FieldErrors = Object.fromEntries(fields.slice(0, MAX_ERRORS).map((f) => [f, errors[f]!]))
  if (fields.length > MAX_ERRORS) listed.more = [`${fields.length - MAX_ERRORS} more fields have errors; the first ${MAX_ERRORS} are listed.`]
  throw validationFailed(listed)
}

/** The rows of an import request: a CSV `file` (multipart) or a JSON `contacts` list. */
export async function importRows(body: unknown): Promise<UpsertInput[]> {
  const file = (body as { file?: unknown } | null)?.file
  if (file instanceof Blob) {
    let text: string
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(await file.arrayBuffer())
    } catch {
      throw refuse('The file must be UTF-8 text (CSV).')
    }
    return csvRows(text)
  }
  if (body && typeof body === 'object' && 'contacts' in body) return jsonRows(body)
  throw refuse('Send a CSV file as the file field (multipart/form-data), or {"contacts": [...]} as JSON.')
}

export class ContactImport {
  /** Rows per write: ~1,000 upserts hold the server a few tens of milliseconds. */
  sliceSize = 1_000

  constructor(
    private readonly deps: Deps,
    private readonly contacts: ContactService,
    private readonly audit: AuditRepo,
  ) {}

  /** Upsert the rows (checked by `importRows`), a slice per write; audited as `contacts.imported` with the first. */
  async run(workspaceId: string, rows: UpsertInput[]): Promise<{ created: number; updated: number }> {
    let created = 0
    let updated = 0
    for (let at = 0; at < rows.length; at += this.sliceSize) {
      if (at > 0) await nextTurn()
      const made = this.deps.writer.now(() => {
        if (at === 0) this.audit.add(workspaceId, 'contacts.imported', null, this.deps.clock.now(), workspaceId)
        let n = 0
        for (const input of rows.slice(at, at + this.sliceSize)) if (this.contacts.upsertInTx(workspaceId, input, SOURCE).created) n++
        return n
      })
      created += made
      updated += Math.min(this.sliceSize, rows.length - at) - made
    }
    return { created, updated }
  }
}
