/**
 * Counters of things that happen, since this process started (Prometheus takes a restart's reset
 * in its stride): webhook attempts by result, scans by verdict, inbound messages by network.
 */
export class EventCounters {
  readonly webhookAttempts = new Map<string, number>()
  readonly scans = new Map<string, number>()
  readonly inbound = new Map<string, number>()

  static bump(map: Map<string, number>, key: string) {
    map.set(key, (map.get(key) ?? 0) + 1)
  }
}
