/**
 * Bulk imports of the admin API (contacts, suppressions): a CSV file (multipart field `file`) or a
 * JSON list, each row checked with the schema the one-at-a-time endpoint uses. Every row is checked
 * before anything is written — one bad row refuses the import (422 naming the rows and fields) —
 * and the records of a large file are parsed and checked 2,000 per turn of the event loop.
 */
import { nextTurn } from '../db/writer'
import { type FieldErrors, validationFailed } from './errors'
import { type Schema, s } from './schema'

/** Rows of one CSV file; a JSON list is bounded by the JSON body limit and MAX_JSON_ROWS. */
export const MAX_CSV_ROWS = 100_000
export const MAX_JSON_ROWS = 10_000
/** Field errors listed in a refusal, at most (a file of 100,000 bad rows gets the first ones). */
const MAX_ERRORS = 100
/**
 * Rows parsed and checked between turns of the event loop: parsing and checking 100,000 contacts
 * at once held the server ~0.5-0.9 s.
 */
const CHECK_BATCH = 2_000

export const refuse = (message: string) => validationFailed({ file: [message] })

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
 * A cell as written before a spreadsheet guard: a leading apostrophe before =, +, -, @, a tab or a
 * carriage return (how Capstan's CSV export, and spreadsheets, keep a cell from running as a formula).
 */
const unguard = (cell: string) => (/^'[=+\-@\t\r]/.test(cell) ? cell.slice(1) : cell)

export interface BulkSpec<T extends { phone: string }> {
  /** What one row is, for messages: `contact`. */
  noun: string
  /** The JSON body's list: `{"contacts": [...]}`. */
  list: string
  /** One row's schema, the one-at-a-time endpoint's. */
  schema: Schema<T>
  /**
   * The row field a header cell fills — `['phone']`, or `['metadata', 'plan']` for a cell of an
   * object field — or null when the header may not have it.
   */
  column(cell: string): [string] | [string, string] | null
  /** The columns a header may have, for messages: `phone, name or …`. */
  columns: string
  /** The columns a header must or may have, for the message of a file without rows. */
  header: string
  /** A further check of the header's columns (paths joined with dots); the reason it fails. */
  checkHeader?(keys: string[]): string | null
  /** A cell's value for a top-level field, before the schema sees it (given trimmed, never empty). */
  cell?(field: string, value: string): string
  /** A row's phone as given (a CSV cell or a JSON string) before the schema sees it: a national number made E.164, say. */
  phone?(value: string): string
}

/** The rows of a CSV file, checked; 422 naming the rows (`rows.<file line>.<field>`) and fields. */
export async function csvRows<T extends { phone: string }>(text: string, spec: BulkSpec<T>): Promise<T[]> {
  const noRows = () => refuse(`The file has no rows: a header line (${spec.header}), then one ${spec.noun} per line.`)
  const records = csvRecords(text, delimiterOf(text))
  const first = records.next()
  if (first.done) throw noRows()
  const columns = first.value.cells.map((c, i) => {
    const path = spec.column(c.trim())
    if (!path) throw refuse(`Column ${i + 1} of the header is not one of ${spec.columns}.`)
    return path
  })
  const keys = columns.map((p) => p.join('.'))
  for (const [i, k] of keys.entries()) if (keys.indexOf(k) !== i) throw refuse(`Column ${i + 1} of the header names a column given before.`)
  if (!keys.includes('phone')) throw refuse('The header has no phone column.')
  const wrong = spec.checkHeader?.(keys)
  if (wrong) throw refuse(wrong)
  const ctx: { errors: FieldErrors } = { errors: {} }
  const rows: T[] = []
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
    for (const [i, [field, key]] of columns.entries()) {
      const value = unguard(cells[i] ?? '')
      if (key !== undefined) {
        // a cell of an object field (metadata): kept as written; no prototype, so a
        // `metadata.__proto__` column is a key like any other
        if (value !== '') ((row[field] ??= Object.create(null)) as Record<string, string>)[key] = value
      } else if (value.trim() !== '') {
        const cell = spec.cell ? spec.cell(field, value.trim()) : value.trim()
        row[field] = field === 'phone' && spec.phone ? spec.phone(cell) : cell
      }
    }
    const checked = spec.schema.check(row, path, ctx)
    if (checked) rows.push(checked)
    duplicate(ctx.errors, lineOf, row.phone, line, `${path}.phone`, 'line')
  }
  if (count === 0) throw noRows()
  refuseIfAny(ctx.errors)
  return rows
}

/** The rows of a JSON body `{<list>: [...]}`, checked; 422 naming `<list>.<index>.<field>`. */
export function jsonRows<T extends { phone: string }>(body: unknown, spec: BulkSpec<T>): T[] {
  const ctx: { errors: FieldErrors } = { errors: {} }
  const given = (body as Record<string, unknown> | null)?.[spec.list]
  if (spec.phone && Array.isArray(given)) {
    const phone = spec.phone
    body = { ...(body as object), [spec.list]: given.map((row) => (row && typeof row === 'object' && typeof row.phone === 'string' ? { ...row, phone: phone(row.phone) } : row)) }
  }
  const value = s.object({ [spec.list]: s.array(spec.schema).max(MAX_JSON_ROWS) }).check(body, '', ctx) as Record<string, T[]> | undefined
  if (value && value[spec.list]!.length === 0) ctx.errors[spec.list] = [`The ${spec.list} field must list at least one ${spec.noun}.`]
  // the list as sent: a bad row elsewhere leaves no checked value to look in
  const sent = (body as Record<string, unknown>)[spec.list]
  const indexOf = new Map<string, number>()
  if (Array.isArray(sent)) for (const [i, row] of sent.entries()) duplicate(ctx.errors, indexOf, (row as { phone?: unknown } | null)?.phone, i, `${spec.list}.${i}.phone`, spec.noun)
  refuseIfAny(ctx.errors)
  return value![spec.list]!
}

/** A phone given twice in one import: which of the two would stand is not clear, so it is refused. */
function duplicate(errors: FieldErrors, first: Map<string, number>, phone: unknown, at: number, field: string, noun: string) {
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

/** The rows of an import request: a CSV `file` (multipart) or a JSON list. */
export async function bulkRows<T extends { phone: string }>(body: unknown, spec: BulkSpec<T>): Promise<T[]> {
  const file = (body as { file?: unknown } | null)?.file
  if (file instanceof Blob) {
    let text: string
    try {
      text = new TextDecoder('utf-8', { fatal: true }).decode(await file.arrayBuffer())
    } catch {
      throw refuse('The file must be UTF-8 text (CSV).')
    }
    // a NUL character is no text either (and PostgreSQL could not store it)
    if (text.includes('\0')) throw refuse('The file must be UTF-8 text (CSV).')
    return csvRows(text, spec)
  }
  if (body && typeof body === 'object' && spec.list in body) return jsonRows(body, spec)
  throw refuse(`Send a CSV file as the file field (multipart/form-data), or {"${spec.list}": [...]} as JSON.`)
}
