// The chat page's Network panel in a real browser (Debian's Chromium) against
// a live cellgate: no network by default, an allow list that starts a session
// with a network, a cell that fetches the allowed name through the egress
// proxy, the connection log, Apply on a session that has a network, and a bad
// entry's message. Driven by test_chat_page.py (test_network_panel), whose
// gateway leads allowed.test and denied.test to a listener on 127.0.0.1.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { api, deleteAllSessions, launch, openChat, pageSessionId, runCell, waitIdle } from './helpers.mjs';

const FETCH = `import urllib.request, urllib.error
for url in ('http://allowed.test/from-the-page', 'http://denied.test/from-the-page'):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            print(r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print(e.code, 'refused')`;

const networkOf = async (sid) => (await api('GET', `/v1/sessions/${sid}/network`)).json();

let browser;
before(async () => { browser = await launch(); });
after(async () => {
  await browser?.close();
  await deleteAllSessions();
});

describe('network panel', () => {
  test('no network by default; an allow list starts a session that reaches the allowed name; the log shows both verdicts', async () => {
    const { page, seen } = await openChat(browser.ctx);
    const first = await pageSessionId(page);
    assert.deepEqual(await networkOf(first), { enabled: false });
    await page.locator('[data-testid=network-panel] summary').click();
    await page.waitForFunction(() => /^No network/.test(document.querySelector('[data-testid=network-state]').textContent));
    assert.equal(await page.getByTestId('network-summary').textContent(), 'off');
    assert.equal(await page.getByTestId('network-apply').textContent(), 'Start a new session with it');
    assert.equal(await page.getByTestId('network-entry').count(), 0);

    // One entry a line; blank lines and comments are dropped.
    await page.getByTestId('network-allow').fill('allowed.test\n\n# the test listener\n');
    await page.getByTestId('network-apply').click();
    await page.waitForFunction((old) => {
      const sid = sessionStorage.getItem('cellgate.session');
      return sid && sid !== old;
    }, first);
    await waitIdle(page, 120_000);
    const sid = await pageSessionId(page);
    assert.deepEqual(await networkOf(sid), { enabled: true, allow: ['allowed.test'], deny: [], presets: [] });
    await page.waitForFunction(() => document.querySelector('[data-testid=network-panel]').dataset.enabled === 'true');
    assert.match(await page.getByTestId('network-state').textContent(), /^Allowed: allowed\.test\./);
    assert.equal(await page.getByTestId('network-summary').textContent(), 'on');
    assert.equal(await page.getByTestId('network-apply').textContent(), 'Apply to this session');
    assert.equal(await page.getByTestId('network-allow').inputValue(), 'allowed.test');

    // A cell reaches the allowed name through the proxy; the other is refused.
    const turn = await runCell(page, FETCH);
    assert.equal(await turn.getAttribute('data-status'), 'ok');
    const lines = (await turn.getByTestId('stdout').textContent()).trim().split('\n');
    assert.equal(lines.length, 2, lines.join('\n'));
    assert.equal(lines[0], '200 upstream /from-the-page');
    assert.doesNotMatch(lines[1], /^200 /, 'the denied name was not reached');

    // The log panel, refreshed after the cell.
    const ok = page.locator('[data-testid=network-entry][data-host="allowed.test"]');
    const refused = page.locator('[data-testid=network-entry][data-host="denied.test"]');
    await ok.waitFor({ timeout: 20_000 });
    await refused.waitFor({ timeout: 20_000 });
    assert.equal(await ok.count(), 1);
    assert.equal(await ok.getAttribute('data-verdict'), 'allowed');
    assert.equal(await ok.getAttribute('data-port'), '80');
    assert.equal(await ok.getByTestId('network-verdict').textContent(), 'allowed');
    assert.match(await ok.getByTestId('network-detail').textContent(), /^↑ \d+ B ↓ \d+ B$/);
    assert.match(await ok.locator('.net-time').textContent(), /^\d\d:\d\d:\d\d$/);
    assert.equal(await refused.getAttribute('data-verdict'), 'refused');
    assert.equal(await refused.getByTestId('network-verdict').textContent(), 'refused');
    assert.ok((await refused.getByTestId('network-detail').textContent()).length > 0, 'a refusal says why');
    // The API agrees with the panel.
    const log = await (await api('GET', `/v1/sessions/${sid}/network/log`)).json();
    assert.deepEqual(log.connections.map((c) => [c.host, c.verdict]).sort(), [['allowed.test', 'allowed'], ['denied.test', 'refused']]);

    // Apply on a session with a network changes its list in place.
    await page.getByTestId('network-allow').fill('allowed.test\nother.test');
    await page.getByTestId('network-apply').click();
    await page.waitForFunction(() => /^Applied/.test(document.querySelector('[data-testid=network-note]').textContent));
    assert.deepEqual((await networkOf(sid)).allow, ['allowed.test', 'other.test']);
    assert.equal(await pageSessionId(page), sid, 'applying kept the session');
    assert.match(await page.getByTestId('network-state').textContent(), /^Allowed: allowed\.test, other\.test\./);

    // A bad entry: the gateway's message, and nothing changed.
    await page.getByTestId('network-allow').fill('bad entry!');
    await page.getByTestId('network-apply').click();
    await page.waitForFunction(() => /^Not applied/.test(document.querySelector('[data-testid=network-note]').textContent));
    assert.match(await page.getByTestId('network-note').textContent(), /400 .*bad entry!/);
    assert.ok(await page.getByTestId('network-note').evaluate((n) => n.classList.contains('error')));
    assert.deepEqual((await networkOf(sid)).allow, ['allowed.test', 'other.test']);

    assert.deepEqual(seen.pageErrors, []);
    assert.deepEqual(seen.consoleErrors.filter((t) => !/status of 400/.test(t)), []);
    await page.close();
  });
});
