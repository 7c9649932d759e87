/**
 * Groups: a mirror of what each connected number reports, and posting into a group. A sync reads
 * every number independently: an offline or failing number keeps its previous mirror and does not
 * fail the others. Participants are counted by the driver and never reach this service.
 */
import type { Deps } from '../../deps'
import { notFound, refused } from '../../http/errors'
import { iso, uuid } from '../../http/format'
import type { Logger } from '../../http/log'
import { DriverError, type GroupInfo } from '../../network/driver'
import type { ConnectionService } from '../connections/service'
import type { MessageRow } from '../messages/repo'
import type { MessageService, Refusal } from '../messages/service'
import type { PublicGroup, SyncEntry } from './model'
import { GroupRepo, type GroupRow } from './repo'

export type { SyncEntry }

/** Announcement group where the number is not an admin: it may not post there. */
const adminOnly = (g: GroupRow) => g.announce === 1 && g.is_admin === 0

/** Case folding shared by stored names and search terms. */
export const fold = (s: string) => s.normalize('NFKC').toLowerCase()

export class GroupService {
  private readonly repo: GroupRepo

  constructor(
    private readonly deps: Deps,
    private readonly connections: ConnectionService,
    private readonly messages: MessageService,
    private readonly log: Logger,
  ) {
    this.repo = new GroupRepo(deps.db)
  }

  toPublic(row: GroupRow): PublicGroup {
    const number = this.connections.find(row.connection_id)?.row.phone ?? null
    return {
      id: row.id,
      name: row.name,
      participant_count: row.participant_count,
      can_send: !adminOnly(row),
      announce: row.announce === 1,
      number,
      synced_at: iso(row.synced_at),
    }
  }

  /** Re-read every number of the workspace and replace each one's mirror. */
  async sync(workspaceId: string): Promise<SyncEntry[]> {
    const numbers = this.connections.listForWorkspace(workspaceId)
    return Promise.all(
      numbers.map(async (live): Promise<SyncEntry> => {
        const entry = { number: live.row.phone }
        let groups: GroupInfo[] | null
        try {
          groups = await live.driver.listGroups()
        } catch (e) {
          const reason = e instanceof DriverError ? e.message : 'The number could not report its groups.'
          return { ...entry, status: 'failed', groups: null, error: reason }
        }
        if (groups === null) return { ...entry, status: 'unsupported', groups: null, error: 'This network cannot report groups.' }
        const list = groups
        await this.deps.writer.write(() => this.replaceInTx(workspaceId, live.row.id, list))
        return { ...entry, status: 'synced', groups: list.length, error: null }
      }),
    )
  }

  /** Replace one number's mirror: ids stay stable; groups it left go, with their messages. */
  private replaceInTx(workspaceId: string, connectionId: string, groups: GroupInfo[]) {
    const now = this.deps.clock.now()
    const existing = new Map(this.repo.forConnection(connectionId).map((g) => [g.external_id, g]))
    for (const g of groups) {
      const fields = { name: g.name, name_fold: fold(g.name), participant_count: g.participantCount, announce: g.announce ? 1 : 0, is_admin: g.isAdmin ? 1 : 0, synced_at: now }
      const old = existing.get(g.externalId)
      if (old) {
        this.repo.update({ ...old, ...fields })
        existing.delete(g.externalId)
      } else {
        this.repo.insert({ id: uuid(), workspace_id: workspaceId, connection_id: connectionId, external_id: g.externalId, created_at: now, ...fields })
      }
    }
    for (const gone of existing.values()) this.repo.remove(gone.id)
  }

  get(workspaceId: string, id: string): GroupRow {
    const row = this.repo.get(workspaceId, id)
    if (!row) throw notFound('group')
    return row
  }

  list(workspaceId: string, search: string | null, limit: number, offset: number) {
    return this.repo.list(workspaceId, search ? fold(search) : null, limit, offset)
  }

  /**
   * Queue a text message into a group on its number's paced queue. Refused before anything is
   * written when the group is admins-only and the number is not an admin, or the number is not
   * connected; counts as one message of the allowance.
   */
  async send(workspaceId: string, groupId: string, body: string, alsoInTx?: (row: MessageRow) => void): Promise<MessageRow> {
    const row = await this.deps.writer.write(() => {
      const group = this.get(workspaceId, groupId)
      if (adminOnly(group)) throw refused('group_admin_only', 'Only admins can post in this group, and the number is not an admin.')
      const live = this.connections.find(group.connection_id)
      if (!live || live.row.status !== 'online') throw refused('group_number_disconnected', 'The number that belongs to this group is not connected.')
      const now = this.deps.clock.now()
      this.messages.checkSendable(live, workspaceId, now)
      const msg = this.messages.queueInTx({ id: uuid(), workspace_id: workspaceId, connection_id: live.row.id, contact_id: null, group_id: group.id, recipient: null, sender: live.row.phone, body, attachments: '[]' }, now)
      alsoInTx?.(msg)
      return msg
    })
    this.messages.onQueued(row.connection_id)
    return row
  }

  /**
   * At release (the pacer's lane, inside its write): a queued group message may wait hours behind
   * the caps, and a sync since may show the group turned admins-only with the number not an admin.
   * Such a message fails instead of being handed to a network that would refuse it.
   */
  refusalAtRelease(message: MessageRow): Refusal | null {
    const group = message.group_id ? this.repo.getAny(message.group_id) : null
    if (group && adminOnly(group)) return { code: 'group_admin_only', message: 'The group became admins-only and the number is not an admin; the message was not sent.' }
    return null
  }

  /** The network's id of a group message's group (for the driver). */
  externalIdOf(message: MessageRow): string | null {
    return message.group_id ? (this.repo.getAny(message.group_id)?.external_id ?? null) : null
  }
}
