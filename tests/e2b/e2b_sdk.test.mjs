// The unmodified E2B SDKs (e2b, @e2b/code-interpreter, pinned in
// package-lock.json) against a live cellgate. The SDK is configured the way
// the README tells an E2B user to: E2B_API_KEY, E2B_API_URL and
// E2B_SANDBOX_URL, nothing else. test_e2b_sdk.py starts the gateway and
// sets them; CELLGATE_OTHER_KEY is a second tenant's token.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { Sandbox } from '@e2b/code-interpreter';
import { Sandbox as BaseSandbox, AuthenticationError, CommandExitError, SandboxError, NotFoundError } from 'e2b';

for (const name of ['E2B_API_KEY', 'E2B_API_URL', 'E2B_SANDBOX_URL'])
  assert.ok(process.env[name], `${name} must be set`);

const made = [];
async function create(opts) {
  const sbx = await Sandbox.create(opts);
  made.push(sbx);
  return sbx;
}
after(async () => {
  for (const s of made) await s.kill().catch(() => {});
});

const PNG_MAGIC = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];

test('network.allowOut reaches the listed name only; without it the sandbox has no way out', async () => {
  const sbx = await create({ network: { allowOut: ['e2b-allowed.test'], denyOut: ['0.0.0.0/0'] } });
  const code = `
import urllib.request
def get(url):
    try:
        return urllib.request.urlopen(url, timeout=20).read().decode()
    except Exception as e:
        return 'refused %s' % getattr(e, 'code', type(e).__name__)
print(get('http://e2b-allowed.test/hi'))
print(get('http://e2b-denied.test/no'))
`;
  const ex = await sbx.runCode(code);
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  assert.equal(ex.logs.stdout.join(''), 'upstream /hi\nrefused 403\n');
  const closed = await create({ allowInternetAccess: true });
  const none = await closed.runCode(code);
  assert.equal(none.logs.stdout.join(''), 'refused URLError\nrefused URLError\n');
  await sbx.kill();
  await closed.kill();
});

test('create, then state across runCode calls', async () => {
  const sbx = await create();
  assert.match(sbx.sandboxId, /^[0-9a-zA-Z-]+$/);
  const first = await sbx.runCode('x = 1');
  assert.equal(first.error, undefined);
  const second = await sbx.runCode('x + 1');
  assert.equal(second.text, '2');
  assert.equal(second.results.length, 1);
  assert.equal(second.results[0].isMainResult, true);
  assert.ok(second.executionCount >= 2, `executionCount ${second.executionCount}`);
});

test('a Matplotlib plot arrives as a PNG', async () => {
  const sbx = await create();
  const ex = await sbx.runCode([
    'import matplotlib.pyplot as plt',
    'plt.plot([1, 2, 3], [1, 4, 9])',
    'plt.title("squares")',
    'plt.show()',
  ].join('\n'));
  assert.equal(ex.error, undefined, JSON.stringify(ex.error));
  const png = ex.results.find((r) => r.png);
  assert.ok(png, `no PNG among ${JSON.stringify(ex.results.map((r) => Object.keys(r)))}`);
  const bytes = Buffer.from(png.png, 'base64');
  assert.deepEqual([...bytes.subarray(0, 8)], PNG_MAGIC);
  assert.ok(bytes.length > 1000);
  assert.equal(png.isMainResult, false);
});

test('onStdout streams lines as they are printed, stderr too', async () => {
  const sbx = await create();
  const out = [], err = [];
  const ex = await sbx.runCode(
    'import sys, time\nfor i in range(3):\n    print("line", i, flush=True)\n    time.sleep(0.2)\nprint("oops", file=sys.stderr)',
    { onStdout: (m) => out.push(m), onStderr: (m) => err.push(m) });
  assert.equal(out.map((m) => m.line).join(''), 'line 0\nline 1\nline 2\n');
  assert.ok(out.length >= 2, `stdout came in ${out.length} piece(s)`);
  assert.ok(out.every((m) => m.error === false && m.timestamp > 0));
  assert.equal(err.map((m) => m.line).join(''), 'oops\n');
  assert.deepEqual(ex.logs.stdout, out.map((m) => m.line));
});

test('an exception is an ExecutionError with name, value and traceback', async () => {
  const sbx = await create();
  const seen = [];
  const ex = await sbx.runCode('def f():\n    raise ValueError("bad input")\nf()', { onError: (e) => seen.push(e) });
  assert.ok(ex.error);
  assert.equal(ex.error.name, 'ValueError');
  assert.equal(ex.error.value, 'bad input');
  assert.equal(typeof ex.error.traceback, 'string');
  const plain = ex.error.traceback.replace(/\x1b\[[0-9;]*m/g, '');  // coloured, as E2B's
  assert.match(plain, /ValueError: bad input/);
  assert.match(plain, /----> 3 f\(\)/);
  assert.equal(seen.length, 1);
  // The sandbox goes on.
  assert.equal((await sbx.runCode('6 * 7')).text, '42');
});

test('envs for one execution only, and rich results in every MIME field', async () => {
  const sbx = await create({ envs: { FROM_CREATE: 'made' } });
  const ex = await sbx.runCode('import os; (os.environ.get("ONE_RUN"), os.environ.get("FROM_CREATE"))',
    { envs: { ONE_RUN: 'yes' } });
  assert.equal(ex.text, "('yes', 'made')");
  const again = await sbx.runCode('import os; os.environ.get("ONE_RUN", "gone")');
  assert.equal(again.text, 'gone');
  const rich = await sbx.runCode('from IPython.display import HTML, Markdown, JSON, display\n' +
    'display(HTML("<b>hi</b>"))\ndisplay(Markdown("# T"))\n{"a": 1}');
  assert.equal(rich.results[0].html, '<b>hi</b>');
  assert.equal(rich.results[1].markdown, '# T');
  assert.equal(rich.text, "{'a': 1}");
});

test('files: write, read, list, exists, makeDir, rename, remove, and 20 MB of binary', async () => {
  const sbx = await create();
  const info = await sbx.files.write('/home/user/hello.txt', 'hello from e2b');
  assert.equal(info.path, '/home/user/hello.txt');
  assert.equal(await sbx.files.read('/home/user/hello.txt'), 'hello from e2b');
  assert.equal(await sbx.files.read('hello.txt'), 'hello from e2b');  // relative to the home
  // The kernel sees the same file where E2B code expects it.
  assert.equal((await sbx.runCode('open("/home/user/hello.txt").read()')).text, 'hello from e2b');

  assert.equal(await sbx.files.exists('/home/user/hello.txt'), true);
  assert.equal(await sbx.files.exists('/home/user/nope.txt'), false);
  assert.equal(await sbx.files.makeDir('/home/user/data/raw'), true);
  assert.equal(await sbx.files.makeDir('/home/user/data/raw'), false);  // already there
  const moved = await sbx.files.rename('/home/user/hello.txt', '/home/user/data/hello.txt');
  assert.equal(moved.path, '/home/user/data/hello.txt');
  const listed = await sbx.files.list('/home/user/data');
  assert.deepEqual(listed.map((e) => [e.name, e.type]).sort(), [['hello.txt', 'file'], ['raw', 'dir']]);
  const deep = await sbx.files.list('/home/user', { depth: 3 });
  assert.ok(deep.some((e) => e.path === '/home/user/data/raw'), JSON.stringify(deep.map((e) => e.path)));
  await sbx.files.remove('/home/user/data');
  assert.equal(await sbx.files.exists('/home/user/data/hello.txt'), false);

  const big = Buffer.alloc(20 << 20);
  for (let i = 0; i < big.length; i += 4) big.writeUInt32LE((i * 2654435761) >>> 0, i);
  await sbx.files.write('/home/user/big.bin', big);
  const back = await sbx.files.read('/home/user/big.bin', { format: 'bytes' });
  assert.equal(back.length, big.length);
  assert.ok(Buffer.from(back).equals(big), 'the 20 MB file came back changed');
  const size = await sbx.runCode('import os; os.path.getsize("big.bin")');
  assert.equal(size.text, String(20 << 20));

  await assert.rejects(sbx.files.read('/home/user/missing.txt'), (e) => e.name === 'FileNotFoundError' || e instanceof NotFoundError);
});

async function until(what, check, ms = 20000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`timed out waiting for ${what}`);
}

test('files.watchDir: writes from the SDK and the kernel, a new subdirectory followed, removal; stop', async () => {
  const sbx = await create();
  await sbx.files.makeDir('/home/user/watched');
  const events = [];
  const seen = (name, type) => events.some((e) => e.name === name && e.type === type);
  let exited = false;
  const handle = await sbx.files.watchDir('/home/user/watched', (ev) => events.push(ev),
    { recursive: true, onExit: () => { exited = true; } });
  await sbx.files.write('/home/user/watched/a.txt', 'one');
  await until('a.txt created and written', () => seen('a.txt', 'create') && seen('a.txt', 'write'));
  await sbx.runCode('import os\nos.mkdir("/home/user/watched/sub")');
  await until('sub created', () => seen('sub', 'create'));
  await sbx.runCode('open("/home/user/watched/sub/b.txt", "w").write("from the kernel")\nos.chmod("/home/user/watched/sub/b.txt", 0o600)');
  await until('sub/b.txt created, written and chmodded', () => seen('sub/b.txt', 'create') && seen('sub/b.txt', 'write') && seen('sub/b.txt', 'chmod'));
  await sbx.files.rename('/home/user/watched/a.txt', '/home/user/watched/c.txt');
  await sbx.files.remove('/home/user/watched/sub/b.txt');
  await until('the rename and the removal', () => seen('a.txt', 'rename') && seen('c.txt', 'create') && seen('sub/b.txt', 'remove'));
  // Nothing outside the watched directory is reported.
  await sbx.files.write('/home/user/outside.txt', 'x');
  await new Promise((r) => setTimeout(r, 300));
  assert.ok(!events.some((e) => e.name.includes('outside')), JSON.stringify(events));
  await handle.stop();
  const count = events.length;
  await sbx.files.write('/home/user/watched/after-stop.txt', 'x');
  await new Promise((r) => setTimeout(r, 300));
  assert.equal(events.length, count, 'events after stop()');
  // A non-recursive watch does not see below its directory; removing the directory ends the watch.
  const flat = [];
  await sbx.files.makeDir('/home/user/flat/deeper');
  const h2 = await sbx.files.watchDir('/home/user/flat', (ev) => flat.push(ev), { onExit: () => { exited = true; } });
  await sbx.files.write('/home/user/flat/deeper/x.txt', 'x');
  await sbx.files.write('/home/user/flat/top.txt', 'x');
  await until('top.txt', () => flat.some((e) => e.name === 'top.txt'));
  assert.ok(!flat.some((e) => e.name.includes('x.txt')), JSON.stringify(flat));
  exited = false;
  await sbx.files.remove('/home/user/flat');
  await until('the watch to end with its directory', () => exited);
  await h2.stop();
  await assert.rejects(sbx.files.watchDir('/home/user/not-there', () => {}));
  await assert.rejects(sbx.files.watchDir('/home/user/watched/c.txt', () => {}));
});

test('commands: run, cwd and envs, a non-zero exit, the sandbox environment', async () => {
  const sbx = await create({ envs: { FROM_CREATE: 'made' } });
  const hi = await sbx.commands.run('echo hi');
  assert.equal(hi.stdout, 'hi\n');
  assert.equal(hi.exitCode, 0);
  await sbx.files.makeDir('/home/user/work');
  await sbx.files.write('/home/user/work/note.txt', 'x');
  const where = await sbx.commands.run('pwd; echo "$GREETING $FROM_CREATE"; ls; id -u; echo $HOME',
    { cwd: '/home/user/work', envs: { GREETING: 'hello' } });
  assert.equal(where.stdout, '/home/user/work\nhello made\nnote.txt\n1000\n/home/user\n');
  const failed = await sbx.commands.run('echo out; echo err >&2; exit 3').catch((e) => e);
  assert.ok(failed instanceof CommandExitError, `not a CommandExitError: ${failed}`);
  assert.equal(failed.exitCode, 3);
  assert.equal(failed.stdout, 'out\n');
  assert.equal(failed.stderr, 'err\n');
  // What a command writes, the kernel reads, and the other way round.
  await sbx.commands.run('echo from-bash > made.txt');
  assert.equal((await sbx.runCode('open("made.txt").read().strip()')).text, 'from-bash');
  // Streaming callbacks.
  const lines = [];
  await sbx.commands.run('for i in 1 2 3; do echo $i; sleep 0.1; done', { onStdout: (d) => lines.push(d) });
  assert.equal(lines.join(''), '1\n2\n3\n');
});

test('commands: a background command is listed, fed stdin, killed; wait() then throws', async () => {
  const sbx = await create();
  let out = '';
  const h = await sbx.commands.run('cat', { background: true, stdin: true, onStdout: (d) => { out += d; } });
  assert.ok(h.pid > 0);
  const listed = await sbx.commands.list();
  assert.ok(listed.some((p) => p.pid === h.pid && p.args.includes('cat')), JSON.stringify(listed));
  await sbx.commands.sendStdin(h.pid, 'ping\n');
  await until('the echoed input', () => out.includes('ping\n'));
  assert.equal(await sbx.commands.kill(h.pid), true);
  await assert.rejects(h.wait(), CommandExitError);
  await until('the killed command to leave the list', async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid));
  assert.equal(await sbx.commands.kill(h.pid), false);
  // stdin closed: the command sees EOF and ends by itself.
  const wc = await sbx.commands.run('wc -c', { background: true, stdin: true });
  await sbx.commands.sendStdin(wc.pid, 'abcd');
  await sbx.commands.closeStdin(wc.pid);
  assert.equal((await wc.wait()).stdout.trim(), '4');
});

test('a PTY: an interactive shell with its size, input and exit', async () => {
  const sbx = await create();
  const chunks = [];
  const pty = await sbx.pty.create({ cols: 100, rows: 30, onData: (d) => chunks.push(Buffer.from(d)) });
  await sbx.pty.sendInput(pty.pid, new TextEncoder().encode('stty size; tty; echo "term=$TERM"; exit 7\n'));
  const ended = await pty.wait().catch((e) => e);
  const text = Buffer.concat(chunks).toString();
  assert.match(text, /30 100/);
  assert.match(text, /\/dev\/pts\/\d+/);
  assert.match(text, /term=xterm-256color/);
  assert.equal(ended.exitCode, 7);
  const again = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} });
  await sbx.pty.resize(again.pid, { cols: 120, rows: 40 });
  assert.equal(await sbx.pty.kill(again.pid), true);
});

test('code contexts: their own variables, the sandbox files, streaming, plots, restart and remove', async () => {
  const sbx = await create();
  await sbx.runCode('x = "kernel"');
  await sbx.files.makeDir('/home/user/ctxdir');
  await sbx.files.write('/home/user/ctxdir/shared.txt', 'from the files API');
  const ctx = await sbx.createCodeContext({ cwd: '/home/user/ctxdir' });
  assert.match(ctx.id, /^[0-9a-f]{32}$/);
  assert.equal(ctx.language, 'python');
  assert.equal(ctx.cwd, '/home/user/ctxdir');
  // Its own namespace: the kernel's x is not there, and its x is not the kernel's.
  const missing = await sbx.runCode('x', { context: ctx });
  assert.equal(missing.error?.name, 'NameError');
  await sbx.runCode('x = 41', { context: ctx });
  assert.equal((await sbx.runCode('x + 1', { context: ctx })).text, '42');
  assert.equal((await sbx.runCode('x')).text, 'kernel');
  // The sandbox's files, from its cwd; a write the kernel reads back.
  const read = await sbx.runCode('import os\nprint(os.getcwd())\nopen("shared.txt").read()', { context: ctx });
  assert.equal(read.text, 'from the files API');
  assert.equal(read.logs.stdout.join(''), '/workspace/ctxdir\n');  // /home/user is a link to it
  await sbx.runCode('open("/home/user/from_ctx.txt", "w").write("ctx")', { context: ctx });
  assert.equal(await sbx.files.read('/home/user/from_ctx.txt'), 'ctx');
  // Streaming, errors, envs and plots as in the default context.
  const lines = [];
  const streamed = await sbx.runCode('import sys, os, time\nprint("one")\ntime.sleep(0.3)\nprint("two", file=sys.stderr)\nos.environ["CTX_VAR"]',
    { context: ctx, envs: { CTX_VAR: 'per-run' }, onStdout: (m) => lines.push(['out', m.line]), onStderr: (m) => lines.push(['err', m.line]) });
  assert.deepEqual(lines, [['out', 'one\n'], ['err', 'two\n']]);
  assert.equal(streamed.text, 'per-run');
  assert.equal((await sbx.runCode('os.environ.get("CTX_VAR", "unset")', { context: ctx })).text, 'unset');
  const failed = await sbx.runCode('def f():\n    raise ValueError("in a context")\nf()', { context: ctx });
  assert.equal(failed.error.name, 'ValueError');
  assert.equal(failed.error.value, 'in a context');
  assert.match(failed.error.traceback, /ValueError/);
  const plot = await sbx.runCode('import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()', { context: ctx });
  assert.equal(plot.error, undefined);
  const png = Buffer.from(plot.results.find((r) => r.png).png, 'base64');
  assert.deepEqual([...png.subarray(0, 8)], PNG_MAGIC);
  // Listed beside the default; a second context is separate from the first.
  const other = await sbx.createCodeContext();
  assert.equal(other.cwd, '/home/user');
  assert.equal((await sbx.runCode('x', { context: other })).error?.name, 'NameError');
  const ids = (await sbx.listCodeContexts()).map((c) => c.id);
  assert.ok(ids.includes(ctx.id) && ids.includes(other.id), JSON.stringify(ids));
  // Not among the sandbox's processes.
  assert.ok(!(await sbx.commands.list()).some((p) => p.args.join(' ').includes('cellgate-context')));
  // Restart: same context, its variables gone.
  await sbx.restartCodeContext(ctx);
  assert.equal((await sbx.runCode('x', { context: ctx })).error?.name, 'NameError');
  // Remove: gone from the list, and running code in it is a NotFound-style error.
  await sbx.removeCodeContext(other);
  assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === other.id));
  await assert.rejects(sbx.runCode('1', { context: other }));
  await assert.rejects(sbx.removeCodeContext(other));
  await assert.rejects(sbx.createCodeContext({ cwd: '/etc' }));
  await assert.rejects(sbx.createCodeContext({ language: 'cobol' }));  // R and the others: e2b_languages.test.mjs
});

test('a code context: an endless cell is interrupted when the client gives up', async () => {
  const sbx = await create();
  const ctx = await sbx.createCodeContext();
  await assert.rejects(sbx.runCode('import time\nwhile True: time.sleep(0.1)', { context: ctx, timeoutMs: 1500 }));
  // The context is free again: the next cell runs.
  assert.equal((await sbx.runCode('6 * 7', { context: ctx })).text, '42');
});

test('getInfo, setTimeout, list, connect and kill', async () => {
  const sbx = await create({ metadata: { suite: 'e2b-sdk', run: String(process.pid) } });
  const info = await sbx.getInfo();
  assert.equal(info.sandboxId, sbx.sandboxId);
  assert.equal(info.templateId, 'code-interpreter-v1');
  assert.deepEqual(info.metadata, { suite: 'e2b-sdk', run: String(process.pid) });
  assert.equal(info.state, 'running');
  const before = info.endAt.getTime();
  await sbx.setTimeout(600_000);
  const later = (await sbx.getInfo()).endAt.getTime();
  assert.ok(later > before + 200_000, `endAt ${before} → ${later}`);

  const pager = Sandbox.list({ query: { metadata: { run: String(process.pid) } } });
  const listed = await pager.nextItems();
  assert.deepEqual(listed.map((s) => s.sandboxId), [sbx.sandboxId]);

  const again = await Sandbox.connect(sbx.sandboxId);
  assert.equal((await again.runCode('21 * 2')).text, '42');

  assert.equal(await sbx.isRunning(), true);
  await sbx.kill();
  assert.equal(await Sandbox.kill(sbx.sandboxId), false);  // already gone
  await assert.rejects(Sandbox.connect(sbx.sandboxId), (e) => e.name === 'SandboxNotFoundError' || e instanceof NotFoundError || e instanceof SandboxError);
});

test("another tenant's key finds nothing, a wrong key is an AuthenticationError", async () => {
  const sbx = await create();
  const other = process.env.CELLGATE_OTHER_KEY;
  assert.ok(other, 'CELLGATE_OTHER_KEY must be set');
  await assert.rejects(Sandbox.connect(sbx.sandboxId, { apiKey: other }),
    (e) => /404|not found/i.test(String(e.message)) || e.name === 'SandboxNotFoundError');
  await assert.rejects(BaseSandbox.getInfo(sbx.sandboxId, { apiKey: other }), (e) => /404|not found/i.test(String(e.message)));
  assert.equal(await Sandbox.kill(sbx.sandboxId, { apiKey: other }), false);
  assert.equal((await sbx.runCode('1 + 1')).text, '2');  // untouched
  await assert.rejects(Sandbox.create({ apiKey: 'not-a-cellgate-token' }), AuthenticationError);
});

test('E2B docs: upload a CSV, analyse it with pandas, chart it', async () => {
  // From E2B's "analyze data with AI" guide, unchanged apart from the data.
  const sbx = await create();
  const csv = 'city,year,temp\nOslo,2023,6.1\nOslo,2024,6.8\nRome,2023,16.2\nRome,2024,16.9\n';
  const dataset = await sbx.files.write('dataset.csv', csv);
  const code = `
import pandas as pd
import matplotlib.pyplot as plt
df = pd.read_csv('${dataset.path}')
means = df.groupby('city')['temp'].mean()
means.plot(kind='bar', title='Mean temperature')
plt.show()
print(means.to_string())
`;
  const execution = await sbx.runCode(code);
  assert.equal(execution.error, undefined, JSON.stringify(execution.error));
  assert.match(execution.logs.stdout.join(''), /Oslo\s+6\.45/);
  assert.match(execution.logs.stdout.join(''), /Rome\s+16\.55/);
  const chart = execution.results.find((r) => r.png);
  assert.ok(chart);
  assert.deepEqual([...Buffer.from(chart.png, 'base64').subarray(0, 8)], PNG_MAGIC);
});

test('a sandbox made with metadata cellgate_max_output_tokens gets head and tail of a flood', async () => {
  const sbx = await create({ metadata: { cellgate_max_output_tokens: '500' } });
  const ex = await sbx.runCode("for i in range(100000): print('row', i)");
  const out = ex.logs.stdout.join('');
  assert.ok(Buffer.byteLength(out) <= 2000, `${Buffer.byteLength(out)} bytes`);
  assert.match(out, /^row 0\n/);
  assert.match(out, /row 99999\n$/);
  assert.match(out, /lines\) elided; all of it: GET \/v1\/sessions\//);
  const plain = await create();
  const full = await plain.runCode("for i in range(1000): print('row', i)");
  assert.equal(full.logs.stdout.join(''), Array.from({ length: 1000 }, (_, i) => `row ${i}\n`).join(''));
});

