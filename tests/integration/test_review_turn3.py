"""The third security review's findings (../shared/research/security-review-turn3.md),
one test each, named after the finding, black box against the real gateway
and a real runc sandbox. Each attack prints the gateway's peak memory
(VmHWM, reset before it), RSS, fds and another tenant's `1+1` latency before,
at the peak and after, so the closing note's table comes from
`pytest -s tests/integration/test_review_turn3.py`.

Needs root, runc, build/bin/cellgate and the kernel image; skipped without
them unless CELLGATE_REQUIRE_SANDBOX=1.
"""
import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest
import websocket

from support.confinement import LIMITS
from support.gateway import Gateway
from support.prerequisites import require, runtime_missing

MiB = 1 << 20
TOKEN_A = "review3-a-" + uuid.uuid4().hex
TOKEN_B = "review3-b-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    require("review turn 3 findings", runtime_missing("runc"))
    d = tmp_path_factory.mktemp("review3")
    tokens = d / "tokens.json"
    tokens.write_text(json.dumps([{"token": TOKEN_A, "tenant": "alpha"}, {"token": TOKEN_B, "tenant": "beta"}]))
    config = d / "config.json"
    config.write_text(json.dumps({"kernelspecs": {"python3": {"runtime": "runc", "limits": LIMITS}}}))
    g = Gateway("--tokens-file", str(tokens), "--config", str(config), "--max-kernels", "8", token=TOKEN_A)
    g.start()
    try:
        yield g
    finally:
        g.stop()
        g.cleanup()


def call(gw, method, path, token=TOKEN_A, **kw):
    headers = {"Authorization": f"token {token}", **kw.pop("headers", {})}
    import requests
    return requests.request(method, gw.url + path, headers=headers, timeout=kw.pop("timeout", 180), **kw)


def status(pid):
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0]) * 1024
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def reset_peak(pid):
    Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS


class Witness:
    """Tenant B's session: `1+1` latency, timed before, during and after an attack."""

    def __init__(self, gw):
        self.gw = gw
        r = call(gw, "POST", "/v1/sessions", token=TOKEN_B, json={"timeout_s": 300})
        assert r.status_code == 201, r.text
        self.sid = r.json()["id"]
        self.one_plus_one()  # warm

    def one_plus_one(self):
        t = time.monotonic()
        r = call(self.gw, "POST", f"/v1/sessions/{self.sid}/execute", token=TOKEN_B, json={"code": "1+1"})
        assert r.status_code == 200, r.text
        assert [x["data"]["text/plain"] for x in r.json()["results"] if x["is_main_result"]] == ["2"], r.text
        return (time.monotonic() - t) * 1000

    def close(self):
        call(self.gw, "DELETE", f"/v1/sessions/{self.sid}", token=TOKEN_B)


def report(name, gw, before, attack):
    """Runs `attack` while sampling; prints the row; returns (before, peak, after) status."""
    pid = gw.proc.pid
    witness = Witness(gw)
    try:
        b = {**status(pid), "ms": witness.one_plus_one()}
        reset_peak(pid)
        during = []
        stop = threading.Event()

        def sample():
            while not stop.is_set():
                try:
                    during.append(witness.one_plus_one())
                except AssertionError:
                    during.append(float("inf"))
                stop.wait(0.2)

        t = threading.Thread(target=sample, daemon=True)
        t.start()
        try:
            attack()
        finally:
            stop.set()
            t.join(120)
        peak = {**status(pid), "ms": max(during, default=0.0)}
        time.sleep(1)
        a = {**status(pid), "ms": witness.one_plus_one()}
    finally:
        witness.close()
    print(f"\n{name}: gateway rss MiB {b['VmRSS'] / MiB:.0f} / peak {peak['VmHWM'] / MiB:.0f} / after "
          f"{a['VmRSS'] / MiB:.0f}; fds {b['fds']} / {peak['fds']} / {a['fds']}; tenant B 1+1 ms "
          f"{b['ms']:.0f} / {peak['ms']:.0f} / {a['ms']:.0f}")
    return b, peak, a


def nested(depth):
    return "[" * depth + "]" * depth


# --- H2: JSON nesting on the three paths the review found, and partial lines ---

PROTOCOL_FD = (
    "import os, fcntl\n"
    "def _proto():\n"
    "    err = os.readlink('/proc/self/fd/2')\n"
    "    for n in sorted(int(x) for x in os.listdir('/proc/self/fd')):\n"
    "        try:\n"
    "            t = os.readlink(f'/proc/self/fd/{n}')\n"
    "        except OSError:\n"
    "            continue\n"
    "        if n > 2 and t.startswith('pipe:') and t != err and fcntl.fcntl(n, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY:\n"
    "            return n\n"
)


def test_h2_a_context_line_nested_millions_deep_is_dropped_and_costs_no_gigabytes(gw):
    r = gw.e2b("POST", "/sandboxes", json={"templateID": "base", "timeout": 300})
    assert r.status_code == 201, r.text
    sb = r.json()
    try:
        r = gw.e2b("POST", "/contexts", sb, json={})
        assert r.status_code == 200, r.text
        ctx = r.json()["id"]

        def attack():
            # 40 MB of nesting: under the 48 MiB line bound, 2.8 GB to parse unchecked.
            code = PROTOCOL_FD + ("fd = _proto()\nassert fd, 'no protocol pipe'\n"
                                  "os.write(fd, b'[' * 20_000_000 + b']' * 20_000_000 + b'\\n')\nprint('sent')")
            r = gw.e2b("POST", "/execute", sb, json={"code": code, "context_id": ctx})
            assert r.status_code == 200, r.text
            assert "sent" in r.text and "no protocol pipe" not in r.text, r.text[-2000:]

        before, peak, after = report("H2 context line", gw, None, attack)
        assert peak["VmHWM"] - before["VmRSS"] < 256 * MiB, (before, peak)
        # The context still serves, and the gateway kept nothing of the line.
        r = gw.e2b("POST", "/execute", sb, json={"code": "6 * 7", "context_id": ctx})
        assert r.status_code == 200 and '"text":"42"' in r.text.replace(" ", ""), r.text
        assert after["VmRSS"] - before["VmRSS"] < 128 * MiB, (before, after)
    finally:
        assert gw.e2b("DELETE", f"/sandboxes/{sb['sandboxID']}").status_code == 204


def test_h2_a_terminal_frame_nested_deep_is_ignored_and_a_large_one_closes_its_socket(gw):
    r = call(gw, "POST", "/v1/sessions", json={"timeout_s": 300})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    try:
        r = call(gw, "POST", "/api/terminals", json={"kernel_id": sid, "name": "deep"})
        assert r.status_code == 200, r.text
        url = f"{gw.ws_url}/terminals/websocket/deep?token={TOKEN_A}"

        def attack():
            ws = websocket.create_connection(url, timeout=30)
            assert json.loads(ws.recv()) == ["setup", {}]
            ws.send(nested(400_000))  # 800 KB, under the frame bound: ignored, the socket stays
            ws.send(json.dumps(["stdin", "echo alive-$((6*7))\r"]))
            out = ""
            while "alive-42" not in out:
                m = json.loads(ws.recv())
                out += m[1] if m[0] == "stdout" else ""
            # Over the 1 MiB frame bound: closed with 1009, nothing parsed.
            try:
                ws.send(nested(1_000_000))
                for _ in range(1000):
                    ws.recv()
                pytest.fail("a 2 MB terminal frame was taken")
            except (websocket.WebSocketConnectionClosedException, BrokenPipeError, ConnectionResetError):
                pass
            ws.close()

        before, peak, after = report("H2 terminal frame", gw, None, attack)
        assert peak["VmHWM"] - before["VmRSS"] < 64 * MiB, (before, peak)
        # The terminal itself still serves a new client.
        ws = websocket.create_connection(url, timeout=30)
        try:
            assert json.loads(ws.recv()) == ["setup", {}]
        finally:
            ws.close()
    finally:
        call(gw, "DELETE", f"/v1/sessions/{sid}")


def test_h2_a_form_session_field_nested_deep_or_large_is_refused(gw):
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        data = b"hello\n"
        info = tarfile.TarInfo("hello.txt")
        info.size = len(data)
        t.addfile(info, io.BytesIO(data))
    archive = buf.getvalue()
    before = call(gw, "GET", "/v1/sessions").json()["sessions"]

    def attack():
        for field, words in ((nested(30_000), "nests deeper"), ("{" + " " * (200 << 10) + "}", "over 64 KiB")):
            r = call(gw, "POST", "/v1/sessions", files={"session": (None, field), "workspace": ("w.tar", archive)})
            assert r.status_code == 400 and words in r.json()["message"], r.text

    b, peak, _ = report("H2 form session field", gw, None, attack)
    assert peak["VmHWM"] - b["VmRSS"] < 64 * MiB, (b, peak)
    assert call(gw, "GET", "/v1/sessions").json()["sessions"] == before
    # A proper form still makes a session.
    r = call(gw, "POST", "/v1/sessions", files={"session": (None, json.dumps({"timeout_s": 30})),
                                                "workspace": ("w.tar", archive)})
    assert r.status_code == 201, r.text
    call(gw, "DELETE", f"/v1/sessions/{r.json()['id']}")
