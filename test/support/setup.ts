// Tests talk to real servers and wait on real clocks (rate windows, pacing gaps).
import { setDefaultTimeout } from 'bun:test'

setDefaultTimeout(60_000)
