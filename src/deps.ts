/** What services are built from: config, database, group-commit writer, clock. */
import type { Database } from 'bun:sqlite'
import type { Clock } from './clock'
import type { Config } from './config'
import type { Engine } from './db/engine'
import type { Writer } from './db/writer'

export interface Deps {
  config: Config
  db: Database
  writer: Writer
  /** The store seam over the same database (db/engine.ts): what converted modules read and write through. */
  engine: Engine
  clock: Clock
}
