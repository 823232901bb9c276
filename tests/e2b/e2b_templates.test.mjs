// Templates (issue 36) through the unmodified E2B SDK (e2b, pinned in
// package-lock.json) against a live cellgate: Template.build() with
// pipInstall (from the test's own index), runCmd, setEnvs, setWorkdir and
// setUser, its logs through onBuildLogs, then Sandbox.create('name:tag')
// runs code that uses what was installed; a second build finds every layer;
// a failing step and an unsupported copy() fail with the gateway's reason;
// Template.exists and deleting by name. Configured only by E2B_API_KEY,
// E2B_API_URL and E2B_SANDBOX_URL; test_e2b_templates.py starts the gateway.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Template, Sandbox as BaseSandbox } from 'e2b';
import { Sandbox } from '@e2b/code-interpreter';

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL'])
  assert.ok(process.env[name], `${name} must be set`);

const name = `e2b-tpl-${process.pid}`;
const made = [];
after(async () => {
  for (const s of made) await s.kill().catch(() => {});
});

const analytics = () =>
  Template()
    .fromPythonImage('3.11')
    .pipInstall(['cgdemo'])
    .setEnvs({ CGDEMO_MODE: 'e2b' })
    .setWorkdir('/opt/work')
    .runCmd(['echo made > marker', 'python3 -c "import cgdemo; print(cgdemo.ANSWER)"'])
    .setUser('user');

test('Template.build installs from the index, streams its logs, and Sandbox.create(name:tag) runs on it', async () => {
  const logs = [];
  const info = await Template.build(analytics(), `${name}:v1`, { onBuildLogs: (e) => logs.push(e.message) });
  assert.equal(info.templateId, name);
  assert.ok(logs.some((l) => l.includes('Successfully installed cgdemo-1.0')), logs.join('\n'));
  assert.ok(logs.some((l) => l.trim() === '42'), logs.join('\n'));
  assert.equal(await Template.exists(name), true);
  assert.equal(await Template.exists(`${name}-never-built`), false);

  const sbx = await Sandbox.create(`${name}:v1`);
  made.push(sbx);
  const ex = await sbx.runCode(
    "import cgdemo, os\nprint(cgdemo.ANSWER, os.environ['CGDEMO_MODE'], open('/opt/work/marker').read().strip())");
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  assert.equal(ex.logs.stdout.join(''), '42 e2b made\n');
  assert.equal((await sbx.getInfo()).templateId, `${name}:v1`);
  await sbx.kill();
});

test('a second build of the same steps finds every layer made', async () => {
  const logs = [];
  await Template.build(analytics(), `${name}:v1`, { onBuildLogs: (e) => logs.push(e.message) });
  assert.equal(logs.filter((l) => l.includes('---> cached')).length, 2, logs.join('\n'));
  assert.ok(!logs.some((l) => l.includes('Successfully installed')), logs.join('\n'));
});

test("a failing step fails the build with its step, its exit code and its log", async () => {
  await assert.rejects(
    Template.build(Template().fromPythonImage().runCmd('echo going down; exit 3'), `${name}-bad`),
    (e) => e.name === 'BuildError' && /exited with code 3/.test(e.message));
});

test('what the gateway does not do yet is refused with its reason, before anything runs', async () => {
  await assert.rejects(
    Template.build(Template().fromPythonImage().copy('package.json', '/opt/'), `${name}-copy`),
    (e) => /COPY steps/.test(e.message));
  await assert.rejects(
    Template.build(Template().fromImage('alpine:3.20').runCmd('true'), `${name}-alpine`),
    (e) => e.name === 'BuildError' && /registry/.test(e.message));
  await assert.rejects(
    Template.build(Template().fromPythonImage().setStartCmd('sleep infinity', 'true'), `${name}-start`),
    (e) => e.name === 'BuildError' && /start command/.test(e.message));
});

test('deleting the template by name ends it', async () => {
  await BaseSandbox.deleteSnapshot(name);
  assert.equal(await Template.exists(name), false);
  await assert.rejects(Sandbox.create(`${name}:v1`), /not found/i);
});
