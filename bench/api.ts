/**
 * Foundation benchmark: authenticated GET /api/v1/workspace and POST /api/v1/contacts against a
 * bare Bun.serve hello world, all in the same run. Target: authenticated requests at >= 50% of
 * the bare ceiling. Run: bun bench/api.ts [seconds]
 */
import { fmt, startBare, startCapstan, wrk } from './support'

const seconds = Number(process.argv[2] ?? 8)
const connections = 50

const bare = await startBare()
const cap = await startCapstan().catch((e) => {
  bare.stop()
  throw e
})
try {
  const ws = (await cap.admin('POST', '/workspaces', { name: 'Bench' })).data
  const key = (await cap.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'bench' })).data.key
  const auth = { authorization: `Bearer ${key}` }

  await wrk(`${bare.base}/`, { seconds: 2, connections }) // warm-up
  const base = await wrk(`${bare.base}/`, { seconds, connections })
  await wrk(`${cap.base}/api/v1/workspace`, { seconds: 2, connections, headers: auth })
  const get = await wrk(`${cap.base}/api/v1/workspace`, { seconds, connections, headers: auth })
  const contactsLua = `
local n = 0
local tid = math.random(100, 999)
request = function()
  n = n + 1
  local body = string.format('{"phone":"+1%03d%07d","name":"Bench","metadata":{"plan":"pro"}}', tid, n)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Authorization"] = "Bearer ${key}"}, body)
end`
  const post = await wrk(`${cap.base}/api/v1/contacts`, { seconds, connections, lua: contactsLua })
  const base2 = await wrk(`${bare.base}/`, { seconds, connections })
  const ceiling = Math.max(base.rps, base2.rps)

  const rows = [
    ['bare Bun.serve hello (ceiling, best of two)', fmt(base.rps >= base2.rps ? base : base2), '100%'],
    ['GET /api/v1/workspace (authenticated)', fmt(get), `${((get.rps / ceiling) * 100).toFixed(0)}%`],
    ['POST /api/v1/contacts (authenticated, durable upsert)', fmt(post), `${((post.rps / ceiling) * 100).toFixed(0)}%`],
  ]
  console.log(`\nwrk -t1 -c${connections} -d${seconds}s on ${navigator.hardwareConcurrency} cores, Bun ${Bun.version}\n`)
  console.log('| target | result | of ceiling |\n|---|---|---|')
  for (const r of rows) console.log(`| ${r.join(' | ')} |`)
} finally {
  bare.stop()
  await cap.stop()
}
