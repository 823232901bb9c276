// A cell through the MCP endpoint against the same cell through /v1, in one
// run: the official MCP SDK client's callTool('execute_code', '1 + 1') on a
// session (SSE with progress token, the MCP rendering, the ledger and the
// output budget all included) against POST /v1/sessions/{id}/execute on the
// same session (JSON). Also a 5 MB print with max_output_tokens=2000 (head,
// tail, spooled whole) against the same print with no budget (cut at the session's output limit). Needs the
// packages of tests/mcp (npm ci there) and a running gateway:
//
//   build/bin/cellgate --token T --pool-size 1 &
//   CELLGATE_URL=http://127.0.0.1:8888 CELLGATE_TOKEN=T node bench/mcp_execute.mjs 50
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { median, timed } from './stats.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'tests', 'mcp', 'package.json'));
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');

const n = Number(process.argv[2] || 50);
const base = process.env.CELLGATE_URL;
const headers = { Authorization: `Bearer ${process.env.CELLGATE_TOKEN}`, 'Content-Type': 'application/json' };
const v1 = async (sid, body) => {
  const r = await fetch(`${base}/v1/sessions/${sid}/execute`, { method: 'POST', headers, body: JSON.stringify(body) });
  const j = await r.json();
  if (j.status !== 'ok') throw new Error(JSON.stringify(j).slice(0, 300));
  return j;
};

const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`), { requestInit: { headers } });
const client = new Client({ name: 'cellgate-bench', version: '1' });
await client.connect(transport);
const first = await client.callTool({ name: 'execute_code', arguments: { code: '1 + 1' } });
const sid = /session_id: (\S+)/.exec(first.content[0].text)[1];
try {
  const mcp = [], rest = [], flood = [], floodBudget = [];
  for (let i = 0; i < n; i++) {
    mcp.push((await timed(async () => {
      const r = await client.callTool({ name: 'execute_code', arguments: { code: '1 + 1', session_id: sid } },
        undefined, { onprogress: () => {} });
      if (r.isError || !/--- result ---\n2\n/.test(r.content[0].text)) throw new Error(r.content[0].text);
    }))[0]);
    rest.push((await timed(() => v1(sid, { code: '1 + 1' })))[0]);
  }
  const print = "for i in range(50000): print('r' * 95, i)";  // 5 MB
  for (let i = 0; i < Math.max(3, Math.floor(n / 10)); i++) {
    floodBudget.push((await timed(() => v1(sid, { code: print, max_output_tokens: 2000, timeout_s: 120 })))[0]);
    flood.push((await timed(() => v1(sid, { code: print, timeout_s: 120 })))[0]);
  }
  const stats = (xs) => ({ median: median(xs), min: Math.min(...xs), max: Math.max(...xs) });
  console.log(JSON.stringify({
    runs: n,
    mcp_execute_code_ms: stats(mcp),
    v1_execute_ms: stats(rest),
    ratio_mcp_to_v1: median(mcp) / median(rest),
    print_5mb_budget_2000_tokens_ms: stats(floodBudget),
    print_5mb_no_budget_ms: stats(flood),
    ratio_budget_to_none: median(floodBudget) / median(flood),
  }, null, 2));
} finally {
  await client.callTool({ name: 'close_session', arguments: { session_id: sid } });
  await transport.terminateSession();
  await client.close();
}
