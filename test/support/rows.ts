/** Many rows at once for tests and benchmarks that need a large table: copies made inside SQLite. */
import type { Database } from 'bun:sqlite'

/**
 * `count` copies of the row of `table` whose id is `id`, in one INSERT … SELECT. Each copy's id is
 * `<prefix><i>` (i from 1), and `set` replaces columns with SQL expressions that may use `i`
 * (`{ body: "'message ' || i" }`). The copies come after the row (higher seq/rowid), in order of i.
 */
export function copyRow(db: Database, table: string, id: string, count: number, prefix: string, set: Record<string, string> = {}) {
  const cols = (db.query(`SELECT name FROM pragma_table_info('${table}') WHERE pk = 0 AND name != 'id'`).all() as { name: string }[]).map((c) => c.name)
  const values = cols.map((c) => set[c] ?? c)
  db.run(
    `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ${Math.floor(count)})
     INSERT INTO ${table} (id, ${cols.join(', ')}) SELECT '${prefix}' || i, ${values.join(', ')} FROM ${table}, n WHERE ${table}.id = ? ORDER BY i`,
    [id],
  )
}
