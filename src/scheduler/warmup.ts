/**
 * Warming up a new number: networks watch how fast a number they do not know yet starts sending,
 * and a fresh number that sends its full volume at once is the one that gets restricted. While a
 * connection warms up, its daily cap rises each day in equal steps from `start_daily_cap` to the
 * workspace's daily cap, reached on day `days` (counted from `started_at`); its hourly cap never
 * exceeds that day's cap. After that the workspace's policy applies unchanged.
 */
import type { Policy } from './pacer'

const DAY = 86_400_000

export interface Warmup {
  days: number
  start_daily_cap: number
  started_at: number
}

/** Which day of its warm-up a number is on (0 first), or null once it is over (or there is none). */
export function warmupDay(w: Warmup | null, now: number): number | null {
  if (!w) return null
  const day = Math.max(0, Math.floor((now - w.started_at) / DAY))
  return day < w.days ? day : null
}

/** When a warm-up is over: the start of day `days`, from then on the workspace's policy applies. */
export const warmupEnd = (w: Warmup) => w.started_at + w.days * DAY

/** The policy a number sends under at `now`: the workspace's, with the warm-up's caps while it lasts. */
export function warmedPolicy(p: Policy, w: Warmup | null, now: number): Policy {
  const day = warmupDay(w, now)
  if (day === null) return p
  const daily = Math.min(p.daily_cap, Math.round(w!.start_daily_cap + ((p.daily_cap - w!.start_daily_cap) * day) / w!.days))
  return { ...p, daily_cap: Math.max(1, daily), hourly_cap: Math.min(p.hourly_cap, Math.max(1, daily)) }
}

/** When a number's caps next rise (its next warm-up day), or Infinity. */
export function nextWarmupStep(w: Warmup | null, now: number): number {
  const day = warmupDay(w, now)
  return day === null ? Infinity : w!.started_at + (day + 1) * DAY
}
