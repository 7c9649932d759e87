/**
 * The media type decided from the bytes (magic numbers, through the `file-type` package), never
 * from the client's Content-Type or the file name. Supported: the types WhatsApp accepts for images, stickers, audio, video and
 * documents. Anything else is null (refused as unsupported_media).
 */
import { fileTypeFromBuffer } from 'file-type'
import { clipCodePoints } from '../../http/schema'

export const SUPPORTED_TYPES = [
  'image/jpeg',
  'image/png',
  'image/webp',
  'audio/aac',
  'audio/amr',
  'audio/mpeg',
  'audio/mp4',
  'audio/ogg',
  'video/mp4',
  'video/3gpp',
  'application/pdf',
  'text/plain',
  'application/msword',
  'application/vnd.ms-excel',
  'application/vnd.ms-powerpoint',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
  'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet',
  'application/vnd.openxmlformats-officedocument.presentationml.presentation',
] as const
export type MediaType = (typeof SUPPORTED_TYPES)[number]


/** Whether `needle` (latin1) occurs in the first `limit` bytes. */
function contains(b: Uint8Array, needle: string, limit = b.length) {
  return Buffer.from(b.subarray(0, Math.min(limit, b.length))).includes(Buffer.from(needle, 'latin1'))
}

function isText(b: Uint8Array): boolean {
  if (b.length === 0) return false
  const sample = b.subarray(0, Math.min(b.length, 64 * 1024))
  for (const c of sample) {
    // NUL and control characters other than tab, newline, carriage return and form feed
    if (c === 0 || (c < 0x20 && c !== 9 && c !== 10 && c !== 13 && c !== 12) || c === 0x7f) return false
  }
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(sample.length === b.length ? b : trimPartialUtf8(sample))
    return true
  } catch {
    return false
  }
}

/** Drop a multi-byte sequence cut at the end of a sample. */
function trimPartialUtf8(b: Uint8Array) {
  let end = b.length
  for (let i = 1; i <= 3 && end - i >= 0; i++) {
    const c = b[end - i]!
    if ((c & 0xc0) === 0x80) continue
    if (c >= 0xc0) end -= i
    break
  }
  return b.subarray(0, end)
}

/** What file-type calls the types we take, where its name differs from ours. */
const FROM_FILE_TYPE: Record<string, MediaType> = {
  'audio/x-m4a': 'audio/mp4',
  'audio/x-m4b': 'audio/mp4',
  'video/x-m4v': 'video/mp4',
  'audio/opus': 'audio/ogg',
  'audio/ogg; codecs=opus': 'audio/ogg',
  'video/3gpp2': 'video/3gpp',
}

/** UTF-16 text with its byte-order mark (FF FE or FE FF): decodes whole, no control characters. */
function isUtf16Text(b: Uint8Array): boolean {
  const le = b[0] === 0xff && b[1] === 0xfe
  if (!le && !(b[0] === 0xfe && b[1] === 0xff)) return false
  const sample = b.subarray(2, 2 + Math.min(b.length - 2, 64 * 1024) - ((Math.min(b.length - 2, 64 * 1024)) % 2))
  if (sample.length === 0) return false
  let text: string
  try {
    text = new TextDecoder(le ? 'utf-16le' : 'utf-16be', { fatal: true }).decode(sample)
  } catch {
    return false
  }
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (c === 0 || (c < 0x20 && c !== 9 && c !== 10 && c !== 13 && c !== 12) || c === 0x7f) return false
  }
  return true
}

/**
 * The type of `b` from its bytes. Text first (UTF-8 without control characters, or UTF-16 with a
 * byte-order mark: FF FE would otherwise pass for an MPEG audio frame), then binary formats by
 * the `file-type` package (which reads a zip's entries and an OOXML package's content types, so a
 * zip is a .docx only when it says so), then the legacy Office compound files by their stream
 * names (file-type only says "a compound file").
 */
export async function sniff(b: Uint8Array): Promise<MediaType | null> {
  if (isUtf16Text(b)) return 'text/plain'
  const found = await fileTypeFromBuffer(b).catch(() => undefined)
  if (found) {
    if (found.mime === 'application/x-cfb') return legacyOffice(b)
    const type = FROM_FILE_TYPE[found.mime] ?? found.mime
    if ((SUPPORTED_TYPES as readonly string[]).includes(type)) return type as MediaType
    // a text format (XML, SVG, …) is still text: sent as a plain-text document
    return isText(b) ? 'text/plain' : null
  }
  if (isText(b)) return 'text/plain'
  return null
}

/** A legacy Office compound file, by the names of its streams (UTF-16LE). */
function legacyOffice(b: Uint8Array): MediaType | null {
  const u16 = (s: string) => Buffer.from(s, 'utf16le').toString('latin1')
  if (contains(b, u16('WordDocument'))) return 'application/msword'
  if (contains(b, u16('Workbook')) || contains(b, u16('Book'))) return 'application/vnd.ms-excel'
  if (contains(b, u16('PowerPoint Document'))) return 'application/vnd.ms-powerpoint'
  return null
}

/**
 * A filename safe to store and to put in Content-Disposition: at most 200 code points (cut by
 * code point: half of a surrogate pair would make the name impossible to percent-encode).
 */
export function cleanFilename(name: string | undefined, type: MediaType): string {
  const base = (name ?? '').split(/[\\/]/).pop() ?? ''
  const cleaned = clipCodePoints(
    base
      .normalize('NFC')
      .replace(/[\u0000-\u001f\u007f"\\]/g, '')
      .trim(),
    200,
  )
  return cleaned || `file.${EXTENSIONS[type]}`
}

const EXTENSIONS: Record<MediaType, string> = {
  'image/jpeg': 'jpg',
  'image/png': 'png',
  'image/webp': 'webp',
  'audio/aac': 'aac',
  'audio/amr': 'amr',
  'audio/mpeg': 'mp3',
  'audio/mp4': 'm4a',
  'audio/ogg': 'ogg',
  'video/mp4': 'mp4',
  'video/3gpp': '3gp',
  'application/pdf': 'pdf',
  'text/plain': 'txt',
  'application/msword': 'doc',
  'application/vnd.ms-excel': 'xls',
  'application/vnd.ms-powerpoint': 'ppt',
  'application/vnd.openxmlformats-officedocument.wordprocessingml.document': 'docx',
  'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet': 'xlsx',
  'application/vnd.openxmlformats-officedocument.presentationml.presentation': 'pptx',
}
