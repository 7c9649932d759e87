/** Template SQL. */
import type { Database } from 'bun:sqlite'

export interface TemplateRow {
  id: string
  workspace_id: string
  name: string
  body: string
  category: 'utility' | 'marketing'
  variables: string
  /** JSON {name, language}: the Meta-approved WhatsApp template this one stands for, or null. */
  whatsapp: string | null
  /** What the last import wrote (JSON [body, category, whatsapp]); null for a template made by hand. */
  imported: string | null
  created_at: number
  updated_at: number
  deleted_at: number | null
}

export class TemplateRepo {
  private insertStmt
  private updateStmt
  private deleteStmt
  private getStmt
  private listStmt
  private countStmt
  private usedStmt
  private withMediaStmt
  private linkedStmt

  constructor(db: Database) {
    this.insertStmt = db.query('INSERT INTO templates (id, workspace_id, name, body, category, variables, whatsapp, imported, created_at, updated_at, deleted_at) VALUES ($id, $workspace_id, $name, $body, $category, $variables, $whatsapp, $imported, $created_at, $updated_at, NULL)')
    this.updateStmt = db.query('UPDATE templates SET name = $name, body = $body, category = $category, variables = $variables, whatsapp = $whatsapp, imported = $imported, updated_at = $updated_at WHERE id = $id')
    this.deleteStmt = db.query('UPDATE templates SET deleted_at = ?, updated_at = ? WHERE id = ?')
    this.getStmt = db.query<TemplateRow, [string, string]>('SELECT * FROM templates WHERE id = ? AND workspace_id = ? AND deleted_at IS NULL')
    this.listStmt = db.query<TemplateRow, [string, number, number]>('SELECT * FROM templates WHERE workspace_id = ? AND deleted_at IS NULL ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?')
    this.countStmt = db.query<{ n: number }, [string]>('SELECT COUNT(*) AS n FROM templates WHERE workspace_id = ? AND deleted_at IS NULL')
    this.usedStmt = db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM campaigns WHERE template_id = ? AND deleted_at IS NULL AND status IN ('scheduled', 'running', 'paused')")
    this.linkedStmt = db.query<TemplateRow, [string]>('SELECT * FROM templates WHERE workspace_id = ? AND deleted_at IS NULL AND whatsapp IS NOT NULL')
    this.withMediaStmt = db.query<{ n: number }, [string]>("SELECT COUNT(*) AS n FROM campaigns WHERE template_id = ? AND deleted_at IS NULL AND status = 'scheduled' AND media_id IS NOT NULL")
  }

  insert(row: TemplateRow) {
    const { deleted_at: _, ...rest } = row
    this.insertStmt.run(rest as any)
  }
  update(row: TemplateRow) {
    this.updateStmt.run({ id: row.id, name: row.name, body: row.body, category: row.category, variables: row.variables, whatsapp: row.whatsapp, imported: row.imported, updated_at: row.updated_at } as any)
  }
  remove(id: string, at: number) {
    this.deleteStmt.run(at, at, id)
  }
  get(workspaceId: string, id: string) {
    return this.getStmt.get(id, workspaceId)
  }
  list(workspaceId: string, limit: number, offset: number) {
    return { rows: this.listStmt.all(workspaceId, limit, offset), total: this.countStmt.get(workspaceId)!.n }
  }
  /** The workspace's templates that stand for a WhatsApp template. */
  linked(workspaceId: string) {
    return this.linkedStmt.all(workspaceId)
  }
  /** Campaigns that still need the template (scheduled, running or paused). */
  activeUses(id: string) {
    return this.usedStmt.get(id)!.n
  }
  /** Scheduled campaigns that will send the template with media (it is read when they start). */
  scheduledWithMedia(id: string) {
    return this.withMediaStmt.get(id)!.n
  }
}
