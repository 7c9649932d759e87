/**
 * A webhook receiver that verifies each event Capstan sends (Standard Webhooks signatures) and
 * prints one line per event. The README's walkthrough runs it:
 *
 *   CAPSTAN_WEBHOOK_SECRET=whsec_... bun examples/webhook-receiver.ts      # listens on :4000
 *
 * `RECEIVER_PORT` picks another port. In your own project: `bun add standardwebhooks`.
 */
import { Webhook } from 'standardwebhooks'

const secret = process.env.CAPSTAN_WEBHOOK_SECRET
if (!secret) {
  console.error('Set CAPSTAN_WEBHOOK_SECRET to the endpoint secret (whsec_...) Capstan gave when the endpoint was created.')
  process.exit(2)
}
const wh = new Webhook(secret)

const server = Bun.serve({
  port: Number(process.env.RECEIVER_PORT ?? 4000),
  async fetch(req) {
    if (req.method !== 'POST') return new Response('POST events here\n')
    const raw = await req.text() // verify the raw body: re-serialised JSON would not match the signature
    try {
      const event = wh.verify(raw, Object.fromEntries(req.headers)) as { type: string; data: { id?: string; status?: string } }
      console.log(`verified ${event.type} ${event.data.id ?? ''} ${event.data.status ?? ''}`.trim())
      return new Response('ok')
    } catch {
      console.log('refused: bad signature')
      return new Response('bad signature', { status: 401 })
    }
  },
})
console.log(`webhook receiver on http://localhost:${server.port}/`)
