// Create-to-first-result through the unmodified E2B SDK against cellgate:
// Sandbox.create() → runCode('1 + 1') → its text, timed end to end, N times
// (sandboxes killed between runs, so the warm pool refills as a real agent's
// would), with the same steps on cellgate's own /v1 API in the same run as
// the reference. Needs the packages of tests/e2b (npm ci there) and a running
// gateway with a warm pool:
//
//   build/bin/cellgate --token T --pool-size 2 &
//   E2B_API_KEY=T E2B_API_URL=http://127.0.0.1:8888/e2b E2B_SANDBOX_URL=http://127.0.0.1:8888/e2b \
//     CELLGATE_URL=http://127.0.0.1:8888 node bench/e2b_first_result.mjs 20
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { median } from './stats.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'tests', 'e2b', 'package.json'));
const { Sandbox } = require('@e2b/code-interpreter');

const n = Number(process.argv[2] || 20);
const gap = Number(process.env.BENCH_GAP_MS || 1500);  // lets the pool refill, as between real agents' tasks
const base = process.env.CELLGATE_URL;
const token = process.env.E2B_API_KEY;

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function viaE2b() {
  const t0 = performance.now();
  const sbx = await Sandbox.create();
  const ex = await sbx.runCode('1 + 1');
  const ms = performance.now() - t0;
  if (ex.text !== '2') throw new Error(`unexpected result ${ex.text}`);
  await sbx.kill();
  return ms;
}

async function viaV1() {
  const headers = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' };
  const t0 = performance.now();
  const s = await (await fetch(`${base}/v1/sessions`, { method: 'POST', headers, body: '{}' })).json();
  const r = await (await fetch(`${base}/v1/sessions/${s.id}/execute`, { method: 'POST', headers, body: JSON.stringify({ code: '1 + 1' }) })).json();
  const ms = performance.now() - t0;
  if (r.results?.[0]?.data?.['text/plain'] !== '2') throw new Error(`unexpected result ${JSON.stringify(r)}`);
  await fetch(`${base}/v1/sessions/${s.id}`, { method: 'DELETE', headers });
  return ms;
}

const e2b = [], v1 = [];
for (let i = 0; i < n; i++) {
  e2b.push(await viaE2b());
  await sleep(gap);
  if (base) {
    v1.push(await viaV1());
    await sleep(gap);
  }
}
const out = { runs: n, e2b_sdk_ms: { median: median(e2b), min: Math.min(...e2b), max: Math.max(...e2b), samples: e2b } };
if (v1.length) {
  out.v1_api_ms = { median: median(v1), min: Math.min(...v1), max: Math.max(...v1), samples: v1 };
  out.ratio_e2b_to_v1 = median(e2b) / median(v1);
}
console.log(JSON.stringify(out, null, 1));
