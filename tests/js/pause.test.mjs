// Pause and resume (issue 15) with clients/js/cellgate.js against a live
// cellgate gateway (real runc sandboxes), with Node's built-in test runner.
// Driven by test_js_client.py, which starts the gateway and passes
// CELLGATE_URL / CELLGATE_TOKEN, and CELLGATE_CLIENT_MODULE: the client as
// the gateway serves it. Under runc a pause keeps the workspace, not the
// kernel's memory: the model says mode "files" and, once resumed,
// resumed_from "files".
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';

const modulePath = process.env.CELLGATE_CLIENT_MODULE || new URL('../../clients/js/cellgate.js', import.meta.url).pathname;
const { Cellgate, CellgateError, NotFound, SessionNotFound } = await import(pathToFileURL(modulePath).href);

const url = process.env.CELLGATE_URL;
const token = process.env.CELLGATE_TOKEN;
assert.ok(url && token, 'CELLGATE_URL and CELLGATE_TOKEN must be set');

const cg = new Cellgate({ url, token });
const MODE = 'files';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

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

/** Makes a session, runs `body(session)`, always closes it. */
async function withSession(opts, body) {
  const s = await cg.createSession(opts);
  try {
    return await body(s);
  } finally {
    await s.close();
  }
}

/** Polls info() until `pred(model)` holds; returns that model. */
async function until(s, what, pred, ms = 30000) {
  const end = Date.now() + ms;
  let m = await s.info();
  while (!pred(m)) {
    assert.ok(Date.now() < end, `timed out waiting for ${what}: state ${m.state}, pause ${JSON.stringify(m.pause)}`);
    await sleep(250);
    m = await s.info();
  }
  return m;
}

describe('pause and resume', () => {
  test('a new session: lifecycle defaults and an unpaused pause model', async () => {
    await withSession({ timeout: 60 }, async (s) => {
      assert.deepEqual(s.model.lifecycle, { on_idle: 'delete', auto_resume: true });
      const m = await s.info();
      assert.deepEqual(m.lifecycle, { on_idle: 'delete', auto_resume: true });
      assert.deepEqual(m.pause, { paused: false, mode: null, since: null, image_bytes: 0, resumed_from: null, pauses: 0 });
    });
  });

  test('createSession passes lifecycle through; a bad one is a 400', async () => {
    await withSession({ timeout: 60, idleTimeout: 300, lifecycle: { on_idle: 'pause', auto_resume: false } }, async (s) => {
      assert.deepEqual(s.model.lifecycle, { on_idle: 'pause', auto_resume: false });
      assert.equal(s.limits.idle_timeout_s, 300);
      assert.deepEqual((await s.info()).lifecycle, { on_idle: 'pause', auto_resume: false });
    });
    for (const lifecycle of [{ on_idle: 'hibernate' }, { auto_resume: 'yes' }, { when: 1 }]) {
      const e = await rejectsWith(cg.createSession({ lifecycle }), (err) => assert.ok(err instanceof CellgateError, String(err)));
      assert.equal(e.status, 400, JSON.stringify(lifecycle));
      assert.match(e.message, /lifecycle|on_idle|auto_resume|when/, e.message);
    }
  });

  test('round trip: pause keeps the files (readable while paused), resume starts a kernel on them', async () => {
    await withSession({ timeout: 60 }, async (s) => {
      await s.upload('in/data.txt', 'uploaded before the pause');
      const ex = await s.execute("kept = 'in memory'\nopen('out.txt', 'w').write('from the kernel')\n6 * 7");
      assert.equal(ex.status, 'ok');
      assert.equal(ex.text, '42');

      const paused = await s.pause();
      assert.equal(paused.id, s.id);
      assert.equal(paused.state, 'paused');
      assert.equal(paused.pause.paused, true);
      assert.equal(paused.pause.mode, MODE);
      assert.equal(paused.pause.pauses, 1);
      assert.equal(paused.pause.resumed_from, null);
      assert.equal(typeof paused.pause.image_bytes, 'number');
      assert.ok(!Number.isNaN(Date.parse(paused.pause.since)), `since: ${paused.pause.since}`);
      assert.ok(Math.abs(Date.now() - Date.parse(paused.pause.since)) < 120_000, paused.pause.since);
      assert.equal(paused.pause.resume_failed, undefined);
      assert.deepEqual(s.model, paused, 'pause() keeps the returned model');
      assert.deepEqual(paused.lifecycle, { on_idle: 'delete', auto_resume: true });

      // Another client sees it paused, in the list too.
      const info = await (await cg.connect(s.id)).info();
      assert.equal(info.state, 'paused');
      assert.deepEqual(info.pause, paused.pause);
      const listed = (await cg.listSessions()).find((m) => m.id === s.id);
      assert.equal(listed.state, 'paused');
      assert.equal(listed.pause.paused, true);

      // Files while paused: listed and read, and that does not resume it.
      const names = (await s.listFiles()).map((e) => e.name).sort();
      assert.ok(names.includes('in') && names.includes('out.txt'), JSON.stringify(names));
      assert.deepEqual((await s.listFiles('in')).map((e) => e.name), ['data.txt']);
      assert.equal(await s.download('in/data.txt', { as: 'text' }), 'uploaded before the pause');
      assert.equal(await s.download('out.txt', { as: 'text' }), 'from the kernel');
      const missing = await rejectsWith(s.download('none.txt'), (e) => assert.ok(e instanceof NotFound, String(e)));
      assert.ok(!(missing instanceof SessionNotFound));
      assert.equal((await s.info()).state, 'paused', 'reading files resumed it');

      const resumed = await s.resume();
      assert.equal(resumed.id, s.id);
      assert.notEqual(resumed.state, 'paused');
      assert.equal(resumed.pause.paused, false);
      assert.equal(resumed.pause.mode, null);
      assert.equal(resumed.pause.since, null);
      assert.equal(resumed.pause.resumed_from, MODE);
      assert.equal(resumed.pause.pauses, 1);
      assert.deepEqual(s.model, resumed, 'resume() keeps the returned model');

      const after = await s.execute("print(open('in/data.txt').read())\nprint(open('/workspace/out.txt').read())\n'kept' in dir()");
      assert.equal(after.status, 'ok', JSON.stringify(after.error));
      assert.equal(after.stdout, 'uploaded before the pause\nfrom the kernel\n');
      assert.equal(after.text, 'False');  // files only: the variable went with the old kernel

      // Resuming a running session is a no-op.
      const again = await s.resume();
      assert.equal(again.pause.paused, false);
      assert.equal(again.pause.pauses, 1);
    });
  });

  test('execute on a paused session resumes it; pause twice is one pause', async () => {
    await withSession({ timeout: 60 }, async (s) => {
      await s.upload('n.txt', '20');
      await s.pause();
      const twice = await s.pause();
      assert.equal(twice.state, 'paused');
      assert.equal(twice.pause.pauses, 1);
      const lines = [];
      const ex = await s.execute("print(int(open('n.txt').read()) + 22)", { onStdout: (t) => lines.push(t) });
      assert.equal(ex.status, 'ok', JSON.stringify(ex.error));
      assert.equal(lines.join(''), '42\n');
      const m = await until(s, 'the model to say resumed', (mm) => mm.pause.paused === false);
      assert.notEqual(m.state, 'paused');
      assert.equal(m.pause.resumed_from, MODE);
      assert.equal(m.pause.pauses, 1);
    });
  });

  test('auto_resume false: execute on a paused session is a 409 until resume()', async () => {
    await withSession({ timeout: 60, lifecycle: { auto_resume: false } }, async (s) => {
      assert.deepEqual(s.model.lifecycle, { on_idle: 'delete', auto_resume: false });
      await s.upload('kept.txt', 'kept');
      await s.pause();
      for (const opts of [{}, { stream: true }]) {
        const e = await rejectsWith(s.execute('1 + 1', opts), (err) => assert.ok(err instanceof CellgateError, String(err)));
        assert.equal(e.status, 409, `${JSON.stringify(opts)}: ${e.status} ${e.message}`);
        assert.ok(!(e instanceof NotFound));
        assert.match(e.message, /paused/);
        assert.match(e.message, /resume/);
      }
      const still = await s.info();
      assert.equal(still.state, 'paused');
      assert.equal(still.pause.pauses, 1);
      assert.equal((await s.resume()).pause.resumed_from, MODE);
      const ex = await s.execute("open('kept.txt').read()");
      assert.equal(ex.text, "'kept'");
    });
  });

  test("lifecycle.on_idle 'pause': an idle session is paused, not deleted", async () => {
    await withSession({ timeout: 60, idleTimeout: 2, lifecycle: { on_idle: 'pause' } }, async (s) => {
      assert.deepEqual(s.model.lifecycle, { on_idle: 'pause', auto_resume: true });
      assert.equal((await s.execute("open('idle.txt', 'w').write('idle')")).status, 'ok');
      const m = await until(s, 'the idle pause', (mm) => mm.state === 'paused');
      assert.equal(m.pause.paused, true);
      assert.equal(m.pause.mode, MODE);
      await sleep(3000);
      assert.equal((await s.info()).state, 'paused', 'culled or resumed while idle');
      const ex = await s.execute("open('idle.txt').read()");
      assert.equal(ex.text, "'idle'");
    });
  });

  test('pause and resume of a closed session: SessionNotFound', async () => {
    const s = await cg.createSession({ timeout: 60 });
    await s.pause();
    await s.close();
    for (const call of [() => s.pause(), () => s.resume()]) {
      const e = await rejectsWith(call(), (err) => assert.ok(err instanceof SessionNotFound, String(err)));
      assert.equal(e.status, 404);
    }
  });
});
