// The JS client's network calls against a live cellgate (real sandboxes):
// createSession({network}), session.network(), setNetwork(), networkLog(),
// and the gateway's 400s as CellgateError. Driven by test_js_client.py
// (test_js_client_network): its gateway maps allowed.test and denied.test to
// one listener on 127.0.0.1 with --egress-resolve, so a refusal is the
// policy's doing; the sandbox reaches it only through the egress proxy.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';

const modulePath = process.env.CELLGATE_CLIENT_MODULE || new URL('../../clients/js/cellgate.js', import.meta.url).pathname;
const { Cellgate, CellgateError } = await import(pathToFileURL(modulePath).href);

const url = process.env.CELLGATE_URL;
const token = process.env.CELLGATE_TOKEN;
assert.ok(url && token, 'CELLGATE_URL and CELLGATE_TOKEN must be set');
const cg = new Cellgate({ url, token });

// The kernel's urllib goes through HTTP_PROXY (the sandbox's NO_PROXY covers loopback names only).
const FETCH = `
import json, urllib.request, urllib.error
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return [r.status, r.read().decode()]
    except urllib.error.HTTPError as e:
        return [e.code, 'refused']
    except OSError as e:
        return [None, type(e).__name__]
`;

/** Fetches each URL in the session; [status, body] each. */
async function fetches(session, ...urls) {
  const ex = await session.execute(FETCH + urls.map((u) => `print(json.dumps(fetch(${JSON.stringify(u)})))\n`).join(''));
  assert.equal(ex.status, 'ok', JSON.stringify(ex.error));
  return ex.stdout.trim().split('\n').map((l) => JSON.parse(l));
}

/** The session's log once done(records) holds (a connection is logged when it closes). */
async function waitForLog(session, done, timeout = 20_000) {
  const end = Date.now() + timeout;
  for (;;) {
    const { connections } = await session.networkLog({ limit: 1000 });
    if (done(connections) || Date.now() > end) return connections;
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** Rejects with `pred` when the promise rejects; fails if it resolves. */
async function rejectsWith(promise, pred) {
  try {
    await promise;
  } catch (e) {
    pred(e);
    return e;
  }
  assert.fail('expected a rejection');
}

describe('network', () => {
  test('created with a policy: network() returns it, setNetwork() changes it, fetches go through, the log has both verdicts', async () => {
    const s = await cg.createSession({ network: { allow: ['allowed.test'] } });
    try {
      assert.deepEqual(await s.network(), { enabled: true, allow: ['allowed.test'], deny: [], presets: [] });

      // The lists given replace the session's, the others stay.
      let p = await s.setNetwork({ deny: ['denied.test'] });
      assert.deepEqual([p.allow, p.deny], [['allowed.test'], ['denied.test']]);
      p = await s.setNetwork({ allow: ['allowed.test', 'denied.test'] });
      assert.deepEqual([p.allow, p.deny], [['allowed.test', 'denied.test'], ['denied.test']]);
      assert.deepEqual(await s.network(), p);

      const [allowed, denied] = await fetches(s, 'http://allowed.test/js-allowed', 'http://denied.test/js-denied');
      assert.deepEqual(allowed, [200, 'upstream /js-allowed']);
      assert.notEqual(denied[0], 200, JSON.stringify(denied));

      const log = await waitForLog(s, (cs) => cs.some((c) => c.host === 'allowed.test') && cs.some((c) => c.host === 'denied.test'));
      const ok = log.filter((c) => c.host === 'allowed.test');
      const refused = log.filter((c) => c.host === 'denied.test');
      assert.equal(ok.length, 1, JSON.stringify(log));
      assert.equal(refused.length, 1, JSON.stringify(log));
      assert.equal(ok[0].verdict, 'allowed');
      assert.equal(ok[0].port, 80);
      assert.ok(ok[0].bytes_down > 'upstream /js-allowed'.length, JSON.stringify(ok[0]));
      assert.match(ok[0].address, /127\.0\.0\.1/);
      assert.equal(refused[0].verdict, 'refused');
      assert.ok(refused[0].reason, JSON.stringify(refused[0]));
      assert.equal(refused[0].bytes_down, 0);

      // Paging: nextAfter while a page is full, null on the last one.
      const first = await s.networkLog({ limit: 1 });
      assert.deepEqual(first.connections.map((c) => c.seq), [log[0].seq]);
      assert.equal(first.nextAfter, log[0].seq);
      const rest = await s.networkLog({ after: first.nextAfter });
      assert.deepEqual(rest.connections.map((c) => c.seq), log.slice(1).map((c) => c.seq));
      assert.equal(rest.nextAfter, null);

      // Narrowed at run time: the name is refused from now on.
      assert.deepEqual((await s.setNetwork({ allow: [] })).allow, []);
      const [again] = await fetches(s, 'http://allowed.test/js-after-patch');
      assert.notEqual(again[0], 200, JSON.stringify(again));
      const later = await waitForLog(s, (cs) => cs.length > log.length);
      assert.deepEqual(later.slice(log.length).map((c) => [c.host, c.verdict]), [['allowed.test', 'refused']]);
    } finally {
      await s.close();
    }
  });

  test('no network by default: enabled false, setNetwork() is a 409, nothing gets out', async () => {
    const s = await cg.createSession();
    try {
      assert.deepEqual(await s.network(), { enabled: false });
      await rejectsWith(s.setNetwork({ allow: ['allowed.test'] }), (e) => {
        assert.ok(e instanceof CellgateError);
        assert.equal(e.status, 409);
        assert.match(e.message, /without a network/);
      });
      const [got] = await fetches(s, 'http://allowed.test/js-no-network');
      assert.equal(got[0], null, JSON.stringify(got));
      assert.deepEqual(await s.networkLog(), { connections: [], nextAfter: null });
    } finally {
      await s.close();
    }
  });

  test('bad network input: a CellgateError carrying the 400\'s message', async () => {
    const before = (await cg.listSessions()).map((m) => m.id).sort();
    const cases = [
      [{ allow: ['allowed.test', 'no such host!'] }, "no such host!"],
      [{ allow: ['allowed.test'], ports: [80] }, "unknown field 'ports'"],
      [{ preset: 'no-such-preset' }, "no preset 'no-such-preset'"],
      [['allowed.test'], "'network' must be an object"],
    ];
    for (const [network, says] of cases) {
      await rejectsWith(cg.createSession({ network }), (e) => {
        assert.ok(e instanceof CellgateError, String(e));
        assert.equal(e.status, 400, JSON.stringify(network));
        assert.ok(e.message.includes(says), `${JSON.stringify(network)}: ${e.message}`);
      });
    }
    assert.deepEqual((await cg.listSessions()).map((m) => m.id).sort(), before, 'a refused create left a session');

    const s = await cg.createSession({ network: { allow: ['allowed.test'] } });
    try {
      await rejectsWith(s.setNetwork({ deny: ['*.*.bad entry'] }), (e) => {
        assert.equal(e.status, 400);
        assert.ok(e.message.includes('*.*.bad entry'), e.message);
      });
      assert.deepEqual((await s.network()).deny, [], 'a refused PATCH changed nothing');
    } finally {
      await s.close();
    }
  });
});
