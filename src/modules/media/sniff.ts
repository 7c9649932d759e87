/**
 * The media type decided from the bytes (magic numbers), never from the client's Content-Type or
 * the file name. Supported: the types WhatsApp accepts for images, stickers, audio, video and
 * documents. Anything else is null (refused as unsupported_media).
 */
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

const starts = (b: Uint8Array, sig: number[], at = 0) => b.length >= at + sig.length && sig.every((v, i) => b[at + i] === v)
const ascii = (b: Uint8Array, at: number, len: number) => Buffer.from(b.subarray(at, at + len)).toString('latin1')

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

export function sniff(b: Uint8Array): MediaType | null {
  if (starts(b, [0xff, 0xd8, 0xff])) return 'image/jpeg'
  if (starts(b, [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])) return 'image/png'
  if (ascii(b, 0, 4) === 'RIFF' && ascii(b, 8, 4) === 'WEBP') return 'image/webp'
  if (ascii(b, 0, 5) === '%PDF-') return 'application/pdf'
  if (ascii(b, 0, 6) === '#!AMR\n' || ascii(b, 0, 9) === '#!AMR-WB\n') return 'audio/amr'
  if (ascii(b, 0, 4) === 'OggS') return 'audio/ogg'
  if (ascii(b, 4, 4) === 'ftyp') {
    const brand = ascii(b, 8, 4)
    if (brand.startsWith('3gp') || brand.startsWith('3g2')) return 'video/3gpp'
    if (brand === 'M4A ' || brand === 'M4B ') return 'audio/mp4'
    if (['isom', 'iso2', 'iso4', 'iso5', 'iso6', 'mp41', 'mp42', 'avc1', 'M4V ', 'MSNV', 'dash'].includes(brand)) return 'video/mp4'
    return null
  }
  if (ascii(b, 0, 3) === 'ID3') return 'audio/mpeg'
  // MPEG audio frame sync: 11 set bits; layer bits tell MP3 (layer III) from AAC ADTS (layer 00)
  if (b.length >= 2 && b[0] === 0xff && (b[1]! & 0xe0) === 0xe0) {
    const layer = (b[1]! >> 1) & 0x03
    if (layer === 0 && (b[1]! & 0xf6) === 0xf0) return 'audio/aac'
    if (layer !== 0) return 'audio/mpeg'
  }
  if (starts(b, [0x50, 0x4b, 0x03, 0x04])) {
    // Office Open XML: a zip whose first entries name the document part
    if (contains(b, 'word/', 64 * 1024)) return 'application/vnd.openxmlformats-officedocument.wordprocessingml.document'
    if (contains(b, 'xl/', 64 * 1024)) return 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet'
    if (contains(b, 'ppt/', 64 * 1024)) return 'application/vnd.openxmlformats-officedocument.presentationml.presentation'
    return null
  }
  if (starts(b, [0xd0, 0xcf, 0x11, 0xe0, 0xa1, 0xb1, 0x1a, 0xe1])) {
    // legacy Office (compound file): the stream names are UTF-16LE
    const u16 = (s: string) => Buffer.from(s, 'utf16le').toString('latin1')
    if (contains(b, u16('WordDocument'))) return 'application/msword'
    if (contains(b, u16('Workbook')) || contains(b, u16('Book'))) return 'application/vnd.ms-excel'
    if (contains(b, u16('PowerPoint Document'))) return 'application/vnd.ms-powerpoint'
    return null
  }
  if (isText(b)) return 'text/plain'
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
