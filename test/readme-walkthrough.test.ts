/**
 * The README's walkthrough, run as a newcomer would run it: its sh blocks, in order, in one bash,
 * in a fresh directory that has this checkout's files (so `bun run start` starts a new Capstan
 * with empty data), with only the ports changed so that nothing else on the machine is in the way.
 * The test fails when the README drifts from the product.
 */
import { afterAll, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdtempSync, readFileSync, rmSync, symlinkSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

setDefaultTimeout(120_000)

const root = join(import.meta.dir, '..')
const dir = mkdtempSync(join(tmpdir(), 'capstan-walkthrough-'))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** The sh blocks between the walkthrough markers, in order. */
function walkthrough(readme: string): string[] {
  const start = readme.indexOf('<!-- walkthrough')
  const end = readme.indexOf('<!-- /walkthrough -->')
  expect(start).toBeGreaterThan(0)
  expect(end).toBeGreaterThan(start)
  return [...readme.slice(start, end).matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!)
}

async function freePort() {
  const s = Bun.serve({ port: 0, hostname: '127.0.0.1', fetch: () => new Response() })
  const port = s.port!
  s.stop(true)
  return port
}

test("the README's walkthrough, copied block by block, ends with a read message and three verified webhooks", async () => {
  const blocks = walkthrough(readFileSync(join(root, 'README.md'), 'utf8'))
  expect(blocks.length).toBeGreaterThanOrEqual(5)
  for (const f of ['package.json', 'bunfig.toml', 'tsconfig.json', 'src', 'migrations', 'examples', 'node_modules']) symlinkSync(join(root, f), join(dir, f))
  const [api, receiver] = [await freePort(), await freePort()]
  const script = blocks.join('\n').replaceAll('localhost:8080', `localhost:${api}`).replaceAll('localhost:4000', `localhost:${receiver}`)
  // a shell of its own process group: whatever it started is stopped with it if it fails midway
  const proc = Bun.spawn(['setsid', 'bash', '-euo', 'pipefail', '-c', script], {
    cwd: dir,
    env: { PATH: process.env.PATH!, HOME: process.env.HOME ?? dir, TMPDIR: tmpdir(), CAPSTAN_PORT: String(api), RECEIVER_PORT: String(receiver) },
    stdout: 'pipe',
    stderr: 'pipe',
  })
  const timer = setTimeout(() => proc.kill('SIGKILL'), 90_000)
  const [out, err, code] = await Promise.all([new Response(proc.stdout).text(), new Response(proc.stderr).text(), proc.exited])
  clearTimeout(timer)
  try {
    process.kill(-proc.pid, 'SIGTERM')
  } catch {}
  expect({ code, err: err.trim() }).toEqual({ code: 0, err: '' })
  // step 3 printed the policy without gaps
  expect(out).toContain('"min_gap_seconds":0,"max_gap_seconds":0')
  // step 5: the timeline, in order, and the receiver's three verified events for that message
  const timeline = [...out.matchAll(/^\["(\w+)","[^"]+"\]$/gm)].map((m) => m[1])
  expect(timeline).toEqual(['queued', 'sending', 'sent', 'delivered', 'read'])
  const verified = [...out.matchAll(/^verified (message\.\w+) ([0-9a-f-]{36}) (\w+)$/gm)]
  expect(verified.map((m) => [m[1], m[3]])).toEqual([
    ['message.sent', 'sent'],
    ['message.delivered', 'delivered'],
    ['message.read', 'read'],
  ])
  expect(new Set(verified.map((m) => m[2])).size).toBe(1)
  expect(out).not.toContain('refused')
  // Capstan kept its data in ./data of the directory it was started in, and stopped cleanly
  const log = readFileSync(join(dir, 'capstan.log'), 'utf8')
  expect(log).toContain('"msg":"capstan stopped"')
})
