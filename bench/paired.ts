/**
 * The hot paths of this checkout against another checkout (an older commit), in turns in the same
 * run: authenticated GET /api/v1/workspace and POST /api/v1/messages (50 keys, durable). Medians of
 * the rounds, and each path's ratio new/old — what BENCHMARKS.md reports for a change that touches
 * every request.
 * Run: git worktree add /tmp/capstan-base <commit> && (cd /tmp/capstan-base && bun install)
 *      bun bench/paired.ts /tmp/capstan-base [seconds per run = 5] [rounds = 7]
 */
import { resolve } from 'node:path'
import { fmt, rounds, sendLoad, startCapstan } from './support'

const baseRoot = process.argv[2]
if (!baseRoot) throw new Error('usage: bun bench/paired.ts <checkout of the baseline commit> [seconds] [rounds]')
const seconds = Number(process.argv[3] ?? 5)
const turns = Number(process.argv[4] ?? 7)

/** A server with a workspace, 50 keys and a sandbox number; the wrk loads for its two paths. */
async function prepare(label: string, root?: string) {
  const cap = await startCapstan({}, root)
  const { keys, lua: send } = await sendLoad(cap)
  return {
    cap,
    get: { name: `${label}: GET /api/v1/workspace`, url: `${cap.base}/api/v1/workspace`, headers: { authorization: `Bearer ${keys[0]}` } },
    post: { name: `${label}: POST /api/v1/messages`, url: `${cap.base}/api/v1/messages`, lua: send },
  }
}

const now = await prepare('this checkout')
const then = await prepare(`baseline (${resolve(baseRoot)})`, resolve(baseRoot))
try {
  const [getNew, getOld, postNew, postOld] = await rounds([now.get, then.get, now.post, then.post], { rounds: turns, seconds })
  console.log(`\nwrk -t1 -c50, ${turns} rounds of ${seconds} s in turns, medians; ${navigator.hardwareConcurrency} cores, Bun ${Bun.version}\n`)
  console.log('| path | this checkout | baseline | new / old |\n|---|---|---|---|')
  const pct = (a: number, b: number) => `${Math.round((a / b) * 1000) / 10}%`
  console.log(`| GET /api/v1/workspace | ${fmt(getNew!.median)} | ${fmt(getOld!.median)} | ${pct(getNew!.median.rps, getOld!.median.rps)} |`)
  console.log(`| POST /api/v1/messages | ${fmt(postNew!.median)} | ${fmt(postOld!.median)} | ${pct(postNew!.median.rps, postOld!.median.rps)} |`)
} finally {
  await now.cap.stop()
  await then.cap.stop()
}
