/**
 * Both engines at the newest schema, for store tests whose one body runs on each
 * (`describe.each(ENGINES)`): the embedded SQLite file through the group commit, and a private
 * PostgreSQL (src/cluster/postgres.ts) with its own database per file of tests.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../../src/cluster/postgres'
import { type Engine, PgEngine, SqliteEngine, stmt } from '../../src/db/engine'
import { migrate, openDatabase } from '../../src/db/open'
import { migratePostgres } from '../../src/db/postgres'
import { Writer } from '../../src/db/writer'

export const ENGINES = ['sqlite', 'postgres'] as const
export type EngineName = (typeof ENGINES)[number]

/** Start both; `stop` closes them and removes every file. */
export async function migratedEngines(): Promise<{ engines: Record<EngineName, Engine>; stop: () => Promise<void> }> {
  const dir = mkdtempSync(join(tmpdir(), 'capstan-stores-'))
  const pg = await PrivatePostgres.start(join(dir, 'pg'))
  const admin = new Bun.SQL(pg.url, { max: 1 })
  await migratePostgres(admin)
  await admin.close()
  const db = openDatabase(join(dir, 'capstan.db'))
  migrate(db)
  const engines = { sqlite: new SqliteEngine(db, new Writer(db)), postgres: PgEngine.connect(pg.url, 4) }
  return {
    engines,
    stop: async () => {
      await engines.postgres.close()
      await engines.sqlite.close()
      db.close()
      await pg.stop()
      rmSync(dir, { recursive: true, force: true })
    },
  }
}

const WORKSPACE = stmt("INSERT INTO workspaces (id, name, slug, status, settings, created_at, updated_at) VALUES (?, ?, ?, 'active', '{}', 0, 0)")

/** A new workspace row (what most stores' rows hang from); its id. */
export async function workspace(engine: Engine) {
  const id = crypto.randomUUID()
  await engine.write((tx) => tx.run(WORKSPACE, id, `W ${id}`, `w-${id}`))
  return id
}
