// Snapshots and fork (issue 15) through the unmodified E2B SDKs (e2b and
// @e2b/code-interpreter, pinned in package-lock.json) against a live
// cellgate: sbx.createSnapshot() (POST /sandboxes/{id}/snapshots),
// Sandbox.create(snapshotId or name), Sandbox.listSnapshots() and
// sbx.listSnapshots() (GET /snapshots), Sandbox.deleteSnapshot()
// (DELETE /templates/{id}), and sbx.fork() / Sandbox.fork()
// (POST /sandboxes/{id}/fork). The SDK is configured only by E2B_API_KEY,
// E2B_API_URL and E2B_SANDBOX_URL; test_e2b_fork.py starts the gateway
// (runc: snapshots keep the files; each child is a new kernel on its copy).
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox } from '@e2b/code-interpreter';
import { Sandbox as BaseSandbox } from 'e2b';

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL'])
  assert.ok(process.env[name], `${name} must be set`);

const run = `e2b-fork-${process.pid}`;
const made = [];
const keep = (sbx) => (made.push(sbx), sbx);
after(async () => {
  for (const s of made) await s.kill().catch(() => {});
});

async function allSnapshots(opts = {}) {
  const pager = Sandbox.listSnapshots({ limit: 2, ...opts });
  const out = [];
  while (pager.hasNext) out.push(...(await pager.nextItems()));
  return out;
}

async function run_(sbx, code) {
  const ex = await sbx.runCode(code);
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  return ex;
}

test('createSnapshot, then Sandbox.create from its id and from its name: the files are there, the copies diverge', async () => {
  const src = keep(await Sandbox.create({ metadata: { run }, envs: { FROM_CREATE: 'src' } }));
  await src.files.write('/home/user/state/step.json', '{"step": 1}');
  await src.files.write('/home/user/blob.bin', new Uint8Array([0, 1, 2, 253, 254, 255]).buffer);
  await run_(src, "import os\nos.symlink('state/step.json', '/home/user/link.json')");

  const snap = await src.createSnapshot({ name: `snap-${process.pid}` });
  assert.match(snap.snapshotId, /^[0-9a-f-]{36}$/);
  assert.deepEqual(snap.names, [`snap-${process.pid}`]);
  // The source runs on; what it writes after the snapshot is not in it.
  await src.files.write('/home/user/state/step.json', '{"step": 2}');

  const byId = keep(await Sandbox.create(snap.snapshotId, { metadata: { run, from: 'id' } }));
  const byName = keep(await Sandbox.create(`snap-${process.pid}`, { metadata: { run, from: 'name' } }));
  assert.notEqual(byId.sandboxId, src.sandboxId);
  assert.notEqual(byName.sandboxId, byId.sandboxId);
  for (const [child, template] of [[byId, snap.snapshotId], [byName, `snap-${process.pid}`]]) {
    assert.equal(await child.files.read('/home/user/state/step.json'), '{"step": 1}');
    assert.deepEqual([...(await child.files.read('/home/user/blob.bin', { format: 'bytes' }))], [0, 1, 2, 253, 254, 255]);
    const ex = await run_(child, "import os\nprint(os.readlink('/home/user/link.json'), open('/home/user/link.json').read())");
    assert.equal(ex.logs.stdout.join(''), 'state/step.json {"step": 1}\n');
    const info = await child.getInfo();
    assert.equal(info.templateId, template);
    assert.equal(info.state, 'running');
  }
  // Each copy is its own: a write in one is seen by no other.
  await byId.files.write('/home/user/state/step.json', '{"step": "id"}');
  await byName.commands.run('echo name > /home/user/state/only-here.txt');
  assert.equal(await byName.files.read('/home/user/state/step.json'), '{"step": 1}');
  assert.equal(await src.files.read('/home/user/state/step.json'), '{"step": 2}');
  assert.equal(await byId.files.exists('/home/user/state/only-here.txt'), false);
  assert.equal(await src.files.exists('/home/user/state/only-here.txt'), false);

  // Listed: by everyone's list, by the source's, by name; the ids line up.
  const mine = await src.listSnapshots().nextItems();
  assert.deepEqual(mine.map((s) => s.snapshotId), [snap.snapshotId]);
  assert.ok((await allSnapshots()).some((s) => s.snapshotId === snap.snapshotId));
  assert.deepEqual((await allSnapshots({ name: `snap-${process.pid}` })).map((s) => s.snapshotId), [snap.snapshotId]);
  assert.deepEqual(await byId.listSnapshots().nextItems(), []);

  // Deleted: true, then false; a sandbox can no longer start from it; the
  // sandboxes made from it keep their copies.
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), true);
  assert.equal(await Sandbox.deleteSnapshot(snap.snapshotId), false);
  assert.ok(!(await allSnapshots()).some((s) => s.snapshotId === snap.snapshotId));
  await assert.rejects(Sandbox.create(snap.snapshotId), (e) => /not found/i.test(e.message));
  assert.equal(await byName.files.read('/home/user/state/only-here.txt'), 'name\n');
});

test('sbx.fork({count: 3}): three new sandboxes with the files, metadata and envs, each diverging alone', async () => {
  const parent = keep(await Sandbox.create({ metadata: { run, role: 'parent' }, envs: { FROM_CREATE: 'parent-env' } }));
  await parent.files.write('/home/user/tree/seed.txt', 'seed');
  await run_(parent, "import numpy as np\nnp.save('/home/user/tree/arr.npy', np.arange(10))");
  const before = (await allSnapshots()).length;

  const forks = await parent.fork({ count: 3, timeoutMs: 120_000 });
  assert.equal(forks.length, 3);
  for (const f of forks) assert.ok(f instanceof BaseSandbox, `a fork failed: ${f}`);
  forks.forEach(keep);
  const ids = new Set([parent.sandboxId, ...forks.map((f) => f.sandboxId)]);
  assert.equal(ids.size, 4);

  for (const [i, f] of forks.entries()) {
    const child = await Sandbox.connect(f.sandboxId);  // the code interpreter's class, on the fork
    const info = await child.getInfo();
    assert.equal(info.state, 'running');
    assert.deepEqual(info.metadata, { run, role: 'parent' });
    assert.ok(info.endAt.getTime() > Date.now() + 60_000 && info.endAt.getTime() < Date.now() + 130_000,
      `endAt ${info.endAt.toISOString()}`);
    assert.equal(await child.files.read('/home/user/tree/seed.txt'), 'seed');
    const ex = await run_(child, `import numpy as np\nprint(int(np.load('/home/user/tree/arr.npy').sum()))\nopen('/home/user/tree/seed.txt','w').write('child ${i}')`);
    assert.equal(ex.logs.stdout.join(''), '45\n');
    const cmd = await f.commands.run('echo $FROM_CREATE');
    assert.equal(cmd.stdout, 'parent-env\n');
  }
  // Every child changed its seed; no one else sees it.
  for (const [i, f] of forks.entries()) assert.equal(await f.files.read('/home/user/tree/seed.txt'), `child ${i}`);
  assert.equal(await parent.files.read('/home/user/tree/seed.txt'), 'seed');
  assert.equal((await run_(parent, '6 * 7')).text, '42');

  // A fork leaves no snapshot behind (E2B lists none for it).
  assert.equal((await allSnapshots()).length, before);
  // Listed as sandboxes of this run, each once.
  const pager = Sandbox.list({ query: { metadata: { run, role: 'parent' } }, limit: 100 });
  const listed = [];
  while (pager.hasNext) listed.push(...(await pager.nextItems()).map((s) => s.sandboxId));
  assert.deepEqual(new Set(listed), ids);

  // The static form, default count: one.
  const [one] = await Sandbox.fork(parent.sandboxId);
  assert.ok(one instanceof BaseSandbox);
  keep(one);
  assert.equal(await one.files.read('/home/user/tree/seed.txt'), 'seed');
});

test('fork and createSnapshot of a sandbox that is gone: not found', async () => {
  const sbx = await Sandbox.create({ metadata: { run } });
  const id = sbx.sandboxId;
  await sbx.kill();
  await assert.rejects(Sandbox.fork(id, { count: 1 }), (e) => e.name === 'SandboxNotFoundError');
  await assert.rejects(sbx.createSnapshot(), (e) => e.name === 'SandboxNotFoundError');
});
