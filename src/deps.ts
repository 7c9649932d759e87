/** What services are built from: config, the database behind the store seam, clock. */
import type { Clock } from './clock'
import type { Config } from './config'
import type { Engine } from './db/engine'

export interface Deps {
  config: Config
  /** The store seam (db/engine.ts): the embedded SQLite file or PostgreSQL; services never ask which. */
  engine: Engine
  clock: Clock
}
