/** GET /api/v1/contacts and POST /api/v1/contacts (upsert by phone); the admin API's import, export and erasure. */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { MAX_CSV_ROWS, MAX_JSON_ROWS } from '../../http/bulk'
import { paged } from '../../http/format'
import { adminOp, d, importBody } from '../../http/docs'
import { s, validate } from '../../http/schema'
import type { Services } from '../../services'
import { mediaDoc } from '../media/model'
import { messageDoc } from '../messages/model'
import { importRows } from './import'
import { CONSENT, contactDoc, listContactsQuery, phoneField, queryPhone, upsertContactBody } from './model'

/** A page of a workspace's contacts (page, per_page, phone), for the API and the admin API alike. */
export function contactsPage(svc: Services, workspaceId: string, query: Record<string, unknown>) {
  const q = validate(listContactsQuery, { ...query, phone: queryPhone(query.phone) })
  return paged(query, (limit, offset) => svc.contacts.list(workspaceId, limit, offset, q.phone), (r) => svc.contacts.toPublic(r))
}

export function contactApiRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const contacts = svc.contacts
  return new Elysia()
    .use(auth)
    .get(
      '/contacts',
      ({ caller, query }) => contactsPage(svc, caller.workspace.id, query),
      {
        api: {
          summary: 'List contacts',
          description: 'Newest activity first (creation, update, message out or in). With phone, the contact with that number: look a contact up without changing it.',
          tag: 'Contacts',
          scope: 'contacts:read',
          query: listContactsQuery,
          ok: { status: 200, data: contactDoc, list: true, description: 'A page of contacts.' },
          errors: [422],
        },
      },
    )
    .post(
      '/contacts',
      async ({ caller, body, set }) => {
        const input = validate(upsertContactBody, body)
        const { row, created } = await contacts.upsert(caller.workspace.id, input, `api_key:${caller.key.keyId}`)
        set.status = created ? 201 : 200
        return { data: contacts.toPublic(row) }
      },
      {
        api: {
          summary: 'Create or update a contact by phone',
          description: 'Upsert keyed by the E.164 phone: 201 when created, 200 when updated. consent_status changes only when sent.',
          tag: 'Contacts',
          scope: 'contacts:write',
          body: upsertContactBody,
          ok: { status: 201, data: contactDoc, description: 'Created: no contact had this phone number.' },
          alsoOk: [{ status: 200, description: 'Updated: the contact with this phone number, as stored now.' }],
          errors: [400, 413, 422],
        },
      },
    )
}

const byPhone = s.object({ phone: phoneField() })

/**
 * Admin: a contact's data handed over (ContactExport) or erased (ContactEraser) — the number in
 * the body, so it stays out of URLs and proxy logs.
 */
const suppressionDoc = d.object({ phone: d.string('E.164'), reason: d.nullable(d.string()), created_at: d.time })
const exportDoc = d.object({
  contact: contactDoc,
  consent: d.list(d.object({ status: d.string(), source: d.string(), at: d.time })),
  messages: d.list(messageDoc),
  media: d.list(mediaDoc),
  campaigns: d.list(d.object({ id: d.uuid, name: d.string(), campaign_status: d.string(), recipient_status: d.string(), skipped_reason: d.nullable(d.string()), message_id: d.nullable(d.uuid) })),
  network_addresses: d.list(d.string('An address a network knows the number by (a WhatsApp id).')),
  suppression: d.nullable(suppressionDoc),
  exported_at: d.time,
})
const erasureDoc = d.object({ contact_id: d.uuid, messages: d.integer, queued_failed: d.integer, media: d.integer, events: d.integer })
const importRowDoc = d.object({ phone: d.string('E.164, or national with the workspace default_country'), name: d.optional(d.nullable(d.string())), consent_status: d.optional(d.oneOf(CONSENT)), metadata: d.optional(d.anyObject()) })
const adminTag = 'Contacts (operator)'

export function contactAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  return new Elysia()
    .use(auth)
    .post(
      '/workspaces/:id/contacts/export',
      async ({ params, body, operator }) => {
        await svc.workspaces.find(params.id)
        return new Response(await svc.contactExport.export(params.id, validate(byPhone, body).phone, operator), { headers: { 'content-type': 'application/json' } })
      },
      { admin: true, detail: adminOp({ summary: "Hand over a contact's data", description: 'Everything kept about one number (the number in the body, so it stays out of URLs and logs): the contact, its consent ledger, messages, media, campaigns, network addresses and suppression.', tag: adminTag, body: byPhone, writes: false, ok: { status: 200, data: exportDoc, description: 'The export.' }, errors: [400, 404, 422] }) },
    )
    .get(
      '/workspaces/:id/contacts.csv',
      async ({ params, operator }) => {
        const ws = await svc.workspaces.find(params.id)
        return new Response(await svc.contactList.export(params.id, operator), {
          headers: { 'content-type': 'text/csv; charset=utf-8', 'content-disposition': `attachment; filename="contacts-${ws.slug}.csv"`, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' },
        })
      },
      { admin: true, detail: adminOp({ summary: "A workspace's contacts as CSV", tag: adminTag, ok: { status: 200, description: 'phone,name,consent_status,metadata (JSON),created_at,updated_at — streamed.', csv: true }, errors: [404] }) },
    )
    .post(
      '/workspaces/:id/contacts/import',
      async ({ params, body, operator }) => {
        const ws = await svc.workspaces.find(params.id)
        return { data: await svc.contactImport.run(params.id, await importRows(body, svc.workspaces.settings(ws).contacts.default_country), operator) }
      },
      { admin: true, detail: adminOp({ summary: 'Import contacts', description: `Upserts by phone, all or nothing: a CSV file of up to ${MAX_CSV_ROWS} rows or a JSON list of up to ${MAX_JSON_ROWS}.`, tag: adminTag, requestBody: importBody('contacts', importRowDoc, 'phone, and name, consent_status, metadata.<key> if you like'), ok: { status: 200, data: d.object({ created: d.integer, updated: d.integer }), description: 'How many were created and updated.' }, errors: [400, 404, 413, 422] }) },
    )
    .post(
      '/workspaces/:id/contacts/erase',
      async ({ params, body, operator }) => {
        await svc.workspaces.find(params.id)
        return { data: await svc.eraser.erase(params.id, validate(byPhone, body).phone, { by: operator }) }
      },
      { admin: true, detail: adminOp({ summary: 'Erase a contact', description: 'Its messages, media, consent ledger and webhook events go; messages the network does not have (queued, or waiting out a retry) fail. Kept in an erasure journal so a restored backup erases it again.', tag: adminTag, body: byPhone, ok: { status: 200, data: erasureDoc, description: 'What was erased.' }, errors: [400, 404, 409, 422] }) },
    )
}
