"""What both E2B suites share: the environment the README (and docs/e2b.md,
"Connecting an SDK") gives the SDK, and running a node --test file against a gateway (its
log quoted when it fails). The locked SDK packages are conftest.py's
`node_modules` fixture."""
import os
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

from support.prerequisites import gateway_missing, node_missing, node_test, require


def require_e2b(suite):
    require(suite, gateway_missing() or node_missing("npm"))


def tokens_gateway(tmp_path_factory, suite, tokens, *args):
    """Yields a started Gateway whose tokens file holds `tokens` (a list of
    {"token", "tenant", …}), stopped and cleaned up after."""
    import json
    from support.gateway import Gateway
    require_e2b(f"E2B SDK {suite} tests")
    path = tmp_path_factory.mktemp(f"e2b-{suite}") / "tokens.json"
    path.write_text(json.dumps(tokens))
    gw = Gateway("--tokens-file", str(path), *args).start()
    try:
        yield gw
    finally:
        gw.stop()
        gw.cleanup()


def e2b_env(gw, key):
    """E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL, and nothing else of E2B's or cellgate's."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("E2B_", "CELLGATE_"))}
    env.update({"E2B_API_KEY": key, "E2B_API_URL": f"{gw.url}/e2b", "E2B_SANDBOX_URL": f"{gw.url}/e2b",
                "NODE_NO_WARNINGS": "1"})
    return env


def run_node_suite(gw, test_file, env):
    """Runs `test_file` with node --test; fails with its output and the gateway's log unless every test passed."""
    try:
        r = subprocess.run(node_test("--test-concurrency=1", test_file),
                           cwd=HERE, env=env, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"node --test timed out\n{e.stdout or ''}\n{e.stderr or ''}\n--- gateway log ---\n"
                    f"{gw.log_text()[-6000:]}")
    print(r.stdout)
    assert r.returncode == 0, (f"{test_file} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}\n"
                               f"--- gateway log (tail) ---\n{gw.log_text()[-6000:]}")
    assert "ℹ fail 0" in r.stdout and "ℹ pass 0" not in r.stdout, r.stdout
