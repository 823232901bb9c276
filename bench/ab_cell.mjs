// One cell's round trip on two gateways, alternating, in one run: POST
// /v1/sessions/{id}/execute with `1 + 1` (JSON) on a session of each. For an
// A/B of two builds of cellgate (say, before and after a change on the cell
// path) on the same machine at the same time:
//
//   A=http://127.0.0.1:18931 B=http://127.0.0.1:18932 TOKEN=T node bench/ab_cell.mjs 200
import { median } from './stats.mjs';
const n = Number(process.argv[2] || 200);
const token = process.env.TOKEN;
const headers = { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' };
async function session(base) {
  const r = await fetch(`${base}/v1/sessions`, { method: 'POST', headers, body: '{}' });
  if (r.status !== 201) throw new Error(`${base}: ${r.status} ${await r.text()}`);
  return (await r.json()).id;
}
async function cell(base, id) {
  const t0 = performance.now();
  const r = await fetch(`${base}/v1/sessions/${id}/execute`, { method: 'POST', headers, body: '{"code": "1 + 1"}' });
  const j = await r.json();
  if (j.status !== 'ok') throw new Error(JSON.stringify(j));
  return performance.now() - t0;
}
const a = process.env.A, b = process.env.B;
const [sa, sb] = [await session(a), await session(b)];
try {
  for (let i = 0; i < 10; i++) { await cell(a, sa); await cell(b, sb); }  // warm both
  const ta = [], tb = [];
  for (let i = 0; i < n; i++) {
    if (i % 2) { tb.push(await cell(b, sb)); ta.push(await cell(a, sa)); }
    else { ta.push(await cell(a, sa)); tb.push(await cell(b, sb)); }
  }
  console.log(JSON.stringify({ runs: n, a_median_ms: median(ta), b_median_ms: median(tb), ratio_b_to_a: median(tb) / median(ta) }, null, 2));
} finally {
  for (const [base, id] of [[a, sa], [b, sb]]) await fetch(`${base}/v1/sessions/${id}`, { method: 'DELETE', headers });
}
