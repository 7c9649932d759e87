/**
 * WAL checkpoints off the event loop: POST /api/v1/contacts against two Capstans in the same run,
 * one with the checkpointer thread (the default) and one with CAPSTAN_WAL_CHECKPOINTER=false
 * (SQLite's automatic checkpoint only, run inside whichever commit crosses ~40 MiB of WAL), in
 * turns (see `rounds` in support.ts). Each request creates a new contact with ~800 bytes of
 * metadata, so the WAL fills fast enough for several checkpoints per round.
 * Run: bun bench/checkpoint.ts [seconds per run = 5] [rounds = 4]
 */
import { statSync } from 'node:fs'
import { join } from 'node:path'
import { fmt, rounds, startCapstan } from './support'

const seconds = Number(process.argv[2] ?? 5)
const turns = Number(process.argv[3] ?? 4)

const on = await startCapstan({ CAPSTAN_KEY_RATE_LIMIT: '10000000' })
const off = await startCapstan({ CAPSTAN_KEY_RATE_LIMIT: '10000000', CAPSTAN_WAL_CHECKPOINTER: 'false' })
try {
  const keyOf = async (cap: typeof on) => {
    const ws = (await cap.admin('POST', '/workspaces', { name: 'Bench' })).data
    return (await cap.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'bench' })).data.key as string
  }
  const lua = (key: string) => `
local n = 0
local tid = math.random(100, 999)
local note = string.rep("x", 700)
request = function()
  n = n + 1
  local body = string.format('{"phone":"+1%03d%07d","name":"Bench","metadata":{"note":"%s"}}', tid, n, note)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Authorization"] = "Bearer ${key}"}, body)
end`
  const [withWorker, without] = await rounds(
    [
      { name: 'POST /contacts, checkpointer thread (default)', url: `${on.base}/api/v1/contacts`, lua: lua(await keyOf(on)) },
      { name: 'POST /contacts, CAPSTAN_WAL_CHECKPOINTER=false', url: `${off.base}/api/v1/contacts`, lua: lua(await keyOf(off)) },
    ],
    { rounds: turns, seconds, connections: 50 },
  )
  const mib = (dir: string, f: string) => (statSync(join(dir, f)).size / 1048576).toFixed(1)
  console.log(`\nwrk -t1 -c50, ${turns} rounds of ${seconds} s in turns, medians; ${navigator.hardwareConcurrency} cores, Bun ${Bun.version}\n`)
  console.log('| server | median | p99 per round | database / WAL at the end |\n|---|---|---|---|')
  for (const [r, cap] of [[withWorker!, on], [without!, off]] as const) {
    console.log(`| ${r.name} | ${fmt(r.median)} | ${r.runs.map((x) => x.p99.toFixed(1)).join(', ')} ms | ${mib(cap.dir, 'capstan.db')} / ${mib(cap.dir, 'capstan.db-wal')} MiB |`)
  }
} finally {
  await on.stop()
  await off.stop()
}
