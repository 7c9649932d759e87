/**
 * Importing contacts from a CSV file, in-process over a real SQLite file: checking the file (one
 * step, before anything is written), then the upserts in slices of 1,000 — how long each takes,
 * and the longest the event loop was held meanwhile (what every other request waited); then
 * every contact back out as CSV.
 * Run: bun bench/contact-import.ts [rows = 100000]
 */
import { csvRows } from '../src/http/bulk'
import { contactRows } from '../src/modules/contacts/import'
import { benchServices, rssMiB, timedHold } from './support'

const N = Number(process.argv[2] ?? 100_000)

const { db, svc, close } = await benchServices('import-bench')
const ws = await svc.workspaces.create({ name: 'Bench' })
const lines = ['phone,name,consent_status,metadata.plan,metadata.city']
for (let i = 0; i < N; i++) lines.push(`+1557${String(i).padStart(8, '0')},"Customer ${i}",${i % 10 === 9 ? '' : 'opted_in'},${i % 2 ? 'pro' : 'free'},City ${i % 100}`)
const csv = lines.join('\n')
console.log(`\nContact import: ${N.toLocaleString('en-US')} rows, ${(csv.length / 1048576).toFixed(1)} MiB of CSV; ${navigator.hardwareConcurrency} cores, Bun ${Bun.version}\n`)
console.log('| step | took | longest hold | RSS after |\n|---|---|---|---|')
for (const pass of ['new contacts', 'the same file again (all updates)']) {
  Bun.gc(true)
  const check = await timedHold(async () => csvRows(csv, contactRows(null)))
  const write = await timedHold(() => svc.contactImport.run(ws.id, check.result))
  console.log(`| ${pass}: check the file | ${check.ms.toFixed(0)} ms | ${check.heldMs.toFixed(0)} ms | |`)
  console.log(`| ${pass}: write (${JSON.stringify(write.result)}) | ${write.ms.toFixed(0)} ms | ${write.heldMs.toFixed(0)} ms | ${rssMiB().toFixed(0)} MiB |`)
}
// and back out: every contact as CSV (two walks, streamed)
const out = await timedHold(async () => new Response(await svc.contactList.export(ws.id)).text())
console.log(`| every contact as CSV (${(out.result.length / 1048576).toFixed(1)} MiB) | ${out.ms.toFixed(0)} ms | ${out.heldMs.toFixed(0)} ms | ${rssMiB().toFixed(0)} MiB |`)
close()
process.exit(0)
