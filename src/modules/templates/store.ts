/** The templates' store on the seam (docs/design/two-engines.md): each statement once, for both engines. */
import { type Queries, stmt } from '../../db/engine'

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

const Q = {
  insert: stmt('INSERT INTO templates (id, workspace_id, name, body, category, variables, whatsapp, imported, created_at, updated_at, deleted_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)'),
  // only over the template it was made from: another instance's change meanwhile is not written over
  update: stmt(
    'UPDATE templates SET name = ?, body = ?, category = ?, variables = ?, whatsapp = ?, imported = ?, updated_at = ? WHERE id = ? AND name = ? AND body = ? AND category = ? AND whatsapp IS ? AND imported IS ?',
    'UPDATE templates SET name = $1, body = $2, category = $3, variables = $4, whatsapp = $5, imported = $6, updated_at = $7 WHERE id = $8 AND name = $9 AND body = $10 AND category = $11 AND whatsapp IS NOT DISTINCT FROM $12 AND imported IS NOT DISTINCT FROM $13',
  ),
  remove: stmt('UPDATE templates SET deleted_at = ?, updated_at = ? WHERE id = ?'),
  get: stmt('SELECT * FROM templates WHERE id = ? AND workspace_id = ? AND deleted_at IS NULL'),
  list: stmt('SELECT * FROM templates WHERE workspace_id = ? AND deleted_at IS NULL ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?'),
  count: stmt('SELECT COUNT(*) AS n FROM templates WHERE workspace_id = ? AND deleted_at IS NULL'),
  linked: stmt('SELECT * FROM templates WHERE workspace_id = ? AND deleted_at IS NULL AND whatsapp IS NOT NULL'),
  // (the campaigns' table, read here until the campaigns module is on the seam and can say it)
  activeUses: stmt("SELECT COUNT(*) AS n FROM campaigns WHERE template_id = ? AND deleted_at IS NULL AND status IN ('scheduled', 'running', 'paused')"),
  scheduledWithMedia: stmt("SELECT COUNT(*) AS n FROM campaigns WHERE template_id = ? AND deleted_at IS NULL AND status = 'scheduled' AND media_id IS NOT NULL"),
  scheduledMedia: stmt("SELECT m.mime_type FROM campaigns c LEFT JOIN media m ON m.id = c.media_id WHERE c.template_id = ? AND c.deleted_at IS NULL AND c.status = 'scheduled'"),
}

export class TemplateStore {
  constructor(private readonly db: Queries) {}

  async insert(tx: Queries, r: TemplateRow) {
    await tx.run(Q.insert, r.id, r.workspace_id, r.name, r.body, r.category, r.variables, r.whatsapp, r.imported, r.created_at, r.updated_at)
  }
  /** Write the template, if it is still as `read` (the row it was made from); whether it was. */
  async update(tx: Queries, r: TemplateRow, read: TemplateRow): Promise<boolean> {
    return (await tx.run(Q.update, r.name, r.body, r.category, r.variables, r.whatsapp, r.imported, r.updated_at, r.id, read.name, read.body, read.category, read.whatsapp, read.imported)) > 0
  }
  async remove(tx: Queries, id: string, at: number) {
    await tx.run(Q.remove, at, at, id)
  }
  get(workspaceId: string, id: string, q: Queries = this.db) {
    return q.get<TemplateRow>(Q.get, id, workspaceId)
  }
  async list(workspaceId: string, limit: number, offset: number) {
    const [rows, count] = await Promise.all([this.db.all<TemplateRow>(Q.list, workspaceId, limit, offset), this.db.get<{ n: number }>(Q.count, workspaceId)])
    return { rows, total: count!.n }
  }
  /** The workspace's templates that stand for a WhatsApp template. */
  linked(workspaceId: string, q: Queries = this.db) {
    return q.all<TemplateRow>(Q.linked, workspaceId)
  }
  /** Campaigns that still need the template (scheduled, running or paused). */
  async activeUses(id: string, q: Queries = this.db): Promise<number> {
    return (await q.get<{ n: number }>(Q.activeUses, id))!.n
  }
  /** Scheduled campaigns that will send the template with media (it is read when they start). */
  async scheduledWithMedia(id: string, q: Queries = this.db): Promise<number> {
    return (await q.get<{ n: number }>(Q.scheduledWithMedia, id))!.n
  }

  /** The MIME type of the media of each scheduled campaign sending the template (null: none). */
  async scheduledMedia(id: string, q: Queries = this.db): Promise<(string | null)[]> {
    return (await q.all<{ mime_type: string | null }>(Q.scheduledMedia, id)).map((r) => r.mime_type)
  }
}
