/** Databases as an older Capstan left them, for the tests of what an upgrade does. */
import { Database } from 'bun:sqlite'
import { MIGRATIONS } from '../../src/db/migrations'

/** A new database file at `path` with the migrations up to `version` applied and recorded, as that Capstan left it. */
export function databaseAtSchema(path: string, version: number): Database {
  const db = new Database(path)
  db.run('CREATE TABLE migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at INTEGER NOT NULL) STRICT')
  for (const m of MIGRATIONS.filter((x) => x.version <= version)) {
    db.run(m.sql)
    db.query('INSERT INTO migrations (version, name, applied_at) VALUES (?, ?, 0)').run(m.version, m.name)
  }
  return db
}
