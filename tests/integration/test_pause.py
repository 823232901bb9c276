"""Pause and resume (issue 15): a paused session gives back its sandbox's CPU
and memory and keeps its id and files, and under gVisor its kernel's memory
(runsc checkpoint/restore); under runc only its files (CRIU does not work on
this host's kernel), which the session model says. Real gateway, real runc
and runsc sandboxes, the kernel image."""
import json
import subprocess
import time

import pytest

from support.gateway import runtime_gateway
from support.prerequisites import BUILD, IMAGE_STORE

RUNTIMES = ["runc", "runsc"]

STATE = """
import numpy as np, pandas as pd
arr = np.arange(1_000_000, dtype=np.int64)
df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]})
def triple(v):
    return 3 * v
counter = 0
open("/workspace/kept.txt", "w").write("files stay")
"""
CHECK = "print(int(arr.sum()), df['b'].str.cat(), triple(14), counter)"
EXPECTED = f"{sum(range(1_000_000))} xyz 42"


@pytest.fixture(scope="module", params=RUNTIMES)
def gw(request, tmp_path_factory):
    for g in runtime_gateway(request, tmp_path_factory, "pause", "--max-kernels", "8"):
        g.memory = g.runtime == "runsc"  # what the runtime's pause keeps
        yield g


def new_session(gw, **body):
    r = gw.api("POST", "/v1/sessions", json={"timeout_s": 120, **body})
    assert r.status_code == 201, r.text
    return r.json()


def run(gw, sid, code, ok=True):
    r = gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": code}, timeout=180)
    assert r.status_code == 200, r.text
    out = r.json()
    if ok:
        assert out["status"] == "ok", out
    return out


def pause(gw, sid):
    r = gw.api("POST", f"/v1/sessions/{sid}/pause", timeout=180)
    assert r.status_code == 200, r.text
    m = r.json()
    assert m["state"] == "paused", m
    assert m["pause"]["paused"] is True
    assert m["pause"]["mode"] == ("memory" if gw.memory else "files"), m["pause"]
    return m


def resume(gw, sid):
    r = gw.api("POST", f"/v1/sessions/{sid}/resume", timeout=180)
    assert r.status_code == 200, r.text
    m = r.json()
    assert m["pause"]["paused"] is False, m
    assert m["pause"]["resumed_from"] == ("memory" if gw.memory else "files"), m["pause"]
    return m


def launcher_ps(gw):
    out = subprocess.run([str(BUILD / "bin" / "cellgate-launch"), "--state-dir", str(gw.state_dir),
                          "--image-store", str(IMAGE_STORE), "--workspace-root", str(gw.workspace_root),
                          *gw.node_args, "ps", "--json"], capture_output=True, text=True, check=True)
    return {s["id"]: s for s in json.loads(out.stdout or "[]")}


def test_pause_gives_back_the_sandbox_and_resume_brings_back_state(gw):
    s = new_session(gw)
    sid = s["id"]
    try:
        run(gw, sid, STATE)
        assert launcher_ps(gw)[sid]["state"] == "running"
        m = pause(gw, sid)
        # No sandbox running while paused: no process, no cgroup memory.
        paused = launcher_ps(gw).get(sid, {})
        assert paused.get("state") != "running" and not paused.get("pids") and not paused.get("memory_bytes"), paused
        if gw.memory:
            assert m["pause"]["image_bytes"] > 1 << 20, m["pause"]
            assert (gw.state_dir / "paused" / sid / "image").is_dir()
        # Its files are still there, and still readable while it is paused.
        r = gw.api("GET", f"/v1/sessions/{sid}/files/kept.txt")
        assert r.status_code == 200 and r.text == "files stay", (r.status_code, r.text)
        assert gw.api("GET", f"/v1/sessions/{sid}").json()["state"] == "paused"
        resume(gw, sid)
        assert launcher_ps(gw)[sid]["state"] == "running"
        out = run(gw, sid, "print(open('/workspace/kept.txt').read())")
        assert out["stdout"].strip() == "files stay"
        if gw.memory:
            # The same kernel: its variables, imports and functions.
            out = run(gw, sid, CHECK)
            assert out["stdout"].strip() == EXPECTED + " 0", out
        else:
            # A new kernel on the kept files, and the model said so.
            out = run(gw, sid, "print('arr' in dir())")
            assert out["stdout"].strip() == "False", out
    finally:
        gw.api("DELETE", f"/v1/sessions/{sid}")


# Enough cycles that a leak or a drift between them shows (each cycle under
# runsc is a checkpoint and a restore, ~4.5 s).
CYCLES = 5


def test_repeated_pause_resume_cycles_lose_nothing(gw):
    s = new_session(gw)
    sid = s["id"]
    try:
        run(gw, sid, STATE)
        for i in range(1, CYCLES + 1):
            pause(gw, sid)
            resume(gw, sid)
            if gw.memory:
                run(gw, sid, "counter += 1")
            run(gw, sid, f"open('/workspace/cycles.txt', 'a').write('{i}\\n')")
        out = run(gw, sid, "print(open('/workspace/cycles.txt').read().split())")
        assert out["stdout"].strip() == str([str(i) for i in range(1, CYCLES + 1)])
        if gw.memory:
            out = run(gw, sid, CHECK)
            assert out["stdout"].strip() == f"{EXPECTED} {CYCLES}", out
        assert gw.api("GET", f"/v1/sessions/{sid}").json()["pause"]["pauses"] == CYCLES
    finally:
        gw.api("DELETE", f"/v1/sessions/{sid}")


def test_idle_session_pauses_and_the_next_execute_resumes_it(gw):
    s = new_session(gw, idle_timeout_s=2, lifecycle={"on_idle": "pause"})
    sid = s["id"]
    assert s["lifecycle"] == {"on_idle": "pause", "auto_resume": True}
    try:
        run(gw, sid, "x = 41")
        deadline = time.monotonic() + 60
        state = None
        while time.monotonic() < deadline:
            state = gw.api("GET", f"/v1/sessions/{sid}").json()["state"]
            if state == "paused":
                break
            time.sleep(0.5)
        assert state == "paused", "the idle session was not paused"
        # Not culled: it stays listed, paused, past its idle limit.
        time.sleep(4)
        assert gw.api("GET", f"/v1/sessions/{sid}").json()["state"] == "paused"
        # The next cell resumes it and runs.
        out = run(gw, sid, "print(x + 1 if 'x' in dir() else 'fresh')")
        assert out["stdout"].strip() == ("42" if gw.memory else "fresh"), out
        m = gw.api("GET", f"/v1/sessions/{sid}").json()
        assert m["pause"]["resumed_from"] == ("memory" if gw.memory else "files")
    finally:
        gw.api("DELETE", f"/v1/sessions/{sid}")


@pytest.mark.gateway_logic
def test_a_session_paused_without_auto_resume_says_so(gw):
    s = new_session(gw, lifecycle={"auto_resume": False})
    sid = s["id"]
    try:
        pause(gw, sid)
        r = gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "1+1"})
        assert r.status_code == 409 and "paused" in r.json()["message"], r.text
        resume(gw, sid)
        assert run(gw, sid, "print(1+1)")["stdout"].strip() == "2"
    finally:
        gw.api("DELETE", f"/v1/sessions/{sid}")


def test_a_paused_session_survives_a_gateway_sigkill(gw):
    s = new_session(gw)
    sid = s["id"]
    try:
        run(gw, sid, STATE)
        pause(gw, sid)
        gw.kill_and_restart()
        m = gw.api("GET", f"/v1/sessions/{sid}").json()
        assert m["state"] == "paused" and m["pause"]["mode"] == ("memory" if gw.memory else "files"), m
        # Its files come back with the resume; until then they are not served.
        r = gw.api("GET", f"/v1/sessions/{sid}/files/kept.txt")
        assert r.status_code == 409 and "paused" in r.json()["message"], r.text
        resume(gw, sid)
        out = run(gw, sid, "print(open('/workspace/kept.txt').read())")
        assert out["stdout"].strip() == "files stay"
        if gw.memory:
            assert run(gw, sid, CHECK)["stdout"].strip() == EXPECTED + " 0"
    finally:
        gw.api("DELETE", f"/v1/sessions/{sid}")


@pytest.mark.gateway_logic
def test_pause_and_resume_refuse_bad_requests_clearly(gw):
    s = new_session(gw)
    sid = s["id"]
    pause(gw, sid)
    assert gw.api("POST", f"/v1/sessions/{sid}/pause").status_code == 200  # already paused: a no-op
    assert gw.api("DELETE", f"/v1/sessions/{sid}").status_code == 204
    for action in ("resume", "pause"):
        r = gw.api("POST", f"/v1/sessions/{sid}/{action}")
        assert r.status_code == 404 and r.json()["message"], r.text
    # What the pause kept went with the session.
    assert not (gw.state_dir / "paused" / sid).exists()
    r = gw.api("POST", "/v1/sessions", json={"lifecycle": {"on_idle": "hibernate"}})
    assert r.status_code == 400 and "on_idle" in r.json()["message"], r.text
    r = gw.api("POST", "/v1/sessions", json={"lifecycle": {"when": 1}})
    assert r.status_code == 400 and "when" in r.json()["message"], r.text


def test_a_corrupt_checkpoint_fails_only_its_own_session(gw):
    if not gw.memory:
        # runc keeps no memory image (nothing to corrupt): its pause writes none.
        sid = new_session(gw)["id"]
        try:
            m = pause(gw, sid)
            assert m["pause"]["image_bytes"] == 0, m
            assert not (gw.state_dir / "paused" / sid / "image").exists()
        finally:
            gw.api("DELETE", f"/v1/sessions/{sid}")
        return
    bystander = new_session(gw)["id"]
    sid = new_session(gw)["id"]
    try:
        run(gw, bystander, "y = 7")
        run(gw, sid, STATE)
        pause(gw, sid)
        images = [p for p in (gw.state_dir / "paused" / sid / "image").rglob("*") if p.is_file()]
        assert images
        for p in images:
            p.write_bytes(b"\0not a checkpoint" * 64)
        r = gw.api("POST", f"/v1/sessions/{sid}/resume", timeout=180)
        assert r.status_code >= 500 and "could not be resumed" in r.json()["message"], r.text
        m = gw.api("GET", f"/v1/sessions/{sid}").json()
        assert m["state"] == "dead" and "could not be resumed" in m["pause"]["resume_failed"], m
        # The other session never noticed; the gateway still serves.
        assert run(gw, bystander, "print(y * 6)")["stdout"].strip() == "42"
        # A restart gives the failed session a new kernel on its files.
        r = gw.api("POST", f"/v1/sessions/{sid}/restart", timeout=180)
        assert r.status_code == 200, r.text
        assert run(gw, sid, "print(open('/workspace/kept.txt').read())")["stdout"].strip() == "files stay"
    finally:
        gw.api("DELETE", f"/v1/sessions/{sid}")
        gw.api("DELETE", f"/v1/sessions/{bystander}")
