// The chat page in a real browser (Debian's Chromium) against a live cellgate:
// token, plots, tables, uploads and downloads, tracebacks, interrupt,
// restart, new session, phone layout, screenshots. Driven by
// test_chat_page.py (CELLGATE_URL, CELLGATE_TOKEN, CELLGATE_SCREENSHOT_DIR).
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import {
  api, deleteAllSessions, imageStats, launch, openChat, outputScripts, pageSessionId, runCell, token, turnCount,
  url, waitIdle, waitTurn,
} from './helpers.mjs';

const sha256 = (b) => createHash('sha256').update(b).digest('hex');
const SHOTS = process.env.CELLGATE_SCREENSHOT_DIR;

const PLOT = `import numpy as np, matplotlib.pyplot as plt
x = np.linspace(0, 4 * np.pi, 400)
fig, ax = plt.subplots(figsize=(6, 3.5))
ax.plot(x, np.sin(x), label="sin")
ax.plot(x, np.cos(x) * np.exp(-x / 8), label="damped cos")
ax.set_title("A plot from the sandbox"); ax.legend(); ax.grid(alpha=.3)
plt.show()`;

let browser;
before(async () => { browser = await launch(); });
after(async () => {
  await browser?.close();
  await deleteAllSessions();
});

describe('page', () => {
  test('served under its CSP; asks for the token; a wrong token is refused; the token never enters the URL', async () => {
    const { page, seen, response } = await openChat(browser.ctx, { login: false });
    const csp = response.headers()['content-security-policy'];
    const directives = Object.fromEntries(csp.split(';').map((d) => d.trim().split(/\s+/)).map(([k, ...v]) => [k, v]));
    assert.deepEqual(directives['default-src'], ["'none'"]);
    assert.ok(directives['script-src'].includes("'self'"));
    if (!outputScripts) assert.deepEqual(directives['script-src'], ["'self'"], 'no inline scripts in the page');
    assert.deepEqual(directives['connect-src'], ["'self'"]);
    assert.equal(response.headers()['x-frame-options'], 'DENY');
    assert.ok(await page.getByTestId('login').isVisible());
    assert.ok(!(await page.getByTestId('app').isVisible()));
    // A wrong token.
    await page.getByTestId('token-input').fill('wrong-token');
    await page.getByTestId('token-submit').click();
    await page.waitForFunction(() => document.querySelector('[data-testid=login-error]').textContent.length > 0);
    assert.match(await page.getByTestId('login-error').textContent(), /refused/);
    assert.equal(await page.evaluate(() => sessionStorage.getItem('cellgate.token')), null);
    // The right one.
    await page.getByTestId('token-input').fill(token);
    await page.getByTestId('token-submit').click();
    await waitIdle(page, 120_000);
    assert.ok(await page.getByTestId('app').isVisible());
    assert.equal(await page.evaluate(() => sessionStorage.getItem('cellgate.token')), token);
    assert.ok(!page.url().includes(token), 'the token is not in the URL');
    assert.equal(await page.getByTestId('token-input').inputValue(), '', 'the input was cleared');
    const sid = await pageSessionId(page);
    assert.ok(sid);
    assert.equal((await api('GET', `/v1/sessions/${sid}`)).status, 200);
    // A reload keeps the token (this tab only) and re-attaches to the session.
    await page.reload();
    await waitIdle(page, 60_000);
    assert.equal(await pageSessionId(page), sid);
    assert.deepEqual(seen.pageErrors, []);
    assert.deepEqual(seen.consoleErrors.filter((t) => !/status of 40[13]/.test(t)), []);
    await page.close();
  });
});

describe('outputs', () => {
  let page;
  let seen;
  before(async () => { ({ page, seen } = await openChat(browser.ctx)); });
  after(async () => { await page.close(); });

  test('a Matplotlib plot shows as a non-blank image', async () => {
    const turn = await runCell(page, PLOT);
    assert.equal(await turn.getAttribute('data-status'), 'ok');
    const img = turn.locator('img[data-testid=output-image]');
    assert.equal(await img.count(), 1);
    assert.match(await img.getAttribute('src'), /^data:image\/png;base64,/);
    const s = await imageStats(img);
    assert.ok(s.w > 100 && s.h > 100, `natural size ${s.w}×${s.h}`);
    assert.ok(s.colours > 10, `the image has ${s.colours} colours`);
    assert.ok(s.changed > 0.02, `only ${(s.changed * 100).toFixed(2)}% of pixels differ from the background`);
  });

  test('SVG is an <img> (never inline), JPEG and PNG from base64', async () => {
    const turn = await runCell(page, `from IPython.display import SVG, Image, display
import io
from PIL import Image as P
display(SVG('<svg xmlns="http://www.w3.org/2000/svg" width="120" height="60"><rect width="60" height="60" fill="#c00"/><circle cx="90" cy="30" r="25" fill="#00c"/></svg>'))
b = io.BytesIO(); P.new("RGB", (64, 32), (0, 128, 0)).save(b, "JPEG"); display(Image(data=b.getvalue(), format="jpeg"))`);
    const imgs = turn.locator('img[data-testid=output-image]');
    assert.equal(await imgs.count(), 2);
    assert.match(await imgs.nth(0).getAttribute('src'), /^data:image\/svg\+xml;base64,/);
    const svg = await imageStats(imgs.nth(0));
    assert.equal(svg.w, 120);
    assert.ok(svg.colours >= 2 && svg.changed > 0.2, JSON.stringify(svg));
    assert.match(await imgs.nth(1).getAttribute('src'), /^data:image\/jpeg;base64,/);
    assert.equal((await imageStats(imgs.nth(1))).w, 64);
    assert.equal(await turn.locator('svg').count(), 0, 'no inline SVG');
  });

  test('a DataFrame is a table in a sandboxed iframe, sized to fit', async () => {
    const turn = await runCell(page, `import pandas as pd
pd.DataFrame({"city": ["Oslo", "Lima", "Pune", "Kyiv"], "temp": [3.5, 19.0, 27.25, 8.0]})`);
    const frame = turn.locator('iframe[data-testid=output-html]');
    assert.equal(await frame.count(), 1);
    assert.equal(await frame.getAttribute('sandbox'), outputScripts ? 'allow-scripts' : '');
    const f = await (await frame.elementHandle()).contentFrame();
    await f.waitForSelector('table');
    assert.equal(await f.locator('tbody tr').count(), 4);
    assert.match(await f.locator('table').innerText(), /Pune\s+27\.25/);
    // Cross-origin (opaque) from the page's side.
    assert.equal(await frame.evaluate((el) => el.contentDocument), null);
    // Sized sensibly: the table fits, without a huge empty area.
    const [frameH, tableH] = [await frame.evaluate((el) => el.getBoundingClientRect().height),
      await f.locator('table').evaluate((t) => t.getBoundingClientRect().height)];
    assert.ok(frameH >= tableH && frameH < tableH + 200, `frame ${frameH}px for a ${tableH}px table`);
    // The value is labelled Out [n].
    assert.match(await turn.locator('[data-testid=result] .out-prompt').textContent(), /^Out \[\d+\]$/);
  });

  test('Markdown, JSON and text render as DOM, streaming as the cell runs', async () => {
    const n = await turnCount(page);
    const turn = await runCell(page, `from IPython.display import display, Markdown, JSON
import time
display(Markdown("## Heading\\n\\nSome **bold**, *italic* and \`code\`; a [link](https://example.org/x).\\n\\n- one\\n- two\\n\\n1. first\\n2. second"))
display(JSON({"a": [1, 2], "b": {"c": None}}))
print("first", flush=True)
time.sleep(2)
print("second")`, { wait: false });
    // The first line is on the page while the cell is still running.
    await page.waitForFunction((i) => {
      const t = document.querySelectorAll('[data-testid=turn]')[i];
      return t.dataset.status === 'running' && /first/.test(t.querySelector('[data-testid=stdout]')?.textContent || '');
    }, n, { timeout: 30_000 });
    await waitTurn(page, n);
    const md = turn.getByTestId('output-markdown');
    assert.equal(await md.locator('h2').textContent(), 'Heading');
    assert.equal(await md.locator('strong').textContent(), 'bold');
    assert.equal(await md.locator('em').textContent(), 'italic');
    assert.equal(await md.locator('code').textContent(), 'code');
    assert.equal(await md.locator('ul > li').count(), 2);
    assert.equal(await md.locator('ol > li').count(), 2);
    const a = md.locator('a');
    assert.equal(await a.getAttribute('href'), 'https://example.org/x');
    assert.match(await a.getAttribute('rel'), /noopener/);
    assert.equal(JSON.parse(await turn.getByTestId('output-json').textContent()).b.c, null);
    assert.equal(await turn.getByTestId('stdout').textContent(), 'first\nsecond\n');
  });

  test('an error shows its traceback, coloured', async () => {
    const turn = await runCell(page, 'def divide(a, b):\n    return a / b\n\ndivide(1, 0)');
    assert.equal(await turn.getAttribute('data-status'), 'error');
    const err = turn.getByTestId('error');
    assert.equal(await err.locator('.ename').textContent(), 'ZeroDivisionError');
    const tb = err.getByTestId('traceback');
    const text = await tb.textContent();
    assert.match(text, /divide\(1, 0\)/);
    assert.match(text, /return a \/ b/);
    assert.ok(!text.includes('\x1b'), 'no raw escape codes');
    assert.ok(await tb.locator('span[class*="ansi-fg-"]').count() > 3, 'coloured spans');
    const colours = await tb.locator('span[class*="ansi-fg-"]').evaluateAll((spans) =>
      [...new Set(spans.map((s) => getComputedStyle(s).color))]);
    assert.ok(colours.length >= 2, `colours used: ${colours}`);
    assert.equal(await turn.getByTestId('turn-status').textContent(), 'error');
  });

  test('stdout and stderr: ANSI colours, carriage returns', async () => {
    const turn = await runCell(page, 'import sys\nprint("\\x1b[1;32mgreen\\x1b[0m plain")\nprint("10%\\r50%\\r100%")\nprint("warn", file=sys.stderr)');
    const out = turn.getByTestId('stdout');
    assert.equal(await out.textContent(), 'green plain\n100%\n');
    assert.equal(await out.locator('span.ansi-fg-2.ansi-bold').textContent(), 'green');
    assert.equal(await turn.getByTestId('stderr').textContent(), 'warn\n');
  });

  test('no page errors so far', () => {
    assert.deepEqual(seen.pageErrors, []);
    assert.deepEqual(seen.dialogs, []);
  });
});

describe('files', () => {
  let page;
  before(async () => { ({ page } = await openChat(browser.ctx)); });
  after(async () => { await page.close(); });

  test('upload a CSV (file chooser), analyse it, download the result from the file panel', async () => {
    const rows = ['region,product,units,price'];
    const regions = ['north', 'south', 'east', 'west'];
    for (let i = 0; i < 120; i++) rows.push(`${regions[i % 4]},p${i % 7},${(i * 37) % 23 + 1},${(i * 1.25 + 3).toFixed(2)}`);
    const csv = Buffer.from(rows.join('\n') + '\n');
    const chooser = page.waitForEvent('filechooser');
    await page.locator('label.upload').click();
    await (await chooser).setFiles({ name: 'sales.csv', mimeType: 'text/csv', buffer: csv });
    await page.locator('[data-testid=file-entry][data-path="sales.csv"]').waitFor({ timeout: 30_000 });
    const sid = await pageSessionId(page);
    const uploaded = Buffer.from(await (await api('GET', `/v1/sessions/${sid}/files/sales.csv`)).arrayBuffer());
    assert.ok(uploaded.equals(csv), 'the upload is byte-identical');

    const turn = await runCell(page, `import pandas as pd, hashlib, os
df = pd.read_csv("sales.csv")
df["revenue"] = df.units * df.price
summary = df.groupby("region")["revenue"].agg(["count", "sum", "mean"]).round(3)
os.makedirs("results", exist_ok=True)
summary.to_csv("results/summary.csv")
print(len(df), "rows")
print("sha256", hashlib.sha256(open("results/summary.csv", "rb").read()).hexdigest())
summary`);
    assert.equal(await turn.getAttribute('data-status'), 'ok');
    const stdout = await turn.getByTestId('stdout').textContent();
    assert.match(stdout, /^120 rows$/m);
    const kernelSha = /sha256 ([0-9a-f]{64})/.exec(stdout)[1];
    // The turn lists the file it wrote.
    assert.equal(await turn.locator('[data-testid=turn-file][data-path="results/summary.csv"]').count(), 1);
    // The file panel refreshed after the execution: open the folder, download.
    await page.locator('[data-testid=file-entry][data-path="results"] [data-testid=file-open]').click();
    const entry = page.locator('[data-testid=file-entry][data-path="results/summary.csv"]');
    await entry.waitFor({ timeout: 15_000 });
    const [download] = await Promise.all([
      page.waitForEvent('download', { timeout: 30_000 }),
      entry.getByTestId('file-download').click(),
    ]);
    assert.equal(download.suggestedFilename(), 'summary.csv');
    const got = fs.readFileSync(await download.path());
    assert.equal(sha256(got), kernelSha, 'the downloaded bytes are what the kernel wrote');
    const viaApi = Buffer.from(await (await api('GET', `/v1/sessions/${sid}/files/results/summary.csv`)).arrayBuffer());
    assert.ok(got.equals(viaApi));
    assert.match(got.toString(), /^region,count,sum,mean\n/);
    // The turn's file chip downloads the same bytes.
    const [again] = await Promise.all([
      page.waitForEvent('download', { timeout: 30_000 }),
      turn.locator('[data-testid=turn-file]').click(),
    ]);
    assert.ok(fs.readFileSync(await again.path()).equals(got));
  });

  test('drag and drop uploads into the open folder; delete needs two clicks', async () => {
    await page.locator('[data-testid=file-crumb]').first().click();  // back to the workspace root
    await page.locator('[data-testid=file-entry][data-path="sales.csv"]').waitFor();
    const dt = await page.evaluateHandle(() => {
      const d = new DataTransfer();
      d.items.add(new File(['x,y\n1,2\n'], 'dropped.csv', { type: 'text/csv' }));
      d.items.add(new File([new Uint8Array([0, 255, 7])], 'raw.bin'));
      return d;
    });
    await page.dispatchEvent('[data-testid=transcript]', 'dragenter', { dataTransfer: dt });
    assert.ok(await page.getByTestId('dropzone').isVisible(), 'the drop zone shows while dragging');
    await page.dispatchEvent('[data-testid=transcript]', 'drop', { dataTransfer: dt });
    await page.locator('[data-testid=file-entry][data-path="raw.bin"]').waitFor({ timeout: 30_000 });
    await page.locator('[data-testid=file-entry][data-path="dropped.csv"]').waitFor();
    assert.ok(!(await page.getByTestId('dropzone').isVisible()));
    const sid = await pageSessionId(page);
    const raw = new Uint8Array(await (await api('GET', `/v1/sessions/${sid}/files/raw.bin`)).arrayBuffer());
    assert.deepEqual([...raw], [0, 255, 7]);
    // Delete: the first click only arms the button.
    const del = page.locator('[data-testid=file-entry][data-path="raw.bin"] [data-testid=file-delete]');
    await del.click();
    assert.equal(await del.textContent(), 'Confirm');
    assert.equal((await api('GET', `/v1/sessions/${sid}/files/raw.bin`)).status, 200);
    await del.click();
    await page.locator('[data-testid=file-entry][data-path="raw.bin"]').waitFor({ state: 'detached', timeout: 15_000 });
    assert.equal((await api('GET', `/v1/sessions/${sid}/files/raw.bin`)).status, 404);
  });
});

describe('kernel control', () => {
  let page;
  before(async () => { ({ page } = await openChat(browser.ctx)); });
  after(async () => { await page.close(); });

  test('busy while a long cell runs; the Interrupt button stops it with KeyboardInterrupt', async () => {
    await runCell(page, 'kept = "still here"');
    const n = await turnCount(page);
    assert.ok(await page.getByTestId('interrupt').isDisabled(), 'nothing to interrupt while idle');
    const turn = await runCell(page, 'import time\nprint("sleeping", flush=True)\ntime.sleep(60)\nprint("woke up")', { wait: false });
    await turn.getByTestId('stdout').waitFor({ timeout: 30_000 });
    assert.equal(await page.getByTestId('status').getAttribute('data-state'), 'busy');
    const t0 = Date.now();
    await page.getByTestId('interrupt').click();
    await waitTurn(page, n, 15_000);
    const took = Date.now() - t0;
    assert.ok(took < 10_000, `interrupted after ${took} ms`);
    assert.equal(await turn.getAttribute('data-status'), 'interrupted');
    assert.equal(await turn.getByTestId('error').locator('.ename').textContent(), 'KeyboardInterrupt');
    assert.ok(!(await turn.getByTestId('stdout').textContent()).includes('woke up'));
    await waitIdle(page, 10_000);
    // The kernel's state survived the interrupt.
    const next = await runCell(page, 'print(kept)');
    assert.equal(await next.getByTestId('stdout').textContent(), 'still here\n');
  });

  test('Restart clears variables and keeps files', async () => {
    await runCell(page, 'v = 41\nopen("kept.txt", "w").write("k")');
    await page.getByTestId('restart').click();
    await page.locator('[data-testid=note]', { hasText: 'Kernel restarted' }).waitFor({ timeout: 60_000 });
    await waitIdle(page);
    const turn = await runCell(page, 'print(open("kept.txt").read())\nv + 1');
    assert.equal(await turn.getByTestId('stdout').textContent(), 'k\n');
    assert.equal(await turn.getByTestId('error').locator('.ename').textContent(), 'NameError');
  });

  test('New session: a fresh kernel, an empty transcript, the old session deleted', async () => {
    const old = await pageSessionId(page);
    await page.getByTestId('new-session').click();
    await page.waitForFunction((o) => {
      const s = sessionStorage.getItem('cellgate.session');
      return s && s !== o && document.querySelector('[data-testid=status]').dataset.state === 'idle';
    }, old, { timeout: 120_000 });
    assert.equal(await turnCount(page), 0);
    const fresh = await pageSessionId(page);
    assert.match(await page.getByTestId('session-id').textContent(), new RegExp(`^${fresh.slice(0, 8)}`));
    for (let i = 0; i < 50 && (await api('GET', `/v1/sessions/${old}`)).status !== 404; i++) {
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal((await api('GET', `/v1/sessions/${old}`)).status, 404, 'the old session is gone');
    const turn = await runCell(page, 'import os\nsorted(os.listdir("."))');
    assert.match(await turn.locator('[data-testid=result]').textContent(), /\[\]/);
  });
});

describe('session lifetime', () => {
  test('a session that ended (deleted elsewhere) is reported; New session recovers', async () => {
    const { page } = await openChat(browser.ctx);
    const sid = await pageSessionId(page);
    assert.equal((await api('DELETE', `/v1/sessions/${sid}`)).status, 204);
    const turn = await runCell(page, 'print(1)');
    assert.equal(await turn.getAttribute('data-status'), 'failed');
    await page.locator('[data-testid=note]', { hasText: 'This session has ended' }).waitFor({ timeout: 10_000 });
    assert.equal(await page.getByTestId('status').getAttribute('data-state'), 'ended');
    assert.ok(await page.getByTestId('run').isDisabled());
    assert.equal(await page.evaluate(() => sessionStorage.getItem('cellgate.session')), null);
    await page.getByTestId('new-session').click();
    await waitIdle(page, 120_000);
    const again = await runCell(page, 'print(2)');
    assert.equal(await again.getByTestId('stdout').textContent(), '2\n');
    await page.close();
  });

  test('the environment picker starts a new session from one of your templates', async () => {
    const name = `chat-${Date.now().toString(36)}`;
    const started = await api('POST', '/v1/templates', {
      name, steps: [{ type: 'RUN', args: [`echo built-for-${name} > /opt/marker`] }],
    });
    const startedText = await started.text();
    assert.equal(started.status, 202, startedText);
    const at = JSON.parse(startedText).status_url;
    let build;
    for (let i = 0; i < 600; i++) {
      build = await (await api('GET', at)).json();
      if (build.status === 'ready' || build.status === 'error') break;
      await new Promise((r) => setTimeout(r, 200));
    }
    assert.equal(build.status, 'ready', JSON.stringify(build));
    const { page } = await openChat(browser.ctx);
    try {
      await waitIdle(page, 120_000);
      const picker = page.getByTestId('template');
      await page.waitForFunction((n) => [...document.querySelectorAll('[data-testid=template] option')]
        .some((o) => o.value === `${n}:latest`), name, { timeout: 30_000 });
      await picker.selectOption(`${name}:latest`);
      await page.getByTestId('new-session').click();
      await page.locator('[data-testid=note]', { hasText: `on ${name}:latest` }).waitFor({ timeout: 120_000 });
      await waitIdle(page, 120_000);
      const turn = await runCell(page, 'print(open("/opt/marker").read().strip())');
      assert.equal(await turn.getByTestId('stdout').textContent(), `built-for-${name}\n`);
      const sid = await pageSessionId(page);
      const model = await (await api('GET', `/v1/sessions/${sid}`)).json();
      assert.match(JSON.stringify(model), new RegExp(name));
    } finally {
      await page.close();
      await deleteAllSessions();
      await api('DELETE', `/v1/templates/${name}`);
    }
  });

  test('a token revoked mid-session sends the page back to the login form', async () => {
    const { page } = await openChat(browser.ctx);
    // As if the operator changed the token: the stored one is now wrong.
    await page.evaluate(() => sessionStorage.setItem('cellgate.token', 'revoked'));
    await page.reload();
    await page.getByTestId('login').waitFor({ timeout: 30_000 });
    assert.match(await page.getByTestId('login-error').textContent(), /refused/);
    assert.equal(await page.evaluate(() => sessionStorage.getItem('cellgate.token')), null);
    await page.close();
  });
});

describe('layout and screenshots', () => {
  const SCREENSHOT_CELL_1 = `import pandas as pd, numpy as np
rng = np.random.default_rng(7)
df = pd.DataFrame({"month": pd.date_range("2026-01-01", periods=12, freq="MS").strftime("%b"),
                   "north": rng.integers(80, 160, 12), "south": rng.integers(60, 140, 12)})
df.to_csv("sales.csv", index=False)
print(f"{len(df)} months, total {int(df[['north', 'south']].sum().sum())} units")
df.head(4)`;
  const SCREENSHOT_CELL_2 = `import matplotlib.pyplot as plt
ax = df.plot(x="month", y=["north", "south"], kind="bar", figsize=(7, 3.2), rot=0, color=["#1f6feb", "#f78166"])
ax.set_title("Units sold per month"); ax.set_ylabel("units"); plt.tight_layout()
plt.savefig("chart.png", dpi=120); plt.show()`;

  test('laptop: a session with a plot (screenshot)', async () => {
    const { page } = await openChat(browser.ctx);
    await page.setViewportSize({ width: 1280, height: 900 });
    await runCell(page, SCREENSHOT_CELL_1);
    const turn = await runCell(page, SCREENSHOT_CELL_2);
    await page.locator('[data-testid=file-entry][data-path="chart.png"]').waitFor({ timeout: 15_000 });
    const img = turn.locator('img[data-testid=output-image]');
    assert.ok((await imageStats(img)).changed > 0.02);
    await page.getByTestId('code-input').fill('df.describe()');
    await turn.evaluate((el) => el.scrollIntoView({ block: 'end' }));
    assert.ok(await img.isVisible());
    // The layout fits: no horizontal scrolling, file panel beside the transcript.
    assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth));
    assert.ok(await page.getByTestId('file-panel').isVisible());
    const shot = await page.screenshot();
    assert.ok(shot.length > 20_000);
    if (SHOTS) fs.writeFileSync(path.join(SHOTS, 'screenshot-chat.png'), shot);
    await page.close();
  });

  test('phone: one column, the file panel as a drawer (screenshot)', async () => {
    const phone = await launch({ viewport: { width: 390, height: 844 }, deviceScaleFactor: 2, isMobile: true, hasTouch: true });
    try {
      const { page, seen } = await openChat(phone.ctx);
      await runCell(page, SCREENSHOT_CELL_1);
      const turn = await runCell(page, SCREENSHOT_CELL_2);
      const img = turn.locator('img[data-testid=output-image]');
      const box = await img.boundingBox();
      assert.ok(box.width <= 390 && box.width > 250, `the plot is ${box.width}px wide on a 390px screen`);
      assert.ok(await page.evaluate(() => document.documentElement.scrollWidth <= innerWidth), 'no horizontal scrolling');
      for (const id of ['new-session', 'interrupt', 'restart', 'toggle-files', 'run']) {
        const b = await page.getByTestId(id).boundingBox();
        assert.ok(b && b.x >= 0 && b.x + b.width <= 390 && b.height >= 28, `${id} is on screen and tappable: ${JSON.stringify(b)}`);
      }
      assert.ok(!(await page.getByTestId('file-panel').isVisible()), 'the file panel starts closed');
      await page.getByTestId('toggle-files').click();
      await page.locator('[data-testid=file-entry][data-path="chart.png"]').waitFor({ timeout: 15_000 });
      await page.getByTestId('files-close').click();
      await page.waitForFunction(() => getComputedStyle(document.querySelector('[data-testid=file-panel]')).visibility === 'hidden');
      await img.evaluate((el) => el.scrollIntoView({ block: 'center' }));
      const shot = await page.screenshot();
      assert.ok(shot.length > 20_000);
      if (SHOTS) fs.writeFileSync(path.join(SHOTS, 'screenshot-chat-phone.png'), shot);
      assert.deepEqual(seen.pageErrors, []);
    } finally {
      await phone.close();
    }
  });
});

describe('fork', () => {
  test('the Fork button opens a new session in a new tab with a copy of the files, and leaves this one alone', async () => {
    const { page, seen } = await openChat(browser.ctx);
    const parent = await pageSessionId(page);
    await runCell(page, "open('forked.txt', 'w').write('from the parent')\nmarker = 7");
    const [tab] = await Promise.all([browser.ctx.waitForEvent('page'), page.getByTestId('fork').click()]);
    try {
      await tab.waitForFunction(() => document.body.dataset.ready === '1', null, { timeout: 60_000 });
      await waitIdle(tab, 120_000);
      const child = await pageSessionId(tab);
      assert.ok(child && child !== parent, `a new session (${child}), not the parent's`);
      assert.ok(!tab.url().includes('#'), `the session's id left the URL: ${tab.url()}`);
      // The token came along in the tab's copy of sessionStorage, never in the URL.
      assert.ok(!tab.url().includes(token));
      const turn = await runCell(tab, "print(open('forked.txt').read(), 'marker' in dir())");
      assert.match(await turn.textContent(), /from the parent False/);
      await runCell(tab, "open('forked.txt', 'w').write('changed in the child')");
      const model = await (await api('GET', `/v1/sessions/${child}`)).json();
      assert.equal(model.origin.source, parent);
      // The parent tab is still on its own session, and its file is its own.
      assert.equal(await pageSessionId(page), parent);
      const mine = await runCell(page, "print(open('forked.txt').read(), marker)");
      assert.match(await mine.textContent(), /from the parent 7/);
      // The page keeps no snapshot behind.
      for (let i = 0; i < 50; i++) {
        if ((await (await api('GET', '/v1/snapshots')).json()).snapshots.length === 0) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.deepEqual((await (await api('GET', '/v1/snapshots')).json()).snapshots, []);
      assert.deepEqual(seen.pageErrors, []);
    } finally {
      await tab.close();
      await page.close();
    }
  });
});
