/** Contacts' last activity written behind (src/modules/contacts/activity.ts): what a write that fails keeps, what is shown meanwhile. */
import { expect, setDefaultTimeout, test } from 'bun:test'
import { FLUSH_MS, PendingActivity } from '../src/modules/contacts/activity'

setDefaultTimeout(10_000)

/** A PendingActivity whose writes are recorded, and fail while `failing` is set (the database away). */
function recorded() {
  const writes: [string, number][][] = []
  const errors: unknown[] = []
  const state = { failing: false, busy: false, hold: null as Promise<void> | null }
  const activity = new PendingActivity(
    async (touches) => {
      if (state.hold) await state.hold
      if (state.failing) throw new Error('the database is away')
      if (state.busy) return false
      writes.push(touches)
      return true
    },
    (e) => errors.push(e),
  )
  return { activity, writes, errors, state }
}

test('touches wait a moment and go in one write, each contact with its newest time; nothing is written when nothing waits', async () => {
  const { activity, writes } = recorded()
  activity.add('a', 2000)
  activity.add('b', 1000)
  activity.add('a', 1500)
  expect([activity.of('a'), activity.of('b'), activity.of('c')]).toEqual([2000, 1000, 0])
  expect(writes).toEqual([])
  await Bun.sleep(FLUSH_MS + 100)
  expect(writes).toEqual([[['a', 2000], ['b', 1000]]])
  expect(activity.of('a')).toBe(0)
  await activity.flush()
  expect(writes).toHaveLength(1)
})

test('a write that fails keeps its times (shown, and written with newer ones once the database is back); a write under way still shows its own', async () => {
  const { activity, writes, errors, state } = recorded()
  state.failing = true
  activity.add('a', 1000)
  activity.add('b', 1000)
  await expect(activity.flush()).rejects.toThrow('the database is away')
  expect([activity.of('a'), activity.of('b')]).toEqual([1000, 1000])
  activity.add('a', 3000)
  await Bun.sleep(FLUSH_MS + 100)
  // the timer's write failed too: told, and tried again a second later
  expect(errors.length).toBe(1)
  expect(activity.of('a')).toBe(3000)
  state.failing = false
  let release = () => {}
  state.hold = new Promise<void>((r) => (release = r))
  const under = activity.flush()
  await Bun.sleep(10)
  expect([activity.of('a'), activity.of('b')]).toEqual([3000, 1000])
  state.hold = null
  release()
  await under
  expect(writes).toEqual([[['a', 3000], ['b', 1000]]])
  await Bun.sleep(1200)
  expect(writes).toHaveLength(1)
})

test('once stopped, only flush writes', async () => {
  const { activity, writes } = recorded()
  activity.add('a', 1000)
  activity.stop()
  activity.add('b', 2000)
  await Bun.sleep(FLUSH_MS + 100)
  expect(writes).toEqual([])
  await activity.flush()
  expect(writes).toEqual([[['a', 1000], ['b', 2000]]])
})

test('while another instance writes its own, the touches wait for the next write, with no error', async () => {
  const { activity, writes, errors, state } = recorded()
  state.busy = true
  activity.add('a', 1000)
  await activity.flush()
  expect([writes, errors, activity.of('a')]).toEqual([[], [], 1000])
  state.busy = false
  await Bun.sleep(FLUSH_MS + 100)
  expect([writes, errors, activity.of('a')]).toEqual([[[['a', 1000]]], [], 0])
})
