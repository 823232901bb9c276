"""The MCP endpoint (/mcp) against the REAL cellgate (built binary, runc
sandboxes, the kernel image, ipykernel), driven by unmodified clients: the
official TypeScript SDK (`@modelcontextprotocol/sdk`, mcp.test.mjs) and the
MCP Inspector CLI (`@modelcontextprotocol/inspector-cli`), both pinned in
package-lock.json and installed with `npm ci`. Plus what needs a gateway of
its own: an MCP session and its kernel surviving a SIGKILL of the gateway.

Needs root, runc, build/bin/cellgate, the kernel image, Node.js ≥ 20 and npm.
Without them the tests are skipped, unless CELLGATE_REQUIRE_SANDBOX=1 (CI).
"""
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

from support.gateway import Gateway
from support.prerequisites import gateway_missing, node_missing, node_test, npm_ci, require

KEY_A = "mcp-tenant-a-" + uuid.uuid4().hex
KEY_B = "mcp-tenant-b-" + uuid.uuid4().hex
INSPECTOR = HERE / "node_modules" / "@modelcontextprotocol" / "inspector-cli" / "build"


def _require():
    require("MCP tests", gateway_missing() or node_missing("npm"))


@pytest.fixture(scope="module")
def node_modules():
    _require()
    npm_ci(HERE, "@modelcontextprotocol/sdk")


def _tenants_gateway(d, *extra):
    tokens = d / "tokens.json"
    tokens.write_text(json.dumps([{"token": KEY_A, "tenant": "mcp-alpha"}, {"token": KEY_B, "tenant": "mcp-beta"}]))
    return Gateway("--tokens-file", str(tokens), "--max-kernels", "16", *extra).start()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    _require()
    gw = _tenants_gateway(tmp_path_factory.mktemp("mcp"), "--pool-size", "1")
    try:
        yield gw
    finally:
        gw.stop()
        gw.cleanup()


def _sessions(gw, key=KEY_A):
    r = requests.get(f"{gw.url}/v1/sessions", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 200, r.text
    return [s["id"] for s in r.json()["sessions"]]


def _close_all(gw, key=KEY_A):
    for sid in _sessions(gw, key):
        requests.delete(f"{gw.url}/v1/sessions/{sid}", headers={"Authorization": f"Bearer {key}"}, timeout=60)


def test_official_typescript_sdk(gateway, node_modules):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CELLGATE_")}
    env.update({"CELLGATE_URL": gateway.url, "CELLGATE_TOKEN": KEY_A, "CELLGATE_OTHER_TOKEN": KEY_B,
                "NODE_NO_WARNINGS": "1"})
    try:
        r = subprocess.run(node_test("--test-concurrency=1", "mcp.test.mjs"),
                           cwd=HERE, env=env, capture_output=True, text=True, timeout=600)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"node --test timed out\n{e.stdout or ''}\n{e.stderr or ''}\n--- gateway log ---\n"
                    f"{gateway.log_text()[-6000:]}")
    print(r.stdout)
    assert r.returncode == 0, (f"mcp.test.mjs failed ({r.returncode}):\n{r.stdout}\n{r.stderr}\n"
                               f"--- gateway log (tail) ---\n{gateway.log_text()[-6000:]}")
    assert "ℹ fail 0" in r.stdout and "ℹ pass 0" not in r.stdout, r.stdout
    assert _sessions(gateway) == [], "the suite closed what it made"


def _inspector(gw, *args, key=KEY_A):
    # 1.0.3 finds its package.json relative to the working directory: run it from build/.
    r = subprocess.run(["node", "cli.js", "--cli", f"{gw.url}/mcp", "--transport", "http",
                        "--header", f"Authorization: Bearer {key}", *args],
                       cwd=INSPECTOR, capture_output=True, text=True, timeout=120,
                       env={**os.environ, "NODE_NO_WARNINGS": "1"})
    return r.returncode, r.stdout, r.stderr


def _json_after_banner(out):
    return json.loads(out[out.index("{"):])


def test_inspector_cli_lists_and_calls_the_tools(gateway, node_modules):
    rc, out, err = _inspector(gateway, "--method", "tools/list")
    assert rc == 0, (out, err, gateway.log_text()[-3000:])
    tools = _json_after_banner(out)["tools"]
    assert [t["name"] for t in tools] == ["execute_code", "create_session", "snapshot_session", "fork_session", "close_session", "list_sessions",
                                          "write_file", "read_file", "list_files"]
    assert all(t["inputSchema"]["type"] == "object" for t in tools)
    rc, out, err = _inspector(gateway, "--method", "tools/call", "--tool-name", "execute_code",
                              "--tool-arg", 'code="print(6 * 7)"')
    assert rc == 0, (out, err)
    text = _json_after_banner(out)["content"][0]["text"]
    assert "status: ok" in text and "\n42\n" in text, text
    rc, out, err = _inspector(gateway, "--method", "tools/list", key="wrong-token")
    assert rc != 0, "an unknown token is refused"
    _close_all(gateway)


def _rpc(gw, body, session=None, key=KEY_A, accept="application/json"):
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json", "Accept": accept}
    if session:
        headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"})
    return requests.post(f"{gw.url}/mcp", headers=headers, json=body, timeout=120)


def _init(gw):
    r = _rpc(gw, {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                  "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                             "clientInfo": {"name": "pytest", "version": "1"}}})
    assert r.status_code == 200, r.text
    return r.headers["Mcp-Session-Id"]


def _execute(gw, session, code, request_id, **args):
    r = _rpc(gw, {"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                  "params": {"name": "execute_code", "arguments": {"code": code, **args}}}, session)
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json"), r.text
    return r.json()["result"]


def test_json_only_client_gets_json_and_the_budget_applies(gateway):
    """A client that accepts only application/json gets execute_code as JSON;
    max_output_tokens cuts a flood to head, marker and tail."""
    session = _init(gateway)
    result = _execute(gateway, session, "for i in range(20000): print('line', i)", 2, max_output_tokens=500)
    text = result["content"][0]["text"]
    assert "line 0\n" in text and "line 19999" in text, text[:500]
    assert " bytes (" in text and "lines) elided" in text, text
    assert len(text.encode()) <= 500 * 4 + 400, len(text.encode())  # the budget, plus the status lines
    _close_all(gateway)


def test_mcp_session_and_its_kernel_survive_a_gateway_sigkill(tmp_path):
    _require()
    gw = _tenants_gateway(tmp_path)
    try:
        session = _init(gw)
        first = _execute(gw, session, "kept = 6 * 7", 2)
        assert not first.get("isError"), first
        sid = first["content"][0]["text"].split("session_id: ")[1].split()[0]
        gw.kill_and_restart()
        # The same Mcp-Session-Id works without a new initialize, and the kernel kept its variable.
        again = _execute(gw, session, "print(kept)", 3, session_id=sid)
        assert not again.get("isError"), again
        assert "\n42\n" in again["content"][0]["text"], again
        # Another tenant's token does not open the stored MCP session.
        r = _rpc(gw, {"jsonrpc": "2.0", "id": 4, "method": "ping"}, session, key=KEY_B)
        assert r.status_code == 404, r.text
        _close_all(gw)
    finally:
        gw.stop()
        gw.cleanup()
