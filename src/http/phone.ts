/**
 * Phone numbers: E.164 in form (`+` and 7 to 15 digits) and plausible by libphonenumber's metadata
 * (bundled with the package, no network): an assigned country calling code and a length that
 * country's numbers can have. `+280…` and `+999…` (no such country) are refused, and so is a
 * number that keeps its national trunk prefix (`+33 0612345678`: E.164 drops it). Whether a
 * number is in service is not checked — test and fictional numbers (`+1555…`) stay accepted.
 */
import { Metadata } from 'libphonenumber-js/core'
import metadata from 'libphonenumber-js/min/metadata'
import { type CountryCode, isSupportedCountry, parsePhoneNumberFromString } from 'libphonenumber-js/min'

const FORM = '^\\+[1-9][0-9]{6,14}$'

/**
 * Per country calling code (`1`, `49`, `800`), the lengths its national numbers can have — those
 * of the code's main country (the countries sharing a code share its plan), or of the
 * non-geographic plan — read once from libphonenumber's metadata. A lookup per number instead of libphonenumber's parse (~24 µs),
 * which every send and upsert would pay.
 */
const LENGTHS: Map<string, Set<number>> = (() => {
  const md = metadata as unknown as { country_calling_codes: Record<string, string[]>; nonGeographic?: Record<string, unknown> }
  const plans = new Metadata(metadata) as unknown as { selectNumberingPlan(country: string, code?: string): void; numberingPlan?: { possibleLengths(): number[] } }
  const table = new Map<string, Set<number>>()
  const add = (code: string, lengths: number[] | undefined) => {
    const set = table.get(code) ?? new Set<number>()
    for (const n of lengths ?? []) set.add(n)
    table.set(code, set)
  }
  for (const [code, countries] of Object.entries(md.country_calling_codes)) {
    // the code's main country (listed first: US for +1, RU for +7, GB for +44) sets its lengths
    const main = countries.find((c) => c !== '001')
    if (!main) continue
    plans.selectNumberingPlan(main)
    add(code, plans.numberingPlan?.possibleLengths())
  }
  for (const code of Object.keys(md.nonGeographic ?? {})) {
    plans.selectNumberingPlan('001', code)
    add(code, plans.numberingPlan?.possibleLengths())
  }
  return table
})()

/** Whether an E.164-shaped number has an assigned calling code and a national length it allows (codes are prefix-free). */
function possible(e164: string): boolean {
  for (let digits = 1; digits <= 3; digits++) {
    const lengths = LENGTHS.get(e164.slice(1, 1 + digits))
    if (lengths) return lengths.has(e164.length - 1 - digits)
  }
  return false
}

/**
 * The E.164 check as a RegExp (so schemas can use it and the API document shows its pattern):
 * `test` also asks whether the number is possible (see LENGTHS).
 */
class PhonePattern extends RegExp {
  constructor() {
    super(FORM)
  }

  override test(value: string): boolean {
    return super.test(value) && possible(value)
  }
}

export const E164 = new PhonePattern()

/** Whether `code` is an ISO 3166 country libphonenumber knows (a workspace's default country). */
export const isCountry = (code: string) => /^[A-Z]{2}$/.test(code) && isSupportedCountry(code)

/**
 * A number as a person writes it — `+49 30 1234567`, or `030 1234567` with `country` DE,
 * `(415) 555-0100` with US — in E.164 (`+49301234567`), or null when it is no possible number
 * (a national one without a country included).
 */
export function toE164(text: string, country: string | null): string | null {
  const trimmed = text.trim()
  if (E164.test(trimmed)) return trimmed
  const international = trimmed.startsWith('+')
  if (!international && (country === null || !isCountry(country))) return null
  const parsed = international ? parsePhoneNumberFromString(trimmed) : parsePhoneNumberFromString(trimmed, country as CountryCode)
  if (!parsed || !parsed.isPossible()) return null
  const e164 = parsed.number
  return E164.test(e164) ? e164 : null
}
