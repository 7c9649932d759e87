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
import type { MessageRow } from '../messages/store'
import type { MessageService, Refusal } from '../messages/service'
import type { PublicGroup, SyncEntry } from './model'
import type { Queries } from '../../db/engine'
import { GroupStore, type GroupRow } from './store'

export type { SyncEntry }

/** Announcement group where the number is not an admin: it may not post there. */
const adminOnly = (g: GroupRow) => g.announce === 1 && g.is_admin === 0

/** Case folding shared by stored names and search terms. */
export const fold = (s: string) => s.normalize('NFKC').toLowerCase()

export class GroupService {
  private readonly store: GroupStore

  constructor(
    private readonly deps: Deps,
    private readonly connections: ConnectionService,
    private readonly messages: MessageService,
    private readonly log: Logger,
  ) {
    this.store = new GroupStore(deps.engine)
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
        await this.deps.engine.write((tx) => this.replaceIn(tx, workspaceId, live.row.id, list))
        return { ...entry, status: 'synced', groups: list.length, error: null }
      }),
    )
  }

  /** Replace one number's mirror: ids stay stable; groups it left go, with their messages. */
  private async replaceIn(tx: Queries, workspaceId: string, connectionId: string, groups: GroupInfo[]) {
    const now = this.deps.clock.now()
    const existing = new Map((await this.store.forConnection(connectionId, tx)).map((g) => [g.external_id, g]))
    for (const g of groups) {
      const fields = { name: g.name, name_fold: fold(g.name), participant_count: g.participantCount, announce: g.announce ? 1 : 0, is_admin: g.isAdmin ? 1 : 0, synced_at: now }
      const old = existing.get(g.externalId)
      if (old) {
        await this.store.update(tx, { ...old, ...fields })
        existing.delete(g.externalId)
      } else {
        await this.store.insert(tx, { id: uuid(), workspace_id: workspaceId, connection_id: connectionId, external_id: g.externalId, created_at: now, ...fields })
      }
    }
    for (const gone of existing.values()) await this.store.remove(tx, gone.id)
  }

  async get(workspaceId: string, id: string, q?: Queries): Promise<GroupRow> {
    const row = await this.store.get(workspaceId, id, q)
    if (!row) throw notFound('group')
    return row
  }

  list(workspaceId: string, search: string | null, limit: number, offset: number) {
    return this.store.list(workspaceId, search ? fold(search) : null, limit, offset)
  }

  /**
   * Queue a text message into a group on its number's paced queue. Refused before anything is
   * written when the group is admins-only and the number is not an admin, or the number is not
   * connected; counts as one message of the allowance.
   */
  async send(workspaceId: string, groupId: string, body: string, alsoIn?: (tx: Queries, row: MessageRow) => Promise<void>): Promise<MessageRow> {
    const row = await this.deps.engine.write(async (tx) => {
      const group = await this.get(workspaceId, groupId, tx)
      if (adminOnly(group)) throw refused('group_admin_only', 'Only admins can post in this group, and the number is not an admin.')
      const live = this.connections.find(group.connection_id)
      if (!live || live.row.status !== 'online') throw refused('group_number_disconnected', 'The number that belongs to this group is not connected.')
      const now = this.deps.clock.now()
      await this.messages.checkSendable(live, workspaceId, now, tx)
      const msg = await this.messages.queueIn(tx, { id: uuid(), workspace_id: workspaceId, connection_id: live.row.id, contact_id: null, group_id: group.id, recipient: null, sender: live.row.phone, body, attachments: '[]' }, now)
      await alsoIn?.(tx, msg)
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
  async refusalAtRelease(message: MessageRow, q?: Queries): Promise<Refusal | null> {
    const group = message.group_id ? await this.store.getAny(message.group_id, q) : null
    if (group && adminOnly(group)) return { code: 'group_admin_only', message: 'The group became admins-only and the number is not an admin; the message was not sent.' }
    return null
  }

  /** The network's id of a group message's group (for the driver). */
  async externalIdOf(message: MessageRow): Promise<string | null> {
    return message.group_id ? ((await this.store.getAny(message.group_id))?.external_id ?? null) : null
  }
}
