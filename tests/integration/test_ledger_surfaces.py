"""The ledger holds every cell a session runs, whichever door it came through:
a /v1 execution, a cell a Jupyter client sent over the kernel WebSocket, and a
cell run in an E2B code context each get a record at
GET /v1/sessions/{id}/executions, with the same usage fields (code hash,
times, status, the sandbox cgroup's CPU time and memory peak, bytes) and a
"surface" tag. Real gateway, runc sandboxes, the kernel image."""
import hashlib
import json
import time

import pytest

from support.gateway import Gateway, KernelChannel
from support.prerequisites import gateway_missing, require

OUTPUT_LIMIT = 1024
EXEC_TIMEOUT = 2
MIB = 1 << 20


@pytest.fixture(scope="module", autouse=True)
def _prerequisites():
    require("ledger surface tests", gateway_missing())


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    config = tmp_path_factory.mktemp("ledger-surfaces") / "config.json"
    # Small limits for cells that come over the Jupyter WebSocket.
    config.write_text(json.dumps({"kernelspecs": {"python3": {"policy": {
        "jupyter": {"exec_timeout": EXEC_TIMEOUT, "output_limit": OUTPUT_LIMIT}}}}}))
    g = Gateway("--config", str(config), "--cell-interrupt-grace", "2").start()
    yield g
    g.stop()
    g.cleanup()


def sha256(code):
    return hashlib.sha256(code.encode()).hexdigest()


def ws_cell(ch, code, timeout=60):
    """Runs a cell over the WebSocket; returns its msg_id and reply once it is idle."""
    msg_id = ch.send("execute_request", {"code": code, "silent": False, "store_history": True,
                                         "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
    reply, idle = None, False
    ch.ws.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while (reply is None or not idle) and time.monotonic() < deadline:
        m = ch.recv()
        if "binary" in m or m.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        if m["channel"] == "shell" and m["header"]["msg_type"] == "execute_reply":
            reply = m["content"]
        elif m["header"]["msg_type"] == "status":
            idle = m["content"]["execution_state"] == "idle"
    assert reply is not None and idle, f"the cell did not finish within {timeout} s"
    return msg_id, reply


def executions(g, session, count, surface=None, timeout=20):
    """The session's records (of one surface), once there are `count` of them:
    a WebSocket cell's record is written just after its idle."""
    deadline = time.monotonic() + timeout
    while True:
        r = g.api("GET", f"/v1/sessions/{session}/executions")
        assert r.status_code == 200, r.text
        records = [e for e in r.json()["executions"] if surface is None or e["surface"] == surface]
        if len(records) >= count or time.monotonic() > deadline:
            return records
        time.sleep(0.2)


def test_a_sessions_v1_and_websocket_cells_are_in_its_ledger_in_order(gw):
    k = gw.start_kernel()
    ch = KernelChannel(gw, k["id"])
    try:
        v1_code = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\nprint('v1')"
        r = gw.api("POST", f"/v1/sessions/{k['id']}/execute", json={"code": v1_code, "timeout_s": 60})
        assert r.status_code == 200, r.text
        v1 = r.json()
        assert v1["status"] == "ok", v1

        # Past its output limit; then CPU and memory the record must show.
        flood_code = (f"print('x' * {4 * OUTPUT_LIMIT})\n"
                      "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
                      "b = b'y' * (96 << 20)\ndel b")
        flood_id, flood_reply = ws_cell(ch, flood_code)
        assert flood_reply["status"] == "ok", flood_reply
        # Past its time limit: interrupted by the gateway.
        slow_code = "import time\ntime.sleep(60)"
        slow_id, slow_reply = ws_cell(ch, slow_code)
        assert slow_reply["status"] == "error" and slow_reply["ename"] == "KeyboardInterrupt", slow_reply

        records = executions(gw, k["id"], 3)
        assert [e["surface"] for e in records] == ["v1", "jupyter", "jupyter"], records
        assert [e["seq"] for e in records] == [1, 2, 3]
        first, flood, slow = records
        assert first["execution_id"] == v1["execution_id"] and first["code_sha256"] == sha256(v1_code)
        for e in records:
            assert e["session_id"] == k["id"]
            assert e["started_at"] <= e["ended_at"]
        assert first["ended_at"] <= flood["started_at"] and flood["ended_at"] <= slow["started_at"], records

        assert flood["msg_id"] == flood_id and flood["code_sha256"] == sha256(flood_code)
        assert flood["code_bytes"] == len(flood_code)
        assert flood["status"] == "ok"
        assert flood["output_truncated"] is True
        assert flood["stdout_bytes"] == 4 * OUTPUT_LIMIT + 1  # all it printed, the withheld part included
        assert flood["files"] == {"created": [], "modified": [], "deleted": []} and flood["files_complete"] is False
        assert flood["cpu_s"] is not None and 0.4 <= flood["cpu_s"] <= 3, flood
        if first["peak_memory_bytes"] is not None:  # the cgroup can reset its peak here: so for this cell too
            assert flood["peak_memory_increase_bytes"] >= 80 * MIB, flood
            assert flood["peak_memory_bytes"] >= flood["peak_memory_increase_bytes"]

        assert slow["msg_id"] == slow_id and slow["code_sha256"] == sha256(slow_code)
        assert slow["status"] == "timeout", slow
        assert slow["error_name"] == "KeyboardInterrupt"
        assert slow["wall_ms"] >= EXEC_TIMEOUT * 1000 and slow["kernel_restarted"] is False
        assert slow["cpu_s"] is not None and slow["cpu_s"] < 1, slow

        metrics = gw.api("GET", "/metrics").text
        assert 'cellgate_ledger_executions_total{status="timeout"} 1' in metrics, metrics[-2000:]
    finally:
        ch.close()
        gw.api("DELETE", f"/api/kernels/{k['id']}")


def test_an_e2b_context_cell_is_in_its_sandboxs_ledger(gw):
    r = gw.e2b("POST", "/sandboxes", json={"templateID": "base", "timeout": 120})
    assert r.status_code == 201, r.text
    sb = r.json()
    try:
        r = gw.e2b("POST", "/contexts", sb, json={})
        assert r.status_code == 200, r.text
        ctx = r.json()["id"]
        code = "print('from a context')\n1/0"
        r = gw.e2b("POST", "/execute", sb, json={"code": code, "context_id": ctx})
        assert r.status_code == 200, r.text
        lines = [json.loads(line) for line in r.text.splitlines() if line.strip()]
        assert any(line["type"] == "error" for line in lines), lines

        # And one in the default context: the session's kernel, through the core's cell engine.
        r = gw.e2b("POST", "/execute", sb, json={"code": "print(6 * 7)"})
        assert r.status_code == 200 and '"42\\n"' in r.text, r.text

        records = executions(gw, sb["sandboxID"], 2, surface="e2b")
        assert len(records) == 2, records
        e, default = records
        assert "context_id" not in default and default["status"] == "ok", default
        assert default["code_sha256"] == sha256("print(6 * 7)") and default["stdout_bytes"] == 3, default
        assert e["context_id"] == ctx and e["session_id"] == sb["sandboxID"]
        assert e["code_sha256"] == sha256(code) and e["code_bytes"] == len(code)
        assert e["status"] == "error" and e["error_name"] == "ZeroDivisionError", e
        assert e["stdout_bytes"] == len("from a context\n")
        assert e["cpu_s"] is not None and e["wall_ms"] >= 0, e
    finally:
        assert gw.e2b("DELETE", f"/sandboxes/{sb['sandboxID']}").status_code == 204
