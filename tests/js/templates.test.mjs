// Templates with clients/js/cellgate.js against a live cellgate gateway (real
// runc sandboxes and build sandboxes), with Node's built-in test runner:
// buildTemplate with its log streamed to onLog, createSession({template}),
// list/get, tags, a failing build as TemplateBuildError, TemplateNotFound.
// Driven by test_js_client.py (CELLGATE_URL, CELLGATE_TOKEN and
// CELLGATE_CLIENT_MODULE: the client as the gateway serves it). Each run's
// steps carry a word of its own, so no earlier run's layer is found.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { pathToFileURL } from 'node:url';

const modulePath = process.env.CELLGATE_CLIENT_MODULE || new URL('../../clients/js/cellgate.js', import.meta.url).pathname;
const { Cellgate, TemplateBuildError, TemplateNotFound } = await import(pathToFileURL(modulePath).href);

const url = process.env.CELLGATE_URL;
const token = process.env.CELLGATE_TOKEN;
assert.ok(url && token, 'CELLGATE_URL and CELLGATE_TOKEN must be set');
const cg = new Cellgate({ url, token });
const word = randomBytes(5).toString('hex');
const name = `js-${word}`;

test('buildTemplate streams its log, a session starts on it, tags name it', async () => {
  const lines = [];
  const build = await cg.buildTemplate({
    name: `${name}:v1`, tags: ['stable'],
    steps: [{ type: 'ENV', args: ['JS_WORD', word] }, { type: 'RUN', args: [`echo ${word} > /opt/word; cat /opt/word`] }],
  }, { onLog: (l) => lines.push(l) });
  assert.equal(build.status, 'ready');
  assert.equal(build.built_steps, 1);
  assert.ok(lines.includes(word), lines.join('\n'));  // the step's own output, through the stream
  assert.ok(lines.some((l) => l.startsWith('Step 2/2: RUN echo')), lines.join('\n'));
  const s = await cg.createSession({ template: `${name}:stable`, timeout: 60 });
  try {
    const ex = await s.execute("import os\nprint(open('/opt/word').read().strip(), os.environ['JS_WORD'])");
    assert.equal(ex.stdout, `${word} ${word}\n`);
  } finally {
    await s.close();
  }
  assert.ok((await cg.listTemplates()).some((t) => t.reference === `${name}:v1`));
  assert.equal((await cg.getTemplate(`${name}:v1`)).env.JS_WORD, word);
  const tagged = await cg.tagTemplate(`${name}:v1`, 'prod');
  assert.deepEqual(tagged, { build_id: build.build_id, tags: ['prod'] });
  assert.deepEqual((await cg.templateTags(name)).map((t) => t.tag).sort(), ['prod', 'stable', 'v1']);
  for (const tag of ['v1', 'stable', 'prod']) await cg.deleteTemplate(`${name}:${tag}`);
  await assert.rejects(cg.getTemplate(`${name}:v1`), TemplateNotFound);
  await assert.rejects(cg.deleteTemplate(`${name}:v1`), TemplateNotFound);
});

test('a failing step rejects with TemplateBuildError: its step, exit code and log', async () => {
  const e = await cg.buildTemplate({ name: `${name}-bad`, steps: [{ type: 'RUN', args: [`echo ${word} going down; exit 3`] }] })
    .then(() => assert.fail('the build should fail'), (err) => err);
  assert.ok(e instanceof TemplateBuildError, String(e));
  assert.equal(e.failure.exit_code, 3);
  assert.deepEqual(e.failure.step, { index: 0, type: 'RUN' });
  assert.match(e.failure.log_tail, /going down/);
  // Never built: its name shows the failed build, and no session starts on it.
  assert.equal((await cg.getTemplate(`${name}-bad`)).status, 'error');
  await assert.rejects(cg.createSession({ template: `${name}-bad` }), (err) => err.status === 404);
});
