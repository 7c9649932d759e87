/** GET /api/v1/contacts and POST /api/v1/contacts (upsert by phone); the admin API's import, export and erasure. */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { paged } from '../../http/format'
import { hidden } from '../../http/docs'
import { s, validate } from '../../http/schema'
import type { Services } from '../../services'
import { importRows } from './import'
import { CONSENT, listContactsQuery, phoneField, queryPhone, upsertContactBody } from './model'

export const contactDoc = {
  type: 'object',
  properties: {
    id: { type: 'string', format: 'uuid' },
    phone: { type: 'string', example: '+14155550100' },
    name: { type: ['string', 'null'] },
    consent_status: { type: 'string', enum: [...CONSENT] },
    metadata: { type: 'object', additionalProperties: { anyOf: [{ type: 'string' }, { type: 'number' }, { type: 'boolean' }] } },
    created_at: { type: 'string', format: 'date-time' },
    updated_at: { type: 'string', format: 'date-time' },
    last_activity_at: { type: 'string', format: 'date-time' },
  },
}

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
export function contactAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  return new Elysia()
    .use(auth)
    .post(
      '/workspaces/:id/contacts/export',
      ({ params, body }) => {
        svc.workspaces.get(params.id)
        return new Response(svc.contactExport.export(params.id, validate(byPhone, body).phone), { headers: { 'content-type': 'application/json' } })
      },
      { admin: true, detail: hidden },
    )
    .get(
      '/workspaces/:id/contacts.csv',
      async ({ params }) => {
        const ws = svc.workspaces.get(params.id)
        return new Response(await svc.contactList.export(params.id), {
          headers: { 'content-type': 'text/csv; charset=utf-8', 'content-disposition': `attachment; filename="contacts-${ws.slug}.csv"`, 'cache-control': 'no-store', 'x-content-type-options': 'nosniff' },
        })
      },
      { admin: true, detail: hidden },
    )
    .post(
      '/workspaces/:id/contacts/import',
      async ({ params, body }) => {
        const ws = svc.workspaces.get(params.id)
        return { data: await svc.contactImport.run(params.id, await importRows(body, svc.workspaces.settings(ws).contacts.default_country)) }
      },
      { admin: true, detail: hidden },
    )
    .post(
      '/workspaces/:id/contacts/erase',
      async ({ params, body }) => {
        svc.workspaces.get(params.id)
        return { data: await svc.eraser.erase(params.id, validate(byPhone, body).phone) }
      },
      { admin: true, detail: hidden },
    )
}
