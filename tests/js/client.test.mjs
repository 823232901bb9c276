// Unit tests of clients/js/cellgate.js against a live cellgate gateway (real
// sandboxes), with Node's built-in test runner. Driven by test_js_client.py,
// which starts the gateway and passes CELLGATE_URL / CELLGATE_TOKEN, and
// CELLGATE_CLIENT_MODULE: the client as the gateway serves it.
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import { pathToFileURL } from 'node:url';

const modulePath = process.env.CELLGATE_CLIENT_MODULE || new URL('../../clients/js/cellgate.js', import.meta.url).pathname;
const { Cellgate, CellgateError, NotFound, SessionNotFound, CommandExitError, CommandHandle, readEventStream, quotePath } =
  await import(pathToFileURL(modulePath).href);

const url = process.env.CELLGATE_URL;
const token = process.env.CELLGATE_TOKEN;
assert.ok(url && token, 'CELLGATE_URL and CELLGATE_TOKEN must be set');

const cg = new Cellgate({ url, token });
const sha256 = (bytes) => createHash('sha256').update(bytes).digest('hex');
const elapsed = (t0) => Date.now() - t0;

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

describe('client basics', () => {
  test('constructor: url required outside a browser, trailing slash dropped, bad scheme refused', () => {
    const saved = process.env.CELLGATE_URL;
    delete process.env.CELLGATE_URL;
    try {
      assert.throws(() => new Cellgate({ token }), TypeError);
    } finally {
      process.env.CELLGATE_URL = saved;
    }
    assert.equal(new Cellgate({ url: url + '/', token }).url, url);
    assert.throws(() => new Cellgate({ url: 'ftp://x', token }), TypeError);
    // Node default: $CELLGATE_URL and $CELLGATE_TOKEN.
    const fromEnv = new Cellgate();
    assert.equal(fromEnv.url, url);
    assert.equal(fromEnv.token, token);
  });

  test('quotePath encodes each segment', () => {
    assert.equal(quotePath('a b/c#d?.txt'), 'a%20b/c%23d%3F.txt');
    assert.equal(quotePath('/workspace/x/y.csv'), 'x/y.csv');
  });

  test('readEventStream: CRLF/CR/LF, comments, multi-line data, chunk splits', async () => {
    const text = ': keepalive\r\n\r\nevent: stdout\r\ndata: {"text":"a"}\r\n\r\nevent: x\rdata: l1\rdata: l2\r\r' +
      'data: plain\n\nevent: end\ndata: {"status":"ok"}\n\n';
    const bytes = new TextEncoder().encode(text);
    // Split into 1-byte chunks: every boundary case (a CRLF split in two too).
    const body = new ReadableStream({
      start(c) { for (const b of bytes) c.enqueue(new Uint8Array([b])); c.close(); },
    });
    const got = [];
    await readEventStream(body, (e, d) => got.push([e, d]));
    assert.deepEqual(got, [['stdout', '{"text":"a"}'], ['x', 'l1\nl2'], ['message', 'plain'], ['end', '{"status":"ok"}']]);
  });
});

describe('sessions', () => {
  test('create, info, list, connect, close (twice), then 404', async () => {
    const s = await cg.createSession({ timeout: 30, idleTimeout: 300 });
    try {
      assert.match(s.id, /^[0-9a-f-]{16,}$/);
      assert.equal(s.limits.timeout_s, 30);
      assert.equal(s.limits.idle_timeout_s, 300);
      const info = await s.info();
      assert.equal(info.id, s.id);
      assert.ok(['idle', 'starting', 'busy'].includes(info.state), info.state);
      const list = await cg.listSessions();
      assert.ok(list.some((m) => m.id === s.id), 'listSessions() includes the new session');
      const again = await cg.connect(s.id);
      assert.equal(again.id, s.id);
    } finally {
      await s.close();
      await s.close();  // harmless
    }
    const e = await rejectsWith(s.info(), (err) => assert.ok(err instanceof SessionNotFound, String(err)));
    assert.equal(e.status, 404);
    assert.ok(e instanceof CellgateError && e instanceof Error);
    assert.ok(!(await cg.listSessions()).some((m) => m.id === s.id));
  });

  test('createSession: a non-KERNEL_ env name is refused with 400', async () => {
    const e = await rejectsWith(cg.createSession({ env: { PATH: '/x' } }), (err) => assert.ok(err instanceof CellgateError));
    assert.equal(e.status, 400);
    assert.match(e.message, /KERNEL_/);
  });
});

describe('a session', () => {
  /** @type {import('../../clients/js/cellgate.js').Session} */
  let s;
  before(async () => { s = await cg.createSession({ timeout: 60 }); });
  after(async () => { if (s) await s.close(); });

  test('execute (JSON): stdout, value, count, status', async () => {
    const ex = await s.execute('print("hello")\nx = 6\nx * 7');
    assert.equal(ex.status, 'ok');
    assert.equal(ex.stdout, 'hello\n');
    assert.equal(ex.text, '42');
    assert.ok(Number.isInteger(ex.execution_count) && ex.execution_count >= 1);
    assert.equal(ex.error, null);
    assert.ok(ex.results.some((r) => r.is_main_result && r.data['text/plain'] === '42'));
    assert.equal(typeof ex.duration_ms, 'number');
  });

  test('execute: usage is the ledger record; executions() pages the ledger', async () => {
    const ex = await s.execute("open('js-ledger.txt', 'w').write('12345')\nsum(range(10**6))");
    assert.equal(ex.usage.execution_id, ex.execution_id);
    assert.equal(ex.usage.status, 'ok');
    assert.ok(typeof ex.usage.cpu_s === 'number' && ex.usage.peak_memory_bytes > 0, JSON.stringify(ex.usage));
    assert.deepEqual(ex.usage.files.created, [{ path: 'js-ledger.txt', size: 5 }]);
    const { executions, nextAfter } = await s.executions({ limit: 1000 });
    assert.equal(nextAfter, null);
    assert.equal(executions.at(-1).execution_id, ex.execution_id);
    const first = await s.executions({ limit: 1 });
    assert.equal(first.executions.length, 1);
    assert.equal(first.nextAfter, executions.length > 1 ? first.executions[0].seq : null);
  });

  test('execute (JSON): an error is a result, not an exception', async () => {
    const ex = await s.execute('1/0');
    assert.equal(ex.status, 'error');
    assert.equal(ex.error.ename, 'ZeroDivisionError');
    assert.match(ex.error.traceback_text, /ZeroDivisionError/);
    assert.ok(ex.error.traceback.join('\n').includes('\x1b['), 'traceback keeps its ANSI colours');
  });

  test('execute (SSE): callbacks in order, end result returned', async () => {
    const order = [];
    const code = [
      'import sys',
      'from IPython.display import display',
      'print("out1", flush=True)',
      'display({"text/plain": "disp", "text/html": "<b>disp</b>"}, raw=True)',
      'print("err1", file=sys.stderr, flush=True)',
      'open("made.txt", "w").write("x")',
      '"value"',
    ].join('\n');
    const ex = await s.execute(code, {
      onStdout: (t) => order.push(['stdout', t]),
      onStderr: (t) => order.push(['stderr', t]),
      onDisplay: (d) => order.push(['display', d.data['text/plain']]),
      onResult: (r) => order.push(['result', r.data['text/plain'], typeof r.execution_count]),
      onError: (e) => order.push(['error', e.ename]),
      onFiles: (f) => order.push(['files', f.map((x) => x.path).join(',')]),
    });
    assert.deepEqual(order, [
      ['stdout', 'out1\n'],
      ['display', 'disp'],
      ['stderr', 'err1\n'],
      ['result', "'value'", 'number'],
      ['files', 'made.txt'],
    ]);
    assert.equal(ex.status, 'ok');
    assert.equal(ex.text, "'value'");
    assert.equal(ex.stdout, 'out1\n');
    assert.equal(ex.stderr, 'err1\n');
    assert.deepEqual(ex.files.map((f) => [f.path, f.change]), [['made.txt', 'created']]);
  });

  test('execute (SSE): an error event, then the end', async () => {
    const events = [];
    const ex = await s.execute('print("before", flush=True)\nraise ValueError("bad value")', {
      onEvent: (e) => events.push(e),
      onError: (e) => events.push(`error:${e.ename}:${e.evalue}`),
    });
    assert.deepEqual(events, ['stdout', 'error', 'error:ValueError:bad value', 'end']);
    assert.equal(ex.status, 'error');
    assert.equal(ex.error.evalue, 'bad value');
  });

  test('execute (SSE): output streams while the cell runs', async () => {
    const t0 = Date.now();
    const seen = [];
    const ex = await s.execute('import time\nfor i in range(3):\n    print(i, flush=True)\n    time.sleep(0.7)', {
      onStdout: (t) => seen.push([t, elapsed(t0)]),
    });
    const total = elapsed(t0);
    assert.equal(ex.stdout, '0\n1\n2\n');
    assert.deepEqual(seen.map((x) => x[0]).join(''), '0\n1\n2\n');
    assert.ok(seen[0][1] < total - 1000, `the first chunk came at ${seen[0][1]} ms, the end at ${total} ms`);
  });

  test('execute: a timeout is a result with status "timeout"', async () => {
    const ex = await s.execute('import time\nprint("start", flush=True)\ntime.sleep(30)', { timeout: 2 });
    assert.equal(ex.status, 'timeout');
    assert.equal(ex.stdout, 'start\n');
  });

  test('abort → the gateway interrupts the cell (state kept)', async () => {
    await s.execute('kept = 123');
    const controller = new AbortController();
    const t0 = Date.now();
    const run = s.execute('import time\nprint("started", flush=True)\ntime.sleep(60)\nopen("finished.txt", "w").write("x")', {
      signal: controller.signal,
      onStdout: () => controller.abort(),
    });
    const e = await rejectsWith(run, (err) => assert.equal(err.name, 'AbortError'));
    assert.ok(e);
    // Executions run one at a time: this one can only start once the aborted
    // cell has been interrupted.
    const next = await s.execute('print(kept)');
    assert.equal(next.stdout, '123\n');
    assert.ok(elapsed(t0) < 20000, `the next cell ran ${elapsed(t0)} ms after the abort`);
    const files = await s.listFiles();
    assert.ok(!files.some((f) => f.path === 'finished.txt'), 'the aborted cell did not finish');
  });

  test('abort with a signal that is already aborted rejects at once', async () => {
    const controller = new AbortController();
    controller.abort();
    await rejectsWith(s.execute('print(1)', { signal: controller.signal }), (err) => assert.equal(err.name, 'AbortError'));
  });

  test('a throwing callback disconnects (the cell is interrupted) and the error propagates', async () => {
    const t0 = Date.now();
    await rejectsWith(s.execute('import time\nprint("x", flush=True)\ntime.sleep(60)', {
      onStdout: () => { throw new RangeError('from the callback'); },
    }), (err) => assert.ok(err instanceof RangeError));
    const next = await s.execute('1 + 1');
    assert.equal(next.text, '2');
    assert.ok(elapsed(t0) < 20000);
  });

  test('interrupt(): the running cell gets KeyboardInterrupt', async () => {
    const t0 = Date.now();
    let started;
    const startedP = new Promise((r) => { started = r; });
    const run = s.execute('import time\nprint("sleeping", flush=True)\ntime.sleep(60)', { onStdout: () => started() });
    await startedP;
    await s.interrupt();
    const ex = await run;
    assert.equal(ex.status, 'interrupted');
    assert.equal(ex.error.ename, 'KeyboardInterrupt');
    assert.ok(elapsed(t0) < 20000, `interrupted after ${elapsed(t0)} ms`);
  });

  test('restart(): variables are lost, files stay', async () => {
    await s.execute('survivor = 1\nopen("keep.txt", "w").write("kept")');
    const model = await s.restart();
    assert.equal(model.id, s.id);
    const ex = await s.execute('survivor');
    assert.equal(ex.status, 'error');
    assert.equal(ex.error.ename, 'NameError');
    assert.equal(await s.download('keep.txt', { as: 'text' }), 'kept');
  });

  test('upload/download: byte-identical for every input type', async () => {
    const allBytes = new Uint8Array(256).map((_, i) => i);
    const big = new Uint8Array(randomBytes(3 * 1024 * 1024 + 17));
    const text = 'héllo ✓ — ünïcode\r\n\0end';
    const cases = [
      ['bin/all.bin', allBytes, allBytes],
      ['bin/big.bin', big, big],
      ['bin/buffer.bin', big.buffer.slice(0, 4096), big.subarray(0, 4096)],
      ['bin/view.bin', big.subarray(10, 5000), big.subarray(10, 5000)],
      ['bin/blob.bin', new Blob([allBytes, allBytes]), new Uint8Array([...allBytes, ...allBytes])],
      ['text/ütf 8 #1.txt', text, new TextEncoder().encode(text)],
    ];
    for (const [path, data, expected] of cases) {
      const info = await s.upload(path, data);
      assert.equal(info.path, path);
      assert.equal(info.size, expected.length, path);
      const back = await s.download(path);
      assert.ok(back instanceof ArrayBuffer);
      assert.equal(sha256(new Uint8Array(back)), sha256(expected), `${path} round-trips`);
    }
    // The kernel sees the same bytes.
    const ex = await s.execute('import hashlib\nprint(hashlib.sha256(open("bin/big.bin","rb").read()).hexdigest())');
    assert.equal(ex.stdout.trim(), sha256(big));
    // Other shapes of download.
    const blob = await s.download('bin/all.bin', { as: 'blob' });
    assert.ok(blob instanceof Blob);
    assert.equal(sha256(new Uint8Array(await blob.arrayBuffer())), sha256(allBytes));
    assert.equal(await s.download('text/ütf 8 #1.txt', { as: 'text' }), text);
    const res = await s.download('bin/all.bin', { as: 'response' });
    assert.equal(res.headers.get('content-type'), 'application/octet-stream');
    assert.equal((await res.arrayBuffer()).byteLength, 256);
    // Replacing a file answers 200 and the new bytes win.
    await s.upload('bin/all.bin', 'short');
    assert.equal(await s.download('bin/all.bin', { as: 'text' }), 'short');
    // The directory as a tar archive: ustar headers naming each file, its bytes after them.
    const tar = new Uint8Array(await s.exportWorkspace({ path: 'bin' }));
    assert.equal(tar.length % 512, 0);
    const names = [];
    for (let at = 0; at + 512 <= tar.length && tar[at] !== 0;) {
      const field = (from, len) => new TextDecoder().decode(tar.subarray(at + from, at + from + len)).replace(/\0.*$/s, '');
      assert.equal(field(257, 5), 'ustar');
      names.push(field(0, 100));
      const size = parseInt(field(124, 12), 8);
      if (field(0, 100) === 'all.bin') assert.equal(new TextDecoder().decode(tar.subarray(at + 512, at + 512 + size)), 'short');
      at += 512 + Math.ceil(size / 512) * 512;
    }
    assert.deepEqual(names.sort(), ['all.bin', 'big.bin', 'blob.bin', 'buffer.bin', 'view.bin']);
    const report = await s.importWorkspace(tar, { path: 'copy' });
    assert.equal(report.files, 5);
    assert.equal(report.skipped_count, 0);
    assert.equal(await s.download('copy/all.bin', { as: 'text' }), 'short');
    // A new session starts on the archive, with its own request's limits.
    const moved = await cg.createSession({ workspace: tar, lifetime: 500 });
    try {
      assert.equal(moved.model.imported.files, 5);
      assert.equal(moved.model.limits.lifetime_s, 500);
      assert.equal(await moved.download('all.bin', { as: 'text' }), 'short');
      assert.equal((await moved.execute("print(open('big.bin','rb').read() == open('big.bin','rb').read(), len(open('all.bin').read()))")).stdout, 'True 5\n');
    } finally {
      await moved.close();
    }
    await assert.rejects(cg.createSession({ workspace: new TextEncoder().encode('not a tar archive'.repeat(64)) }),
      (e) => e instanceof CellgateError && e.status === 400 && /archive/.test(e.message));
  });

  test('a file the kernel wrote downloads byte-identical', async () => {
    const ex = await s.execute([
      'import os, hashlib',
      'os.makedirs("out", exist_ok=True)',
      'b = os.urandom(100000)',
      'open("out/k.bin", "wb").write(b)',
      'print(hashlib.sha256(b).hexdigest())',
    ].join('\n'));
    assert.equal(ex.status, 'ok', JSON.stringify(ex.error));
    const back = new Uint8Array(await s.download('out/k.bin'));
    assert.equal(back.length, 100000);
    assert.equal(sha256(back), ex.stdout.trim());
  });

  test('uploadMany (multipart) into a directory', async () => {
    const saved = await s.uploadMany({ 'a.txt': 'A', 'b.bin': new Uint8Array([1, 2, 3]) }, { path: 'multi' });
    assert.deepEqual(saved.map((f) => f.path).sort(), ['multi/a.txt', 'multi/b.bin']);
    assert.deepEqual([...new Uint8Array(await s.download('multi/b.bin'))], [1, 2, 3]);
  });

  test('listFiles / removeFile / 404 for a missing file', async () => {
    await s.upload('dir/sub/one.txt', '1');
    await s.upload('dir/two.csv', 'a,b\n');
    const root = await s.listFiles();
    const dir = root.find((e) => e.path === 'dir');
    assert.ok(dir, 'dir is listed at the root');
    assert.equal(dir.type, 'directory');
    const inside = await s.listFiles('dir');
    assert.deepEqual(inside.map((e) => [e.name, e.type]).sort(), [['sub', 'directory'], ['two.csv', 'file']]);
    const csv = inside.find((e) => e.name === 'two.csv');
    assert.equal(csv.size, 4);
    assert.equal(csv.mime_type, 'text/csv');
    assert.ok(csv.url.endsWith('/files/dir/two.csv'));
    await s.removeFile('dir/two.csv');
    assert.ok(!(await s.listFiles('dir')).some((e) => e.name === 'two.csv'));
    await s.removeFile('dir');  // recursively
    assert.ok(!(await s.listFiles()).some((e) => e.path === 'dir'));
    const e = await rejectsWith(s.download('dir/two.csv'), (err) => assert.ok(err instanceof NotFound));
    assert.equal(e.status, 404);
    assert.ok(!(e instanceof SessionNotFound), 'a missing file in a live session is NotFound, not SessionNotFound');
    await rejectsWith(s.listFiles('no/such/dir'), (err) => assert.equal(err.status, 404));
  });

  test('paths that escape the workspace are refused', async () => {
    await rejectsWith(s.download('../../etc/passwd'), (err) => assert.ok([400, 403, 404].includes(err.status), String(err)));
    await s.execute('import os\nos.symlink("/etc/passwd", "link")');
    await rejectsWith(s.download('link'), (err) => assert.ok([400, 403].includes(err.status), String(err)));
  });

  test('fileUrl: the gateway URL of a file, usable with the Authorization header', async () => {
    await s.upload('x y/z.txt', 'zz');
    const u = s.fileUrl('x y/z.txt');
    assert.equal(u, `${url}/v1/sessions/${s.id}/files/x%20y/z.txt`);
    assert.ok(s.fileUrl('a.txt', { download: true }).endsWith('/files/a.txt?download=1'));
    const res = await fetch(u, { headers: { Authorization: `Bearer ${token}` } });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), 'zz');
    const anon = await fetch(u);
    assert.equal(anon.status, 401);
  });
});

describe('commands', () => {
  /** @type {import('../../clients/js/cellgate.js').Session} */
  let s;
  before(async () => { s = await cg.createSession({ timeout: 60 }); });
  after(async () => { if (s) await s.close(); });

  /** Polls until `pred()` holds (or fails after `ms`). */
  async function eventually(pred, ms = 10000) {
    const t0 = Date.now();
    while (!(await pred())) {
      assert.ok(elapsed(t0) < ms, `not within ${ms} ms`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  test('run: echo hi → stdout, exit code 0, a pid', async () => {
    const r = await s.commands.run('echo hi');
    assert.equal(r.stdout, 'hi\n');
    assert.equal(r.stderr, '');
    assert.equal(r.exitCode, 0);
    assert.equal(r.signal, null);
    assert.equal(r.truncated, false);
    assert.ok(Number.isInteger(r.pid) && r.pid > 0, String(r.pid));
    assert.deepEqual(r.model.argv, ['/bin/bash', '-l', '-c', 'echo hi']);
    assert.equal(r.model.cwd, '/home/user');
  });

  test('run: an argv (array or {argv}) is not parsed by a shell', async () => {
    assert.equal((await s.commands.run(['printf', '%s|', 'a b', '$HOME'])).stdout, 'a b|$HOME|');
    assert.equal((await s.commands.run({ argv: ['echo', '*'] })).stdout, '*\n');
  });

  test('run: cwd + env + a non-zero exit → CommandExitError with exitCode and stderr', async () => {
    await s.commands.run('mkdir -p sub/dir');
    const e = await rejectsWith(
      s.commands.run('pwd; echo "$FOO"; echo oops >&2; exit 3', { cwd: 'sub/dir', env: { FOO: 'bar baz' } }),
      (err) => assert.ok(err instanceof CommandExitError, String(err)));
    assert.ok(e instanceof CellgateError && e instanceof Error);
    assert.equal(e.exitCode, 3);
    assert.equal(e.signal, null);
    assert.equal(e.stdout, '/home/user/sub/dir\nbar baz\n');
    assert.equal(e.stderr, 'oops\n');
    assert.equal(e.result.exitCode, 3);
    assert.equal(e.result.model.cwd, '/home/user/sub/dir');
    assert.match(e.message, /exited with 3.*oops/s);
    // An absolute cwd is taken as it is.
    assert.equal((await s.commands.run('pwd', { cwd: '/tmp' })).stdout, '/tmp\n');
  });

  test('run (SSE): onStdout receives chunks as they come, onStderr too', async () => {
    const t0 = Date.now();
    const chunks = [];
    const errs = [];
    const r = await s.commands.run('for i in 1 2 3; do echo $i; sleep 0.6; done; echo done >&2', {
      onStdout: (t) => chunks.push([t, elapsed(t0)]),
      onStderr: (t) => errs.push(t),
    });
    const total = elapsed(t0);
    assert.equal(chunks.map((c) => c[0]).join(''), '1\n2\n3\n');
    assert.ok(chunks.length >= 2, `${chunks.length} chunk(s)`);
    assert.ok(chunks[0][1] < total - 1000, `the first chunk came at ${chunks[0][1]} ms, the end at ${total} ms`);
    assert.equal(errs.join(''), 'done\n');
    assert.equal(r.stdout, '1\n2\n3\n');
    assert.equal(r.stderr, 'done\n');
    assert.equal(r.exitCode, 0);
    assert.ok(Number.isInteger(r.pid));
    // A streamed failure rejects the same way.
    const e = await rejectsWith(s.commands.run('echo x; exit 7', { onStdout() {} }),
      (err) => assert.ok(err instanceof CommandExitError, String(err)));
    assert.equal(e.exitCode, 7);
    assert.equal(e.stdout, 'x\n');
  });

  test('background cat with stdin: listed, fed, stdin closed, wait() returns the echo', async () => {
    const h = await s.commands.run('cat', { background: true, stdin: true, tag: 'echoer' });
    assert.ok(h instanceof CommandHandle);
    assert.ok(Number.isInteger(h.pid));
    const listed = (await s.commands.list()).find((c) => c.pid === h.pid);
    assert.ok(listed, 'list() includes the background command');
    assert.equal(listed.running, true);
    assert.equal(listed.tag, 'echoer');
    assert.equal(listed.stdin, true);
    assert.equal((await s.commands.get(h.pid)).running, true);
    await h.sendStdin('hello\n');
    await h.sendStdin(new TextEncoder().encode('wörld\n'));  // bytes go as base64
    await h.closeStdin();
    const seen = [];
    const r = await h.wait({ onStdout: (t) => seen.push(t) });
    assert.equal(r.stdout, 'hello\nwörld\n');
    assert.equal(seen.join(''), 'hello\nwörld\n');
    assert.equal(r.exitCode, 0);
    assert.equal(r.pid, h.pid);
    // Ended, it stays listed for a while; a second handle replays it.
    assert.equal((await s.commands.get(h.pid)).running, false);
    const again = await s.commands.connect(h.pid);
    assert.equal(again.pid, h.pid);
    assert.equal((await again.wait()).stdout, 'hello\nwörld\n');
    const late = await rejectsWith(h.sendStdin('late'), (err) => assert.ok(err instanceof CellgateError));
    assert.equal(late.status, 409);
  });

  test('background sleep 60, killed → wait() rejects with CommandExitError naming the signal', async () => {
    const t0 = Date.now();
    const h = await s.commands.run('sleep 60', { background: true });
    assert.equal(await h.kill(), true);
    const e = await rejectsWith(h.wait(), (err) => assert.ok(err instanceof CommandExitError, String(err)));
    assert.equal(e.signal, 'SIGKILL');
    assert.equal(e.exitCode, 137);
    assert.ok(elapsed(t0) < 20000);
    assert.equal(await h.kill('SIGTERM'), false, 'an ended command cannot be signalled');
    const info = await h.info();
    assert.equal(info.running, false);
    assert.deepEqual(info.exit, { exit_code: 137, signal: 'SIGKILL' });
  });

  test('timeout: a foreground command past it is killed', async () => {
    const t0 = Date.now();
    const e = await rejectsWith(s.commands.run('sleep 30', { timeout: 1 }),
      (err) => assert.ok(err instanceof CommandExitError, String(err)));
    assert.equal(e.signal, 'SIGKILL');
    assert.ok(elapsed(t0) < 15000, `killed after ${elapsed(t0)} ms`);
  });

  test('abort: dropping the stream kills a foreground command', async () => {
    const controller = new AbortController();
    let pid = null;
    const run = s.commands.run('echo started; sleep 60', {
      signal: controller.signal,
      onStdout: () => controller.abort(),
    });
    await rejectsWith(run, (err) => assert.equal(err.name, 'AbortError'));
    await eventually(async () => {
      const mine = (await s.commands.list()).filter((c) => c.argv[3] === 'echo started; sleep 60');
      assert.equal(mine.length, 1);
      pid = mine[0].pid;
      return !mine[0].running;
    });
    assert.equal((await s.commands.get(pid)).exit.signal, 'SIGKILL');
  });

  test('tty: output as stdout, resize reaches the terminal', async () => {
    const r = await s.commands.run('tty -s && echo "on a terminal"', { tty: true });
    assert.equal(r.stdout, 'on a terminal\r\n');
    const streamed = [];
    const r2 = await s.commands.run('echo ü; echo $TERM', { tty: { rows: 5, cols: 40 }, onStdout: (t) => streamed.push(t) });
    assert.equal(r2.stdout, 'ü\r\nxterm-256color\r\n');
    assert.equal(streamed.join(''), r2.stdout);
    const h = await s.commands.run('read line; stty size', { background: true, tty: { rows: 10, cols: 20 } });
    await h.resize(33, 101);
    await h.sendStdin('go\n');
    assert.match((await h.wait()).stdout, /^33 101\r?$/m);
  });

  test('bad requests: 400 with the gateway\'s message; unknown pid 404; no such session', async () => {
    const noCmd = await rejectsWith(s.commands.run({}), (err) => assert.ok(err instanceof CellgateError));
    assert.ok(!(noCmd instanceof CommandExitError));
    assert.equal(noCmd.status, 400);
    assert.match(noCmd.message, /'cmd'.*'argv'/);
    const emptyArgv = await rejectsWith(s.commands.run([]), (err) => assert.ok(err instanceof CellgateError));
    assert.equal(emptyArgv.status, 400);
    assert.match(emptyArgv.message, /non-empty/);
    const badEnv = await rejectsWith(s.commands.run('true', { env: { CELLGATE_X: '1' } }), () => {});
    assert.equal(badEnv.status, 400);
    const h = await s.commands.run('sleep 30', { background: true });
    try {
      const badSig = await rejectsWith(h.kill('SIGFOO'), () => {});
      assert.equal(badSig.status, 400);
      assert.match(badSig.message, /SIGFOO/);
      const noTty = await rejectsWith(h.resize(10, 10), () => {});
      assert.equal(noTty.status, 400);
      const noStdin = await rejectsWith(h.sendStdin('x'), () => {});
      assert.equal(noStdin.status, 400);
    } finally {
      await h.kill();
    }
    const missing = await rejectsWith(s.commands.get(999999), (err) => assert.ok(err instanceof NotFound));
    assert.equal(missing.status, 404);
    assert.ok(!(missing instanceof SessionNotFound), 'an unknown pid in a live session is NotFound');
    await rejectsWith(s.commands.connect(999999), (err) => assert.ok(err instanceof NotFound));
    const ghost = cg.session('00000000-0000-0000-0000-000000000000');
    for (const call of [() => ghost.commands.run('true'), () => ghost.commands.run('true', { onStdout() {} }),
      () => ghost.commands.run('true', { background: true }), () => ghost.commands.list(),
      () => ghost.commands.get(1)]) {
      const e = await rejectsWith(call(), (err) => assert.ok(err instanceof SessionNotFound, String(err)));
      assert.equal(e.status, 404);
    }
  });
});

describe('errors', () => {
  test('404 for an unknown session: info, execute, files, interrupt, restart', async () => {
    const ghost = cg.session('00000000-0000-0000-0000-000000000000');
    for (const call of [() => ghost.info(), () => ghost.execute('1'), () => ghost.execute('1', { onStdout() {} }),
      () => ghost.interrupt(), () => ghost.restart(), () => ghost.listFiles(), () => ghost.download('a'),
      () => ghost.upload('a', 'x')]) {
      const e = await rejectsWith(call(), (err) => assert.ok(err instanceof SessionNotFound, String(err)));
      assert.equal(e.status, 404);
      assert.equal(typeof e.reason, 'string');
      assert.equal(typeof e.message, 'string');
    }
    await rejectsWith(cg.connect('nope'), (err) => assert.ok(err instanceof SessionNotFound));
    await ghost.close();  // closing what is gone is harmless
  });

  test('401 without a token, 403 with a wrong one', async () => {
    const none = new Cellgate({ url, token: '' });
    const e401 = await rejectsWith(none.listSessions(), (err) => assert.ok(err instanceof CellgateError));
    assert.equal(e401.status, 401);
    assert.equal(e401.reason, 'Unauthorized');
    assert.ok(e401.message.length > 0);
    const wrong = new Cellgate({ url, token: 'not-the-token' });
    const e403 = await rejectsWith(wrong.createSession(), (err) => assert.ok(err instanceof CellgateError));
    assert.equal(e403.status, 403);
    assert.equal(e403.reason, 'Forbidden');
    await rejectsWith(Cellgate.runOnce('1', {}, { url, token: 'not-the-token' }), (err) => assert.equal(err.status, 403));
    assert.match(String(e403), /^CellgateError: 403 Forbidden: /);
  });

  test('no gateway: a CellgateError with status null', async () => {
    const dead = new Cellgate({ url: 'http://127.0.0.1:9', token });
    const e = await rejectsWith(dead.listSessions(), (err) => assert.ok(err instanceof CellgateError));
    assert.equal(e.status, null);
    assert.equal(e.reason, 'connection_failed');
  });

  test('a bad request is a 400 with the gateway\'s reason and message', async () => {
    const e = await rejectsWith(cg.requestJson('POST', '/v1/execute', { json: { nocode: 1 } }), () => {});
    assert.equal(e.status, 400);
    assert.match(e.message, /code/);
  });
});

describe('runOnce', () => {
  test('static: files in, files out inline, nothing persists', async () => {
    const before = (await cg.listSessions()).length;
    const csv = 'region,revenue\nnorth,10\nsouth,32\n';
    const ex = await Cellgate.runOnce([
      'import os, pandas as pd',
      'df = pd.read_csv("data/sales.csv")',
      'os.makedirs("out", exist_ok=True)',
      'df.to_csv("out/total.csv", index=False)',
      'print(int(df.revenue.sum()))',
      'open("raw.bin", "wb").write(bytes(range(256)))',
    ].join('\n'), { 'data/sales.csv': csv }, { url, token, timeout: 60 });
    assert.equal(ex.status, 'ok', JSON.stringify(ex.error));
    assert.equal(ex.stdout, '42\n');
    const byPath = Object.fromEntries(ex.files.map((f) => [f.path, f]));
    assert.ok(byPath['out/total.csv'] && byPath['raw.bin'], JSON.stringify(ex.files.map((f) => f.path)));
    assert.equal(new TextDecoder().decode(byPath['out/total.csv'].content), csv);
    assert.deepEqual([...byPath['raw.bin'].content], [...Array(256).keys()]);
    assert.equal(byPath['raw.bin'].url, undefined, 'a one-shot sandbox is gone: no URLs');
    assert.equal((await cg.listSessions()).length, before, 'nothing persists');
  });

  test('instance method, files as a list, an error result', async () => {
    const ex = await cg.runOnce('print(open("a.txt").read()); 1/0', [{ path: 'a.txt', data: new Uint8Array([104, 105]) }]);
    assert.equal(ex.stdout, 'hi\n');
    assert.equal(ex.status, 'error');
    assert.equal(ex.error.ename, 'ZeroDivisionError');
  });
});
