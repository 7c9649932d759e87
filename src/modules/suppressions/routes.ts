/** Admin routes for the suppression list. */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { type BulkSpec, MAX_CSV_ROWS, MAX_JSON_ROWS, bulkRows } from '../../http/bulk'
import { adminOp, d, importBody } from '../../http/docs'
import { paged, pageQuery } from '../../http/format'
import { s, validate } from '../../http/schema'
import type { Services } from '../../services'
import { E164, phoneField, queryPhone } from '../contacts/model'
import { notFound } from '../../http/errors'

const addBody = s.object({ phone: phoneField(), reason: s.string().length(0, 500).nullable().optional() })
const listQuery = s.object({ phone: phoneField().optional().describe('Only this number: a page of one, or none.'), ...pageQuery.shape })

/** An import's rows: phone and reason columns, or `{"suppressions": [{phone, reason?}]}`. */
const SUPPRESSION_ROWS: BulkSpec<{ phone: string; reason?: string | null }> = {
  noun: 'number',
  list: 'suppressions',
  schema: addBody as unknown as BulkSpec<{ phone: string; reason?: string | null }>['schema'],
  column: (cell) => (cell.toLowerCase() === 'phone' || cell.toLowerCase() === 'reason' ? [cell.toLowerCase()] : null),
  columns: 'phone or reason',
  header: 'phone, and reason if you like',
}

const suppressionDoc = d.object({ phone: d.string('E.164'), reason: d.nullable(d.string()), created_at: d.time })
const tag = 'Suppressions'

export function suppressionAdminRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const sup = svc.suppressions
  return new Elysia()
    .use(auth)
    .post(
      '/workspaces/:id/suppressions',
      async ({ params, body, set, operator }) => {
        await svc.workspaces.find(params.id)
        const input = validate(addBody, body)
        const [row, created] = await sup.add(params.id, input.phone, input.reason ?? null, operator)
        set.status = created ? 201 : 200
        return { data: sup.toPublic(row) }
      },
      { admin: true, detail: adminOp({ summary: 'Suppress a number', description: 'Nothing is sent to it from this workspace; adding it again keeps the first entry (200).', tag, body: addBody, ok: { status: 201, data: suppressionDoc, description: 'Added.' }, alsoOk: [{ status: 200, description: 'Already suppressed: the entry as it was.' }], errors: [400, 404, 422] }) },
    )
    .post(
      '/workspaces/:id/suppressions/import',
      async ({ params, body, operator }) => {
        await svc.workspaces.find(params.id)
        return { data: await sup.importRows(params.id, await bulkRows(body, SUPPRESSION_ROWS), operator) }
      },
      { admin: true, detail: adminOp({ summary: 'Import suppressions', description: `All or nothing: a CSV file of up to ${MAX_CSV_ROWS} rows or a JSON list of up to ${MAX_JSON_ROWS}.`, tag, requestBody: importBody('suppressions', d.object({ phone: d.string('E.164'), reason: d.optional(d.nullable(d.string())) }), 'phone, and reason if you like'), ok: { status: 200, data: d.object({ added: d.integer, already: d.integer }), description: 'How many were added, and how many were there already.' }, errors: [400, 404, 413, 422] }) },
    )
    .get(
      '/workspaces/:id/suppressions',
      async ({ params, query }) => {
        await svc.workspaces.find(params.id)
        const { phone } = validate(listQuery, { ...query, phone: queryPhone(query.phone) })
        if (phone !== undefined) {
          const row = await sup.find(params.id, phone)
          return paged(query, async (_l, offset) => ({ rows: row && offset === 0 ? [row] : [], total: row ? 1 : 0 }), (r) => sup.toPublic(r))
        }
        return paged(query, (limit, offset) => sup.list(params.id, limit, offset), (r) => sup.toPublic(r))
      },
      { admin: true, detail: adminOp({ summary: "A workspace's suppressions", description: 'Newest first; phone looks one number up.', tag, query: listQuery, ok: { status: 200, data: suppressionDoc, list: true, description: 'A page of suppressed numbers.' }, errors: [404, 422] }) },
    )
    .delete(
      '/workspaces/:id/suppressions/:phone',
      async ({ params, set, operator }) => {
        await svc.workspaces.find(params.id)
        // the router has already decoded the path (%2B → +); decoding again broke on a literal %
        const phone = params.phone
        if (!E164.test(phone)) throw notFound('suppression')
        await sup.remove(params.id, phone, operator)
        set.status = 204
        return ''
      },
      { admin: true, detail: adminOp({ summary: 'Lift a suppression', description: 'The number in the path as E.164, its + written %2B.', tag, ok: { status: 204, description: 'Lifted.' }, errors: [404] }) },
    )
}
