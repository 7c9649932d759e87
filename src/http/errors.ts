/**
 * Typed errors and the one mapper that turns them — and Elysia's own PARSE / NOT_FOUND /
 * VALIDATION codes — into the contract's JSON error body `{message, code, errors?}`.
 * Messages are fixed texts: no error ever echoes a submitted value, a bearer, a stack or SQL.
 */
import { databaseAway } from '../db/engine'
import { MediaStoreUnavailable } from '../modules/media/store'

export type FieldErrors = Record<string, string[]>

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly errors?: FieldErrors,
  ) {
    super(message)
  }

  toBody(): Record<string, unknown> {
    return this.errors ? { message: this.message, code: this.code, errors: this.errors } : { message: this.message, code: this.code }
  }
}

export const MESSAGES = {
  badRequest: 'Request could not be read.',
  unauthenticated: 'A valid API bearer token is required.',
  adminUnauthenticated: 'A valid admin token is required.',
  workspaceUnavailable: 'The API key workspace is unavailable.',
  insufficientScope: 'The API key does not have the required scope.',
  validation: 'The given data was invalid.',
  rateLimited: 'The API key rate limit has been reached.',
  authRateLimited: 'Too many invalid API bearer attempts.',
  payloadTooLarge: 'The request body is too large.',
  internal: 'Something went wrong on our side. Please try again.',
} as const

export const badRequest = () => new ApiError(400, 'bad_request', MESSAGES.badRequest)
export const unauthenticated = () => new ApiError(401, 'unauthenticated', MESSAGES.unauthenticated)
export const adminUnauthenticated = () => new ApiError(401, 'unauthenticated', MESSAGES.adminUnauthenticated)
export const workspaceUnavailable = () => new ApiError(403, 'workspace_unavailable', MESSAGES.workspaceUnavailable)
export const insufficientScope = () => new ApiError(403, 'insufficient_scope', MESSAGES.insufficientScope)
export const rateLimited = () => new ApiError(429, 'rate_limited', MESSAGES.rateLimited)
export const authRateLimited = () => new ApiError(429, 'auth_rate_limited', MESSAGES.authRateLimited)
export const payloadTooLarge = () => new ApiError(413, 'payload_too_large', MESSAGES.payloadTooLarge)
export const validationFailed = (errors: FieldErrors) => new ApiError(422, 'validation_failed', MESSAGES.validation, errors)

/** 507: the data directory's disk is full; the write was rolled back. */
export const storageFull = () => new ApiError(507, 'storage_full', "The server's disk is full; nothing was stored.")

/** SQLite's "database or disk is full". */
export const diskFull = (error: unknown) => (error as { code?: unknown } | null)?.code === 'SQLITE_FULL'

/** 503: the database (PostgreSQL) cannot be reached or is failing over; nothing was stored. */
export const databaseUnavailable = () => new ApiError(503, 'database_unavailable', 'The database cannot be reached right now; nothing was stored. Try again shortly.')

/** 503: the media store (a bucket) cannot be reached; nothing was stored. */
export const mediaStoreUnavailable = () => new ApiError(503, 'media_store_unavailable', 'The media store cannot be reached right now; nothing was stored. Try again shortly.')

/** 404 naming what was not found: "The connection was not found." */
export const notFound = (what: string) => new ApiError(404, 'not_found', `The ${what} was not found.`)

/** 409 for a state conflict, with a fixed message. */
export const conflict = (code: string, message: string) => new ApiError(409, code, message)

/** 422 refusal of a send or upload (recipient_opted_out, connection_offline, ...). */
export const refused = (code: string, message: string) => new ApiError(422, code, message)

/** Map anything thrown to {status, body}. Unknown errors become a 500 without details. */
export function toErrorResponse(error: unknown, elysiaCode?: string | number): { status: number; body: Record<string, unknown> } {
  if (error instanceof ApiError) return { status: error.status, body: error.toBody() }
  // what the body-parsing step throws (the 413) reaches us wrapped in Elysia's PARSE error
  const cause = (error as { cause?: unknown } | null)?.cause
  if (cause instanceof ApiError) return { status: cause.status, body: cause.toBody() }
  // so does a storage failure met on the way (the per-key count is taken before the body is read)
  const failed = (elysiaCode === 'PARSE' && storageFailure(cause)) || storageFailure(error)
  if (failed) return failed
  switch (elysiaCode) {
    case 'NOT_FOUND':
      return { status: 404, body: { message: 'The route was not found.', code: 'not_found' } }
    case 'PARSE':
    case 'INVALID_COOKIE_SIGNATURE':
      return { status: 400, body: { message: MESSAGES.badRequest, code: 'bad_request' } }
    case 'VALIDATION':
      return { status: 422, body: { message: MESSAGES.validation, code: 'validation_failed', errors: { request: ['The request is not valid.'] } } }
  }
  const status = (error as { status?: unknown })?.status
  if (status === 413) return { status: 413, body: payloadTooLarge().toBody() }
  return { status: 500, body: { message: MESSAGES.internal, code: 'internal_error' } }
}

/** Where data is kept could not be used for a moment, and the request changed nothing: its answer; null for anything else. */
function storageFailure(error: unknown): { status: number; body: Record<string, unknown> } | null {
  // SQLite could not write (its transaction rolled back)
  if (diskFull(error)) return { status: 507, body: storageFull().toBody() }
  if (databaseAway(error)) return { status: 503, body: databaseUnavailable().toBody() }
  if (error instanceof MediaStoreUnavailable) return { status: 503, body: mediaStoreUnavailable().toBody() }
  return null
}
