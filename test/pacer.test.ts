/** Pacing (CONTRACT §3) with a controlled clock: gaps, hourly and daily caps, FIFO, online only. */
import { afterAll, afterEach, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PrivatePostgres } from '../src/cluster/postgres'
import type { Services } from '../src/services'
import { type Engine, type Statement, stmt } from '../src/db/engine'
import { MessageStore } from '../src/modules/messages/store'
import { NumberLeases } from '../src/scheduler/leases'
import { OneAtATime, OneAtATimeEach } from '../src/scheduler/one-at-a-time'
import { dueAt, eachConcurrently } from '../src/scheduler/pacer'
import { eachTurn, inProcess, inProcessOnPostgres, settle } from './support/inproc'
import { CommitCutter } from './support/commit-cutter'
import { copyRow } from './support/rows'
import { waitFor } from './support/wait'

setDefaultTimeout(60_000)

type Env = Awaited<ReturnType<typeof inProcess>>
let env: Env | null = null
afterEach(async () => {
  await env?.close()
  env = null
})

const NO_RECEIPTS = { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] }

type PolicyInput = { hourly_cap: number; daily_cap: number; min_gap_seconds: number; max_gap_seconds: number }

/** A workspace with `policy` and one sandbox number (warming up with `warmup`), in a fresh env. */
async function number(policy: PolicyInput, warmup?: { days: number; start_daily_cap: number }) {
  env = await inProcess()
  const { svc } = env
  const ws = await svc.workspaces.create({ name: 'Pace' })
  await svc.workspaces.patch(ws.id, { settings: { sending_policy: policy } })
  const conn = await svc.connections.create(ws.id, { phone: '+15550000001', driver: 'sandbox', config: NO_RECEIPTS, ...(warmup ? { warmup } : {}) })
  return { ws, conn }
}

/** Queue `count` one-to-one messages on the number; their ids in order. */
async function queue(wsId: string, connId: string, count: number) {
  const ids: string[] = []
  for (let i = 0; i < count; i++) ids.push((await env!.svc.messages.send(wsId, { connection_id: connId, recipient: `+1555100${String(i).padStart(4, '0')}`, body: `m${i}`, attachments: [] })).id)
  return ids
}

async function setup(policy: PolicyInput, count: number) {
  const { ws, conn } = await number(policy)
  return { ws, conn, ids: await queue(ws.id, conn.id, count) }
}

/** Release times (ms after t0) of the given messages, in id order; null = not released. */
async function releases(ids: string[], t0: number) {
  return Promise.all(
    ids.map(async (id) => {
      const row = (await env!.svc.messages.getAny(id))!
      return row.sending_at === null ? null : (row.sending_at - t0) / 1000
    }),
  )
}

describe('pacer', () => {
  test('a fixed gap spaces releases exactly, in FIFO order', async () => {
    const { ids } = await setup({ hourly_cap: 100, daily_cap: 1000, min_gap_seconds: 10, max_gap_seconds: 10 }, 4)
    const t0 = env!.clock.t
    await env!.timers.advance(0)
    expect(await releases(ids, t0)).toEqual([0, null, null, null])
    await env!.timers.advance(9_999)
    expect(await releases(ids, t0)).toEqual([0, null, null, null])
    await env!.timers.advance(1)
    expect(await releases(ids, t0)).toEqual([0, 10, null, null])
    await env!.timers.advance(60_000)
    expect(await releases(ids, t0)).toEqual([0, 10, 20, 30])
    await settle()
    expect((await Promise.all(ids.map((id) => env!.svc.messages.getAny(id)))).map((m) => m!.status)).toEqual(['sent', 'sent', 'sent', 'sent'])
  })

  test('a number woken before its gap is over makes no write; it releases when the gap is over', async () => {
    const { ws, conn, ids } = await setup({ hourly_cap: 100, daily_cap: 1000, min_gap_seconds: 60, max_gap_seconds: 60 }, 1)
    const t0 = env!.clock.t
    await env!.timers.advance(0)
    await settle()
    // each new message wakes the number; none is due for a minute
    const later = await queue(ws.id, conn.id, 3)
    const engine = env!.svc.deps.engine
    const write = engine.write.bind(engine)
    let writes = 0
    engine.write = (fn) => {
      writes++
      return write(fn)
    }
    await env!.timers.advance(59_000)
    expect(writes).toBe(0)
    await env!.timers.advance(1_000)
    expect(writes).toBeGreaterThan(0)
    expect(await releases([...ids, ...later], t0)).toEqual([0, 60, null, null])
  })

  test('the random gap is drawn in [min, max]', async () => {
    // random() = 0.5 in these tests: gap = min + 0.5 * (max - min) = 7 s
    const { ids } = await setup({ hourly_cap: 100, daily_cap: 1000, min_gap_seconds: 4, max_gap_seconds: 10 }, 3)
    const t0 = env!.clock.t
    await env!.timers.advance(30_000)
    expect(await releases(ids, t0)).toEqual([0, 7, 14])
  })

  test('the hourly cap holds over a trailing hour', async () => {
    const { ids } = await setup({ hourly_cap: 3, daily_cap: 1000, min_gap_seconds: 1, max_gap_seconds: 1 }, 5)
    const t0 = env!.clock.t
    await env!.timers.advance(3_599_000)
    expect(await releases(ids, t0)).toEqual([0, 1, 2, null, null])
    await env!.timers.advance(1_000) // t0 + 3600 s: the first release leaves the window
    expect(await releases(ids, t0)).toEqual([0, 1, 2, 3600, null])
    await env!.timers.advance(1_000)
    expect(await releases(ids, t0)).toEqual([0, 1, 2, 3600, 3601])
  })

  test('the daily cap holds over a trailing 24 hours', async () => {
    const { ids } = await setup({ hourly_cap: 2, daily_cap: 3, min_gap_seconds: 0, max_gap_seconds: 0 }, 5)
    const t0 = env!.clock.t
    await env!.timers.advance(0)
    expect(await releases(ids, t0)).toEqual([0, 0, null, null, null])
    await env!.timers.advance(3_600_000)
    expect(await releases(ids, t0)).toEqual([0, 0, 3600, null, null])
    await env!.timers.advance(86_400_000 - 3_600_000 - 1)
    expect(await releases(ids, t0)).toEqual([0, 0, 3600, null, null])
    await env!.timers.advance(1) // 24 h after the first two
    expect(await releases(ids, t0)).toEqual([0, 0, 3600, 86400, 86400])
  })

  test('releases whose write fails (a full disk) count against no cap: the number sends as soon as writes succeed again', async () => {
    const { ids } = await setup({ hourly_cap: 3, daily_cap: 1000, min_gap_seconds: 0, max_gap_seconds: 0 }, 5)
    const { db, timers, clock } = env!
    const t0 = clock.t
    // for a minute the release write cannot commit, as when the disk is full: each second the
    // pacer takes the first two messages in one write, and the second one's update fails it
    db.run(`CREATE TRIGGER full_disk BEFORE UPDATE OF status ON messages WHEN NEW.status = 'sending' AND OLD.id = '${ids[1]}' BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END`)
    await timers.advance(60_000)
    expect(await releases(ids, t0)).toEqual([null, null, null, null, null])
    db.run('DROP TRIGGER full_disk')
    await timers.advance(10_000)
    // the three the hourly cap allows, right after the fault — not an hour later
    expect(await releases(ids, t0)).toEqual([61, 61, 61, null, null])
  })

  test('an offline number releases nothing until it is back online', async () => {
    const { conn, ids } = await setup({ hourly_cap: 100, daily_cap: 1000, min_gap_seconds: 0, max_gap_seconds: 0 }, 0)
    const { svc } = env!
    await svc.connections.patch(conn.id, { status: 'offline' })
    // queued while online, then the number dropped: send directly through the service's write path
    await svc.connections.patch(conn.id, { status: 'online' })
    const m = await svc.messages.send(conn.workspace_id, { connection_id: conn.id, recipient: '+15552220000', body: 'x', attachments: [] })
    await svc.connections.patch(conn.id, { status: 'offline' })
    await env!.timers.advance(60_000)
    expect((await svc.messages.getAny(m.id))!.status).toBe('queued')
    await svc.connections.patch(conn.id, { status: 'online' })
    await env!.timers.advance(0)
    // released (handed to the network, which may have taken it already)
    expect((await svc.messages.getAny(m.id))!.sending_at).not.toBeNull()
    expect(ids).toEqual([])
  })

  test('an inactive workspace releases nothing until it is active again', async () => {
    const { ws, ids } = await setup({ hourly_cap: 100, daily_cap: 1000, min_gap_seconds: 0, max_gap_seconds: 0 }, 2)
    const { svc } = env!
    await svc.workspaces.patch(ws.id, { status: 'inactive' })
    await env!.timers.advance(60_000)
    expect((await Promise.all(ids.map((id) => svc.messages.getAny(id)))).map((m) => m!.status)).toEqual(['queued', 'queued'])
    await svc.workspaces.patch(ws.id, { status: 'active' })
    await env!.timers.advance(0)
    expect((await Promise.all(ids.map((id) => svc.messages.getAny(id)))).map((m) => m!.sending_at !== null)).toEqual([true, true])
  })

  test('numbers are paced independently', async () => {
    env = await inProcess()
    const { svc } = env
    const ws = await svc.workspaces.create({ name: 'Two numbers' })
    await svc.workspaces.patch(ws.id, { settings: { sending_policy: { hourly_cap: 100, daily_cap: 100, min_gap_seconds: 5, max_gap_seconds: 5 } } })
    const a = await svc.connections.create(ws.id, { phone: '+15550000011', driver: 'sandbox', config: NO_RECEIPTS })
    const b = await svc.connections.create(ws.id, { phone: '+15550000012', driver: 'sandbox', config: NO_RECEIPTS })
    const send = (c: string, r: string) => svc.messages.send(ws.id, { connection_id: c, recipient: r, body: 'x', attachments: [] })
    const ids = [(await send(a.id, '+15553330001')).id, (await send(a.id, '+15553330002')).id, (await send(b.id, '+15553330003')).id, (await send(b.id, '+15553330004')).id]
    const t0 = env.clock.t
    await env.timers.advance(5_000)
    expect(await releases(ids, t0)).toEqual([0, 5, 0, 5])
  })

  test('after a restart the caps still count releases made before it', () => {
    const now = 100 * 3_600_000
    const st = { campaignNext: false, last: now - 1000, gap: 0, times: [now - 1000, now - 500], start: 0, loaded: true }
    expect(dueAt(st, { hourly_cap: 2, daily_cap: 10, min_gap_seconds: 0, max_gap_seconds: 0 }, now)).toBe(now - 1000 + 3_600_000)
    expect(dueAt(st, { hourly_cap: 5, daily_cap: 2, min_gap_seconds: 0, max_gap_seconds: 0 }, now)).toBe(now - 1000 + 86_400_000)
    expect(dueAt(st, { hourly_cap: 5, daily_cap: 10, min_gap_seconds: 3, max_gap_seconds: 3 }, now)).toBe(now - 1000 + 3000)
  })

  test('messages still queued after 24 h fail as expired', async () => {
    const { conn, ids } = await setup({ hourly_cap: 100, daily_cap: 1000, min_gap_seconds: 0, max_gap_seconds: 0 }, 0)
    const { svc } = env!
    const m = await svc.messages.send(conn.workspace_id, { connection_id: conn.id, recipient: '+15554440000', body: 'x', attachments: [] })
    await svc.connections.patch(conn.id, { status: 'offline' })
    env!.clock.t += 86_400_000 - 1
    await svc.messages.expireQueued()
    expect((await svc.messages.getAny(m.id))!.status).toBe('queued')
    env!.clock.t += 1
    await svc.messages.expireQueued()
    const row = (await svc.messages.getAny(m.id))!
    expect([row.status, row.error_code]).toEqual(['failed', 'expired'])
    expect(ids).toEqual([])
  })

  /** A number that went offline with `count` messages queued on it in the same instant. */
  async function offlineQueue(count: number) {
    const { conn } = await setup({ hourly_cap: 100, daily_cap: 1000, min_gap_seconds: 0, max_gap_seconds: 0 }, 0)
    const { svc, db } = env!
    const m = await svc.messages.send(conn.workspace_id, { connection_id: conn.id, recipient: '+15554440001', body: 'x', attachments: [] })
    await svc.connections.patch(conn.id, { status: 'offline' })
    copyRow(db, 'messages', m.id, count - 1, 'queued-')
    return { svc, db, conn }
  }

  test('the queue of a removed number fails as connection_removed in batches of 500, the server working between them', async () => {
    const { svc, db, conn } = await offlineQueue(1200)
    await svc.connections.remove(conn.id, async () => {})
    const left = () => (db.query("SELECT status, error_code, COUNT(*) AS n FROM messages WHERE connection_id = ? GROUP BY status, error_code ORDER BY status").all(conn.id) as { status: string; error_code: string | null; n: number }[])
    const turns = eachTurn(left)
    await svc.messages.failQueuedOf(conn.id)
    expect(turns.stop()).toContainEqual([{ status: 'failed', error_code: 'connection_removed', n: 500 }, { status: 'queued', error_code: null, n: 700 }])
    expect(left()).toEqual([{ status: 'failed', error_code: 'connection_removed', n: 1200 }])
  })

  test('a backlog posted in one burst expires in batches of 500, the server working between them', async () => {
    const { svc, db, conn } = await offlineQueue(1200)
    const queued = () => (db.query("SELECT COUNT(*) AS n FROM messages WHERE connection_id = ? AND status = 'queued'").get(conn.id) as { n: number }).n
    expect(queued()).toBe(1200)
    env!.clock.t += 86_400_000
    const turns = eachTurn(queued)
    await svc.messages.expireQueued()
    expect([turns.stop(), queued()]).toEqual([[1200, 700, 200, 0], 0])
  })

  test('a long run of queued messages whose recipients were suppressed meanwhile is failed through, and the next one still leaves', async () => {
    const { ws, ids } = await setup({ hourly_cap: 1000, daily_cap: 10000, min_gap_seconds: 10, max_gap_seconds: 10 }, 250)
    const { svc, timers, clock } = env!
    const t0 = clock.t
    await timers.advance(0)
    // everyone between the first and the last is suppressed while their message waits
    for (let i = 1; i < 249; i++) await svc.suppressions.add(ws.id, (await svc.messages.getAny(ids[i]!))!.recipient!, null)
    await timers.advance(10_000)
    await settle()
    await timers.advance(0)
    expect(await releases([ids[0]!, ids[1]!, ids[249]!], t0)).toEqual([0, null, 10])
    const failed = (await Promise.all(ids.slice(1, 249).map((id) => svc.messages.getAny(id)))).map((m) => m!)
    expect(failed.every((m) => m.status === 'failed' && m.error_code === 'recipient_suppressed' && m.sending_at === null)).toBe(true)
  })
})

describe('a send in hand', () => {
  test('is never taken for one a crash cut off: the leases renewed and the start-up recovery run while its network is slow to take it, it is sent once', async () => {
    env = await inProcess()
    const { svc } = env
    const ws = await svc.workspaces.create({ name: 'Slow network' })
    await svc.workspaces.patch(ws.id, { settings: { sending_policy: { hourly_cap: 100, daily_cap: 1000, min_gap_seconds: 0, max_gap_seconds: 0 } } })
    // a number added after the start, whose network takes a second to accept a send
    const conn = await svc.connections.create(ws.id, { phone: '+15550000001', driver: 'sandbox', config: { ...NO_RECEIPTS, accept_after_ms: 1000 } })
    const [id] = await queue(ws.id, conn.id, 1)
    await env.timers.advance(0)
    expect((await svc.messages.getAny(id!))!.status).toBe('sending')
    // the renewal of the leases (every 5 s) finds the number; then the recovery a start runs
    await svc.pacer.claimLeases()
    await svc.messages.recoverInterrupted()
    expect((await svc.messages.getAny(id!))!.status).toBe('sending')
    const sent = await waitFor(async () => {
      const m = (await svc.messages.getAny(id!))!
      return m.status === 'sent' ? m : null
    }, 10_000)
    expect([sent.error_code, sent.external_id]).toEqual([null, expect.stringMatching(/^sbx_/)])
  })

  test('a send handed back at a graceful stop whose number is removed before it goes on fails as connection_removed; one taken on meanwhile is left to its sender', async () => {
    const { ws, conn } = await number({ hourly_cap: 100, daily_cap: 1000, min_gap_seconds: 0, max_gap_seconds: 0 })
    const { svc } = env!
    const [a, b, c] = await queue(ws.id, conn.id, 3)
    const store = new MessageStore(svc.deps.engine)
    // a and b released and handed back by a stop; b then taken on (its mark cleared) by another instance
    await svc.deps.engine.write(async (tx) => {
      for (const id of [a!, b!]) {
        await store.claim(tx, id, env!.clock.t)
        await store.markResend(tx, id)
      }
    })
    expect(await svc.deps.engine.write((tx) => store.takeResend(tx, b!))).toBe(true)
    await svc.connections.remove(conn.id, async () => {})
    await svc.messages.failQueuedOf(conn.id)
    const rows = await Promise.all([a, b, c].map((id) => svc.messages.getAny(id!)))
    expect(rows.map((m) => [m!.status, m!.error_code])).toEqual([
      ['failed', 'connection_removed'],
      ['sending', null],
      ['failed', 'connection_removed'],
    ])
  })

  test('on one machine a number added after the start is nothing to take over; one whose taking over failed is taken again', async () => {
    env = await inProcess()
    const leases = env.svc.pacer.leases
    const [a, b] = [crypto.randomUUID(), crypto.randomUUID()]
    expect(await leases.claim([a])).toEqual([])
    expect(await leases.claim([a, b])).toEqual([])
    leases.forget([a])
    expect(await leases.claim([a, b])).toEqual([a])
    expect(await leases.claim([a, b])).toEqual([])
    expect([leases.holds(a), leases.holds(b)]).toEqual([true, true])
  })
})

describe('warming up a new number', () => {
  const HOUR = 3_600_000
  const DAY = 24 * HOUR
  test('its daily cap rises each day in equal steps from the first day\'s cap to the workspace\'s, then the policy applies unchanged', async () => {
    const { ws, conn } = await number({ hourly_cap: 1000, daily_cap: 100, min_gap_seconds: 1, max_gap_seconds: 1 }, { days: 4, start_daily_cap: 10 })
    const { clock, timers } = env!
    const t0 = clock.t
    const ids = await queue(ws.id, conn.id, 400)
    // day by day: 10, then 10 + 90/4 steps (33, 55, 78), then the full 100
    const perDay: number[] = []
    let before = 0
    for (let day = 0; day < 6; day++) {
      await timers.advanceTo(t0 + day * DAY + 23 * HOUR)
      const now = await released(ids)
      perDay.push(now - before)
      before = now
    }
    expect(perDay).toEqual([10, 33, 55, 78, 100, 100])
    // the order still holds
    const times = (await releases(ids, t0)).filter((t) => t !== null) as number[]
    expect(times).toEqual([...times].sort((a, b) => a - b))
  })

  test('when its cap rises at the start of a day it sends at once, not a day after its first send', async () => {
    const { ws, conn } = await number({ hourly_cap: 1000, daily_cap: 50, min_gap_seconds: 1, max_gap_seconds: 1 }, { days: 2, start_daily_cap: 5 })
    const { clock, timers } = env!
    const t0 = clock.t
    await timers.advanceTo(t0 + 12 * HOUR)
    const ids = await queue(ws.id, conn.id, 20)
    await timers.advanceTo(t0 + 12 * HOUR + 60_000)
    expect(await released(ids)).toBe(5)
    // day two (cap 28) begins at t0 + 24 h: the other fifteen go then, twelve hours before the first send leaves the window
    await timers.advanceTo(t0 + DAY + 30_000)
    expect(await released(ids)).toBe(20)
  })

  test('a warm-up is started, shown (day, end) and ended; after its last day the workspace\'s policy applies', async () => {
    const { ws, conn } = await number({ hourly_cap: 60, daily_cap: 500, min_gap_seconds: 3, max_gap_seconds: 12 })
    const { svc, clock } = env!
    expect(svc.connections.toAdmin(conn).warmup).toBeNull()
    const warm = await svc.connections.patch(conn.id, { warmup: { days: 14, start_daily_cap: 20 } })
    expect(svc.connections.toAdmin(warm).warmup).toEqual({ days: 14, start_daily_cap: 20, started_at: new Date(clock.t).toISOString(), ends_at: new Date(clock.t + 14 * DAY).toISOString(), day: 1 })
    const base = svc.workspaces.settings(ws).sending_policy
    expect(svc.connections.policyFor(warm, base)).toMatchObject({ daily_cap: 20, hourly_cap: 20 })
    clock.t += 7 * DAY
    expect(svc.connections.toAdmin(svc.connections.getAny(conn.id).row).warmup!.day).toBe(8)
    expect(svc.connections.policyFor(warm, base).daily_cap).toBe(Math.round(20 + (500 - 20) * 7 / 14))
    clock.t += 7 * DAY
    expect(svc.connections.toAdmin(warm).warmup!.day).toBeNull()
    expect(svc.connections.policyFor(warm, base)).toBe(base)
    const ended = await svc.connections.patch(conn.id, { warmup: null })
    expect(svc.connections.toAdmin(ended).warmup).toBeNull()
  })
})

describe('the system clock set back', () => {
  test('a number goes on after its gap instead of waiting until the clock catches up with its last release; caps still hold', async () => {
    const { ids } = await setup({ hourly_cap: 3, daily_cap: 1000, min_gap_seconds: 10, max_gap_seconds: 10 }, 5)
    const { clock, timers } = env!
    await timers.advance(0)
    expect(await released(ids)).toBe(1)
    // the clock jumps two hours back
    clock.t -= 2 * 3_600_000
    // (a real timer fires after its delay whatever the wall clock says; the test's timers follow
    // the clock, so the pacer is woken as that timer would)
    env!.svc.pacer.wake((await env!.svc.messages.getAny(ids[0]!))!.connection_id)
    await timers.advance(10_000)
    expect(await released(ids)).toBe(2)
    await timers.advance(10_000)
    // the hourly cap of 3 still holds over the next hour
    await timers.advance(10 * 60_000)
    expect(await released(ids)).toBe(3)
  })
})

/** How many of the messages were released. */
async function released(ids: string[]) {
  let n = 0
  for (const id of ids) if ((await env!.svc.messages.getAny(id))!.sending_at !== null) n++
  return n
}

describe('on PostgreSQL: a tick takes numbers several at a time; outcomes are written together', () => {
  let dir: string
  let pg: PrivatePostgres
  let onPg: Awaited<ReturnType<typeof inProcessOnPostgres>> | null = null
  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'capstan-pacer-pg-'))
    pg = await PrivatePostgres.start(join(dir, 'pg'))
  })
  afterEach(async () => {
    await onPg?.close()
    onPg = null
  })
  afterAll(async () => {
    await pg.stop()
    rmSync(dir, { recursive: true, force: true })
  })
  /** A new empty database on the private server; its URL. */
  const database = () => pg.createDatabase(`t_${crypto.randomUUID().replaceAll('-', '')}`)
  /** A workspace sending without gaps (caps of 1,000) and its sandbox number, once this instance holds the number. */
  const numberWithoutGaps = async (svc: Services, name: string, phone: string, config: Record<string, unknown> = NO_RECEIPTS) => {
    const ws = await svc.workspaces.create({ name })
    await svc.workspaces.patch(ws.id, { settings: { sending_policy: { hourly_cap: 1000, daily_cap: 1000, min_gap_seconds: 0, max_gap_seconds: 0 } } })
    const conn = await svc.connections.create(ws.id, { phone, driver: 'sandbox', config })
    await waitFor(() => svc.pacer.leases.holds(conn.id))
    return { ws, conn }
  }

  /** Two sends on a number without gaps, claimed by a tick whose COMMIT's answer `cutter` loses: their ids (the claims landed). */
  const twoClaimedInDoubt = async ({ svc, timers }: NonNullable<typeof onPg>, cutter: CommitCutter, name: string, phone: string, to: string) => {
    const { ws, conn } = await numberWithoutGaps(svc, name, phone)
    const ids: string[] = []
    for (let i = 0; i < 2; i++) ids.push((await svc.messages.send(ws.id, { connection_id: conn.id, recipient: `${to}${i}0`, body: `in doubt ${i}`, attachments: [] })).id)
    // (the contacts' activity, written 200 ms after the sends, has its own COMMIT: let it land first)
    await Bun.sleep(400)
    cutter.arm()
    await timers.advance(0)
    await waitFor(() => cutter.cuts === 1)
    return { conn, ids }
  }

  /** How many times the sandbox's record holds each message it took. */
  const sandboxSends = (engine: Engine) => engine.all<{ message_id: string; n: number }>(stmt('', 'SELECT message_id, count(*)::int AS n FROM sandbox_sends GROUP BY message_id ORDER BY message_id'))
  /** The sandbox's record holds exactly `ids`, each once. */
  const expectSentOnceEach = async (engine: Engine, ids: string[]) => expect(await sandboxSends(engine)).toEqual(ids.toSorted().map((message_id) => ({ message_id, n: 1 })))

  /** `body` with a CommitCutter (see test/support/commit-cutter.ts) in front of the private server; the instance it started is closed before the cutter stops. */
  const withCutter = async (name: string, body: (cutter: CommitCutter) => Promise<void>) => {
    const cutter = new CommitCutter(join(dir, 'pg', '.s.PGSQL.5432'), join(dir, name))
    try {
      await body(cutter)
    } finally {
      await onPg?.close()
      onPg = null
      cutter.stop()
    }
  }

  test('a write per 32 numbers: one that fails holds back only its own numbers, which count nothing against their caps and go a second later', async () => {
    onPg = await inProcessOnPostgres(await database())
    const { svc, engine, timers } = onPg
    const ws = await svc.workspaces.create({ name: 'Many' })
    await svc.workspaces.patch(ws.id, { settings: { sending_policy: { hourly_cap: 3, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 0 } } })
    // 64 numbers (two writes' worth) with three messages each; one number's first is the one
    // PostgreSQL refuses to release (a fault put in the database itself)
    const numbers: string[] = []
    for (let i = 0; i < 64; i++) numbers.push((await svc.connections.create(ws.id, { phone: `+1555300${String(i).padStart(4, '0')}`, driver: 'sandbox', config: NO_RECEIPTS })).id)
    await waitFor(() => numbers.every((id) => svc.pacer.leases.holds(id)))
    await engine.run(stmt('', `CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.body = 'boom' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$`))
    await engine.run(stmt('', `CREATE TRIGGER refuse_boom BEFORE UPDATE OF status ON messages FOR EACH ROW WHEN (NEW.status = 'sending') EXECUTE FUNCTION refuse_boom()`))
    const ids = new Map<string, string[]>()
    for (const [n, id] of numbers.entries()) {
      const bodies = n === 40 ? ['boom', 'b', 'c'] : ['a', 'b', 'c']
      ids.set(id, [])
      for (const [k, body] of bodies.entries()) ids.get(id)!.push((await svc.messages.send(ws.id, { connection_id: id, recipient: `+1555400${String(n * 3 + k).padStart(4, '0')}`, body, attachments: [] })).id)
    }
    const releasedOf = async (id: string) => (await Promise.all(ids.get(id)!.map((m) => svc.messages.getAny(m)))).filter((m) => m!.sending_at !== null).length
    await timers.advance(0)
    const counts = await Promise.all(numbers.map(releasedOf))
    // the write with the refused message released nothing; the other released all three of each
    expect(counts[40]).toBe(0)
    expect(counts.filter((c) => c === 3).length).toBe(32)
    expect(counts.filter((c) => c === 0).length).toBe(32)
    // the fault gone: a second later the held-back numbers release their three (the failed
    // attempt was not counted against the hourly cap of three)
    await engine.run(stmt('', 'DROP TRIGGER refuse_boom ON messages'))
    await timers.advance(1000)
    expect(await Promise.all(numbers.map(releasedOf))).toEqual(numbers.map(() => 3))
  })

  test("a tick whose COMMIT's answer is lost (the connection cut once it went): the claims that landed are sent at the next tick, once each, and count against the caps — not left sending for nobody", async () => {
    await withCutter('cutter', async (cutter) => {
      onPg = await inProcessOnPostgres(cutter.via(await database()))
      const { svc, engine, timers } = onPg
      const ws = await svc.workspaces.create({ name: 'In doubt' })
      await svc.workspaces.patch(ws.id, { settings: { sending_policy: { hourly_cap: 3, daily_cap: 100, min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const conn = await svc.connections.create(ws.id, { phone: '+15553300001', driver: 'sandbox', config: NO_RECEIPTS })
      await waitFor(() => svc.pacer.leases.holds(conn.id))
      const ids: string[] = []
      for (let i = 0; i < 4; i++) ids.push((await svc.messages.send(ws.id, { connection_id: conn.id, recipient: `+155533100${i}0`, body: `in doubt ${i}`, attachments: [] })).id)
      // (the contacts' activity, written 200 ms after the sends, has its own COMMIT: let it land first)
      await Bun.sleep(400)
      cutter.arm()
      await timers.advance(0)
      await waitFor(() => cutter.cuts === 1)
      await settle(20)
      const statuses = async () => (await Promise.all(ids.map((id) => svc.messages.getAny(id)))).map((m) => m!.status)
      // the tick's claims landed (three: the hourly cap), and nothing was handed to the network
      await waitFor(async () => (await statuses()).join() === 'sending,sending,sending,queued')
      expect(Number((await engine.get<{ n: number }>(stmt('', 'SELECT count(*) AS n FROM sandbox_sends')))!.n)).toBe(0)
      // a second later the next tick finds them claimed, and sends them; the fourth waits out the hour
      await timers.advance(1000)
      await waitFor(async () => (await statuses()).join() === 'sent,sent,sent,queued', 10_000)
      await timers.advance(5000)
      await settle(20)
      expect(await statuses()).toEqual(['sent', 'sent', 'sent', 'queued'])
      await expectSentOnceEach(engine, ids.slice(0, 3))
    })
  })

  test("a graceful stop before the next tick, after a tick whose COMMIT's answer was lost: the claims that landed are handed back (marked to go on), not left for crash recovery to fail", async () => {
    await withCutter('cutter-stop', async (cutter) => {
      const url = await database()
      onPg = await inProcessOnPostgres(cutter.via(url))
      const { svc, engine } = onPg
      const { conn, ids } = await twoClaimedInDoubt(onPg, cutter, 'Stopped in doubt', '+15553500001', '+155535100')
      const rows = async () => (await engine.all<{ status: string; resend: number }>(stmt('', 'SELECT status, resend FROM messages WHERE id IN ($1, $2) ORDER BY id'), ...ids)).map((r) => `${r.status}:${r.resend}`)
      await waitFor(async () => (await rows()).join() === 'sending:0,sending:0')
      svc.pacer.stop()
      expect(await svc.pacer.handBackInDoubt()).toBe(2)
      expect(await rows()).toEqual(['sending:1', 'sending:1'])
      expect(await svc.pacer.handBackInDoubt()).toBe(0)
      expect(Number((await engine.get<{ n: number }>(stmt('', 'SELECT count(*) AS n FROM sandbox_sends')))!.n)).toBe(0)
      // the next start hands them to the network, each once
      await svc.pacer.leases.releaseAll()
      await onPg.close()
      onPg = await inProcessOnPostgres(url)
      const next = onPg
      await waitFor(() => next.svc.pacer.leases.holds(conn.id))
      await next.timers.advance(0)
      const sent = () => next.engine.all<{ status: string }>(stmt('', 'SELECT status FROM messages WHERE id IN ($1, $2)'), ...ids)
      await waitFor(async () => (await sent()).every((r) => r.status === 'sent'))
      await expectSentOnceEach(next.engine, ids)
    })
  })

  test("claims whose COMMIT's answer was lost, while this instance's own lease on the number lapsed (a database that stood still past it): kept, not settled by the crash recovery of its taking the number again — sent once each when it holds it again", async () => {
    await withCutter('cutter-lapsed', async (cutter) => {
      onPg = await inProcessOnPostgres(cutter.via(await database()))
      const { svc, engine, timers } = onPg
      const { conn, ids } = await twoClaimedInDoubt(onPg, cutter, 'Lapsed in doubt', '+15553600001', '+155536100')
      const rows = async () => (await engine.all<{ status: string; error_code: string | null }>(stmt('', 'SELECT status, error_code FROM messages WHERE id IN ($1, $2) ORDER BY id'), ...ids)).map((r) => `${r.status}:${r.error_code}`)
      await waitFor(async () => (await rows()).join() === 'sending:null,sending:null')
      // the lease ran out meanwhile, nobody else took it; the next tick finds it not held
      await engine.run(stmt('', 'UPDATE number_leases SET expires_at = 0 WHERE connection_id = $1'), conn.id)
      await timers.advance(1000)
      await settle(20)
      expect(await rows()).toEqual(['sending:null', 'sending:null'])
      // the renewal takes it again, as a number newly taken: its crash recovery leaves those claims alone
      expect(await svc.pacer.claimLeases([conn.id])).toEqual([conn.id])
      await settle(20)
      expect(await rows()).toEqual(['sending:null', 'sending:null'])
      // and the next tick sends them, once each
      await timers.advance(1000)
      await waitFor(async () => (await rows()).join() === 'sent:null,sent:null', 10_000)
      await expectSentOnceEach(engine, ids)
    })
  })

  test("the sandbox network's record of a send whose COMMIT's answer is lost (it may or may not have the message): asked, and settled as sent — never handed over again — and its delivered and read reports still come", async () => {
    await withCutter('cutter-record', async (cutter) => {
      onPg = await inProcessOnPostgres(cutter.via(await database()))
      const { svc, engine, timers } = onPg
      const { ws, conn } = await numberWithoutGaps(svc, 'Record in doubt', '+15553400001', { delivered_after_ms: 300, read_after_ms: 600, fail_recipients: [] })
      await waitFor(() => svc.pacer.leases.holds(conn.id))
      // the COMMIT of the write holding the sandbox's record of the send is the one cut
      const write = engine.write.bind(engine)
      engine.write = (fn) => write((tx) => fn({ ...tx, run: (s, ...p) => (s.pg.startsWith('INSERT INTO sandbox_sends') && cutter.arm(), tx.run(s, ...p)) }))
      const id = (await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15553400002', body: 'Your order shipped', attachments: [] })).id
      await timers.advance(0)
      await waitFor(() => cutter.cuts === 1)
      // (a retry, had it been taken for "not sent", would come within the retry delays)
      for (let i = 0; i < 4; i++) await timers.advance(60_000)
      // sent once, then delivered and read as the number's reports are set to come
      const m = await waitFor(async () => {
        const row = await svc.messages.getAny(id)
        return row?.status === 'read' ? row : null
      }, 10_000)
      expect([m.sent_at, m.delivered_at, m.read_at].every((t) => t !== null)).toBe(true)
      const sends = await engine.all<{ external_id: string }>(stmt('', 'SELECT external_id FROM sandbox_sends WHERE message_id = $1'), id)
      expect(sends.map((r) => r.external_id)).toEqual([m.external_id!])
    })
  })

  test('a number with no gap releases at most 20 in one write; the next write follows at once, in order', async () => {
    onPg = await inProcessOnPostgres(await database())
    const { svc, engine, timers } = onPg
    const { ws, conn } = await numberWithoutGaps(svc, 'Burst', '+15553200001')
    const ids: string[] = []
    for (let i = 0; i < 50; i++) ids.push((await svc.messages.send(ws.id, { connection_id: conn.id, recipient: `+1555320${String(i).padStart(4, '0')}`, body: `m${i}`, attachments: [] })).id)
    // how many messages each write claims (queued → sending)
    const perWrite: number[] = []
    const write = engine.write.bind(engine)
    engine.write = (fn) =>
      write(async (tx) => {
        let claims = 0
        // (a claim answers whether it landed: through `get` on PostgreSQL, merged with the turn's others)
        const claim = (s: Statement) => s.pg.startsWith("UPDATE messages SET status = 'sending'") && claims++
        const out = await fn({ ...tx, run: (s, ...p) => (claim(s), tx.run(s, ...p)), get: (s, ...p) => (claim(s), tx.get(s, ...p)) })
        if (claims) perWrite.push(claims)
        return out
      })
    const t0 = onPg.clock.t
    await timers.advance(0)
    expect(perWrite).toEqual([20, 20, 10])
    const released = await engine.all<{ id: string; sending_at: number }>(stmt('', 'SELECT id, sending_at FROM messages WHERE connection_id = $1 ORDER BY sending_at, seq'), conn.id)
    expect(released.map((m) => m.id)).toEqual(ids)
    expect(released.every((m) => m.sending_at === t0)).toBe(true)
  })

  test('a send a crash cut off, asked about while the database is away for a moment: asked again, and recorded as sent, not failed', async () => {
    onPg = await inProcessOnPostgres(await database())
    const { svc, engine, timers } = onPg
    const { ws, conn } = await numberWithoutGaps(svc, 'Asked again', '+15553300001')
    const id = (await svc.messages.send(ws.id, { connection_id: conn.id, recipient: '+15553300002', body: 'Your order shipped', attachments: [] })).id
    await timers.advance(0)
    const recorded = (await waitFor(async () => {
      const m = await svc.messages.getAny(id)
      return m?.status === 'sent' ? m : null
    })).external_id
    // a crash after the sandbox recorded the send and before its outcome was written: back in sending
    await engine.run(stmt('', "UPDATE messages SET status = 'sending', external_id = NULL, sent_at = NULL WHERE id = $1"), id)
    // the first look at the sandbox's record of sends finds the database away (the connection closed)
    let looks = 0
    const get = engine.get.bind(engine)
    engine.get = (s, ...p) => (s.pg.includes('sandbox_sends') && looks++ === 0 ? Promise.reject(Object.assign(new Error('Connection closed'), { code: 'ERR_POSTGRES_CONNECTION_CLOSED' })) : get(s, ...p))
    await svc.messages.recoverInterrupted()
    const m = await svc.messages.getAny(id)
    expect([m?.status, m?.external_id, m?.error_code, looks]).toEqual(['sent', recorded, null, 2])
  })

  test("the outcomes of one turn share a transaction; one that cannot be written is written alone and holds back none of the others", async () => {
    onPg = await inProcessOnPostgres(await database())
    const { svc, engine } = onPg
    const ws = await svc.workspaces.create({ name: 'Outcomes' })
    // (no timer fires unless the test moves the clock: the messages stay queued for the test to settle)
    const conn = await svc.connections.create(ws.id, { phone: '+15553100001', driver: 'sandbox', config: NO_RECEIPTS })
    const send = async (body: string, n: number) => (await svc.messages.send(ws.id, { connection_id: conn.id, recipient: `+1555310${String(n).padStart(4, '0')}`, body, attachments: [] })).id
    const ids = [await send('first', 0), await send('a', 1), await send('b', 2), await send('c', 3), await send('boom', 4)]
    const [, a, b, c, boom] = ids as [string, string, string, string, string]
    const version = stmt('', 'SELECT xmin::text AS tx, status FROM messages WHERE id = $1')
    const of = (id: string) => engine.get<{ tx: string; status: string }>(version, id)
    // three in one turn: one transaction
    await Promise.all([svc.messages.markSent(a, { externalId: 'x-a' }), svc.messages.markSent(b, { externalId: 'x-b' }), svc.messages.markFailed(c, 'recipient_unreachable', 'Unreachable.')])
    const [ra, rb, rc] = await Promise.all([of(a), of(b), of(c)])
    expect([ra!.status, rb!.status, rc!.status]).toEqual(['sent', 'sent', 'failed'])
    expect(new Set([ra!.tx, rb!.tx, rc!.tx]).size).toBe(1)
    // PostgreSQL refuses one of the next turn's outcomes: the other is written all the same
    await engine.run(stmt('', `CREATE FUNCTION refuse_boom() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN IF NEW.body = 'boom' THEN RAISE EXCEPTION 'refused'; END IF; RETURN NEW; END $$`))
    await engine.run(stmt('', `CREATE TRIGGER refuse_boom BEFORE UPDATE OF status ON messages FOR EACH ROW WHEN (NEW.status = 'sent') EXECUTE FUNCTION refuse_boom()`))
    const first = ids[0]!
    const outcomes = await Promise.allSettled([svc.messages.markSent(boom, { externalId: 'x-boom' }), svc.messages.markSent(first, { externalId: 'x-first' })])
    expect(outcomes.map((o) => o.status)).toEqual(['rejected', 'fulfilled'])
    expect([(await of(boom))!.status, (await of(first))!.status]).toEqual(['queued', 'sent'])
  })

  test('a graceful stop lets go of every lease, also one a claim still on its way takes; nothing is claimed after it', async () => {
    onPg = await inProcessOnPostgres(await database())
    const { engine } = onPg
    const leases = new NumberLeases(engine)
    const [a, b] = [crypto.randomUUID(), crypto.randomUUID()]
    // a run-out lease of another instance on `a`, its row locked for a while: a claim of `a` waits for it
    await engine.write((tx) => tx.run(stmt('INSERT INTO number_leases (connection_id, owner, expires_at) VALUES (?, ?, 0)'), a, 'gone'))
    let unlock = () => {}
    const locked = new Promise<void>((r) => (unlock = r))
    const holding = engine.write(async (tx) => {
      await tx.get(stmt('SELECT 1 AS yes FROM number_leases WHERE connection_id = ? FOR UPDATE'), a)
      await locked
    })
    await Bun.sleep(100)
    const claiming = leases.claim([b, a])
    await Bun.sleep(100)
    const stopping = leases.releaseAll()
    await Bun.sleep(100)
    unlock()
    await holding
    await stopping
    expect(await claiming).toEqual([])
    const mine = stmt('SELECT connection_id FROM number_leases WHERE owner = ?')
    expect(await engine.all(mine, leases.owner)).toEqual([])
    expect(await leases.claim([b])).toEqual([])
    expect(await engine.all(mine, leases.owner)).toEqual([])
    expect(leases.holds(b)).toBe(false)
  })

  test('one at a time: asked for while it runs, it runs once more after, however often it was asked; per key, keys side by side', async () => {
    let runs = 0
    let release = () => {}
    const once = new OneAtATime(async () => {
      runs++
      await new Promise<void>((r) => (release = r))
    })
    expect(once.running).toBe(false)
    once.ask()
    expect([runs, once.running]).toEqual([1, true])
    for (let i = 0; i < 5; i++) once.ask()
    expect(runs).toBe(1)
    release()
    await waitFor(() => runs === 2 || null)
    release()
    await waitFor(() => !once.running || null)
    expect(runs).toBe(2)
    once.ask()
    release()
    await waitFor(() => !once.running || null)
    expect(runs).toBe(3)

    const started: string[] = []
    const releases = new Map<string, () => void>()
    const each = new OneAtATimeEach<string>(async (k) => {
      started.push(k)
      await new Promise<void>((r) => releases.set(k, r))
    })
    each.ask('a')
    each.ask('b')
    each.ask('a')
    each.ask('a')
    expect(started).toEqual(['a', 'b'])
    releases.get('b')!()
    releases.get('a')!()
    await waitFor(() => started.length === 3 || null)
    expect(started).toEqual(['a', 'b', 'a'])
    releases.get('a')!()
    await Bun.sleep(10)
    expect(started).toEqual(['a', 'b', 'a'])
  })

  test('at most n run at once; after a failure none is started, and it throws only once every started one has settled', async () => {
    const events: string[] = []
    let running = 0
    let most = 0
    const work = async (i: number) => {
      running++
      most = Math.max(most, running)
      events.push(`start ${i}`)
      await Bun.sleep(i === 2 ? 5 : 30)
      running--
      events.push(`end ${i}`)
      if (i === 2) throw new Error('number 2 failed')
    }
    await expect(eachConcurrently([0, 1, 2, 3, 4, 5, 6, 7], 3, work)).rejects.toThrow('number 2 failed')
    // the first three ran together; nothing began after 2 failed; 0 and 1 ended before the throw
    expect(most).toBe(3)
    expect(events.filter((e) => e.startsWith('start'))).toEqual(['start 0', 'start 1', 'start 2'])
    expect(events.sort()).toEqual(['end 0', 'end 1', 'end 2', 'start 0', 'start 1', 'start 2'])
    expect(running).toBe(0)
    // all of them when nothing fails
    const seen: number[] = []
    await eachConcurrently([1, 2, 3, 4, 5], 2, async (i) => {
      seen.push(i)
    })
    expect(seen).toEqual([1, 2, 3, 4, 5])
  })
})
