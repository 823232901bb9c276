// The chat page's Markdown renderer, in Node with a small stand-in for the
// DOM: what renderMarkdown builds for code spans, bold and links (found in
// linear time since review L8), including the inputs that made the old
// regex quadratic. No gateway and no browser; run by test_chat_page.py.
import assert from 'node:assert/strict';
import { test } from 'node:test';

import { loadRender } from './render_in_node.mjs';

const { renderMarkdown, delimitedSpans } = await loadRender();

/** Rendered nodes as compact markup: text as is, elements as <tag>…</tag>. */
function show(node) {
  if ('text' in node) return node.text;
  const inner = node.children.map(show).join('');
  return node.tag === '#fragment' ? inner : `<${node.tag}>${inner}</${node.tag}>`;
}
const md = (src) => show(renderMarkdown(src));

test('code spans close at the next run of the same length', () => {
  assert.equal(md('a `b` c'), '<p>a <code>b</code> c</p>');
  assert.equal(md('``x ` y``'), '<p><code>x ` y</code></p>');
  assert.equal(md('`a``b`'), '<p><code>a``b</code></p>');
  assert.equal(md('`` ` ``'), '<p><code>`</code></p>', 'one space each side is stripped');
  assert.equal(md('``a`'), '<p>``a`</p>', 'runs without a closer of their length are text');
  assert.equal(md('`**not bold**`'), '<p><code>**not bold**</code></p>');
  assert.equal(md('\\`not code`'), '<p>`not code`</p>', 'an escaped backtick opens nothing');
});

test('bold closes at the first closer on its line after a non-blank character', () => {
  assert.equal(md('**a** and __b__'), '<p><strong>a</strong> and <strong>b</strong></p>');
  assert.equal(md('**a ** b**'), '<p><strong>a ** b</strong></p>');
  assert.equal(md('** a**'), '<p>** a**</p>', 'an opener followed by a blank is text');
  assert.equal(md('**a `b** c`'), '<p><strong>a `b</strong> c`</p>', 'the leftmost span wins');
  assert.equal(md('**x *y* z**'), '<p><strong>x <em>y</em> z</strong></p>');
  assert.equal(md('*a* _b_ [t](https://e.example/)'),
    '<p><em>a</em> <em>b</em> <a>t</a></p>', 'italics and links still come from the regex');
  assert.equal(md('# **h** `c`'), '<h1><strong>h</strong> <code>c</code></h1>');
});

test("a link's text stops at the next [ and its URL at the next (", () => {
  assert.equal(md('[a [b](https://e.example/)'), '<p>[a <a>b</a></p>');
  assert.equal(md('see [x](https://e.example/(y))'), '<p>see [x](https://e.example/(y))</p>');
  assert.equal(md('![pic](https://e.example/p.png)'), '<p><a>[image: pic]</a></p>');
});

test('openers without closers, the inputs that were quadratic, still render every character', () => {
  let ticks = '';
  for (let k = 1; ticks.length < 100_000; k++) ticks += '`'.repeat(k) + ' a ';
  for (const src of [ticks, '**a '.repeat(25_000), '__a '.repeat(25_000), '!['.repeat(50_000), '[a]('.repeat(25_000)]) {
    const out = md(src);
    assert.equal(out, `<p>${src.trim()}</p>`, 'nothing closes, so all of it is text');
  }
  // Closers far away: every opener pairs with the next run of its length.
  const spans = delimitedSpans('`a` ``b`` `c` ' + '**d** '.repeat(1000));
  const kinds = [];
  for (let s = spans.next(0); s; s = spans.next(s.end)) kinds.push(`${s.kind}:${s.body}`);
  assert.deepEqual(kinds.slice(0, 4), ['code:a', 'code:b', 'code:c', 'bold:d']);
  assert.equal(kinds.length, 1003);
});
