/**
 * The stores of the message path on both engines (docs/design/two-engines.md): contacts, numbers,
 * messages, groups, campaigns and the webhook outbox. One body per store, run on the embedded
 * SQLite file and on a private PostgreSQL; each test leans on what differs between the dialects
 * (MAX/GREATEST, instr/strpos, json_type/jsonb, strftime/to_char, rowid/id, INDEXED BY, EXISTS as
 * 1 or true) and on the counts the triggers keep on both.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { type Engine, stmt } from '../src/db/engine'
import { CampaignStore, type CampaignRow } from '../src/modules/campaigns/store'
import { type ConnectionRow, ConnectionStore } from '../src/modules/connections/store'
import { type ContactRow, ContactStore } from '../src/modules/contacts/store'
import { GroupStore } from '../src/modules/groups/store'
import { type Filter, listStatements, MessageStore, type NewMessage } from '../src/modules/messages/store'
import { SuppressionStore } from '../src/modules/suppressions/store'
import { WebhookStore } from '../src/modules/webhooks/store'
import { ENGINES, type EngineName, migratedEngines, workspace } from './support/engines'

setDefaultTimeout(60_000)

let engines: Record<EngineName, Engine>
let stop: () => Promise<void>
beforeAll(async () => {
  ;({ engines, stop } = await migratedEngines())
})
afterAll(() => stop())

const TEMPLATE = stmt("INSERT INTO templates (id, workspace_id, name, body, category, variables, created_at, updated_at) VALUES (?, ?, 'T', 'Hi', 'utility', '[]', 0, 0)")
const id = () => Bun.randomUUIDv7()


const connection = (workspaceId: string, over: Partial<ConnectionRow> = {}): ConnectionRow => ({
  id: id(),
  workspace_id: workspaceId,
  phone: '+15550001000',
  name: 'Shop ✓',
  driver: 'sandbox',
  status: 'online',
  status_reason: null,
  receives: 1,
  config: '{"delivered_after_ms":null}',
  warmup: null,
  created_at: 1000,
  updated_at: 1000,
  deleted_at: null,
  ...over,
})

const contact = (workspaceId: string, over: Partial<ContactRow> = {}): ContactRow => ({
  id: id(),
  workspace_id: workspaceId,
  phone: '+15550002000',
  name: 'Ada',
  consent_status: 'opted_in',
  metadata: '{}',
  created_at: 1000,
  updated_at: 1000,
  last_activity_at: 1000,
  ...over,
})

const message = (workspaceId: string, connectionId: string, over: Partial<NewMessage> = {}): NewMessage => ({
  id: id(),
  workspace_id: workspaceId,
  connection_id: connectionId,
  contact_id: null,
  group_id: null,
  campaign_id: null,
  direction: 'outbound',
  status: 'queued',
  recipient: '+15550002000',
  sender: '+15550001000',
  body: 'Your order shipped — ✓',
  attachments: '[]',
  error_code: null,
  error_message: null,
  external_id: null,
  created_at: 1000,
  updated_at: 1000,
  sending_at: null,
  sent_at: null,
  delivered_at: null,
  read_at: null,
  failed_at: null,
  network_template: null,
  opt_in_required: 0,
  reply_to: null,
  ...over,
})

/** A workspace with one number (what messages, groups and campaigns hang from). */
async function withNumber(engine: Engine) {
  const ws = await workspace(engine)
  const conn = connection(ws)
  await engine.write((tx) => new ConnectionStore(engine).insert(tx, conn))
  return { ws, conn }
}

/** `withNumber`, and a contact (Ada) in the same workspace. */
async function withNumberAndContact(engine: Engine) {
  const { ws, conn } = await withNumber(engine)
  const ada = contact(ws)
  await engine.write((tx) => new ContactStore(engine).insert(tx, ada))
  return { ws, conn, ada }
}

describe.each(ENGINES)('a batch of sends on %s', (name) => {
  test("sends written at once (on PostgreSQL one transaction, each statement once for all): each finds its own contact or none, a suppressed one stops; contacts added (a known one's activity written after them, to the later time); every message stored as given; usage and kept counts count each send", async () => {
    const engine = engines[name]
    const { ws, conn, ada } = await withNumberAndContact(engine)
    const [contacts, messages, suppressions] = [new ContactStore(engine), new MessageStore(engine), new SuppressionStore(engine)]
    await engine.write((tx) => suppressions.insert(tx, { workspace_id: ws, phone: '+15550009000', reason: null, created_at: 1000 }))
    const sends = [
      { phone: ada.phone, at: 8000 },
      { phone: ada.phone, at: 7000 },
      { phone: '+15550003001', at: 7500 },
      { phone: '+15550009000', at: 7600 },
    ]
    const written = await Promise.all(
      sends.map(({ phone, at }) =>
        engine.write(async (tx) => {
          const [found, suppressed] = await Promise.all([contacts.byPhone(ws, phone, tx), suppressions.get(ws, phone, tx)])
          if (suppressed) return null
          const to = found ?? contact(ws, { phone, name: null, consent_status: 'unknown', created_at: at, updated_at: at, last_activity_at: at })
          const m = message(ws, conn.id, { contact_id: to.id, recipient: phone, created_at: at, updated_at: at })
          await Promise.all([found ? null : contacts.insert(tx, to), messages.insert(tx, m), messages.countUsage(tx, ws, '2026-11')])
          return { found: found?.id ?? null, contact: to, message: m }
        }),
      ),
    )
    expect(written.map((w) => (w ? w.found : 'suppressed'))).toEqual([ada.id, ada.id, null, 'suppressed'])
    // the known contact's activity, written after (contacts/activity.ts: each contact once, at its newest time)
    await engine.write((tx) => contacts.touch(tx, [[ada.id, Math.max(...written.filter((w) => w?.found).map((w) => w!.message.created_at))]]))
    expect((await contacts.get(ws, ada.id))!.last_activity_at).toBe(8000)
    expect(await contacts.byPhone(ws, '+15550003001')).toEqual(written[2]!.contact)
    for (const w of written.slice(0, 3)) expect(await messages.get(ws, w!.message.id)).toEqual({ ...w!.message, seq: expect.any(Number), resend: 0 })
    expect(await messages.usage(ws, '2026-11')).toBe(3)
    expect(await contacts.count(ws)).toBe(2)
    const queued = await engine.get<{ n: number }>(stmt("SELECT CAST(SUM(n) AS BIGINT) AS n FROM message_counts WHERE workspace_id = ? AND direction = 'outbound' AND status = 'queued'"), ws)
    expect(queued!.n).toBe(3)
  })
})

describe.each(ENGINES)('contacts on %s', (name) => {
  test('a contact comes back as written; activity only moves later; consent changes land in the ledger in order; the list is newest activity first with ties newest made first, counted', async () => {
    const engine = engines[name]
    const store = new ContactStore(engine)
    const ws = await workspace(engine)
    const [a, b, c] = [contact(ws, { phone: '+15550002001', last_activity_at: 5000 }), contact(ws, { phone: '+15550002002', last_activity_at: 5000 }), contact(ws, { phone: '+15550002003', name: null, metadata: '{"tier":"gold"}' })]
    await engine.write(async (tx) => {
      for (const r of [a, b, c]) await store.insert(tx, r)
    })
    expect(await store.byPhone(ws, c.phone)).toEqual(c)
    expect(await store.get(ws, a.id)).toEqual(a)
    expect(await store.get(crypto.randomUUID(), a.id)).toBeNull()
    await engine.write((tx) => store.touch(tx, [[a.id, 4000]])) // an earlier message does not move it back
    await engine.write((tx) => store.touch(tx, [[b.id, 4000], [c.id, 9000], [crypto.randomUUID(), 9000]])) // several at once, each to its own time (not back); an erased contact: nothing
    expect([(await store.get(ws, a.id))!.last_activity_at, (await store.get(ws, c.id))!.last_activity_at]).toEqual([5000, 9000])
    // a change from a consent the contact no longer has changes nothing (another write changed it meanwhile)
    expect(await engine.write((tx) => store.setConsent(tx, a.id, 'unknown', 'opted_out', 2000))).toBe(false)
    expect(await store.get(ws, a.id)).toMatchObject({ consent_status: a.consent_status, updated_at: a.updated_at })
    await engine.write(async (tx) => {
      expect(await store.setConsent(tx, a.id, a.consent_status, 'opted_out', 3000)).toBe(true)
      await store.ledger(tx, ws, a.id, 'opted_out', 'inbound:x', 3000)
      await store.ledger(tx, ws, a.id, 'opted_in', 'api', 3500)
    })
    expect(await store.get(ws, a.id)).toMatchObject({ consent_status: 'opted_out', updated_at: 3000, last_activity_at: 5000 })
    expect(await store.ledgerOf(a.id)).toEqual([
      { status: 'opted_out', source: 'inbound:x', at: 3000 },
      { status: 'opted_in', source: 'api', at: 3500 },
    ])
    // written only over what it was made from: a row read before another change (of its consent, name or metadata) changes nothing
    for (const read of [{ ...b, consent_status: 'opted_out' as const }, { ...b, name: 'Robert' }, { ...b, metadata: '{"n":0}' }])
      expect(await engine.write((tx) => store.update(tx, { ...read, name: 'Stale', updated_at: 5500 }, read))).toBe(false)
    expect(await engine.write((tx) => store.update(tx, { ...b, name: 'Bob', metadata: '{"n":1}', updated_at: 6000 }, b))).toBe(true)
    const cNow = (await store.get(ws, c.id))!
    expect(await engine.write((tx) => store.update(tx, { ...cNow, updated_at: 9000 }, cNow))).toBe(true) // a name that is null is matched too
    expect(await store.get(ws, b.id)).toMatchObject({ name: 'Bob', metadata: '{"n":1}', updated_at: 6000, consent_status: b.consent_status })
    // c (9000) first, then the two at 5000: b was made after a
    expect((await store.list(ws, 10, 0)).map((r) => r.phone)).toEqual([c.phone, b.phone, a.phone])
    expect((await store.list(ws, 1, 1)).map((r) => r.phone)).toEqual([b.phone])
    expect(await store.count(ws)).toBe(3)
    // the operators' search: by name in any case (% and _ as themselves), by consent, or both
    const found = async (f: { name?: string; consent?: string }) => {
      const r = await store.search(ws, f, 10, 0)
      return [r.total, r.rows.map((x) => x.phone)]
    }
    expect(await found({ name: 'BOB' })).toEqual([1, [b.phone]])
    expect(await found({ name: 'ada' })).toEqual([1, [a.phone]])
    expect(await found({ name: '_' })).toEqual([0, []])
    expect(await found({ consent: 'opted_in' })).toEqual([2, [c.phone, b.phone]])
    expect(await found({ consent: 'opted_out' })).toEqual([1, [a.phone]])
    expect(await found({ name: 'a', consent: 'opted_in' })).toEqual([0, []])
    expect(await found({ name: 'o', consent: 'opted_in' })).toEqual([1, [b.phone]])
    expect((await store.after(ws, a.phone, 10)).map((r) => r.phone)).toEqual([b.phone, c.phone])
    expect(await store.numbersAfter(ws, '', 2)).toEqual([
      { phone: a.phone, created_at: 1000 },
      { phone: b.phone, created_at: 1000 },
    ])
  })

  test("a network's address stands for a number until it is given another; an erased contact takes its ledger and addresses with it", async () => {
    const engine = engines[name]
    const store = new ContactStore(engine)
    const ws = await workspace(engine)
    const ada = contact(ws)
    await engine.write(async (tx) => {
      await store.insert(tx, ada)
      await store.ledger(tx, ws, ada.id, 'opted_in', 'api', 1000)
      await store.addAddress(tx, ws, '15550002000', '+15550009999')
      await store.addAddress(tx, ws, '15550002000', ada.phone) // the network said otherwise later
      await store.addAddress(tx, ws, 'wa-2', ada.phone)
    })
    expect(await store.phoneOf(ws, '15550002000')).toBe(ada.phone)
    expect(await store.phoneOf(ws, 'unknown')).toBe('unknown')
    expect((await store.byPhoneOrAddress(ws, 'wa-2'))!.id).toBe(ada.id)
    expect((await store.byPhoneOrAddress(ws, ada.phone))!.id).toBe(ada.id)
    expect(await store.byPhoneOrAddress(ws, 'unknown')).toBeNull()
    // a contact whose own number is written as the address is that contact, before the one the address stands for
    const own = { ...contact(ws), phone: 'wa-2' }
    await engine.write((tx) => store.insert(tx, own))
    expect((await store.byPhoneOrAddress(ws, 'wa-2'))!.id).toBe(own.id)
    await engine.write((tx) => store.erase(tx, own))
    expect(await store.addressesOf(ws, ada.phone)).toEqual(['15550002000', 'wa-2'])
    await engine.write((tx) => store.erase(tx, ada))
    expect([await store.get(ws, ada.id), await store.ledgerOf(ada.id), await store.addressesOf(ws, ada.phone), await store.count(ws)]).toEqual([null, [], [], 0])
  })
})

describe.each(ENGINES)('numbers on %s', (name) => {
  test('a number comes back as written, changes what it names, and a removed one is gone from the list and from its phone', async () => {
    const engine = engines[name]
    const store = new ConnectionStore(engine)
    const ws = await workspace(engine)
    const [first, second] = [connection(ws, { created_at: 1 }), connection(ws, { phone: '+15550001001', created_at: 2, warmup: '{"days":14}' })]
    await engine.write(async (tx) => {
      await store.insert(tx, second)
      await store.insert(tx, first)
    })
    const mine = async () => (await store.all()).filter((r) => r.workspace_id === ws)
    expect(await mine()).toEqual([first, second])
    // written only over the row it was made from: one read before another change (its status, reason, name, config or warm-up) changes nothing
    for (const read of [{ ...first, status: 'offline' as const }, { ...first, status_reason: 'x' }, { ...first, name: 'Other' }, { ...first, config: '{"x":1}' }, { ...first, warmup: '{"days":1}' }])
      expect(await engine.write((tx) => store.update(tx, { ...read, updated_at: 4 }, read))).toBe(false)
    expect(await engine.write((tx) => store.update(tx, { ...first, status: 'offline', status_reason: 'token rejected', name: null, updated_at: 5 }, first))).toBe(true)
    expect(await store.byPhone(ws, first.phone)).toEqual({ ...first, status: 'offline', status_reason: 'token rejected', name: null, updated_at: 5 })
    await engine.write((tx) => store.markDeleted(tx, first.id, 9))
    expect([(await mine()).map((r) => r.id), await store.byPhone(ws, first.phone)]).toEqual([[second.id], null])
  })
})

describe.each(ENGINES)('messages on %s', (name) => {
  test('a message comes back as written; changed columns are written alone; the queue is FIFO of queued only; the log pages newest first under each filter, counted', async () => {
    const engine = engines[name]
    const store = new MessageStore(engine)
    const { ws, conn, ada } = await withNumberAndContact(engine)
    const rows = [
      message(ws, conn.id, { contact_id: ada.id, network_template: '{"name":"order"}', opt_in_required: 1 }),
      message(ws, conn.id),
      message(ws, conn.id, { direction: 'inbound', status: 'delivered', delivered_at: 1000, reply_to: 'x', external_id: 'wamid.1' }),
      message(ws, conn.id, { contact_id: ada.id }),
    ]
    await engine.write(async (tx) => {
      for (const r of rows) await store.insert(tx, r)
    })
    const first = (await store.getAny(rows[0]!.id))!
    expect(first).toEqual({ ...rows[0]!, seq: first.seq, resend: 0 })
    expect(await store.get(crypto.randomUUID(), rows[0]!.id)).toBeNull()
    // written only over the status it was decided from
    expect(await engine.write((tx) => store.update(tx, rows[1]!.id, { status: 'sent', sent_at: 1500, updated_at: 1500 }, 'sending'))).toBe(false)
    expect(await engine.write((tx) => store.update(tx, rows[1]!.id, { status: 'sending', sending_at: 2000, updated_at: 2000 }, rows[1]!.status))).toBe(true)
    expect(await store.getAny(rows[1]!.id)).toMatchObject({ status: 'sending', sending_at: 2000, body: rows[1]!.body })
    expect((await store.head(conn.id, 10)).map((r) => r.id)).toEqual([rows[0]!.id, rows[3]!.id])
    expect((await store.inFlight()).map((r) => r.id)).toEqual([rows[1]!.id])
    expect(await store.queuedCount(conn.id)).toBe(2)
    expect(await store.connectionsWithQueue()).toContain(conn.id)
    expect(await store.releasesSince(conn.id, 0)).toEqual([2000])
    expect((await store.byExternal(conn.id, 'wamid.1'))!.id).toBe(rows[2]!.id)
    const ids = (page: { rows: { id: string }[]; total: number }) => [page.total, page.rows.map((r) => r.id)]
    const [m0, m1, m2, m3] = rows.map((r) => r.id)
    expect(ids(await store.list(ws, {}, 10, 0))).toEqual([4, [m3, m2, m1, m0]])
    expect(ids(await store.list(ws, {}, 2, 1))).toEqual([4, [m2, m1]])
    expect(ids(await store.list(ws, { direction: 'outbound' }, 10, 0))).toEqual([3, [m3, m1, m0]])
    expect(ids(await store.list(ws, { status: 'queued' }, 10, 0))).toEqual([2, [m3, m0]])
    expect(ids(await store.list(ws, { direction: 'inbound', status: 'delivered' }, 10, 0))).toEqual([1, [m2]])
    expect(ids(await store.list(ws, { direction: 'outbound' }, 1, 1))).toEqual([3, [m1]])
    expect(ids(await store.list(ws, { status: 'queued' }, 1, 1))).toEqual([2, [m0]])
    expect(ids(await store.list(ws, { direction: 'outbound', status: 'queued' }, 5, 1))).toEqual([2, [m0]])
    expect(ids(await store.list(ws, { contactId: ada.id }, 10, 0))).toEqual([2, [m3, m0]])
    expect(ids(await store.list(ws, { contactId: ada.id, status: 'sending' }, 10, 0))).toEqual([0, []])
    expect((await store.ofContact(ada.id, 0, 10)).map((r) => r.id)).toEqual([m0, m3])
    expect((await store.erasureRowsOf(ada.id)).map((r) => r.id).sort()).toEqual([m0, m3].sort())
    expect((await store.queuedBefore(1000, 10)).map((r) => r.id).sort()).toEqual([m0, m3].sort())
    expect((await store.queuedFor(conn.id, 1)).length).toBe(1)
    // a release claims a message only while it is queued: one failed meanwhile (by another
    // instance's write) stays failed, and a second claim finds nothing to claim
    await engine.write((tx) => store.update(tx, m3!, { status: 'failed', failed_at: 2500, updated_at: 2500 }, 'queued'))
    expect(await engine.write((tx) => store.claim(tx, m3!, 3000))).toBe(false)
    expect(await store.getAny(m3!)).toMatchObject({ status: 'failed', sending_at: null })
    expect(await engine.write((tx) => store.claim(tx, m0!, 3000))).toBe(true)
    expect(await store.getAny(m0!)).toMatchObject({ status: 'sending', sending_at: 3000, updated_at: 3000 })
    expect(await engine.write((tx) => store.claim(tx, m0!, 4000))).toBe(false)
    expect(await store.getAny(m0!)).toMatchObject({ status: 'sending', sending_at: 3000 })
    // a send handed back at a graceful stop is marked while it is sending; one take of the mark clears it
    expect(await engine.write((tx) => store.markResend(tx, m3!))).toBe(false)
    expect(await engine.write((tx) => store.markResend(tx, m0!))).toBe(true)
    expect((await store.inFlight()).map((r) => [r.id, r.resend]).sort()).toEqual([[m1, 0], [m0, 1]].sort())
    const takes = await Promise.all([engine.write((tx) => store.takeResend(tx, m0!)), engine.write((tx) => store.takeResend(tx, m0!))])
    expect(takes.sort()).toEqual([false, true])
    expect(await store.getAny(m0!)).toMatchObject({ status: 'sending', sending_at: 3000, resend: 0 })
    // a clock read before the message was made (a tick that began just before it was queued) is not its time
    const late = message(ws, conn.id, { created_at: 5000, updated_at: 5000 })
    await engine.write((tx) => store.insert(tx, late))
    expect(await engine.write((tx) => store.claim(tx, late.id, 4000))).toBe(true)
    expect(await store.getAny(late.id)).toMatchObject({ status: 'sending', sending_at: 5000, updated_at: 5000 })
  })

  test('claims and changes of status made by writes of one turn (on PostgreSQL one statement each, its kept counts added once): each lands as it would alone, a message written twice by the first only; the kept counts match the rows', async () => {
    const engine = engines[name]
    const store = new MessageStore(engine)
    const { ws, conn } = await withNumber(engine)
    const rows = Array.from({ length: 12 }, (_, i) => message(ws, conn.id, { created_at: 1000 + i, updated_at: 1000 + i }))
    await engine.write(async (tx) => {
      for (const r of rows) await store.insert(tx, r)
    })
    const outcomes = () => engine.all<{ status: string; code: string; n: number }>(stmt('SELECT status, code, CAST(SUM(n) AS BIGINT) AS n FROM message_outcome_counts GROUP BY status, code HAVING SUM(n) <> 0 ORDER BY status, code'))
    const before = await outcomes()
    const [first, second, last] = [rows[0]!.id, rows[1]!.id, rows[11]!.id]
    // the last failed by another write first: its claim does not land
    expect(await engine.write((tx) => store.update(tx, last, { status: 'failed', failed_at: 1500, updated_at: 1500, error_code: 'gone', error_message: 'Gone.' }, 'queued'))).toBe(true)
    // every message claimed at once, the first twice
    const claims = await Promise.all([...rows, rows[0]!].map((r) => engine.write((tx) => store.claim(tx, r.id, 2000))))
    expect(claims).toEqual([...Array(11).fill(true), false, false])
    expect(await store.getAny(first)).toMatchObject({ status: 'sending', sending_at: 2000, updated_at: 2000 })
    // the outcomes at once, the second written twice from the same status (the first of them lands)
    const sent = await Promise.all([...rows.slice(0, 11), rows[1]!].map((r, i) => engine.write((tx) => store.update(tx, r.id, { external_id: `x-${i}`, sent_at: 3000 + i, status: 'sent', updated_at: 3000 + i }, 'sending'))))
    expect(sent).toEqual([...Array(11).fill(true), false])
    expect(await store.getAny(second)).toMatchObject({ status: 'sent', external_id: 'x-1', sent_at: 3001 })
    expect(await store.getAny(rows[10]!.id)).toMatchObject({ status: 'sent', external_id: 'x-10', sent_at: 3010, updated_at: 3010 })
    expect(await store.getAny(last)).toMatchObject({ status: 'failed', sending_at: null, external_id: null })
    // the kept counts say what the rows say
    const kept = await engine.all(stmt("SELECT status, CAST(SUM(n) AS BIGINT) AS n FROM message_counts WHERE workspace_id = ? AND direction = 'outbound' GROUP BY status HAVING SUM(n) <> 0 ORDER BY status"), ws)
    const rowsSay = await engine.all(stmt('SELECT status, CAST(COUNT(*) AS BIGINT) AS n FROM messages WHERE workspace_id = ? GROUP BY status ORDER BY status'), ws)
    expect(kept).toEqual(rowsSay)
    expect(rowsSay).toEqual([
      { status: 'failed', n: 1 },
      { status: 'sent', n: 11 },
    ])
    const added = new Map(before.map((o) => [`${o.status}/${o.code}`, o.n]))
    expect((await outcomes()).map((o) => [o.status, o.code, o.n - (added.get(`${o.status}/${o.code}`) ?? 0)]).filter(([, , n]) => n !== 0)).toEqual([
      ['failed', 'gone', 1],
      ['sent', '', 11],
    ])
  })

  test("the operator's search finds text in the body in any case, takes % and _ as themselves, keeps to a time range and the filters, newest first, counted", async () => {
    const engine = engines[name]
    const store = new MessageStore(engine)
    const { ws, conn, ada } = await withNumberAndContact(engine)
    const rows = [
      message(ws, conn.id, { body: 'Your ORDER #1001 shipped', created_at: 1000 }),
      message(ws, conn.id, { body: 'order 50% off_today', created_at: 2000, contact_id: ada.id }),
      message(ws, conn.id, { body: 'Where is my order?', created_at: 3000, direction: 'inbound', status: 'delivered' }),
      message(ws, conn.id, { body: 'Your receipt', created_at: 4000 }),
      message(ws, conn.id, { body: null, created_at: 5000 }),
    ]
    await engine.write(async (tx) => {
      for (const r of rows) await store.insert(tx, r)
    })
    const [m0, m1, m2] = rows.map((r) => r.id)
    const ids = (page: { rows: { id: string }[]; total: number }) => [page.total, page.rows.map((r) => r.id)]
    expect(ids(await store.search(ws, { text: 'order' }, 10, 0))).toEqual([3, [m2, m1, m0]])
    expect(ids(await store.search(ws, { text: 'order' }, 1, 1))).toEqual([3, [m1]])
    expect(ids(await store.search(ws, { text: '50%' }, 10, 0))).toEqual([1, [m1]])
    expect(ids(await store.search(ws, { text: '%' }, 10, 0))).toEqual([1, [m1]])
    expect(ids(await store.search(ws, { text: 'o_d' }, 10, 0))).toEqual([0, []]) // as a pattern it would match "ord"
    expect(ids(await store.search(ws, { text: 'off_' }, 10, 0))).toEqual([1, [m1]])
    expect(ids(await store.search(ws, { text: 'order', direction: 'outbound' }, 10, 0))).toEqual([2, [m1, m0]])
    expect(ids(await store.search(ws, { text: 'order', status: 'delivered' }, 10, 0))).toEqual([1, [m2]])
    expect(ids(await store.search(ws, { text: 'order', contactId: ada.id }, 10, 0))).toEqual([1, [m1]])
    expect(ids(await store.search(ws, { from: 2000, to: 4000 }, 10, 0))).toEqual([2, [m2, m1]])
    expect(ids(await store.search(ws, { text: 'order', from: 1500 }, 10, 0))).toEqual([2, [m2, m1]])
    expect(ids(await store.search(crypto.randomUUID(), { text: 'order' }, 10, 0))).toEqual([0, []])
  })

  test('usage counts up per month; later parts of a send are recorded once; redaction keeps the counts; days are UTC days; the gauges add up', async () => {
    const engine = engines[name]
    const store = new MessageStore(engine)
    const { ws, conn } = await withNumber(engine)
    await engine.write(async (tx) => {
      await store.countUsage(tx, ws, '2026-11')
      await store.countUsage(tx, ws, '2026-11')
      await store.countUsage(tx, ws, '2026-12')
    })
    expect([await store.usage(ws, '2026-11'), await store.usage(ws, '2026-12'), await store.usage(ws, '2027-01')]).toEqual([2, 1, 0])
    const day = Date.UTC(2026, 10, 24)
    const ada = contact(ws)
    const sent = message(ws, conn.id, { contact_id: ada.id, status: 'sent', sent_at: day + 1, external_id: 'wamid.a', error_message: 'failed for +15550002000 once' })
    const late = message(ws, conn.id, { status: 'failed', failed_at: day - 1 })
    await engine.write(async (tx) => {
      await new ContactStore(engine).insert(tx, ada)
      await store.insert(tx, sent)
      await store.insert(tx, late)
      await store.addParts(tx, conn.id, sent.id, ['wamid.b', 'wamid.c'])
      await store.addParts(tx, conn.id, sent.id, ['wamid.b'])
    })
    expect([(await store.byAnyPart(conn.id, 'wamid.a'))!.id, (await store.byAnyPart(conn.id, 'wamid.c'))!.id, (await store.byLaterPart(conn.id, 'wamid.a'))]).toEqual([sent.id, sent.id, null])
    expect(await store.perDay(ws, 'sent', 0)).toEqual([{ day: '2026-11-24', n: 1 }])
    expect(await store.perDay(ws, 'failed', 0)).toEqual([{ day: '2026-11-23', n: 1 }])
    await engine.write((tx) => store.redactContact(tx, ada.id, ada.phone, 7000))
    expect(await store.getAny(sent.id)).toMatchObject({ contact_id: null, recipient: null, sender: sent.sender, body: null, status: 'sent', error_message: 'failed for [erased number] once', updated_at: 7000 })
    const gauges = await store.gauges()
    expect(gauges.counts.filter((c) => c.workspace_id === ws)).toEqual([
      { workspace_id: ws, direction: 'outbound', status: 'failed', n: 1 },
      { workspace_id: ws, direction: 'outbound', status: 'sent', n: 1 },
    ])
    expect(typeof gauges.sending).toBe('number')
  })
})

describe("the log's filtered pages on PostgreSQL", () => {
  test('a page under a status, a direction or a contact reads its own rows only, however they lie in time (the oldest read, the newest queued; a contact of long ago): never every newer message', async () => {
    const engine = engines.postgres
    const store = new MessageStore(engine)
    const { ws, conn, ada } = await withNumberAndContact(engine)
    // 20,000 messages: the oldest 12,000 read, then 4,000 delivered, 3,000 sent, the newest 1,000
    // queued; one in 20 inbound (delivered); one in 500 failed; one in 25 of the oldest 10,000 Ada's
    const fill = stmt(
      'SELECT 1',
      `INSERT INTO messages (id, workspace_id, connection_id, contact_id, direction, status, recipient, sender, body, attachments, created_at, updated_at, opt_in_required)
       SELECT gen_random_uuid()::text, $1, $2, CASE WHEN g <= 10000 AND g % 25 = 0 THEN $3 END, CASE WHEN g % 20 = 0 THEN 'inbound' ELSE 'outbound' END,
         CASE WHEN g % 20 = 0 THEN 'delivered' WHEN g % 500 = 1 THEN 'failed' WHEN g <= 12000 THEN 'read' WHEN g <= 16000 THEN 'delivered' WHEN g <= 19000 THEN 'sent' ELSE 'queued' END,
         '+1777' || lpad(g::text, 7, '0'), '+15550001000', 'Message ' || g, '[]', g, g, 0
       FROM generate_series(1, 20000) AS g`,
    )
    await engine.write((tx) => tx.run(fill, ws, conn.id, ada.id))
    // the planner knows how many of each status there are (autovacuum's ANALYZE), not where they lie
    await engine.write((tx) => tx.run(stmt('SELECT 1', 'ANALYZE messages')))
    const newest = async (f: Filter, limit: number, offset: number) => {
      const where = [f.direction && `direction = '${f.direction}'`, f.status && `status = '${f.status}'`, f.contactId && `contact_id = '${f.contactId}'`].filter(Boolean).join(' AND ')
      const rows = await engine.all<{ id: string }>(stmt('SELECT 1', `SELECT id FROM messages WHERE workspace_id = $1 AND ${where} ORDER BY seq DESC LIMIT ${limit} OFFSET ${offset}`), ws)
      return rows.map((r) => r.id)
    }
    /** The messages' rows the page's statement read, by its plan as it ran. */
    const rowsRead = async (f: Filter, limit: number, offset: number) => {
      const params = [ws, ...(f.direction ? [f.direction] : []), ...(f.status ? [f.status] : []), ...(f.contactId ? [f.contactId] : []), limit, offset]
      const [row] = await engine.all<Record<string, unknown>>(stmt('SELECT 1', `EXPLAIN (ANALYZE, FORMAT JSON) ${listStatements(f).page.pg}`), ...params)
      const plan = row!['QUERY PLAN']
      let read = 0
      const walk = (n: Record<string, any>) => {
        if (n['Relation Name'] === 'messages') read += (Number(n['Actual Rows']) + Number(n['Rows Removed by Filter'] ?? 0)) * Number(n['Actual Loops'])
        for (const c of n.Plans ?? []) walk(c)
      }
      walk((typeof plan === 'string' ? JSON.parse(plan) : plan)[0].Plan)
      return read
    }
    const cases: [Filter, number, number, number][] = [
      // filter, limit, offset, the ranges of the index it reads (one per direction, or per status)
      [{ status: 'read' }, 50, 0, 2],
      [{ status: 'read' }, 20, 100, 2],
      [{ status: 'delivered' }, 50, 0, 2],
      [{ status: 'failed' }, 30, 0, 2],
      [{ direction: 'outbound' }, 50, 0, 6],
      [{ direction: 'inbound' }, 50, 0, 6],
      [{ direction: 'outbound', status: 'read' }, 50, 0, 1],
      [{ direction: 'outbound', status: 'sent' }, 10, 30, 1],
      // a contact's messages, all older than the newest 10,000 (the conversation view)
      [{ contactId: ada.id }, 50, 0, 1],
      [{ contactId: ada.id }, 20, 100, 1],
      // (her messages that are not read, one in four, passed over: a page's worth at most)
      [{ contactId: ada.id, status: 'read' }, 10, 0, 2],
    ]
    for (const [f, limit, offset, ranges] of cases) {
      const page = await store.list(ws, f, limit, offset)
      expect(page.rows.map((r) => r.id)).toEqual(await newest(f, limit, offset))
      expect(page.rows.length).toBe(limit)
      // at most each range as far as the page reaches (the old plan read every newer message: thousands)
      const read = await rowsRead(f, limit, offset)
      expect([f, read >= limit && read <= ranges * (limit + offset) ? 'the page only' : read]).toEqual([f, 'the page only'])
    }
    // a contact's export, batch by batch from where the last ended, in order
    const all = (await engine.all<{ id: string; seq: number }>(stmt('SELECT 1', 'SELECT id, seq FROM messages WHERE contact_id = $1 ORDER BY seq'), ada.id)).map((r) => [r.id, Number(r.seq)] as const)
    expect(all.length).toBe(400)
    expect((await store.ofContact(ada.id, 0, 150)).map((r) => r.id)).toEqual(all.slice(0, 150).map(([i]) => i))
    expect((await store.ofContact(ada.id, all[149]![1], 300)).map((r) => r.id)).toEqual(all.slice(150).map(([i]) => i))
  })
})

describe.each(ENGINES)('groups on %s', (name) => {
  test('groups of a number page by size then name; a search matches folded names, counted; a removed group takes its messages', async () => {
    const engine = engines[name]
    const store = new GroupStore(engine)
    const messages = new MessageStore(engine)
    const { ws, conn } = await withNumber(engine)
    const group = (name: string, count: number) => ({ id: id(), workspace_id: ws, connection_id: conn.id, external_id: `g-${name}`, name, name_fold: name.toLowerCase(), participant_count: count, announce: 0, is_admin: 1, synced_at: 1, created_at: 1 })
    const [big, small, other] = [group('Big Crew', 50), group('Small crew', 5), group('Family', 50)]
    const post = message(ws, conn.id, { group_id: small.id, recipient: null })
    await engine.write(async (tx) => {
      for (const g of [small, big, other]) await store.insert(tx, g)
      await messages.insert(tx, post)
    })
    expect((await store.list(ws, null, 10, 0)).rows.map((g) => g.name)).toEqual(['Big Crew', 'Family', 'Small crew'])
    const found = await store.list(ws, 'crew', 1, 1)
    expect([found.total, found.rows.map((g) => g.name)]).toEqual([2, ['Small crew']])
    await engine.write((tx) => store.update(tx, { ...small, name: 'Tiny', name_fold: 'tiny', participant_count: 3, announce: 1, is_admin: 0 }))
    expect(await store.get(ws, small.id)).toMatchObject({ name: 'Tiny', announce: 1, is_admin: 0 })
    expect((await store.forConnection(conn.id)).length).toBe(3)
    await engine.write((tx) => store.remove(tx, small.id))
    expect([await store.getAny(small.id), await messages.getAny(post.id), (await store.list(ws, null, 10, 0)).total]).toEqual([null, null, 2])
  })
})

describe.each(ENGINES)('campaigns on %s', (name) => {
  const campaign = (ws: string, conn: string, template: string, audience: object, over: Partial<CampaignRow> = {}): CampaignRow => ({
    id: id(),
    workspace_id: ws,
    name: 'Autumn',
    template_id: template,
    connection_id: conn,
    audience: JSON.stringify(audience),
    variables: '{}',
    body: 'Hi',
    whatsapp: null,
    media_id: null,
    send_window: null,
    status: 'running',
    paused_reason: null,
    scheduled_at: null,
    started_at: 5000,
    finished_at: null,
    created_at: 1000,
    updated_at: 1000,
    deleted_at: null,
    freeze_after: null,
    ...over,
  })

  test('an audience selects by metadata value and JSON type alike on both engines (true ≠ 1 ≠ "1"), skipping the opted out, the suppressed and those made after the start; frozen in slices; previewed', async () => {
    const engine = engines[name]
    const store = new CampaignStore(engine)
    const contacts = new ContactStore(engine)
    const { ws, conn } = await withNumber(engine)
    const tpl = id()
    await engine.write((tx) => tx.run(TEMPLATE, tpl, ws))
    const people = [
      contact(ws, { phone: '+15550003001', metadata: '{"vip":true,"tier":"gold","visits":3}', last_activity_at: 10 }),
      contact(ws, { phone: '+15550003002', metadata: '{"vip":1,"tier":"gold","visits":3.0}', last_activity_at: 20 }),
      contact(ws, { phone: '+15550003003', metadata: '{"vip":"1","tier":"gold","visits":"3"}', last_activity_at: 30 }),
      contact(ws, { phone: '+15550003004', metadata: '{"vip":true,"tier":"gold","visits":3}', consent_status: 'opted_out' }),
      contact(ws, { phone: '+15550003005', metadata: '{"vip":true,"tier":"gold","visits":3}' }),
      contact(ws, { phone: '+15550003006', metadata: '{"vip":true,"tier":"gold","visits":3}', created_at: 9000 }),
      contact(ws, { phone: '+15550003007', metadata: '{"vip":false,"tier":"silver","visits":4}', last_activity_at: 70 }),
    ]
    await engine.write(async (tx) => {
      for (const p of people) await contacts.insert(tx, p)
      await tx.run(stmt('INSERT INTO suppressions (workspace_id, phone, reason, created_at) VALUES (?, ?, NULL, 0)'), ws, '+15550003005')
    })
    const frozen = async (audience: object) => {
      const c = campaign(ws, conn.id, tpl, audience)
      await engine.write((tx) => store.insert(tx, c))
      const phones: string[] = []
      // slices of 2 contacts: the edge of each slice is where the next begins
      for (let after: string | null = ''; after !== null; ) {
        const from: string = after
        after = await engine.write((tx) => store.freezeSlice(tx, c.id, ws, JSON.parse(c.audience), from, 5000, 6000, 2))
      }
      for (let r = await store.nextPending(c.id); r; r = await store.nextPending(c.id)) {
        phones.push(r.phone)
        expect(await engine.write((tx) => store.released(tx, r!.seq, 'm', 7000))).toBe(true)
        // a recipient leaves pending once: released (or skipped) already, it is neither again
        expect(await engine.write((tx) => store.released(tx, r!.seq, 'm2', 7001))).toBe(false)
      }
      return phones
    }
    expect(await frozen({ metadata: { vip: true } })).toEqual(['+15550003001'])
    expect(await frozen({ metadata: { vip: 1 } })).toEqual(['+15550003002'])
    expect(await frozen({ metadata: { vip: '1' } })).toEqual(['+15550003003'])
    expect(await frozen({ metadata: { visits: 3 } })).toEqual(['+15550003001', '+15550003002'])
    expect(await frozen({ metadata: { tier: 'gold', vip: false } })).toEqual([])
    expect(await frozen({})).toEqual(['+15550003001', '+15550003002', '+15550003003', '+15550003007'])
    const preview = await store.preview(ws, { metadata: { tier: 'gold' } }, 2, 3)
    expect([preview.count, preview.rows.map((r) => r.phone)]).toEqual([4, ['+15550003006', '+15550003003']])
  })

  test('a campaign comes back as written; changed columns alone; counts and flags follow its recipients and messages; the lists find it', async () => {
    const engine = engines[name]
    const store = new CampaignStore(engine)
    const messages = new MessageStore(engine)
    const contacts = new ContactStore(engine)
    const { ws, conn } = await withNumber(engine)
    const tpl = id()
    const ada = contact(ws)
    const c = campaign(ws, conn.id, tpl, {})
    await engine.write(async (tx) => {
      await tx.run(TEMPLATE, tpl, ws)
      await contacts.insert(tx, ada)
      await store.insert(tx, c)
      await store.freezeSlice(tx, c.id, ws, {}, '', 5000, 6000, 10)
    })
    expect(await store.get(ws, c.id)).toEqual(c)
    expect([await store.hasPending(c.id), await store.hasInFlight(c.id), (await store.counts(c.id)).total]).toEqual([true, false, 1])
    expect(await store.pendingFor(conn.id)).toBe(1)
    expect((await store.running(conn.id)).map((r) => r.id)).toEqual([c.id])
    const r = (await store.nextPending(c.id))!
    const m = message(ws, conn.id, { contact_id: ada.id, campaign_id: c.id })
    await engine.write(async (tx) => {
      await messages.insert(tx, m)
      await store.released(tx, r.seq, m.id, 7000)
    })
    expect([await store.hasPending(c.id), await store.hasInFlight(c.id)]).toEqual([false, true])
    expect(await store.counts(c.id)).toMatchObject({ total: 1, queued: 1 })
    const page = await store.recipients(c.id, 10, 0)
    expect([page.total, page.rows.map((x) => [x.phone, x.status, x.message_status])]).toEqual([1, [[ada.phone, 'released', 'queued']]])
    expect(await store.ofContact(ada.id)).toEqual([{ id: c.id, name: 'Autumn', campaign_status: 'running', status: 'released', skipped_reason: null, message_id: m.id }])
    await engine.write((tx) => store.update(tx, c.id, { status: 'paused', paused_reason: 'allowance_exhausted', updated_at: 8000 }))
    expect((await store.waitingForAllowance()).map((x) => x.id)).toContain(c.id)
    expect(await store.getAny(c.id)).toMatchObject({ status: 'paused', paused_reason: 'allowance_exhausted', updated_at: 8000, name: 'Autumn' })
    expect((await store.unfinishedFor(conn.id)).map((x) => x.id)).toEqual([c.id])
    expect((await store.countByStatus()).find((s) => s.status === 'paused')!.n).toBeGreaterThanOrEqual(1)
    expect(await store.campaignIdsOf(ada.id)).toEqual([c.id])
    await engine.write((tx) => store.removeRecipient(tx, ada.id))
    expect([(await store.counts(c.id)).total, await store.campaignIdsOf(ada.id)]).toEqual([0, []])
    expect((await store.list(ws, 10, 0)).rows.map((x) => x.id)).toEqual([c.id])
  })
})

describe.each(ENGINES)('webhook outbox on %s', (name) => {
  const endpoint = (ws: string) => ({ id: id(), workspace_id: ws, url: 'https://example.test/hook', events: null, secret_enc: 'sealed', previous_secret_enc: null, previous_secret_expires_at: null, headers_enc: null, status: 'active' as const, failing_since: null, created_at: 1, updated_at: 1, deleted_at: null })

  test('a due delivery is claimed once however many read it; outcomes only change a pending one; disabling holds, enabling sends the held again; counted per endpoint', async () => {
    const engine = engines[name]
    const store = new WebhookStore(engine)
    const ws = await workspace(engine)
    const e = endpoint(ws)
    await engine.write(async (tx) => {
      await store.createEndpoint(tx, e)
      for (const [d, at] of [['d1', 100], ['d2', 50], ['d3', 300]] as const) await store.enqueue(tx, d, e.id, ws, 'message.sent', `{"n":"${d}"}`, at)
    })
    expect(await store.endpoint(e.id)).toEqual(e)
    expect((await store.activeEndpoints(ws)).map((x) => x.id)).toEqual([e.id])
    expect((await store.due(e.id, 200, 10)).map((d) => d.id)).toEqual(['d2', 'd1'])
    expect(await store.nextDue(e.id)).toBe(50)
    // two instances read d2 as due: one claim takes it
    expect(await engine.write((tx) => store.claim(tx, 'd2', 200, 20_000))).toBe(true)
    expect(await engine.write((tx) => store.claim(tx, 'd2', 200, 20_000))).toBe(false)
    expect((await store.due(e.id, 200, 10)).map((d) => d.id)).toEqual(['d1'])
    await engine.write(async (tx) => {
      await store.delivered(tx, 'd2', 204, 210)
      await store.retry(tx, 'd1', 500, 'HTTP 500', 5000, 210)
      await store.markFailing(tx, e.id, 210, 210)
    })
    const page = await store.deliveries(e.id, 10, 0)
    expect([page.total, page.rows.map((d) => [d.id, d.status, d.attempts, d.last_status_code])]).toEqual([
      3,
      [
        ['d3', 'pending', 0, null],
        ['d2', 'delivered', 1, 204],
        ['d1', 'pending', 1, 500],
      ],
    ])
    expect((await store.pendingGauges()).perEndpoint.filter((p) => p.endpoint_id === e.id)).toEqual([{ endpoint_id: e.id, workspace_id: ws, n: 2 }])
    // the dispatcher's disabling: only of an endpoint failing since the time given or earlier
    expect(await engine.write((tx) => store.disable(tx, e.id, 400, 'endpoint disabled after failing for 3 days', 200))).toBe(false)
    expect(await engine.write((tx) => store.disable(tx, e.id, 400, 'endpoint disabled by the operator'))).toBe(true)
    // each change only over what it was decided from: disabled already, an enable of an active one, a target or a secret read before another change
    expect(await engine.write((tx) => store.disable(tx, e.id, 400, 'again'))).toBe(false)
    const now = (await store.endpoint(e.id))!
    expect(await engine.write((tx) => store.updateTarget(tx, e.id, 'https://b.example/hook', null, null, 450, { ...now, url: 'https://elsewhere.example/' }))).toBe(false)
    expect(await engine.write((tx) => store.rotateSecret(tx, e.id, 'enc-new', null, 450, 'enc-other'))).toBe(false)
    expect(await store.endpoint(e.id)).toEqual(now)
    // an attempt that ends after the disabling keeps the held reason
    await engine.write((tx) => store.fail(tx, 'd1', 500, 'HTTP 500', 410))
    expect((await store.deliveries(e.id, 10, 0)).rows.map((d) => [d.id, d.status, d.last_error])).toEqual([
      ['d3', 'failed', 'endpoint disabled by the operator'],
      ['d2', 'delivered', null],
      ['d1', 'failed', 'endpoint disabled by the operator'],
    ])
    expect(await engine.write((tx) => store.enable(tx, e.id, 500))).toBe(2)
    expect(await engine.write((tx) => store.enable(tx, e.id, 510))).toBeNull()
    expect((await store.due(e.id, 500, 10)).map((d) => [d.id, d.attempts])).toEqual([
      ['d1', 0],
      ['d3', 0],
    ])
  })

  test('failed deliveries since a time go out again slice by slice; finished ones are pruned below a bound; events naming someone are dropped', async () => {
    const engine = engines[name]
    const store = new WebhookStore(engine)
    const ws = await workspace(engine)
    const e = endpoint(ws)
    await engine.write(async (tx) => {
      await store.createEndpoint(tx, e)
      for (let i = 0; i < 5; i++) {
        await store.enqueue(tx, `f${i}-${e.id}`, e.id, ws, i % 2 ? 'message.sent' : 'contact.consent_changed', `{"contact_id":"${i === 3 ? 'ada' : 'bob'}"}`, 1000 + i)
        await store.fail(tx, `f${i}-${e.id}`, 503, 'HTTP 503', 2000)
      }
    })
    const first = await engine.write((tx) => store.requeueFailedSlice(tx, e.id, 1001, 0, 2, 3000))
    expect(first.requeued).toBe(2)
    const rest = await engine.write((tx) => store.requeueFailedSlice(tx, e.id, 1001, first.last!, 2, 3000))
    expect(rest.requeued).toBe(2)
    expect(await engine.write((tx) => store.requeueFailedSlice(tx, e.id, 1001, rest.last!, 2, 3000))).toEqual({ requeued: 0, last: null })
    expect((await store.due(e.id, 3000, 10)).map((d) => d.id)).toEqual([1, 2, 3, 4].map((i) => `f${i}-${e.id}`))
    const last = await store.lastSeq()
    expect(await engine.write((tx) => store.dropMentioning(tx, 0, last, ws, '"ada"'))).toBe(1)
    // f0 is this endpoint's only finished one left: pruned below the first delivery made after 1000
    // (the prune is of every endpoint: an earlier test's finished ones go too)
    const bound = await store.firstAfterFor(e.id, 1000)
    expect(await engine.write((tx) => store.pruneMessageEvents(tx, e.id, bound, 10))).toBe(0)
    expect(await engine.write((tx) => store.prune(tx, bound, 10))).toBeGreaterThanOrEqual(1)
    expect((await store.deliveries(e.id, 10, 0)).rows.map((d) => d.id)).toEqual([4, 2, 1].map((i) => `f${i}-${e.id}`))
    expect(await store.everyEndpoint(ws)).toEqual([e.id])
  })
})

describe("the contacts' last activity on PostgreSQL", () => {
  test('written by one instance at a time: while one writes it, another is told to try again later; once that one commits, it may', async () => {
    // (SQLite has one process and one connection: always its turn, and its writes wait for each other)
    const engine = engines.postgres
    const store = new ContactStore(engine)
    let release = () => {}
    const held = new Promise<void>((r) => (release = r))
    let first: boolean | null = null
    const one = engine.writeApart(async (tx) => {
      first = await store.activityTurn(tx)
      await held
    })
    while (first === null) await Bun.sleep(5)
    const meanwhile = await engine.writeApart((tx) => store.activityTurn(tx))
    release()
    await one
    const after = await engine.writeApart((tx) => store.activityTurn(tx))
    expect([first, meanwhile, after]).toEqual([true, false, true])
    expect(await engines.sqlite.writeApart((tx) => new ContactStore(engines.sqlite).activityTurn(tx))).toBe(true)
  })
})
