/**
 * Every code a message's `error.code` can hold once it has failed, with what it means. The API
 * documentation and the table in docs/sending.md come from the same list, and a test checks that the code
 * names no other (test/messages.test.ts).
 */

/** Codes Capstan itself decides. */
export const OUTCOME_CODES = {
  recipient_opted_out: 'The recipient opted out after the message was accepted and before it was sent.',
  recipient_suppressed: 'The recipient was put on the suppression list before the message was sent.',
  recipient_not_opted_in: 'A marketing message whose recipient was no longer opted in when it was to be sent.',
  outside_service_window: "A text or media message through a Cloud API number whose recipient's 24-hour service window closed while it waited (WhatsApp delivers only templates then).",
  contact_erased: 'The contact was erased while the message was queued.',
  media_unavailable: 'An attachment expired (retention) before the message was sent.',
  media_store_unavailable: 'An attachment could not be read from the media store (a bucket that could not be reached) at any of the retries.',
  expired: 'Still queued after 24 hours: the number never came back online or was held by its caps.',
  connection_removed: 'The number was removed before the message was sent.',
  connection_offline: 'The number was offline at every try, or the network rejected its credentials (the number is offline until fixed).',
  send_interrupted: 'The server stopped while the message was being handed to the network, and the network does not confirm it had it: it is never sent again blindly.',
  send_timeout: 'The network did not answer within CAPSTAN_DRIVER_TIMEOUT_MS; it is not sent again (it may have arrived).',
  send_unconfirmed: 'The connection to the Cloud API broke before it confirmed the message; it may have been sent, so it is not sent again.',
  network_unreachable: 'The Cloud API could not be reached at any of the retries.',
  network_unavailable: 'The sandbox network could not record the send (its disk full, or its database away) at any of the retries.',
  recipient_unreachable: 'The sandbox network refused the recipient (the number\'s `fail_recipients`).',
  group_admin_only: 'Only admins may post in the group, and the number is not one.',
  unsupported: 'The network cannot do this (the Cloud API cannot post into groups).',
  cloud_api_bad_response: 'The Cloud API answered without a message id.',
  delivery_failed: 'The network reported the message failed without saying why.',
  driver_error: 'The network driver failed unexpectedly (a bug: the log has the stack).',
} as const

export type OutcomeCode = keyof typeof OUTCOME_CODES

/**
 * Codes the network decides: `cloud_api_<n>` carries the Cloud API's own error code (Meta's list
 * says what each means); a sandbox receipt posted by the operator carries the code it was given.
 */
export const NETWORK_CODE_PATTERN = /^cloud_api_[0-9]+$/

/** Codes of the template import, never a message's. */
export const TEMPLATE_IMPORT_CODES = ['waba_id_missing', 'too_many_templates'] as const
