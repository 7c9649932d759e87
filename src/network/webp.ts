/**
 * The shape of a WebP file from its first bytes (RIFF header and first chunk): its canvas size and
 * whether it is animated. WhatsApp takes a WebP only as a sticker — 512×512 pixels, at most 100 KB
 * (500 KB animated) — so the Cloud API driver sends any other WebP as a document.
 *
 * Layouts (Google's WebP container specification): "RIFF" size "WEBP", then one of
 * - "VP8 " (lossy): frame tag (3 bytes), start code 9D 01 2A, then 14-bit width and height;
 * - "VP8L" (lossless): signature 2F, then 14-bit width-1 and height-1 packed little-endian;
 * - "VP8X" (extended): flags (animation = 0x02), 3 reserved bytes, 24-bit canvas width-1 and height-1.
 */
export interface WebpShape {
  width: number
  height: number
  animated: boolean
}

export function webpShape(b: Uint8Array): WebpShape | null {
  const tag = (at: number) => String.fromCharCode(b[at]!, b[at + 1]!, b[at + 2]!, b[at + 3]!)
  if (b.length < 30 || tag(0) !== 'RIFF' || tag(8) !== 'WEBP') return null
  const u24 = (at: number) => b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16)
  switch (tag(12)) {
    case 'VP8 ':
      if (b[23] !== 0x9d || b[24] !== 0x01 || b[25] !== 0x2a) return null
      return { width: (b[26]! | (b[27]! << 8)) & 0x3fff, height: (b[28]! | (b[29]! << 8)) & 0x3fff, animated: false }
    case 'VP8L': {
      if (b[20] !== 0x2f) return null
      const bits = b[21]! | (b[22]! << 8) | (b[23]! << 16) | (b[24]! << 24)
      return { width: (bits & 0x3fff) + 1, height: ((bits >>> 14) & 0x3fff) + 1, animated: false }
    }
    case 'VP8X':
      return { width: u24(24) + 1, height: u24(27) + 1, animated: (b[20]! & 0x02) !== 0 }
    default:
      return null
  }
}

/** Whether WhatsApp takes the WebP as a sticker (see above). */
export function isSticker(shape: WebpShape | null, size: number): boolean {
  return shape !== null && shape.width === 512 && shape.height === 512 && size <= (shape.animated ? 500 : 100) * 1024
}
