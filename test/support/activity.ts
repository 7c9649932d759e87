/**
 * A contact's last activity on a running server, one body for both engines
 * (src/modules/contacts/activity.ts): a send moves it in the API at once, it is written within a
 * moment (the list orders by it), and a graceful stop writes the last one. `written` reads a
 * contact's stored time from the server's database.
 */
import { expect } from 'bun:test'
import { newPhone, type TestServer } from './server'
import { waitFor } from './wait'

export async function activityMovesWithMessages(srv: TestServer, written: (contactId: string) => Promise<number>) {
  const { ws, key } = await srv.tenant()
  const conn = (await srv.admin('POST', `/workspaces/${ws.id}/connections`, { phone: newPhone(), driver: 'sandbox' })).json.data
  const older = (await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone() } })).json.data
  await Bun.sleep(5)
  const newer = (await srv.api(key, 'POST', '/contacts', { json: { phone: newPhone() } })).json.data
  const sent = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: older.phone, body: 'to the older one' } })).json.data
  expect(sent.contact_id).toBe(older.id)
  expect(Date.parse(sent.created_at)).toBeGreaterThan(Date.parse(older.last_activity_at))
  // shown at once by the server that took the send
  expect((await srv.api(key, 'GET', `/contacts?phone=${encodeURIComponent(older.phone)}`)).json.data[0].last_activity_at).toBe(sent.created_at)
  // written within a moment, and the list orders by it
  await waitFor(async () => (await written(older.id)) === Date.parse(sent.created_at), 3000)
  expect(await written(older.id)).toBe(Date.parse(sent.created_at))
  expect((await srv.api(key, 'GET', '/contacts')).json.data.map((c: { id: string }) => c.id)).toEqual([older.id, newer.id])
  // a send just before a graceful stop: its contact's time is written before the server exits
  const last = (await srv.api(key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newer.phone, body: 'just before the stop' } })).json.data
  await srv.stop()
  expect(await written(newer.id)).toBe(Date.parse(last.created_at))
}
