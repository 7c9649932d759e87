/** Certificates for tests of TLS: a CA of their own (openssl), and a server certificate it signed. */
import { mkdirSync } from 'node:fs'
import { join } from 'node:path'

/** In `dir`: `ca.crt`, and `server.crt`/`server.key` for localhost and 127.0.0.1, signed by that CA. */
export function certificates(dir: string) {
  mkdirSync(dir, { recursive: true })
  const at = (f: string) => join(dir, f)
  const run = (...args: string[]) => {
    const r = Bun.spawnSync(['openssl', ...args], { stdout: 'pipe', stderr: 'pipe' })
    if (r.exitCode !== 0) throw new Error(`openssl ${args[0]} failed: ${r.stderr.toString()}`)
  }
  run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', at('ca.key'), '-out', at('ca.crt'), '-days', '2', '-subj', '/CN=Capstan test CA')
  run('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', at('server.key'), '-out', at('server.csr'), '-subj', '/CN=localhost')
  Bun.spawnSync(['sh', '-c', `printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > '${at('san.cnf')}'`])
  run('x509', '-req', '-in', at('server.csr'), '-CA', at('ca.crt'), '-CAkey', at('ca.key'), '-CAcreateserial', '-out', at('server.crt'), '-days', '2', '-extfile', at('san.cnf'))
  return { ca: at('ca.crt'), cert: at('server.crt'), key: at('server.key') }
}
