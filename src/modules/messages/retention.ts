/**
 * Message content retention (workspace setting `messages.content_retention_days`): a message sent
 * or received longer ago than that loses its content — body, attachments list and rendered
 * template — while the log keeps the rest (direction, numbers, status, timeline, error), so
 * counts, statistics and delivery history stay whole. Queued and sending messages are left
 * alone until they settle. The finished webhook deliveries of message events that old go too (their
 * payloads are copies of the messages); pending ones are still delivered; so do the texts in the
 * sandbox network's record of sends. Run hourly
 * (scheduler/jobs.ts); with secure_delete on, the removed text is zeroed in the database file.
 *
 * Each workspace's messages are walked in `seq` order (creation order) through its log index, in
 * slices of `slice` with requests served between, from where the last run stopped: a run reads
 * only what aged out since (after a restart, one walk from the start).
 */
import { stmt } from '../../db/engine'
import type { Deps } from '../../deps'
import type { Logger } from '../../http/log'
import type { WebhookService } from '../webhooks/service'
import type { WorkspaceService } from '../workspaces/service'
import { nextTurn } from '../../db/writer'

const DAY_MS = 86_400_000

const Q = {
  next: stmt('SELECT seq, created_at, status FROM messages WHERE workspace_id = ? AND seq > ? ORDER BY seq LIMIT ?'),
  redact: stmt(
    `UPDATE messages SET body = NULL, attachments = '[]', network_template = NULL, updated_at = ?
     WHERE workspace_id = ? AND seq BETWEEN ? AND ? AND created_at < ? AND status NOT IN ('queued', 'sending')
       AND (body IS NOT NULL OR attachments != '[]' OR network_template IS NOT NULL)`,
  ),
}

export class MessageRetention {
  slice = 5000
  /** The texts the workspace's network drivers keep on disk (the sandbox's record) go too; returns how many. */
  onContentExpired: (workspaceId: string, cutoff: number) => Promise<number> = async () => 0
  /** Per workspace: every message up to this seq has been dealt with. */
  private readonly done = new Map<string, number>()
  constructor(
    private readonly deps: Deps,
    private readonly workspaces: WorkspaceService,
    private readonly webhooks: WebhookService,
    private readonly log: Logger,
  ) {}

  /** Remove the content that has aged out in every workspace that sets a retention; returns how many messages lost it. */
  async run(): Promise<number> {
    let total = 0
    let events = 0
    for (const ws of this.workspaces.all()) {
      const days = this.workspaces.settings(ws).messages.content_retention_days
      if (days === null) continue
      const cutoff = this.deps.clock.now() - days * DAY_MS
      const n = await this.runFor(ws.id, cutoff)
      const e = await this.webhooks.pruneMessageEvents(ws.id, cutoff)
      const d = await this.onContentExpired(ws.id, cutoff)
      if (n > 0 || e > 0 || d > 0) this.log.info('message content past its retention removed', { workspace_id: ws.id, messages: n, webhook_deliveries: e, network_records: d })
      total += n
      events += e
    }
    // the WAL holds the pages as they were before
    if (total + events > 0 && !(await this.deps.engine.scrub())) this.log.warn('message retention: the WAL could not be emptied yet (another process is reading the database); it will be at a later checkpoint')
    return total
  }

  private async runFor(workspaceId: string, cutoff: number): Promise<number> {
    const { deps } = this
    let total = 0
    let after = this.done.get(workspaceId) ?? 0
    // the first message found still queued or sending: the next run resumes at it
    let unsettled: number | null = null
    for (;;) {
      const rows = await deps.engine.all<{ seq: number; created_at: number; status: string }>(Q.next, workspaceId, after, this.slice)
      // the aged-out head of the slice (messages are created in seq order)
      let end = 0
      while (end < rows.length && rows[end]!.created_at < cutoff) end++
      if (end > 0) {
        const first = rows[0]!.seq
        const last = rows[end - 1]!.seq
        total += await deps.engine.write((tx) => tx.run(Q.redact, deps.clock.now(), workspaceId, first, last, cutoff))
        unsettled ??= rows.slice(0, end).find((r) => r.status === 'queued' || r.status === 'sending')?.seq ?? null
        this.done.set(workspaceId, unsettled === null ? last : unsettled - 1)
        after = last
      }
      if (end < rows.length || rows.length < this.slice) return total
      await nextTurn()
    }
  }
}
