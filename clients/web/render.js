// Rendering of kernel output for the chat page.
//
// Kernel output is hostile. Everything here builds DOM nodes from it with
// createElement/textContent; nothing a kernel sends is ever parsed as HTML in
// the page. The one exception by design is text/html, which goes into an
// <iframe sandbox> via srcdoc: the frame has an opaque origin (never
// allow-same-origin), so whatever it runs cannot reach this page, its storage
// or its token.

import { bytesToBase64 } from './cellgate.js';

/** @param {string} tag @param {string} [cls] @param {string} [text] @returns {HTMLElement} */
export function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}

// ---------------------------------------------------------------- ANSI colours

const CUBE = [0, 95, 135, 175, 215, 255];

/** An xterm 256-colour index (≥ 16) as rgb(). @param {number} n */
function xterm(n) {
  if (n >= 232) {
    const v = 8 + 10 * (n - 232);
    return `rgb(${v}, ${v}, ${v})`;
  }
  const i = n - 16;
  return `rgb(${CUBE[Math.floor(i / 36) % 6]}, ${CUBE[Math.floor(i / 6) % 6]}, ${CUBE[i % 6]})`;
}

/**
 * Applies one SGR parameter list to the state.
 * @param {{fg: any, bg: any, bold: boolean, dim: boolean, italic: boolean, underline: boolean}} s
 * @param {number[]} codes
 */
function applySgr(s, codes) {
  if (codes.length === 0) codes = [0];
  for (let i = 0; i < codes.length; i++) {
    const c = codes[i];
    if (c === 0) Object.assign(s, { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false });
    else if (c === 1) s.bold = true;
    else if (c === 2) s.dim = true;
    else if (c === 3) s.italic = true;
    else if (c === 4) s.underline = true;
    else if (c === 22) { s.bold = false; s.dim = false; }
    else if (c === 23) s.italic = false;
    else if (c === 24) s.underline = false;
    else if (c >= 30 && c <= 37) s.fg = c - 30;
    else if (c >= 90 && c <= 97) s.fg = c - 90 + 8;
    else if (c === 39) s.fg = null;
    else if (c >= 40 && c <= 47) s.bg = c - 40;
    else if (c >= 100 && c <= 107) s.bg = c - 100 + 8;
    else if (c === 49) s.bg = null;
    else if (c === 38 || c === 48) {
      const key = c === 38 ? 'fg' : 'bg';
      if (codes[i + 1] === 5 && i + 2 < codes.length) {
        const n = codes[i + 2];
        if (n >= 0 && n <= 255) s[key] = n < 16 ? n : xterm(n);
        i += 2;
      } else if (codes[i + 1] === 2 && i + 4 < codes.length) {
        const [r, g, b] = codes.slice(i + 2, i + 5).map((v) => Math.max(0, Math.min(255, v | 0)));
        s[key] = `rgb(${r}, ${g}, ${b})`;
        i += 4;
      }
    }
  }
}

/**
 * Text with ANSI escape sequences → text nodes and <span class="ansi-…">.
 * Only SGR (colour/style) sequences are honoured; every other escape is dropped.
 * @param {string} text
 * @returns {DocumentFragment}
 */
export function ansiToNodes(text) {
  const frag = document.createDocumentFragment();
  const s = { fg: null, bg: null, bold: false, dim: false, italic: false, underline: false };
  // OSC sequences (ESC ] … BEL or ST: titles, links), CSI sequences (ESC [
  // params final), other two-character escapes, stray ESCs.
  const re = /\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[([0-9;:?]*)([@-~])|\x1b[@-Z\\-_]?/g;
  let last = 0;
  const emit = (chunk) => {
    if (!chunk) return;
    const plain = s.fg === null && s.bg === null && !s.bold && !s.dim && !s.italic && !s.underline;
    if (plain) { frag.appendChild(document.createTextNode(chunk)); return; }
    const span = document.createElement('span');
    const cls = [];
    if (typeof s.fg === 'number') cls.push(`ansi-fg-${s.fg}`);
    else if (typeof s.fg === 'string') span.style.color = s.fg;
    if (typeof s.bg === 'number') cls.push(`ansi-bg-${s.bg}`);
    else if (typeof s.bg === 'string') span.style.backgroundColor = s.bg;
    if (s.bold) cls.push('ansi-bold');
    if (s.dim) cls.push('ansi-dim');
    if (s.italic) cls.push('ansi-italic');
    if (s.underline) cls.push('ansi-underline');
    if (cls.length) span.className = cls.join(' ');
    span.textContent = chunk;
    frag.appendChild(span);
  };
  let m;
  while ((m = re.exec(text)) !== null) {
    emit(text.slice(last, m.index));
    last = re.lastIndex;
    if (m[2] === 'm') {
      const codes = m[1].split(/[;:]/).filter((x) => x !== '' && x !== '?').map((x) => parseInt(x, 10) || 0);
      applySgr(s, m[1] === '' ? [0] : codes);
    }
  }
  emit(text.slice(last));
  return frag;
}

/**
 * Stream text as a terminal would show it: a bare carriage return goes back
 * to the start of the line (progress bars), backspace removes a character.
 * @param {string} text
 */
export function terminalText(text) {
  if (!/[\r\x08]/.test(text)) return text;
  return text.replace(/\r\n/g, '\n').split('\n').map((line) => {
    let cur = line;
    if (cur.includes('\r')) {
      const parts = cur.split('\r');
      let out = '';
      for (const p of parts) out = p + out.slice(p.length);
      cur = out;
    }
    if (!cur.includes('\x08')) return cur;
    const chars = [];
    for (const ch of cur) if (ch === '\x08') chars.pop(); else chars.push(ch);
    return chars.join('');
  }).join('\n');
}

// ---------------------------------------------------------------- Markdown

const MAX_MARKDOWN = 200_000;

/** Only absolute http(s) URLs become links. @param {string} raw @returns {string|null} */
export function safeHttpUrl(raw) {
  const s = String(raw || '').trim();
  if (!/^https?:\/\//i.test(s)) return null;
  try {
    const u = new URL(s);
    return u.protocol === 'http:' || u.protocol === 'https:' ? u.href : null;
  } catch {
    return null;
  }
}

/** @param {string} href @param {Node|string} content */
function link(href, content) {
  const a = document.createElement('a');
  a.href = href;
  a.rel = 'noopener noreferrer nofollow';
  a.target = '_blank';
  a.referrerPolicy = 'no-referrer';
  if (typeof content === 'string') a.textContent = content; else a.appendChild(content);
  return a;
}

// Escapes, links, autolinks and italics: each alternative stops at the next
// delimiter of its kind (a link's text at the next `[`, its URL at the next
// `(`), so a run of openers without closers costs one step each. Code spans and bold are found by
// `delimitedSpans` instead: as regex alternatives they cost a scan to the end
// of the text per opener without a closer, quadratic in all (review L8: a
// 100 KB display of backtick runs froze the tab for 17 s).
const INLINE = new RegExp([
  '\\\\([\\\\`*_{}\\[\\]()#+\\-.!>~|])',                  // 1: escaped punctuation
  '(!?)\\[([^\\]\\n[]{0,1000})\\]\\(\\s*<?([^\\s()<>]{0,2000})>?(?:\\s+"[^"\\n]{0,500}")?\\s*\\)',  // 2,3,4: link / image
  '<(https?://[^\\s<>]{1,2000})>',                          // 5: autolink
  '\\*(?=[^\\s*])([^\\n*]*?[^\\s*])\\*',                   // 6: italic (or 1 char)
  '\\b_(?=[^\\s_])([^\\n_]*?[^\\s_])_\\b',                 // 7: italic
  '\\*(?=[^\\s*])([^\\s*])\\*',                            // 8: one-letter italic
].join('|'), 'g');

/**
 * Code spans and bold in one text, found in linear time. `next(from)` gives
 * the first span starting at or after `from`, or null; calls must come with
 * `from` never decreasing. Code spans follow CommonMark: an opening run of
 * backticks closes at the next run of the same length (maximal runs; a run
 * without one is literal text). Bold is `**x**` or `__x__` on one line, the
 * first character after the opener and the last before the closer not
 * blank, closing at the first such closer.
 * @param {string} text
 */
export function delimitedSpans(text) {
  /** @type {{pos: number, len: number, close: number}[]} */
  const runs = [];  // maximal backtick runs; close: index of the closing run, or -1
  for (let i = text.indexOf('`'); i !== -1; i = text.indexOf('`', i)) {
    let j = i;
    while (text[j] === '`') j++;
    runs.push({ pos: i, len: j - i, close: -1 });
    i = j;
  }
  const lastOfLength = new Map();
  for (let r = runs.length - 1; r >= 0; r--) {
    runs[r].close = lastOfLength.get(runs[r].len) ?? -1;
    lastOfLength.set(runs[r].len, r);
  }
  let run = 0;
  const bold = { '*': boldFinder(text, '*'), _: boldFinder(text, '_') };
  return {
    /** @param {number} from */
    next(from) {
      while (run < runs.length && (runs[run].pos < from || runs[run].close === -1)) run++;
      /** @type {{index: number, end: number, kind: string, body: string}|null} */
      let best = null;
      if (run < runs.length) {
        const open = runs[run], close = runs[open.close];
        best = makeSpan(text, open.pos, close.pos + close.len, 'code', open.pos + open.len, close.pos);
      }
      for (const find of [bold['*'], bold._]) {
        const b = find(from, best ? best.index : text.length);
        if (b && (!best || b.index < best.index)) best = b;
      }
      return best;
    },
  };
}

/**
 * A span of `text` from `index` to `end`; its body (between the delimiters)
 * is cut only when asked for: most spans found are never used.
 * @param {string} text @param {number} index @param {number} end @param {string} kind
 * @param {number} bodyStart @param {number} bodyEnd
 */
function makeSpan(text, index, end, kind, bodyStart, bodyEnd) {
  return { index, end, kind, get body() { return text.slice(bodyStart, bodyEnd); } };
}

/**
 * The first `cc…cc` bold span opening in [from, before), in amortised O(1)
 * per call over a text (from never decreases). An opener whose line has no
 * closer after it fails, and so does every later opener on that line: the
 * closers after them are a subset, so the search for that line is not
 * repeated.
 * @param {string} text @param {string} c
 */
function boldFinder(text, c) {
  const pair = c + c;
  const blank = (/** @type {string|undefined} */ ch) => ch === undefined || /\s/.test(ch);
  let opener = -2;     // the next `cc` not yet looked at (-2: not searched yet)
  let closer = -2;     // the first valid closer at or after the last search start
  let deadUntil = -1;  // openers before this index have no closer on their line
  return (/** @type {number} */ from, /** @type {number} */ before) => {
    for (;;) {
      if (opener !== -1 && opener < from) opener = text.indexOf(pair, from);
      if (opener === -1 || opener >= before) return null;
      const p = opener;
      opener = text.indexOf(pair, p + 1);
      if (p < deadUntil || blank(text[p + 2])) continue;
      let lineEnd = text.indexOf('\n', p);
      if (lineEnd === -1) lineEnd = text.length;
      // The first q ≥ p + 3 with `cc` at q and a non-blank character before
      // it. Closers only move forward, so the scan is linear over the text.
      if (closer !== -1 && closer < p + 3) {
        closer = text.indexOf(pair, p + 3);
        while (closer !== -1 && blank(text[closer - 1])) closer = text.indexOf(pair, closer + 1);
      }
      if (closer === -1 || closer >= lineEnd) {
        deadUntil = lineEnd;
        continue;
      }
      return makeSpan(text, p, closer + 2, 'bold', p + 2, closer);
    }
  };
}

/**
 * Inline Markdown → nodes appended to `parent`.
 * @param {Node} parent @param {string} text @param {number} depth
 */
function inline(parent, text, depth = 0) {
  if (depth > 6) { parent.appendChild(document.createTextNode(text)); return; }
  const spans = delimitedSpans(text);
  const pattern = new RegExp(INLINE.source, 'g');
  let at = 0;
  // The next regex match and the next span at or after `at`, each searched
  // again only once `at` has passed where it starts (undefined: not yet).
  /** @type {RegExpExecArray|null|undefined} */
  let m;
  /** @type {ReturnType<ReturnType<typeof delimitedSpans>['next']>|undefined} */
  let span;
  while (at < text.length) {
    if (m === undefined || (m && m.index < at)) {
      pattern.lastIndex = at;
      m = pattern.exec(text);
    }
    if (span === undefined || (span && span.index < at)) span = spans.next(at);
    if (span && (!m || span.index <= m.index)) {
      if (span.index > at) parent.appendChild(document.createTextNode(text.slice(at, span.index)));
      if (span.kind === 'code') {
        parent.appendChild(el('code', '', span.body.replace(/^ (.*) $/s, '$1')));
      } else {
        const b = el('strong');
        inline(b, span.body, depth + 1);
        parent.appendChild(b);
      }
      at = span.end;
      continue;
    }
    if (!m) break;
    if (m.index > at) parent.appendChild(document.createTextNode(text.slice(at, m.index)));
    inlineMatch(parent, m, depth);
    at = m.index + m[0].length;
  }
  if (at < text.length) parent.appendChild(document.createTextNode(text.slice(at)));
}

/** One match of INLINE. @param {Node} parent @param {RegExpExecArray} m @param {number} depth */
function inlineMatch(parent, m, depth) {
  if (m[1] !== undefined) {
    parent.appendChild(document.createTextNode(m[1]));
  } else if (m[3] !== undefined) {
    const url = safeHttpUrl(m[4]);
    if (m[2] === '!') {
      // No remote images (and the page's CSP forbids them): a link instead.
      const label = `[image${m[3] ? ': ' + m[3] : ''}]`;
      parent.appendChild(url ? link(url, label) : document.createTextNode(label));
    } else if (url) {
      const a = link(url, '');
      inline(a, m[3], depth + 1);
      parent.appendChild(a);
    } else {
      inline(parent, m[3], depth + 1);  // not http(s): the text only, no link
    }
  } else if (m[5] !== undefined) {
    const url = safeHttpUrl(m[5]);
    parent.appendChild(url ? link(url, m[5]) : document.createTextNode(m[5]));
  } else {
    const i = el('em');
    inline(i, m[6] ?? m[7] ?? m[8], depth + 1);
    parent.appendChild(i);
  }
}

/**
 * A tiny Markdown renderer that builds DOM nodes: headings, paragraphs,
 * bold/italic, inline and fenced code, lists, blockquotes, rules, and links
 * (http(s) only, rel=noopener). Raw HTML is shown as text.
 * @param {string} src
 * @param {number} [depth]
 * @returns {DocumentFragment}
 */
export function renderMarkdown(src, depth = 0) {
  const frag = document.createDocumentFragment();
  if (typeof src !== 'string') src = String(src ?? '');
  if (src.length > MAX_MARKDOWN || depth > 4) {
    frag.appendChild(el('pre', 'md-raw', src));
    return frag;
  }
  const lines = src.replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  /** @type {string[]} */
  let para = [];
  const flush = () => {
    if (!para.length) return;
    const p = el('p');
    inline(p, para.join(' ').trim());
    frag.appendChild(p);
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    let m;
    if ((m = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/.exec(line))) {
      flush();
      const fence = m[1];
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trimStart().startsWith(fence)) body.push(lines[i++]);
      i++;
      const pre = el('pre', 'md-code');
      const code = el('code', '', body.join('\n'));
      if (m[2]) code.dataset.lang = m[2];
      pre.appendChild(code);
      frag.appendChild(pre);
      continue;
    }
    if ((m = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/.exec(line))) {
      flush();
      const h = el(`h${m[1].length}`);
      inline(h, m[2]);
      frag.appendChild(h);
      i++;
      continue;
    }
    if (/^\s{0,3}([-*_])(\s*\1){2,}\s*$/.test(line)) {
      flush();
      frag.appendChild(el('hr'));
      i++;
      continue;
    }
    if (/^\s{0,3}>/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^\s{0,3}>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s{0,3}>\s?/, ''));
      const bq = el('blockquote');
      bq.appendChild(renderMarkdown(quoted.join('\n'), depth + 1));
      frag.appendChild(bq);
      continue;
    }
    const ul = /^\s{0,3}[-*+]\s+(.*)$/;
    const ol = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
    if (ul.test(line) || ol.test(line)) {
      flush();
      const ordered = !ul.test(line);
      const pattern = ordered ? ol : ul;
      const list = el(ordered ? 'ol' : 'ul');
      if (ordered) {
        const start = parseInt(/** @type {RegExpExecArray} */ (ol.exec(line))[1], 10);
        if (start !== 1) list.setAttribute('start', String(start));
      }
      /** @type {HTMLElement|null} */
      let item = null;
      while (i < lines.length) {
        const l = lines[i];
        const mm = pattern.exec(l);
        if (mm) {
          item = el('li');
          inline(item, ordered ? mm[2] : mm[1]);
          list.appendChild(item);
          i++;
        } else if (item && /^\s{2,}\S/.test(l)) {  // a continuation line
          item.appendChild(document.createTextNode(' '));
          inline(item, l.trim());
          i++;
        } else {
          break;
        }
      }
      frag.appendChild(list);
      continue;
    }
    if (!line.trim()) { flush(); i++; continue; }
    para.push(line);
    i++;
  }
  flush();
  return frag;
}

// ---------------------------------------------------------------- rich outputs

/** Rich MIME types in order of preference. */
export const MIME_ORDER = ['text/html', 'image/svg+xml', 'image/png', 'image/jpeg', 'text/markdown',
  'application/json', 'text/latex', 'text/plain'];

/** Clean base64 (or null when it is not base64). @param {unknown} data */
function cleanBase64(data) {
  if (typeof data !== 'string') return null;
  const s = data.replace(/\s+/g, '');
  return /^[A-Za-z0-9+/]*={0,2}$/.test(s) && s.length > 0 ? s : null;
}

/** A positive pixel size from metadata, or undefined. @param {unknown} v */
function px(v) {
  const n = Number(v);
  return Number.isFinite(n) && n > 0 && n < 10000 ? Math.round(n) : undefined;
}

/**
 * An <img> for image data: PNG/JPEG from base64, SVG from its text. SVG is
 * always an image (never inline SVG): scripts inside it cannot run.
 * @param {string} mime @param {unknown} data @param {any} meta
 * @returns {HTMLElement}
 */
export function imageOutput(mime, data, meta) {
  let b64;
  if (mime === 'image/svg+xml') {
    b64 = typeof data === 'string' ? bytesToBase64(new TextEncoder().encode(data)) : null;
  } else {
    b64 = cleanBase64(data);
  }
  if (!b64) return el('pre', 'out-text out-invalid', `[${mime}: invalid image data]`);
  const img = document.createElement('img');
  img.className = 'out-image';
  img.dataset.testid = 'output-image';
  img.dataset.mime = mime;
  img.alt = mime === 'image/svg+xml' ? 'SVG output' : 'image output';
  img.decoding = 'async';
  const m = meta && typeof meta === 'object' ? (meta[mime] && typeof meta[mime] === 'object' ? meta[mime] : meta) : {};
  const w = px(m.width);
  const h = px(m.height);
  if (w) img.width = w;
  if (h) img.height = h;
  img.src = `data:${mime};base64,${b64}`;
  return img;
}

/**
 * Height (px) a piece of HTML probably needs, from counting a few tags in one
 * linear scan (the HTML is never parsed in the page).
 * @param {string} html
 */
export function estimateHtmlHeight(html) {
  const s = html.slice(0, 200_000);
  const lower = s.toLowerCase();
  let rows = 0;
  let blocks = 0;
  let media = 0;
  let text = 0;
  let i = 0;
  while (i < s.length) {
    const lt = s.indexOf('<', i);
    text += (lt < 0 ? s.length : lt) - i;
    if (lt < 0) break;
    const m = /^<(\/?)([a-z][a-z0-9]{0,15})/.exec(lower.slice(lt, lt + 20));
    if (!m) { text++; i = lt + 1; continue; }
    const gt = s.indexOf('>', lt);
    if (gt < 0) break;
    i = gt + 1;
    if (m[1]) continue;  // a closing tag
    const name = m[2];
    if (name === 'tr') rows++;
    else if (/^(p|div|li|h[1-6]|br|hr|dt|dd|blockquote|caption|pre)$/.test(name)) blocks++;
    else if (/^(img|svg|canvas|video|iframe)$/.test(name)) media++;
    else if (name === 'style' || name === 'script') {
      const close = lower.indexOf(`</${name}`, i);
      i = close < 0 ? s.length : close;
    }
  }
  const textLines = rows ? 0 : Math.ceil(text / 100);
  // A wrapping <div> (as pandas writes) adds no height of its own.
  const h = 16 + rows * 26 + Math.max(0, blocks - 1) * 18 + media * 160 + textLines * 20;
  return Math.max(48, Math.min(520, Math.round(h)));
}

const FRAME_STYLE = `
  :root { color-scheme: light; -webkit-text-size-adjust: 100%; text-size-adjust: 100%; }
  body { margin: 6px; font: 13px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1f2328; background: #fff; overflow-wrap: anywhere; }
  table { border-collapse: collapse; border: 0; font-variant-numeric: tabular-nums; }
  th, td { padding: 3px 8px; border: 0; border-bottom: 1px solid #d8dee4; text-align: right; white-space: nowrap; }
  thead th { border-bottom: 2px solid #8c959f; }
  tbody tr:nth-child(odd) { background: #f6f8fa; }
  tbody tr:hover { background: #eaeef2; }
  img, svg, video, canvas { max-width: 100%; height: auto; }
  pre, code { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; }
`;

// Runs inside the frame only when the operator lets outputs run scripts: it
// reports the document's height so the frame can be sized to its content.
const SIZE_REPORTER = `(function () {
  var last = 0;
  function report() {
    var h = Math.ceil(Math.max(document.documentElement.scrollHeight, document.body ? document.body.scrollHeight : 0));
    if (h !== last) { last = h; parent.postMessage({ cellgateFrameHeight: h }, '*'); }
  }
  addEventListener('load', report);
  document.addEventListener('DOMContentLoaded', function () {
    report();
    if (window.ResizeObserver) new ResizeObserver(report).observe(document.documentElement);
  });
  setTimeout(report, 300);
})();`;

/**
 * The srcdoc for an HTML output: a fixed head (charset, a CSP that forbids
 * every network request, and the base style), then the kernel's HTML.
 * @param {string} html @param {boolean} scripts
 */
export function frameDocument(html, scripts) {
  const csp = ["default-src 'none'", "img-src data: blob:", "style-src 'unsafe-inline'", "font-src data:",
    `script-src ${scripts ? "'unsafe-inline'" : "'none'"}`, "connect-src 'none'", "media-src data: blob:",
    "form-action 'none'", "base-uri 'none'"].join('; ');
  return '<!doctype html><html><head><meta charset="utf-8">' +
    `<meta http-equiv="Content-Security-Policy" content="${csp}">` +
    '<meta name="referrer" content="no-referrer">' +
    '<meta name="viewport" content="width=device-width, initial-scale=1">' +
    `<style>${FRAME_STYLE}</style>` +
    (scripts ? `<script>${SIZE_REPORTER}</script>` : '') +
    '</head><body>' + html + '</body></html>';
}

/**
 * HTML output in a sandboxed iframe: `sandbox=""` (no scripts, no forms, no
 * popups, an opaque origin), or `sandbox="allow-scripts"` when the operator
 * opted in — never allow-same-origin.
 * @param {string} html @param {boolean} scripts
 * @returns {HTMLElement}
 */
export function htmlOutput(html, scripts) {
  const wrap = el('div', 'out-html');
  const frame = document.createElement('iframe');
  // The sandbox is set before the frame has any content or is in the page.
  frame.setAttribute('sandbox', scripts ? 'allow-scripts' : '');
  frame.setAttribute('referrerpolicy', 'no-referrer');
  frame.setAttribute('loading', 'eager');
  frame.title = 'HTML output (sandboxed)';
  frame.dataset.testid = 'output-html';
  frame.className = 'out-frame';
  wrap.style.height = `${estimateHtmlHeight(html)}px`;
  frame.srcdoc = frameDocument(html, scripts);
  wrap.appendChild(frame);
  return wrap;
}

/** Sizes frames from the heights their size reporter posts (scripts mode only). */
export function listenForFrameHeights() {
  window.addEventListener('message', (e) => {
    const h = e.data && typeof e.data === 'object' ? Number(e.data.cellgateFrameHeight) : NaN;
    if (!Number.isFinite(h)) return;
    for (const frame of document.querySelectorAll('iframe.out-frame')) {
      if (/** @type {HTMLIFrameElement} */ (frame).contentWindow === e.source) {
        const wrap = /** @type {HTMLElement} */ (frame.parentElement);
        if (!wrap.dataset.userSized) wrap.style.height = `${Math.max(24, Math.min(1600, Math.ceil(h) + 4))}px`;
      }
    }
  });
}

/**
 * One rich output (display_data / execute_result) as a DOM element: the
 * preferred MIME type the page can show safely.
 * @param {Record<string, unknown>} data MIME bundle
 * @param {any} metadata
 * @param {{scripts?: boolean}} [opts]
 * @returns {HTMLElement}
 */
export function renderBundle(data, metadata, opts = {}) {
  const bundle = data && typeof data === 'object' ? data : {};
  const mime = MIME_ORDER.find((t) => bundle[t] !== undefined && bundle[t] !== null);
  const value = mime ? bundle[mime] : undefined;
  const text = (v) => (typeof v === 'string' ? v : Array.isArray(v) ? v.join('') : JSON.stringify(v));
  let node;
  switch (mime) {
    case 'text/html':
      node = htmlOutput(text(value), !!opts.scripts);
      break;
    case 'image/svg+xml':
      node = imageOutput(mime, text(value), metadata);
      break;
    case 'image/png':
    case 'image/jpeg':
      node = imageOutput(mime, value, metadata);
      break;
    case 'text/markdown': {
      node = el('div', 'out-markdown');
      node.dataset.testid = 'output-markdown';
      node.appendChild(renderMarkdown(text(value)));
      break;
    }
    case 'application/json': {
      let pretty;
      try { pretty = JSON.stringify(value, null, 2); } catch { pretty = String(value); }
      node = el('pre', 'out-text out-json', pretty);
      node.dataset.testid = 'output-json';
      break;
    }
    case 'text/latex':
    case 'text/plain': {
      node = el('pre', 'out-text');
      node.dataset.testid = 'output-text';
      node.appendChild(ansiToNodes(text(value)));
      break;
    }
    default: {
      const kinds = Object.keys(bundle).slice(0, 5).join(', ') || 'nothing';
      node = el('pre', 'out-text out-unsupported', `[an output this page does not show: ${kinds}]`);
    }
  }
  node.dataset.mime = mime || '';
  return node;
}
