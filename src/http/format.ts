/** Shared output helpers: ISO times, ids, the list envelope and page/per_page parsing. */
import { validationFailed } from './errors'
import { s, validate } from './schema'

/** Milliseconds → ISO-8601 UTC ("2026-11-21T09:00:00.000Z"); null stays null. */
export function iso(ms: number): string
export function iso(ms: number | null | undefined): string | null
export function iso(ms: number | null | undefined): string | null {
  return ms === null || ms === undefined ? null : new Date(ms).toISOString()
}

/** A new id: a time-ordered UUIDv7, so inserts append to the id indexes instead of scattering. */
export const uuid = () => Bun.randomUUIDv7()

const ALNUM = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789'

/** A random string over [A-Za-z0-9] (or a custom alphabet) without modulo bias. */
export function randomString(length: number, alphabet = ALNUM): string {
  const out: string[] = []
  const limit = 256 - (256 % alphabet.length)
  while (out.length < length) {
    for (const b of crypto.getRandomValues(new Uint8Array(length * 2))) {
      if (b < limit && out.length < length) out.push(alphabet[b % alphabet.length]!)
    }
  }
  return out.join('')
}

/**
 * How deep a list can be paged: OFFSET walks every row before the page, so a page past this many
 * items is refused (422) rather than making the one event loop walk up to 10^8 rows. Filters
 * narrow a list; the contact CSV export reads every contact.
 */
/** `look` with each id looked up once (for the rows of one page naming the same contact, key or endpoint many times). */
export function lookedUpOnce<T>(look: (id: string) => Promise<T | null>): (id: string) => Promise<T | null> {
  const seen = new Map<string, Promise<T | null>>()
  return (id) => {
    let found = seen.get(id)
    if (!found) seen.set(id, (found = look(id)))
    return found
  }
}

export const MAX_LIST_DEPTH = 10_000

export const pageQuery = s.object({
  page: s.integer().range(1, 1_000_000).optional().describe(`Page number, from 1. Only the first ${MAX_LIST_DEPTH} items of a list can be paged through (page × per_page ≤ ${MAX_LIST_DEPTH}); past that, 422: narrow the list with its filters.`),
  per_page: s.integer().range(1, 100).optional().describe('Items per page, 1 to 100 (default 25).'),
})

export interface Page {
  page: number
  perPage: number
  offset: number
}

/** Validate page/per_page (422 naming the field) and return the offset. */
export function readPage(query: Record<string, unknown>): Page {
  const q = validate(pageQuery, { page: query.page, per_page: query.per_page })
  const page = q.page ?? 1
  const perPage = q.per_page ?? 25
  if (page * perPage > MAX_LIST_DEPTH) throw validationFailed({ page: [`The page field must not reach past the first ${MAX_LIST_DEPTH} items of a list; narrow the list with a filter.`] })
  return { page, perPage, offset: (page - 1) * perPage }
}

/** The list envelope of CONTRACT §1. */
export function listEnvelope<T>(data: T[], page: Page, total: number) {
  return { data, meta: { page: page.page, per_page: page.perPage, total, last_page: Math.max(1, Math.ceil(total / page.perPage)) } }
}

/** Read page/per_page from the query, fetch that page, map its rows, wrap in the list envelope. */
export async function paged<R, T>(query: Record<string, unknown>, fetch: (limit: number, offset: number) => Promise<{ rows: R[]; total: number }>, map: (row: R) => T | Promise<T>) {
  const page = readPage(query)
  const { rows, total } = await fetch(page.perPage, page.offset)
  return listEnvelope(await Promise.all(rows.map(map)), page, total)
}
