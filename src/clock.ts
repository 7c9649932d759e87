/** The clock behind every timestamp and the scheduler, so tests can control time. */
export interface Clock {
  now(): number
}

export const systemClock: Clock = { now: () => Date.now() }
