// Kernel output is hostile: nothing a cell prints may run script in the
// page's origin or read the token. Every payload below would, if it ran in
// the page, set a marker there (title, a global, localStorage, the token
// copied out, a request, a dialog). Run against a gateway with and without
// --output-scripts true (CELLGATE_OUTPUT_SCRIPTS=1): with it, scripts may run
// inside the output frames, but those have an opaque origin.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { deleteAllSessions, launch, openChat, outputScripts, runCell, token } from './helpers.mjs';

// What a payload tries to do to the page that shows it.
const MARK = [
  "try{parent.document.title='pwned'}catch(e){}",
  "try{top.document.title='pwned'}catch(e){}",
  'try{top.__pwned=1}catch(e){}',
  "try{localStorage.setItem('pwned','1')}catch(e){}",
  "try{top.__tok=sessionStorage.getItem('cellgate.token')}catch(e){}",
  "try{fetch('/v1/sessions?token=pwned-probe')}catch(e){}",
  "try{new Image().src='/pwned-probe-img'}catch(e){}",
  "try{alert('pwned')}catch(e){}",
].join('');

const PAYLOAD = `<script>${MARK}</script><img src=x onerror="${MARK}"><svg onload="${MARK}"></svg>` +
  `"></iframe><script>${MARK}</script><a id="jslink" href="javascript:${MARK}">js link</a>` +
  `<details open ontoggle="${MARK}"></details><iframe srcdoc="<script>${MARK}</script>"></iframe>` +
  '<iframe src="/"></iframe>';

// Reports, from inside an HTML output frame, what a script there can reach.
const PROBE = '<div id="probe">no-script</div><script>(function(){var r=[];r.push("origin="+window.origin);' +
  'try{sessionStorage.getItem("cellgate.token");r.push("storage=readable")}catch(e){r.push("storage=blocked")}' +
  'try{r.push("parent="+parent.document.title)}catch(e){r.push("parent=blocked")}' +
  'document.getElementById("probe").textContent=r.join(" ")})()</script>';

const py = (s) => JSON.stringify(s);  // a JSON string is a valid Python string literal

let browser;
let page;
let seen;
// Requests from the page and its frames; ones the browser blocked (CSP)
// before they left are marked: only requests that went out count.
const requests = new Map();

/** Everything the payloads would have changed in the page. */
async function markers() {
  const inPage = await page.evaluate(() => ({
    title: document.title,
    pwned: window.__pwned ?? null,
    tok: window.__tok ?? null,
    storage: localStorage.getItem('pwned'),
  }));
  return {
    ...inPage,
    probes: [...requests.values()].filter((r) => /pwned-probe/.test(r.url) && !r.blocked).map((r) => r.url),
    dialogs: [...seen.dialogs],
  };
}

const CLEAN = { title: 'cellgate', pwned: null, tok: null, storage: null, probes: [], dialogs: [] };

before(async () => {
  browser = await launch();
  browser.ctx.on('request', (r) => requests.set(r, { url: r.url(), blocked: false }));
  browser.ctx.on('requestfailed', (r) => {
    if (/csp|blocked/i.test(r.failure()?.errorText || '') && requests.has(r)) requests.get(r).blocked = true;
  });
  ({ page, seen } = await openChat(browser.ctx));
});
after(async () => {
  await browser?.close();
  await deleteAllSessions();
});

describe(`hostile output (output scripts ${outputScripts ? 'on' : 'off'})`, () => {
  test('control: the markers do detect a payload that runs in the page', async () => {
    assert.deepEqual(await markers(), CLEAN);
    await page.evaluate(new Function(MARK));  // what a successful XSS would do
    await page.waitForTimeout(300);
    const m = await markers();
    assert.equal(m.title, 'pwned');
    assert.equal(m.pwned, 1);
    assert.equal(m.tok, token);
    assert.equal(m.storage, '1');
    assert.ok(m.probes.length >= 1, 'the request probe is seen');
    assert.deepEqual(m.dialogs, ['alert: pwned']);
    // Reset.
    await page.evaluate(() => {
      document.title = 'cellgate';
      delete window.__pwned;
      delete window.__tok;
      localStorage.clear();
    });
    requests.clear();
    seen.dialogs.length = 0;
    assert.deepEqual(await markers(), CLEAN);
  });

  test('the page itself refuses inline script (CSP)', async () => {
    if (outputScripts) return;  // the operator allowed inline scripts (for the output frames)
    await page.addScriptTag({ content: 'window.__pwned = "inline"' }).catch(() => {});
    assert.equal(await page.evaluate(() => window.__pwned ?? null), null);
    await page.evaluate(() => document.querySelectorAll('script:not([src])').forEach((s) => s.remove()));
  });

  test('payloads via display(HTML), Markdown, print, stderr, errors, JSON, SVG, LaTeX, metadata, file names', async () => {
    const cells = [
      `from IPython.display import display, HTML, Markdown, JSON, SVG, Latex
P = ${py(PAYLOAD)}
M = ${py(MARK)}
display(HTML(P))
display({"text/html": P, "text/plain": "raw html"}, raw=True)
display(HTML(${py(PROBE)}))
class Evil:
    def _repr_html_(self):
        return P
Evil()`,
      `display(Markdown(P + "\\n\\n[click me](javascript:alert('md'))\\n\\n<a href=\\"javascript:alert(1)\\">x</a>\\n\\n![img](javascript:alert(2))"))
display(JSON({"html": P}))
display(Latex(P))
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="20" height="20" onload="' + M + '"><script>' + M + '</script><rect width="20" height="20" fill="red"/></svg>'))
display({"image/png": "not base64 \\" onerror=\\"" + P, "text/plain": "bad image"}, raw=True)
display({"image/png": "iVBORw0KGgoAAAANSUHEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="},
        metadata={"image/png": {"width": "1\\" onerror=\\"" + P}}, raw=True)
open("<img src=x onerror=alert(1)>.txt", "w").write(P)
open("<script>alert(2)<", "w").write("x")
P`,
      'import sys\nprint(P)\nprint(P, file=sys.stderr)',
      'raise ValueError(P)',
      'raise type(P, (Exception,), {})(P)',
    ];
    for (const code of cells) await runCell(page, code);
    // Let anything asynchronous (onerror, ontoggle, nested frames) happen.
    await page.waitForTimeout(2500);

    assert.deepEqual(await markers(), CLEAN, 'no payload reached the page');

    // The payloads were shown, as text where they were text.
    const turns = page.locator('[data-testid=turn]');
    assert.equal(await turns.count(), cells.length);
    assert.ok((await turns.nth(2).getByTestId('stdout').textContent()).includes('<img src=x onerror="try{'));
    assert.ok((await turns.nth(2).getByTestId('stderr').textContent()).includes('<script>try{'));
    assert.ok((await turns.nth(3).locator('.evalue').textContent()).includes('<script>try{'));
    assert.ok((await turns.nth(4).locator('.ename').textContent()).startsWith('<script>'));
    const md = turns.nth(1).getByTestId('output-markdown');
    assert.ok((await md.textContent()).includes('<img src=x onerror='));
    assert.equal(await md.locator('a').count(), 0, 'no javascript: links');
    assert.ok((await turns.nth(1).getByTestId('output-json').textContent()).includes('<script>'));
    assert.ok((await turns.nth(1).locator('[data-testid=result]').textContent()).includes('<script>'), 'the value P as text');

    // In the page: only our own script, no event-handler attributes, no
    // inline SVG, no non-http(s) links, every image a data: URL or our own.
    const dom = await page.evaluate(() => ({
      scripts: [...document.scripts].map((s) => s.src),
      handlers: [...document.querySelectorAll('*')].filter((el) => [...el.attributes].some((a) => a.name.startsWith('on'))).length,
      svg: document.querySelectorAll('svg').length,
      links: [...document.querySelectorAll('a[href]')].map((a) => a.href).filter((h) => !/^https?:/.test(h)),
      imgs: [...document.querySelectorAll('img')].map((i) => i.getAttribute('src')).filter((s) => !s.startsWith('data:image/') && !s.startsWith('/static/')),
      frames: [...document.querySelectorAll('iframe')].map((f) => ({ sandbox: f.getAttribute('sandbox'), doc: f.contentDocument === null })),
    }));
    assert.equal(dom.scripts.length, 1);
    assert.match(dom.scripts[0], /\/static\/app\.js$/);
    assert.equal(dom.handlers, 0);
    assert.equal(dom.svg, 0);
    assert.deepEqual(dom.links, []);
    assert.deepEqual(dom.imgs, []);
    // HTML outputs: sandboxed, never allow-same-origin, opaque to the page.
    assert.equal(dom.frames.length, 4);
    for (const f of dom.frames) {
      assert.equal(f.sandbox, outputScripts ? 'allow-scripts' : '');
      assert.ok(f.doc, 'the page cannot reach into the frame (opaque origin)');
    }

    // The file names are shown as text.
    const names = await page.locator('[data-testid=file-entry] .file-name').allTextContents();
    assert.ok(names.includes('<img src=x onerror=alert(1)>.txt'), JSON.stringify(names));
    assert.ok(names.includes('<script>alert(2)<'));

    // Inside an HTML output frame, code cannot read storage or the parent.
    const frames = page.frames().filter((f) => f !== page.mainFrame() && f.parentFrame() === page.mainFrame());
    assert.equal(frames.length, 4);
    for (const f of frames) {
      const r = await f.evaluate(() => {
        const out = { origin: window.origin };
        try { sessionStorage.getItem('cellgate.token'); out.storage = 'readable'; } catch (e) { out.storage = e.name; }
        try { out.parent = parent.document.title; } catch (e) { out.parent = e.name; }
        try { localStorage.setItem('x', '1'); out.local = 'writable'; } catch (e) { out.local = e.name; }
        return out;
      });
      assert.deepEqual(r, { origin: 'null', storage: 'SecurityError', parent: 'SecurityError', local: 'SecurityError' });
    }
    // The probe's own script: it ran only where the operator allows scripts,
    // and even then it could not reach the page.
    const probeFrame = frames.find((f) => f.url() === 'about:srcdoc' && f.childFrames().length === 0);
    assert.ok(probeFrame);
    const probe = await probeFrame.locator('#probe').textContent();
    assert.equal(probe, outputScripts ? 'origin=null storage=blocked parent=blocked' : 'no-script');
    // Without output scripts nothing ran at all; with them, the payloads'
    // fetches fail inside their frames (their CSP forbids any request).
    if (outputScripts) assert.deepEqual(seen.pageErrors.filter((e) => !/Failed to fetch/.test(e)), []);
    else assert.deepEqual(seen.pageErrors, []);
  });

  test('HTML output frames are sized to their content', async () => {
    const turn = await runCell(page, 'from IPython.display import HTML\nHTML(\'<div style="height:700px;background:#eef">tall</div>\')');
    const frame = turn.locator('iframe[data-testid=output-html]');
    if (outputScripts) {
      // The frame's size reporter posts its height.
      await page.waitForFunction((el) => el.getBoundingClientRect().height >= 700, await frame.elementHandle(), { timeout: 10_000 });
    } else {
      // No scripts: an estimate, capped; the frame scrolls and can be resized.
      const h = await frame.evaluate((el) => el.getBoundingClientRect().height);
      assert.ok(h >= 40 && h <= 530, `height ${h}`);
      assert.equal(await turn.locator('.out-html').evaluate((el) => getComputedStyle(el).resize), 'vertical');
    }
    assert.deepEqual(await markers(), CLEAN);
  });
});
