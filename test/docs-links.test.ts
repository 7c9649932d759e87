/**
 * The documentation holds together: every page of docs/ is linked from the README and links back
 * to it and to its neighbours, and every relative link — to a file or to a heading in one — goes
 * somewhere that exists.
 */
import { describe, expect, setDefaultTimeout, test } from 'bun:test'
import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'

setDefaultTimeout(10_000)

const root = join(import.meta.dir, '..')
const pages = readdirSync(join(root, 'docs')).filter((f) => f.endsWith('.md'))
const files = ['README.md', ...pages.map((p) => `docs/${p}`)]
const text = (f: string) => readFileSync(join(root, f), 'utf8')

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
const slug = (heading: string) =>
  heading
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\- _]/gu, '')
    .replace(/ /g, '-')

/** The anchors of a Markdown file's headings (outside code blocks). */
function anchors(f: string): Set<string> {
  const out = new Set<string>()
  let fence = false
  for (const line of text(f).split('\n')) {
    if (line.startsWith('```')) fence = !fence
    const m = !fence && /^#{1,6} (.*)$/.exec(line)
    if (m) out.add(slug(m[1]!))
  }
  return out
}

/** Relative links of a Markdown file, outside code blocks: [text](target). */
function links(f: string): string[] {
  const body = text(f).replace(/```[\s\S]*?```/g, '')
  return [...body.matchAll(/\]\(([^)\s]+)\)/g)].map((m) => m[1]!).filter((t) => !/^[a-z]+:/.test(t))
}

describe('documentation', () => {
  test('the README is the front door: under 250 lines, and it links every page of docs/', () => {
    const readme = text('README.md')
    expect(readme.split('\n').length).toBeLessThan(250)
    expect(pages.length).toBeGreaterThanOrEqual(10)
    for (const p of pages) expect([p, readme.includes(`](docs/${p})`)]).toEqual([p, true])
  })

  test('each page links back to the README and to the pages before and after it', () => {
    const order = [...text('README.md').matchAll(/\]\(docs\/([a-z-]+\.md)\)/g)].map((m) => m[1]!).filter((p, i, all) => all.indexOf(p) === i)
    expect(order.sort()).toEqual([...pages].sort())
    for (const p of pages) {
      const t = text(`docs/${p}`)
      expect([p, t.includes('](../README.md)')]).toEqual([p, true])
    }
    // the pages chain: each names the next, and the next names it
    const chain = [...text('README.md').matchAll(/^\| \[[^\]]+\]\(docs\/([a-z-]+\.md)\)/gm)].map((m) => m[1]!)
    expect(chain.length).toBe(pages.length)
    for (let i = 0; i + 1 < chain.length; i++) {
      expect([chain[i], text(`docs/${chain[i]}`).includes(`](${chain[i + 1]})`)]).toEqual([chain[i], true])
      expect([chain[i + 1], text(`docs/${chain[i + 1]}`).includes(`](${chain[i]})`)]).toEqual([chain[i + 1], true])
    }
  })

  test('every relative link goes to a file that exists, and to a heading that exists in it', () => {
    const broken: string[] = []
    for (const f of files) {
      for (const target of links(f)) {
        const [path, anchor] = target.split('#') as [string, string | undefined]
        const file = path ? relative(root, join(root, dirname(f), path)) : f
        if (!existsSync(join(root, file))) broken.push(`${f}: ${target} (no such file)`)
        else if (anchor && file.endsWith('.md') && !anchors(file).has(anchor)) broken.push(`${f}: ${target} (no such heading)`)
      }
    }
    expect(broken).toEqual([])
  })
})
