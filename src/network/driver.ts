/**
 * The messaging network behind a connection. One file per network implements `DriverFactory`;
 * the core never knows which network it talks to. A driver reports what happens later (receipts,
 * inbound messages) through the `DriverEvents` it is given.
 */
import type { Engine } from '../db/engine'

export interface OutboundMedia {
  id: string
  mimeType: string
  filename: string
  /** Its size in bytes. */
  size: number
  /** The stored bytes, or only the first `length` (read only when the driver needs them). */
  bytes(length?: number): Promise<Uint8Array>
}

/**
 * A template the network has approved, sent in its place where the network needs one (WhatsApp's
 * Cloud API outside the 24-hour customer service window). `body` is then its rendered text.
 */
export interface NetworkTemplate {
  name: string
  language: string
  /** The template body's parameters, in order ({{1}}, {{2}}, ...). */
  parameters: string[]
  /** The value of the template's text header variable, where its header is text with one. */
  headerText?: string
  /** The variable part of the template's URL buttons, by button position (0-based). */
  urlButtons?: { index: number; text: string }[]
  /** A template with named parameters: the name of each body parameter, in order. */
  parameterNames?: string[]
  /** ... and of its text header's variable. */
  headerParameterName?: string
}

/**
 * A template as the network holds it, read to create Capstan templates from (admin import).
 * `body` keeps the network's numbered variables ({{1}}, {{2}}, ...).
 */
export interface NetworkTemplateDefinition {
  name: string
  language: string
  category: 'utility' | 'marketing'
  body: string
  /** Its header is text with one variable, given per message. */
  headerVariable: boolean
  /** Positions (from 0) of its URL buttons whose URL ends in a variable. */
  urlButtons: number[]
  /** A template with named parameters: the body's names, for its {{1}}, {{2}}, ... in order. */
  parameterNames?: string[]
  /** ... and its text header variable's name. */
  headerParameterName?: string
  /** Its header is media of this kind, a file given per message. */
  headerMedia?: 'image' | 'video' | 'document'
  /** Why it cannot be sent from Capstan (not approved, a part Capstan cannot fill); null when it can. */
  unusable: string | null
}

/**
 * What an attachment can be in a template's header, where a network's templates take one (a
 * WhatsApp template's media header: an image, a video or a document); null for media that cannot
 * head a template (audio, stickers).
 */
export function templateHeaderKind(mimeType: string): 'image' | 'video' | 'document' | null {
  if (mimeType === 'image/jpeg' || mimeType === 'image/png') return 'image'
  if (mimeType.startsWith('video/')) return 'video'
  if (mimeType.startsWith('application/') || mimeType === 'text/plain') return 'document'
  return null
}

export interface OutboundMessage {
  id: string
  recipient: string | null
  /** The network's id of the group, for group messages. */
  groupExternalId: string | null
  body: string | null
  attachments: OutboundMedia[]
  /**
   * Send this template instead of free-form text, where the network has templates. A message
   * with a template has at most one attachment, its header (see `templateHeaderKind`).
   */
  template: NetworkTemplate | null
}

export interface GroupInfo {
  externalId: string
  name: string
  /** Counted when the list is read; the numbers themselves are never kept. */
  participantCount: number
  announce: boolean
  isAdmin: boolean
}

/**
 * A send the network refused. `retryable` sends are tried again later; others fail the message.
 * `throttled`: the network asked this number to slow down (its pacing is slowed as well).
 */
export class DriverError extends Error {
  constructor(
    readonly code: string,
    message: string,
    readonly retryable = false,
    readonly throttled = false,
  ) {
    super(message)
  }
}

/**
 * A send whose outcome is unknown: the request reached the network but its answer was lost (the
 * connection broke). The message is never sent again; the core asks the driver whether the
 * network has it (`confirmLater`) before failing it with this code.
 */
export class UnconfirmedSend extends DriverError {}

/**
 * The network refused the message's template itself — unknown, paused, disabled, or not matching
 * what was sent — so every message with that template would be refused the same way (a campaign
 * sending it pauses instead of failing recipient after recipient).
 */
export class TemplateRefused extends DriverError {}

/**
 * The network asked to slow down sending to this one recipient (too many messages to the same
 * person in a short time): the message is retried later, and other messages to that recipient
 * wait with it, while the number's other recipients are not held up.
 */
export class RecipientThrottled extends DriverError {}

/** `confirmLater`'s answer when the server stops before the network told: the message is settled at the next start. */
export const STOPPED = 'stopped'

export type ReceiptStatus = 'delivered' | 'read' | 'failed'

export interface DriverEvents {
  /** The network reports a later state of a message it accepted. */
  receipt(connectionId: string, messageId: string, status: ReceiptStatus, error?: { code: string; message: string }): void
  /** Someone wrote to the number. */
  inbound(connectionId: string, from: string, body: string): void
  /**
   * The network refused a send because the person stopped marketing messages: their marketing
   * consent is withdrawn (`source` goes to the consent ledger).
   */
  marketingStopped(connectionId: string, phone: string, source: string): void
}

/** What the network said when it accepted a message. */
export interface Accepted {
  /** Its id for the message (its first part's, when it took several). */
  externalId: string
  /** Its ids for the message's later parts. */
  partIds?: string[]
  /**
   * The recipient's address as the network knows it (WhatsApp's wa_id, as E.164), which can
   * differ from the number sent to: the network's messages from there are the recipient's.
   */
  recipientAddress?: string
}

export interface ConnectionDriver {
  /**
   * Hand one message to the network; resolves with what the network said once it accepted it
   * (see Accepted). `signal` aborts when the core stops waiting (the message is then failed, never
   * resent).
   */
  send(message: OutboundMessage, signal?: AbortSignal): Promise<Accepted>
  /** Ask whether a send interrupted by a crash reached the network (null: cannot tell). */
  confirm(messageId: string): Promise<{ externalId: string } | null>
  /**
   * For networks that report on a send later (not when asked): wait for the network to say it has
   * a message whose outcome is unknown — a timeout, a lost answer, a crash mid-send. Resolves with
   * its id, null when the network said nothing within the driver's wait, or STOPPED when the
   * driver is closed first. Optional.
   */
  confirmLater?(messageId: string): Promise<{ externalId: string } | null | typeof STOPPED>
  /**
   * The network named one of our sends still under way, by its id there (`externalId`), before
   * the send's own answer (or instead of a lost one): a `confirmLater` waiting for it, here, takes
   * it. Called on every instance (ConnectionService.reportedSend); optional, with confirmLater.
   */
  reportedSend?(messageId: string, externalId: string): void
  /**
   * A network where a free-form message reaches a person only within this long (ms) of their
   * last message to the number (WhatsApp's customer-service window); after it, only a network
   * template. Absent: no such window.
   */
  readonly serviceWindowMs?: number
  /**
   * The largest file of this type the network takes (bytes), and what it calls such files
   * ("images"); null or absent: no limit but the workspace's own.
   */
  mediaLimit?(mimeType: string): { bytes: number; what: string } | null
  /**
   * This instance now sends for the number (at its start, or taken over from a dead instance):
   * the reports the driver itself would still make on its sends (delivered, read), whose timers
   * went with the process that set them. `awaiting(since)` reads the sends since then still
   * without their last report. For networks whose reports come from the driver (the sandbox); a
   * real network reports through its webhooks, to any instance. Optional.
   */
  resumeReports?(awaiting: (since: number) => Promise<AwaitingReport[]>): Promise<void>
  /** The groups the number belongs to, or null when this network cannot report groups. */
  listGroups(): Promise<GroupInfo[] | null>
  /** Apply a new driver config (admin PATCH). */
  configure(config: Record<string, unknown>): void
  /**
   * The message templates the number's account holds on the network, for importing; throws a
   * DriverError when they cannot be read. Absent for networks without templates.
   */
  templates?(): Promise<NetworkTemplateDefinition[]>
  /** Check the number with the network: online, or offline with a reason. Optional. */
  probe?(): Promise<{ online: boolean; reason: string | null }>
  /** Stop timers; the connection was removed or the server stops. */
  close(): void
  /** The connection was removed for good (after `close`): delete what the driver keeps on disk. */
  discard?(): unknown
  /** A contact with this number was erased: remove the number, and what was sent to it, from what the driver keeps on disk. */
  forget?(number: string): unknown
  /** Message content retention: drop the texts of sends accepted before this time (ms) from what the driver keeps on disk; how many. */
  forgetContent?(before: number): Promise<number>
}

/** A one-to-one send still without its last report: sent (not yet delivered) or delivered (not yet read). */
export interface AwaitingReport {
  id: string
  status: 'sent' | 'delivered'
  /** When it was sent (ms). */
  sentAt: number
}

export interface DriverContext {
  connectionId: string
  phone: string
  config: Record<string, unknown>
  /** Whether the number is online right now (the core keeps this). */
  online: () => boolean
  /** The driver learned the number went offline (or back online), with the reason. */
  reportStatus: (status: 'online' | 'offline', reason: string | null) => void
  events: DriverEvents
  log: { warn(msg: string, fields?: Record<string, unknown>): void }
  /** CAPSTAN_DATA_DIR, for drivers that keep state on disk (the sandbox's record of sends). */
  dataDir: string
  /** The database (the sandbox keeps its record there when several instances share it: Engine.shared). */
  engine: Engine
  /** The core's clock (ms): what a driver records times with, so retention compares like with like. */
  now: () => number
}

export interface DriverFactory {
  readonly name: string
  /**
   * Validate and normalise a config object (merged over `previous` on PATCH); returns field
   * errors keyed by config.<field>.
   */
  checkConfig(config: unknown, previous?: Record<string, unknown>): { config: Record<string, unknown> } | { errors: Record<string, string[]> }
  /** Config fields that are secrets: stored encrypted, never returned or logged. */
  readonly secretFields?: readonly string[]
  /**
   * The id the network knows the number by, from a checked config (the Cloud API's
   * phone_number_id): one connection per id, as the network's events are routed by it.
   */
  networkId?(config: Record<string, unknown>): string | null
  create(ctx: DriverContext): ConnectionDriver
}
