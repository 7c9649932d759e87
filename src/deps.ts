/** What services are built from: config, database, group-commit writer, clock. */
import type { Database } from 'bun:sqlite'
import type { Clock } from './clock'
import type { Config } from './config'
import type { Writer } from './db/writer'

export interface Deps {
  config: Config
  db: Database
  writer: Writer
  clock: Clock
}
