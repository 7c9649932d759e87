/**
 * Work that runs one at a time and reads everything afresh each run (a pacer tick, a webhook
 * pass, telling a number's holder): asked for while it runs, it runs once more right after — once,
 * however often it was asked meanwhile, as that run sees whatever the asks were about.
 */
export class OneAtATime {
  /** null: idle; false: running; true: running, and to run once more after */
  private state: boolean | null = null

  constructor(private readonly work: () => Promise<void>) {}

  /** Whether a run is under way. */
  get running() {
    return this.state !== null
  }

  ask() {
    if (this.state !== null) {
      this.state = true
      return
    }
    this.state = false
    void this.work().finally(() => {
      const again = this.state
      this.state = null
      if (again) this.ask()
    })
  }
}

/** `OneAtATime` for each key apart: one run at a time per key, runs of different keys side by side. */
export class OneAtATimeEach<K> {
  private readonly states = new Map<K, boolean>()

  constructor(private readonly work: (key: K) => Promise<void>) {}

  ask(key: K) {
    if (this.states.has(key)) {
      this.states.set(key, true)
      return
    }
    this.states.set(key, false)
    void this.work(key).finally(() => {
      const again = this.states.get(key)
      this.states.delete(key)
      if (again) this.ask(key)
    })
  }
}
