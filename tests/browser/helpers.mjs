// Shared by the browser tests: Debian's Chromium through playwright-core
// (never a downloaded browser), a fresh profile per browser, and helpers to
// drive the chat page of a live cellgate gateway.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

export const url = process.env.CELLGATE_URL;
export const token = process.env.CELLGATE_TOKEN;
export const outputScripts = process.env.CELLGATE_OUTPUT_SCRIPTS === '1';
export const CHROMIUM = process.env.CELLGATE_CHROMIUM || '/usr/bin/chromium';
assert.ok(url && token, 'CELLGATE_URL and CELLGATE_TOKEN must be set');

const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-background-networking', '--disable-quic',
  '--no-first-run', '--disable-component-update', '--disable-sync'];

/**
 * A browser with a fresh profile (its own --user-data-dir). Extra context
 * options (viewport, isMobile, …) are passed on.
 * @returns {Promise<{ctx: import('playwright-core').BrowserContext, close: () => Promise<void>}>}
 */
export async function launch(options = {}) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'cellgate-chromium-'));
  const ctx = await chromium.launchPersistentContext(dir, {
    executablePath: CHROMIUM,
    args: ARGS,
    headless: true,
    acceptDownloads: true,
    viewport: { width: 1280, height: 900 },
    ...options,
  });
  return {
    ctx,
    async close() {
      await ctx.close().catch(() => {});
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * Opens the chat page in a new tab and records what the tests check:
 * console errors, page errors, dialogs. With `login` it gives the token and
 * waits for an idle session.
 */
export async function openChat(ctx, { login = true } = {}) {
  const page = await ctx.newPage();
  const seen = { consoleErrors: [], pageErrors: [], dialogs: [] };
  page.on('console', (m) => { if (m.type() === 'error') seen.consoleErrors.push(m.text()); });
  page.on('pageerror', (e) => seen.pageErrors.push(String(e)));
  page.on('dialog', (d) => { seen.dialogs.push(`${d.type()}: ${d.message()}`); d.dismiss().catch(() => {}); });
  const response = await page.goto(url + '/');
  await page.waitForFunction(() => document.body.dataset.ready === '1');
  if (login) await giveToken(page, token);
  return { page, seen, response };
}

export async function giveToken(page, value) {
  await page.getByTestId('token-input').fill(value);
  await page.getByTestId('token-submit').click();
  if (value === token) await waitIdle(page, 120_000);
}

export async function waitIdle(page, timeout = 60_000) {
  await page.waitForSelector('[data-testid=status][data-state=idle]', { timeout });
}

/** The number of turns in the transcript. */
export const turnCount = (page) => page.locator('[data-testid=turn]').count();

/**
 * Types a cell into the composer and runs it (Ctrl+Enter, or the Run
 * button). With `wait` it waits for the turn to finish. Returns the turn's
 * locator.
 */
export async function runCell(page, code, { wait = true, timeout = 90_000, key = true } = {}) {
  const n = await turnCount(page);
  await page.getByTestId('code-input').fill(code);
  if (key) await page.getByTestId('code-input').press('Control+Enter');
  else await page.getByTestId('run').click();
  const turn = page.locator('[data-testid=turn]').nth(n);
  await turn.waitFor({ timeout: 10_000 });
  if (wait) await waitTurn(page, n, timeout);
  return turn;
}

/** Waits until turn `index` has finished. */
export async function waitTurn(page, index, timeout = 90_000) {
  await page.waitForFunction((i) => {
    const t = document.querySelectorAll('[data-testid=turn]')[i];
    return t && t.dataset.status && t.dataset.status !== 'running';
  }, index, { timeout });
}

/**
 * Decodes an <img> in the page and measures it on a canvas: its natural
 * size, how many distinct colours it has and which share of pixels differs
 * from the top-left one.
 */
export async function imageStats(img) {
  return img.evaluate(async (el) => {
    if (!el.complete || !el.naturalWidth) await el.decode().catch(() => {});
    const w = el.naturalWidth;
    const h = el.naturalHeight;
    if (!w || !h) return { w, h, colours: 0, changed: 0 };
    const c = document.createElement('canvas');
    c.width = w;
    c.height = h;
    const g = c.getContext('2d');
    g.drawImage(el, 0, 0);
    const d = g.getImageData(0, 0, w, h).data;
    const colours = new Set();
    let changed = 0;
    for (let i = 0; i < d.length; i += 4) {
      const key = (d[i] << 24) ^ (d[i + 1] << 16) ^ (d[i + 2] << 8) ^ d[i + 3];
      if (colours.size < 10000) colours.add(key);
      if (d[i] !== d[0] || d[i + 1] !== d[1] || d[i + 2] !== d[2] || d[i + 3] !== d[3]) changed++;
    }
    return { w, h, colours: colours.size, changed: changed / (w * h) };
  });
}

/** The gateway's /v1 API, with the token (for checks the page cannot make). */
export async function api(method, apiPath, body) {
  const res = await fetch(url + apiPath, {
    method,
    headers: { Authorization: `Bearer ${token}`, ...(body ? { 'Content-Type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return res;
}

/** Deletes every session of this token (the page makes one per tab). */
export async function deleteAllSessions() {
  const res = await api('GET', '/v1/sessions');
  const { sessions } = await res.json();
  for (const s of sessions) await api('DELETE', `/v1/sessions/${s.id}`);
}

/** The id of the page's current session. */
export const pageSessionId = (page) => page.evaluate(() => sessionStorage.getItem('cellgate.session'));
