"""Crash recovery: a gateway killed with SIGKILL and started again on the same
state takes back every live sandbox and session — kernel state, workspace
files and session ids intact — and reaps what expired or was forgotten while
it was down. Real gateway, real runc sandboxes, real ipykernels."""
import json
import signal
import sqlite3
import subprocess
import time

import pytest
import requests

from support.gateway import Gateway, KernelChannel
from support.prerequisites import BUILD, IMAGE_STORE


def api(g, method, path, **kw):
    return g.api(method, path, **kw)


def sandboxes_of(g):
    out = subprocess.run([str(BUILD / "bin" / "cellgate-launch"), "--state-dir", str(g.state_dir), "--image-store",
                          str(IMAGE_STORE), "--workspace-root", str(g.workspace_root), "ps", "--json"],
                         capture_output=True, text=True, check=True)
    return {s["id"]: s for s in json.loads(out.stdout)}


def run(g, sid, code):
    r = api(g, "POST", f"/v1/sessions/{sid}/execute", json={"code": code, "timeout_s": 60})
    assert r.status_code == 200, r.text
    return r.json()


@pytest.fixture
def gw():
    g = Gateway("--max-kernels", "8").start()
    yield g
    g.stop()
    g.cleanup()


def test_sigkill_loses_no_session_file_or_variable(gw):
    # Agent sessions with state and files, one of them in the middle of a cell.
    a = api(gw, "POST", "/v1/sessions", json={"idle_timeout_s": 600}).json()
    b = api(gw, "POST", "/v1/sessions").json()
    assert run(gw, a["id"], "secret = 6 * 7\nimport pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3]})")["status"] == "ok"
    payload = bytes(range(256)) * 1000
    assert api(gw, "PUT", f"/v1/sessions/{a['id']}/files/data/blob.bin", data=payload).status_code in (200, 201)
    assert run(gw, b["id"], "open('notes.txt', 'w').write('kept')")["status"] == "ok"
    # A Jupyter kernel and session (the /api surface), with a WebSocket client.
    k = gw.start_kernel()
    s = api(gw, "POST", "/api/sessions", json={"path": "nb.ipynb", "type": "notebook", "name": "nb.ipynb",
                                                 "kernel": {"id": k["id"]}})
    assert s.status_code == 201, s.text
    session_model = s.json()
    ch = KernelChannel(gw, k["id"], session_id="client-1")
    assert ch.execute("counter = 41")["reply"]["status"] == "ok"
    ch.close()
    busy = api(gw, "POST", "/v1/sessions").json()
    # A cell that is running when the gateway dies keeps running in its sandbox.
    started = threading_start(lambda: api(gw, "POST", f"/v1/sessions/{busy['id']}/execute",
                                           json={"code": "import time; time.sleep(4); flag = 'finished'",
                                                 "timeout_s": 60}))
    time.sleep(1.5)
    before = sandboxes_of(gw)
    pids_before = {i: v.get("pid") for i, v in before.items()}
    assert {a["id"], b["id"], k["id"], busy["id"]} <= set(before)

    gw.kill_and_restart()
    started.join(timeout=30)

    # The same sandboxes, the same processes: nothing was restarted.
    after = sandboxes_of(gw)
    assert set(after) == set(before)
    assert {i: v.get("pid") for i, v in after.items()} == pids_before
    # Sessions are listed with their ids; state, files and variables are intact.
    listed = {x["id"] for x in api(gw, "GET", "/v1/sessions").json()["sessions"]}
    assert {a["id"], b["id"], busy["id"]} <= listed
    assert a["id"] in {x["id"] for x in api(gw, "GET", "/api/kernels").json()}
    r = run(gw, a["id"], "print(secret, df.x.sum())")
    assert r["status"] == "ok" and r["stdout"] == "42 6\n", r
    assert api(gw, "GET", f"/v1/sessions/{a['id']}/files/data/blob.bin").content == payload
    assert run(gw, b["id"], "print(open('notes.txt').read())")["stdout"] == "kept\n"
    # The idle limit a session was created with is still its limit.
    assert api(gw, "GET", f"/v1/sessions/{a['id']}").json()["limits"]["idle_timeout_s"] == 600
    # The cell that was running finished in the sandbox.
    deadline = time.time() + 30
    while True:
        r = run(gw, busy["id"], "print(flag)")
        if r["status"] == "ok" or time.time() > deadline:
            break
        time.sleep(0.5)
    assert r["stdout"] == "finished\n", r
    # The Jupyter session is still bound to its kernel; a client reconnects with
    # its session id and carries on.
    sessions = api(gw, "GET", "/api/sessions").json()
    assert any(x["id"] == session_model["id"] and x["kernel"]["id"] == k["id"] for x in sessions), sessions
    ch = KernelChannel(gw, k["id"], session_id="client-1")
    r = ch.execute("print(counter + 1)")
    assert r["reply"]["status"] == "ok" and r["stdout"] == "42\n"
    ch.close()
    assert "took back 4 kernel(s)" in gw.log_text()
    # A session deleted after the restart goes for good, sandbox and all.
    assert api(gw, "DELETE", f"/v1/sessions/{b['id']}").status_code == 204
    assert b["id"] not in sandboxes_of(gw)


def process_ended(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def test_a_restart_reaps_what_expired_or_was_forgotten_and_restarts_dead_kernels(gw):
    short = api(gw, "POST", "/v1/sessions", json={"idle_timeout_s": 2}).json()
    forgotten = api(gw, "POST", "/v1/sessions").json()
    dies = api(gw, "POST", "/v1/sessions").json()
    kept = api(gw, "POST", "/v1/sessions").json()
    assert run(gw, dies["id"], "open('survivor.txt', 'w').write('files stay')")["status"] == "ok"
    assert run(gw, kept["id"], "x = 'still here'")["status"] == "ok"
    gw.proc.send_signal(signal.SIGKILL)
    gw.proc.wait(timeout=30)
    # While it is down: the idle limit passes, an operator removes a session
    # from the registry, and one kernel dies.
    time.sleep(3)
    db = sqlite3.connect(gw.state_dir / "gateway.db")
    with db:
        db.execute("DELETE FROM kernels WHERE id = ?", (forgotten["id"],))
    db.close()
    dying = sandboxes_of(gw)[dies["id"]]
    subprocess.run(["kill", "-9", str(dying["pid"])], check=True)
    # Dead before the gateway looks (SIGKILL is delivered, not yet acted on,
    # when kill returns): gone, or a zombie nobody reaped.
    deadline = time.time() + 30
    while time.time() < deadline and not process_ended(dying["pid"]):
        time.sleep(0.05)
    gw.log.close()
    gw.port_file.unlink()
    gw.start()

    left = sandboxes_of(gw)
    assert short["id"] not in left and forgotten["id"] not in left
    listed = {x["id"] for x in api(gw, "GET", "/v1/sessions").json()["sessions"]}
    assert short["id"] not in listed and forgotten["id"] not in listed
    assert api(gw, "GET", f"/v1/sessions/{short['id']}").status_code == 404
    assert run(gw, kept["id"], "print(x)")["stdout"] == "still here\n"
    # The dead one comes back as a fresh kernel in its old workspace.
    deadline = time.time() + 60
    while time.time() < deadline:
        r = api(gw, "POST", f"/v1/sessions/{dies['id']}/execute",
                json={"code": "print(open('survivor.txt').read())", "timeout_s": 30})
        if r.status_code == 200 and r.json()["status"] == "ok":
            break
        time.sleep(0.5)
    assert r.json()["stdout"] == "files stay\n", r.text
    assert "restarting it (files kept)" in gw.log_text()
    # Nothing of the reaped sessions is left on the host.
    mounts = open("/proc/self/mountinfo").read()
    for sid in (short["id"], forgotten["id"]):
        assert sid not in mounts


def test_graceful_shutdown_forgets_everything(gw):
    s = api(gw, "POST", "/v1/sessions").json()
    assert gw.stop() == 0
    db = sqlite3.connect(gw.state_dir / "gateway.db")
    assert db.execute("SELECT COUNT(*) FROM kernels").fetchone()[0] == 0
    db.close()
    gw.port_file.unlink()
    gw.start()
    assert api(gw, "GET", f"/v1/sessions/{s['id']}").status_code == 404
    assert sandboxes_of(gw) == {}


def threading_start(fn):
    import threading
    t = threading.Thread(target=lambda: _swallow(fn), daemon=True)
    t.start()
    return t


def _swallow(fn):
    try:
        fn()
    except requests.RequestException:
        pass  # the gateway it was talking to was killed
