#!/usr/bin/env bash
# Quick start, step 2 of 2: installs what the tests need, builds, builds the
# kernel image, and runs every test suite. Needs root (runc, cgroups, loop
# mounts). Exits non-zero if any suite fails.
set -euo pipefail
cd "$(dirname "$0")"
step() {  # a step the suites need: its time, and the run stops if it fails
  local start=$SECONDS
  "$@"
  echo "=== $*: done in $((SECONDS - start)) s"
}
step scripts/install-deps.sh
step scripts/build.sh
step images/build.sh python
step images/build.sh debian
step images/build.sh node
step images/build.sh languages

export CELLGATE_REQUIRE_SANDBOX=1
status=0
run_suite() {
  local name=$1; shift
  local start=$SECONDS
  echo "=== $name"
  if "$@"; then
    echo "=== $name: passed in $((SECONDS - start)) s"
  else
    echo "=== $name: FAILED"
    status=1
  fi
}
run_suite "unit tests (GoogleTest)" ctest --test-dir build --output-on-failure -j"$(nproc)"
# The fuzz targets are built (clang, ASan + UBSan) and replay their committed
# corpus, so they keep compiling against the code they test; the long runs
# are `fuzz/run.sh 600` (fuzz/README.md).
run_suite "fuzz targets replay their corpus (libFuzzer, ASan + UBSan)" fuzz/run.sh 0
# Every Python suite in one pytest session on the one harness (tests/support):
# the plugin prints each suite's time and the sandboxes it started at the end.
# Suites that need no sandbox come first, the soak last.
run_suite "Python suites: deployment files, sandbox and gateway integration, clients (@jupyterlab/services, jupyter_server), SDK and CLI, JS client, E2B SDKs, MCP SDKs, piston-client, chat page in Chromium, soak" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider --durations=25 \
    tests/deploy tests/integration tests/clients tests/sdk tests/js tests/e2b tests/mcp tests/piston tests/browser tests/soak
exit $status
