// @jupyterlab/services against a cellgate cluster through its router
// (HAProxy, deploy/cellgate-router): kernels started through the router run
// on the nodes their ids name, their WebSockets (v1 subprotocol) reach them,
// the kernel, session and contents lists hold every node's, and a terminal
// opens in the sandbox of the caller's most recently active kernel, on its node.
//
//   CELLGATE_URL=http://127.0.0.1:ROUTER CELLGATE_TOKEN=T CELLGATE_NODE_TAGS=tag1,tag2,tag3 node --test cluster.test.mjs
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import services from '@jupyterlab/services';
import WebSocket from 'ws';
import coreutils from '@jupyterlab/coreutils';

const { ContentsManager, KernelManager, ServerConnection, SessionManager, TerminalManager } = services;
// JupyterLab learns this from the page the server renders; cellgate has terminals.
coreutils.PageConfig.setOption('terminalsAvailable', 'true');
const BASE_URL = process.env.CELLGATE_URL;
const TAGS = (process.env.CELLGATE_NODE_TAGS ?? '').split(',').filter(Boolean);
if (!BASE_URL || TAGS.length < 2) throw new Error('set CELLGATE_URL, CELLGATE_TOKEN and CELLGATE_NODE_TAGS');

const serverSettings = ServerConnection.makeSettings({
  baseUrl: BASE_URL,
  wsUrl: BASE_URL.replace(/^http/, 'ws'),
  token: process.env.CELLGATE_TOKEN ?? '',
  appendToken: true,
  WebSocket
});
const kernels = new KernelManager({ serverSettings });
const sessions = new SessionManager({ serverSettings, kernelManager: kernels });
const contents = new ContentsManager({ serverSettings });
const started = [];

after(async () => {
  for (const k of started) await k.shutdown().catch(() => {});
  sessions.dispose();
  kernels.dispose();
});

async function run(kernel, code) {
  let out = '';
  const future = kernel.requestExecute({ code });
  future.onIOPub = msg => {
    if (msg.header.msg_type === 'stream') out += msg.content.text;
  };
  const reply = await future.done;
  assert.equal(reply.content.status, 'ok');
  return out;
}

test('kernels started through the router run on the nodes their ids name', async () => {
  for (let i = 0; i < 4; i++) {
    const k = await kernels.startNew({ name: 'python3' });
    started.push(k);
    assert.ok(TAGS.includes(k.id.slice(0, 8)), `${k.id} names no node of ${TAGS}`);
    assert.equal((await run(k, `print(${i} * 7)`)).trim(), String(i * 7));
  }
  // Where creates land is HAProxy's draw (test_cluster.py checks the spread over more of them).
});

test('a terminal opened through the router runs beside the most recently active kernel, on its node', async () => {
  const terminals = new TerminalManager({ serverSettings });
  try {
    for (const k of started.slice(0, 3)) {
      await run(k, `open('which.txt', 'w').write(${JSON.stringify(k.id)})`);  // now the most recently active
      const term = await terminals.startNew();
      assert.equal(term.name.slice(0, 9), k.id.slice(0, 9), `terminal ${term.name} is not on ${k.id}'s node`);
      let out = '';
      term.messageReceived.connect((_, msg) => {
        if (msg.type === 'stdout') out += msg.content[0];
      });
      const until = async (what, pred) => {
        const end = Date.now() + 30000;
        while (!pred()) {
          if (Date.now() > end) throw new Error(`timed out waiting for ${what}; terminal output: ${JSON.stringify(out)}`);
          await new Promise(r => setTimeout(r, 50));
        }
      };
      await until('the terminal to connect', () => term.connectionStatus === 'connected');
      term.send({ type: 'stdin', content: ['cat which.txt; echo; echo end-$((6*7))\r'] });
      await until('the shell to answer', () => /end-42/.test(out));
      assert.match(out, new RegExp(k.id), 'the terminal is not in the kernel\'s sandbox');
      await terminals.refreshRunning();
      assert.ok([...terminals.running()].some(m => m.name === term.name), 'the terminal is not listed');
      await term.shutdown();
    }
  } finally {
    terminals.dispose();
  }
});

test('the kernel list, through any node, holds every node’s kernels', async () => {
  await kernels.refreshRunning();
  const ids = new Set([...kernels.running()].map(m => m.id));
  for (const k of started) assert.ok(ids.has(k.id), `${k.id} missing from the list`);
});

test('a session made through the router is listed and its kernel answers', async () => {
  const s = await sessions.startNew({ path: 'cluster.ipynb', name: 'cluster', type: 'notebook', kernel: { name: 'python3' } });
  try {
    assert.ok(TAGS.includes(s.id.slice(0, 8)));
    assert.equal((await run(s.kernel, 'print("on " + "a node")')).trim(), 'on a node');
    await sessions.refreshRunning();
    assert.ok([...sessions.running()].some(m => m.id === s.id));
  } finally {
    await s.shutdown();
  }
});

test('contents: the root holds every node’s workspaces, and a file saved through the router is read back', async () => {
  const root = await contents.get('', { content: true });
  const names = new Set(root.content.map(e => e.name));
  for (const k of started) assert.ok(names.has(k.id), `${k.id} missing from the contents root`);
  const k = started[started.length - 1];
  await contents.save(`${k.id}/hello.txt`, { type: 'file', format: 'text', content: 'from the router' });
  assert.equal((await run(k, "print(open('hello.txt').read())")).trim(), 'from the router');
  const back = await contents.get(`${k.id}/hello.txt`, { content: true });
  assert.equal(back.content, 'from the router');
});

test('a shut-down kernel leaves the list', async () => {
  const k = started.pop();
  await k.shutdown();
  await kernels.refreshRunning();
  assert.ok(![...kernels.running()].some(m => m.id === k.id));
});
