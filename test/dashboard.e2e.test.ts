/**
 * The operator dashboard end to end in a real headless Chromium (Debian's, driven by
 * playwright-core). With UPDATE_SCREENSHOTS=1 it also writes docs/screenshots/*.png.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from 'bun:test'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { type Browser, chromium, type Page } from 'playwright-core'
import { ALL_SCOPES } from '../src/modules/keys/model'
import { EVENT_TYPES } from '../src/modules/webhooks/service'
import { PrivatePostgres } from '../src/cluster/postgres'
import { TestClamd } from './support/clamd'
import * as files from './support/files'
import { ADMIN_TOKEN, TestServer, newPhone } from './support/server'
import { waitFor } from './support/wait'

const SHOTS = process.env.UPDATE_SCREENSHOTS === '1' ? join(import.meta.dir, '..', 'docs', 'screenshots') : null
const CHROMIUM = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium'

let srv: TestServer
let clamd: TestClamd
let browser: Browser
beforeAll(async () => {
  clamd = await TestClamd.start()
  srv = await TestServer.start({ env: { CAPSTAN_KEY_RATE_LIMIT: '100000', CAPSTAN_CLAMD: `unix:${clamd.socket}` } })
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  })
  if (SHOTS) mkdirSync(SHOTS, { recursive: true })
})
afterAll(async () => {
  await browser?.close()
  await srv.close()
  await clamd.stop()
})

async function shot(page: Page, name: string) {
  if (SHOTS) await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true })
}

async function signIn(page: Page, on = srv) {
  await page.goto(`${on.base}/admin`)
  await page.fill('input[name=token]', ADMIN_TOKEN)
  await page.click('#login button[type=submit]')
  await page.waitForSelector('h1:has-text("Workspaces")')
}

// a real Chromium on a busy 2-core machine can take longer than bun's default 5 s per test
setDefaultTimeout(30_000)

describe('dashboard', () => {
  test('sign in; create a workspace and a key seen once; revoke it and the API answers 401', async () => {
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    const errors: string[] = []
    page.on('pageerror', (e) => errors.push(e.message))
    await page.goto(`${srv.base}/admin`)
    await shot(page, 'sign-in')
    await page.fill('input[name=token]', 'not-the-admin-token')
    await page.click('#login button[type=submit]')
    await page.waitForSelector('text=That token is not valid.')
    await signIn(page)

    await page.fill('#new-ws input[name=name]', 'Acme Store')
    await page.click('#new-ws button[type=submit]')
    await page.waitForSelector('a:has-text("Acme Store")')
    await shot(page, 'workspaces')
    const wsId = (await srv.admin('GET', '/workspaces?per_page=100')).json.data.find((w: any) => w.name === 'Acme Store').id
    await page.click('a:has-text("Acme Store")')
    await page.waitForSelector('h1:has-text("Overview")')
    // clamd answers and the disk has room: no health banner
    expect(await page.isHidden('#health')).toBe(true)

    await page.click('nav a:has-text("API keys")')
    await page.fill('#new-key input[name=name]', 'shop backend')
    // every scope the server knows can be chosen (the list comes from the server)
    expect(await page.$$eval('#new-key input[name=scope]', (els) => els.map((e) => e.getAttribute("value")))).toEqual([...ALL_SCOPES])
    await page.check('input[value="contacts:read"]')
    await page.click('#new-key button[type=submit]')
    const plain = (await page.textContent('#key-plain'))!.trim()
    expect(plain).toMatch(/^cap_[a-z0-9]{16}\.[A-Za-z0-9]{48}$/)
    await page.waitForSelector('text=it will not be shown again')
    await shot(page, 'api-keys')
    expect((await srv.api(plain, 'GET', '/workspace')).json.data.id).toBe(wsId)
    // shown once: after leaving the page the plaintext is nowhere on it
    await page.click('nav a:has-text("Audit log")')
    await page.waitForSelector('text=api_key.created')
    await page.click('nav a:has-text("API keys")')
    await page.waitForSelector('button:has-text("Revoke")')
    expect(await page.content()).not.toContain(plain.split('.')[1])

    page.once('dialog', (d) => d.accept())
    await page.click('button:has-text("Revoke")')
    await page.waitForSelector('button:has-text("Remove")')
    expect((await srv.api(plain, 'GET', '/workspace')).status).toBe(401)
    await page.click('button:has-text("Remove")')
    await page.waitForSelector('button:has-text("Remove")', { state: 'detached' })
    expect(errors).toEqual([])
    await page.close()
  })

  test('change the sending policy; add a sandbox number and send through it; see it in the log', async () => {
    const t = await srv.tenant()
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    await signIn(page)
    await page.goto(`${srv.base}/admin#/w/${t.ws.id}/policy`)
    await page.waitForSelector('#policy')
    await page.fill('#policy input[name=hourly_cap]', '120')
    await page.fill('#policy input[name=min_gap_seconds]', '0')
    await page.fill('#policy input[name=max_gap_seconds]', '0')
    await page.click('#policy button[type=submit]')
    await page.waitForSelector('text=Policy saved')
    expect((await srv.admin('GET', `/workspaces/${t.ws.id}`)).json.data.settings.sending_policy).toMatchObject({ hourly_cap: 120, min_gap_seconds: 0, max_gap_seconds: 0 })
    // the limits: message content kept 90 days, media unchanged (on a fresh load: the save above
    // re-renders the page after its message, which would replace a field filled meanwhile)
    await page.reload()
    await page.waitForSelector('#limits input[name=content_retention_days]')
    await page.fill('#limits input[name=content_retention_days]', '90')
    await page.click('#limits button[type=submit]')
    await page.waitForSelector('text=Limits saved')
    expect((await srv.admin('GET', `/workspaces/${t.ws.id}`)).json.data.settings).toMatchObject({ messages: { content_retention_days: 90 }, media: { retention_days: 30 } })

    await page.click('nav a:has-text("Numbers")')
    const phone = newPhone('+1444')
    await page.fill('#new-conn input[name=phone]', phone)
    await page.fill('#new-conn input[name=name]', 'Shop')
    await page.click('#new-conn button[type=submit]')
    await page.waitForSelector(`text=${phone}`)
    const conn = (await srv.admin('GET', `/workspaces/${t.ws.id}/connections`)).json.data[0]
    expect(conn).toMatchObject({ phone, status: 'online', driver: 'sandbox' })
    // no simulated receipts of its own: the one clicked below is the only delivery
    expect((await srv.admin('PATCH', `/connections/${conn.id}`, { config: { delivered_after_ms: null, read_after_ms: null } })).status).toBe(200)
    // the UTC day the messages below are made on (a run across midnight reads them as yesterday's)
    const day = new Date().toISOString().slice(0, 10)
    await page.fill(`form[data-inbound] input[name=from]`, '+14155550123')
    await page.fill(`form[data-inbound] input[name=body]`, 'Where is my order?')
    await page.click('form[data-inbound] button')
    await page.waitForSelector('text=Inbound message logged')
    // a warm-up for the new number (on a fresh load: the re-render after the message above could
    // replace a field filled meanwhile)
    await page.reload()
    await page.fill(`form[data-warmup="${conn.id}"] input[name=days]`, '14')
    await page.fill(`form[data-warmup="${conn.id}"] input[name=start_daily_cap]`, '30')
    await page.click(`form[data-warmup="${conn.id}"] button[type=submit]`)
    await page.waitForSelector('text=Warming up: day 1 of 14')
    expect((await srv.admin('GET', `/connections/${conn.id}`)).json.data.warmup).toMatchObject({ days: 14, start_daily_cap: 30, day: 1 })
    await shot(page, 'numbers')

    const sent = await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'Your order #1001 has shipped' } })
    expect(sent.status).toBe(202)
    await waitFor(async () => (await srv.api(t.key, 'GET', `/messages/${sent.json.data.id}`)).json.data.status !== 'queued')
    await page.click('nav a:has-text("Messages")')
    await page.waitForSelector('text=Your order #1001 has shipped')
    await page.waitForSelector('text=Where is my order?')
    // sandbox test tool: a delivery receipt from the message's detail
    await page.click(`button[data-open="${sent.json.data.id}"]`)
    await page.click(`button[data-receipt="${sent.json.data.id}"][data-to="delivered"]`)
    // the toast itself (the row's "sandbox receipt: delivered …" label matches a plain text selector)
    await page.waitForSelector('#toast:has-text("Receipt: delivered")')
    expect((await srv.api(t.key, 'GET', `/messages/${sent.json.data.id}`)).json.data.status).toBe('delivered')
    // one contact's conversation, by its number; a number that is no contact says so. The filter
    // is submitted while an action's re-render is still loading (its list held back here): the
    // page must end on the filtered list, not on the older render finishing last
    let holdNext = true
    await page.route('**/admin/api/workspaces/*/messages?*', async (r) => {
      if (holdNext && !r.request().url().includes('phone=')) {
        holdNext = false
        await Bun.sleep(800)
      }
      await r.continue()
    })
    await page.click(`button[data-open="${sent.json.data.id}"]`)
    await page.click(`button[data-receipt="${sent.json.data.id}"][data-to="read"]`)
    await page.fill('#filter input[name=phone]', '+14155550123')
    await page.click('#filter button[type=submit]')
    await page.waitForSelector('text=1 message ·')
    await Bun.sleep(1200)
    expect(await page.isVisible('text=1 message ·')).toBe(true)
    await page.unroute('**/admin/api/workspaces/*/messages?*')
    expect(await page.isVisible('text=Where is my order?')).toBe(true)
    expect(await page.isVisible('text=Your order #1001 has shipped')).toBe(false)
    await page.fill('#filter input[name=phone]', '+14155559999')
    await page.click('#filter button[type=submit]')
    await page.waitForSelector('text=The contact was not found.')
    expect(await page.inputValue('#filter input[name=phone]')).toBe('+14155559999')
    await page.fill('#filter input[name=phone]', '')
    await page.click('#filter button[type=submit]')
    await page.waitForSelector('text=Your order #1001 has shipped')
    await page.click('nav a:has-text("Sending policy")')
    await page.waitForSelector(`td:has-text("${phone}")`)
    await shot(page, 'sending-policy')
    await page.click('nav a:has-text("Overview")')
    await page.waitForSelector('svg.chart')
    // today's figures (the last 7 days' when the run crossed midnight), and that day's points on the chart (UTC days)
    const today = (await page.textContent(`[data-period="${new Date().toISOString().slice(0, 10) === day ? 1 : 7}"]`))!
    expect(today).toContain('1 sent')
    expect(today).toContain('1 received')
    expect(today).toContain('delivery rate 100%')
    const points = await page.$$eval('svg.chart circle title', (ts) => ts.map((t) => t.textContent))
    expect(points).toEqual(expect.arrayContaining([`${day} sent: 1`, `${day} received: 1`, `${day} failed: 0`]))
    expect(await page.textContent('.legend')).toBe('sentdeliveredreadfailedreceived')
    await shot(page, 'overview')
    // a phone-sized screen: the tables stack, nothing overflows sideways
    await page.setViewportSize({ width: 390, height: 844 })
    await page.click('nav a:has-text("Messages")')
    await page.waitForSelector('text=Your order #1001 has shipped')
    // runs in the browser page
    const overflow = await page.evaluate('document.documentElement.scrollWidth - document.documentElement.clientWidth')
    expect(overflow).toBeLessThanOrEqual(0)
    await page.close()
  })

  test('the message log links each message’s files; a link serves the file to the signed-in operator only', async () => {
    const t = await srv.tenant()
    const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: { delivered_after_ms: null, read_after_ms: null, fail_recipients: [] } })).json.data
    const fd = new FormData()
    fd.set('file', new File([files.pdf()], 'receipt.pdf'))
    const media = (await srv.api(t.key, 'POST', '/media', { multipart: fd })).json.data
    const sent = await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient: newPhone(), body: 'Your receipt', media: { attachments: [{ media_id: media.id }] } } })
    expect(sent.status).toBe(202)
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    await signIn(page)
    await page.goto(`${srv.base}/admin#/w/${t.ws.id}/messages`)
    await page.click(`button[data-open="${sent.json.data.id}"]`)
    await page.waitForSelector('a.file:has-text("file 1")')
    const href = (await page.getAttribute('a.file', 'href'))!
    expect(href).toBe(`/admin/api/workspaces/${t.ws.id}/media/${media.id}/download`)
    // fetched as the dashboard's own page does: with the session cookie
    const got = await page.evaluate(`fetch(${JSON.stringify(href)}).then(async (r) => ({ status: r.status, type: r.headers.get('content-type'), size: (await r.arrayBuffer()).byteLength }))`)
    expect(got).toEqual({ status: 200, type: 'application/pdf', size: files.pdf().length })
    expect((await fetch(`${srv.base}${href}`)).status).toBe(401)
    await page.close()
  })

  test('webhooks: add an endpoint, rotate its secret, send failed deliveries again, disable it and enable it again', async () => {
    const t = await srv.tenant()
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    page.on('dialog', (d) => void d.accept())
    await signIn(page)
    await page.goto(`${srv.base}/admin#/w/${t.ws.id}/webhooks`)
    // every event the server sends can be chosen (the list comes from the server)
    await page.waitForSelector('#new-hook input[name=event]')
    expect(await page.$$eval('#new-hook input[name=event]', (els) => els.map((e) => e.getAttribute("value")))).toEqual([...EVENT_TYPES])
    await page.fill('#new-hook input[name=url]', 'http://127.0.0.1:9/capstan')
    await page.click('#new-hook button[type=submit]')
    await page.waitForSelector('text=Signing secret')
    const hook = (await srv.admin('GET', `/workspaces/${t.ws.id}/webhooks`)).json.data[0]
    const before = (await srv.admin('GET', `/webhooks/${hook.id}`)).json.data.secret
    // rotating shows the new secret and says until when the old one also signs
    await page.click(`button[data-rotate="${hook.id}"]`)
    await page.waitForSelector('text=New signing secret')
    const after = (await srv.admin('GET', `/webhooks/${hook.id}`)).json.data.secret
    expect(after).not.toBe(before)
    expect(await page.textContent(`#secret-${hook.id} .mono`)).toBe(after)
    await page.waitForSelector('text=The previous secret also signs until')
    // extra request headers for a receiver behind a gateway
    await page.click(`button[data-headers="${hook.id}"]`)
    await page.fill(`form[data-headers-form="${hook.id}"] textarea`, 'X-Gateway-Key: k-1\nX-Env: prod')
    await page.click(`form[data-headers-form="${hook.id}"] button[type=submit]`)
    await page.waitForSelector('text=extra headers: X-Gateway-Key, X-Env')
    expect((await srv.admin('GET', `/webhooks/${hook.id}`)).json.data.header_values).toEqual({ 'X-Gateway-Key': 'k-1', 'X-Env': 'prod' })
    // sending failed deliveries again, for the period chosen (none failed here)
    await page.selectOption(`select[data-since="${hook.id}"]`, '168')
    const [recover] = await Promise.all([page.waitForRequest((r) => r.url().endsWith('/recover')), page.click(`button[data-recover="${hook.id}"]`)])
    await page.waitForSelector('text=No failed deliveries in that time')
    const back = Date.now() - Date.parse(JSON.parse(recover.postData()!).since)
    expect(back).toBeGreaterThan(168 * 3_600_000 - 60_000)
    expect(back).toBeLessThan(168 * 3_600_000 + 60_000)
    await page.click(`button[data-disable="${hook.id}"]`)
    await page.waitForSelector('text=Endpoint disabled')
    expect((await srv.admin('GET', `/webhooks/${hook.id}`)).json.data.status).toBe('disabled')
    await page.click(`button[data-enable="${hook.id}"]`)
    await page.waitForSelector('text=Endpoint enabled')
    expect((await srv.admin('GET', `/webhooks/${hook.id}`)).json.data.status).toBe('active')
    await page.waitForSelector(`button[data-disable="${hook.id}"]`)
    await page.close()
  })

  test("webhooks: each endpoint's health in colour; its full history with times, by status, a page at a time; one delivery's payload and answer; sent again with one click", async () => {
    const got: { path: string; id: string }[] = []
    const receiver = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      fetch(req) {
        const path = new URL(req.url).pathname
        got.push({ path, id: req.headers.get('webhook-id') ?? '' })
        return new Response(path === '/good' ? 'ok' : 'down', { status: path === '/good' ? 200 : 500 })
      },
    })
    try {
      const t = await srv.tenant()
      const make = async (url: string) => (await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url })).json.data
      const good = await make(`http://127.0.0.1:${receiver.port}/good`)
      const bad = await make(`http://127.0.0.1:${receiver.port}/bad`)
      const odd = await make('http://127.0.0.1:9/<svg/onload=window.__xss=1>')
      for (const h of [good, bad]) for (let i = 0; i < 3; i++) expect((await srv.admin('POST', `/webhooks/${h.id}/test`)).status).toBe(202)
      await waitFor(async () => (await srv.admin('GET', `/webhooks/${good.id}/deliveries?status=delivered`)).json.meta.total === 3)
      await waitFor(async () => (await srv.admin('GET', `/webhooks/${bad.id}/deliveries`)).json.data.every((d: any) => d.attempts >= 1))
      // the health as the admin API has it
      expect((await srv.admin('GET', `/webhooks/${bad.id}/health`)).json.data).toMatchObject({ state: 'failing', consecutive_failures: 3, last_error: 'HTTP 500', success_rate: null, recent: 3 })
      expect((await srv.admin('GET', `/webhooks/${good.id}/health`)).json.data).toMatchObject({ state: 'healthy', consecutive_failures: 0, success_rate: 1, last_error: null })
      expect((await srv.admin('GET', `/webhooks/${odd.id}/health`)).json.data.state).toBe('unknown')

      const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
      await page.addInitScript('window.__xss = undefined')
      await signIn(page)
      await page.goto(`${srv.base}/admin#/w/${t.ws.id}/webhooks`)
      await page.waitForSelector(`[data-health="${bad.id}"]`)
      expect(await page.textContent(`[data-health="${bad.id}"]`)).toBe('failing')
      expect(await page.getAttribute(`[data-hook="${bad.id}"]`, 'class')).toContain('health-failing')
      expect(await page.textContent(`[data-hook="${bad.id}"] .error-line`)).toContain('HTTP 500')
      expect(await page.textContent(`[data-hook="${bad.id}"]`)).toContain('3 failed in a row')
      expect(await page.textContent(`[data-health="${good.id}"]`)).toBe('healthy')
      expect(await page.textContent(`[data-hook="${good.id}"]`)).toContain('100% of the last 3 delivered')
      expect(await page.textContent(`[data-health="${odd.id}"]`)).toBe('no deliveries yet')
      expect(await page.textContent(`[data-hook="${odd.id}"] .mono`)).toBe('http://127.0.0.1:9/<svg/onload=window.__xss=1>')
      await shot(page, 'webhooks')
      // the good endpoint's history: times and statuses; one delivery's payload; sent again
      await page.click(`[data-hook="${good.id}"] a:has-text("Delivery history")`)
      await page.waitForSelector('#history-total:has-text("3 deliveries")')
      const first = (await srv.admin('GET', `/webhooks/${good.id}/deliveries`)).json.data[0]
      await page.click(`button[data-open="${first.id}"]`)
      await page.waitForSelector('#payload')
      expect(JSON.parse((await page.textContent('#payload'))!)).toMatchObject({ type: 'webhook.test', data: { endpoint_id: good.id, message: 'A test event from Capstan.' } })
      expect(await page.textContent('#drawer')).toContain('HTTP 200')
      await shot(page, 'webhook-delivery')
      const before = got.filter((g) => g.id === first.id).length
      await page.click('#resend')
      await page.waitForSelector('#toast:has-text("Delivery sent again")')
      await waitFor(() => got.filter((g) => g.id === first.id).length === before + 1)
      // a long history, a page at a time (50 a page)
      for (let i = 0; i < 50; i++) await srv.admin('POST', `/webhooks/${good.id}/test`)
      await page.reload()
      await page.waitForSelector('#history-total:has-text("53 deliveries · page 1 of 2")')
      expect(await page.$$eval('tr[data-row]', (rows) => rows.length)).toBe(50)
      await page.click('a:has-text("older →")')
      await page.waitForSelector('#history-total:has-text("page 2 of 2")')
      expect(await page.$$eval('tr[data-row]', (rows) => rows.map((r) => r.getAttribute('data-row')))).toContain(first.id)
      // only the failed ones: the bad endpoint, disabled (what it held fails)
      expect((await srv.admin('PATCH', `/webhooks/${bad.id}`, { status: 'disabled' })).status).toBe(200)
      await page.goto(`${srv.base}/admin#/w/${t.ws.id}/webhooks?endpoint=${bad.id}`)
      await page.waitForSelector(`main .mono:has-text("${bad.url}")`)
      await page.waitForSelector('#history-total:has-text("3 deliveries")')
      await page.selectOption('#history-filter select[name=status]', 'delivered')
      await page.click('#history-filter button[type=submit]')
      await page.waitForSelector('#history-total:has-text("0 deliveries")')
      await page.selectOption('#history-filter select[name=status]', 'failed')
      await page.click('#history-filter button[type=submit]')
      await page.waitForSelector('#history-total:has-text("3 deliveries")')
      await page.click('button[data-open]')
      await page.waitForSelector('#drawer:has-text("Enable the endpoint to send it again")')
      expect(await page.isVisible('#resend')).toBe(false)
      // the API says why it cannot, as the page did
      const held = (await srv.admin('GET', `/webhooks/${bad.id}/deliveries`)).json.data[0]
      expect((await srv.admin('POST', `/webhooks/${bad.id}/deliveries/${held.id}/resend`)).json.code).toBe('endpoint_disabled')
      expect((await srv.admin('POST', `/webhooks/${good.id}/deliveries/msg_nothing/resend`)).status).toBe(404)
      expect((await srv.admin('GET', `/webhooks/${good.id}/deliveries/${held.id}`)).status).toBe(404)
      // a phone's width: nothing overflows sideways
      await page.setViewportSize({ width: 390, height: 844 })
      await page.keyboard.press('Escape')
      expect(await page.evaluate('document.documentElement.scrollWidth - document.documentElement.clientWidth')).toBeLessThanOrEqual(0)
      expect(await page.evaluate('window.__xss')).toBeUndefined()
      await page.close()
    } finally {
      receiver.stop(true)
    }
  })

  test('a Cloud API number imports its approved templates from Meta with one click; the page lists what was skipped and why', async () => {
    // a Graph API that knows one number and lists two templates, one approved
    const phone = newPhone('+1444')
    const graph = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      fetch(req) {
        const path = new URL(req.url).pathname
        if (path === '/v26.0/109876543210') return Response.json({ id: '109876543210', display_phone_number: phone.slice(1) })
        if (path === '/v26.0/102290129340398/message_templates')
          return Response.json({
            data: [
              { name: 'order_shipped', language: 'en_US', status: 'APPROVED', category: 'UTILITY', components: [{ type: 'BODY', text: 'Your order {{1}} has shipped.' }] },
              { name: 'autumn_sale', language: 'en_US', status: 'REJECTED', category: 'MARKETING', components: [{ type: 'BODY', text: 'Sale!' }] },
            ],
            paging: { cursors: { before: 'a', after: 'b' } },
          })
        return Response.json({ error: { message: 'Unsupported request', code: 100 } }, { status: 400 })
      },
    })
    try {
      const t = await srv.tenant()
      const cloud = { phone_number_id: '109876543210', access_token: 'EAAG-dashboard-token', app_secret: 's', verify_token: 'v', graph_base_url: `http://127.0.0.1:${graph.port}` }
      const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone, driver: 'cloud_api', config: cloud })).json.data
      const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
      await signIn(page)
      // without the account id the button says what is missing
      await page.goto(`${srv.base}/admin#/w/${t.ws.id}/numbers`)
      expect(await page.getAttribute(`button[data-import="${conn.id}"]`, 'title')).toContain('waba_id')
      expect(await page.isDisabled(`button[data-import="${conn.id}"]`)).toBe(true)
      await srv.admin('PATCH', `/connections/${conn.id}`, { config: { waba_id: '102290129340398' } })
      await page.reload()
      await page.click(`button[data-import="${conn.id}"]`)
      await page.waitForSelector('text=Templates imported: 1 new, 0 updated, 0 already here, 1 skipped')
      expect(await page.textContent(`#imported-${conn.id}`)).toContain('autumn_sale (en_US): Meta has not approved it (status REJECTED).')
      const templates = (await srv.api(t.key, 'GET', '/templates')).json.data
      expect(templates.map((x: any) => [x.name, x.body])).toEqual([['order_shipped (en_US)', 'Your order {{1}} has shipped.']])
      await shot(page, 'numbers-import-templates')
      await page.close()
    } finally {
      graph.stop(true)
    }
  })

  test('contacts: find one by its number, open its conversation, export it as a JSON file, erase it after a confirmation', async () => {
    const t = await srv.tenant()
    const phone = newPhone()
    await srv.api(t.key, 'POST', '/contacts', { json: { phone, name: 'Forget Me', consent_status: 'opted_in' } })
    await srv.api(t.key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'Someone Else' } })
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    const asked: string[] = []
    page.on('dialog', (d) => {
      asked.push(d.message())
      void d.accept()
    })
    await signIn(page)
    await page.goto(`${srv.base}/admin#/w/${t.ws.id}/contacts`)
    await page.waitForSelector('text=2 contacts')
    await shot(page, 'contacts')
    await page.fill('#find input[name=phone]', phone)
    await page.click('#find button[type=submit]')
    await page.waitForSelector('text=1 contacts')
    expect(await page.isVisible('text=Forget Me')).toBe(true)
    expect(await page.isVisible('text=Someone Else')).toBe(false)
    // a malformed number says so and keeps the form
    await page.fill('#find input[name=phone]', '12345')
    await page.click('#find button[type=submit]')
    await page.waitForSelector('text=The given data was invalid.')
    await page.fill('#find input[name=phone]', phone)
    await page.click('#find button[type=submit]')
    await page.waitForSelector('text=Forget Me')
    // the export: a JSON file of everything kept about the contact
    const [download] = await Promise.all([page.waitForEvent('download'), page.click(`button[data-export="${phone}"]`)])
    expect(download.suggestedFilename()).toBe(`contact-${phone.slice(1)}.json`)
    const exported = JSON.parse(readFileSync((await download.path())!, 'utf8'))
    expect(exported.contact).toMatchObject({ phone, name: 'Forget Me' })
    expect(asked).toEqual([])
    // its conversation, from the row
    await page.click('td a:has-text("Messages")')
    await page.waitForSelector('text=0 messages')
    expect(await page.inputValue('#filter input[name=phone]')).toBe(phone)
    await page.goBack()
    await page.waitForSelector('text=Forget Me')
    await page.click(`button[data-erase="${phone}"]`)
    await page.waitForSelector('text=Contact erased')
    expect(asked).toEqual([`Erase the contact ${phone} for good?`])
    await page.waitForSelector('text=0 contacts')
    expect((await srv.api(t.key, 'GET', `/contacts?phone=${encodeURIComponent(phone)}`)).json.meta.total).toBe(0)
    await page.close()
  })

  test('contacts: import a CSV file; a file with a bad row imports nothing and lists the rows to fix', async () => {
    const t = await srv.tenant()
    const [a, b] = [newPhone(), newPhone()]
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    await signIn(page)
    await page.goto(`${srv.base}/admin#/w/${t.ws.id}/contacts`)
    await page.waitForSelector('text=0 contacts')
    const file = (text: string) => ({ name: 'people.csv', mimeType: 'text/csv', buffer: Buffer.from(text) })
    await page.setInputFiles('#import input[type=file]', file(`phone,name,consent_status\n${a},Ann,opted_in\nnope,Bob,\n`))
    await page.click('#import button[type=submit]')
    await page.waitForSelector('text=Nothing was imported.')
    expect(await page.textContent('#import-result')).toContain('rows.3.phone: The rows.3.phone field must be an E.164 phone number')
    expect((await srv.api(t.key, 'GET', '/contacts')).json.meta.total).toBe(0)
    await page.setInputFiles('#import input[type=file]', file(`phone,name,consent_status\n${a},Ann,opted_in\n${b},Bob,\n`))
    await page.click('#import button[type=submit]')
    await page.waitForSelector('text=Contacts imported: 2 new, 0 updated')
    await page.waitForSelector('text=2 contacts')
    expect(await page.isVisible('text=Ann')).toBe(true)
    await shot(page, 'contacts-import')
    const ann = (await srv.api(t.key, 'GET', `/contacts?phone=${encodeURIComponent(a)}`)).json.data[0]
    expect([ann.name, ann.consent_status]).toEqual(['Ann', 'opted_in'])
    // and back out, every contact as CSV
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('text=Download all as CSV')])
    expect(download.suggestedFilename()).toBe(`contacts-${t.ws.slug}.csv`)
    expect(readFileSync((await download.path())!, 'utf8')).toBe(`phone,name,consent_status\r\n${[a, b].sort()[0] === a ? `${a},Ann,opted_in\r\n${b},Bob,unknown` : `${b},Bob,unknown\r\n${a},Ann,opted_in`}\r\n`)
    // the same form on the suppression list
    await page.goto(`${srv.base}/admin#/w/${t.ws.id}/suppressions`)
    await page.waitForSelector('h1:has-text("Suppression list")')
    await page.setInputFiles('#import input[type=file]', file(`phone,reason\n${b},asked\n`))
    await page.click('#import button[type=submit]')
    await page.waitForSelector('text=Numbers suppressed: 1 added, 0 already on the list')
    await page.waitForSelector(`td:has-text("${b}")`)
    await page.close()
  })

  test('the session cookie is HttpOnly and SameSite=Strict; cookie writes need the CSRF header', async () => {
    const login = await fetch(`${srv.base}/admin/session`, { method: 'POST', headers: { 'content-type': 'application/json', 'x-capstan-csrf': '1' }, body: JSON.stringify({ token: ADMIN_TOKEN }) })
    expect(login.status).toBe(204)
    const cookie = login.headers.get('set-cookie')!
    expect(cookie).toContain('HttpOnly')
    expect(cookie).toContain('SameSite=Strict')
    expect(cookie).toContain('Path=/admin')
    expect(cookie).not.toContain('Secure') // plain http here; behind TLS it is Secure
    const session = cookie.split(';')[0]!
    expect((await fetch(`${srv.base}/admin/api/workspaces`, { headers: { cookie: session } })).status).toBe(200)
    const noCsrf = await fetch(`${srv.base}/admin/api/workspaces`, { method: 'POST', headers: { cookie: session, 'content-type': 'application/json' }, body: JSON.stringify({ name: 'x' }) })
    expect(noCsrf.status).toBe(403)
    expect(((await noCsrf.json()) as { code: string }).code).toBe('csrf_failed')
    const withCsrf = await fetch(`${srv.base}/admin/api/workspaces`, { method: 'POST', headers: { cookie: session, 'content-type': 'application/json', 'x-capstan-csrf': '1' }, body: JSON.stringify({ name: 'via cookie' }) })
    expect(withCsrf.status).toBe(201)
    const forged = session.replace(/\.[^.]+$/, '.AAAA')
    expect((await fetch(`${srv.base}/admin/api/workspaces`, { headers: { cookie: forged } })).status).toBe(401)
    const loginNoCsrf = await fetch(`${srv.base}/admin/session`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ token: ADMIN_TOKEN }) })
    expect(loginNoCsrf.status).toBe(401)
    const page = await fetch(`${srv.base}/admin`)
    expect(page.headers.get('content-security-policy')).toContain("script-src 'self'")
    expect(await page.text()).not.toMatch(/https?:\/\//)
  })

  test('backups: one is written with a click and listed; one that fails says why, on the page and in the banner', async () => {
    const root = mkdtempSync(join(tmpdir(), 'capstan-e2e-backups-'))
    const backups = join(root, 'backups')
    writeFileSync(join(root, 'a-file'), '')
    const own = await TestServer.start({ env: { CAPSTAN_BACKUP_DIR: backups, CAPSTAN_CLAMD: `unix:${clamd.socket}` } })
    // a directory that cannot be made: a file sits where its parent should be
    const blocked = await TestServer.start({ env: { CAPSTAN_BACKUP_DIR: join(root, 'a-file', 'backups'), CAPSTAN_CLAMD: `unix:${clamd.socket}` } })
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    try {
      await signIn(page, own)
      await page.click('#backups-link')
      await page.waitForSelector('h1:has-text("Backups")')
      expect(await page.textContent('main')).toContain(`Every 24 h into ${backups}; the newest 7 are kept.`)
      await page.click('#backup-now')
      await page.waitForSelector('text=Backup written')
      await page.waitForSelector('td code:has-text("capstan-")')
      const listed = (await own.admin('GET', '/backups')).json.data.backups
      expect(listed).toHaveLength(1)
      expect(await page.textContent('main')).toContain(listed[0].name)
      expect(await page.isHidden('#health')).toBe(true)
      await shot(page, 'backups')

      await signIn(page, blocked)
      await page.click('#backups-link')
      await page.click('#backup-now')
      await page.waitForSelector('#health:has-text("The last automatic backup failed; see Backups.")')
      await page.waitForSelector('main:has-text("The last backup failed")')
      expect(await page.textContent('main')).toContain('ENOTDIR: not a directory')
    } finally {
      await page.close()
      await own.close()
      await blocked.close()
      rmSync(root, { recursive: true, force: true })
    }
  })

  test('backups on PostgreSQL: the page says to use PostgreSQL’s own tools, and offers no backup of its own; the banner says when the database takes no writes', async () => {
    const root = mkdtempSync(join(tmpdir(), 'capstan-e2e-pg-'))
    const pg = await PrivatePostgres.start(join(root, 'pg'))
    const own = await TestServer.start({ env: { CAPSTAN_DATABASE_URL: pg.url, CAPSTAN_CLAMD: `unix:${clamd.socket}`, CAPSTAN_LOG_LEVEL: 'warn' } })
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    try {
      await signIn(page, own)
      await page.click('#backups-link')
      await page.waitForSelector('h1:has-text("Backups")')
      expect(await page.textContent('main')).toContain('This installation keeps its data in PostgreSQL: back it up with PostgreSQL’s own tools')
      expect(await page.$('#backup-now')).toBeNull()
      expect(await page.isHidden('#health')).toBe(true)
      // the database turns read-only (a failover under way): the banner says what that means
      const db = new Bun.SQL(pg.url, { max: 1 })
      try {
        await db.unsafe('ALTER SYSTEM SET default_transaction_read_only = on')
        await db.unsafe('SELECT pg_reload_conf()')
        await Bun.sleep(300)
        await page.reload()
        await page.waitForSelector('#health:not([hidden])')
        expect(await page.textContent('#health')).toBe('The database takes no writes right now (a standby, or a failover under way): changes and sends are refused (503) until it does.')
      } finally {
        await db.unsafe('ALTER SYSTEM RESET default_transaction_read_only')
        await db.unsafe('SELECT pg_reload_conf()')
        await db.close()
      }
    } finally {
      await page.close()
      await own.close()
      await pg.stop()
      rmSync(root, { recursive: true, force: true })
    }
  })

  test('messages: find one by its words, narrow by dates, open its detail (timeline, error, campaign); one line each, also at 390 px; nothing stored runs as script', async () => {
    const t = await srv.tenant()
    await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
    const refused = newPhone()
    const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox', config: { delivered_after_ms: 50, read_after_ms: null, fail_recipients: [refused] } })).json.data
    const xss = '<img src=x onerror="window.__xss=1">'
    const ada = newPhone()
    await srv.api(t.key, 'POST', '/contacts', { json: { phone: ada, name: `Ada ${xss}`, consent_status: 'opted_in', metadata: { list: 'parcels' } } })
    const send = async (recipient: string, body: string) => (await srv.api(t.key, 'POST', '/messages', { json: { connection_id: conn.id, recipient, body } })).json.data.id as string
    const parcel = await send(ada, 'Your parcel is on its way')
    const failed = await send(refused, 'Your parcel could not be sent')
    await send(newPhone(), `Your invoice <script>window.__xss=2</script>`)
    // a campaign's message, to open its detail
    const tpl = (await srv.api(t.key, 'POST', '/templates', { json: { name: 'Parcels', body: 'Hi {{name}}, a parcel update' } })).json.data
    const campaign = (await srv.api(t.key, 'POST', '/campaigns', { json: { name: 'Parcel news', template_id: tpl.id, connection_id: conn.id, audience: { metadata: { list: 'parcels' } } } })).json.data
    expect((await srv.api(t.key, 'POST', `/campaigns/${campaign.id}/schedule`, { json: {} })).status).toBe(200)
    await waitFor(async () => (await srv.api(t.key, 'GET', `/campaigns/${campaign.id}`)).json.data.status === 'completed')
    await waitFor(async () => (await srv.api(t.key, 'GET', `/messages/${failed}`)).json.data.status === 'failed')
    await waitFor(async () => (await srv.api(t.key, 'GET', `/messages/${parcel}`)).json.data.status === 'delivered')

    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    await page.addInitScript('window.__xss = undefined')
    await signIn(page)
    await page.goto(`${srv.base}/admin#/w/${t.ws.id}/messages`)
    await page.waitForSelector('#log-total:has-text("4 messages")')
    // one line a message: the contact's name and number, the number it went through
    const rowHeights = await page.$$eval('tr[data-row]', (rows) => rows.map((r) => r.getBoundingClientRect().height))
    expect(rowHeights.length).toBe(4)
    expect(Math.max(...rowHeights)).toBeLessThan(48)
    expect(await page.textContent(`tr[data-row="${parcel}"]`)).toContain(`Ada ${xss}`)
    expect(await page.textContent(`tr[data-row="${parcel}"]`)).toContain(conn.phone)
    // by its words (any case), then nothing from tomorrow on
    await page.fill('#filter input[name=q]', 'PARCEL')
    await page.click('#filter button[type=submit]')
    await page.waitForSelector('#log-total:has-text("3 messages")')
    expect(await page.$$eval('tr[data-row]', (rows) => rows.map((r) => r.getAttribute('data-row')))).not.toContain(undefined)
    expect(await page.isVisible('text=Your invoice')).toBe(false)
    const tomorrow = new Date(Date.now() + 86_400_000)
    const iso = `${tomorrow.getFullYear()}-${String(tomorrow.getMonth() + 1).padStart(2, '0')}-${String(tomorrow.getDate()).padStart(2, '0')}`
    await page.fill('#filter input[name=from]', iso)
    await page.click('#filter button[type=submit]')
    await page.waitForSelector('#log-total:has-text("0 messages")')
    await page.fill('#filter input[name=from]', '')
    await page.click('#filter button[type=submit]')
    await page.waitForSelector('#log-total:has-text("3 messages")')
    await shot(page, 'messages')
    // the failed one's detail: the error's code and words, its timeline; Escape closes it and
    // focus goes back to the line it was opened from
    await page.click(`button[data-open="${failed}"]`)
    await page.waitForSelector('#drawer h2:has-text("Sent message")')
    const detail = (await page.textContent('#drawer'))!
    expect(detail).toContain('recipient_unreachable The network could not deliver to this recipient.')
    expect(detail).toMatch(/queued · .*sending · .*failed · /s)
    expect(await page.evaluate('document.activeElement.id')).toBe('drawer-title')
    await shot(page, 'message-detail')
    await page.keyboard.press('Escape')
    expect(await page.isHidden('#drawer')).toBe(true)
    expect(await page.evaluate('document.activeElement.dataset.open')).toBe(failed)
    // the campaign's message names its campaign, opened with the keyboard alone
    await page.fill('#filter input[name=q]', 'parcel update')
    await page.press('#filter input[name=q]', 'Enter')
    await page.waitForSelector('#log-total:has-text("1 message ·")')
    await page.focus('button[data-open]')
    await page.keyboard.press('Enter')
    await page.waitForSelector('#drawer a:has-text("Parcel news")')
    await page.click('#drawer-close')
    // nothing stored ran: not the name, not the body, not in the list nor in the detail
    await page.goto(`${srv.base}/admin#/w/${t.ws.id}/messages`)
    await page.waitForSelector('#log-total:has-text("4 messages")')
    await page.click('tr[data-row] button[data-open]:has-text("Your invoice")')
    await page.waitForSelector('#drawer .body')
    expect(await page.textContent('#drawer .body')).toBe('Your invoice <script>window.__xss=2</script>')
    expect(await page.evaluate('window.__xss')).toBeUndefined()
    // a phone's width: two short lines a message (who and status, words and time), nothing overflowing sideways
    await page.keyboard.press('Escape')
    await page.setViewportSize({ width: 390, height: 844 })
    await page.waitForSelector('tr[data-row]')
    expect(Math.max(...(await page.$$eval('tr[data-row]', (rows) => rows.map((r) => r.getBoundingClientRect().height))))).toBeLessThan(72)
    expect(await page.isVisible(`tr[data-row="${parcel}"] .c-msg`)).toBe(true)
    expect(await page.evaluate('document.documentElement.scrollWidth - document.documentElement.clientWidth')).toBeLessThanOrEqual(0)
    await shot(page, 'messages-phone')
    await page.close()
  })

  test('every page: its title and heading, the tab bar only inside a workspace (aria-current on its tab), every field labelled; deactivating asks first; a favicon', async () => {
    const t = await srv.tenant()
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    await page.goto(`${srv.base}/admin`)
    await page.waitForSelector('h1:has-text("Sign in")')
    expect([await page.title(), await page.isHidden('#tabs')]).toEqual(['Sign in · Capstan', true])
    expect(await page.getAttribute('link[rel=icon]', 'href')).toBe('/admin/favicon.svg')
    const icon = await fetch(`${srv.base}/admin/favicon.svg`)
    expect([icon.status, icon.headers.get('content-type'), (await icon.text()).startsWith('<svg')]).toEqual([200, 'image/svg+xml', true])
    await signIn(page)
    // the title is set once the page is drawn, as focus goes to its heading
    // (a function, not a string: the dashboard's CSP refuses eval, which polling a string needs)
    const drawn = () => page.waitForFunction(() => (globalThis as any).document.activeElement?.tagName === 'H1')
    await drawn()
    expect([await page.title(), await page.isHidden('#tabs')]).toEqual(['Workspaces · Capstan', true])
    /** Controls without a label of their own (a <label>, or aria-label). */
    const unlabelled = () => page.$$eval('main input:not([type=hidden]), main select, main textarea', (els) => els.filter((e) => !e.closest('label') && !(e.id && (globalThis as any).document.querySelector(`label[for="${e.id}"]`)) && !e.getAttribute('aria-label')).map((e) => e.outerHTML.slice(0, 80)))
    expect(await unlabelled()).toEqual([])
    for (const [tab, heading] of [['overview', 'Overview'], ['keys', 'API keys'], ['numbers', 'Numbers'], ['policy', 'Sending policy and limits'], ['messages', 'Messages'], ['contacts', 'Contacts'], ['templates', 'Templates'], ['campaigns', 'Campaigns'], ['groups', 'Groups'], ['media', 'Media'], ['webhooks', 'Webhooks'], ['suppressions', 'Suppression list'], ['audit', 'Audit log']]) {
      await page.goto(`${srv.base}/admin#/w/${t.ws.id}/${tab}`)
      await page.waitForSelector(`h1:has-text("${heading}")`)
      await drawn()
      expect([tab, await page.title()]).toEqual([tab, `${heading} · ${t.ws.name} · Capstan`])
      expect([tab, await page.isVisible('#tabs'), await page.getAttribute('#tabs a[aria-current=page]', 'href')]).toEqual([tab, true, `#/w/${t.ws.id}/${tab}`])
      expect([tab, await unlabelled()]).toEqual([tab, []])
    }
    // out of the workspace again: no tab bar on the backups page nor on the list
    await page.click('#backups-link')
    await page.waitForSelector('h1:has-text("Backups")')
    expect(await page.isHidden('#tabs')).toBe(true)
    await page.click('.brand')
    await page.waitForSelector('h1:has-text("Workspaces")')
    expect(await page.isHidden('#tabs')).toBe(true)
    // deactivating asks first: dismissed, nothing changes; accepted, it is inactive
    const answers = [false, true]
    const asked: string[] = []
    page.on('dialog', (d) => {
      asked.push(d.message())
      void (answers.shift() ? d.accept() : d.dismiss())
    })
    const button = `button[data-status="${t.ws.id}"]`
    await page.click(button)
    await Bun.sleep(300)
    expect((await srv.admin('GET', `/workspaces/${t.ws.id}`)).json.data.status).toBe('active')
    await page.click(button)
    // the list drawn again: the button now offers the way back (:has-text would also match "Deactivate")
    await page.waitForSelector(`${button}[data-to="active"]:text-is("Activate")`)
    expect((await srv.admin('GET', `/workspaces/${t.ws.id}`)).json.data.status).toBe('inactive')
    expect(asked).toHaveLength(2)
    expect(asked[0]).toContain('Deactivate this workspace?')
    // activating again does not ask
    await page.click(button)
    await page.waitForSelector(`${button}[data-to="inactive"]:text-is("Deactivate")`)
    expect(asked).toHaveLength(2)
    await page.close()
  })

  test('campaigns: write a template, draft a campaign for an audience counted as it is typed, launch it, watch it live (and why it waits), pause and resume it, to the end', async () => {
    const t = await srv.tenant()
    await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { hourly_cap: 3, daily_cap: 500, min_gap_seconds: 0, max_gap_seconds: 0 } } })
    const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), name: 'Shop', driver: 'sandbox', config: { delivered_after_ms: 50, read_after_ms: null, fail_recipients: [] } })).json.data
    for (let i = 0; i < 6; i++) await srv.api(t.key, 'POST', '/contacts', { json: { phone: newPhone(), name: `Kim ${i}`, consent_status: 'opted_in', metadata: { list: 'spring' } } })
    await srv.api(t.key, 'POST', '/contacts', { json: { phone: newPhone(), name: 'Not on the list', consent_status: 'opted_in', metadata: { list: 'autumn' } } })
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    page.on('dialog', (d) => void d.accept())
    await page.addInitScript('window.__xss = undefined')
    await signIn(page)
    // a template, written in the browser
    await page.goto(`${srv.base}/admin#/w/${t.ws.id}/templates`)
    await page.fill('#template-form input[name=name]', 'Spring <svg/onload=window.__xss=1>')
    await page.fill('#template-form textarea[name=body]', 'Hi {{name}}, spring is here.')
    await page.selectOption('#template-form select[name=category]', 'marketing')
    await page.click('#template-form button[type=submit]')
    await page.waitForSelector('#toast:has-text("Template created")')
    const tpl = (await srv.api(t.key, 'GET', '/templates')).json.data[0]
    expect(tpl).toMatchObject({ name: 'Spring <svg/onload=window.__xss=1>', body: 'Hi {{name}}, spring is here.', category: 'marketing' })
    // its preview for one contact
    const kim = (await srv.api(t.key, 'GET', '/contacts?per_page=100')).json.data.find((c: any) => c.name === 'Kim 0')
    await page.click(`button[data-preview="${tpl.id}"]`)
    await page.fill('#preview-form input[name=phone]', kim.phone)
    await page.click('#preview-form button[type=submit]')
    await page.waitForSelector('#preview-text:has-text("Hi Kim 0, spring is here.")')
    await shot(page, 'templates')
    await page.keyboard.press('Escape')
    // a campaign: its audience counted as it is typed
    await page.click('nav a:has-text("Campaigns")')
    await page.waitForSelector('#campaign-form')
    await page.fill('#campaign-form input[name=name]', 'Spring <svg/onload=window.__xss=1>')
    await page.fill('#campaign-form textarea[name=audience]', 'list=spring')
    await page.waitForSelector('#audience-count:has-text("6 contacts now")')
    await page.click('#campaign-form button[type=submit]')
    await page.waitForSelector('#toast:has-text("Draft created")')
    const camp = (await srv.api(t.key, 'GET', '/campaigns')).json.data[0]
    expect(camp).toMatchObject({ status: 'draft', template_id: tpl.id, connection_id: conn.id, audience: { metadata: { list: 'spring' } } })
    // launched; from here on the page is never loaded again (the marker would be gone)
    await page.evaluate('window.__stay = 1')
    await page.click(`button[data-campaign-action="schedule"][data-id="${camp.id}"]`)
    await page.waitForSelector('#toast:has-text("Campaign launched")')
    const card = `[data-campaign="${camp.id}"]`
    // three go at once; then it says why it waits: the number's hourly cap
    await page.waitForSelector(`${card} .why:has-text("reached its hourly cap (3)")`, { timeout: 15_000 })
    expect(await page.textContent(`${card} .counts`)).toContain('total 6')
    await shot(page, 'campaigns')
    await page.click(`${card} button[data-campaign-action="pause"]`)
    await page.waitForSelector(`${card} .why:has-text("Paused by an operator")`)
    await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { hourly_cap: 1000 } } })
    await page.click(`${card} button[data-campaign-action="resume"]`)
    await page.waitForSelector(`${card}[data-status="completed"]`, { timeout: 20_000 })
    await page.waitForSelector(`${card} .counts:has-text("delivered 6")`, { timeout: 15_000 }).catch(async () => {
      // delivery receipts may still be on their way when it completes: the next refresh shows them
      await page.waitForSelector(`${card} .counts:has-text("delivered 6")`, { timeout: 10_000 })
    })
    expect(await page.evaluate('window.__stay')).toBe(1)
    // its recipients, each with its message's status
    await page.click(`${card} a:has-text("Recipients")`)
    await page.waitForSelector('#recipients-total:has-text("6 recipients")')
    expect(await page.$$eval('tbody tr', (rows) => rows.length)).toBe(6)
    expect(await page.evaluate('window.__xss')).toBeUndefined()
    await page.close()
  }, 90_000)

  test('numbers: add a Cloud API number with every setting (secrets never shown again), change a sandbox number\'s settings, see each number\'s failures and last error in words', async () => {
    const pnid = String(Math.floor(1e14 + Math.random() * 8e14))
    const phone = newPhone('+1444')
    const graph = Bun.serve({
      hostname: '127.0.0.1',
      port: 0,
      fetch(req) {
        const path = new URL(req.url).pathname
        if (path === `/v26.0/${pnid}`) return Response.json({ id: pnid, display_phone_number: phone.slice(1), verified_name: 'Acme' })
        return Response.json({ error: { message: 'Unsupported request', code: 100 } }, { status: 400 })
      },
    })
    try {
      const t = await srv.tenant()
      const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
      await page.addInitScript('window.__xss = undefined')
      await signIn(page)
      await page.goto(`${srv.base}/admin#/w/${t.ws.id}/numbers`)
      await page.waitForSelector('#new-conn')
      // the Cloud API fields show only for a Cloud API number
      expect(await page.isVisible('#new-conn input[name=phone_number_id]')).toBe(false)
      await page.selectOption('#new-conn select[name=driver]', 'cloud_api')
      await page.fill('#new-conn input[name=phone]', phone)
      await page.fill('#new-conn input[name=name]', 'Support <svg/onload=window.__xss=1>')
      await page.fill('#new-conn input[name=phone_number_id]', pnid)
      await page.fill('#new-conn input[name=access_token]', 'EAAG-secret-token-from-the-form')
      await page.fill('#new-conn input[name=app_secret]', 'app-secret-from-the-form')
      await page.fill('#new-conn input[name=verify_token]', 'verify-from-the-form')
      await page.fill('#new-conn input[name=waba_id]', '102290129340398')
      await page.fill('#new-conn input[name=graph_version]', 'v26.0')
      await page.fill('#new-conn input[name=graph_base_url]', `http://127.0.0.1:${graph.port}`)
      const [posted] = await Promise.all([page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/connections')), page.click('#new-conn button[type=submit]')])
      await page.waitForSelector('#toast:has-text("Number added")')
      const seen = [posted.postData()!]
      expect(JSON.parse(seen[0]!)).toMatchObject({ phone, driver: 'cloud_api', config: { phone_number_id: pnid, access_token: 'EAAG-secret-token-from-the-form', app_secret: 'app-secret-from-the-form', verify_token: 'verify-from-the-form', waba_id: '102290129340398', graph_version: 'v26.0', graph_base_url: `http://127.0.0.1:${graph.port}` } })
      const cloud = (await srv.admin('GET', `/workspaces/${t.ws.id}/connections`)).json.data[0]
      expect(cloud).toMatchObject({ phone, driver: 'cloud_api', status: 'online', config: { access_token: '(set)', app_secret: '(set)', verify_token: '(set)', phone_number_id: pnid } })
      // never on the page again; its callback URL is
      await page.waitForSelector(`[data-number="${cloud.id}"]`)
      const html = await page.content()
      for (const secret of ['EAAG-secret-token-from-the-form', 'app-secret-from-the-form', 'verify-from-the-form']) expect(html).not.toContain(secret)
      expect(await page.textContent(`[data-number="${cloud.id}"]`)).toContain(`/hooks/whatsapp/${cloud.id}`)
      await shot(page, 'numbers-cloud')
      // a sandbox number's settings, changed in the browser; its failures, counted with the last error's words
      const sandbox = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
      const refused = newPhone()
      await page.reload()
      await page.click(`[data-number="${sandbox.id}"] summary`)
      await page.fill(`form[data-settings="${sandbox.id}"] input[name=delivered_after_ms]`, '')
      await page.fill(`form[data-settings="${sandbox.id}"] input[name=fail_recipients]`, refused)
      await page.click(`form[data-settings="${sandbox.id}"] button[type=submit]`)
      await page.waitForSelector('#toast:has-text("Settings saved")')
      expect((await srv.admin('GET', `/connections/${sandbox.id}`)).json.data.config).toMatchObject({ delivered_after_ms: null, read_after_ms: 3000, fail_recipients: [refused] })
      await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
      const m = (await srv.api(t.key, 'POST', '/messages', { json: { connection_id: sandbox.id, recipient: refused, body: 'x' } })).json.data
      await waitFor(async () => (await srv.api(t.key, 'GET', `/messages/${m.id}`)).json.data.status === 'failed')
      await page.reload()
      await page.waitForSelector(`[data-number="${sandbox.id}"] [data-last-failure]`)
      expect(await page.textContent(`[data-number="${sandbox.id}"] .counts`)).toContain('failed in 24 h 1')
      expect(await page.textContent(`[data-number="${sandbox.id}"] [data-last-failure]`)).toContain('recipient_unreachable The network could not deliver to this recipient.')
      // the overview names it among the numbers that need a look
      await page.click('nav a:has-text("Overview")')
      await page.waitForSelector('.attention')
      expect(await page.textContent('.attention')).toContain(`${sandbox.phone} 1 failed in 24 h — last: recipient_unreachable`)
      expect(await page.evaluate('window.__xss')).toBeUndefined()
      await page.close()
    } finally {
      graph.stop(true)
    }
  })

  test('groups: search them, sync every number with one button and see each outcome; media: each file with its type, size, scan verdict and expiry, downloaded', async () => {
    const t = await srv.tenant()
    const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
    const people = (n: number) => Array.from({ length: n }, () => newPhone())
    expect((await srv.admin('PUT', `/connections/${conn.id}/sandbox/groups`, { groups: [
      { external_id: 'g-1', name: 'VIP <svg/onload=window.__xss=1>', participants: people(12), announce: false, admin: true },
      { external_id: 'g-2', name: 'Newsletter', participants: people(40), announce: true, admin: false },
    ] })).status).toBe(200)
    const fd = new FormData()
    fd.set('file', new File([files.pdf()], 'price list <img src=x onerror=window.__xss=3>.pdf'))
    const media = (await srv.api(t.key, 'POST', '/media', { multipart: fd })).json.data
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    await page.addInitScript('window.__xss = undefined')
    await signIn(page)
    await page.goto(`${srv.base}/admin#/w/${t.ws.id}/groups`)
    await page.waitForSelector('#groups-total:has-text("0 groups")')
    await page.click('#group-sync')
    await page.waitForSelector(`#sync-outcome:has-text("${conn.phone}: synced · 2 groups")`)
    expect(await page.textContent('#groups-total')).toContain('2 groups')
    // largest first; a search by name
    expect(await page.$$eval('tbody tr td:first-child', (tds) => tds.map((td) => td.textContent))).toEqual(['Newsletter (announcements)', 'VIP <svg/onload=window.__xss=1>'])
    await page.fill('#group-search input[name=search]', 'vip')
    await page.click('#group-search button[type=submit]')
    await page.waitForSelector('#groups-total:has-text("1 group ·")')
    await shot(page, 'groups')
    await page.click('nav a:has-text("Media")')
    await page.waitForSelector(`tr[data-media="${media.id}"]`)
    const row = (await page.textContent(`tr[data-media="${media.id}"]`))!
    expect(row).toContain('price list <img src=x onerror=window.__xss=3>.pdf')
    expect(row).toContain('application/pdf')
    expect(row).toContain('clean')
    const href = (await page.getAttribute(`tr[data-media="${media.id}"] a`, 'href'))!
    const got = await page.evaluate(`fetch(${JSON.stringify(href)}).then((r) => r.status)`)
    expect(got).toBe(200)
    await shot(page, 'media')
    expect(await page.evaluate('window.__xss')).toBeUndefined()
    await page.close()
  })

  test('contacts found by name and filtered by consent; suppressions a page at a time; the audit log with names, its actor, by kind', async () => {
    const t = await srv.tenant()
    for (const [name, consent] of [['Ada Lovelace', 'opted_in'], ['Adam Smith', 'opted_out'], ['Grace Hopper', 'opted_in'], ['<svg/onload=window.__xss=1>', 'unknown']]) await srv.api(t.key, 'POST', '/contacts', { json: { phone: newPhone(), name, consent_status: consent } })
    const known = newPhone()
    for (let i = 0; i < 55; i++) await srv.admin('POST', `/workspaces/${t.ws.id}/suppressions`, { phone: i === 7 ? known : newPhone(), reason: `complaint ${i}` })
    const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), driver: 'sandbox' })).json.data
    const hook = (await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: 'http://127.0.0.1:9/audited' })).json.data
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    await page.addInitScript('window.__xss = undefined')
    await signIn(page)
    await page.goto(`${srv.base}/admin#/w/${t.ws.id}/contacts`)
    await page.waitForSelector('#contacts-total:has-text("4 contacts")')
    await page.fill('#find input[name=search]', 'ADA')
    await page.click('#find button[type=submit]')
    await page.waitForSelector('#contacts-total:has-text("2 contacts")')
    await page.selectOption('#find select[name=consent]', 'opted_in')
    await page.click('#find button[type=submit]')
    await page.waitForSelector('#contacts-total:has-text("1 contacts")')
    expect(await page.isVisible('td:has-text("Ada Lovelace")')).toBe(true)
    await page.fill('#find input[name=search]', '')
    await page.selectOption('#find select[name=consent]', 'unknown')
    await page.click('#find button[type=submit]')
    await page.waitForSelector('td:has-text("<svg/onload=window.__xss=1>")')
    await shot(page, 'contacts')
    // 55 suppressed numbers, 50 a page
    await page.click('nav a:has-text("Suppressions")')
    await page.waitForSelector('#suppressions-total:has-text("55 numbers · page 1 of 2")')
    await page.click('a:has-text("older →")')
    await page.waitForSelector('#suppressions-total:has-text("page 2 of 2")')
    expect(await page.$$eval('tbody tr', (rows) => rows.length)).toBe(5)
    await page.fill('#find-suppressed input[name=phone]', known)
    await page.click('#find-suppressed button[type=submit]')
    await page.waitForSelector('#suppressions-total:has-text("1 number ·")')
    expect(await page.textContent('tbody')).toContain('complaint 7')
    // the audit log: names beside ids, its actor, one kind at a time
    await page.click('nav a:has-text("Audit log")')
    await page.waitForSelector('#audit-total')
    const text = (await page.textContent('main'))!
    expect(text).toContain(conn.phone)
    expect(text).toContain('http://127.0.0.1:9/audited')
    // who: the entries above were made with the admin token from this machine
    expect(text).toContain('the admin token from 127.0.0.1')
    await page.selectOption('#audit-filter select[name=action]', 'webhook')
    await page.click('#audit-filter button[type=submit]')
    await page.waitForSelector('#audit-total:has-text("1 entry")')
    expect(await page.textContent('tbody')).toContain(hook.url)
    await shot(page, 'audit')
    expect(await page.evaluate('window.__xss')).toBeUndefined()
    await page.close()
  })

  test('a tour of every page with a workspace in use: each one fits a 390 px screen without sideways scrolling (screenshots of each, desktop and phone)', async () => {
    const t = await srv.tenant()
    await srv.admin('PATCH', `/workspaces/${t.ws.id}`, { settings: { sending_policy: { min_gap_seconds: 0, max_gap_seconds: 0 } } })
    const conn = (await srv.admin('POST', `/workspaces/${t.ws.id}/connections`, { phone: newPhone('+1444'), name: 'Shop', driver: 'sandbox', config: { delivered_after_ms: 20, read_after_ms: 40, fail_recipients: [] } })).json.data
    await srv.admin('PUT', `/connections/${conn.id}/sandbox/groups`, { groups: [{ external_id: 'g-1', name: 'VIP customers', participants: [newPhone(), newPhone()], announce: false, admin: true }] })
    await srv.admin('POST', `/workspaces/${t.ws.id}/groups/sync`)
    for (const name of ['Ada Lovelace', 'Grace Hopper', 'Alan Turing']) await srv.api(t.key, 'POST', '/contacts', { json: { phone: newPhone(), name, consent_status: 'opted_in', metadata: { list: 'tour' } } })
    const tpl = (await srv.api(t.key, 'POST', '/templates', { json: { name: 'Order update', body: 'Hi {{name}}, your order has shipped.' } })).json.data
    const camp = (await srv.api(t.key, 'POST', '/campaigns', { json: { name: 'Shipping notice', template_id: tpl.id, connection_id: conn.id, audience: { metadata: { list: 'tour' } } } })).json.data
    await srv.api(t.key, 'POST', `/campaigns/${camp.id}/schedule`, { json: {} })
    await waitFor(async () => (await srv.api(t.key, 'GET', `/campaigns/${camp.id}`)).json.data.status === 'completed')
    const fd = new FormData()
    fd.set('file', new File([files.pdf()], 'invoice-1001.pdf'))
    await srv.api(t.key, 'POST', '/media', { multipart: fd })
    await srv.admin('POST', `/workspaces/${t.ws.id}/webhooks`, { url: 'http://127.0.0.1:9/orders' })
    await srv.admin('POST', `/workspaces/${t.ws.id}/suppressions`, { phone: newPhone(), reason: 'asked not to be contacted' })
    await srv.admin('POST', `/workspaces/${t.ws.id}/keys`, { name: 'shop backend' })
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    await signIn(page)
    const stops: [string, string, string][] = [['#/workspaces', 'Workspaces', 'workspaces'], ['#/backups', 'Backups', 'backups']]
    for (const [tab, heading] of [['overview', 'Overview'], ['keys', 'API keys'], ['numbers', 'Numbers'], ['policy', 'Sending policy and limits'], ['messages', 'Messages'], ['contacts', 'Contacts'], ['templates', 'Templates'], ['campaigns', 'Campaigns'], ['groups', 'Groups'], ['media', 'Media'], ['webhooks', 'Webhooks'], ['suppressions', 'Suppression list'], ['audit', 'Audit log']]) stops.push([`#/w/${t.ws.id}/${tab}`, heading!, tab!])
    for (const [hash, heading, name] of stops) {
      for (const [width, suffix] of [[1200, ''], [390, '-phone']] as const) {
        await page.setViewportSize({ width, height: 860 })
        await page.goto(`${srv.base}/admin${hash}`)
        await page.waitForSelector(`h1:has-text("${heading}")`)
        await page.waitForLoadState('networkidle')
        const overflow = await page.evaluate('document.documentElement.scrollWidth - document.documentElement.clientWidth')
        expect([name, width, overflow]).toEqual([name, width, 0])
        await shot(page, `tour-${name}${suffix}`)
      }
    }
    await page.close()
  }, 120_000)

  test('a banner above every page says what is wrong with the appliance: here, clamd unreachable', async () => {
    const bare = await TestServer.start() // its CAPSTAN_CLAMD names a socket nothing listens on
    const page = await browser.newPage({ viewport: { width: 1200, height: 860 } })
    try {
      await signIn(page, bare)
      await page.waitForSelector('#health:has-text("The malware scanner (clamd) is unreachable")')
      expect(await page.textContent('#health')).not.toContain('disk')
    } finally {
      await page.close()
      await bare.close()
    }
  })
})
