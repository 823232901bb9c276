// Templates (issue 36) through the unmodified E2B SDK (e2b, pinned in
// package-lock.json) against a live cellgate: Template.build() with
// pipInstall (from the test's own index), aptInstall on fromDebianImage()
// (from the test's own apt repository), npmInstall on fromNodeImage() (from
// the test's own npm registry), fromImage (from the test's own
// registry), copy (uploaded to the URL the
// gateway signs), runCmd, setEnvs, setWorkdir, setUser and setStartCmd with a
// ready check, its logs through onBuildLogs, then Sandbox.create('name:tag')
// runs code that uses what was installed, copied and started; a second build
// uploads nothing and finds every layer; a failing step and an image from a
// registry fail with the gateway's reason; tags assigned, listed and removed;
// Template.exists and deleting by
// name. Configured only by E2B_API_KEY,
// E2B_API_URL and E2B_SANDBOX_URL; test_e2b_templates.py starts the gateway.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Template, Sandbox as BaseSandbox } from 'e2b';
import { Sandbox } from '@e2b/code-interpreter';

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL'])
  assert.ok(process.env[name], `${name} must be set`);

const name = `e2b-tpl-${process.pid}`;
const made = [];
after(async () => {
  for (const s of made) await s.kill().catch(() => {});
});

// The files copy() uploads: a directory of the test's own.
const context = fs.mkdtempSync(path.join(os.tmpdir(), 'e2b-tpl-context-'));
fs.mkdirSync(path.join(context, 'app'));
fs.writeFileSync(path.join(context, 'app', 'main.py'), "print('copied app')\n");
fs.writeFileSync(path.join(context, 'app', 'rows.csv'), 'a,b\n1,2\n');
after(() => fs.rmSync(context, { recursive: true, force: true }));

const serve = 'python3 -m http.server 8765 --bind 127.0.0.1 --directory /opt/work';
const listening = `python3 -c "import socket; socket.create_connection(('127.0.0.1', 8765), 1)"`;
const analytics = () =>
  Template({ fileContextPath: context })
    .fromPythonImage('3.11')
    .pipInstall(['cgdemo'])
    .setEnvs({ CGDEMO_MODE: 'e2b' })
    .setWorkdir('/opt/work')
    .copy('app', 'app/')
    .runCmd(['echo made > marker', 'python3 -c "import cgdemo; print(cgdemo.ANSWER)"'])
    .setUser('user')
    .setStartCmd(serve, listening);

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
    "import cgdemo, os, subprocess, urllib.request\n" +
    "print(cgdemo.ANSWER, os.environ['CGDEMO_MODE'], open('/opt/work/marker').read().strip())\n" +
    "print(subprocess.run(['python3', '/opt/work/app/main.py'], capture_output=True, text=True).stdout.strip())\n" +
    "print(urllib.request.urlopen('http://127.0.0.1:8765/marker', timeout=5).read().decode().strip())");
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  // What was installed, what was copied, and the start command's server, up before the first cell.
  assert.equal(ex.logs.stdout.join(''), '42 e2b made\ncopied app\nmade\n');
  assert.ok(logs.some((l) => l.includes("Uploaded 'app'")), logs.join('\n'));
  assert.equal((await sbx.getInfo()).templateId, `${name}:v1`);
  await sbx.kill();
});

test('fromDebianImage with aptInstall and pipInstall, from the operator\'s mirror and index', async () => {
  const logs = [];
  const debian = Template({ fileContextPath: context })
    .fromDebianImage('bookworm')
    .aptInstall(['cgtool'])
    .pipInstall(['cgdemo'])
    .copy('app/main.py', '/opt/main.py')
    .setReadyCmd('test -x /usr/bin/cgtool');
  await Template.build(debian, `${name}-debian`, { onBuildLogs: (e) => logs.push(e.message) });
  assert.ok(logs.some((l) => l.includes('Setting up cgtool (1.0)')), logs.join('\n'));
  const sbx = await Sandbox.create(`${name}-debian`);
  made.push(sbx);
  const ex = await sbx.runCode(
    "import cgdemo, subprocess\n" +
    "print(subprocess.run(['cgtool'], capture_output=True, text=True).stdout.strip(), cgdemo.ANSWER)\n" +
    "print(subprocess.run(['python3', '/opt/main.py'], capture_output=True, text=True).stdout.strip())");
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  assert.equal(ex.logs.stdout.join(''), 'cgtool 1.0 says hello 42\ncopied app\n');
  await sbx.kill();
  await BaseSandbox.deleteSnapshot(`${name}-debian`);
});

test('fromNodeImage with npmInstall, from the operator\'s registry', async () => {
  const logs = [];
  const node = Template().fromNodeImage('lts').npmInstall(['cg-greet'], { g: true });
  await Template.build(node, `${name}-node`, { onBuildLogs: (e) => logs.push(e.message) });
  assert.ok(logs.some((l) => l.includes('added 1 package')), logs.join('\n'));
  const sbx = await Sandbox.create(`${name}-node`);
  made.push(sbx);
  const ex = await sbx.runCode(
    "import subprocess\n" +
    "print(subprocess.run(['cg-greet', 'e2b'], capture_output=True, text=True).stdout.strip())");
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  assert.equal(ex.logs.stdout.join(''), 'cg-greet 1.0.0 greets e2b\n');
  await sbx.kill();
  await BaseSandbox.deleteSnapshot(`${name}-node`);
});

test('fromImage pulls from a registry the operator names', async () => {
  const image = process.env.CG_REGISTRY_IMAGE;
  assert.ok(image, 'CG_REGISTRY_IMAGE must be set');
  await Template.build(Template().fromImage(image).runCmd('echo on-the-pulled-image > /opt/pulled', { user: 'root' }),
    `${name}-pulled`);
  const sbx = await Sandbox.create(`${name}-pulled`);
  made.push(sbx);
  const ex = await sbx.runCode("import os\nprint(os.environ['CGREG'], open('/opt/pulled').read().strip())");
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  assert.equal(ex.logs.stdout.join(''), 'pulled on-the-pulled-image\n');
  await sbx.kill();
  await BaseSandbox.deleteSnapshot(`${name}-pulled`);
});

test('a second build of the same steps finds every layer made', async () => {
  const logs = [];
  await Template.build(analytics(), `${name}:v1`, { onBuildLogs: (e) => logs.push(e.message) });
  assert.equal(logs.filter((l) => l.includes('---> cached')).length, 3, logs.join('\n'));
  assert.ok(logs.some((l) => l.includes("Skipping upload of 'app', already cached")), logs.join('\n'));
  assert.ok(!logs.some((l) => l.includes('Successfully installed')), logs.join('\n'));
});

test('tags: a build under several, one assigned later, listed, removed', async () => {
  const tagged = `${name}-tagged`;
  await Template.build(Template().fromPythonImage().runCmd('echo tagged > /opt/t', { user: 'root' }), `${tagged}:v1`,
    { tags: ['stable'] });
  const assigned = await Template.assignTags(`${tagged}:v1`, ['prod']);
  assert.deepEqual(assigned.tags, ['prod']);
  const tags = await Template.getTags(tagged);
  assert.deepEqual(tags.map((t) => t.tag).sort(), ['prod', 'stable', 'v1']);
  assert.equal(new Set(tags.map((t) => t.buildId)).size, 1);
  assert.equal(assigned.buildId, tags[0].buildId);
  const sbx = await Sandbox.create(`${tagged}:prod`);
  made.push(sbx);
  const ex = await sbx.runCode("print(open('/opt/t').read().strip())");
  assert.equal(ex.logs.stdout.join(''), 'tagged\n');
  await sbx.kill();
  await Template.removeTags(tagged, ['stable', 'v1']);
  assert.deepEqual((await Template.getTags(tagged)).map((t) => t.tag), ['prod']);
  await assert.rejects(Template.removeTags(tagged, ['gone']), /not found/i);
  await Template.removeTags(tagged, 'prod');
});

test("a failing step fails the build with its step, its exit code and its log", async () => {
  await assert.rejects(
    Template.build(Template().fromPythonImage().runCmd('echo going down; exit 3'), `${name}-bad`),
    (e) => e.name === 'BuildError' && /exited with code 3/.test(e.message));
});

test('what the gateway does not do yet is refused with its reason, before anything runs', async () => {
  await assert.rejects(
    Template.build(Template().fromImage('alpine:3.20').runCmd('true'), `${name}-alpine`),
    (e) => e.name === 'BuildError' && /registries/.test(e.message));
});

test('deleting the template by name ends it', async () => {
  await BaseSandbox.deleteSnapshot(name);
  assert.equal(await Template.exists(name), false);
  await assert.rejects(Sandbox.create(`${name}:v1`), /not found/i);
});
