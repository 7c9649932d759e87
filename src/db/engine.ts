/**
 * The seam between Capstan's stores and the database engine it runs on (docs/design/two-engines.md):
 * the embedded SQLite file (the default) or PostgreSQL (CAPSTAN_DATABASE_URL). A store states each
 * statement once as `stmt(text)` — written for SQLite with `?` placeholders, turned into `$n` for
 * PostgreSQL — or `stmt(sqlite, pg)` where the dialects differ; it reads through `all`/`get` and
 * writes inside `write(async (tx) => …)`, never asking which engine it is on.
 *
 * `write` has one contract on both: the callback's statements commit together or not at all,
 * and the promise resolves only once they are durable; it may run twice. On SQLite it joins the
 * group commit (db/writer.ts: the callback must await only `tx`); on PostgreSQL it shares a
 * transaction with the other writes asked for in the same turn (PgEngine.write).
 */
import type { Database, Statement as Prepared } from 'bun:sqlite'
import { hostname } from 'node:os'
import { emptyWal } from './wal'
import type { Writer } from './writer'

/** One statement in both dialects. */
export interface Statement {
  readonly sqlite: string
  readonly pg: string
  /** PostgreSQL: the same statement for several calls at once (see `mergeable`). */
  readonly many?: string
}

export type Param = string | number | boolean | null | Uint8Array

/**
 * SQLite's `?` placeholders as PostgreSQL's `$1, $2, …` — outside quoted text and identifiers,
 * so `'?'` and `"a?"` stay as written.
 */
export function pgPlaceholders(text: string): string {
  let n = 0
  let out = ''
  let quote: string | null = null
  for (const c of text) {
    if (quote) {
      if (c === quote) quote = null
      out += c
    } else if (c === "'" || c === '"') {
      quote = c
      out += c
    } else out += c === '?' ? `$${++n}` : c
  }
  return out
}

/** A statement: the same text for both engines (placeholders converted), or one text for each. */
export const stmt = (sqlite: string, pg?: string): Statement => ({ sqlite, pg: pg ?? pgPlaceholders(sqlite) })

/**
 * What a transaction changes alone where instances share the database: each kind a class of
 * PostgreSQL's transaction-level advisory locks (let go at its COMMIT), keyed by a hash of a name
 * (a file, a workspace). docs/several-machines.md lists them for poolers.
 */
export const TURNS = { mediaFile: 1397244243, allowance: 1397244244, mediaQuota: 1397244245 } as const

/** Inside a write: wait until no other transaction holds the turn of `kind` for the name given ($1). SQLite's writes are one at a time already. */
export const turnOf = (kind: (typeof TURNS)[keyof typeof TURNS]): Statement => stmt('SELECT 1 AS ok', `SELECT pg_advisory_xact_lock(${kind}, hashtext($1))`)

/**
 * PostgreSQL's rows of the calls a merged statement stands for (see `mergeable`): `calls.v`, one
 * call's parameters as a JSON array (`calls.v->>0` its first, as text), and `calls.n`, its place
 * (1-based), in call order.
 */
export const MANY_CALLS = 'jsonb_array_elements(CAST($1 AS text)::jsonb) WITH ORDINALITY AS calls(v, n)'

/**
 * A statement that the writes sharing one PostgreSQL transaction (PgEngine.write) may run as one
 * when several of them make it in the same turn: a send's lookups, its message and its counts, one
 * statement each for the whole batch instead of one per send — PostgreSQL spends most of a small
 * statement's time starting and ending it. `many` is the PostgreSQL text for any number of calls;
 * its one parameter holds the calls' parameters (read through MANY_CALLS); one that returns rows
 * names each row's call in a column `call_` (0-based). Its parameters must be text, numbers or
 * null, and what a merged `run` resolves with is the whole statement's count: its callers must not
 * read it. SQLite runs each call as it comes, as any statement.
 */
export const mergeable = (s: Statement, many: string): Statement => ({ ...s, many })

/** The calls' parameters as MANY_CALLS's columns, in order: text as it is, other types cast (`types`: one per parameter). */
const callParams = (types: readonly string[]) => types.map((t, i) => (t === 'TEXT' ? `calls.v->>${i}` : `CAST(calls.v->>${i} AS ${t})`)).join(', ')

/** A mergeable INSERT of one row per call (`columns`: each column's PostgreSQL type, TEXT or BIGINT, in the order of the parameters), the rows in call order. */
export function insertStatement(table: string, columns: Readonly<Record<string, 'TEXT' | 'BIGINT'>>): Statement {
  const names = Object.keys(columns).join(', ')
  const one = stmt(`INSERT INTO ${table} (${names}) VALUES (${Object.keys(columns).map(() => '?').join(', ')})`)
  return mergeable(one, `INSERT INTO ${table} (${names}) SELECT ${callParams(Object.values(columns))} FROM ${MANY_CALLS} ORDER BY calls.n`)
}

/** A mergeable read of at most one row of `table` per call, by `keys` (each call's parameters, in that order; all TEXT) that make a unique key. */
export function oneByKey(table: string, keys: readonly string[]): Statement {
  const one = stmt(`SELECT * FROM ${table} WHERE ${keys.map((k) => `${k} = ?`).join(' AND ')}`)
  return mergeable(one, `SELECT calls.n - 1 AS call_, t.* FROM ${MANY_CALLS} CROSS JOIN LATERAL (SELECT * FROM ${table} WHERE ${keys.map((k, i) => `${k} = calls.v->>${i}`).join(' AND ')} LIMIT 1) AS t`)
}

/** What stores read and write with: inside a `write` it is that write's transaction. */
export interface Queries {
  all<T>(s: Statement, ...params: Param[]): Promise<T[]>
  get<T>(s: Statement, ...params: Param[]): Promise<T | null>
  /** Runs a statement; resolves with the number of rows it changed. */
  run(s: Statement, ...params: Param[]): Promise<number>
}

/** Reads answered in the calling turn, with no promise: what an engine on the same machine can do. */
export interface ReadsNow {
  get<T>(s: Statement, ...params: Param[]): T | null
}

export interface Engine extends Queries {
  readonly kind: 'sqlite' | 'postgres'
  /**
   * Whether other processes may be using this database at the same time (several instances on
   * PostgreSQL): what one instance keeps in memory alone — request counts, a network's simulated
   * record — must then be kept in the database. The embedded file belongs to one process (its lock).
   */
  readonly shared: boolean
  /**
   * Reads at once, where the engine can (SQLite: its file is local and its calls synchronous);
   * null where every read waits for the network (PostgreSQL). For the few request-path reads
   * that would otherwise make every request wait a turn (an API key not yet in memory).
   */
  readonly now: ReadsNow | null
  /** The callback's statements, committed together and durable before this resolves (see header). */
  write<T>(fn: (tx: Queries) => Promise<T>): Promise<T>
  /**
   * `write`, in a transaction of its own where writes otherwise share one (PostgreSQL): for a write
   * of many rows that other instances write too (times kept in memory and written behind), which
   * in a shared transaction would hold the other writes' rows while it waits for another instance,
   * and they for it (a deadlock). SQLite's one connection waits for nobody: as `write`.
   */
  writeApart<T>(fn: (tx: Queries) => Promise<T>): Promise<T>
  /**
   * After personal data was deleted or overwritten: leave no older copy of those rows in the
   * engine's own files, where the engine can see to it at once. SQLite zeroes what it deletes
   * (`secure_delete`) and here empties its WAL into the database (false: another process was
   * reading it, it happens at a later checkpoint). PostgreSQL's dead row versions are reclaimed
   * by its autovacuum; nothing to do here.
   */
  scrub(): Promise<boolean>
  /**
   * Tell every instance on this database that `what` changed ("kind:id"), once `tx` commits — a
   * key revoked, a workspace deactivated, a number added — so each drops or reloads what it keeps
   * in memory (PostgreSQL's NOTIFY, delivered in commit order). One process is the whole truth on
   * SQLite: nothing to tell.
   */
  announce(tx: Queries, what: string): Promise<void>
  /**
   * Run `fn` once the write `tx` belongs to has committed — to wake what should act on the rows it
   * made (a webhook delivery), which another connection can only see after the commit; on
   * PostgreSQL not at all when the write fails or is run again (its rerun asks again). SQLite has
   * one connection, which reads its write's rows at once, and commits in the same turn: `fn` runs
   * at once (so also for a write that then fails: only ever to wake a look that finds nothing).
   */
  afterCommit(tx: Queries, fn: () => void): void
  /**
   * After a committed write announced `what`: resolves once the announcement has gone round —
   * this instance heard it back, and the others (who hear it at the same moment) have had a moment
   * to apply it — so the answer to an operator's change (a workspace deactivated, a key revoked)
   * holds on the next request whichever instance takes it. At most a second; at once on SQLite.
   */
  propagated(what: string): Promise<void>
  /**
   * Hear what the instances announce (this one's own too) until the engine closes. `resumed` runs
   * each time the listening connection is back after it dropped: what was announced meanwhile was
   * not heard, so what is kept in memory is read again.
   */
  listen(heard: (what: string) => void, resumed?: () => void): Promise<void>
  close(): Promise<void>
}

/** How long readiness and /metrics wait for the database's answer before calling it unavailable. */
const STATE_WAIT_MS = 3_000

// (PostgreSQL: a standby, or a primary made read-only, starts each transaction read-only)
const PING = stmt('SELECT 0 AS ro', "SELECT (current_setting('transaction_read_only') = 'on')::int AS ro")

/** What the database does now (readiness, /metrics): answers and takes writes, answers reads only, or does not answer. */
export async function databaseState(db: Queries): Promise<'ok' | 'read_only' | 'unavailable'> {
  try {
    // (a server that does not answer is unavailable: readiness answers within a load balancer's wait)
    const row = await Promise.race([db.get<{ ro: number }>(PING), Bun.sleep(STATE_WAIT_MS).then(() => null)])
    return row === null ? 'unavailable' : Number(row.ro) ? 'read_only' : 'ok'
  } catch {
    return 'unavailable'
  }
}

/**
 * PostgreSQL could not be used for a moment, and the statement changed nothing: the connection
 * refused, closed or timed out (08…); the server shutting down, starting up or in recovery
 * (57P01–03); read-only (25006: a primary being demoted in a failover, or a standby the URL now
 * reaches); out of connections, memory or disk (53100–53300); a deadlock or serialization failure
 * that rolled the transaction back (40P01, 40001). The request may be tried again. (One case
 * may have changed something: a COMMIT whose answer was lost, `CommitInDoubt`.)
 */
export const databaseAway = (error: unknown) => connectionLost(error) || /^(25006|53[123]00|40P01|40001)$/.test(String((error as { errno?: unknown } | null)?.errno ?? ''))

/** The connection to PostgreSQL could not be made or was lost (refused, closed, timed out, the server going down) — not a statement refused. */
const connectionLost = (error: unknown) => {
  const e = error as { code?: unknown; errno?: unknown } | null
  return /^ERR_POSTGRES_(CONNECTION_(CLOSED|REFUSED|FAILED|TIMEOUT)|IDLE_TIMEOUT|LIFETIME_TIMEOUT)$/.test(String(e?.code ?? '')) || /^(57P0[123]|08\d{3})$/.test(String(e?.errno ?? ''))
}

/**
 * A COMMIT went to PostgreSQL and its answer never came back (the connection was lost on the
 * way): the transaction may have committed, or not — no client can tell from here. Its writes
 * are not run again (that could make them twice); each fails with this, which is `databaseAway`
 * (503, and tried again where a write is kept until it lands — those writes are conditional, so
 * one that did commit changes nothing the second time). An API write sent with an
 * Idempotency-Key replays its first answer when it did commit.
 */
export class CommitInDoubt extends Error {
  readonly code: unknown
  readonly errno: unknown
  constructor(readonly cause: unknown) {
    super('the connection to the database was lost after COMMIT was sent: the transaction may have committed')
    this.code = (cause as { code?: unknown } | null)?.code
    this.errno = (cause as { errno?: unknown } | null)?.errno
  }
}

/**
 * PostgreSQL stopped answering (a server hung, or a network that drops packets without closing
 * anything, where a connection can wait many minutes for its end): statements that waited past
 * STALL_MS while a fresh connection could not get an answer either were given up on
 * (PgEngine's watchdog), and new ones are refused at once until it answers again. A
 * `databaseAway` (503). A transaction given up on before its COMMIT was sent had its connection
 * closed, so it can never commit; one given up on after is a `CommitInDoubt`.
 */
export class DatabaseHung extends Error {
  readonly code = 'ERR_POSTGRES_CONNECTION_TIMEOUT'
  constructor() {
    super('PostgreSQL does not answer')
  }
}

/** A row with that key (a primary key or a UNIQUE index) is already there: the same on both engines. */
export class UniqueViolation extends Error {
  constructor(readonly cause: unknown) {
    super('unique constraint violated')
  }
}

const isUnique = (e: unknown) => {
  const code = String((e as { code?: unknown; errno?: unknown } | null)?.code ?? '')
  return code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY' || String((e as { errno?: unknown } | null)?.errno ?? '') === '23505'
}
const normalized = (e: unknown) => (isUnique(e) ? new UniqueViolation(e) : e)

/** The embedded engine: one SQLite connection, its writes through the group commit. */
export class SqliteEngine implements Engine {
  readonly kind = 'sqlite'
  readonly shared = false
  readonly now: ReadsNow = {
    get: <T>(s: Statement, ...params: Param[]) => {
      try {
        return (this.statement(s).get(...params) as T | undefined) ?? null
      } catch (e) {
        throw normalized(e)
      }
    },
  }
  // weakly held: a statement made for one call (an audience's filter) goes with it
  private prepared = new WeakMap<Statement, Prepared>()

  constructor(
    private readonly db: Database,
    private readonly writer: Writer,
  ) {}

  private statement(s: Statement): Prepared {
    let p = this.prepared.get(s)
    if (!p) {
      p = this.db.prepare(s.sqlite)
      this.prepared.set(s, p)
    }
    return p
  }

  // each call runs the statement at once (SQLite is synchronous) and hands back a settled promise,
  // so a write's callback awaiting these never leaves the turn of the event loop
  async all<T>(s: Statement, ...params: Param[]): Promise<T[]> {
    try {
      return this.statement(s).all(...params) as T[]
    } catch (e) {
      throw normalized(e)
    }
  }

  async get<T>(s: Statement, ...params: Param[]): Promise<T | null> {
    return this.now.get<T>(s, ...params)
  }

  async run(s: Statement, ...params: Param[]): Promise<number> {
    try {
      return this.statement(s).run(...params).changes
    } catch (e) {
      throw normalized(e)
    }
  }

  write<T>(fn: (tx: Queries) => Promise<T>): Promise<T> {
    return this.writer.write(() => fn(this))
  }

  writeApart<T>(fn: (tx: Queries) => Promise<T>): Promise<T> {
    return this.write(fn)
  }

  scrub(): Promise<boolean> {
    return emptyWal(this.db)
  }

  async announce() {}

  afterCommit(_tx: Queries, fn: () => void) {
    fn()
  }

  async propagated() {}

  async listen() {}

  async close() {
    this.prepared = new WeakMap()
  }
}

type PgClient = InstanceType<typeof Bun.SQL>
type ReservedConnection = Awaited<ReturnType<PgClient['reserve']>>
type PgRunner = Pick<PgClient, 'unsafe'>

/**
 * PostgreSQL's int8 columns (Capstan's times in milliseconds, counts) come from Bun.SQL as BigInt
 * (`bigint: true`); every value Capstan keeps in them fits a double exactly, so rows carry numbers
 * as on SQLite.
 */
function plainRow<T>(row: Record<string, unknown>): T {
  for (const k in row) if (typeof row[k] === 'bigint') row[k] = Number(row[k])
  return row as T
}

function pgQueries(runner: PgRunner): Queries {
  const exec = async (s: Statement, params: Param[]) => {
    try {
      return await runner.unsafe(s.pg, params)
    } catch (e) {
      throw normalized(e)
    }
  }
  return {
    async all<T>(s: Statement, ...params: Param[]) {
      return ((await exec(s, params)) as Record<string, unknown>[]).map((r) => plainRow<T>(r))
    },
    async get<T>(s: Statement, ...params: Param[]) {
      const rows = (await exec(s, params)) as Record<string, unknown>[]
      return rows.length ? plainRow<T>(rows[0]!) : null
    },
    async run(s: Statement, ...params: Param[]) {
      return ((await exec(s, params)) as unknown as { count: number }).count
    },
  }
}

/** The channel instances announce changes on (see Engine.announce; a migration announces `schema:<version>` on it too). */
export const CHANNEL = 'capstan_changes'
/** How long `propagated` waits for its own echo at most, and how long after it (the others apply the change in a read or two). */
const PROPAGATION_WAIT_MS = 1000
const PROPAGATION_GRACE_MS = 30
const NOTIFY = stmt('', `SELECT pg_notify('${CHANNEL}', $1)`)

/** Most writes one shared transaction takes (see PgEngine.write). */
const GATHER_MAX = 64

interface Gathered {
  fn: (tx: Queries) => Promise<unknown>
  done: (v: unknown) => void
  failed: (e: unknown) => void
}

const pure = new WeakMap<Statement, boolean>()
/** Whether a statement only reads (a SELECT that announces nothing): one that failed after it needs no undo. */
function readsOnly(s: Statement): boolean {
  let r = pure.get(s)
  if (r === undefined) {
    r = /^\s*SELECT\b/i.test(s.pg) && !/pg_notify|nextval|setval/i.test(s.pg)
    pure.set(s, r)
  }
  return r
}

interface Held {
  who: number
  s: Statement
  params: Param[]
  /** `run` (resolves with the count) or `all` (with the rows) */
  counts: boolean
  done: (v: never) => void
  failed: (e: unknown) => void
}

/**
 * The calls of one shared transaction's writes, each `mergeable` statement held until the end of
 * the turn and then sent once for all who made it (see `mergeable`). A write's own statements keep
 * their order: once it has a call held, its later calls wait behind it, and a call joins the group
 * of its statement only if no group it must follow comes after that group.
 */
class Merger {
  private held: Held[] = []
  /** The writes with a call held (their next calls are held too). */
  private waiting = new Set<number>()

  constructor(private readonly q: Queries) {}

  all<T>(who: number, s: Statement, params: Param[]): Promise<T[]> {
    if (!s.many && !this.waiting.has(who)) return this.q.all<T>(s, ...params)
    return this.hold(who, s, params, false) as Promise<T[]>
  }

  run(who: number, s: Statement, params: Param[]): Promise<number> {
    if (!s.many && !this.waiting.has(who)) return this.q.run(s, ...params)
    return this.hold(who, s, params, true) as Promise<number>
  }

  private hold(who: number, s: Statement, params: Param[], counts: boolean): Promise<unknown> {
    return new Promise((done, failed) => {
      if (this.held.length === 0) setImmediate(() => void this.flush())
      this.held.push({ who, s, params, counts, done: done as (v: never) => void, failed })
      this.waiting.add(who)
    })
  }

  /** Send what is held: a statement per group, the groups in an order that keeps each write's. */
  async flush() {
    const held = this.held
    if (held.length === 0) return
    this.held = []
    this.waiting.clear()
    const groups: Held[][] = []
    const after = new Map<number, number>()
    for (const h of held) {
      const floor = after.get(h.who) ?? 0
      let g = -1
      if (h.s.many && !h.params.some((p) => p instanceof Uint8Array))
        for (let i = groups.length - 1; i >= floor; i--) {
          const first = groups[i]![0]!
          if (first.s === h.s && first.counts === h.counts) {
            g = i
            break
          }
        }
      if (g < 0) g = groups.push([h]) - 1
      else groups[g]!.push(h)
      after.set(h.who, g)
    }
    // sent one after another without waiting (one connection answers in order)
    await Promise.allSettled(groups.map((group) => this.send(group)))
  }

  private async send(group: Held[]) {
    const first = group[0]!
    try {
      if (group.length === 1) {
        first.done((await (first.counts ? this.q.run(first.s, ...first.params) : this.q.all(first.s, ...first.params))) as never)
        return
      }
      const many = manyOf(first.s)
      const calls = JSON.stringify(group.map((h) => h.params))
      if (first.counts) {
        const n = await this.q.run(many, calls)
        for (const h of group) h.done(n as never)
        return
      }
      const rows = await this.q.all<Record<string, unknown>>(many, calls)
      const each: Record<string, unknown>[][] = group.map(() => [])
      for (const row of rows) {
        const i = Number(row.call_)
        delete row.call_
        each[i]?.push(row)
      }
      group.forEach((h, i) => h.done(each[i] as never))
    } catch (e) {
      for (const h of group) h.failed(e)
    }
  }
}

const manyStatements = new WeakMap<Statement, Statement>()
/** The merged form of a mergeable statement, as a statement of its own (prepared once). */
function manyOf(s: Statement): Statement {
  let m = manyStatements.get(s)
  if (!m) {
    m = { sqlite: '', pg: s.many! }
    manyStatements.set(s, m)
  }
  return m
}

/** How long a statement or transaction waits before the watchdog asks whether PostgreSQL answers at all. */
export const STALL_MS = 5_000
/** How long that question (on a fresh connection: what this instance's sessions are doing) waits for its answer. */
export const PING_MS = 5_000

/** How long closing the pool (a graceful stop's last step) waits for statements still running before it ends them. */
export const CLOSE_WAIT_MS = 3_000

/** How often an instance checks that it still hears what is announced (see PgEngine.checkHearing). */
export const HEARING_EVERY_MS = 10_000
/** How long it waits for its own heartbeat to come back. */
const HEARING_WITHIN_MS = 5_000

/** A statement or transaction waiting on PostgreSQL, as the watchdog sees it (see PgEngine.watch). */
interface Waiting {
  since: number
  giveUp: (e: Error) => void
  /** Given up on already (its caller has its error; it stays until its statement ends). */
  givenUp?: boolean
}

/** Give up on what waits (see Waiting). */
const giveUp = (w: Waiting, e: Error) => {
  w.givenUp = true
  w.giveUp(e)
}

/**
 * What each of Capstan's PostgreSQL sessions is started with (see PgEngine.connect): no idle,
 * statement or lock timeout and read committed, whatever the server, role or database says.
 */
export const SESSION = { application_name: 'capstan', idle_session_timeout: 0, statement_timeout: 0, lock_timeout: 0, default_transaction_isolation: 'read committed' }

/**
 * The `application_name` of this process's sessions: `capstan`, the machine and the process, and
 * a few random characters (two containers may share both) — how an operator tells instances apart
 * in `pg_stat_activity`, and how the watchdog finds this instance's own sessions there.
 */
export const sessionName = () => `capstan ${hostname().slice(0, 32)} ${process.pid} ${crypto.randomUUID().slice(0, 4)}`

/** PostgreSQL through Bun's built-in client: a pool of connections; the writes of a turn share a transaction. */
export class PgEngine implements Engine {
  readonly kind = 'postgres'
  readonly shared = true
  readonly now = null
  private queries: Queries

  constructor(
    private client: PgClient,
    /** Where a fresh connection asks whether the server answers (the watchdog); none: no watchdog. */
    private readonly url: string | null = null,
    /** How to make the pool again when its connections lead nowhere (see `watch`). */
    private readonly remake: (() => PgClient) | null = null,
    /** Its sessions' `application_name` (see sessionName). */
    private readonly name = SESSION.application_name,
  ) {
    this.queries = pgQueries(client)
    if (url) {
      this.watchdog = setInterval(() => void this.watch(), 1000)
      this.watchdog.unref()
    }
  }

  /**
   * A pool of at most `max` connections to `url` (CAPSTAN_DATABASE_POOL); statements wait for a
   * free one. Each session is named `capstan` (pg_stat_activity), whatever the server, role or
   * database set: exempt from an `idle_session_timeout` (the connection that listens for the
   * other instances' changes is idle by design, and one closed every few seconds would have this
   * instance read everything again each time), and read committed — the writes are made for it
   * (a conditional statement decides against what others committed); under a default of
   * serializable or repeatable read, writes to the same rows at once failed each other.
   */
  static connect(url: string, max: number): PgEngine {
    const name = sessionName()
    const pool = () => new Bun.SQL(url, { max, bigint: true, connection: { ...SESSION, application_name: name } })
    return new PgEngine(pool(), url, pool, name)
  }

  all<T>(s: Statement, ...params: Param[]) {
    return this.watched(() => this.queries.all<T>(s, ...params))
  }

  get<T>(s: Statement, ...params: Param[]) {
    return this.watched(() => this.queries.get<T>(s, ...params))
  }

  run(s: Statement, ...params: Param[]) {
    return this.watched(() => this.queries.run(s, ...params))
  }

  private watchdog: Timer | null = null
  /** What waits on PostgreSQL now (the statements of the pool, the transactions). */
  private readonly waiting = new Set<Waiting>()
  /** PostgreSQL did not answer the watchdog's last question: everything is refused at once until it does. */
  private hung = false
  private asking = false
  /** When the watchdog's question was last answered. */
  private answeredAt = 0
  /** Told when the watchdog finds the server not answering (true), and when it answers again (false). */
  onHung: (hung: boolean) => void = () => {}

  /** A statement on the pool, given up on (DatabaseHung) if the watchdog finds the server not answering. */
  private watched<T>(run: () => Promise<T>): Promise<T> {
    if (!this.url) return run()
    if (this.hung) return Promise.reject(new DatabaseHung())
    return new Promise<T>((done, failed) => {
      const w: Waiting = { since: Date.now(), giveUp: failed }
      this.waiting.add(w)
      run()
        .then(done, failed)
        .finally(() => this.waiting.delete(w))
    })
  }

  /**
   * Once a second: when something has waited on PostgreSQL longer than STALL_MS (or the server
   * was found not answering), ask it on a fresh connection. No answer within PING_MS: everything
   * waiting is given up on — a hung server or a network dropping packets is not waited on for the
   * minutes a connection can take to end — and new statements are refused until it answers again.
   * An answer: the server is also asked what this instance's sessions are doing. One of them
   * working (a statement running or waiting for a lock, a transaction open) is left alone, however
   * long. None, while what waited is still waiting: it waits on connections the server does not
   * know — left open without a word by a failover behind the same address or a server host gone
   * at once, which TCP would take many minutes to end — so it is given up on, the pool is made
   * again, and this instance listens anew (see `reconnect`) — when found so at two looks in a
   * row, a second apart.
   */
  private async watch() {
    if (this.asking) return
    const now = Date.now()
    // (a long statement on a server that answers is asked about once every STALL_MS, not every
    // second — except once more at the next look when none of this instance's sessions worked)
    const stalled = [...this.waiting].filter((w) => this.idleStalled.has(w) || now - Math.max(w.since, this.answeredAt) > this.stallMs)
    if (!stalled.length && !this.hung) return
    this.asking = true
    try {
      const busy = await this.answers()
      const answers = busy !== null
      if (answers) this.answeredAt = Date.now()
      // (what was given up on already, after a server that did not answer, holds no caller up:
      // it only waits for its statement to end, as it does when the server answers again)
      const idle = answers && busy === 0 && !this.hung ? stalled.filter((w) => this.waiting.has(w) && !w.givenUp) : []
      // the same waits found so at two looks in a row (a second apart): a moment when each of its
      // sessions was between two statements is not that
      const confirmed = idle.some((w) => this.idleStalled.has(w))
      this.idleStalled = confirmed ? new Set() : new Set(idle)
      if (confirmed) return this.reconnect()
      if (answers !== this.hung) return
      this.hung = !answers
      this.onHung(this.hung)
      if (this.hung) for (const w of [...this.waiting]) giveUp(w, new DatabaseHung())
    } finally {
      this.asking = false
    }
  }

  /**
   * Whether PostgreSQL answers a fresh connection within PING_MS: null if not, else how many of
   * this instance's other sessions are doing something (not idle).
   */
  private async answers(): Promise<number | null> {
    const probe = new Bun.SQL(this.url!, { max: 1, connectionTimeout: PING_MS / 1000, connection: SESSION })
    try {
      // (the name as a prefix: a pooler may add to it, as PgBouncer's application_name_add_host does)
      const asked = probe`SELECT COUNT(*)::int AS n FROM pg_stat_activity WHERE left(application_name, length(${this.name})) = ${this.name} AND pid <> pg_backend_pid() AND state <> 'idle'`
      return await Promise.race([asked.then(([row]) => Number(row.n), () => null), Bun.sleep(PING_MS).then(() => null)])
    } finally {
      void probe.close().catch(() => {})
    }
  }

  /** The pool made again (see `watch`): what waits on the old one is given up on, and listening starts on the new one. */
  private reconnect() {
    if (!this.remake) return
    const old = this.client
    this.client = this.remake()
    this.queries = pgQueries(this.client)
    for (const w of [...this.waiting]) giveUp(w, new DatabaseHung())
    void old.close({ timeout: 0 }).catch(() => {})
    this.reconnects++
    this.onReconnect()
    if (this.subscribe) {
      const subscribe = this.subscribe
      void subscribe()
        .then((s) => (this.subscription = s))
        .catch(() => {
          // the database went away meanwhile: checkHearing listens again when it is back
          this.subscription = null
        })
    }
  }

  /** What waited while none of this instance's sessions worked at the watchdog's last look (see `watch`). */
  private idleStalled = new Set<Waiting>()
  /** How long something waits before the watchdog asks (STALL_MS; tests make it shorter). */
  stallMs = STALL_MS
  /** How many times the pool was made again (see `watch`). */
  reconnects = 0
  /** Told when the pool is made again (for the log). */
  onReconnect: () => void = () => {}

  /** Writes asked for in this turn, run together at its end (see `write`). */
  private gathering: Gathered[] | null = null

  /**
   * Writes asked for in the same turn of the event loop share one transaction — PostgreSQL's
   * group commit, as db/writer.ts is SQLite's: their callbacks run side by side on one
   * connection, their statements pipelined, and one COMMIT makes them all durable (a commit per
   * write cost a send half its speed). A callback that throws before it has written anything is
   * refused alone. When one throws after writing, or a statement fails (which loses the whole
   * transaction), the batch is rolled back and each write runs again in a transaction of its own:
   * a callback may run twice, as on SQLite. Callbacks of one batch see each other's writes as they
   * are made (one transaction): a decision that must hold against another write is made by a
   * conditional statement, as between transactions.
   */
  write<T>(fn: (tx: Queries) => Promise<T>): Promise<T> {
    return new Promise<T>((done, failed) => {
      if (!this.gathering || this.gathering.length >= GATHER_MAX) {
        const batch: Gathered[] = []
        this.gathering = batch
        setImmediate(() => void this.writeGathered(batch))
      }
      this.gathering.push({ fn, done: done as (v: unknown) => void, failed })
    })
  }

  private async writeGathered(batch: Gathered[]) {
    if (this.gathering === batch) this.gathering = null
    const alone = (b: Gathered) => void this.writeAlone(b.fn).then(b.done, b.failed)
    if (batch.length === 1) return alone(batch[0]!)
    let outcomes: PromiseSettledResult<unknown>[]
    let txs: Queries[] = []
    try {
      outcomes = await this.transaction(async (shared) => {
        let undo = false
        const merger = new Merger(shared)
        txs = new Array<Queries>(batch.length)
        const settled = await Promise.allSettled(
          batch.map(async (b, who) => {
            let wrote = false
            const mark = (s: Statement) => {
              if (!wrote && !readsOnly(s)) wrote = true
            }
            const tx = this.hooked({
              all: (s, ...p) => (mark(s), merger.all(who, s, p)),
              get: async (s, ...p) => (mark(s), (await merger.all<never>(who, s, p))[0] ?? null),
              run: (s, ...p) => (mark(s), merger.run(who, s, p)),
            })
            txs[who] = tx
            try {
              return await b.fn(tx)
            } catch (e) {
              if (wrote) undo = true
              throw e
            }
          }),
        )
        // a call nobody awaited still goes before the COMMIT
        await merger.flush()
        if (undo) throw new Error('a write failed after writing: the batch is undone')
        return settled
      })
    } catch (e) {
      // the COMMIT may have landed: running the writes again could make each twice
      if (e instanceof CommitInDoubt) return batch.forEach((b) => b.failed(e))
      // a write failed after writing, a statement failed, or the connection did before the
      // COMMIT went (nothing committed): each on its own
      return batch.forEach(alone)
    }
    batch.forEach((b, i) => {
      const r = outcomes[i]!
      if (r.status === 'fulfilled') {
        this.committed(txs[i]!)
        b.done(r.value)
      } else b.failed(r.reason)
    })
  }

  writeApart<T>(fn: (tx: Queries) => Promise<T>): Promise<T> {
    return this.writeAlone(fn)
  }

  /** A write in a transaction of its own (once more after a lost race; see `write`). */
  private async writeAlone<T>(fn: (tx: Queries) => Promise<T>): Promise<T> {
    try {
      return await this.transaction(fn)
    } catch (e) {
      // another transaction committed a row this one then could not add (two sends to the same new
      // number at once), or the two waited on each other: the write runs once more from the start,
      // and now sees what the other committed (SQLite's writer may run a write again too)
      if (e instanceof UniqueViolation || String((e as { errno?: unknown } | null)?.errno ?? '') === '40P01') return this.transaction(fn)
      throw e
    }
  }

  /**
   * A transaction on one connection of the pool. BEGIN is sent without waiting for its answer:
   * the callback's first statement follows it down the same connection (PostgreSQL answers in
   * order), which spares every write a round trip. PostgreSQL answers COMMIT with ROLLBACK when
   * a statement of the transaction failed: that is a failed write too.
   */
  private async transaction<T>(fn: (tx: Queries) => Promise<T>): Promise<T> {
    if (this.hung) throw new DatabaseHung()
    // given up on by the watchdog: its connection is closed (its statements then fail, and a
    // COMMIT not yet sent never will be), or — while it waits for one — it stops waiting
    let conn: ReservedConnection | null = null
    let stopWaiting!: (e: Error) => void
    const givenUp = new Promise<never>((_, failed) => (stopWaiting = failed))
    givenUp.catch(() => {})
    const w: Waiting = {
      since: Date.now(),
      giveUp: (e) => {
        stopWaiting(e)
        if (conn) void conn.close().catch(() => {})
      },
    }
    if (this.url) this.waiting.add(w)
    try {
      const reserving = this.client.reserve()
      conn = await Promise.race([reserving, givenUp]).catch((e) => {
        // (the connection it would have had goes back to the pool when it comes)
        void reserving.then((c) => c.release()).catch(() => {})
        throw e
      })
      return await this.transactionOn(conn, fn)
    } finally {
      this.waiting.delete(w)
    }
  }

  private async transactionOn<T>(conn: ReservedConnection, fn: (tx: Queries) => Promise<T>): Promise<T> {
    const begun = conn.unsafe('BEGIN')
    begun.catch(() => {}) // its failure reaches the callback's first statement, or the await below
    const q = this.hooked(pgQueries(conn))
    let committing = false
    try {
      const out = await fn(q)
      await begun
      committing = true
      const end = (await conn.unsafe('COMMIT')) as unknown as { command?: string }
      if (end.command !== 'COMMIT') throw new Error(`the transaction was not committed (${end.command})`)
      this.committed(q)
      return out
    } catch (e) {
      await conn.unsafe('ROLLBACK').catch(() => {})
      if (committing && connectionLost(e)) throw new CommitInDoubt(e)
      throw e
    } finally {
      void conn.release()
    }
  }

  async scrub() {
    return true
  }

  async announce(tx: Queries, what: string) {
    await tx.run(NOTIFY, what)
  }

  /** What to run when each write's transaction commits (see afterCommit), by the write's `tx`. */
  private readonly committing = new WeakMap<Queries, (() => void)[]>()

  afterCommit(tx: Queries, fn: () => void) {
    const hooks = this.committing.get(tx)
    // (a tx this engine did not hand out: outside any write, nothing to wait for)
    if (hooks) hooks.push(fn)
    else fn()
  }

  /** A write's `tx` whose after-commit hooks are kept until `committed` runs them. */
  private hooked(tx: Queries): Queries {
    this.committing.set(tx, [])
    return tx
  }

  private committed(tx: Queries) {
    const hooks = this.committing.get(tx)
    this.committing.delete(tx)
    for (const fn of hooks ?? []) fn()
  }

  /** Who waits to hear an announcement back (see propagated). */
  private readonly echoes = new Map<string, (() => void)[]>()

  async listen(heard: (what: string) => void, resumed?: () => void) {
    // Bun's client opens the listening connection again by itself, with backoff, and runs the
    // third callback at every LISTEN it makes: the first, then one after each reconnect (or
    // after `checkHearing` made a new one)
    let listened = false
    const subscribe = () =>
      this.client.listen(
        CHANNEL,
        (what: string) => {
          heard(what)
          const waiting = this.echoes.get(what)
          if (!waiting) return
          this.echoes.delete(what)
          for (const done of waiting) done()
        },
        () => {
          if (listened) resumed?.()
          listened = true
        },
      )
    this.subscribe = subscribe
    this.subscription = await subscribe()
    if (this.url) {
      this.hearing = setInterval(() => void this.checkHearing(subscribe), this.hearingEveryMs)
      this.hearing.unref()
    }
  }

  private subscription: Awaited<ReturnType<PgClient['listen']>> | null = null
  private subscribe: (() => Promise<Awaited<ReturnType<PgClient['listen']>>>) | null = null
  private hearing: Timer | null = null
  private checkingHearing = false
  /** How often `checkHearing` runs (tests make it shorter). */
  hearingEveryMs = HEARING_EVERY_MS

  /**
   * Whether this instance still hears what is announced: a connection that listens can stay
   * open and hear nothing (a middlebox that forgot it, a server that dropped it without a word),
   * and then a key revoked elsewhere would keep working here. Every HEARING_EVERY_MS it announces
   * a heartbeat; not heard back within HEARING_WITHIN_MS while the database answered the
   * announcement, it listens on a new connection — and reads again what it keeps in memory
   * (`resumed`), as after any reconnect.
   */
  private async checkHearing(subscribe: () => Promise<Awaited<ReturnType<PgClient['listen']>>>) {
    if (this.checkingHearing || this.hung || !this.subscribe) return
    this.checkingHearing = true
    const beat = `heartbeat:${crypto.randomUUID()}`
    try {
      const back = new Promise<true>((done) => this.echoes.set(beat, [() => done(true)]))
      try {
        await this.run(NOTIFY, beat)
      } catch {
        // the database is away (the watchdog and the requests say so): not the listener's fault
        return
      }
      if (await Promise.race([back, Bun.sleep(HEARING_WITHIN_MS).then(() => false)])) return
      const deaf = this.subscription
      // (its connection closes with its last registration; one that no longer answers is not
      // waited on; none: listening again after the pool was made again failed)
      if (deaf) await Promise.race([deaf.unlisten(), Bun.sleep(HEARING_WITHIN_MS)]).catch(() => {})
      this.subscription = await subscribe()
    } catch {
      // listening again failed (the database went away meanwhile): the next check tries again
    } finally {
      this.echoes.delete(beat)
      this.checkingHearing = false
    }
  }

  async propagated(what: string) {
    // callers ask before their write commits; one that asks after may miss the echo and wait the bound
    const echoed = new Promise<void>((done) => this.echoes.set(what, [...(this.echoes.get(what) ?? []), done]))
    const bound = Bun.sleep(PROPAGATION_WAIT_MS)
    await Promise.race([echoed.then(() => Bun.sleep(PROPAGATION_GRACE_MS)), bound])
    this.echoes.delete(what)
  }

  async close() {
    if (this.watchdog) clearInterval(this.watchdog)
    if (this.hearing) clearInterval(this.hearing)
    // (bounded: a statement on a connection that leads nowhere, or on a server that does not
    // answer, would otherwise hold the stop up until TCP gives up)
    await this.client.close({ timeout: CLOSE_WAIT_MS / 1000 })
  }
}
