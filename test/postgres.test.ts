/**
 * The private PostgreSQL the multi-instance work runs on (src/cluster/postgres.ts): Debian's
 * server started on a Unix socket in its own folder, reached with Bun's built-in client, and
 * durable across a crash of the server.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'

setDefaultTimeout(60_000)

let dir: string
let pg: PrivatePostgres
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'capstan-pg-'))
  pg = await PrivatePostgres.start(dir)
})
afterAll(async () => {
  await pg.stop()
  rmSync(dir, { recursive: true, force: true })
})

describe('a private PostgreSQL', () => {
  test('listens on a socket in its own folder only, and Bun.SQL reaches it: PostgreSQL 15 or newer, UTF-8', async () => {
    expect(pg.url).toContain(`host=${encodeURIComponent(dir)}`)
    expect(statSync(join(dir, '.s.PGSQL.5432')).isSocket()).toBe(true)
    const sql = new Bun.SQL(pg.url, { max: 1 })
    try {
      const [row] = await sql`SELECT current_setting('server_version_num')::int AS version, current_setting('listen_addresses') AS tcp, pg_encoding_to_char(encoding) AS encoding FROM pg_database WHERE datname = current_database()`
      expect(row.version).toBeGreaterThanOrEqual(150000)
      expect([row.tcp, row.encoding]).toEqual(['', 'UTF8'])
    } finally {
      await sql.close()
    }
  })

  test('a committed row outlives a SIGKILL of the server; the folder starts again without a new initdb', async () => {
    let sql = new Bun.SQL(pg.url, { max: 2 })
    await sql`CREATE TABLE kept (id int PRIMARY KEY, note text NOT NULL)`
    await sql.begin(async (tx) => {
      await tx`INSERT INTO kept VALUES (1, 'committed')`
    })
    await sql.close()
    await pg.stop('SIGKILL')
    pg = await PrivatePostgres.start(dir)
    sql = new Bun.SQL(pg.url, { max: 1 })
    try {
      expect(await sql`SELECT id, note FROM kept`).toEqual([{ id: 1, note: 'committed' }])
    } finally {
      await sql.close()
    }
  })

  test('two clients claiming the same queue with FOR UPDATE SKIP LOCKED never take the same row', async () => {
    const setup = new Bun.SQL(pg.url, { max: 1 })
    await setup`CREATE TABLE jobs (id int PRIMARY KEY, taken_by text)`
    await setup`INSERT INTO jobs SELECT g, NULL FROM generate_series(1, 200) g`
    await setup.close()
    const worker = async (name: string) => {
      const sql = new Bun.SQL(pg.url, { max: 1 })
      const mine: number[] = []
      try {
        for (;;) {
          const got = await sql.begin(async (tx) => {
            const rows = await tx`SELECT id FROM jobs WHERE taken_by IS NULL ORDER BY id LIMIT 5 FOR UPDATE SKIP LOCKED`
            const ids = rows.map((r: { id: number }) => r.id)
            if (ids.length) await tx`UPDATE jobs SET taken_by = ${name} WHERE id IN ${tx(ids)}`
            return ids
          })
          if (got.length === 0) return mine
          mine.push(...got)
        }
      } finally {
        await sql.close()
      }
    }
    const [a, b] = await Promise.all([worker('a'), worker('b')])
    expect(new Set([...a!, ...b!]).size).toBe(a!.length + b!.length)
    expect(a!.length + b!.length).toBe(200)
  })
})
