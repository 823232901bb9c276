// Code contexts through the unmodified E2B SDK: createCodeContext() → its
// first runCode('1 + 1'), and a cell in a context that exists already, each
// against the same cell in the sandbox's default context (its kernel) in the
// same run, as the reference. One sandbox; N contexts made and removed in
// turn. Needs the packages of tests/e2b (npm ci there) and a running gateway:
//
//   build/bin/cellgate --token T --pool-size 1 &
//   E2B_API_KEY=T E2B_API_URL=http://127.0.0.1:8888/e2b E2B_SANDBOX_URL=http://127.0.0.1:8888/e2b \
//     node bench/e2b_contexts.mjs 20
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import { median, timed } from './stats.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, '..', 'tests', 'e2b', 'package.json'));
const { Sandbox } = require('@e2b/code-interpreter');

const n = Number(process.argv[2] || 20);
const check = (ex) => {
  if (ex.text !== '2') throw new Error(`unexpected result ${ex.text} ${JSON.stringify(ex.error)}`);
};

const sbx = await Sandbox.create();
try {
  check(await sbx.runCode('1 + 1'));  // the kernel is warm
  const createFirst = [], inContext = [], inDefault = [];
  for (let i = 0; i < n; i++) {
    const [ms, ctx] = await timed(async () => {
      const c = await sbx.createCodeContext();
      check(await sbx.runCode('1 + 1', { context: c }));
      return c;
    });
    createFirst.push(ms);
    inContext.push((await timed(async () => check(await sbx.runCode('1 + 1', { context: ctx }))))[0]);
    inDefault.push((await timed(async () => check(await sbx.runCode('1 + 1'))))[0]);
    await sbx.removeCodeContext(ctx);
  }
  const stats = (xs) => ({ median: median(xs), min: Math.min(...xs), max: Math.max(...xs) });
  console.log(JSON.stringify({
    runs: n,
    create_context_to_first_result_ms: stats(createFirst),
    cell_in_a_context_ms: stats(inContext),
    cell_in_the_default_context_ms: stats(inDefault),
    ratio_context_to_default: median(inContext) / median(inDefault),
  }, null, 2));
} finally {
  await sbx.kill();
}
