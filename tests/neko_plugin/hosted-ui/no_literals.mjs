// No string a person reads is hard-coded in the plugin's TSX: every JSX
// text with a letter in it, and every text prop (title, label, ...) given a
// string literal, is reported with its line. Parsed with TypeScript's own
// parser (the package check_tsx.sh installed), not with patterns.
// Usage: node no_literals.mjs TYPESCRIPT_DIR FILE.tsx...
import { createRequire } from "node:module"
import { readFileSync } from "node:fs"

const [tsDir, ...files] = process.argv.slice(2)
const ts = createRequire(tsDir + "/")("typescript")
const TEXT_PROPS = new Set(["title", "label", "subtitle", "message", "placeholder", "caption", "emptyText", "help", "description", "alt"])
const LETTER = /\p{L}/u
let problems = 0

for (const file of files) {
  const source = ts.createSourceFile(file, readFileSync(file, "utf8"), ts.ScriptTarget.ES2020, true, ts.ScriptKind.TSX)
  const report = (node, what) => {
    const { line } = source.getLineAndCharacterOfPosition(node.getStart())
    console.error(`${file}:${line + 1}: ${what} is hard-coded; use t(...)`)
    problems++
  }
  const visit = (node) => {
    if (node.kind === ts.SyntaxKind.JsxText && LETTER.test(node.text)) {
      report(node, `JSX text ${JSON.stringify(node.text.trim())}`)
    }
    if (ts.isJsxAttribute(node) && node.initializer && TEXT_PROPS.has(node.name.getText(source))) {
      const init = node.initializer
      const literal = ts.isStringLiteral(init) ? init
        : ts.isJsxExpression(init) && init.expression && (ts.isStringLiteral(init.expression) || ts.isNoSubstitutionTemplateLiteral(init.expression)) ? init.expression
        : null
      if (literal && LETTER.test(literal.text)) report(node, `${node.name.getText(source)}=${JSON.stringify(literal.text)}`)
    }
    // `label: "..."` in an object given to a prop (DataTable columns,
    // KeyValue items, Select options) is read by a person too.
    if (ts.isPropertyAssignment(node) && TEXT_PROPS.has(node.name.getText(source)) && ts.isStringLiteral(node.initializer) && LETTER.test(node.initializer.text)) {
      report(node, `${node.name.getText(source)}: ${JSON.stringify(node.initializer.text)}`)
    }
    ts.forEachChild(node, visit)
  }
  visit(source)
}
if (problems > 0) process.exit(1)
console.log(`no_literals: no hard-coded UI string in ${files.length} files`)
