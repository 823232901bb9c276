// Pause and resume (issue 15) through the unmodified E2B SDKs (e2b and
// @e2b/code-interpreter, pinned in package-lock.json) against a live
// cellgate: sbx.pause() (E2B's POST /sandboxes/{id}/pause), getInfo() and
// Sandbox.list() saying "paused", Sandbox.connect() resuming, and
// lifecycle.onTimeout 'pause' (autoPause). The SDK is configured only by
// E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL; test_e2b_pause.py starts
// the gateway (runc: a pause keeps the files; the resumed sandbox has a new
// kernel on them) and sets them.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox } from '@e2b/code-interpreter';
import { Sandbox as BaseSandbox, NotFoundError, SandboxError } from 'e2b';

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL'])
  assert.ok(process.env[name], `${name} must be set`);

const run = `e2b-pause-${process.pid}`;
const made = [];
async function create(opts = {}) {
  const sbx = await Sandbox.create({ ...opts, metadata: { run, ...(opts.metadata || {}) } });
  made.push(sbx);
  return sbx;
}
after(async () => {
  for (const s of made) await s.kill().catch(() => {});
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The ids Sandbox.list() gives for this run's sandboxes in `state` (all pages). */
async function listed(state) {
  const pager = Sandbox.list({ query: { metadata: { run }, ...(state ? { state } : {}) }, limit: 100 });
  const out = [];
  while (pager.hasNext) for (const s of await pager.nextItems()) out.push([s.sandboxId, s.state]);
  return out;
}

async function until(what, check, ms = 30000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await sleep(250);
  }
  assert.fail(`timed out waiting for ${what}`);
}

test('pause, then Sandbox.connect resumes it: the files written through the SDK are there, code runs', async () => {
  const sbx = await create({ envs: { FROM_CREATE: 'made' } });
  const id = sbx.sandboxId;
  const info = await sbx.files.write('/home/user/kept/notes.txt', 'written before the pause');
  assert.equal(info.path, '/home/user/kept/notes.txt');
  await sbx.files.write('/home/user/data.bin', new Uint8Array([0, 1, 2, 250, 255]).buffer);
  assert.equal((await sbx.runCode('x = 41\nx + 1')).text, '42');
  assert.equal((await sbx.getInfo()).state, 'running');

  assert.equal(await sbx.pause(), true);
  const paused = await sbx.getInfo();
  assert.equal(paused.sandboxId, id);
  assert.equal(paused.state, 'paused');
  assert.equal((await BaseSandbox.getInfo(id)).state, 'paused');
  assert.deepEqual(paused.metadata, { run });
  // Listed as paused, and not as running.
  assert.deepEqual(await listed(['paused']), [[id, 'paused']]);
  assert.deepEqual(await listed(['running']), []);
  assert.deepEqual(await listed(), [[id, 'paused']]);
  assert.deepEqual(await listed(['running', 'paused']), [[id, 'paused']]);
  // Pausing a paused sandbox: the SDK's "already paused" (a 409) is false.
  assert.equal(await sbx.pause(), false);
  assert.equal(await Sandbox.pause(id), false);

  const again = await Sandbox.connect(id);
  assert.equal(again.sandboxId, id);
  const resumed = await again.getInfo();
  assert.equal(resumed.state, 'running');
  assert.ok(resumed.endAt.getTime() > Date.now() + 60_000, `endAt ${resumed.endAt.toISOString()}`);
  assert.deepEqual(await listed(['running']), [[id, 'running']]);
  assert.deepEqual(await listed(['paused']), []);

  // The files, through the SDK's files API and from the kernel.
  assert.equal(await again.files.read('/home/user/kept/notes.txt'), 'written before the pause');
  assert.deepEqual([...(await again.files.read('/home/user/data.bin', { format: 'bytes' }))], [0, 1, 2, 250, 255]);
  assert.deepEqual((await again.files.list('/home/user/kept')).map((e) => e.name), ['notes.txt']);
  const ex = await again.runCode("print(open('/home/user/kept/notes.txt').read())\n6 * 7");
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  assert.equal(ex.logs.stdout.join(''), 'written before the pause\n');
  assert.equal(ex.text, '42');
  // runc keeps files, not memory: the resumed kernel is a new one.
  assert.equal((await again.runCode("'x' in dir()")).text, 'False');
  // Commands run, with the sandbox's envVars.
  const cmd = await again.commands.run('cat /home/user/kept/notes.txt; echo " $FROM_CREATE"');
  assert.equal(cmd.stdout, 'written before the pause made\n');
  // The first handle works too (same sandbox, same tokens), and writes land.
  await sbx.files.write('/home/user/after.txt', 'after the resume');
  assert.equal((await again.runCode("open('/home/user/after.txt').read()")).text, 'after the resume');

  // A second cycle, then connect (static and on the instance) once more.
  assert.equal(await again.pause(), true);
  assert.equal((await sbx.getInfo()).state, 'paused');
  await sbx.connect();
  assert.equal((await sbx.getInfo()).state, 'running');
  assert.equal(await sbx.files.read('/home/user/after.txt'), 'after the resume');
  assert.equal((await sbx.runCode('1 + 1')).text, '2');
  // Connecting to a running sandbox is harmless.
  await Sandbox.connect(id);
  assert.equal((await sbx.getInfo()).state, 'running');
});

test('a paused sandbox can be killed; then it is gone', async () => {
  const sbx = await create();
  await sbx.files.write('/home/user/f.txt', 'x');
  assert.equal(await sbx.pause(), true);
  assert.equal(await Sandbox.kill(sbx.sandboxId), true);
  assert.equal(await Sandbox.kill(sbx.sandboxId), false);
  await assert.rejects(Sandbox.connect(sbx.sandboxId), (e) => e.name === 'SandboxNotFoundError' || e instanceof NotFoundError || e instanceof SandboxError);
  await assert.rejects(sbx.pause(), (e) => e.name === 'SandboxNotFoundError' || e instanceof NotFoundError);
  assert.ok(!(await listed()).some(([sid]) => sid === sbx.sandboxId));
});

test("lifecycle.onTimeout 'pause' (autoPause): the timeout pauses it instead of killing it; connect resumes it", async () => {
  const sbx = await create({ timeoutMs: 4000, lifecycle: { onTimeout: 'pause' } });
  const id = sbx.sandboxId;
  await sbx.files.write('/home/user/auto.txt', 'kept through the auto-pause');
  await until('the timeout to pause it', async () => (await BaseSandbox.getInfo(id)).state === 'paused');
  // Past its timeout and paused, it is still there (not killed).
  await sleep(3000);
  assert.equal((await BaseSandbox.getInfo(id)).state, 'paused');
  assert.deepEqual(await listed(['paused']), [[id, 'paused']]);

  const again = await Sandbox.connect(id, { timeoutMs: 120_000 });
  const info = await again.getInfo();
  assert.equal(info.state, 'running');
  assert.ok(info.endAt.getTime() > Date.now() + 60_000, `endAt ${info.endAt.toISOString()}`);
  assert.equal(await again.files.read('/home/user/auto.txt'), 'kept through the auto-pause');
  const ex = await again.runCode("open('/home/user/auto.txt').read()");
  assert.equal(ex.text, 'kept through the auto-pause');
  // Its new timeout holds: it stays running well past the old 4 s.
  await sleep(6000);
  assert.equal((await again.getInfo()).state, 'running');
  assert.equal((await again.runCode('6 * 7')).text, '42');
});
