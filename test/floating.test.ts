/**
 * No promise is dropped in src/: a call whose result is a promise is awaited, returned, handed on
 * or marked `void` on purpose. As modules move onto the store seam their methods become async, and
 * a call left as it was (`svc.x.remove(id)` as a statement) would answer before the write happened
 * and lose its error; TypeScript itself does not flag it. Checked with TypeScript 5's compiler API
 * (the `typescript5` devDependency; the project's own tsc 7 has no API).
 */
import { expect, setDefaultTimeout, test } from 'bun:test'
import { join, relative } from 'node:path'
import ts from 'typescript5'

setDefaultTimeout(120_000)
const ROOT = join(import.meta.dir, '..')

test('no promise in src/ is left floating (awaited, returned, or marked void), nor put in an object as a value', () => {
  const config = ts.getParsedCommandLineOfConfigFile(join(ROOT, 'tsconfig.json'), {}, { ...ts.sys, onUnRecoverableConfigFileDiagnostic: () => {} })!
  const files = config.fileNames.filter((f) => relative(ROOT, f).startsWith('src/'))
  const program = ts.createProgram(files, { ...config.options, noEmit: true })
  const checker = program.getTypeChecker()
  const isPromise = (t: ts.Type): boolean => (t.isUnion() ? t.types.some(isPromise) : !!t.getProperty('then') && !!t.getCallSignatures && t.getSymbol()?.getName() === 'Promise')
  // a chain that ends by handling the rejection: .catch(f), .then(f, g), or .finally after one of those
  const handled = (call: ts.CallExpression | ts.NewExpression): boolean => {
    if (!ts.isCallExpression(call) || !ts.isPropertyAccessExpression(call.expression)) return false
    const name = call.expression.name.text
    const inner = call.expression.expression
    if (name === 'catch' || (name === 'then' && call.arguments.length === 2)) return true
    return name === 'finally' && ts.isCallExpression(inner) && handled(inner)
  }
  const found: string[] = []
  for (const sf of program.getSourceFiles()) {
    if (!files.includes(sf.fileName)) continue
    const visit = (node: ts.Node) => {
      if (ts.isExpressionStatement(node)) {
        const e = node.expression
        const call = ts.isCallExpression(e) || ts.isNewExpression(e) ? e : null
        if (call && isPromise(checker.getTypeAtLocation(call)) && !handled(call)) {
          const { line } = sf.getLineAndCharacterOfPosition(node.getStart())
          found.push(`${relative(ROOT, sf.fileName)}:${line + 1}: ${node.getText().slice(0, 80)}`)
        }
      }
      // a promise as a field of an answer (`{ data: svc.x.create() }`) would be sent as {}
      if (ts.isPropertyAssignment(node) && (ts.isCallExpression(node.initializer) || ts.isNewExpression(node.initializer)) && isPromise(checker.getTypeAtLocation(node.initializer))) {
        const { line } = sf.getLineAndCharacterOfPosition(node.getStart())
        found.push(`${relative(ROOT, sf.fileName)}:${line + 1}: ${node.getText().slice(0, 80)}`)
      }
      ts.forEachChild(node, visit)
    }
    visit(sf)
  }
  expect(found).toEqual([])
})

test('the check finds a dropped promise', () => {
  const file = join(ROOT, 'test/support/floating-sample.ts')
  const host = ts.createCompilerHost({ strict: true, noEmit: true, target: ts.ScriptTarget.ESNext })
  const source = 'async function write(): Promise<number> { return 1 }\nexport function handler() {\n  write()\n  void write()\n  return write()\n}\n'
  const getSourceFile = host.getSourceFile
  host.getSourceFile = (name, lang) => (name === file ? ts.createSourceFile(name, source, lang) : getSourceFile(name, lang))
  const program = ts.createProgram([file], { strict: true, noEmit: true, target: ts.ScriptTarget.ESNext, lib: ['lib.esnext.d.ts'] }, host)
  const checker = program.getTypeChecker()
  const sf = program.getSourceFile(file)!
  const lines: number[] = []
  const visit = (node: ts.Node) => {
    if (ts.isExpressionStatement(node) && ts.isCallExpression(node.expression) && checker.getTypeAtLocation(node.expression).getSymbol()?.getName() === 'Promise') lines.push(sf.getLineAndCharacterOfPosition(node.getStart()).line + 1)
    ts.forEachChild(node, visit)
  }
  visit(sf)
  expect(lines).toEqual([3])
})
