/**
 * What an integrator writes with a client generated from /openapi.json (openapi-typescript types,
 * openapi-fetch calls), compiled with strict TypeScript and `noUncheckedIndexedAccess`: no casts,
 * no `?.` on a field the document says is always there. test/document.test.ts generates `./api`
 * from the running server's document, compiles this file against it and runs `tour`.
 */
import createClient from 'openapi-fetch'
import type { paths } from './api'

export interface Tour {
  contactId: string
  contactStatus: number
  messageId: string
  queued: string
  mediaId: string
  mediaType: string
  downloaded: string
  listed: number
  read: { id: string; state: string; errorCode: string | null; timeline: string[] }
}

/** Fails loudly with the API's own error body. */
function must<T>(data: T | undefined, error: unknown, step: string): T {
  if (data === undefined) throw new Error(`${step}: ${JSON.stringify(error)}`)
  return data
}

export async function tour(baseUrl: string, key: string, connectionId: string, phone: string): Promise<Tour> {
  const api = createClient<paths>({ baseUrl, headers: { Authorization: `Bearer ${key}` } })

  // upsert a contact
  const upsert = await api.POST('/api/v1/contacts', { body: { phone, name: 'Ada', consent_status: 'opted_in', metadata: { plan: 'pro' } } })
  const contact = must(upsert.data, upsert.error, 'upsert').data

  // send a message to it
  const sent = await api.POST('/api/v1/messages', { body: { connection_id: connectionId, contact_id: contact.id, body: `Hello ${contact.name ?? ''}` }, headers: { 'Idempotency-Key': `tour-${contact.id}` } })
  const message = must(sent.data, sent.error, 'send').data

  // upload a file, then download it
  const uploaded = await api.POST('/api/v1/media', {
    body: { file: new File(['receipt #1001'], 'receipt.txt', { type: 'text/plain' }) },
    bodySerializer(body) {
      const form = new FormData()
      form.append('file', body.file)
      return form
    },
  })
  const media = must(uploaded.data, uploaded.error, 'upload').data
  const download = await api.GET('/api/v1/media/{id}/download', { params: { path: { id: media.id } }, parseAs: 'text' })
  const bytes = must(download.data, download.error, 'download')

  // list the log, then read the message
  const list = await api.GET('/api/v1/messages', { params: { query: { direction: 'outbound', per_page: 10 } } })
  const page = must(list.data, list.error, 'list')
  const one = await api.GET('/api/v1/messages/{id}', { params: { path: { id: message.id } } })
  const read = must(one.data, one.error, 'read').data

  return {
    contactId: contact.id,
    contactStatus: upsert.response.status,
    messageId: message.id,
    queued: message.status,
    mediaId: media.id,
    mediaType: media.mime_type,
    downloaded: bytes,
    listed: page.meta.total,
    read: { id: read.id, state: read.outcome.state, errorCode: read.outcome.error === null ? null : read.outcome.error.code, timeline: read.timeline.map((t) => t.status) },
  }
}
