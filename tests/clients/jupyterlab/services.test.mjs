// Drives a live cellgate gateway with @jupyterlab/services, the client library
// JupyterLab itself uses, connecting straight to the gateway (no
// jupyter_server in between).
//
//   CELLGATE_URL=http://127.0.0.1:PORT CELLGATE_TOKEN=T CELLGATE_WS_PROTOCOL=v1|json node --test services.test.mjs
//
// CELLGATE_WS_PROTOCOL=v1 lets JupyterLab offer its default subprotocol
// (v1.kernel.websocket.jupyter.org); =json hands it a WebSocket class that
// drops the offered subprotocols, so the gateway must fall back to the default
// JSON ("legacy") framing. Either way every WebSocket's negotiated protocol is
// recorded and checked.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { Buffer } from 'node:buffer';
import services from '@jupyterlab/services';
import coreutils from '@jupyterlab/coreutils';
import WebSocket from 'ws';

const {
  ContentsManager,
  KernelManager,
  KernelSpecManager,
  ServerConnection,
  SessionManager,
  TerminalManager
} = services;
// JupyterLab learns this from the page the server renders; cellgate has terminals.
coreutils.PageConfig.setOption('terminalsAvailable', 'true');

const BASE_URL = process.env.CELLGATE_URL;
const TOKEN = process.env.CELLGATE_TOKEN ?? '';
const MODE = process.env.CELLGATE_WS_PROTOCOL ?? 'v1';
// Set when the gateway runs with --zygote on: every kernel this suite starts
// or restarts must say it was forked from the zygote.
const EXPECT_ZYGOTE = process.env.CELLGATE_EXPECT_ZYGOTE === '1';
if (!BASE_URL) throw new Error('set CELLGATE_URL (and CELLGATE_TOKEN)');
if (MODE !== 'v1' && MODE !== 'json') throw new Error(`CELLGATE_WS_PROTOCOL must be v1 or json, not ${MODE}`);
const V1 = 'v1.kernel.websocket.jupyter.org';
const EXPECTED_PROTOCOL = MODE === 'v1' ? V1 : '';
const PNG_MAGIC = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);

// Every socket the library opens, with what it offered and what it got.
const sockets = [];

class RecordingWebSocket extends WebSocket {
  constructor(url, protocols) {
    super(url, protocols);
    const entry = { url: String(url), offered: protocols ?? [], protocol: null };
    sockets.push(entry);
    this.addEventListener('open', () => {
      entry.protocol = this.protocol;
    });
  }
}

// What a client that knows only the JSON protocol does: offer nothing.
class JsonOnlyWebSocket extends WebSocket {
  constructor(url, _protocols) {
    super(url);
    const entry = { url: String(url), offered: [], protocol: null };
    sockets.push(entry);
    this.addEventListener('open', () => {
      entry.protocol = this.protocol;
    });
  }
}

const serverSettings = ServerConnection.makeSettings({
  baseUrl: BASE_URL,
  wsUrl: BASE_URL.replace(/^http/, 'ws'),
  token: TOKEN,
  appendToken: true,
  WebSocket: MODE === 'v1' ? RecordingWebSocket : JsonOnlyWebSocket
});

const withTimeout = (promise, ms, what) =>
  Promise.race([
    promise,
    new Promise((_, reject) => {
      const t = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
      t.unref();
    })
  ]);

// Runs a cell through the kernel connection; collects the reply and the iopub
// messages that belong to it.
async function execute(kernel, code, { timeout = 60000, onIOPub } = {}) {
  const iopub = [];
  // stop_on_error: false — ipykernel aborts a request that arrives right after an
  // error reply (its stop_on_error window), which would make back-to-back cells racy.
  const future = kernel.requestExecute({ code, store_history: true, stop_on_error: false });
  future.onIOPub = msg => {
    iopub.push(msg);
    if (onIOPub) onIOPub(msg, future);
  };
  const reply = await withTimeout(future.done, timeout, `execute ${JSON.stringify(code)}`);
  const of = type => iopub.filter(m => m.header.msg_type === type);
  const stdout = of('stream')
    .filter(m => m.content.name === 'stdout')
    .map(m => m.content.text)
    .join('');
  return { reply, iopub, of, stdout };
}

// The kernel's model as the gateway serves it (cellgate's own fields included).
async function kernelModel(id) {
  const url = `${BASE_URL}/api/kernels/${id}`;
  const r = await fetch(url, { headers: { Authorization: `token ${TOKEN}` } });
  assert.equal(r.status, 200, `GET /api/kernels/${id}: ${r.status}`);
  return r.json();
}

async function assertForked(id, what) {
  if (!EXPECT_ZYGOTE) return;
  const model = await kernelModel(id);
  assert.equal(model.cellgate?.sandbox?.zygote, true,
    `${what}: the kernel was not forked from the zygote: ${JSON.stringify(model.cellgate?.sandbox)}`);
}

function assertProtocols(what) {
  // The kernel channels' sockets (a terminal's negotiates no subprotocol).
  const opened = sockets.filter(s => s.protocol !== null && s.url.includes('/api/kernels/'));
  assert.ok(opened.length > 0, `no WebSocket opened (${what})`);
  for (const s of opened) {
    assert.equal(s.protocol, EXPECTED_PROTOCOL,
      `${what}: socket ${s.url.replace(/token=[^&]*/, 'token=…')} offered ${JSON.stringify(s.offered)} ` +
      `and negotiated ${JSON.stringify(s.protocol)}, expected ${JSON.stringify(EXPECTED_PROTOCOL)}`);
  }
  if (MODE === 'v1') assert.ok(opened.every(s => s.offered.includes(V1)), 'JupyterLab should offer v1');
  else assert.ok(opened.every(s => s.offered.length === 0), 'the JSON run must offer no subprotocol');
}

describe(`@jupyterlab/services against cellgate (${MODE} protocol)`, { timeout: 240000 }, () => {
  let kernelSpecs;
  let kernels;
  let sessions;
  let contents;
  let kernel;

  before(async () => {
    kernelSpecs = new KernelSpecManager({ serverSettings });
    kernels = new KernelManager({ serverSettings });
    sessions = new SessionManager({ serverSettings, kernelManager: kernels });
    contents = new ContentsManager({ serverSettings });
    await withTimeout(Promise.all([kernelSpecs.ready, kernels.ready, sessions.ready]), 30000, 'managers ready');
  });

  after(async () => {
    try {
      if (kernel && !kernel.isDisposed) await kernel.shutdown().catch(() => {});
    } finally {
      // Lumino's Poll.dispose() leaves its pending setTimeout behind (61 s for
      // kernelspecs), which would keep Node alive; stopping a poll clears it.
      for (const manager of [sessions, kernels, kernelSpecs]) {
        for (const poll of [manager?._pollModels, manager?._pollSpecs]) await poll?.stop?.();
      }
      sessions?.dispose();
      kernels?.dispose();
      kernelSpecs?.dispose();
      contents?.dispose();
    }
  });

  test('kernelspecs list python3 with a display name', async () => {
    await kernelSpecs.refreshSpecs();
    const specs = kernelSpecs.specs;
    assert.ok(specs, 'no kernelspecs');
    const py = specs.kernelspecs.python3;
    assert.ok(py, `python3 missing from ${JSON.stringify(Object.keys(specs.kernelspecs))}`);
    assert.equal(py.name, 'python3');
    assert.equal(typeof py.display_name, 'string');
    assert.ok(py.display_name.length > 0, 'empty display_name');
    assert.ok(specs.default in specs.kernelspecs, `default ${specs.default} is not a listed spec`);
  });

  test('starts a kernel and connects over the negotiated protocol', async () => {
    kernel = await withTimeout(kernels.startNew({ name: 'python3' }), 60000, 'start kernel');
    assert.match(kernel.id, /^\w+-\w+-\w+-\w+-\w+$/);
    const info = await withTimeout(kernel.info, 60000, 'kernel_info_reply');
    assert.equal(info.status, 'ok');
    assert.equal(info.language_info.name, 'python');
    assert.equal(kernel.connectionStatus, 'connected');
    await kernels.refreshRunning();
    assert.ok([...kernels.running()].some(m => m.id === kernel.id), 'kernel missing from GET /api/kernels');
    assertProtocols('kernel channel');
    await assertForked(kernel.id, 'start');
  });

  test("print('hello') streams hello to stdout", async () => {
    const r = await execute(kernel, "print('hello')");
    assert.equal(r.reply.content.status, 'ok');
    assert.equal(r.stdout, 'hello\n');
    const streams = r.of('stream');
    assert.ok(streams.every(m => m.channel === 'iopub' && m.parent_header.msg_id === r.reply.parent_header.msg_id));
  });

  test('a Matplotlib plot arrives as display_data image/png', async () => {
    const r = await execute(kernel, 'import matplotlib.pyplot as plt; plt.plot([1,2,3]); plt.show()');
    assert.equal(r.reply.content.status, 'ok', JSON.stringify(r.reply.content));
    const images = r.of('display_data').filter(m => 'image/png' in m.content.data);
    assert.equal(images.length, 1, `display_data: ${JSON.stringify(r.of('display_data').map(m => Object.keys(m.content.data)))}`);
    const png = Buffer.from(images[0].content.data['image/png'], 'base64');
    assert.ok(png.length > 1000, `PNG is only ${png.length} bytes`);
    assert.deepEqual(png.subarray(0, 8), PNG_MAGIC);
  });

  test('1/0 gives an error reply and an iopub ZeroDivisionError', async () => {
    const r = await execute(kernel, '1/0');
    assert.equal(r.reply.content.status, 'error');
    assert.equal(r.reply.content.ename, 'ZeroDivisionError');
    const errors = r.of('error');
    assert.equal(errors.length, 1);
    assert.equal(errors[0].content.ename, 'ZeroDivisionError');
    assert.ok(Array.isArray(errors[0].content.traceback) && errors[0].content.traceback.length > 0, 'empty traceback');
  });

  test('input() asks the client on stdin and gets its answer', async () => {
    const future = kernel.requestExecute({ code: 'name = input("name? ")\nprint("hello", name)', allow_stdin: true,
                                           store_history: true, stop_on_error: false });
    const prompts = [];
    let stdout = '';
    future.onStdin = msg => {
      if (msg.header.msg_type !== 'input_request') return;
      prompts.push(msg.content.prompt);
      future.sendInputReply({ status: 'ok', value: 'lab' }, msg.header);
    };
    future.onIOPub = msg => {
      if (msg.header.msg_type === 'stream' && msg.content.name === 'stdout') stdout += msg.content.text;
    };
    const reply = await withTimeout(future.done, 60000, 'execute with input()');
    assert.equal(reply.content.status, 'ok', JSON.stringify(reply.content));
    assert.deepEqual(prompts, ['name? ']);
    assert.equal(stdout, 'hello lab\n');
  });

  test('state persists across cells', async () => {
    const set = await execute(kernel, 'x = 41');
    assert.equal(set.reply.content.status, 'ok');
    const r = await execute(kernel, 'x + 1');
    assert.equal(r.reply.content.status, 'ok');
    const results = r.of('execute_result');
    assert.equal(results.length, 1);
    assert.equal(results[0].content.data['text/plain'], '42');
  });

  test('kernel.interrupt() stops time.sleep(30) quickly', async () => {
    const started = Date.now();
    let interrupted = null;
    const r = await execute(kernel, 'import time; time.sleep(30)', {
      timeout: 20000,
      onIOPub: msg => {
        // The cell is running once the kernel echoes execute_input.
        if (msg.header.msg_type === 'execute_input' && !interrupted) {
          interrupted = new Promise(resolve => setTimeout(resolve, 300)).then(() => kernel.interrupt());
        }
      }
    });
    await interrupted;
    const elapsed = Date.now() - started;
    assert.equal(r.reply.content.status, 'error', JSON.stringify(r.reply.content));
    assert.equal(r.reply.content.ename, 'KeyboardInterrupt');
    assert.ok(elapsed < 10000, `the interrupted cell took ${elapsed} ms`);
    // The kernel is still usable and kept its state.
    const after = await execute(kernel, 'x');
    assert.equal(after.of('execute_result')[0]?.content.data['text/plain'], '41');
  });

  // Kernel statuses seen while kernel.restart() runs (for the check after).
  const restartStatuses = [];

  test('kernel.restart() gives a fresh interpreter', async () => {
    const record = (_, status) => restartStatuses.push(status);
    kernel.statusChanged.connect(record);
    try {
      await withTimeout(kernel.restart(), 60000, 'restart');
    } finally {
      // Statuses that the restart caused can trail the REST reply a little.
      await new Promise(resolve => setTimeout(resolve, 300));
      kernel.statusChanged.disconnect(record);
    }
    await withTimeout(kernel.info, 60000, 'kernel_info after restart');
    const r = await execute(kernel, 'x');
    assert.equal(r.reply.content.status, 'error');
    assert.equal(r.reply.content.ename, 'NameError');
    assert.equal(r.of('error')[0]?.content.ename, 'NameError');
    const ok = await execute(kernel, "print('hello')");
    assert.equal(ok.stdout, 'hello\n');
    assertProtocols('after restart');
    await assertForked(kernel.id, 'restart');
  });

  // jupyter_server sends iopub "restarting" only when its restarter
  // auto-restarts a kernel that died, and @jupyterlab/services reads it as
  // such (status 'autorestarting', state cleared, a second reconnect). A
  // restart the client asked for must not look like one.
  test('a requested restart is not reported as an auto-restart', async () => {
    const statuses = restartStatuses.join(' → ');
    assert.ok(!restartStatuses.includes('autorestarting'), `statuses: ${statuses}`);
    assert.ok(!restartStatuses.includes('dead'), `statuses: ${statuses}`);
  });

  test('contents: the root lists the kernel workspace as a directory', async () => {
    const root = await contents.get('', { content: true });
    assert.equal(root.type, 'directory');
    assert.equal(typeof root.created, 'string');
    assert.ok(root.content.some(e => e.name === kernel.id && e.type === 'directory'),
      `kernel ${kernel.id} missing from the contents root: ${JSON.stringify(root.content.map(e => e.name))}`);
  });

  test('contents: save, get, list and delete text and binary files in the workspace', async () => {
    const textPath = `${kernel.id}/hello.txt`;
    const binPath = `${kernel.id}/blob.bin`;
    const text = 'hello from JupyterLab services\nzweite Zeile – ü\n';
    const bytes = Buffer.from([0x00, 0xff, 0x01, 0xfe, 0x80, 0x7f, 0x00, 0x00, 0xff, 0x0a, 0x0d]);

    const savedText = await contents.save(textPath, { type: 'file', format: 'text', content: text });
    assert.equal(savedText.path, textPath);
    assert.equal(savedText.type, 'file');
    const savedBin = await contents.save(binPath, { type: 'file', format: 'base64', content: bytes.toString('base64') });
    assert.equal(savedBin.path, binPath);

    const gotText = await contents.get(textPath, { type: 'file', format: 'text', content: true });
    assert.equal(gotText.format, 'text');
    assert.equal(gotText.content, text);
    const gotBin = await contents.get(binPath, { type: 'file', format: 'base64', content: true });
    assert.equal(gotBin.format, 'base64');
    assert.deepEqual(Buffer.from(gotBin.content.replace(/\s/g, ''), 'base64'), bytes);
    assert.equal(gotBin.size, bytes.length);

    // The kernel sees the same files in its /workspace.
    const seen = await execute(kernel,
      "import os; print(sorted(f for f in os.listdir('.') if f in ('hello.txt', 'blob.bin')), open('blob.bin','rb').read() == bytes([0,255,1,254,128,127,0,0,255,10,13]))");
    assert.equal(seen.stdout, "['blob.bin', 'hello.txt'] True\n");

    const dir = await contents.get(kernel.id, { content: true });
    assert.equal(dir.type, 'directory');
    const names = dir.content.map(e => e.name);
    assert.ok(names.includes('hello.txt') && names.includes('blob.bin'), `listing: ${JSON.stringify(names)}`);

    await contents.delete(textPath);
    await contents.delete(binPath);
    const after = await contents.get(kernel.id, { content: true });
    const left = after.content.map(e => e.name);
    assert.ok(!left.includes('hello.txt') && !left.includes('blob.bin'), `still listed: ${JSON.stringify(left)}`);
    await assert.rejects(contents.get(textPath), err => err?.response?.status === 404);
  });

  test('sessions: create, list, shut down', async () => {
    const path = `cellgate-${MODE}-test.ipynb`;
    const session = await withTimeout(
      sessions.startNew({ path, name: path, type: 'notebook', kernel: { name: 'python3' } }),
      60000, 'start session');
    try {
      assert.equal(session.path, path);
      assert.equal(session.type, 'notebook');
      assert.ok(session.kernel, 'session has no kernel');
      assert.equal(session.kernel.name, 'python3');
      const r = await execute(session.kernel, 'print(6*7)');
      assert.equal(r.stdout, '42\n');

      await sessions.refreshRunning();
      const listed = [...sessions.running()].find(m => m.id === session.id);
      assert.ok(listed, 'session missing from GET /api/sessions');
      assert.equal(listed.path, path);
      assert.equal(listed.kernel?.id, session.kernel.id);
      // Finding the session by path goes through GET /api/sessions too.
      assert.equal((await sessions.findByPath(path))?.id, session.id);
    } catch (e) {
      await session.shutdown().catch(() => {});
      throw e;
    }
    const sessionKernelId = session.kernel.id;
    await withTimeout(session.shutdown(), 30000, 'session shutdown');
    await sessions.refreshRunning();
    assert.ok(![...sessions.running()].some(m => m.id === session.id), 'session still listed after shutdown');
    await kernels.refreshRunning();
    assert.ok(![...kernels.running()].some(m => m.id === sessionKernelId), "the session's kernel outlived the session");
    assertProtocols('session kernel');
  });

  test("terminals: TerminalManager opens a shell inside the kernel's sandbox", async () => {
    const terminals = new TerminalManager({ serverSettings });
    try {
      await withTimeout(terminals.ready, 30000, 'terminal manager ready');
      assert.equal(terminals.isAvailable(), true);
      await execute(kernel, "open('from_kernel.txt', 'w').write('the kernel wrote this')");
      const term = await withTimeout(terminals.startNew({ cwd: '' }), 30000, 'start a terminal');
      assert.match(term.name, /^\S+$/);
      let out = '';
      term.messageReceived.connect((_, msg) => {
        if (msg.type === 'stdout') out += msg.content[0];
      });
      // On the server's ["disconnect", …] the connection disposes itself.
      const disconnected = new Promise(resolve => term.disposed.connect(() => resolve('disposed')));
      const until = async (what, pred, ms = 30000) => {
        const end = Date.now() + ms;
        while (!pred()) {
          if (Date.now() > end) throw new Error(`timed out waiting for ${what}; terminal output so far: ${JSON.stringify(out)}`);
          await new Promise(r => setTimeout(r, 50));
        }
      };
      await until('the terminal to connect', () => term.connectionStatus === 'connected');
      term.send({ type: 'set_size', content: [30, 100, 600, 800] });
      term.send({ type: 'stdin', content: ['stty size; echo "tty=$(tty)"; cat from_kernel.txt; echo; echo "uid=$(id -u) marker-$((6*7))"\r'] });
      await until('the shell to answer', () => /marker-42/.test(out));
      assert.match(out, /30 100/);
      assert.match(out, /tty=\/dev\/pts\/\d+/);
      assert.match(out, /the kernel wrote this/, 'the terminal shares the kernel\'s workspace');
      assert.doesNotMatch(out, /uid=0 /, 'the shell runs as the kernel\'s user, not root');
      await terminals.refreshRunning();
      const listed = [...terminals.running()].map(m => m.name);
      assert.ok(listed.includes(term.name), JSON.stringify(listed));
      // A second terminal, shut down through the manager: gone from the list.
      const second = await terminals.startNew();
      assert.notEqual(second.name, term.name);
      await second.shutdown();
      await terminals.refreshRunning();
      assert.ok(![...terminals.running()].some(m => m.name === second.name));
      // The shell exits: the client is told, and the terminal leaves the list.
      term.send({ type: 'stdin', content: ['exit\r'] });
      assert.equal(await withTimeout(disconnected, 30000, 'disconnect after exit'), 'disposed');
      const gone = await fetch(`${BASE_URL}/api/terminals/${encodeURIComponent(term.name)}`,
        { headers: { Authorization: `token ${TOKEN}` } });
      assert.equal(gone.status, 404, 'an exited terminal is still there');
      await terminals.refreshRunning();
      assert.ok(![...terminals.running()].some(m => m.name === term.name), 'an exited terminal is still listed');
    } finally {
      await terminals._pollModels?.stop?.();
      terminals.dispose();
    }
  });

  test('kernel shutdown removes it from the list', async () => {
    const id = kernel.id;
    await withTimeout(kernel.shutdown(), 30000, 'kernel shutdown');
    await kernels.refreshRunning();
    assert.ok(![...kernels.running()].some(m => m.id === id), 'kernel still listed after shutdown');
    assertProtocols('end of suite');
  });
});

// The session's policy on the Jupyter surface (docs/limits.md), seen by
// JupyterLab's own client: CELLGATE_TIGHT_TOKEN's tenant runs cells under a
// 2 s time limit and 64 KiB of output. The limits arrive the Jupyter way, as
// the kernel's error reply and stream messages under the cell.
describe(`session limits through @jupyterlab/services (${MODE} protocol)`, { timeout: 120000 }, () => {
  const TIGHT = process.env.CELLGATE_TIGHT_TOKEN;
  let kernels;
  let kernel;

  before(async () => {
    assert.ok(TIGHT, 'set CELLGATE_TIGHT_TOKEN');
    kernels = new KernelManager({ serverSettings: ServerConnection.makeSettings({ ...serverSettings, token: TIGHT }) });
    await withTimeout(kernels.ready, 30000, 'kernel manager ready');
    kernel = await withTimeout(kernels.startNew({ name: 'python3' }), 90000, 'start a kernel');
    await withTimeout(execute(kernel, 'kept = 41'), 60000, 'first cell');
  });

  after(async () => {
    try {
      if (kernel && !kernel.isDisposed) await kernel.shutdown().catch(() => {});
    } finally {
      await kernels?._pollModels?.stop?.();
      kernels?.dispose();
    }
  });

  const stderrOf = r => r.of('stream').filter(m => m.content.name === 'stderr').map(m => m.content.text).join('');

  test('an endless cell is interrupted at its time limit and the kernel keeps its state', async () => {
    const r = await execute(kernel, 'while True:\n    pass\n', { timeout: 60000 });
    assert.equal(r.reply.content.status, 'error', JSON.stringify(r.reply.content));
    assert.equal(r.reply.content.ename, 'KeyboardInterrupt');
    assert.match(stderrOf(r), /time limit of 2 s \(exec_timeout\)/);
    const after = await execute(kernel, 'print(kept + 1)');
    assert.equal(after.stdout, '42\n');
  });

  test('output past the limit is cut with a notice, and the cell runs to its end', async () => {
    const r = await execute(kernel, "for i in range(400):\n    print('y' * 1023)\nprint('end')");
    assert.equal(r.reply.content.status, 'ok');
    // The notice a /v1 execution's text ends with, at the end of the stream that reached the limit.
    const notice = '\n[cellgate: output truncated after 65536 bytes]\n';
    assert.ok(r.stdout.endsWith(notice), JSON.stringify(r.stdout.slice(-120)));
    const kept = r.stdout.slice(0, -notice.length);
    assert.ok(kept.length > 0 && kept.length <= 65536, `stdout kept ${kept.length} bytes`);
    assert.ok(!r.stdout.includes('end'), 'output past the limit was shown');
  });
});

// A template (docs/templates.md) is a kernelspec of its tenant's: JupyterLab
// lists it by its display name ("name:tag") and starts kernels from it like
// any other, and they run on what its steps built.
describe(`a template's kernelspec through @jupyterlab/services (${MODE} protocol)`, { timeout: 180000 }, () => {
  const name = `jl-${Math.random().toString(16).slice(2, 10)}`;
  const auth = { Authorization: `token ${TOKEN}`, 'Content-Type': 'application/json' };
  let kernelSpecs;
  let kernels;
  let kernel;

  before(async () => {
    const r = await fetch(`${BASE_URL}/v1/templates`, {
      method: 'POST',
      headers: auth,
      body: JSON.stringify({
        name: `${name}:v1`,
        steps: [
          { type: 'ENV', args: ['TEMPLATE_GREETING', 'hello from a template'] },
          { type: 'RUN', args: [`echo ${name} > /opt/marker`] }
        ]
      })
    });
    const text = await r.text();
    assert.equal(r.status, 202, text);
    const { status_url: at } = JSON.parse(text);
    let build;
    for (let i = 0; i < 600; i++) {
      build = await (await fetch(`${BASE_URL}${at}`, { headers: auth })).json();
      if (build.status === 'ready' || build.status === 'error') break;
      await new Promise(done => setTimeout(done, 200));
    }
    assert.equal(build.status, 'ready', JSON.stringify(build));
    kernelSpecs = new KernelSpecManager({ serverSettings });
    kernels = new KernelManager({ serverSettings });
    await withTimeout(Promise.all([kernelSpecs.ready, kernels.ready]), 30000, 'managers ready');
  });

  after(async () => {
    try {
      if (kernel && !kernel.isDisposed) await kernel.shutdown().catch(() => {});
      await fetch(`${BASE_URL}/v1/templates/${name}:v1`, { method: 'DELETE', headers: auth });
    } finally {
      for (const manager of [kernels, kernelSpecs]) {
        for (const poll of [manager?._pollModels, manager?._pollSpecs]) await poll?.stop?.();
      }
      kernels?.dispose();
      kernelSpecs?.dispose();
    }
  });

  test('the template is listed as a kernelspec and a kernel started from it runs on its layers', async () => {
    await kernelSpecs.refreshSpecs();
    const spec = Object.values(kernelSpecs.specs.kernelspecs).find(s => s.display_name === `${name}:v1`);
    assert.ok(spec, `no kernelspec "${name}:v1" in ${JSON.stringify(Object.keys(kernelSpecs.specs.kernelspecs))}`);
    assert.equal(spec.language, 'python');
    kernel = await withTimeout(kernels.startNew({ name: spec.name }), 90000, 'start a kernel from the template');
    const r = await execute(kernel, "import os; print(open('/opt/marker').read().strip(), os.environ['TEMPLATE_GREETING'])");
    assert.equal(r.reply.content.status, 'ok', JSON.stringify(r.reply.content));
    assert.equal(r.stdout, `${name} hello from a template\n`);
    assert.equal((await kernelModel(kernel.id)).name, spec.name);
  });
});

// The languages image's kernels, as JupyterLab starts them (once: the v1 run
// without the zygote, which forks Python kernels only).
describe('R and JavaScript kernels through @jupyterlab/services', { timeout: 180000, skip: MODE !== 'v1' || EXPECT_ZYGOTE }, () => {
  let kernels;
  let kernelSpecs;
  const started = [];

  before(async () => {
    kernelSpecs = new KernelSpecManager({ serverSettings });
    kernels = new KernelManager({ serverSettings });
    await withTimeout(Promise.all([kernelSpecs.ready, kernels.ready]), 30000, 'managers ready');
  });

  after(async () => {
    try {
      for (const k of started) if (!k.isDisposed) await k.shutdown().catch(() => {});
    } finally {
      for (const manager of [kernels, kernelSpecs]) {
        for (const poll of [manager?._pollModels, manager?._pollSpecs]) await poll?.stop?.();
      }
      kernels?.dispose();
      kernelSpecs?.dispose();
    }
  });

  test('the R kernel keeps its variables and draws a ggplot as a PNG', async () => {
    await kernelSpecs.refreshSpecs();
    assert.equal(kernelSpecs.specs.kernelspecs.ir?.language, 'R', JSON.stringify(Object.keys(kernelSpecs.specs.kernelspecs)));
    const kernel = await withTimeout(kernels.startNew({ name: 'ir' }), 90000, 'start the R kernel');
    started.push(kernel);
    const info = await withTimeout(kernel.info, 30000, 'kernel_info');
    assert.equal(info.language_info.name, 'R');
    await execute(kernel, 'x <- 6');
    const r = await execute(kernel, 'x * 7');
    assert.equal(r.reply.content.status, 'ok', JSON.stringify(r.reply.content));
    // IRkernel shows a visible value as display_data.
    assert.equal(r.of('display_data')[0]?.content.data['text/plain'], '[1] 42');
    const plot = await execute(kernel, 'library(ggplot2)\nggplot(data.frame(a = 1:5, b = (1:5)^2), aes(a, b)) + geom_point()');
    assert.equal(plot.reply.content.status, 'ok', JSON.stringify(plot.reply.content));
    const png = plot.iopub.map(m => m.content?.data?.['image/png']).find(Boolean);
    assert.ok(png, `no image/png in ${JSON.stringify(plot.iopub.map(m => m.header.msg_type))}`);
    assert.deepEqual([...Buffer.from(png, 'base64').subarray(0, 8)], [...PNG_MAGIC]);
    const err = await execute(kernel, 'stop("bad input")');
    assert.equal(err.reply.content.status, 'error');
    assert.match(err.of('error')[0]?.content.evalue ?? '', /bad input/);
  });

  test('the JavaScript kernel (Deno) keeps its bindings across cells', async () => {
    const kernel = await withTimeout(kernels.startNew({ name: 'javascript' }), 90000, 'start the JavaScript kernel');
    started.push(kernel);
    await execute(kernel, 'const base = 40; globalThis.calls = 0;');
    const r = await execute(kernel, 'calls += 1; console.log("calls", calls); base + 2');
    assert.equal(r.reply.content.status, 'ok', JSON.stringify(r.reply.content));
    assert.equal(r.stdout, 'calls 1\n');
    // Deno may publish the result just after the reply: wait for it briefly.
    let result = r.of('execute_result')[0];
    for (let i = 0; !result && i < 20; i++) {
      await new Promise(done => setTimeout(done, 50));
      result = r.of('execute_result')[0];
    }
    assert.equal(result?.content.data['text/plain'], '42');
  });
});
