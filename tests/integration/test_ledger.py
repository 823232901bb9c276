"""The ledger: every execution's record (id, code hash, times, status, the
sandbox cgroup's CPU time and memory peak during the cell, bytes, files),
on the execute result as "usage", at GET /v1/sessions/{id}/executions (paged)
and /executions/{execution_id}, in /metrics, and kept across a gateway
SIGKILL and restart. Real gateway, runc sandboxes, the kernel image."""
import hashlib

import pytest
import requests

from support.gateway import Gateway

MIB = 1 << 20


def api(g, method, path, **kw):
    return requests.request(method, g.url + path, headers=g.headers, timeout=180, **kw)


def run(g, sid, code):
    r = api(g, "POST", f"/v1/sessions/{sid}/execute", json={"code": code, "timeout_s": 120})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def gw():
    g = Gateway("--max-kernels", "4").start()
    yield g
    g.stop()
    g.cleanup()


def test_a_300_mb_cell_shows_its_peak_and_a_busy_cell_its_cpu(gw):
    sid = api(gw, "POST", "/v1/sessions", json={}).json()["id"]
    assert run(gw, sid, "import numpy as np")["status"] == "ok"
    big = run(gw, sid, "a = np.ones(300 * 1024 * 1024 // 8)\na[::512] += 1\ndel a")
    u = big["usage"]
    assert big["execution_id"] == u["execution_id"] and u["session_id"] == sid and u["status"] == "ok"
    assert u["peak_memory_bytes"] >= u["peak_memory_increase_bytes"]
    rise = u["peak_memory_increase_bytes"]
    assert abs(rise - 300 * MIB) <= 30 * MIB, f"peak rose {rise / MIB:.1f} MiB for a 300 MiB array"
    # The peak was reset at the next cell's start: a small cell shows a small rise.
    small = run(gw, sid, "b = list(range(10))")["usage"]
    assert small["peak_memory_increase_bytes"] < 20 * MIB, small

    busy = run(gw, sid, "import time\nt = time.process_time()\nwhile time.process_time() - t < 2: pass")["usage"]
    assert 1.8 <= busy["cpu_s"] <= 2.5, busy
    idle = run(gw, sid, "import time\ntime.sleep(1)")["usage"]
    assert idle["cpu_s"] < 0.5 and idle["wall_ms"] >= 1000, idle


def test_files_bytes_hash_and_paging(gw):
    sid = api(gw, "POST", "/v1/sessions", json={}).json()["id"]
    code = "open('one.txt', 'w').write('x' * 10)\nopen('two.csv', 'w').write('y' * 2000)\nprint('hello')"
    u = run(gw, sid, code)["usage"]
    assert u["code_sha256"] == hashlib.sha256(code.encode()).hexdigest()
    assert sorted((f["path"], f["size"]) for f in u["files"]["created"]) == [("one.txt", 10), ("two.csv", 2000)]
    assert u["stdout_bytes"] == len("hello\n") and u["stderr_bytes"] == 0
    later = run(gw, sid, "import os\nos.remove('one.txt')\nopen('two.csv', 'a').write('z')\n1/0")["usage"]
    assert later["status"] == "error"
    assert later["files"]["deleted"] == [{"path": "one.txt", "size": 10}]
    assert later["files"]["modified"] == [{"path": "two.csv", "size": 2001}]
    for i in range(3):
        run(gw, sid, f"n = {i}")

    page = api(gw, "GET", f"/v1/sessions/{sid}/executions?limit=2").json()
    assert [e["seq"] for e in page["executions"]] == [1, 2] and page["next_after"] == 2
    assert page["executions"][0]["execution_id"] == u["execution_id"]
    rest = api(gw, "GET", f"/v1/sessions/{sid}/executions?after=2&limit=10").json()
    assert [e["seq"] for e in rest["executions"]] == [3, 4, 5] and rest["next_after"] is None
    one = api(gw, "GET", f"/v1/sessions/{sid}/executions/{later['execution_id']}")
    assert one.status_code == 200 and one.json()["status"] == "error"
    assert api(gw, "GET", f"/v1/sessions/{sid}/executions/nope").status_code == 404
    bad = api(gw, "GET", f"/v1/sessions/{sid}/executions?limit=abc")
    assert bad.status_code == 400 and "limit" in bad.json()["message"]
    assert api(gw, "GET", f"/v1/sessions/{sid}/executions?limit=0").status_code == 400

    metrics = api(gw, "GET", "/metrics").text
    assert 'cellgate_ledger_executions_total{status="ok"} 4' in metrics, metrics[-2000:]
    assert 'cellgate_ledger_executions_total{status="error"} 1' in metrics


def test_records_survive_a_gateway_sigkill(gw):
    sid = api(gw, "POST", "/v1/sessions", json={"idle_timeout_s": 600}).json()["id"]
    first = run(gw, sid, "kept = 1")["usage"]
    gw.kill_and_restart()
    second = run(gw, sid, "kept + 1")["usage"]
    listed = api(gw, "GET", f"/v1/sessions/{sid}/executions").json()["executions"]
    assert [e["execution_id"] for e in listed] == [first["execution_id"], second["execution_id"]]
    assert [e["seq"] for e in listed] == [1, 2]
    # The records go with their session.
    assert api(gw, "DELETE", f"/v1/sessions/{sid}").status_code == 204
    assert api(gw, "GET", f"/v1/sessions/{sid}/executions").status_code == 404
