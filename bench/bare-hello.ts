// The ceiling: a bare Bun.serve answering a small JSON body, measured in the same run as Capstan.
const server = Bun.serve({
  hostname: '127.0.0.1',
  port: Number(process.env.PORT ?? 0),
  fetch: () => Response.json({ data: { status: 'ok' } }),
})
console.log(`listening ${server.port}`)
