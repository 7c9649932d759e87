/**
 * The test suite itself. Tests talk to real servers and wait on real clocks (rate windows, pacing
 * gaps), so each file raises Bun's 5 s default timeout for its own tests: a setDefaultTimeout in a
 * preload applies only to the first file of a run, which passed on one machine and timed out on a
 * slower one.
 */
import { expect, setDefaultTimeout, test } from 'bun:test'
import { readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'

setDefaultTimeout(60_000)

test('every test file sets its own default timeout, before its tests', () => {
  const files = readdirSync(import.meta.dir).filter((f) => f.endsWith('.test.ts'))
  expect(files.length).toBeGreaterThan(20)
  const without = files.filter((f) => {
    const text = readFileSync(join(import.meta.dir, f), 'utf8')
    const set = text.search(/^setDefaultTimeout\(\d[\d_]*\)$/m)
    const first = text.search(/^(describe|test)\(/m)
    return set < 0 || (first >= 0 && first < set)
  })
  expect(without).toEqual([])
})
