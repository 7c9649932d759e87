/** /api/v1/templates: list, get, preview, create, update, delete. */
import type { authPlugin } from '../../http/auth'
import { notFound } from '../../http/errors'
import { paged, pageQuery } from '../../http/format'
import { fieldError, s, UUID, validate } from '../../http/schema'
import type { Services } from '../../services'
import { apiOps, type WorkspaceOp } from '../../http/workspace-ops'
import { templateDoc } from './model'
import { NUMBERED } from './render'

const BODY = s.string().length(1, 4096).describe('Up to 4096 characters with placeholders {{name}}, {{phone}}, {{metadata.key}} and numbered {{1}}.', 'Hi {{name}}, your {{metadata.plan}} plan renews soon. Use code {{1}}.')
const PARAMETER_NAME = s.string().length(1, 100).pattern(/^[a-z0-9_]+$/, 'must be a parameter name as Meta has it: lower-case letters, digits and underscores')
const WHATSAPP = s
  .object({
    name: s.string().length(1, 512).pattern(/^[a-z0-9_]+$/, 'must be the template name as approved by Meta: lower-case letters, digits and underscores'),
    language: s.string().length(2, 6).pattern(/^[a-z]{2,3}(_[A-Z]{2})?$/, 'must be a WhatsApp language code such as en or en_US'),
    header_text: s
      .string()
      .length(1, 200)
      .nullable()
      .optional()
      .describe('For a Meta template whose header is text with a variable (“Order {{1}}”): the value sent for that variable, with placeholders like the body’s, rendered per recipient (at most 60 characters once rendered). Such a template takes no media. Default none.', '{{metadata.order}}'),
    url_buttons: s
      .array(
        s.object({
          index: s.integer().range(0, 9).describe('The button’s position among the template’s buttons, from 0.'),
          value: s.string().length(1, 2000).describe('The variable end of its URL, with placeholders like the body’s.', 'track/{{1}}'),
        }),
      )
      .max(10)
      .optional()
      .describe('Dynamic URL buttons of the Meta template (a URL ending in {{1}}): the value sent for each, rendered per recipient like the body. Default none.'),
    parameter_names: s
      .array(PARAMETER_NAME)
      .max(100)
      .nullable()
      .optional()
      .describe('For a Meta template with named parameters (“Hi {{customer_name}}”): the name of each placeholder of this body, in order of first appearance, one each. Default none: numbered parameters.', ['customer_name', 'order_number']),
    header_parameter_name: PARAMETER_NAME.nullable()
      .optional()
      .describe('For such a template whose text header has a variable: its name (with header_text). Default none.', 'sale_name'),
    header_media: s
      .string()
      .oneOf(['image', 'video', 'document'])
      .nullable()
      .optional()
      .describe('For a Meta template whose header is an image, a video or a document: that kind. Every send of it then carries one file of that kind (a campaign its media_id); one without is refused with 422 instead of failing at Meta. Imported templates have it set. Default none.', 'document'),
  })
  .describe(
    'The Meta-approved WhatsApp template this template stands for. Campaigns and one-to-one sends (POST /messages with template_id) through a Cloud API number send it as a template message, its body parameters being the values of this body’s placeholders in order of first appearance; other numbers send the rendered text. null removes it.',
    { name: 'order_update', language: 'en_US' },
  )
const createBody = s.object({
  name: s.string().length(1, 120),
  body: BODY,
  category: s.string().oneOf(['utility', 'marketing']).optional().describe('Default utility.'),
  whatsapp: WHATSAPP.nullable().optional(),
})
const updateBody = s.object({
  name: s.string().length(1, 120).optional(),
  body: BODY.optional(),
  category: s.string().oneOf(['utility', 'marketing']).optional(),
  whatsapp: WHATSAPP.nullable().optional(),
})
const previewQuery = s.object({
  contact_id: s.string().format('uuid').optional().describe('Render with this contact’s name, phone and metadata.'),
  name: s.string().length(0, 255).optional(),
  phone: s.string().length(0, 32).optional(),
})

/** The template operations, on the public API and (for the dashboard) the admin API: see workspace-ops. */
export function templateOps(svc: Services): WorkspaceOp[] {
  const templates = svc.templates
  const find = (ws: string, id: string) => {
    if (!UUID.test(id)) throw notFound('template')
    return templates.get(ws, id)
  }
  return [
    {
      method: 'get',
      path: '/templates',
      run: ({ workspaceId, query }) => paged(query, (l, o) => templates.list(workspaceId, l, o), (t) => templates.toPublic(t)),
      doc: { summary: 'List templates', description: 'Newest first.', tag: 'Templates', scope: 'templates:read', query: pageQuery, ok: { status: 200, data: templateDoc, list: true, description: 'A page of templates.' }, errors: [422] },
    },
    {
      method: 'get',
      path: '/templates/:id',
      run: async ({ workspaceId, params }) => ({ data: templates.toPublic(await find(workspaceId, params.id!)) }),
      doc: { summary: 'One template', tag: 'Templates', scope: 'templates:read', params: ['id'], ok: { status: 200, data: templateDoc, description: 'The template.' }, errors: [404] },
    },
    {
      method: 'get',
      path: '/templates/:id/preview',
      run: async ({ workspaceId, params, query }) => {
        const tpl = await find(workspaceId, params.id!)
        const q = validate(previewQuery, { contact_id: query.contact_id, name: query.name, phone: query.phone })
        // prototype-free: a query key such as metadata.__proto__ is a value like any other
        const numbered: Record<string, string> = Object.create(null)
        const metadata: Record<string, unknown> = Object.create(null)
        for (const [k, v] of Object.entries(query)) {
          if (typeof v !== 'string') continue
          if (NUMBERED.test(k)) numbered[k] = v
          else if (k.startsWith('metadata.')) metadata[k.slice(9)] = v
        }
        let values = { name: q.name, phone: q.phone, metadata, numbered }
        if (q.contact_id) {
          const c = await svc.contacts.find(workspaceId, q.contact_id)
          if (!c) throw notFound('contact')
          values = { name: q.name ?? c.name ?? undefined, phone: q.phone ?? c.phone, metadata: { ...JSON.parse(c.metadata), ...metadata }, numbered }
        }
        return { data: templates.preview(tpl, values) }
      },
      doc: {
        summary: 'Preview a template',
        description: 'Renders the body with a contact (contact_id) and/or query values: name, phone, metadata.<key>=..., and numbered 1=..., 2=.... Returns the text and the placeholders that had no value (rendered empty).',
        tag: 'Templates',
        scope: 'templates:read',
        params: ['id'],
        query: previewQuery,
        ok: { status: 200, data: { type: 'object', properties: { body: { type: 'string' }, variables: { type: 'array', items: { type: 'string' } }, missing: { type: 'array', items: { type: 'string' } } } }, description: 'The rendered text.' },
        errors: [404, 422],
      },
    },
    {
      method: 'post',
      path: '/templates',
      run: async ({ workspaceId, body, set }) => {
        const input = validate(createBody, body)
        set.status = 201
        return { data: templates.toPublic(await templates.create(workspaceId, input)) }
      },
      doc: { summary: 'Create a template', description: 'Unknown placeholders are refused with 422.', tag: 'Templates', scope: 'templates:write', body: createBody, ok: { status: 201, data: templateDoc, description: 'Created.' }, errors: [400, 422] },
    },
    {
      method: 'put',
      path: '/templates/:id',
      run: async ({ workspaceId, params, body }) => {
        await find(workspaceId, params.id!)
        const input = validate(updateBody, body, (v, errors) => {
          if (v.name === undefined && v.body === undefined && v.category === undefined && v.whatsapp === undefined) fieldError(errors, 'body', 'Give at least one of name, body, category or whatsapp.')
        })
        return { data: templates.toPublic(await templates.update(workspaceId, params.id!, input)) }
      },
      doc: { summary: 'Update a template', description: 'Changes the fields given. A campaign that already started keeps the body it started with.', tag: 'Templates', scope: 'templates:write', params: ['id'], body: updateBody, ok: { status: 200, data: templateDoc, description: 'Updated.' }, errors: [400, 404, 422] },
    },
    {
      method: 'delete',
      path: '/templates/:id',
      run: async ({ workspaceId, params, set }) => {
        await find(workspaceId, params.id!)
        await templates.remove(workspaceId, params.id!)
        set.status = 204
        return ''
      },
      doc: { summary: 'Delete a template', description: 'Refused with 409 template_in_use while a scheduled, running or paused campaign uses it.', tag: 'Templates', scope: 'templates:write', params: ['id'], ok: { status: 204, description: 'Deleted.' }, errors: [404, 409] },
    },
  ]
}

export function templateApiRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  return apiOps(auth, templateOps(svc))
}
