/**
 * Foundation benchmark: authenticated GET /api/v1/workspace and POST /api/v1/contacts against a
 * bare Bun.serve hello world, measured in turns in the same run (see `rounds` in support.ts).
 * Target: authenticated requests at >= 50% of the bare ceiling. POST /contacts is a durable write
 * (a 201 only after fsync), so it is also set beside the bare durable-insert ceiling
 * (bench/bare-insert.ts: JSON parse + one INSERT, group commit, synchronous = FULL).
 * Run: bun bench/api.ts [seconds per run = 4] [rounds = 5]
 */
import { fmt, ratio, rounds, startBare, startBareInsert, startCapstan } from './support'

const seconds = Number(process.argv[2] ?? 4)
const turns = Number(process.argv[3] ?? 5)
const connections = 50

const bare = await startBare()
const ins = await startBareInsert()
const cap = await startCapstan().catch((e) => {
  bare.stop()
  ins.stop()
  throw e
})
try {
  const ws = (await cap.admin('POST', '/workspaces', { name: 'Bench' })).data
  const key = (await cap.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'bench' })).data.key
  const contactsLua = `
local n = 0
local tid = math.random(100, 999)
request = function()
  n = n + 1
  local body = string.format('{"phone":"+1%03d%07d","name":"Bench","metadata":{"plan":"pro"}}', tid, n)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Authorization"] = "Bearer ${key}"}, body)
end`
  const insertLua = `
local n = 0
request = function()
  n = n + 1
  return wrk.format("POST", nil, {["Content-Type"] = "application/json"}, string.format('{"recipient":"+1555%07d","body":"Bench"}', n))
end`
  const [hello, insert, get, post] = await rounds(
    [
      { name: 'bare Bun.serve hello (ceiling)', url: `${bare.base}/` },
      { name: 'bare durable insert (ceiling for writes)', url: `${ins.base}/`, lua: insertLua },
      { name: 'GET /api/v1/workspace (authenticated)', url: `${cap.base}/api/v1/workspace`, headers: { authorization: `Bearer ${key}` } },
      { name: 'POST /api/v1/contacts (authenticated, durable upsert)', url: `${cap.base}/api/v1/contacts`, lua: contactsLua },
    ],
    { rounds: turns, seconds, connections },
  )
  console.log(`\nwrk -t1 -c${connections}, ${turns} rounds of ${seconds} s in turns, medians; ${navigator.hardwareConcurrency} cores, Bun ${Bun.version}\n`)
  console.log('| target | median result | of hello ceiling | of durable-insert ceiling |\n|---|---|---|---|')
  console.log(`| ${hello!.name} | ${fmt(hello!.median)} | 100% | — |`)
  console.log(`| ${insert!.name} | ${fmt(insert!.median)} | ${ratio(insert!, hello!)} | 100% |`)
  console.log(`| ${get!.name} | ${fmt(get!.median)} | ${ratio(get!, hello!)} | — |`)
  console.log(`| ${post!.name} | ${fmt(post!.median)} | ${ratio(post!, hello!)} | ${ratio(post!, insert!)} |`)
} finally {
  bare.stop()
  ins.stop()
  await cap.stop()
}
