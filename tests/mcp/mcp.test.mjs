// The official MCP TypeScript SDK client (@modelcontextprotocol/sdk, pinned
// in package-lock.json, unmodified) over StreamableHTTPClientTransport
// against a live cellgate's /mcp. test_mcp.py starts the gateway and sets
// CELLGATE_URL, CELLGATE_TOKEN and CELLGATE_OTHER_TOKEN (a second tenant).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

for (const name of ['CELLGATE_URL', 'CELLGATE_TOKEN', 'CELLGATE_OTHER_TOKEN'])
  assert.ok(process.env[name], `${name} must be set`);
const url = new URL(process.env.CELLGATE_URL + '/mcp');
const PNG_MAGIC = [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a];
const TOOLS = ['execute_code', 'create_session', 'snapshot_session', 'fork_session', 'close_session', 'list_sessions', 'write_file', 'read_file', 'list_files'];

async function connect(token) {
  const transport = new StreamableHTTPClientTransport(url, {
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
  });
  const client = new Client({ name: 'cellgate-mcp-test', version: '1.0.0' });
  const errors = [];
  client.onerror = (e) => errors.push(String(e));
  await client.connect(transport);
  return { client, transport, errors };
}

const textOf = (r) => r.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
const sessionOf = (r) => /session_id: (\S+)/.exec(textOf(r))[1];
const call = (client, name, args, options) => client.callTool({ name, arguments: args }, undefined, { timeout: 120_000, ...options });

let main;
let sid;
before(async () => {
  main = await connect(process.env.CELLGATE_TOKEN);
});
after(async () => {
  if (sid) await call(main.client, 'close_session', { session_id: sid }).catch(() => {});
  await main.transport.terminateSession().catch(() => {});
  await main.client.close();
});

test('initialize negotiates a 2025 revision and a session id; tools/list names the tools with object schemas', async () => {
  assert.ok(main.client.getServerCapabilities()?.tools, 'tools capability');
  assert.equal(main.client.getServerVersion()?.name, 'cellgate');
  assert.match(main.transport.sessionId, /^[0-9a-f]{64}$/);
  assert.ok(['2025-11-25', '2025-06-18'].includes(main.transport.protocolVersion), main.transport.protocolVersion);
  const { tools } = await main.client.listTools();
  assert.deepEqual(tools.map((t) => t.name), TOOLS);
  for (const t of tools) {
    assert.equal(t.inputSchema.type, 'object', t.name);
    assert.equal(t.outputSchema, undefined, `${t.name} has no outputSchema (hosts drop images next to structuredContent)`);
    assert.ok(t.description.length > 20, t.name);
  }
  const exec = tools.find((t) => t.name === 'execute_code');
  assert.deepEqual(exec.inputSchema.required, ['code']);
  for (const p of ['code', 'language', 'session_id', 'timeout_s', 'max_output_tokens']) assert.ok(exec.inputSchema.properties[p], p);
  const write = tools.find((t) => t.name === 'write_file');
  assert.deepEqual(write.inputSchema.properties.encoding.enum, ['utf-8', 'base64']);
});

test('execute_code without session_id makes a session; a Matplotlib plot comes back as a PNG image block', async () => {
  const r = await call(main.client, 'execute_code', {
    code: 'import matplotlib.pyplot as plt\nx = 41\nprint("drawing")\nplt.plot([1, 2, 3]); plt.show()',
  });
  assert.equal(r.isError ?? false, false, textOf(r));
  assert.equal(r.structuredContent, undefined);
  sid = sessionOf(r);
  assert.match(sid, /^[0-9a-f-]{36}$/);
  assert.match(textOf(r), /status: ok/);
  assert.match(textOf(r), /drawing/);
  assert.match(textOf(r), /new session/);
  const img = r.content.find((c) => c.type === 'image');
  assert.ok(img, JSON.stringify(r.content.map((c) => c.type)));
  assert.equal(img.mimeType, 'image/png');
  assert.deepEqual([...Buffer.from(img.data, 'base64').subarray(0, 8)], PNG_MAGIC);
});

test('the session keeps its variables between calls', async () => {
  const r = await call(main.client, 'execute_code', { code: 'print(x + 1)\nx * 2', session_id: sid });
  assert.equal(r.isError ?? false, false, textOf(r));
  assert.equal(sessionOf(r), sid);
  assert.match(textOf(r), /--- stdout ---\n42\n/);
  assert.match(textOf(r), /--- result ---\n82\n/);
  assert.doesNotMatch(textOf(r), /new session/);
});

test('an error is an isError result with the exception and its traceback', async () => {
  const r = await call(main.client, 'execute_code', { code: 'def f():\n    return 1 / 0\nf()', session_id: sid });
  assert.equal(r.isError, true);
  assert.match(textOf(r), /status: error/);
  assert.match(textOf(r), /ZeroDivisionError: division by zero/);
  assert.match(textOf(r), /in f\(\)|line 2/);
  assert.doesNotMatch(textOf(r), /\u001b\[/, 'no ANSI colour codes');
});

test('bad arguments are isError results the model can act on; an unknown tool is a protocol error', async () => {
  const r = await call(main.client, 'execute_code', { code: 42 });
  assert.equal(r.isError, true);
  assert.match(textOf(r), /'code' must be a string/);
  const extra = await call(main.client, 'list_sessions', { verbose: true });
  assert.equal(extra.isError, true);
  assert.match(textOf(extra), /unknown argument 'verbose'/);
  await assert.rejects(call(main.client, 'no_such_tool', {}), /Unknown tool/);
});

test('write_file, then execute_code reads it; read_file and list_files see it; the file is a resource', async () => {
  const w = await call(main.client, 'write_file', { session_id: sid, path: 'data/in.csv', content: 'a,b\n1,2\n3,4\n' });
  assert.equal(w.isError ?? false, false, textOf(w));
  assert.match(textOf(w), /wrote data\/in.csv \(12 bytes\)/);
  const bin = Buffer.from([0, 1, 2, 250, 251, 252]).toString('base64');
  const wb = await call(main.client, 'write_file', { session_id: sid, path: 'blob.bin', content: bin, encoding: 'base64' });
  assert.equal(wb.isError ?? false, false, textOf(wb));

  const r = await call(main.client, 'execute_code', {
    session_id: sid,
    code: "import pandas as pd\ndf = pd.read_csv('data/in.csv')\nprint(df['b'].sum())\n"
      + "df.to_csv('out.csv', index=False)\nprint(list(open('blob.bin', 'rb').read()))",
  });
  assert.equal(r.isError ?? false, false, textOf(r));
  assert.match(textOf(r), /^6$/m);
  assert.match(textOf(r), /\[0, 1, 2, 250, 251, 252\]/);
  const link = r.content.find((c) => c.type === 'resource_link');
  assert.ok(link, 'a resource_link for out.csv');
  assert.equal(link.uri, `cellgate://sessions/${sid}/files/out.csv`);
  assert.equal(link.name, 'out.csv');
  assert.match(textOf(r), /created out\.csv/);

  const read = await call(main.client, 'read_file', { session_id: sid, path: 'out.csv' });
  assert.equal(read.isError ?? false, false, textOf(read));
  assert.equal(textOf(read), 'a,b\n1,2\n3,4\n');
  const cut = await call(main.client, 'read_file', { session_id: sid, path: 'out.csv', max_bytes: 4 });
  assert.match(textOf(cut), /^a,b\n\n… \[8 more bytes/);
  const binary = await call(main.client, 'read_file', { session_id: sid, path: 'blob.bin' });
  assert.match(textOf(binary), /6 bytes of application\/octet-stream \(not text/);
  assert.ok(binary.content.find((c) => c.type === 'resource_link'));
  const missing = await call(main.client, 'read_file', { session_id: sid, path: 'nope.txt' });
  assert.equal(missing.isError, true);

  const ls = await call(main.client, 'list_files', { session_id: sid });
  assert.match(textOf(ls), /file {2}out\.csv {2}12 bytes/);
  assert.match(textOf(ls), /dir {3}data\//);
  const sub = await call(main.client, 'list_files', { session_id: sid, path: 'data' });
  assert.match(textOf(sub), /data\/in\.csv/);

  const res = await main.client.readResource({ uri: link.uri });
  assert.equal(res.contents[0].text, 'a,b\n1,2\n3,4\n');
  const blob = await main.client.readResource({ uri: `cellgate://sessions/${sid}/files/blob.bin` });
  assert.deepEqual([...Buffer.from(blob.contents[0].blob, 'base64')], [0, 1, 2, 250, 251, 252]);
  await assert.rejects(main.client.readResource({ uri: `cellgate://sessions/${sid}/files/nope.txt` }), /not found/i);
  const { resourceTemplates } = await main.client.listResourceTemplates();
  assert.equal(resourceTemplates[0].uriTemplate, 'cellgate://sessions/{session_id}/files/{+path}');
});

test('a 5 s cell sends progress notifications, increasing, with its output', async () => {
  const progress = [];
  const r = await call(main.client, 'execute_code', {
    session_id: sid,
    code: 'import time\nfor i in range(5):\n    print("step", i, flush=True)\n    time.sleep(1)',
  }, { onprogress: (p) => progress.push(p), resetTimeoutOnProgress: true });
  assert.equal(r.isError ?? false, false, textOf(r));
  assert.ok(progress.length >= 1, `progress notifications: ${progress.length}`);
  for (let i = 1; i < progress.length; i++) assert.ok(progress[i].progress > progress[i - 1].progress);
  assert.ok(progress.some((p) => /last output: step \d/.test(p.message ?? '')), JSON.stringify(progress));
});

test('cancelling a call interrupts its cell; the session stays usable', async () => {
  const ac = new AbortController();
  setTimeout(() => ac.abort('test cancels'), 2500);
  await assert.rejects(call(main.client, 'execute_code', {
    session_id: sid,
    code: 'import time\nstarted = True\nfor _ in range(300):\n    time.sleep(0.1)\nfinished = True',
  }, { signal: ac.signal }));
  // The interrupt reached the kernel: the loop stopped before `finished`.
  const r = await call(main.client, 'execute_code', {
    session_id: sid, code: "print(globals().get('started'), globals().get('finished', 'interrupted'))",
  });
  assert.equal(r.isError ?? false, false, textOf(r));
  assert.match(textOf(r), /True interrupted/);
});

test('another tenant cannot use the session', async () => {
  const other = await connect(process.env.CELLGATE_OTHER_TOKEN);
  try {
    for (const [name, args] of [['execute_code', { code: 'print(x)', session_id: sid }],
      ['read_file', { session_id: sid, path: 'out.csv' }], ['list_files', { session_id: sid }],
      ['close_session', { session_id: sid }]]) {
      const r = await call(other.client, name, args);
      assert.equal(r.isError, true, name);
      assert.match(textOf(r), /not found/, name);
    }
    const list = await call(other.client, 'list_sessions', {});
    assert.doesNotMatch(textOf(list), new RegExp(sid));
    await assert.rejects(other.client.readResource({ uri: `cellgate://sessions/${sid}/files/out.csv` }), /not found/i);
    assert.deepEqual(other.errors, []);
  } finally {
    await other.transport.terminateSession();
    await other.client.close();
  }
  const mine = await call(main.client, 'list_sessions', {});
  assert.match(textOf(mine), new RegExp(`session_id: ${sid}`));
});

test('create_session and close_session', async () => {
  const c = await call(main.client, 'create_session', { timeout_s: 30 });
  assert.equal(c.isError ?? false, false, textOf(c));
  const id = sessionOf(c);
  assert.match(textOf(c), /cell timeout 30 s/);
  const closed = await call(main.client, 'close_session', { session_id: id });
  assert.equal(textOf(closed), `closed ${id}`);
  const gone = await call(main.client, 'execute_code', { code: '1', session_id: id });
  assert.equal(gone.isError, true);
  assert.match(textOf(gone), /not found/);
});

test('execute_code with a language runs an R, a JavaScript and a Bash session; a mismatch or an unknown language is an isError result', async () => {
  const r = await call(main.client, 'execute_code', { code: 'v <- c(1, 2, 3)\ncat(sum(v * 2), "\\n")', language: 'r' });
  assert.equal(r.isError ?? false, false, textOf(r));
  assert.match(textOf(r), /status: ok[\s\S]*12/);
  const rid = sessionOf(r);
  const again = await call(main.client, 'execute_code', { code: 'mean(v)', language: 'r', session_id: rid });
  assert.match(textOf(again), /--- result ---\n(\[1\] )?2\n/, textOf(again));  // an R cell's last display is its result
  const wrong = await call(main.client, 'execute_code', { code: 'print(1)', language: 'python', session_id: rid });
  assert.equal(wrong.isError, true);
  assert.match(textOf(wrong), /runs r, not python/);
  const js = await call(main.client, 'execute_code', { code: 'const s = [3, 4].map((x) => x * x); s[0] + s[1]', language: 'javascript' });
  assert.match(textOf(js), /25/, textOf(js));
  const sh = await call(main.client, 'execute_code', { code: 'echo "bash $BASH_VERSINFO"', language: 'bash' });
  assert.match(textOf(sh), /bash 5/, textOf(sh));
  const none = await call(main.client, 'execute_code', { code: '1', language: 'cobol' });
  assert.equal(none.isError, true);
  assert.match(textOf(none), /'language' must be one of \["python","r","javascript","typescript","bash"\]/);
  for (const id of [rid, sessionOf(js), sessionOf(sh)]) await call(main.client, 'close_session', { session_id: id });
});

test('create_session starts from one of the tenant\'s templates; another tenant\'s is not found', async () => {
  const name = `mcp-${process.pid}`;
  const headers = { Authorization: `Bearer ${process.env.CELLGATE_TOKEN}`, 'Content-Type': 'application/json' };
  const r = await fetch(`${process.env.CELLGATE_URL}/v1/templates`, {
    method: 'POST', headers,
    body: JSON.stringify({ name: `${name}:v1`, steps: [{ type: 'RUN', args: [`echo ${name} > /opt/mcp-marker`] }] }),
  });
  const started = JSON.parse(await r.text());
  assert.equal(r.status, 202, JSON.stringify(started));
  let build;
  for (let i = 0; i < 600; i++) {
    build = await (await fetch(`${process.env.CELLGATE_URL}${started.status_url}`, { headers })).json();
    if (build.status === 'ready' || build.status === 'error') break;
    await new Promise((done) => setTimeout(done, 200));
  }
  assert.equal(build.status, 'ready', JSON.stringify(build));
  const { tools } = await main.client.listTools();
  assert.ok(tools.find((t) => t.name === 'create_session').inputSchema.properties.template, 'create_session takes a template');
  try {
    const c = await call(main.client, 'create_session', { template: `${name}:v1` });
    assert.equal(c.isError ?? false, false, textOf(c));
    const id = sessionOf(c);
    const out = await call(main.client, 'execute_code', { code: "print(open('/opt/mcp-marker').read().strip())", session_id: id });
    assert.match(textOf(out), new RegExp(name));
    await call(main.client, 'close_session', { session_id: id });
    const other = await connect(process.env.CELLGATE_OTHER_TOKEN);
    try {
      const theirs = await call(other.client, 'create_session', { template: `${name}:v1` });
      assert.equal(theirs.isError, true);
      assert.match(textOf(theirs), /No template/);
    } finally {
      await other.transport.terminateSession().catch(() => {});
      await other.client.close();
    }
  } finally {
    await fetch(`${process.env.CELLGATE_URL}/v1/templates/${name}:v1`, { method: 'DELETE', headers });
  }
});

test('fork_session copies a session\'s files into new sessions that diverge; snapshot_session + create_session from_snapshot', async () => {
  const c = await call(main.client, 'create_session', {});
  const src = sessionOf(c);
  const opened = [src];
  try {
    await call(main.client, 'write_file', { session_id: src, path: 'plan.txt', content: 'step 1' });
    const f = await call(main.client, 'fork_session', { session_id: src, count: 2 });
    assert.equal(f.isError ?? false, false, textOf(f));
    const kids = [...textOf(f).matchAll(/session_id: (\S+)/g)].map((m) => m[1]);
    opened.push(...kids);
    assert.equal(kids.length, 2, textOf(f));
    assert.ok(!kids.includes(src) && kids[0] !== kids[1]);
    for (const [i, k] of kids.entries()) {
      const r = await call(main.client, 'execute_code', { session_id: k, code: `open('plan.txt','a').write(' + child ${i}'); print(open('plan.txt').read())` });
      assert.match(textOf(r), new RegExp(`step 1 \\+ child ${i}`), textOf(r));
    }
    const back = await call(main.client, 'read_file', { session_id: src, path: 'plan.txt' });
    assert.match(textOf(back), /^step 1$/m, textOf(back));
    const s = await call(main.client, 'snapshot_session', { session_id: src, name: 'before step 2' });
    assert.equal(s.isError ?? false, false, textOf(s));
    const snap = /snapshot_id: (\S+)/.exec(textOf(s))[1];
    const n = await call(main.client, 'create_session', { from_snapshot: snap });
    assert.equal(n.isError ?? false, false, textOf(n));
    const fresh = sessionOf(n);
    opened.push(fresh);
    const read = await call(main.client, 'read_file', { session_id: fresh, path: 'plan.txt' });
    assert.match(textOf(read), /^step 1$/m);
    // Bad input comes back as an isError result the model can act on.
    const bad = await call(main.client, 'fork_session', { session_id: src, count: 99 });
    assert.equal(bad.isError, true);
    assert.match(textOf(bad), /count/);
    const unknown = await call(main.client, 'create_session', { from_snapshot: 'no-such-snapshot' });
    assert.equal(unknown.isError, true);
    assert.match(textOf(unknown), /snapshot/);
  } finally {
    for (const id of opened) await call(main.client, 'close_session', { session_id: id }).catch(() => {});
  }
});

test('the transport saw no errors (GET answered 405, as the client expects)', () => {
  assert.deepEqual(main.errors, []);
});

// Raw requests: what the SDK never shows.
const jsonHeaders = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream' };
const auth = { Authorization: `Bearer ${process.env.CELLGATE_TOKEN}` };
const init = { jsonrpc: '2.0', id: 1, method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '0' } } };
const post = (body, headers = {}) => fetch(url, { method: 'POST', headers: { ...jsonHeaders, ...headers },
  body: typeof body === 'string' ? body : JSON.stringify(body) });

test('no token → 401 with WWW-Authenticate; a wrong one too; ?token= is not accepted', async () => {
  let r = await post(init);
  assert.equal(r.status, 401);
  assert.match(r.headers.get('www-authenticate'), /^Bearer realm="cellgate"/);
  r = await post(init, { Authorization: 'Bearer wrong' });
  assert.equal(r.status, 401);
  assert.match(r.headers.get('www-authenticate'), /invalid_token/);
  r = await fetch(`${url}?token=${process.env.CELLGATE_TOKEN}`, { method: 'POST', headers: jsonHeaders, body: JSON.stringify(init) });
  assert.equal(r.status, 401);
});

test('a foreign Origin → 403; the gateway\'s own origin is fine', async () => {
  let r = await post(init, { ...auth, Origin: 'https://evil.example' });
  assert.equal(r.status, 403);
  assert.equal((await r.json()).error.code, -32600);
  r = await post(init, { ...auth, Origin: `http://${url.host}` });
  assert.equal(r.status, 200);
});

test('initialize answers the asked 2025-06-18, or the server\'s latest for another revision', async () => {
  let r = await post(init, auth);
  assert.equal(r.status, 200);
  assert.equal((await r.json()).result.protocolVersion, '2025-06-18');
  const session = r.headers.get('mcp-session-id');
  assert.match(session, /^[0-9a-f]{64}$/);
  r = await post({ ...init, params: { ...init.params, protocolVersion: '2024-11-05' } }, auth);
  assert.equal((await r.json()).result.protocolVersion, '2025-11-25');

  const s = { ...auth, 'Mcp-Session-Id': session, 'MCP-Protocol-Version': '2025-06-18' };
  r = await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, s);
  assert.equal(r.status, 202);
  r = await post({ jsonrpc: '2.0', id: 2, method: 'ping' }, s);
  assert.deepEqual(await r.json(), { jsonrpc: '2.0', id: 2, result: {} });
  r = await post({ jsonrpc: '2.0', id: 3, method: 'no/such' }, s);
  assert.equal((await r.json()).error.code, -32601);
  r = await post({ jsonrpc: '2.0', id: 4, method: 'ping' }, { ...s, 'MCP-Protocol-Version': '1900-01-01' });
  assert.equal(r.status, 400);
  r = await post([{ jsonrpc: '2.0', id: 5, method: 'ping' }], s);
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.code, -32600);
  r = await post('{"jsonrpc": "2.0", "id": ', s);
  assert.equal(r.status, 400);
  assert.equal((await r.json()).error.code, -32700);
  r = await post({ jsonrpc: '2.0', id: 6, method: 'ping' }, auth);
  assert.equal(r.status, 400, 'no Mcp-Session-Id');
  r = await post({ jsonrpc: '2.0', id: 7, method: 'ping' }, { ...s, 'Mcp-Session-Id': 'f'.repeat(64) });
  assert.equal(r.status, 404);
  r = await post({ jsonrpc: '2.0', id: 8, method: 'ping' }, { ...s, Authorization: `Bearer ${process.env.CELLGATE_OTHER_TOKEN}` });
  assert.equal(r.status, 404, 'another tenant\'s MCP session is not there');
  r = await fetch(url, { method: 'POST', headers: { ...s, 'Content-Type': 'text/plain', Accept: 'application/json, text/event-stream' }, body: '{}' });
  assert.equal(r.status, 415);
  r = await fetch(url, { method: 'GET', headers: { ...s, Accept: 'text/event-stream' } });
  assert.equal(r.status, 405);
  r = await fetch(url, { method: 'DELETE', headers: s });
  assert.equal(r.status, 204);
  r = await post({ jsonrpc: '2.0', id: 9, method: 'ping' }, s);
  assert.equal(r.status, 404, 'ended by DELETE');
});
