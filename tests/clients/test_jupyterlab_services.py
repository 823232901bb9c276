"""Runs @jupyterlab/services — the client library inside JupyterLab, from npm —
against a live cellgate, once per kernel WebSocket protocol (the
v1.kernel.websocket.jupyter.org subprotocol JupyterLab offers by default, and
the JSON protocol of a client that offers none). The checks themselves are in
jupyterlab/services.test.mjs (Node's built-in test runner)."""
import hashlib
import os
import subprocess

import pytest

from cellgate_clients import CLIENTS, log_tail, require
from support.prerequisites import node_test

JS_DIR = CLIENTS / "jupyterlab"
STAMP = JS_DIR / "node_modules" / ".cellgate-lock-sha256"

# Nothing here may fetch a browser: no install scripts run at all, and the
# usual download switches are off in case a future dependency grows one.
NO_DOWNLOADS = {
    "PUPPETEER_SKIP_DOWNLOAD": "1",
    "PUPPETEER_SKIP_CHROMIUM_DOWNLOAD": "1",
    "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1",
    "npm_config_update_notifier": "false",
}


def _lock_digest():
    return hashlib.sha256((JS_DIR / "package-lock.json").read_bytes() + (JS_DIR / "package.json").read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def node_modules():
    """Installs the locked packages with `npm ci` unless node_modules matches the lock."""
    require("node", "npm")
    digest = _lock_digest()
    if STAMP.exists() and STAMP.read_text().strip() == digest and (JS_DIR / "node_modules" / "@jupyterlab" / "services").is_dir():
        return
    r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=JS_DIR,
                       env={**os.environ, **NO_DOWNLOADS}, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"npm ci failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    STAMP.write_text(digest + "\n")


@pytest.mark.parametrize("protocol", ["v1", "json"])
def test_jupyterlab_services(cellgate, node_modules, protocol):
    _run_suite(cellgate, protocol)


def test_jupyterlab_services_on_zygote_kernels(cellgate_zygote, node_modules):
    """The same suite against --zygote on: every kernel it starts or restarts
    must be forked (the suite checks each kernel's model), and behave as a
    cold one does for JupyterLab — plots, input(), interrupt, restart,
    terminals, the tight tenant's limits."""
    _run_suite(cellgate_zygote, "v1", {"CELLGATE_EXPECT_ZYGOTE": "1"})


def _run_suite(cellgate, protocol, extra_env=None):
    env = {**os.environ, **NO_DOWNLOADS, "CELLGATE_URL": cellgate.url, "CELLGATE_TOKEN": cellgate.token,
           "CELLGATE_WS_PROTOCOL": protocol, "NODE_NO_WARNINGS": "1",
           "CELLGATE_TIGHT_TOKEN": cellgate.tight_token, **(extra_env or {})}
    try:
        r = subprocess.run(node_test("services.test.mjs"), cwd=JS_DIR, env=env,
                           capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"node --test timed out\n{e.stdout or ''}\n{e.stderr or ''}\n--- gateway log ---\n{log_tail(cellgate)}")
    assert r.returncode == 0, (f"node --test services.test.mjs failed ({r.returncode}) with CELLGATE_WS_PROTOCOL={protocol}:\n"
                               f"{r.stdout}\n{r.stderr}\n--- gateway log (tail) ---\n{log_tail(cellgate)}")
    # The spec reporter lists every test: the limits suite must have run.
    assert "session limits through @jupyterlab/services" in r.stdout, r.stdout
    if protocol == "v1" and not extra_env:
        # The R and JavaScript kernels' tests run (not skipped) once, here.
        ran = [line for line in r.stdout.splitlines() if "the R kernel keeps" in line or "JavaScript kernel (Deno)" in line]
        assert len(ran) == 2 and not any("SKIP" in line for line in ran), r.stdout
    # Every kernel the suite started is gone again.
    for token in (cellgate.token, cellgate.tight_token):
        left = cellgate.api("GET", "/api/kernels", headers={"Authorization": f"token {token}"}).json()
        assert left == [], f"kernels left behind: {left}"
