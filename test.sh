#!/usr/bin/env bash
# Quick start, step 2 of 2: installs what the tests need, builds, builds the
# kernel image, and runs every test suite. Needs root (runc, cgroups, loop
# mounts). Exits non-zero if any suite fails.
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
scripts/build.sh
images/build.sh python | tail -n 1

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
run_suite "deployment files (Kubernetes manifests, systemd units) agree with the binaries" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/deploy
run_suite "sandbox and gateway integration tests (runc + image + ipykernel + cellgate)" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/integration
run_suite "client tests (@jupyterlab/services, jupyter_server --gateway-url)" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/clients
run_suite "Python SDK, CLI, tool adapter and notebooks" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/sdk
run_suite "JavaScript client (node --test against the gateway)" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/js
run_suite "E2B SDKs, unmodified (npm e2b + @e2b/code-interpreter against the /e2b surface)" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/e2b
run_suite "MCP endpoint, unmodified clients (@modelcontextprotocol/sdk, inspector-cli against /mcp)" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/mcp
run_suite "chat page in Chromium (playwright-core, Debian's chromium)" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/browser
run_suite "soak (20 sessions × 30 cells with uploads and downloads; resources back to baseline)" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/soak
exit $status
