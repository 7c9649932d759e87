/**
 * A campaign's send window (`{from: "09:00", to: "20:00", time_zone: "Europe/Berlin"}`): its
 * messages are released only while the local time in that zone is in [from, to). A window whose
 * `to` is earlier than its `from` runs over midnight (22:00–06:00). Daylight saving is the time
 * zone's own: the window follows the local clock.
 */

export interface SendWindow {
  from: string
  to: string
  time_zone: string
}

const formatters = new Map<string, Intl.DateTimeFormat>()

/** A formatter for `timeZone` (made once per zone: making one costs far more than using it), or null for an unknown zone. */
function formatter(timeZone: string): Intl.DateTimeFormat | null {
  let f = formatters.get(timeZone)
  if (!f) {
    try {
      f = new Intl.DateTimeFormat('en-US', { timeZone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' })
    } catch {
      return null
    }
    formatters.set(timeZone, f)
  }
  return f
}

/** Whether `timeZone` is an IANA time zone this runtime knows. */
export const knownTimeZone = (timeZone: string) => formatter(timeZone) !== null

const minutesOf = (hhmm: string) => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3, 5))

/** Minutes since local midnight at `now` in `timeZone`. */
function localMinutes(now: number, timeZone: string): number {
  let h = 0
  let m = 0
  for (const p of formatter(timeZone)!.formatToParts(now)) {
    if (p.type === 'hour') h = Number(p.value)
    else if (p.type === 'minute') m = Number(p.value)
  }
  return h * 60 + m
}

/** Whether a campaign with window `w` may release at `now` (no window: always). */
export function inSendWindow(w: SendWindow | null, now: number): boolean {
  if (!w) return true
  const at = localMinutes(now, w.time_zone)
  const from = minutesOf(w.from)
  const to = minutesOf(w.to)
  return from <= to ? at >= from && at < to : at >= from || at < to
}
