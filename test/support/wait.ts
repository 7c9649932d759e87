/** Poll `fn` until it returns something truthy (returned) or `ms` pass (throws). */
export async function waitFor<T>(fn: () => T | null | undefined | false | Promise<T | null | undefined | false>, ms = 15_000): Promise<T> {
  const end = Date.now() + ms
  for (;;) {
    const v = await fn()
    if (v) return v
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms`)
    await Bun.sleep(50)
  }
}
