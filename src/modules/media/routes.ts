/** POST /api/v1/media, GET /api/v1/media/{id}, GET /api/v1/media/{id}/download. */
import { Elysia } from 'elysia'
import type { authPlugin } from '../../http/auth'
import { SECURITY_HEADERS } from '../../http/auth'
import { notFound } from '../../http/errors'
import { s, UUID, validate } from '../../http/schema'
import type { Services } from '../../services'
import { mediaDoc } from './model'
import type { MediaRow } from './records'
import { SUPPORTED_TYPES } from './sniff'

const uploadBody = s.object({ file: s.file().describe(`The file (multipart field "file"). Supported types, decided from the bytes: ${SUPPORTED_TYPES.join(', ')}.`) })

const DOWNLOAD_HEADERS = {
  'Content-Disposition': { schema: { type: 'string' }, description: 'attachment; filename="<ASCII name>"; filename*=UTF-8\'\'<the stored name>' },
  'Accept-Ranges': { schema: { type: 'string', const: 'bytes' } },
}

/** RFC 6266 Content-Disposition with an ASCII fallback and the UTF-8 name. */
function disposition(name: string) {
  const ascii = name.replace(/[^\x20-\x7e]/g, '_').replace(/["\\]/g, '_')
  // toWellFormed: a name stored before names were cut by code point may end in half a pair
  return `attachment; filename="${ascii}"; filename*=UTF-8''${encodeURIComponent(name.toWellFormed())}`
}

/** A stored file as a download: its bytes, type, length and name (`extra`: more headers). */
export function downloadResponse(svc: Services, row: MediaRow, range: string | null, extra: Record<string, string> = {}) {
  return svc.media.store.response(row.blob, row.size, { ...SECURITY_HEADERS, 'content-type': row.mime_type, 'content-length': String(row.size), 'content-disposition': disposition(row.filename), ...extra }, range)
}

export function mediaApiRoutes(svc: Services, auth: ReturnType<typeof authPlugin>) {
  const media = svc.media
  const find = (ws: string, id: string) => {
    if (!UUID.test(id)) throw notFound('media')
    return media.get(ws, id)
  }
  return new Elysia()
    .use(auth)
    .post(
      '/media',
      async ({ caller, body, set }) => {
        const input = validate(uploadBody, body)
        const row = await media.upload(caller.workspace.id, input.file)
        set.status = 201
        return { data: media.toPublic(row) }
      },
      {
        api: {
          summary: 'Upload media',
          description:
            'multipart/form-data with the file in field "file". The size is checked against the workspace limit (over it: 422 naming file — without the body being read when it is more than 1 MiB over), a file that would take the workspace’s kept media past its max_total_bytes is refused (422 media_quota_exceeded), the type is decided from the bytes, and the file is scanned for malware by ClamAV before it is stored; all of that completes before the response. The id is usable as media_id in a send until the media expires (workspace retention).',
          tag: 'Media',
          scope: 'messages:write',
          ok: { status: 201, data: mediaDoc, description: 'Stored.' },
          errors: [400, 413, 422, 503],
        },
        // merged into the operation the api option builds
        detail: {
          requestBody: { required: true, content: { 'multipart/form-data': { schema: uploadBody.toJsonSchema() } } },
        },
      },
    )
    .get('/media/:id', async ({ caller, params }) => ({ data: media.toPublic(await find(caller.workspace.id, params.id)) }), {
      api: { summary: 'A media record', tag: 'Media', scope: 'media:read', params: ['id'], ok: { status: 200, data: mediaDoc, description: 'The media record.' }, errors: [404] },
    })
    .get(
      '/media/:id/download',
      async ({ caller, params, set, request }) => {
        const row = await find(caller.workspace.id, params.id)
        return downloadResponse(svc, row, request.headers.get('range'), {
          'x-ratelimit-limit': String(set.headers['x-ratelimit-limit'] ?? ''),
          'x-ratelimit-remaining': String(set.headers['x-ratelimit-remaining'] ?? ''),
        })
      },
      {
        api: { summary: 'Download media', description: 'Streams the stored bytes with their type, Content-Disposition: attachment, and Content-Length — or, from media kept in an S3 bucket (CAPSTAN_MEDIA_STORE), chunked as they arrive, without one.', tag: 'Media', scope: 'media:read', params: ['id'], ok: { status: 200, binary: true, description: 'The whole file, in its own type (mime_type).', headers: DOWNLOAD_HEADERS }, alsoOk: [{ status: 206, description: 'The part a `Range: bytes=…` header asked for (Content-Range says which).', headers: { ...DOWNLOAD_HEADERS, 'Content-Range': { schema: { type: 'string' }, description: 'bytes first-last/size' } } }], errors: [404, 416, 503] },
      },
    )
}
