/**
 * Checkpoints off the event loop. SQLite's automatic checkpoint copies the WAL into the database
 * file inside whichever commit crosses its threshold (every ~40 MiB, see open.ts): on the server's
 * only thread, that commit — and every request waiting behind it — took 10-20 ms longer, most of
 * POST /contacts' p99 (BENCHMARKS.md). A Worker with its own connection copies it a few times a
 * second instead (checkpointer.ts); the automatic checkpoint stays on as the fallback, so a
 * checkpointer that cannot start or stops only brings back the old pauses.
 */
import { dirname, join } from 'node:path'
import type { Logger } from '../http/log'

/**
 * Where the worker's code is: beside this file when run from source; in the compiled binary, the
 * second entry point it was built with (package.json "build"), under the entry's own directory.
 */
function checkpointerEntry(): string {
  const compiled = Bun.main.startsWith('/$bunfs/') || Bun.main.startsWith('B:\\~BUN')
  return compiled ? join(dirname(Bun.main), 'db', 'checkpointer.ts') : new URL('./checkpointer.ts', import.meta.url).href
}

export interface Checkpointer {
  stop(): Promise<void>
}

/** Start the checkpointer for the database at `path`; never throws (a failure is logged). */
export function startCheckpointer(path: string, log: Logger, everyMs = 100): Checkpointer {
  let worker: Worker
  try {
    worker = new Worker(checkpointerEntry())
  } catch (e) {
    log.warn('the WAL checkpointer could not start; checkpoints run inside writes', { error: String((e as Error)?.message ?? e) })
    return { stop: async () => {} }
  }
  worker.addEventListener('error', (e) => log.warn('the WAL checkpointer stopped; checkpoints run inside writes', { error: String(e.message) }))
  worker.postMessage({ start: { path, everyMs } })
  return {
    stop: () =>
      new Promise<void>((resolve) => {
        const done = () => {
          worker.terminate()
          resolve()
        }
        // its connection closed first; at most half a second
        const timer = setTimeout(done, 500)
        worker.addEventListener('message', (e: MessageEvent<{ stopped?: true }>) => {
          if (e.data.stopped) {
            clearTimeout(timer)
            done()
          }
        })
        worker.postMessage({ stop: true })
      }),
  }
}
