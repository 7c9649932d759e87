/**
 * The sandbox network: behaves like a real one without a phone. It accepts sends while the
 * number is online, reports delivered/read after the configured delays (null = never on its
 * own), fails the configured recipients, answers group lists with what the operator gave it,
 * refuses posts into a group it reports as admins-only (the number not an admin), and refuses when
 * offline. Its groups keep no participant numbers (counted, then dropped): in memory, or in the
 * database where instances share it, so every instance reports the same.
 */
import { closeSync, existsSync, fdatasyncSync, fstatSync, fsyncSync, ftruncateSync, mkdirSync, openSync, readFileSync, readSync, renameSync, rmSync, writeSync } from 'node:fs'
import { open } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import type { AwaitingReport, ConnectionDriver, DriverContext, DriverFactory, GroupInfo, OutboundMessage } from './driver'
import { DriverError, UnconfirmedSend } from './driver'
import { E164 } from '../http/phone'
import { CommitInDoubt, type Engine, stmt } from '../db/engine'

const NEWLINE = Buffer.from('\n')

/** A shorter line in place of one `length` bytes long: the rest spaces, which JSON.parse allows. */
function sameLength(json: string, length: number): Buffer {
  const line = Buffer.alloc(length, 0x20)
  line.write(json, 0, 'utf8')
  return line
}

/** One line of the record as written, or null: blank, or cut by a crash (never acknowledged). */
function parseLine(bytes: Buffer): Record<string, unknown> | null {
  try {
    return JSON.parse(bytes.toString('utf8'))
  } catch {
    return null
  }
}

function lastByte(path: string, size: number): Buffer {
  const fd = openSync(path, 'r')
  try {
    const b = Buffer.alloc(1)
    readSync(fd, b, 0, 1, size - 1)
    return b
  } finally {
    closeSync(fd)
  }
}

/**
 * The simulated network's durable record of every send it accepted: one JSON line per send in
 * CAPSTAN_DATA_DIR/sandbox/<connection id>.jsonl, written before the send is acknowledged. Tests
 * compare it with what the API accepted; crash recovery asks it whether a send got through.
 *
 * Bounded: when the file passes `maxBytes` it becomes `<connection id>.1.jsonl` (replacing the
 * one before), so a number keeps at most about twice that. Crash recovery only asks about the
 * sends in flight when the server stopped, which are the newest. Removing the number deletes both;
 * erasing a contact and message content retention overwrite lines in place (forget, forgetContent).
 */
export class SandboxLedger {
  /** The most recent sends, in memory; older ones are looked up in the files (rarely needed). */
  private recent = new Map<string, string>()
  private static readonly RECENT = 10_000

  /** Whether the ledger's directory has been made (once per ledger, not once per send). */
  private dirReady = false
  /** Bytes in the current file; read from disk when it is opened. */
  private size = -1
  /** The current file, open for appending from the first record on. */
  private fd: number | null = null
  private readonly older: string
  /** Rewrites in place since the ledger was made (see forgetContent). */
  private rewrites = 0
  /** Per file (by inode): every line before this offset is older than the last cutoff applied. */
  private contentGone = new Map<number, number>()

  constructor(
    private readonly path: string,
    private readonly maxBytes = 64 * 1024 * 1024,
  ) {
    this.older = path.replace(/\.jsonl$/, '.1.jsonl')
  }

  /**
   * Appends the send's line and resolves once it is on disk (fdatasync, see `synced`). The
   * send is acknowledged only after that: a crash can then never fail as send_interrupted a send
   * this record says the network had, nor lose one it had. Sends recorded while a sync runs share
   * the next one. A write or sync that fails (a full disk) throws, and the line is cut back off, or
   * failing that, the next record starts on a line of its own: a broken line never swallows the
   * next send.
   */
  async record(entry: { message_id: string; external_id: string; recipient: string | null; group: string | null; body: string | null; attachments: number; at: string }): Promise<void> {
    const line = Buffer.from(JSON.stringify(entry) + '\n')
    const at = this.append(line)
    try {
      await this.synced()
    } catch (e) {
      this.cutBack(at)
      throw e
    }
    this.recent.set(entry.message_id, entry.external_id)
    if (this.recent.size > SandboxLedger.RECENT) this.recent.delete(this.recent.keys().next().value!)
  }

  /** Writes `line` at the end of the record (opening, repairing or rolling the file first); returns where it starts. */
  private append(line: Buffer): number {
    if (!this.dirReady) {
      mkdirSync(dirname(this.path), { recursive: true, mode: 0o700 })
      this.dirReady = true
    }
    if (this.size >= this.maxBytes) this.closeFile()
    if (this.size >= this.maxBytes) {
      renameSync(this.path, this.older)
      this.size = 0
    }
    if (this.fd === null) {
      this.fd = openSync(this.path, 'a', 0o600)
      this.size = fstatSync(this.fd).size
      // a crash or a failed write cut the last line: the next one starts on a line of its own
      if (this.size > 0 && !lastByte(this.path, this.size).equals(NEWLINE)) this.write(NEWLINE)
    }
    const at = this.size
    this.write(line)
    return at
  }

  private write(bytes: Buffer) {
    try {
      for (let done = 0; done < bytes.length; ) done += writeSync(this.fd!, bytes, done, bytes.length - done)
      this.size += bytes.length
    } catch (e) {
      this.cutBack(this.size)
      throw e
    }
  }

  /** After a failed write or sync: the file back to `size` bytes, or (when that fails too) reopened and repaired before the next line. */
  private cutBack(size: number) {
    // (records of one failed sync are cut back in turn: the earliest cut already took the later lines)
    if (size > this.size && this.size >= 0) return
    try {
      if (this.fd === null) throw new Error('closed')
      ftruncateSync(this.fd, size)
      this.size = size
    } catch {
      this.closeFile()
    }
  }

  private closeFile() {
    if (this.fd !== null) {
      try {
        closeSync(this.fd)
      } catch {
        // already unusable
      }
    }
    this.fd = null
    if (this.size < this.maxBytes) this.size = -1
  }

  /** Records written since the last sync, waiting for the next one. */
  private waiting: { resolve: () => void; reject: (e: unknown) => void }[] = []

  /**
   * Resolves when every line written so far is on disk: one fdatasync at the end of this turn of
   * the event loop for every record written in it (a group commit, like the database's).
   */
  private synced(): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.waiting.push({ resolve, reject }) === 1) setImmediate(() => this.syncNow())
    })
  }

  private syncNow() {
    const waiting = this.waiting
    this.waiting = []
    try {
      if (this.fd === null) throw new Error('the sandbox record is not open')
      fdatasyncSync(this.fd)
    } catch (e) {
      for (const w of waiting) w.reject(e)
      return
    }
    for (const w of waiting) w.resolve()
  }

  /** The network's id for a send it accepted, or null (crash recovery and timeouts ask). */
  find(messageId: string): string | null {
    const hit = this.recent.get(messageId)
    if (hit) return hit
    const needle = `"message_id":${JSON.stringify(messageId)}`
    for (const file of [this.path, this.older]) {
      if (!existsSync(file)) continue
      for (const line of readFileSync(file, 'utf8').split('\n')) {
        if (!line.includes(needle)) continue
        try {
          return (JSON.parse(line) as { external_id: string }).external_id
        } catch {
          // a line cut by a crash: that send was never acknowledged
        }
      }
    }
    return null
  }

  /**
   * A contact was erased: every line naming this number loses the number and the text, in place
   * — the line is overwritten with the same length (the rest padded with spaces, which JSON.parse
   * allows), so the bytes that held them are replaced on disk rather than left in a freed block.
   * What crash recovery needs (message id, network id) stays. Returns how many lines changed.
   */
  forget(number: string): number {
    const needle = Buffer.from(`"recipient":${JSON.stringify(number)}`)
    let changed = 0
    for (const file of [this.path, this.older]) {
      if (!existsSync(file)) continue
      const data = readFileSync(file)
      let fd: number | null = null
      try {
        for (let at = data.indexOf(needle); at >= 0; at = data.indexOf(needle, at + needle.length)) {
          const start = data.lastIndexOf(10, at) + 1
          let end = data.indexOf(10, at)
          if (end < 0) end = data.length
          const entry = parseLine(data.subarray(start, end))
          if (entry && entry.recipient !== number) continue
          // (a line cut by a crash is blanked whole)
          const redacted = entry ? JSON.stringify({ ...entry, recipient: null, body: null }) : ''
          const line = sameLength(redacted, end - start)
          fd ??= openSync(file, 'r+')
          writeSync(fd, line, 0, line.length, start)
          this.rewrites++
          changed++
        }
        if (fd !== null) fsyncSync(fd)
      } finally {
        if (fd !== null) closeSync(fd)
      }
    }
    return changed
  }

  /**
   * Message content retention: every line of a send accepted before `before` (an ISO time) loses
   * its text, in place as in `forget`; the number stays, as in the message log. Lines are in time
   * order, so the walk stops at the first newer one, and the next run starts there. Read in pieces
   * of 1 MiB with the event loop free between them.
   */
  async forgetContent(before: string): Promise<number> {
    let changed = 0
    for (const file of [this.older, this.path]) {
      const r = await this.forgetContentIn(file, before)
      changed += r.changed
      if (r.reachedNewer) break
    }
    return changed
  }

  private async forgetContentIn(file: string, before: string): Promise<{ changed: number; reachedNewer: boolean }> {
    const fh = await open(file, 'r+').catch(() => null)
    if (!fh) return { changed: 0, reachedNewer: false }
    try {
      const { ino, size } = await fh.stat()
      let offset = this.contentGone.get(ino) ?? 0
      let changed = 0
      const chunk = Buffer.alloc(1 << 20)
      while (offset < size) {
        const seen = this.rewrites
        const { bytesRead } = await fh.read(chunk, 0, chunk.length, offset)
        // an erasure rewrote lines while this piece was read: read it again
        if (seen !== this.rewrites) continue
        const data = chunk.subarray(0, bytesRead)
        const last = data.lastIndexOf(10)
        // nothing more but a line cut by a crash (or longer than a piece): done
        if (last < 0) break
        let writes = false
        for (let start = 0; start <= last; ) {
          const end = data.indexOf(10, start)
          const entry = parseLine(data.subarray(start, end))
          if (entry && typeof entry.at === 'string' && entry.at >= before) {
            this.remember(ino, offset + start)
            if (writes) await fh.sync()
            return { changed, reachedNewer: true }
          }
          if (entry && entry.body != null) {
            const line = sameLength(JSON.stringify({ ...entry, body: null }), end - start)
            // written at once, before anything else can run: the piece read is still what is on disk
            writeSync(fh.fd, line, 0, line.length, offset + start)
            writes = true
            changed++
          }
          start = end + 1
        }
        if (writes) await fh.sync()
        offset += last + 1
      }
      this.remember(ino, offset)
      return { changed, reachedNewer: false }
    } finally {
      await fh.close()
    }
  }

  private remember(ino: number, offset: number) {
    this.contentGone.set(ino, offset)
    // two files at most: an inode no longer either of them is forgotten
    if (this.contentGone.size > 2) this.contentGone.delete(this.contentGone.keys().next().value!)
  }

  /** Closes the file (the server stops); a later record opens it again. */
  close() {
    this.closeFile()
  }

  /** The number was removed: its record (recipients and texts) goes with it. */
  discard() {
    this.recent.clear()
    this.closeFile()
    for (const file of [this.path, this.older]) rmSync(file, { force: true })
  }
}

export interface SandboxConfig {
  delivered_after_ms: number | null
  read_after_ms: number | null
  fail_recipients: string[]
  /** Simulated network latency: how long a send takes to be accepted. */
  accept_after_ms: number
}

export interface SandboxGroup {
  external_id: string
  name: string
  participants: string[]
  announce: boolean
  admin: boolean
}

/** A sandbox send as its record keeps it. */
type SendEntry = { message_id: string; external_id: string; recipient: string | null; group: string | null; body: string | null; attachments: number; at: string }

/** What the sandbox keeps of the sends it accepted: a file here (SandboxLedger), or the database several instances share. */
interface SendRecord {
  record(entry: SendEntry): Promise<void>
  find(messageId: string): string | null | Promise<string | null>
  forget(number: string): number | Promise<number>
  forgetContent(before: string): Promise<number>
  close(): void
  discard(): void | Promise<unknown>
}

const SHARED = {
  insert: stmt(
    'INSERT INTO sandbox_sends (connection_id, message_id, external_id, recipient, group_id, body, attachments, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)',
  ),
  find: stmt('SELECT external_id FROM sandbox_sends WHERE connection_id = ? AND message_id = ? LIMIT 1'),
  forget: stmt('UPDATE sandbox_sends SET recipient = NULL, body = NULL WHERE connection_id = ? AND recipient = ?'),
  forgetContent: stmt('UPDATE sandbox_sends SET body = NULL WHERE connection_id = ? AND at < ? AND body IS NOT NULL'),
  discard: stmt('DELETE FROM sandbox_sends WHERE connection_id = ?'),
  groups: stmt('SELECT groups FROM sandbox_groups WHERE connection_id = ?'),
  setGroups: stmt('INSERT INTO sandbox_groups (connection_id, groups) VALUES (?, ?) ON CONFLICT (connection_id) DO UPDATE SET groups = excluded.groups'),
  dropGroups: stmt('DELETE FROM sandbox_groups WHERE connection_id = ?'),
}

/**
 * The record of sends in the database, where every instance sharing it reads it: crash recovery on
 * the instance that takes a dead one's numbers over asks it whether a send got through.
 */
class DatabaseRecord implements SendRecord {
  constructor(
    private readonly engine: Engine,
    private readonly connectionId: string,
  ) {}
  async record(e: SendEntry) {
    await this.engine.write((tx) => tx.run(SHARED.insert, this.connectionId, e.message_id, e.external_id, e.recipient, e.group, e.body, e.attachments, e.at))
  }
  async find(messageId: string) {
    return (await this.engine.get<{ external_id: string }>(SHARED.find, this.connectionId, messageId))?.external_id ?? null
  }
  forget(number: string) {
    return this.engine.write((tx) => tx.run(SHARED.forget, this.connectionId, number))
  }
  forgetContent(before: string) {
    return this.engine.write((tx) => tx.run(SHARED.forgetContent, this.connectionId, before))
  }
  close() {}
  discard() {
    return this.engine.write(async (tx) => {
      await tx.run(SHARED.discard, this.connectionId)
      await tx.run(SHARED.dropGroups, this.connectionId)
    })
  }
}

/** How long after its time a report missed while no instance sent for the number is still made (see resumeReports). */
const REPORTS_LATE_MS = 3_600_000
const DEFAULTS: SandboxConfig = { delivered_after_ms: 1000, read_after_ms: 3000, fail_recipients: [], accept_after_ms: 0 }

const delay = (v: unknown) => v === null || (typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= 86_400_000)

export class SandboxConnection implements ConnectionDriver {
  private config: SandboxConfig
  private timers = new Set<Timer>()
  private groups: GroupInfo[] = []
  private ledger: SendRecord
  /** The number was removed (see `discard`). */
  private removed = false

  constructor(private readonly ctx: DriverContext) {
    this.config = { ...DEFAULTS, ...(ctx.config as Partial<SandboxConfig>) }
    // instances sharing a database share the record (and the groups): any of them may settle a send
    this.ledger = ctx.engine.shared ? new DatabaseRecord(ctx.engine, ctx.connectionId) : new SandboxLedger(join(ctx.dataDir, 'sandbox', `${ctx.connectionId}.jsonl`))
  }

  configure(config: Record<string, unknown>) {
    this.config = { ...DEFAULTS, ...(config as Partial<SandboxConfig>) }
  }

  async send(message: OutboundMessage, signal?: AbortSignal): Promise<{ externalId: string }> {
    if (this.config.accept_after_ms > 0) await Bun.sleep(this.config.accept_after_ms)
    // the caller gave up waiting: like a network that dropped the request, keep no record of it
    if (signal?.aborted) throw new DriverError('send_timeout', 'The send was abandoned.')
    // removed while this send waited: nothing is recorded again after the record was deleted
    if (this.removed) throw new DriverError('connection_removed', 'The connection was removed before the message was sent.')
    if (!this.ctx.online()) throw new DriverError('connection_offline', 'The number is offline.', true)
    const group = message.groupExternalId === null ? undefined : (await this.groupsToSend()).find((g) => g.externalId === message.groupExternalId)
    if (group?.announce && !group.isAdmin) throw new DriverError('group_admin_only', 'Only admins can post in this group.')
    if (message.recipient && this.config.fail_recipients.includes(message.recipient)) {
      throw new DriverError('recipient_unreachable', 'The network could not deliver to this recipient.')
    }
    // a network takes each attachment from the media store; the sandbox reads its first bytes, which
    // finds a store that cannot give it now (a bucket away): the message is then not sent, and is
    // tried again
    for (const a of message.attachments) await a.bytes(Math.min(a.size, 16))
    const externalId = `sbx_${crypto.randomUUID()}`
    try {
      await this.ledger.record({ message_id: message.id, external_id: externalId, recipient: message.recipient, group: message.groupExternalId, body: message.body, attachments: message.attachments.length, at: new Date(this.ctx.now()).toISOString() })
    } catch (e) {
      // the record's COMMIT went and its answer was lost: like a network whose answer was lost, it
      // may have the message — asked (`confirm`), never handed over again
      if (e instanceof CommitInDoubt) throw new UnconfirmedSend('send_unconfirmed', 'The sandbox network may have recorded the send (the database\'s answer was lost); it was not sent again.')
      // like a network that could not take the message: it was not sent, and may be tried again
      throw new DriverError('network_unavailable', 'The sandbox network could not record the send (is the disk of the data directory full, or the database away?); it was not sent.', true)
    }
    if (message.groupExternalId === null) this.reportLater(message.id)
    return { externalId }
  }

  /** The delivered and read reports of a send to one recipient, as configured (a group's messages have none). */
  private reportLater(messageId: string) {
    this.later(this.config.delivered_after_ms, () => this.ctx.events.receipt(this.ctx.connectionId, messageId, 'delivered'))
    this.later(this.config.read_after_ms, () => this.ctx.events.receipt(this.ctx.connectionId, messageId, 'read'))
  }

  async confirm(messageId: string) {
    const externalId = await this.ledger.find(messageId)
    if (!externalId) return null
    // a send settled here (its answer was lost, or a crash came between): its reports come from
    // now, as a network's would — a group message's are ignored where they land, and one already
    // reported (its reports resumed at a start too) changes nothing the second time
    this.reportLater(messageId)
    return { externalId }
  }

  /**
   * The delivered and read reports still due on the sends of the last while, at the times they
   * were due — at once when that has passed, for reports due up to an hour before this start.
   */
  async resumeReports(awaiting: (since: number) => Promise<AwaitingReport[]>) {
    const { delivered_after_ms: delivered, read_after_ms: read } = this.config
    if (delivered === null && read === null) return
    const now = this.ctx.now()
    const due = (ms: number | null, sentAt: number) => (ms === null ? null : Math.max(0, sentAt + ms - now))
    for (const m of await awaiting(now - Math.max(delivered ?? 0, read ?? 0) - REPORTS_LATE_MS)) {
      if (m.status === 'sent') this.later(due(delivered, m.sentAt), () => this.ctx.events.receipt(this.ctx.connectionId, m.id, 'delivered'))
      this.later(due(read, m.sentAt), () => this.ctx.events.receipt(this.ctx.connectionId, m.id, 'read'))
    }
  }

  async listGroups(): Promise<GroupInfo[] | null> {
    if (!this.ctx.online()) throw new DriverError('connection_offline', 'The number is offline.', true)
    return (await this.currentGroups()).map((g) => ({ ...g }))
  }

  /** The groups, for a send: one that cannot read them (the database away) is not sent and may be tried again. */
  private async groupsToSend() {
    try {
      return await this.currentGroups()
    } catch {
      throw new DriverError('network_unavailable', 'The sandbox network could not read its groups (is the database away?); it was not sent.', true)
    }
  }

  /** The groups it reports: held here, or — instances sharing a database — in the database (counts only). */
  private async currentGroups(): Promise<GroupInfo[]> {
    if (!this.ctx.engine.shared) return this.groups
    const row = await this.ctx.engine.get<{ groups: string }>(SHARED.groups, this.ctx.connectionId)
    return row ? (JSON.parse(row.groups) as GroupInfo[]) : []
  }

  /** What the simulated network reports at the next sync. Participants are counted, then dropped. */
  async setGroups(groups: SandboxGroup[]) {
    this.groups = groups.map((g) => ({
      externalId: g.external_id,
      name: g.name,
      participantCount: new Set(g.participants).size,
      announce: g.announce,
      isAdmin: g.admin,
    }))
    const counted = JSON.stringify(this.groups)
    if (this.ctx.engine.shared) await this.ctx.engine.write((tx) => tx.run(SHARED.setGroups, this.ctx.connectionId, counted))
  }

  close() {
    for (const t of this.timers) clearTimeout(t)
    this.timers.clear()
    this.ledger.close()
  }

  discard() {
    this.removed = true
    return this.ledger.discard()
  }

  forget(number: string) {
    return this.ledger.forget(number)
  }

  forgetContent(before: number) {
    return this.ledger.forgetContent(new Date(before).toISOString())
  }

  private later(ms: number | null, fn: () => void) {
    if (ms === null) return
    const t = setTimeout(() => {
      this.timers.delete(t)
      fn()
    }, ms)
    this.timers.add(t)
  }
}

export const sandboxDriver: DriverFactory = {
  name: 'sandbox',
  checkConfig(config: unknown, previous?: Record<string, unknown>) {
    if (config === undefined || config === null) return { config: { ...DEFAULTS, ...previous } }
    if (typeof config !== 'object' || Array.isArray(config)) return { errors: { config: ['The config field must be an object.'] } }
    const c = { ...DEFAULTS, ...previous, ...(config as Record<string, unknown>) }
    const errors: Record<string, string[]> = {}
    if (!delay(c.delivered_after_ms)) errors['config.delivered_after_ms'] = ['The config.delivered_after_ms field must be null or a whole number of milliseconds up to 86400000.']
    if (!delay(c.read_after_ms)) errors['config.read_after_ms'] = ['The config.read_after_ms field must be null or a whole number of milliseconds up to 86400000.']
    if (!Array.isArray(c.fail_recipients) || c.fail_recipients.length > 1000 || !c.fail_recipients.every((p) => typeof p === 'string' && E164.test(p))) {
      errors['config.fail_recipients'] = ['The config.fail_recipients field must be a list of E.164 phone numbers.']
    }
    if (typeof c.accept_after_ms !== 'number' || !Number.isInteger(c.accept_after_ms) || c.accept_after_ms < 0 || c.accept_after_ms > 60_000) {
      errors['config.accept_after_ms'] = ['The config.accept_after_ms field must be a whole number of milliseconds up to 60000.']
    }
    if (Object.keys(errors).length) return { errors }
    return { config: { delivered_after_ms: c.delivered_after_ms, read_after_ms: c.read_after_ms, fail_recipients: c.fail_recipients, accept_after_ms: c.accept_after_ms } }
  },
  create: (ctx) => new SandboxConnection(ctx),
}
