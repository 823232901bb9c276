"""Runs the JavaScript client's tests (client.test.mjs, network.test.mjs, pause.test.mjs, fork.test.mjs and
volumes.test.mjs, Node's built-in test runner) against the REAL cellgate gateway: built binary,
runc sandboxes, the built kernel image. The network tests get a gateway
whose --egress-resolve map leads allowed.test and denied.test to a listener
on 127.0.0.1, and nowhere else.

The client under test is the one the gateway serves at /static/cellgate.js
(compiled into the binary), so this tests what ships; a separate check says
whether that copy still matches clients/js/ (a stale binary needs a rebuild).

Needs root, runc, build/bin/cellgate, the kernel image and Node.js ≥ 20.
Without them the tests are skipped, unless CELLGATE_REQUIRE_SANDBOX=1 (CI),
where they fail instead.

CELLGATE_WEB_STATIC_DIR=/path/to/clients (development only) makes the gateway
serve clients/web and clients/js from disk instead of its compiled-in copy.
"""
import os
import subprocess
from pathlib import Path

import pytest
import requests

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

from support.gateway import Gateway, HttpListener
from support.prerequisites import gateway_missing, node_missing, node_test, require

CLIENT_JS = REPO / "clients" / "js"


def _require():
    require("JS client tests", gateway_missing() or node_missing())


def _log_tail(gw, chars=6000):
    text = gw.log_text()
    return text[-chars:]


def _gateway(*args):
    static = os.environ.get("CELLGATE_WEB_STATIC_DIR")
    return Gateway(*(["--static-dir", static] if static else []), *args)


@pytest.fixture(scope="module")
def gateway():
    _require()
    gw = _gateway("--pool-size", "2")  # the default configuration's pool: sessions are claims
    try:
        gw.start()
        yield gw
    finally:
        gw.stop()
        gw.cleanup()


@pytest.fixture(scope="module")
def gateway_egress():
    """A gateway whose egress proxy leads allowed.test and denied.test to a
    listener on 127.0.0.1 (answering 'upstream <path>')."""
    _require()
    upstream = HttpListener()
    gw = _gateway(*upstream.resolve_args("allowed.test", "denied.test"))
    try:
        gw.start()
        yield gw
    finally:
        gw.stop()
        gw.cleanup()
        upstream.close()


def test_served_client_matches_the_source(gateway):
    """/static/cellgate.js and cellgate.d.ts are clients/js/ byte for byte
    (else the binary is stale: rebuild it)."""
    for name in ("cellgate.js", "cellgate.d.ts"):
        r = requests.get(f"{gateway.url}/static/{name}", timeout=30)
        assert r.status_code == 200, f"/static/{name}: {r.status_code} {r.text[:200]}"
        assert r.content == (CLIENT_JS / name).read_bytes(), \
            f"/static/{name} differs from clients/js/{name}: the gateway binary is stale, rebuild it"
    r = requests.get(f"{gateway.url}/static/cellgate.js", timeout=30)
    assert r.headers["Content-Type"].startswith("text/javascript")


def _run_node(gateway, test_file, tmp_path):
    # Import the client exactly as the gateway serves it.
    served = requests.get(f"{gateway.url}/static/cellgate.js", timeout=30)
    assert served.status_code == 200
    module = tmp_path / "cellgate.js"
    module.write_bytes(served.content)
    env = {**os.environ, "CELLGATE_URL": gateway.url, "CELLGATE_TOKEN": gateway.token,
           "CELLGATE_CLIENT_MODULE": str(module), "NODE_NO_WARNINGS": "1"}
    try:
        r = subprocess.run(node_test(test_file), cwd=HERE, env=env,
                           capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"node --test timed out\n{e.stdout or ''}\n{e.stderr or ''}\n--- gateway log ---\n{_log_tail(gateway)}")
    print(r.stdout)
    assert r.returncode == 0, (f"node --test {test_file} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}\n"
                               f"--- gateway log (tail) ---\n{_log_tail(gateway)}")
    assert "ℹ fail 0" in r.stdout and "ℹ pass 0" not in r.stdout, r.stdout
    # Every session the suite made is gone again.
    left = gateway.api("GET", "/v1/sessions").json()["sessions"]
    assert left == [], f"sessions left behind: {[s['id'] for s in left]}"


def test_js_client(gateway, tmp_path):
    _run_node(gateway, "client.test.mjs", tmp_path)


def test_js_client_network(gateway_egress, tmp_path):
    _run_node(gateway_egress, "network.test.mjs", tmp_path)


def test_js_client_pause(gateway, tmp_path):
    _run_node(gateway, "pause.test.mjs", tmp_path)


def test_js_client_fork(gateway, tmp_path):
    _run_node(gateway, "fork.test.mjs", tmp_path)


def test_js_client_volumes(gateway, tmp_path):
    _run_node(gateway, "volumes.test.mjs", tmp_path)


def test_js_client_templates(gateway, tmp_path):
    _run_node(gateway, "templates.test.mjs", tmp_path)
