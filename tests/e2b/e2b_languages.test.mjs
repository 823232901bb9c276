// The unmodified E2B code-interpreter SDK in every language cellgate's
// code-interpreter-v1 template has: runCode with a language (E2B's default
// context per language) and createCodeContext({language}). Driven by
// test_e2b_sdk.py, configured as e2b_sdk.test.mjs is.
import { test, after, before } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox } from '@e2b/code-interpreter';

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL'])
  assert.ok(process.env[name], `${name} must be set`);

const PNG_MAGIC = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
let sbx;
before(async () => {
  sbx = await Sandbox.create({ envs: { FROM_CREATE: 'made at create' } });
});
after(async () => {
  await sbx?.kill().catch(() => {});
});

function ok(ex) {
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  return ex;
}

test('R: variables persist across calls, and a ggplot comes back as a PNG', async () => {
  ok(await sbx.runCode('x <- c(2, 4, 8)', { language: 'r' }));
  assert.equal(ok(await sbx.runCode('sum(x)', { language: 'r' })).text, '[1] 14');
  const plot = ok(await sbx.runCode(
    'library(ggplot2)\nggplot(data.frame(i = 1:3, x = x), aes(i, x)) + geom_line()', { language: 'r' }));
  const png = plot.results.map(r => r.png).find(Boolean);
  assert.ok(png, `no PNG in ${JSON.stringify(plot.results.map(r => r.formats()))}`);
  assert.deepEqual([...Buffer.from(png, 'base64').subarray(0, 8)], PNG_MAGIC);
  const err = await sbx.runCode('stop("no such column")', { language: 'r' });
  assert.match(err.error?.value ?? '', /no such column/);
});

test('JavaScript and TypeScript: state kept across calls, console output streamed', async () => {
  ok(await sbx.runCode('let n = 40; const seen = [];', { language: 'js' }));
  const lines = [];
  const js = ok(await sbx.runCode('seen.push(n); console.log("n is", n); n + 2',
    { language: 'javascript', onStdout: m => lines.push(m.line) }));
  assert.equal(js.text, '42');
  assert.deepEqual(lines, ['n is 40\n']);
  ok(await sbx.runCode('function twice(a: number): number { return a * 2 }\nlet total: number = 0;', { language: 'ts' }));
  ok(await sbx.runCode('total += twice(10);', { language: 'typescript' }));
  assert.equal(ok(await sbx.runCode('total + twice(1)', { language: 'ts' })).text, '22');
});

test('Bash: variables and the working directory persist; the sandbox environment is there', async () => {
  ok(await sbx.runCode('GREETING=hello; mkdir -p sub && cd sub', { language: 'bash' }));
  const ex = ok(await sbx.runCode('echo "$GREETING from $(basename "$PWD"), $FROM_CREATE"', { language: 'bash' }));
  assert.equal(ex.logs.stdout.join(''), 'hello from sub, made at create\n');
});

test('every language sees the same files, and envs last one execution', async () => {
  ok(await sbx.runCode('open("/home/user/shared.csv", "w").write("a,b\\n1,2\\n3,4\\n")'));
  assert.equal(ok(await sbx.runCode('sum(read.csv("/home/user/shared.csv")$b)', { language: 'r' })).text, '[1] 6');
  const js = ok(await sbx.runCode('Deno.readTextFileSync("/home/user/shared.csv").trim().split("\\n").length',
    { language: 'js' }));
  assert.equal(js.text, '3');
  const r = ok(await sbx.runCode('Sys.getenv("ONE_RUN")', { language: 'r', envs: { ONE_RUN: 'only now' } }));
  assert.equal(r.text, '[1] "only now"');
  assert.equal(ok(await sbx.runCode('Sys.getenv("ONE_RUN", "gone")', { language: 'r' })).text, '[1] "gone"');
});

test('createCodeContext({language}): its own variables, listed with its language, removed', async () => {
  const ctx = await sbx.createCodeContext({ language: 'r' });
  assert.equal(ctx.language, 'r');
  const missing = await sbx.runCode('exists("x")', { context: ctx });
  assert.equal(missing.text, '[1] FALSE');  // the default R context's x is not here
  ok(await sbx.runCode('y <- 5', { context: ctx }));
  assert.equal(ok(await sbx.runCode('y * 2', { context: ctx })).text, '[1] 10');
  const ts = await sbx.createCodeContext({ language: 'ts', cwd: '/home/user/sub' });
  assert.equal(ts.language, 'typescript');
  assert.match(ok(await sbx.runCode('Deno.cwd()', { context: ts })).text, /^["']?\/(workspace|home\/user)\/sub["']?$/);
  const listed = await sbx.listCodeContexts();
  assert.ok(listed.some(c => c.id === ctx.id && c.language === 'r'), JSON.stringify(listed));
  await sbx.removeCodeContext(ctx);
  assert.ok(!(await sbx.listCodeContexts()).some(c => c.id === ctx.id));
});

test('a language the sandbox lacks is refused with what it has', async () => {
  await assert.rejects(sbx.runCode('DISPLAY "HI"', { language: 'cobol' }), e => {
    assert.match(String(e.message), /^400/);  // the SDK shows the body only with includeDiagnostics
    return true;
  });
});
