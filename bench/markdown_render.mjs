// Times the chat page's Markdown renderer on the inputs of review L8 (openers
// without closers, about 199 KB each, under MAX_MARKDOWN), for the render.js
// in this tree and, as the reference in the same run, for the one of another
// commit. Node only, with a stand-in for the DOM (tests/browser/render_in_node.mjs).
//
//   node bench/markdown_render.mjs [reference-commit]   # default: the parent of the L8 fix (ccfd548~1)
import { execFileSync } from 'node:child_process';

import { loadRender, root } from '../tests/browser/render_in_node.mjs';

const reference = process.argv[2] ?? 'ccfd548~1';

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

const current = (await loadRender()).renderMarkdown;
const old = (await loadRender(execFileSync('git', ['-C', root, 'show', `${reference}:clients/web/render.js`], { encoding: 'utf8' }))).renderMarkdown;
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
