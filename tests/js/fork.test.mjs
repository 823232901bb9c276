// Snapshots and fork with clients/js/cellgate.js against a live cellgate
// gateway (real runc sandboxes), with Node's built-in test runner. Driven by
// test_js_client.py, which starts the gateway and passes CELLGATE_URL /
// CELLGATE_TOKEN, and CELLGATE_CLIENT_MODULE: the client as the gateway
// serves it. A snapshot holds the workspace's files, not the kernel's memory
// (mode "files").
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';

const modulePath = process.env.CELLGATE_CLIENT_MODULE || new URL('../../clients/js/cellgate.js', import.meta.url).pathname;
const {
  Cellgate, CellgateError, NotFound, Session, SessionNotFound, SnapshotNotFound, TooManySessions, TooManySnapshots,
} = await import(pathToFileURL(modulePath).href);

const url = process.env.CELLGATE_URL;
const token = process.env.CELLGATE_TOKEN;
assert.ok(url && token, 'CELLGATE_URL and CELLGATE_TOKEN must be set');

const cg = new Cellgate({ url, token });
const MODE = 'files';
const SNAPSHOT_CAP = 16;  // the gateway's default per-tenant cap
const MISSING = '00000000-0000-4000-8000-000000000000';

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

/** Closes every session given, whatever happens to the others. */
async function closeAll(sessions) {
  await Promise.allSettled(sessions.map((s) => s.close()));
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

async function deleteAllSnapshots() {
  for (const snap of await cg.listSnapshots()) await cg.deleteSnapshot(snap);
}

async function sessionIds() {
  return new Set((await cg.listSessions()).map((m) => m.id));
}

/** Runs code and returns its stdout (the cell must succeed). */
async function stdout(s, code) {
  const ex = await s.execute(code);
  assert.equal(ex.status, 'ok', JSON.stringify(ex.error));
  return ex.stdout;
}

describe('snapshots and fork', () => {
  beforeEach(deleteAllSnapshots);
  afterEach(deleteAllSnapshots);

  test('snapshot(): the model, getSnapshot, listSnapshots and session.snapshots()', async () => {
    await withSession({ timeout: 60 }, async (s) => {
      await s.upload('data/a.txt', 'x'.repeat(5000));
      const before = Date.now();
      const snap = await s.snapshot({ name: 'before the change' });
      assert.equal(snap.name, 'before the change');
      assert.equal(snap.session, s.id);
      assert.equal(snap.kernel, s.model.kernel);
      assert.equal(snap.mode, MODE);
      assert.equal(typeof snap.id, 'string');
      assert.notEqual(snap.id, s.id);
      assert.ok(snap.bytes >= 5000, JSON.stringify(snap));
      assert.equal(typeof snap.disk_bytes, 'number');
      assert.equal(typeof snap.reflinked, 'boolean');
      assert.ok(Math.abs(Date.parse(snap.created) - before) < 120_000, snap.created);

      const unnamed = await s.snapshot();
      assert.equal(unnamed.name, unnamed.id, 'without a name it is named by its id');
      assert.notEqual(unnamed.id, snap.id);

      assert.deepEqual(await cg.getSnapshot(snap.id), snap);
      assert.deepEqual(await cg.getSnapshot(snap), snap);
      assert.deepEqual((await cg.listSnapshots()).map((x) => x.id), [snap.id, unnamed.id]);
      assert.deepEqual((await s.snapshots()).map((x) => x.id), [snap.id, unnamed.id]);
      assert.equal(s.model.origin, null);
    });
    // They outlive their session.
    assert.equal((await cg.listSnapshots()).length, 2);
  });

  test('createSession({fromSnapshot}): the snapshot\'s files, not later changes; each its own copy', async () => {
    await withSession({ timeout: 60 }, async (src) => {
      await src.upload('notes/data.txt', 'version 1');
      assert.equal((await src.execute("secret = 41\nopen('made.txt', 'w').write('by the kernel')")).status, 'ok');
      const snap = await src.snapshot({ name: 'v1' });
      await src.upload('notes/data.txt', 'version 2');
      await src.upload('later.txt', 'after the snapshot');
      await src.removeFile('made.txt');

      const a = await cg.createSession({ fromSnapshot: snap, timeout: 77 });
      const b = await cg.createSession({ fromSnapshot: snap.id });
      try {
        assert.ok(a instanceof Session && b instanceof Session);
        assert.equal(new Set([a.id, b.id, src.id]).size, 3);
        assert.equal(a.limits.timeout_s, 77);
        assert.notEqual(b.limits.timeout_s, 77);
        for (const child of [a, b]) {
          const origin = { snapshot: snap.id, source: src.id, mode: MODE };
          assert.deepEqual(child.model.origin, origin);
          assert.deepEqual((await child.info()).origin, origin);
          assert.equal(await child.download('notes/data.txt', { as: 'text' }), 'version 1');
          assert.equal(await child.download('made.txt', { as: 'text' }), 'by the kernel');
          const missing = await rejectsWith(child.download('later.txt'), (e) => assert.ok(e instanceof NotFound, String(e)));
          assert.ok(!(missing instanceof SessionNotFound));
          // Files only: the variable went with the source's kernel.
          const ex = await child.execute("print(open('notes/data.txt').read())\n'secret' in dir()");
          assert.equal(ex.stdout, 'version 1\n');
          assert.equal(ex.text, 'False');
        }
        await a.execute("open('notes/data.txt', 'w').write('changed by a')");
        assert.equal(await a.download('notes/data.txt', { as: 'text' }), 'changed by a');
        assert.equal(await b.download('notes/data.txt', { as: 'text' }), 'version 1');
        assert.equal(await src.download('notes/data.txt', { as: 'text' }), 'version 2');
        const listed = (await cg.listSessions()).find((m) => m.id === a.id);
        assert.deepEqual(listed.origin, { snapshot: snap.id, source: src.id, mode: MODE });
      } finally {
        await closeAll([a, b]);
      }
    });
  });

  test('fork({count: 2}): two new sessions on their own copies of the parent\'s files', async () => {
    await withSession({ timeout: 60 }, async (parent) => {
      await parent.upload('shared.txt', 'from the parent');
      assert.equal((await parent.execute('x = 41')).status, 'ok');
      const { snapshot, sessions } = await parent.fork({ count: 2, name: 'two ways' });
      try {
        assert.equal(snapshot.name, 'two ways');
        assert.equal(snapshot.session, parent.id);
        assert.equal(snapshot.mode, MODE);
        assert.deepEqual((await parent.snapshots()).map((x) => x.id), [snapshot.id]);
        assert.equal(sessions.length, 2);
        const ids = new Set(sessions.map((k) => k.id));
        assert.equal(ids.size, 2);
        assert.ok(!ids.has(parent.id));
        const running = await sessionIds();
        for (const id of ids) assert.ok(running.has(id), `${id} is not listed`);

        for (const [i, kid] of sessions.entries()) {
          assert.ok(kid instanceof Session);
          assert.equal(kid.client, cg);
          const origin = { snapshot: snapshot.id, source: parent.id, mode: MODE };
          assert.deepEqual(kid.model.origin, origin);
          assert.deepEqual((await kid.info()).origin, origin);
          const ex = await kid.execute("print(open('shared.txt').read())\n'x' in dir()");
          assert.equal(ex.stdout, 'from the parent\n');
          assert.equal(ex.text, 'False');
          await stdout(kid, `open('shared.txt', 'w').write('child ${i}')\nopen('only-${i}.txt', 'w').write('${i}')`);
        }
        for (const [i, kid] of sessions.entries()) {
          assert.equal(await kid.download('shared.txt', { as: 'text' }), `child ${i}`);
          const names = (await kid.listFiles()).map((e) => e.name);
          assert.ok(names.includes(`only-${i}.txt`) && !names.includes(`only-${1 - i}.txt`), JSON.stringify(names));
        }
        assert.equal(await parent.download('shared.txt', { as: 'text' }), 'from the parent');
        assert.ok(!(await parent.listFiles()).some((e) => e.name.startsWith('only-')));
        await parent.upload('after.txt', 'later');
        for (const kid of sessions) {
          await rejectsWith(kid.download('after.txt'), (e) => assert.ok(e instanceof NotFound, String(e)));
        }
        assert.equal((await parent.execute('x + 1')).text, '42');
      } finally {
        await closeAll(sessions);
      }
      for (const kid of sessions) {
        await rejectsWith(kid.info(), (e) => assert.ok(e instanceof SessionNotFound, String(e)));
      }
      // One child by default; the fork's snapshot stays.
      assert.equal((await cg.getSnapshot(snapshot)).id, snapshot.id);
      const one = await parent.fork();
      try {
        assert.equal(one.sessions.length, 1);
        assert.equal(one.snapshot.name, one.snapshot.id);
        assert.equal(await one.sessions[0].download('shared.txt', { as: 'text' }), 'from the parent');
      } finally {
        await closeAll(one.sessions);
      }
    });
  });

  test('a bad fork count is a 400 with the server\'s message; nothing is made', async () => {
    await withSession({ timeout: 60 }, async (s) => {
      const before = await sessionIds();
      for (const count of [0, 17, -1, '2']) {
        const e = await rejectsWith(s.fork({ count }), (err) => assert.ok(err instanceof CellgateError, String(err)));
        assert.equal(e.constructor, CellgateError, `${count}: ${e}`);
        assert.equal(e.status, 400, `${count}: ${e}`);
        assert.equal(e.message, "'count' must be a whole number from 1 to 16");
      }
      const named = await rejectsWith(s.snapshot({ name: 'n'.repeat(129) }), (err) => assert.ok(err instanceof CellgateError));
      assert.equal(named.status, 400);
      assert.match(named.message, /1 to 128/);
      assert.deepEqual(await sessionIds(), before);
      assert.deepEqual(await cg.listSnapshots(), []);
    });
  });

  test('unknown and deleted snapshots: SnapshotNotFound', async () => {
    const e = await rejectsWith(cg.createSession({ fromSnapshot: MISSING }),
      (err) => assert.ok(err instanceof SnapshotNotFound, String(err)));
    assert.ok(e instanceof NotFound && !(e instanceof SessionNotFound));
    assert.equal(e.status, 404);
    assert.match(e.message, /No such snapshot/);
    assert.ok(e.message.includes(MISSING), e.message);
    for (const call of [() => cg.getSnapshot(MISSING), () => cg.deleteSnapshot(MISSING)]) {
      const err = await rejectsWith(call(), (x) => assert.ok(x instanceof SnapshotNotFound, String(x)));
      assert.equal(err.status, 404);
      assert.equal(err.message, 'No such snapshot');
    }

    await withSession({ timeout: 60 }, async (s) => {
      await s.upload('kept.txt', 'kept');
      const snap = await s.snapshot();
      await withSession({ fromSnapshot: snap }, async (child) => {
        assert.equal(await cg.deleteSnapshot(snap), undefined);
        assert.deepEqual(await cg.listSnapshots(), []);
        assert.deepEqual(await s.snapshots(), []);
        await rejectsWith(cg.getSnapshot(snap), (x) => assert.ok(x instanceof SnapshotNotFound, String(x)));
        await rejectsWith(cg.deleteSnapshot(snap), (x) => assert.ok(x instanceof SnapshotNotFound, String(x)));
        await rejectsWith(cg.createSession({ fromSnapshot: snap }), (x) => assert.ok(x instanceof SnapshotNotFound, String(x)));
        // A session started from it keeps its own copy.
        assert.equal(await child.download('kept.txt', { as: 'text' }), 'kept');
        assert.equal((await child.info()).origin.snapshot, snap.id);
      });
    });
  });

  test('fromSnapshot with kernel, env or network is a 400', async () => {
    await withSession({ timeout: 60 }, async (s) => {
      const snap = await s.snapshot();
      const before = await sessionIds();
      for (const extra of [{ kernel: s.model.kernel }, { env: { KERNEL_X: '1' } }, { network: { allow: [] } }]) {
        const e = await rejectsWith(cg.createSession({ fromSnapshot: snap, ...extra }),
          (err) => assert.ok(err instanceof CellgateError, String(err)));
        assert.equal(e.status, 400, String(e));
        assert.ok(e.message.includes(`'${Object.keys(extra)[0]}' cannot be given with 'from_snapshot'`), e.message);
      }
      assert.deepEqual(await sessionIds(), before);
    });
  });

  test('snapshot, snapshots and fork of a closed session: SessionNotFound', async () => {
    const s = await cg.createSession({ timeout: 60 });
    await s.close();
    for (const call of [() => s.snapshot(), () => s.snapshots(), () => s.fork()]) {
      const e = await rejectsWith(call(), (err) => assert.ok(err instanceof SessionNotFound, String(err)));
      assert.equal(e.status, 404);
    }
    assert.deepEqual(await cg.listSnapshots(), []);
  });

  test('past the snapshot cap: TooManySnapshots; deleting one makes room', async () => {
    await withSession({ timeout: 60 }, async (s) => {
      await s.upload('f.txt', 'f');
      const taken = [];
      for (let i = 0; i < SNAPSHOT_CAP; i++) taken.push(await s.snapshot({ name: `s${i}` }));
      assert.equal(new Set(taken.map((x) => x.id)).size, SNAPSHOT_CAP);
      const e = await rejectsWith(s.snapshot({ name: 'one too many' }),
        (err) => assert.ok(err instanceof TooManySnapshots, String(err)));
      assert.ok(!(e instanceof TooManySessions));
      assert.equal(e.status, 429);
      assert.match(e.message, /Snapshot limit reached/);
      await cg.deleteSnapshot(taken[0]);
      assert.equal((await s.snapshot({ name: 'fits again' })).name, 'fits again');
      assert.equal((await cg.listSnapshots()).length, SNAPSHOT_CAP);
    });
  });
});
