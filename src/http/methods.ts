/**
 * Which methods a path answers, for the 405 a wrong method on a known path gets (with `Allow`)
 * in place of the 404 an unknown path gets. Built once from the app's routes, consulted only on
 * the not-found path, so it costs the routes that match nothing.
 */
import { ApiError } from './errors'

interface RouteLike {
  method: string
  path: string
}

/** A route pattern (`/api/v1/contacts/:id`, `/assets/*`) as an anchored expression. */
function patternOf(path: string): RegExp {
  const parts = path.split('/').map((part) => {
    if (part === '*') return '.*'
    if (part.startsWith(':')) return part.endsWith('?') ? '[^/]*' : '[^/]+'
    return part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
  })
  return new RegExp(`^${parts.join('/')}$`)
}

export class AllowedMethods {
  private table: { pattern: RegExp; methods: Set<string> }[] | null = null

  constructor(private readonly routes: () => readonly RouteLike[]) {}

  /** The methods some route answers at `path`, sorted; empty when no route has the path. */
  of(path: string): string[] {
    const methods = new Set<string>()
    for (const row of this.rows()) if (row.pattern.test(path)) for (const m of row.methods) methods.add(m)
    // a route for every method never leaves a method unanswered
    if (methods.has('ALL')) return []
    // Bun answers HEAD for every GET route
    if (methods.has('GET')) methods.add('HEAD')
    return [...methods].sort()
  }

  private rows() {
    if (this.table) return this.table
    const byPath = new Map<string, Set<string>>()
    for (const r of this.routes()) {
      const set = byPath.get(r.path) ?? new Set<string>()
      set.add(r.method.toUpperCase())
      byPath.set(r.path, set)
    }
    this.table = [...byPath].map(([path, methods]) => ({ pattern: patternOf(path), methods }))
    return this.table
  }
}

/** 405 for a path that exists under other methods; `Allow` names them. */
export const methodNotAllowed = () => new ApiError(405, 'method_not_allowed', 'The method is not allowed on this route.')
