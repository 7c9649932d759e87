/**
 * Media benchmark: upload throughput (MB/s) for 1 MiB and 10 MiB files against piping the same
 * bytes to clamd directly (clamdscan --stream) in the same run, and the server's peak RSS during
 * ten concurrent 10 MiB uploads (target: <= 2x the bytes in flight above the idle RSS).
 * Needs clamav-daemon (clamd, clamdscan). Run: bun bench/media.ts
 */
import { readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { TestClamd } from '../test/support/clamd'
import { startCapstan } from './support'

const MiB = 1024 * 1024

/** A valid PDF of `size` bytes with random-looking content (so dedupe does not apply). */
function pdfOf(size: number, seed: number) {
  const b = Buffer.alloc(size)
  b.write('%PDF-1.4\n')
  let x = seed * 2654435761
  for (let i = 9; i < size; i++) {
    x = (x * 1103515245 + 12345) >>> 0
    b[i] = 0x20 + (x >>> 24) % 90
  }
  return b
}

function rssKiB(pid: number) {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))
  return m ? Number(m[1]) : 0
}

const clamd = await TestClamd.start()
const cap = await startCapstan({ CAPSTAN_CLAMD: `unix:${clamd.socket}` })
const conf = join(clamd.dir, 'clamd.conf')
try {
  const ws = (await cap.admin('POST', '/workspaces', { name: 'Media bench' })).data
  await cap.admin('PATCH', `/workspaces/${ws.id}`, { settings: { media: { retention_days: 1, max_bytes: 32 * MiB } } })
  const key = (await cap.admin('POST', `/workspaces/${ws.id}/keys`, { name: 'k' })).data.key
  const upload = async (bytes: Buffer) => {
    const fd = new FormData()
    fd.set('file', new File([bytes], 'doc.pdf'))
    const r = await fetch(`${cap.base}/api/v1/media`, { method: 'POST', headers: { authorization: `Bearer ${key}` }, body: fd })
    if (r.status !== 201) throw new Error(`upload ${r.status}: ${await r.text()}`)
  }
  console.log('\n| file size | clamdscan --stream (same bytes) | POST /api/v1/media (sequential) | ratio |\n|---|---|---|---|')
  for (const size of [1 * MiB, 10 * MiB]) {
    const n = size === MiB ? 30 : 8
    const samples = Array.from({ length: n }, (_, i) => pdfOf(size, i + 1 + size))
    // baseline: the same bytes piped to clamd by its own client
    const path = join(tmpdir(), `bench-${size}.pdf`)
    let t = performance.now()
    for (const s of samples) {
      writeFileSync(path, s)
      const p = Bun.spawnSync(['clamdscan', `--config-file=${conf}`, '--stream', '--no-summary', path])
      if (p.exitCode !== 0) throw new Error(`clamdscan failed: ${p.stdout.toString()}${p.stderr.toString()}`)
    }
    const base = (n * size) / MiB / ((performance.now() - t) / 1000)
    rmSync(path, { force: true })
    t = performance.now()
    for (const s of samples) await upload(s)
    const ours = (n * size) / MiB / ((performance.now() - t) / 1000)
    console.log(`| ${size / MiB} MiB | ${base.toFixed(1)} MB/s | ${ours.toFixed(1)} MB/s | ${((ours / base) * 100).toFixed(0)}% |`)
  }
  // memory: ten concurrent 10 MiB uploads
  await Bun.sleep(500)
  Bun.gc?.(true)
  const idle = rssKiB(cap.proc.pid)
  let peak = idle
  const watch = setInterval(() => (peak = Math.max(peak, rssKiB(cap.proc.pid))), 5)
  await Promise.all(Array.from({ length: 10 }, (_, i) => upload(pdfOf(10 * MiB, 100 + i))))
  clearInterval(watch)
  const inFlight = 100 * MiB
  console.log(`\nten concurrent 10 MiB uploads: idle RSS ${(idle / 1024).toFixed(0)} MiB, peak ${(peak / 1024).toFixed(0)} MiB, growth ${((peak - idle) / 1024).toFixed(0)} MiB = ${(((peak - idle) * 1024) / inFlight).toFixed(2)}x the ${inFlight / MiB} MiB in flight`)
} finally {
  await cap.stop()
  await clamd.stop()
}
process.exit(0)
