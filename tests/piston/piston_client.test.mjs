// The unmodified piston-client (npm, pinned in package-lock.json) against
// cellgate: only its server changes (CG_PISTON_URL). It sends no token, as
// Piston's clients do; the gateway under test lets it in as its anonymous
// tenant (--piston-anonymous-tenant).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import piston from 'piston-client';

const client = piston({ server: process.env.CG_PISTON_URL });

test('runtimes lists the languages with versions and aliases', async () => {
  const runtimes = await client.runtimes();
  assert.ok(Array.isArray(runtimes), JSON.stringify(runtimes));
  for (const language of ['c', 'c++', 'rust', 'go', 'java', 'python', 'javascript', 'typescript', 'rscript']) {
    assert.ok(runtimes.some((r) => r.language === language && r.version), language);
  }
  assert.ok(runtimes.find((r) => r.language === 'python').aliases.includes('py'));
});

test('execute runs Python with the client defaults (args 1 2 3, memory limits -1)', async () => {
  const result = await client.execute('python', 'import sys\nprint("hello", sys.argv[1:])');
  assert.equal(result.language, 'python');
  assert.equal(result.run.stdout, "hello ['1', '2', '3']\n");
  assert.equal(result.run.code, 0);
  assert.equal(result.run.signal, null);
});

test('execute compiles C and reads stdin', async () => {
  const code = '#include <stdio.h>\nint main(void) { char s[32]; scanf("%31s", s); printf("c says %s\\n", s); return 0; }\n';
  const result = await client.execute('c', code, { stdin: 'moin\n', args: [] });
  assert.equal(result.compile.code, 0, JSON.stringify(result.compile));
  assert.equal(result.run.stdout, 'c says moin\n');
});

test('a compile error comes back in compile, and as run', async () => {
  const result = await client.execute({ language: 'rust', files: [{ name: 'main.rs', content: 'fn main() { let x: u8 = "no"; }' }], args: [] });
  assert.notEqual(result.compile.code, 0);
  assert.equal(result.compile.status, 'RE');
  assert.match(result.compile.stderr, /mismatched types/);
  assert.deepEqual(result.run, result.compile);
});

test('a timeout the client asks for stops the program with TO', async () => {
  const result = await client.execute('javascript', 'for (;;) {}', { runTimeout: 500, args: [] });
  assert.equal(result.run.status, 'TO');
  assert.equal(result.run.signal, 'SIGKILL');
});

test('an unknown language is Piston\'s 400 message', async () => {
  const result = await client.execute({ language: 'python', version: '0.0.1', files: [{ content: 'print(1)' }] });
  assert.equal(result.message, 'python-0.0.1 runtime is unknown');
});
