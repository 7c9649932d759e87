/**
 * Phone numbers: E.164 in form (`+` and 7 to 15 digits) and plausible by libphonenumber's metadata
 * (bundled with the package, no network): an assigned country calling code and a length that
 * country's numbers can have. `+280…` and `+999…` (no such country) are refused. Whether a
 * number is in service is not checked — test and fictional numbers (`+1555…`) stay accepted.
 */
import { isPossiblePhoneNumber, isSupportedCountry, parsePhoneNumberFromString, type CountryCode } from 'libphonenumber-js/min'

const FORM = '^\\+[1-9][0-9]{6,14}$'

/**
 * The E.164 check as a RegExp (so schemas can use it and the API document shows its pattern):
 * `test` also asks libphonenumber whether the number is possible.
 */
class PhonePattern extends RegExp {
  constructor() {
    super(FORM)
  }

  override test(value: string): boolean {
    return super.test(value) && isPossiblePhoneNumber(value)
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
