/** Message templates with placeholders; preview renders them for a contact or given values. */
import type { Queries } from '../../db/engine'
import type { Deps } from '../../deps'
import type { AuditRepo, Operator } from '../audit/repo'
import { conflict, notFound, validationFailed } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import { NUMBERED, placeholders, render, type RenderValues } from './render'
import { templateHeaderKind, type NetworkTemplateDefinition } from '../../network/driver'
import type { PublicTemplate } from './model'
import { TemplateStore, type TemplateRow } from './store'

/** The Meta-approved WhatsApp template a Capstan template stands for (Cloud API numbers send it). */
export interface WhatsAppTemplate {
  name: string
  language: string
  /** The value of its text header's variable (a header like "Order {{1}}"), with placeholders. */
  header_text?: string | null
  /** The variable part of its dynamic URL buttons, by button position, with placeholders. */
  url_buttons?: { index: number; value: string }[]
  /** A template with named parameters: the body's, one per placeholder in order of first appearance. */
  parameter_names?: string[] | null
  /** ... and its text header's variable. */
  header_parameter_name?: string | null
  /** Its header is media of this kind (Meta's IMAGE, VIDEO or DOCUMENT header): each send carries one such file. */
  header_media?: HeaderMedia | null
}

export type HeaderMedia = 'image' | 'video' | 'document'

/** "an image", "a video", "a document". */
export const withArticle = (kind: HeaderMedia) => `${kind === 'image' ? 'an' : 'a'} ${kind}`

export interface TemplateInput {
  name?: string
  body?: string
  category?: 'utility' | 'marketing'
  /** null removes the link; undefined leaves it as it is */
  whatsapp?: WhatsAppTemplate | null
}

/** The link as stored and shown: its fields in one order, the optional ones always present. */
const whatsappShape = (w: WhatsAppTemplate): NonNullable<PublicTemplate['whatsapp']> => ({
  name: w.name,
  language: w.language,
  header_text: w.header_text ?? null,
  url_buttons: (w.url_buttons ?? []).map((b) => ({ index: b.index, value: b.value })),
  parameter_names: w.parameter_names ?? null,
  header_parameter_name: w.header_parameter_name ?? null,
  header_media: w.header_media ?? null,
})
/** Stored without header_media when it has none: links stored before it existed read the same (an import sees no change). */
const whatsappJson = (w: WhatsAppTemplate | null | undefined) => {
  if (!w) return null
  const { header_media, ...rest } = whatsappShape(w)
  return JSON.stringify(header_media ? { ...rest, header_media } : rest)
}

export class TemplateService {
  private readonly store: TemplateStore

  constructor(
    private readonly deps: Deps,
    private readonly audit: AuditRepo,
  ) {
    this.store = new TemplateStore(deps.engine)
  }

  toPublic(row: TemplateRow): PublicTemplate {
    return {
      id: row.id,
      name: row.name,
      body: row.body,
      variables: JSON.parse(row.variables) as string[],
      category: row.category,
      whatsapp: row.whatsapp === null ? null : this.whatsappOf(row.whatsapp),
      created_at: iso(row.created_at),
      updated_at: iso(row.updated_at),
    }
  }

  /** The stored link as the API shows it (links stored before header_text or url_buttons existed have none). */
  private whatsappOf(json: string) {
    return whatsappShape(JSON.parse(json) as WhatsAppTemplate)
  }
  /** The workspace's template, or null (no 404). */
  find(workspaceId: string, id: string, q?: Queries): Promise<TemplateRow | null> {
    return this.store.get(workspaceId, id, q)
  }

  /** A page of the workspace's templates, newest first. */
  list(workspaceId: string, limit: number, offset: number) {
    return this.store.list(workspaceId, limit, offset)
  }

  /**
   * The placeholders of the body, then those only the WhatsApp template's header text and URL
   * buttons use (their numbered ones need values like the body's); 422 for an unknown one or a
   * button given twice.
   */
  private variablesOf(body: string, whatsapp: WhatsAppTemplate | null): string[] {
    const hint = 'Use {{name}}, {{phone}}, {{metadata.key}} or numbered {{1}}.'
    const known = (field: string, text: string) => {
      const found = placeholders(text)
      if (found.unknown.length) throw validationFailed({ [field]: [`Unknown placeholders: ${found.unknown.map((u) => `{{${u}}}`).join(', ')}. ${hint}`] })
      return found.variables
    }
    const variables = known('body', body)
    const names = whatsapp?.parameter_names
    if (names && names.length !== variables.length) throw validationFailed({ 'whatsapp.parameter_names': [`Give one name for each placeholder of the body, in order of first appearance: ${variables.length} here.`] })
    if (names && new Set(names).size !== names.length) throw validationFailed({ 'whatsapp.parameter_names': ['Each name may be given once.'] })
    if (whatsapp?.header_media && whatsapp.header_text) throw validationFailed({ 'whatsapp.header_media': ['A template has one header: text (header_text) or media (header_media), not both.'] })
    if (whatsapp?.header_parameter_name && !whatsapp.header_text) throw validationFailed({ 'whatsapp.header_parameter_name': ['A header parameter name goes with header_text.'] })
    const buttons = whatsapp?.url_buttons ?? []
    if (new Set(buttons.map((b) => b.index)).size !== buttons.length) throw validationFailed({ 'whatsapp.url_buttons': ['Each button index may be given once.'] })
    const more = [...(whatsapp?.header_text ? known('whatsapp.header_text', whatsapp.header_text) : []), ...buttons.flatMap((b) => known('whatsapp.url_buttons', b.value))]
    for (const v of more) if (!variables.includes(v)) variables.push(v)
    return variables
  }

  async get(workspaceId: string, id: string, q?: Queries): Promise<TemplateRow> {
    const row = await this.store.get(workspaceId, id, q)
    if (!row) throw notFound('template')
    return row
  }

  async create(workspaceId: string, input: Required<Pick<TemplateInput, 'name' | 'body'>> & TemplateInput): Promise<TemplateRow> {
    const variables = this.variablesOf(input.body, input.whatsapp ?? null)
    const now = this.deps.clock.now()
    const row: TemplateRow = { id: uuid(), workspace_id: workspaceId, name: input.name, body: input.body, category: input.category ?? 'utility', variables: JSON.stringify(variables), whatsapp: whatsappJson(input.whatsapp), imported: null, created_at: now, updated_at: now, deleted_at: null }
    await this.deps.engine.write((tx) => this.store.insert(tx, row))
    return row
  }

  async update(workspaceId: string, id: string, input: TemplateInput): Promise<TemplateRow> {
    // made from the template as read, written only over it: changed meanwhile (another
    // instance), it is read again and the change made over that
    for (;;) {
      const next = await this.updated(workspaceId, id, input)
      if (next) return next
    }
  }

  /** The change made from the template as it is, and written if it still is; null otherwise. */
  private async updated(workspaceId: string, id: string, input: TemplateInput): Promise<TemplateRow | null> {
    const row = await this.get(workspaceId, id)
    const body = input.body ?? row.body
    const whatsapp = input.whatsapp === undefined ? row.whatsapp : whatsappJson(input.whatsapp)
    const link = whatsapp === null ? null : (JSON.parse(whatsapp) as WhatsAppTemplate)
    const variables = this.variablesOf(body, link)
    // a campaign takes the template as it is when it starts: one waiting to start with media
    // could not send a template whose header became text
    if (link?.header_text && !this.hasTextHeader(row) && (await this.store.scheduledWithMedia(id)) > 0) throw validationFailed({ 'whatsapp.header_text': ['A scheduled campaign sends this template with media (media_id); a template with a text header takes none.'] })
    if (link?.header_media && (await this.scheduledMismatch(id, link.header_media))) throw validationFailed({ 'whatsapp.header_media': [`A scheduled campaign sends this template without ${withArticle(link.header_media)} (media_id); a template with ${withArticle(link.header_media)} header needs one.`] })
    const next: TemplateRow = { ...row, name: input.name ?? row.name, body, category: input.category ?? row.category, variables: JSON.stringify(variables), whatsapp, updated_at: this.deps.clock.now() }
    return (await this.deps.engine.write((tx) => this.store.update(tx, next, row))) ? next : null
  }

  async remove(workspaceId: string, id: string) {
    await this.deps.engine.write(async (tx) => {
      await this.get(workspaceId, id, tx)
      if ((await this.store.activeUses(id, tx)) > 0) throw conflict('template_in_use', 'The template is used by a scheduled, running or paused campaign.')
      await this.store.remove(tx, id, this.deps.clock.now())
    })
  }

  /**
   * Templates a network holds (`defs`), made templates of the workspace that stand for them; runs
   * inside a write. The body is the network's text, its numbered variables being the values sent
   * in that order; a text header's variable and each URL button's get the next numbers ("Order
   * {{1}}" in a header of a body with {{1}} and {{2}} takes {{3}}). One the workspace already has
   * (same name and language) is brought up to date when the network's has changed and it is still
   * as imported (`updated`); one edited here since is left as it is (`existing` while the network's
   * is unchanged, else listed in `skipped` with the reason), as is one made by hand. One that cannot
   * be sent is listed with the reason. Audited as `templates.imported`, naming the number.
   */
  importFrom(workspaceId: string, connectionId: string, defs: NetworkTemplateDefinition[], by: Operator | null = null) {
    return this.deps.engine.write(async (tx) => {
      const result = await this.importIn(tx, workspaceId, defs)
      await this.audit.addIn(tx, workspaceId, 'templates.imported', null, this.deps.clock.now(), connectionId, by)
      return result
    })
  }

  private async importIn(tx: Queries, workspaceId: string, defs: NetworkTemplateDefinition[]) {
    const key = (name: string, language: string) => `${name}\u0000${language}`
    const have = new Map((await this.store.linked(workspaceId, tx)).map((r) => [key(...this.linkOf(r)), r]))
    const created: TemplateRow[] = []
    const updated: TemplateRow[] = []
    const existing: TemplateRow[] = []
    const skipped: { name: string; language: string; reason: string }[] = []
    for (const def of defs) {
      const reason = def.unusable ?? importableBody(def.body)
      if (reason) {
        skipped.push({ name: def.name, language: def.language, reason })
        continue
      }
      let next = placeholders(def.body).variables.length + 1
      const whatsapp: WhatsAppTemplate = {
        name: def.name,
        language: def.language,
        header_text: def.headerVariable ? `{{${next++}}}` : null,
        url_buttons: def.urlButtons.map((index) => ({ index, value: `{{${next++}}}` })),
        parameter_names: def.parameterNames ?? null,
        header_parameter_name: def.headerParameterName ?? null,
        header_media: def.headerMedia ?? null,
      }
      const fresh = { body: def.body, category: def.category, variables: JSON.stringify(this.variablesOf(def.body, whatsapp)), whatsapp: whatsappJson(whatsapp) }
      const imported = importStamp(fresh)
      const now = this.deps.clock.now()
      const known = have.get(key(def.name, def.language))
      if (known) {
        const action = await this.reimport(tx, known, imported, fresh.whatsapp)
        if (action === 'keep') existing.push(known)
        else if (action === 'adopt') {
          // already what the import makes (made by hand so, or imported before imports were
          // recorded): from now on it is as imported
          await this.store.update(tx, { ...known, imported }, known)
          existing.push(known)
        } else if (action === 'update') {
          const row: TemplateRow = { ...known, ...fresh, imported, updated_at: now }
          // (edited meanwhile, on another instance: left as it is, like one edited here before)
          if (await this.store.update(tx, row, known)) updated.push(row)
          else existing.push(known)
        } else skipped.push({ name: def.name, language: def.language, reason: action })
        continue
      }
      const row: TemplateRow = { id: uuid(), workspace_id: workspaceId, name: `${def.name} (${def.language})`.slice(0, 120), ...fresh, imported, created_at: now, updated_at: now, deleted_at: null }
      await this.store.insert(tx, row)
      have.set(key(def.name, def.language), row)
      created.push(row)
    }
    return { created, updated, existing, skipped }
  }

  /**
   * What an import does with a template the workspace already links to the network's template,
   * which the import now makes into `imported`: keep it as it is, adopt the record (it is exactly
   * that already), update it (still as last imported, and the network's has changed since), or
   * the reason it was left as it is. A template made by hand is kept.
   */
  private async reimport(tx: Queries, row: TemplateRow, imported: string, whatsapp: string | null): Promise<'keep' | 'adopt' | 'update' | string> {
    if (importStamp(row) === imported) return row.imported === imported ? 'keep' : 'adopt'
    if (row.imported === null || row.imported === imported) return 'keep'
    if (importStamp(row) !== row.imported) return `Meta's template has changed since it was imported, and template ${row.id} was edited here since: it was left as it is; edit it to match.`
    // as PUT /templates: a campaign waiting to start with media could not send a text header
    if (this.hasTextHeader({ ...row, whatsapp }) && !this.hasTextHeader(row) && (await this.store.scheduledWithMedia(row.id, tx)) > 0) return `Meta's template now has a text header, and a scheduled campaign sends template ${row.id} with media: it was left as it is.`
    const media = this.headerMediaOf({ ...row, whatsapp })
    if (media && (await this.scheduledMismatch(row.id, media, tx))) return `Meta's template now has ${withArticle(media)} header, and a scheduled campaign sends template ${row.id} without one: it was left as it is.`
    return 'update'
  }

  private linkOf(row: TemplateRow): [string, string] {
    const w = JSON.parse(row.whatsapp!) as WhatsAppTemplate
    return [w.name, w.language]
  }

  /** The kind of file the WhatsApp template's media header takes; null when it has none. */
  headerMediaOf(row: Pick<TemplateRow, 'whatsapp'>): HeaderMedia | null {
    return row.whatsapp === null ? null : ((JSON.parse(row.whatsapp) as WhatsAppTemplate).header_media ?? null)
  }

  /** Whether a scheduled campaign sends the template without a file of kind `media` (none, or another kind). */
  private async scheduledMismatch(id: string, media: HeaderMedia, q?: Queries): Promise<boolean> {
    return (await this.store.scheduledMedia(id, q)).some((m) => m === null || templateHeaderKind(m) !== media)
  }

  /** Whether the template stands for a WhatsApp template whose header is text (it then takes no media). */
  hasTextHeader(row: TemplateRow): boolean {
    return row.whatsapp !== null && !!(JSON.parse(row.whatsapp) as WhatsAppTemplate).header_text
  }

  /** 422 when a numbered placeholder of the template has no value in `numbered` (campaigns, sends). */
  requireNumbered(row: TemplateRow, numbered: Record<string, unknown>) {
    const missing = (JSON.parse(row.variables) as string[]).filter((v) => NUMBERED.test(v) && (numbered[v] === undefined || numbered[v] === ''))
    if (missing.length) throw validationFailed({ variables: [`Values are needed for the numbered placeholders ${missing.map((m) => `{{${m}}}`).join(', ')}.`] })
  }

  preview(row: TemplateRow, values: RenderValues) {
    const { text, missing } = render(row.body, values)
    return { body: text, variables: JSON.parse(row.variables) as string[], missing }
  }
}

/** What an import wrote into a template, to tell later whether it is still as imported. */
const importStamp = (t: Pick<TemplateRow, 'body' | 'category' | 'whatsapp'>) => JSON.stringify([t.body, t.category, t.whatsapp])

/**
 * Why a network template's body cannot be a Capstan body as it is, or null. Capstan sends a body's
 * values in the order its placeholders first appear, so the network's variables must first appear
 * as {{1}}, {{2}}, … in that order; and they must be all it has between double braces.
 */
function importableBody(body: string): string | null {
  if ([...body].length > 4096) return 'Its body is longer than 4096 characters.'
  const { variables, unknown } = placeholders(body)
  if (unknown.length || variables.some((v, i) => v !== String(i + 1))) return 'Its variables do not first appear in the order {{1}}, {{2}}, …; create this template by hand (see "WhatsApp templates" in docs/templates-and-campaigns.md).'
  return null
}
