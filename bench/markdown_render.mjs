// Times the chat page's Markdown renderer on the inputs of review L8 (openers
// without closers, about 199 KB each, under MAX_MARKDOWN), for the render.js
// in this tree and, as the reference in the same run, for the one of another
// commit. Node only, with a stand-in for the DOM.
//
//   node bench/markdown_render.mjs [reference-commit]   # default: the parent of the L8 fix (ccfd548~1)
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const reference = process.argv[2] ?? 'ccfd548~1';

class FakeNode {
  constructor(tag) { this.tag = tag; this.children = []; this.attrs = {}; this.dataset = {}; }
  appendChild(c) { this.children.push(c); return c; }
  setAttribute(k, v) { this.attrs[k] = v; }
  set textContent(t) { this.children = [{ text: String(t) }]; }
}
globalThis.document = {
  createElement: (tag) => new FakeNode(tag),
  createTextNode: (text) => ({ text }),
  createDocumentFragment: () => new FakeNode('#fragment'),
};

// render.js beside cellgate.js, as the gateway serves them.
async function load(renderSource) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cellgate-md-bench-'));
  fs.writeFileSync(path.join(dir, 'render.js'), renderSource);
  fs.copyFileSync(path.join(root, 'clients/js/cellgate.js'), path.join(dir, 'cellgate.js'));
  return (await import(pathToFileURL(path.join(dir, 'render.js')).href)).renderMarkdown;
}

const size = 199_000;
let ticks = '';
for (let k = 1; ticks.length < size - 400; k++) ticks += '`'.repeat(k) + ' a ';
const inputs = {
  'backtick runs': ticks,
  'unclosed **': '**a '.repeat(size / 4),
  'unclosed __': '__a '.repeat(size / 4),
  'closed code spans': '`a` '.repeat(size / 4),
  '![ runs': '!['.repeat(size / 2 - 1),
  'unclosed [a](': '[a]('.repeat(size / 4 - 1),
};

const current = await load(fs.readFileSync(path.join(root, 'clients/web/render.js'), 'utf8'));
const old = await load(execFileSync('git', ['-C', root, 'show', `${reference}:clients/web/render.js`], { encoding: 'utf8' }));
const time = (render, text) => {
  const t = performance.now();
  render(text);
  return (performance.now() - t) / 1000;
};
console.log(`${'input'.padEnd(20)} ${'bytes'.padStart(7)} ${'this tree'.padStart(10)} ${reference.padStart(12)}   ratio`);
for (const [name, text] of Object.entries(inputs)) {
  const now = time(current, text), then = time(old, text);
  console.log(`${name.padEnd(20)} ${String(text.length).padStart(7)} ${now.toFixed(3).padStart(9)}s ${then.toFixed(3).padStart(11)}s ${(then / Math.max(now, 1e-4)).toFixed(1).padStart(7)}x`);
}
