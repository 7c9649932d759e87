/** The request log line as bytes (src/http/log.ts): valid JSON whatever the values, nothing lost across buffer flushes. */
import { afterEach, expect, setDefaultTimeout, test } from 'bun:test'
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Logger } from '../src/http/log'

setDefaultTimeout(60_000)

let dir: string | null = null
afterEach(() => {
  if (dir) rmSync(dir, { recursive: true, force: true })
  dir = null
})

function capture(fn: (log: Logger) => void) {
  dir = mkdtempSync(join(tmpdir(), 'capstan-log-'))
  const path = join(dir, 'out.log')
  const fd = openSync(path, 'w')
  const log = new Logger('info', fd)
  fn(log)
  log.flush()
  closeSync(fd)
  return readFileSync(path, 'utf8').trim().split('\n').map((l) => JSON.parse(l))
}

test('ms is written rounded to hundredths as a JSON number; ids and nulls as JSON', () => {
  const ago = [0, 0.004, 0.006, 0.5, 1, 1.234, 12.3, 100.07, 12345.678]
  const lines = capture((log) => {
    for (const d of ago) log.request('GET', '/api/v1/workspace', 200, { start: performance.now() - d, workspaceId: 'w-1', keyId: 'k1' }, `req-${d}`)
    log.request('GET', '/healthz', 200, undefined, 'r1')
    log.request('POST', '/api/v1/contacts', 422, { start: performance.now() }, 'r2')
  })
  expect(lines).toHaveLength(ago.length + 2)
  ago.forEach((d, i) => {
    const l = lines[i]
    expect(Object.keys(l)).toEqual(['time', 'level', 'msg', 'method', 'route', 'status', 'request_id', 'ms', 'workspace_id', 'key_id'])
    expect(l).toMatchObject({ level: 'info', msg: 'request', method: 'GET', route: '/api/v1/workspace', status: 200, request_id: `req-${d}`, workspace_id: 'w-1', key_id: 'k1' })
    expect(typeof l.ms).toBe('number')
    // at least the time given (a little more may pass before the line is written), in hundredths
    expect(l.ms).toBeGreaterThanOrEqual(Math.round(d * 100) / 100)
    expect(l.ms).toBeLessThan(d + 50)
    expect(Math.round(l.ms * 100)).toBeCloseTo(l.ms * 100, 6)
    expect(new Date(l.time).toISOString()).toBe(l.time)
  })
  expect(lines[ago.length]).toMatchObject({ route: '/healthz', status: 200, request_id: 'r1', ms: null, workspace_id: null, key_id: null })
  expect(lines[ago.length + 1]).toMatchObject({ route: '/api/v1/contacts', status: 422, workspace_id: null, key_id: null })
})

test('an unknown path with quotes and non-ASCII characters stays valid JSON', () => {
  const lines = capture((log) => log.request('GET', '/x/"é"\\ü\n𝄞', 404, undefined, 'r'))
  expect(lines[0]).toMatchObject({ route: '/x/"é"\\ü\n𝄞', status: 404 })
})

test('thousands of lines across many buffer flushes arrive whole and in order', () => {
  const n = 5000
  const lines = capture((log) => {
    for (let i = 0; i < n; i++) log.request('POST', `/api/v1/route-${i % 7}`, 200 + (i % 300), { start: performance.now(), workspaceId: `ws-${i}`, keyId: 'k' }, `r-${i}`)
  })
  expect(lines).toHaveLength(n)
  expect(lines.every((l, i) => l.workspace_id === `ws-${i}` && l.status === 200 + (i % 300) && l.route === `/api/v1/route-${i % 7}` && l.request_id === `r-${i}`)).toBe(true)
})
