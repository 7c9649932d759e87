/** Message templates with placeholders; preview renders them for a contact or given values. */
import type { Deps } from '../../deps'
import { conflict, notFound, validationFailed } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import { NUMBERED, placeholders, render, type RenderValues } from './render'
import { TemplateRepo, type TemplateRow } from './repo'

/** The Meta-approved WhatsApp template a Capstan template stands for (Cloud API numbers send it). */
export interface WhatsAppTemplate {
  name: string
  language: string
  /** The variable part of its dynamic URL buttons, by button position, with placeholders. */
  url_buttons?: { index: number; value: string }[]
}

export interface TemplateInput {
  name?: string
  body?: string
  category?: 'utility' | 'marketing'
  /** null removes the link; undefined leaves it as it is */
  whatsapp?: WhatsAppTemplate | null
}

const whatsappJson = (w: WhatsAppTemplate | null | undefined) => (w ? JSON.stringify({ name: w.name, language: w.language, url_buttons: (w.url_buttons ?? []).map((b) => ({ index: b.index, value: b.value })) }) : null)

export class TemplateService {
  readonly repo: TemplateRepo

  constructor(private readonly deps: Deps) {
    this.repo = new TemplateRepo(deps.db)
  }

  toPublic(row: TemplateRow) {
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

  /** The stored link as the API shows it: name, language, url_buttons (none before they existed). */
  private whatsappOf(json: string) {
    const w = JSON.parse(json) as WhatsAppTemplate
    return { name: w.name, language: w.language, url_buttons: w.url_buttons ?? [] }
  }

  /**
   * The placeholders of the body, then those only the WhatsApp template's URL buttons use (their
   * numbered ones need values like the body's); 422 for an unknown one or a button given twice.
   */
  private variablesOf(body: string, whatsapp: WhatsAppTemplate | null): string[] {
    const { variables, unknown } = placeholders(body)
    const hint = 'Use {{name}}, {{phone}}, {{metadata.key}} or numbered {{1}}.'
    if (unknown.length) throw validationFailed({ body: [`Unknown placeholders: ${unknown.map((u) => `{{${u}}}`).join(', ')}. ${hint}`] })
    const buttons = whatsapp?.url_buttons ?? []
    if (new Set(buttons.map((b) => b.index)).size !== buttons.length) throw validationFailed({ 'whatsapp.url_buttons': ['Each button index may be given once.'] })
    for (const b of buttons) {
      const found = placeholders(b.value)
      if (found.unknown.length) throw validationFailed({ 'whatsapp.url_buttons': [`Unknown placeholders: ${found.unknown.map((u) => `{{${u}}}`).join(', ')}. ${hint}`] })
      for (const v of found.variables) if (!variables.includes(v)) variables.push(v)
    }
    return variables
  }

  get(workspaceId: string, id: string): TemplateRow {
    const row = this.repo.get(workspaceId, id)
    if (!row) throw notFound('template')
    return row
  }

  create(workspaceId: string, input: Required<Pick<TemplateInput, 'name' | 'body'>> & TemplateInput): TemplateRow {
    const variables = this.variablesOf(input.body, input.whatsapp ?? null)
    const now = this.deps.clock.now()
    const row: TemplateRow = { id: uuid(), workspace_id: workspaceId, name: input.name, body: input.body, category: input.category ?? 'utility', variables: JSON.stringify(variables), whatsapp: whatsappJson(input.whatsapp), created_at: now, updated_at: now, deleted_at: null }
    this.deps.writer.now(() => this.repo.insert(row))
    return row
  }

  update(workspaceId: string, id: string, input: TemplateInput): TemplateRow {
    const row = this.get(workspaceId, id)
    const body = input.body ?? row.body
    const whatsapp = input.whatsapp === undefined ? row.whatsapp : whatsappJson(input.whatsapp)
    const variables = this.variablesOf(body, whatsapp === null ? null : (JSON.parse(whatsapp) as WhatsAppTemplate))
    const next: TemplateRow = { ...row, name: input.name ?? row.name, body, category: input.category ?? row.category, variables: JSON.stringify(variables), whatsapp, updated_at: this.deps.clock.now() }
    this.deps.writer.now(() => this.repo.update(next))
    return next
  }

  remove(workspaceId: string, id: string) {
    this.deps.writer.now(() => {
      this.get(workspaceId, id)
      if (this.repo.activeUses(id) > 0) throw conflict('template_in_use', 'The template is used by a scheduled, running or paused campaign.')
      this.repo.remove(id, this.deps.clock.now())
    })
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
