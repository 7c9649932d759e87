/** The WebP shape reader the Cloud API driver uses to tell a sticker from a photo. */
import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { isSticker, webpShape } from '../src/network/webp'
import * as files from './support/files'

setDefaultTimeout(10_000)

/** A RIFF/WEBP file whose first chunk is `fourcc` with `payload`. */
const riff = (fourcc: string, payload: number[]) => {
  const out = Buffer.alloc(20 + Math.max(payload.length, 12))
  out.write('RIFF', 0, 'ascii')
  out.writeUInt32LE(out.length - 8, 4)
  out.write(`WEBP${fourcc}`, 8, 'ascii')
  out.writeUInt32LE(payload.length, 16)
  Buffer.from(payload).copy(out, 20)
  return out
}

describe('webpShape', () => {
  test('lossy (VP8): the 14-bit width and height after the start code', () => {
    // frame tag, start code 9D 01 2A, width 512 and height 384 (little-endian, scale bits 0)
    expect(webpShape(riff('VP8 ', [0x30, 0x01, 0x00, 0x9d, 0x01, 0x2a, 0x00, 0x02, 0x80, 0x01]))).toEqual({ width: 512, height: 384, animated: false })
    expect(webpShape(riff('VP8 ', [0x30, 0x01, 0x00, 0x9d, 0x01, 0x2b, 0x00, 0x02, 0x80, 0x01]))).toBeNull()
  })

  test('lossless (VP8L): width-1 and height-1 packed after the signature', () => {
    const bits = (512 - 1) | ((512 - 1) << 14)
    expect(webpShape(riff('VP8L', [0x2f, bits & 255, (bits >> 8) & 255, (bits >> 16) & 255, (bits >>> 24) & 255]))).toEqual({ width: 512, height: 512, animated: false })
  })

  test('extended (VP8X): canvas size and the animation flag', () => {
    expect(webpShape(files.webp(512, 512, { animated: true }))).toEqual({ width: 512, height: 512, animated: true })
    expect(webpShape(files.webp(1600, 1200))).toEqual({ width: 1600, height: 1200, animated: false })
  })

  test('anything else has no shape', () => {
    expect(webpShape(files.png())).toBeNull()
    expect(webpShape(new Uint8Array(10))).toBeNull()
    expect(webpShape(riff('ALPH', [1, 2, 3]))).toBeNull()
  })

  test('a sticker is 512×512 and at most 100 KB, or 500 KB animated', () => {
    const still = webpShape(files.webp(512, 512))
    const moving = webpShape(files.webp(512, 512, { animated: true }))
    expect([isSticker(still, 100 * 1024), isSticker(still, 100 * 1024 + 1), isSticker(moving, 500 * 1024), isSticker(moving, 500 * 1024 + 1)]).toEqual([true, false, true, false])
    expect(isSticker(webpShape(files.webp(512, 511)), 1000)).toBe(false)
    expect(isSticker(null, 1000)).toBe(false)
  })
})
