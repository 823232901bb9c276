// The chat page's render.js in Node: just enough of a DOM for it (elements,
// text nodes, fragments) and the module loaded beside cellgate.js, as the
// gateway serves the two (/static/). Used by render.test.mjs and by
// bench/markdown_render.mjs.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

export const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

class FakeNode {
  constructor(tag) { this.tag = tag; this.children = []; this.attrs = {}; this.dataset = {}; this.className = ''; }
  appendChild(c) { this.children.push(c); return c; }
  setAttribute(k, v) { this.attrs[k] = v; }
  set textContent(t) { this.children = [{ text: String(t) }]; }
}
globalThis.document = {
  createElement: (tag) => new FakeNode(tag),
  createTextNode: (text) => ({ text }),
  createDocumentFragment: () => new FakeNode('#fragment'),
};

/**
 * render.js's exports, from `source` (default: this tree's file).
 * @param {string} [source]
 */
export async function loadRender(source) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cellgate-render-'));
  fs.writeFileSync(path.join(dir, 'render.js'), source ?? fs.readFileSync(path.join(root, 'clients/web/render.js')));
  fs.copyFileSync(path.join(root, 'clients/js/cellgate.js'), path.join(dir, 'cellgate.js'));
  return import(pathToFileURL(path.join(dir, 'render.js')).href);
}
