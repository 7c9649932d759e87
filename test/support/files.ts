/** Small valid files of the supported types, built in code (nothing downloaded). */
import { deflateSync } from 'node:zlib'

function crc32(buf: Uint8Array) {
  let c = ~0
  for (const b of buf) {
    c ^= b
    for (let k = 0; k < 8; k++) c = (c >>> 1) ^ (0xedb88320 & -(c & 1))
  }
  return ~c >>> 0
}

/** A 1x1 RGB PNG whose pixel depends on `seed`. */
export function png(seed = Math.floor(Math.random() * 2 ** 24)): Uint8Array {
  const chunk = (type: string, data: Uint8Array) => {
    const out = Buffer.alloc(12 + data.length)
    out.writeUInt32BE(data.length, 0)
    out.write(type, 4, 'ascii')
    Buffer.from(data).copy(out, 8)
    out.writeUInt32BE(crc32(Buffer.concat([Buffer.from(type, 'ascii'), data])), 8 + data.length)
    return out
  }
  const ihdr = Buffer.alloc(13)
  ihdr.writeUInt32BE(1, 0)
  ihdr.writeUInt32BE(1, 4)
  ihdr.set([8, 2, 0, 0, 0], 8)
  const raw = Buffer.from([0, seed & 255, (seed >> 8) & 255, (seed >> 16) & 255])
  return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', new Uint8Array())])
}

export const jpeg = () => Buffer.concat([Buffer.from([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10]), Buffer.from('JFIF\0'), Buffer.alloc(32, 7), Buffer.from([0xff, 0xd9])])
export const pdf = () => Buffer.from('%PDF-1.4\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n')
export const text = () => Buffer.from('Order 1001\nThank you for shopping with us — ¡gracias!\n')
/** An ID3v2 tag (no frames) and one MPEG-1 layer III frame header, padded. */
export const mp3 = () => Buffer.concat([Buffer.from('ID3'), Buffer.from([3, 0, 0, 0, 0, 0, 0]), Buffer.from([0xff, 0xfb, 0x90, 0x64]), Buffer.alloc(413, 0)])
/** The first page of an Ogg Opus stream: the page header, one segment, the OpusHead packet. */
export function ogg(): Uint8Array {
  const head = Buffer.concat([Buffer.from('OpusHead'), Buffer.from([1, 1, 0x38, 0x01, 0x80, 0xbb, 0, 0, 0, 0, 0])])
  const page = Buffer.concat([Buffer.from('OggS'), Buffer.from([0, 2]), Buffer.alloc(8, 0), Buffer.from([1, 0, 0, 0]), Buffer.alloc(4, 0), Buffer.alloc(4, 0), Buffer.from([1, head.length]), head])
  page.writeUInt32LE(crc32(page), 22)
  return page
}
/**
 * An extended-format WebP (a VP8X chunk: canvas `width`×`height`, animated or not) padded to
 * `size` bytes: enough for type sniffing and for reading its shape.
 */
export function webp(width: number, height: number, { animated = false, size = 200 } = {}): Uint8Array {
  const out = Buffer.alloc(Math.max(size, 30))
  out.write('RIFF', 0, 'ascii')
  out.writeUInt32LE(out.length - 8, 4)
  out.write('WEBPVP8X', 8, 'ascii')
  out.writeUInt32LE(10, 16)
  out[20] = animated ? 0x02 : 0
  out.writeUIntLE(width - 1, 24, 3)
  out.writeUIntLE(height - 1, 27, 3)
  return out
}
export const mp4 = () => Buffer.concat([Buffer.from([0, 0, 0, 0x18]), Buffer.from('ftypmp42'), Buffer.alloc(40, 0)])
/** A zip archive of `entries` (stored, not compressed), with its central directory. */
export function zip(entries: [name: string, content: string][]): Uint8Array {
  const locals: Buffer[] = []
  const centrals: Buffer[] = []
  let offset = 0
  for (const [name, content] of entries) {
    const data = Buffer.from(content)
    const nameBytes = Buffer.from(name)
    const crc = crc32(data)
    const local = Buffer.alloc(30)
    local.writeUInt32LE(0x04034b50, 0)
    local.writeUInt16LE(20, 4)
    local.writeUInt32LE(crc, 14)
    local.writeUInt32LE(data.length, 18)
    local.writeUInt32LE(data.length, 22)
    local.writeUInt16LE(nameBytes.length, 26)
    const central = Buffer.alloc(46)
    central.writeUInt32LE(0x02014b50, 0)
    central.writeUInt16LE(20, 4)
    central.writeUInt16LE(20, 6)
    central.writeUInt32LE(crc, 16)
    central.writeUInt32LE(data.length, 20)
    central.writeUInt32LE(data.length, 24)
    central.writeUInt16LE(nameBytes.length, 28)
    central.writeUInt32LE(offset, 42)
    locals.push(local, nameBytes, data)
    centrals.push(central, nameBytes)
    offset += 30 + nameBytes.length + data.length
  }
  const directory = Buffer.concat(centrals)
  const end = Buffer.alloc(22)
  end.writeUInt32LE(0x06054b50, 0)
  end.writeUInt16LE(entries.length, 8)
  end.writeUInt16LE(entries.length, 10)
  end.writeUInt32LE(directory.length, 12)
  end.writeUInt32LE(offset, 16)
  return Buffer.concat([...locals, directory, end])
}

/** An Office Open XML package: its content types name the main part. */
const ooxml = (folder: string, part: string, mainType: string) =>
  zip([
    ['[Content_Types].xml', `<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types"><Override PartName="/${folder}/${part}" ContentType="${mainType}"/></Types>`],
    [`${folder}/${part}`, '<?xml version="1.0" encoding="UTF-8"?><root/>'],
  ])
export const docx = () => ooxml('word', 'document.xml', 'application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml')
export const xlsx = () => ooxml('xl', 'workbook.xml', 'application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml')
/** A zip that merely holds a folder named word/: no Office document. */
export const zipWithWordFolder = () => zip([['notes/word/readme.md', '# not a document'], ['word/list.txt', 'apples']])
/** Text in UTF-16LE with its byte-order mark. */
export const utf16Text = () => Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('Order 1001\r\nThank you — ¡gracias!\r\n', 'utf16le')])
export const elf = () => Buffer.concat([Buffer.from([0x7f, 0x45, 0x4c, 0x46, 2, 1, 1]), Buffer.alloc(120, 0)])
export const gif = () => Buffer.concat([Buffer.from('GIF89a'), Buffer.from([1, 0, 1, 0, 0, 0, 0]), Buffer.alloc(20, 0)])
export const plainZip = () => zip([['notes/readme.md', '# notes']])
export const binary = () => Buffer.from(Array.from({ length: 200 }, (_, i) => (i * 37 + 11) % 256))
