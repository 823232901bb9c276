// Named volumes with clients/js/cellgate.js against a live cellgate gateway
// (real runc sandboxes), with Node's built-in test runner. Driven by
// test_js_client.py, which starts the gateway and passes CELLGATE_URL /
// CELLGATE_TOKEN, and CELLGATE_CLIENT_MODULE: the client as the gateway
// serves it.
import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';

const modulePath = process.env.CELLGATE_CLIENT_MODULE || new URL('../../clients/js/cellgate.js', import.meta.url).pathname;
const {
  Cellgate, CellgateError, NotFound, SnapshotNotFound, VolumeNotFound,
} = await import(pathToFileURL(modulePath).href);

const url = process.env.CELLGATE_URL;
const token = process.env.CELLGATE_TOKEN;
assert.ok(url && token, 'CELLGATE_URL and CELLGATE_TOKEN must be set');

const cg = new Cellgate({ url, token });
const MIB = 1 << 20;

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
  const s = await cg.createSession({ timeout: 60, ...opts });
  try {
    return await body(s);
  } finally {
    await s.close();
  }
}

async function deleteAllVolumes() {
  for (const v of await cg.listVolumes()) await cg.deleteVolume(v);
}

/** Runs code and returns its stdout (the cell must succeed). */
async function stdout(s, code) {
  const ex = await s.execute(code);
  assert.equal(ex.status, 'ok', JSON.stringify(ex.error));
  return ex.stdout;
}

/** A 409 CellgateError that is not a NotFound. */
function conflict(e) {
  assert.ok(e instanceof CellgateError && !(e instanceof NotFound), String(e));
  assert.equal(e.status, 409, String(e));
}

describe('named volumes', () => {
  beforeEach(deleteAllVolumes);
  afterEach(deleteAllVolumes);

  test('createVolume, getVolume, listVolumes and their errors', async () => {
    const before = Date.now();
    const vol = await cg.createVolume({ name: 'data-1', sizeBytes: 16 * MIB });
    assert.equal(vol.name, 'data-1');
    assert.equal(vol.size_bytes, 16 * MIB);
    assert.ok(Number.isInteger(vol.used_bytes) && vol.used_bytes < 16 * MIB, JSON.stringify(vol));
    assert.deepEqual(vol.mounts, []);
    assert.ok(Math.abs(Date.parse(vol.created) - before) < 120_000, vol.created);
    const dflt = await cg.createVolume({ name: 'data_2' });
    assert.equal(dflt.size_bytes, 2 ** 30);

    assert.deepEqual(await cg.getVolume('data-1'), vol);
    assert.equal((await cg.getVolume(vol)).name, 'data-1');
    assert.deepEqual((await cg.listVolumes()).map((v) => v.name).sort(), ['data-1', 'data_2']);

    await rejectsWith(cg.createVolume({ name: 'data-1' }), conflict);
    for (const bad of [{ name: 'no/slash' }, { name: 'x'.repeat(65) }, { name: 'small', sizeBytes: MIB }]) {
      await rejectsWith(cg.createVolume(bad), (e) => assert.equal(e.status, 400, `${JSON.stringify(bad)}: ${e}`));
    }
    assert.equal((await cg.listVolumes()).length, 2);
  });

  test('files outlive the session that wrote them', async () => {
    await cg.createVolume({ name: 'shared', sizeBytes: 16 * MIB });
    await withSession({ volumes: [{ name: 'shared' }] }, async (w) => {
      assert.deepEqual(w.model.volumes, [{ name: 'shared', path: '/volumes/shared', read_only: false }]);
      await stdout(w, "open('/volumes/shared/x.txt', 'w').write('kept across sessions')");
      assert.deepEqual((await cg.getVolume('shared')).mounts,
        [{ session: w.id, path: '/volumes/shared', read_only: false }]);
    });
    assert.deepEqual((await cg.getVolume('shared')).mounts, []);
    await withSession({ volumes: [{ name: 'shared', path: '/volumes/in', readOnly: true }] }, async (r) => {
      assert.deepEqual((await r.info()).volumes, [{ name: 'shared', path: '/volumes/in', read_only: true }]);
      assert.equal(await stdout(r, "print(open('/volumes/in/x.txt').read())"), 'kept across sessions\n');
    });
  });

  test('one writer; read-only mounts beside it cannot write', async () => {
    await cg.createVolume({ name: 'v', sizeBytes: 16 * MIB });
    await withSession({ volumes: ['v'] }, async (w) => {
      await stdout(w, "open('/volumes/v/w.txt', 'w').write('from the writer')");
      const busy = await rejectsWith(cg.createSession({ volumes: [{ name: 'v', readOnly: false }] }), conflict);
      assert.match(busy.message, /one writer/);

      await withSession({ volumes: [{ name: 'v', readOnly: true }] }, async (r) => {
        assert.deepEqual(r.model.volumes, [{ name: 'v', path: '/volumes/v', read_only: true }]);
        assert.equal(await stdout(r, "print(open('/volumes/v/w.txt').read())"), 'from the writer\n');
        const ex = await r.execute("open('/volumes/v/r.txt', 'w').write('no')");
        assert.equal(ex.status, 'error', JSON.stringify(ex));
        assert.match(`${ex.error.ename}: ${ex.error.evalue}`, /(OSError|PermissionError).*(Read-only file system|Permission denied)/);
      });
      assert.equal(await stdout(w, "import os; print(os.path.exists('/volumes/v/r.txt'))"), 'False\n');
    });
  });

  test('deleteVolume: a 409 while mounted, fine after close; unknown volumes', async () => {
    await cg.createVolume({ name: 'busy', sizeBytes: 16 * MIB });
    await withSession({ volumes: [{ name: 'busy', readOnly: true }] }, async () => {
      await rejectsWith(cg.deleteVolume('busy'), conflict);
    });
    await cg.deleteVolume('busy');
    assert.deepEqual(await cg.listVolumes(), []);

    for (const call of [() => cg.getVolume('busy'), () => cg.deleteVolume('nope'),
      () => cg.createSession({ volumes: [{ name: 'nope' }] })]) {
      const e = await rejectsWith(call(), (x) => assert.ok(x instanceof VolumeNotFound, String(x)));
      assert.equal(e.status, 404);
      assert.ok(!(e instanceof SnapshotNotFound));
    }
  });
});
