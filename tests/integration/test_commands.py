"""Commands inside a session's sandbox (/v1/sessions/{id}/commands and the
Python SDK's sb.commands), under each OCI runtime: they run, stream, take
stdin and signals — and get exactly the kernel's confinement: the kernel's
uid without capabilities, no network, no view of the host, the session's
limits, and no life beyond the sandbox.

Needs root, runc (and runsc for its half), build/bin/cellgate and the kernel
image; skipped without them unless CELLGATE_REQUIRE_SANDBOX=1.
"""
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import requests

from gateway import Gateway
from test_hostile import LIMITS, RUNTIMES, _require

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python"))
import cellgate  # noqa: E402

SECRET = "cellgate-commands-secret-" + uuid.uuid4().hex
TOKEN = "cellgate-commands-token-" + uuid.uuid4().hex


@pytest.fixture(scope="module", params=RUNTIMES)
def gw(request, tmp_path_factory):
    runtime = request.param
    _require(runtime)
    d = tmp_path_factory.mktemp(f"commands-{runtime}")
    config = d / "config.json"
    config.write_text(json.dumps({"kernelspecs": {"python3": {"runtime": runtime, "limits": LIMITS}}}))
    env = dict(os.environ, CELLGATE_COMMANDS_SECRET=SECRET, AWS_SECRET_ACCESS_KEY=SECRET)
    g = Gateway("--config", str(config), "--max-kernels", "8", token=TOKEN, env=env)
    g.runtime = runtime
    g.start()
    try:
        yield g
    finally:
        g.stop()
        g.cleanup()


@pytest.fixture
def session(gw):
    r = gw.api("POST", "/v1/sessions", json={"timeout_s": 120})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    yield sid
    gw.api("DELETE", f"/v1/sessions/{sid}")


def cmd(gw, sid, timeout=120, **body):
    r = gw.api("POST", f"/v1/sessions/{sid}/commands", json=body, timeout=timeout)
    assert r.status_code in (200, 201), r.text
    return r.json()


def sse(resp):
    event = None
    for raw in resp.iter_lines(decode_unicode=True):
        if raw.startswith("event: "):
            event = raw[7:]
        elif raw.startswith("data: "):
            yield event, json.loads(raw[6:])


def test_run_wait_exit_codes_cwd_env_and_stdin(gw, session):
    r = cmd(gw, session, cmd="echo hi; echo err >&2")
    assert (r["stdout"], r["stderr"], r["exit"]["exit_code"]) == ("hi\n", "err\n", 0)
    r = cmd(gw, session, cmd="exit 5")
    assert r["exit"]["exit_code"] == 5 and r["exit"]["signal"] is None
    r = cmd(gw, session, argv=["/bin/sh", "-c", 'mkdir -p sub && cd sub && pwd && echo "$A"'], env={"A": "a b"})
    assert r["stdout"] == "/home/user/sub\na b\n", r
    r = cmd(gw, session, cmd="pwd", cwd="sub")
    assert r["stdout"] == "/home/user/sub\n"
    # A missing program is the command's failure, not the gateway's.
    r = gw.api("POST", f"/v1/sessions/{session}/commands", json={"argv": ["/no/such/program"]})
    assert r.status_code in (200, 400, 500), r.text
    if r.status_code == 200:
        assert r.json()["exit"]["exit_code"] != 0
    # stdin, fed and closed
    h = cmd(gw, session, cmd="tr a-z A-Z", background=True, stdin=True)
    assert gw.api("POST", f"/v1/sessions/{session}/commands/{h['pid']}/stdin", json={"data": "shout", "eof": True}).status_code == 204
    with gw.api("GET", f"/v1/sessions/{session}/commands/{h['pid']}/events", stream=True, timeout=60) as resp:
        events = list(sse(resp))
    assert [e for e, _ in events][0] == "start"
    assert "".join(d["text"] for e, d in events if e == "stdout") == "SHOUT"
    assert events[-1] == ("exit", {"exit_code": 0, "signal": None})


def test_stream_signal_list_and_bad_requests(gw, session):
    with gw.api("POST", f"/v1/sessions/{session}/commands", json={"cmd": "for i in 1 2 3; do echo $i; sleep 0.2; done"},
                headers={"Accept": "text/event-stream"}, stream=True, timeout=60) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events = list(sse(resp))
    outs = [d["text"] for e, d in events if e == "stdout"]
    assert "".join(outs) == "1\n2\n3\n" and len(outs) >= 2, events
    h = cmd(gw, session, cmd="sleep 300", background=True)
    listed = gw.api("GET", f"/v1/sessions/{session}/commands").json()["commands"]
    assert any(c["pid"] == h["pid"] and c["running"] for c in listed), listed
    r = gw.api("POST", f"/v1/sessions/{session}/commands/{h['pid']}/signal", json={"signal": "SIGSTOP"})
    assert r.status_code == 400, "only the closed set of signals"
    assert gw.api("POST", f"/v1/sessions/{session}/commands/{h['pid']}/signal", json={"signal": "SIGTERM"}).status_code == 204
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        c = gw.api("GET", f"/v1/sessions/{session}/commands/{h['pid']}").json()
        if not c["running"]:
            break
        time.sleep(0.1)
    assert c["exit"]["signal"] == "SIGTERM", c
    for body, status in (({}, 400), ({"cmd": "x", "argv": ["x"]}, 400), ({"argv": []}, 400),
                         ({"cmd": "true", "cwd": "../etc"}, 400), ({"cmd": "true", "env": {"A=B": "c"}}, 400)):
        r = gw.api("POST", f"/v1/sessions/{session}/commands", json=body)
        assert r.status_code == status, (body, r.status_code, r.text)
        assert "message" in r.json()
    assert gw.api("GET", f"/v1/sessions/{session}/commands/999999").status_code == 404
    assert gw.api("POST", f"/v1/sessions/nope/commands", json={"cmd": "true"}).status_code == 404


def test_a_command_gets_the_kernels_confinement(gw, session):
    # A listener on one of this machine's own addresses: the command must not reach it.
    host_ip = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
    host_ip = next((a for a in host_ip if ":" not in a), "127.0.0.1")
    lsock = socket.socket()
    lsock.bind((host_ip, 0))
    lsock.listen(4)
    lsock.settimeout(0.5)
    port = lsock.getsockname()[1]
    try:
        probe = (
            "id -u; id -g; grep -E '^Cap(Eff|Prm|Bnd)' /proc/self/status | awk '{print $2}' | sort -u;"
            "grep -c : /proc/net/dev; "
            f"(exec 3<>/dev/tcp/{host_ip}/{port}) 2>/dev/null && echo CONNECTED || echo refused;"
            "ls /proc | grep -c '^[0-9]'; env; cat /proc/self/status | grep NoNewPrivs")
        r = cmd(gw, session, cmd=probe)
        try:
            lsock.accept()
            arrived = True
        except OSError:
            arrived = False
    finally:
        lsock.close()
    lines = r["stdout"].splitlines()
    assert lines[0] == "1000" and lines[1] == "1000", lines
    assert lines[2] == "0000000000000000", f"capabilities: {lines}"
    assert lines[3] == "1", f"interfaces in /proc/net/dev: {lines[3]} (only lo expected)"
    assert "refused" in lines and "CONNECTED" not in lines and not arrived
    assert SECRET not in r["stdout"] and TOKEN not in r["stdout"], "the gateway's environment leaked"
    if gw.runtime == "runc":  # gVisor's /proc/self/status has no NoNewPrivs line
        assert "NoNewPrivs:\t1" in r["stdout"]
    nprocs = int(lines[lines.index("refused") + 1])
    assert nprocs <= 12, f"{nprocs} processes visible: the command sees more than its sandbox"


def test_limits_apply_and_commands_end_with_their_sandbox(gw):
    r = gw.api("POST", "/v1/sessions", json={"timeout_s": 120})
    sid = r.json()["id"]
    try:
        # pids: a fork loop stops at the sandbox's limit (64), as the kernel's would
        r = cmd(gw, sid, cmd="for i in $(seq 1 200); do sleep 30 & done 2>&1 | grep -c -i 'resource\\|fork' ; "
                             "jobs -p | wc -l; kill $(jobs -p) 2>/dev/null; true", timeout=180)
        running = int(r["stdout"].split()[-1])
        assert running < 64, f"{running} background processes: the pids limit did not hold"
        # memory: the command counts against the sandbox's 512 MiB
        r = cmd(gw, sid, argv=["python3", "-c", "b = bytearray(900 << 20); print('allocated')"], timeout=180)
        assert "allocated" not in r["stdout"], "900 MiB fitted in a 512 MiB sandbox"
        assert r["exit"]["exit_code"] != 0
        # Under gVisor the OOM kill can take the whole sandbox (the session
        # restarts it); wait until it serves again.
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and gw.api("GET", f"/v1/sessions/{sid}").json().get("state") != "idle":
            time.sleep(0.3)
        marker = uuid.uuid4().hex[:12]
        deadline = time.monotonic() + 90
        while True:  # 409 while the session's sandbox is replaced: it says so, and serves again after
            r = gw.api("POST", f"/v1/sessions/{sid}/commands", json={"cmd": f"sleep 1000 # {marker}", "background": True})
            if r.status_code != 409 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert r.status_code == 201, r.text
    finally:
        assert gw.api("DELETE", f"/v1/sessions/{sid}").status_code == 204
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()
        if not left:
            break
        time.sleep(0.2)
    assert not left, f"a command outlived its sandbox: pids {left}"


def test_python_sdk_commands(gw):
    with cellgate.Sandbox(gw.url, TOKEN) as sb:
        assert sb.commands.run("echo sdk").stdout == "sdk\n"
        with pytest.raises(cellgate.CommandExitError) as e:
            sb.commands.run("echo no >&2; exit 2")
        assert e.value.exit_code == 2 and e.value.stderr == "no\n"
        seen = []
        sb.commands.run(["sh", "-c", "echo a; echo b"], on_stdout=seen.append)
        assert "".join(seen) == "a\nb\n"
        h = sb.commands.run("cat", background=True, stdin=True)
        h.send_stdin("x\n", eof=True)
        assert h.wait().stdout == "x\n"
        h = sb.commands.run("sleep 100", background=True)
        assert h.kill() is True
        with pytest.raises(cellgate.CommandExitError):
            h.wait()
        assert any(c["pid"] == h.pid for c in sb.commands.list())
