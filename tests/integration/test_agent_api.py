"""The agent API (/v1) end to end: sessions and their policies, execute as
JSON and as Server-Sent Events, files, one-shot runs, tenants and quotas."""
import base64
import json
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests
import websocket

from support.gateway import Gateway, KernelChannel

TENANT_A = "token-a-" + uuid.uuid4().hex
TENANT_B = "token-b-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    d = tmp_path_factory.mktemp("agent")
    tokens = d / "tokens.json"
    tokens.write_text(json.dumps([{"token": TENANT_A, "tenant": "alpha"},
                                  {"token": TENANT_B, "tenant": "beta", "max_sessions": 2}]))
    config = d / "config.json"
    config.write_text(json.dumps({"kernelspecs": {"python3": {"limits": {"workspace_bytes": 16 << 20}}}}))
    g = Gateway("--tokens-file", str(tokens), "--config", str(config), "--upload-limit", str(4 << 20),
                "--max-kernels", "12").start()
    yield g
    g.stop()
    g.cleanup()


def api(gw, method, path, token=None, **kw):
    headers = {"Authorization": f"Bearer {token or gw.token}"}
    headers.update(kw.pop("headers", {}))
    return requests.request(method, gw.url + path, headers=headers, timeout=kw.pop("timeout", 120), **kw)


@pytest.fixture
def session(gw):
    r = api(gw, "POST", "/v1/sessions", json={"timeout_s": 30})
    assert r.status_code == 201, r.text
    s = r.json()
    yield s
    api(gw, "DELETE", f"/v1/sessions/{s['id']}")


def run(gw, sid, code, token=None, **extra):
    r = api(gw, "POST", f"/v1/sessions/{sid}/execute", token=token, json={"code": code, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def sse(gw, sid, code, token=None, **extra):
    """Runs a cell as Server-Sent Events; returns [(event, data), …]."""
    events = []
    with api(gw, "POST", f"/v1/sessions/{sid}/execute", token=token, json={"code": code, **extra},
             headers={"Accept": "text/event-stream"}, stream=True) as r:
        assert r.status_code == 200 and r.headers["Content-Type"] == "text/event-stream"
        event = None
        for line in r.iter_lines(decode_unicode=True):
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("data: "):
                events.append((event, json.loads(line[6:])))
    return events


# --- sessions --------------------------------------------------------------------------

def test_a_session_model_reports_its_limits_and_caps_requests(gw):
    r = api(gw, "POST", "/v1/sessions", json={"timeout_s": 10**9, "idle_timeout_s": 90, "output_limit_bytes": 2048})
    assert r.status_code == 201
    s = r.json()
    try:
        assert r.headers["Location"] == f"/v1/sessions/{s['id']}"
        assert s["limits"]["timeout_s"] == 3600, "capped by the server maximum"
        assert s["limits"]["idle_timeout_s"] == 90 and s["limits"]["output_limit_bytes"] == 2048
        assert s["limits"]["workspace_bytes"] == 16 << 20 and s["limits"]["memory_bytes"] > 0
        assert s["expires_at"] > s["created"]
        assert api(gw, "GET", f"/v1/sessions/{s['id']}").json()["id"] == s["id"]
        assert s["id"] in [x["id"] for x in api(gw, "GET", "/v1/sessions").json()["sessions"]]
        # The same session is a kernel on the Jupyter API (debuggable from JupyterLab).
        assert api(gw, "GET", f"/api/kernels/{s['id']}").status_code == 200
    finally:
        assert api(gw, "DELETE", f"/v1/sessions/{s['id']}").status_code == 204
    assert api(gw, "GET", f"/v1/sessions/{s['id']}").status_code == 404
    for bad in ({"timeout_s": -1}, {"idle_timeout_s": "soon"}, {"kernel": 3}, {"env": ["x"]}):
        r = api(gw, "POST", "/v1/sessions", json=bad)
        assert r.status_code == 400 and set(r.json()) == {"reason", "message"}, (bad, r.text)
    assert api(gw, "POST", "/v1/sessions", json={"kernel": "ruby"}).status_code == 404


# --- execute ---------------------------------------------------------------------------

def test_execute_returns_one_clean_result(gw, session):
    sid = session["id"]
    r = run(gw, sid, "import sys\nprint('out'); print('err', file=sys.stderr)\n"
                     "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3]); plt.show()\n"
                     "import pandas as pd\ndf = pd.DataFrame({'a': [1, 2]})\ndisplay(df)\n"
                     "open('/workspace/report.txt', 'w').write('done')\n6 * 7")
    assert r["status"] == "ok" and r["error"] is None
    assert r["stdout"] == "out\n" and r["stderr"] == "err\n"
    kinds = [list(x["data"]) for x in r["results"]]
    assert any("image/png" in k for k in kinds), kinds
    assert any("text/html" in k for k in kinds), "a DataFrame arrives as an HTML table"
    main = [x for x in r["results"] if x["is_main_result"]]
    assert len(main) == 1 and main[0]["data"]["text/plain"] == "42"
    png = base64.b64decode([x for x in r["results"] if "image/png" in x["data"]][0]["data"]["image/png"])
    assert png.startswith(b"\x89PNG")
    assert [f["path"] for f in r["files"]] == ["report.txt"]
    f = r["files"][0]
    assert f["change"] == "created" and f["size"] == 4 and f["mime_type"] == "text/plain"
    assert api(gw, "GET", f["url"]).content == b"done"
    assert r["truncated"] == {"stdout": False, "stderr": False, "results": False, "files": False}
    assert r["duration_ms"] >= 0 and isinstance(r["execution_count"], int)
    again = run(gw, sid, "open('/workspace/report.txt', 'a').write('!'); df.shape")
    assert again["execution_count"] == r["execution_count"] + 1
    assert [(x["path"], x["change"]) for x in again["files"]] == [("report.txt", "modified")]
    assert again["results"][0]["data"]["text/plain"] == "(2, 1)", "state persists"


def test_an_error_comes_with_its_traceback_with_and_without_colours(gw, session):
    r = run(gw, session["id"], "def f():\n    return 1 / 0\nf()")
    assert r["status"] == "error"
    e = r["error"]
    assert e["ename"] == "ZeroDivisionError" and "division by zero" in e["evalue"]
    assert any("\x1b[" in line for line in e["traceback"])
    assert "\x1b[" not in e["traceback_text"] and "return 1 / 0" in e["traceback_text"]


def test_a_timeout_interrupts_and_keeps_the_output_so_far(gw, session):
    sid = session["id"]
    run(gw, sid, "kept = 'still here'")
    r = run(gw, sid, "print('before'); import time; time.sleep(60)", timeout_s=2)
    assert r["status"] == "timeout" and r["kernel_restarted"] is False
    assert r["stdout"] == "before\n"
    assert 1500 <= r["duration_ms"] < 20000
    assert run(gw, sid, "print(kept)")["stdout"] == "still here\n", "an interrupt keeps the state"


def test_a_cell_that_ignores_the_interrupt_is_killed_and_the_kernel_restarted(gw, session):
    sid = session["id"]
    run(gw, sid, "open('/workspace/survives.txt', 'w').write('x'); lost = 1")
    r = run(gw, sid, "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nprint('stubborn')\n"
                     "time.sleep(120)", timeout_s=2)
    assert r["status"] == "timeout" and r["kernel_restarted"] is True
    assert r["stdout"] == "stubborn\n"
    after = run(gw, sid, "import os\nprint('lost' in dir(), os.path.exists('/workspace/survives.txt'))")
    assert after["status"] == "ok" and after["stdout"] == "False True\n", "state is lost, files stay"


def test_output_past_the_limit_is_truncated_with_a_marker(gw):
    s = api(gw, "POST", "/v1/sessions", json={"output_limit_bytes": 10000}).json()
    try:
        r = run(gw, s["id"], "print('A' * 6000)\nprint('B' * 6000)\nprint('C' * 6000)\n'value'")
        assert r["status"] == "ok" and r["truncated"]["stdout"] is True
        assert r["stdout"].startswith("A" * 6000 + "\n" + "B" * 3000)
        assert r["stdout"].endswith("\n[cellgate: output truncated after 10000 bytes]\n")
        assert "C" not in r["stdout"]
        assert r["results"][0]["data"]["text/plain"] == "'value'"
    finally:
        api(gw, "DELETE", f"/v1/sessions/{s['id']}")


def test_a_dying_kernel_is_reported_as_kernel_died(gw, session):
    r = run(gw, session["id"], "print('bye', flush=True); import os; os._exit(3)")
    assert r["status"] == "kernel_died"
    deadline = time.time() + 60
    while time.time() < deadline:  # restarted automatically
        if api(gw, "GET", f"/v1/sessions/{session['id']}").json()["state"] == "idle":
            break
        time.sleep(0.3)
    assert run(gw, session["id"], "1 + 1")["status"] == "ok"


def test_executions_on_one_session_run_one_at_a_time_in_order(gw, session):
    sid = session["id"]
    results = {}

    def go(name, code):
        results[name] = run(gw, sid, code)

    first = threading.Thread(target=go, args=("first", "import time; time.sleep(1); order = ['first']"))
    first.start()
    time.sleep(0.2)
    second = threading.Thread(target=go, args=("second", "order.append('second'); order"))
    second.start()
    first.join()
    second.join()
    assert results["second"]["status"] == "ok", results["second"]
    assert results["second"]["results"][0]["data"]["text/plain"] == "['first', 'second']"
    assert results["second"]["execution_count"] == results["first"]["execution_count"] + 1


def test_streaming_delivers_ordered_events_ending_with_the_full_result(gw, session):
    events = sse(gw, session["id"], "import time\nfor i in range(3):\n    print(i, flush=True); time.sleep(0.2)\n"
                                    "open('/workspace/s.txt', 'w').write('s')\n'end value'")
    names = [e for e, _ in events]
    assert names[:3] == ["stdout", "stdout", "stdout"] and names[-1] == "end"
    assert names.index("result") < names.index("files") < names.index("end")
    assert "".join(d["text"] for e, d in events if e == "stdout") == "0\n1\n2\n"
    end = events[-1][1]
    assert end["status"] == "ok" and end["stdout"] == "0\n1\n2\n"
    assert end["results"][0]["data"]["text/plain"] == "'end value'"
    assert [f["path"] for f in end["files"]] == ["s.txt"]
    errors = sse(gw, session["id"], "raise ValueError('streamed')")
    assert [e for e, _ in errors][-2:] == ["error", "end"] and errors[-1][1]["status"] == "error"


def test_streamed_executions_leave_no_connection_behind(gw, session):
    """A finished SSE execution releases its connection (socket, session,
    execution) once the client closes it, like a JSON one."""
    fds = lambda: len(list(Path(f"/proc/{gw.proc.pid}/fd").iterdir()))  # noqa: E731
    sse(gw, session["id"], "1")  # warm-up
    time.sleep(0.5)
    before = fds()
    for i in range(30):
        assert sse(gw, session["id"], f"print({i})")[-1][1]["stdout"] == f"{i}\n"
    deadline = time.time() + 10
    while fds() > before + 2 and time.time() < deadline:
        time.sleep(0.2)
    assert fds() <= before + 2, f"{fds() - before} descriptors left after 30 streamed executions"


def test_a_streaming_client_that_disconnects_has_its_cell_interrupted(gw, session):
    sid = session["id"]
    r = api(gw, "POST", f"/v1/sessions/{sid}/execute", json={"code": "import time; time.sleep(60)"},
            headers={"Accept": "text/event-stream"}, stream=True)
    assert r.status_code == 200
    time.sleep(1.0)
    r.close()  # gone mid-run
    t0 = time.time()
    follow = run(gw, sid, "print('free again')")
    assert follow["stdout"] == "free again\n"
    assert time.time() - t0 < 20, "the sleeping cell was interrupted, not waited out"


# --- files -------------------------------------------------------------------------------

def test_files_put_get_list_delete_and_multipart(gw, session):
    sid = session["id"]
    blob = bytes(range(256)) * 1000
    r = api(gw, "PUT", f"/v1/sessions/{sid}/files/in/data.bin", data=blob)
    assert r.status_code == 201 and r.json()["size"] == len(blob) and r.json()["path"] == "in/data.bin"
    assert api(gw, "PUT", f"/v1/sessions/{sid}/files/in/data.bin", data=blob).status_code == 200
    got = api(gw, "GET", f"/v1/sessions/{sid}/files/in/data.bin")
    assert got.content == blob and got.headers["Content-Type"] == "application/octet-stream"
    assert run(gw, sid, "print(len(open('/workspace/in/data.bin','rb').read()))")["stdout"] == f"{len(blob)}\n"
    listing = api(gw, "GET", f"/v1/sessions/{sid}/files?path=in").json()
    assert [(e["name"], e["type"], e["size"]) for e in listing["entries"]] == [("data.bin", "file", len(blob))]
    root = api(gw, "GET", f"/v1/sessions/{sid}/files").json()
    assert ("in", "directory") in [(e["name"], e["type"]) for e in root["entries"]]
    r = api(gw, "POST", f"/v1/sessions/{sid}/files", files=[("file", ("a.csv", b"x,y\n1,2\n", "text/csv")),
                                                             ("file", ("b.txt", b"bee", "text/plain"))],
            data={"path": "up"})
    assert r.status_code == 201 and sorted(f["path"] for f in r.json()["files"]) == ["up/a.csv", "up/b.txt"]
    assert api(gw, "GET", f"/v1/sessions/{sid}/files/up/a.csv").content == b"x,y\n1,2\n"
    assert "attachment" in api(gw, "GET", f"/v1/sessions/{sid}/files/up/b.txt?download=1").headers["Content-Disposition"]
    assert api(gw, "DELETE", f"/v1/sessions/{sid}/files/up").status_code == 204
    assert api(gw, "GET", f"/v1/sessions/{sid}/files/up/a.csv").status_code == 404


def test_file_limits_and_escapes(gw, session):
    sid = session["id"]
    r = api(gw, "PUT", f"/v1/sessions/{sid}/files/big.bin", data=b"x" * (5 << 20))
    assert r.status_code == 413, r.text
    assert api(gw, "GET", f"/v1/sessions/{sid}/files/big.bin").status_code == 404, "a refused upload leaves nothing"
    # A workspace of 16 MiB: the fourth 4 MiB upload cannot fit.
    codes = [api(gw, "PUT", f"/v1/sessions/{sid}/files/fill{i}.bin", data=b"\0" * ((4 << 20) - 1)).status_code
             for i in range(5)]
    assert 507 in codes and codes[0] == 201, codes
    assert gw.alive()
    for path in ("../escape.txt", "%2e%2e/escape.txt", "a/../../b", "/etc/passwd"):
        r = api(gw, "PUT", f"/v1/sessions/{sid}/files/{path}", data=b"x")
        assert r.status_code in (400, 403, 404), (path, r.status_code)
    run(gw, sid, "import os; os.symlink('/etc/passwd', '/workspace/pw')")
    assert api(gw, "GET", f"/v1/sessions/{sid}/files/pw").status_code == 403
    assert api(gw, "PUT", f"/v1/sessions/{sid}/files/pw", data=b"pwned").status_code == 403
    assert "pwned" not in Path("/etc/passwd").read_text()


def test_the_workspace_exports_as_a_tar_archive(gw, session):
    import io
    import tarfile
    sid = session["id"]
    long_dir = "d" * 60 + "/" + "e" * 60
    run(gw, sid, f"""
import os
os.makedirs('data/raw', exist_ok=True)
open('data/raw/a.csv', 'w').write('x,y\\n1,2\\n')
open('data/blob.bin', 'wb').write(bytes(range(256)) * 1000)
os.makedirs('{long_dir}', exist_ok=True)
open('{long_dir}/' + 'f' * 120 + '.txt', 'w').write('long')
os.symlink('/etc/passwd', 'pw')
os.mkfifo('fifo')
""")
    r = api(gw, "GET", f"/v1/sessions/{sid}/workspace")
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/x-tar", r.text[:300]
    assert 'filename="workspace.tar"' in r.headers["Content-Disposition"]
    assert int(r.headers["X-Cellgate-Skipped"]) >= 2, r.headers  # the symlink and the FIFO
    with tarfile.open(fileobj=io.BytesIO(r.content)) as t:
        members = {m.name: m for m in t.getmembers()}
        assert members["data"].isdir() and members["data/raw/a.csv"].isfile(), sorted(members)
        assert t.extractfile("data/raw/a.csv").read() == b"x,y\n1,2\n"
        assert t.extractfile("data/blob.bin").read() == bytes(range(256)) * 1000
        assert t.extractfile(f"{long_dir}/{'f' * 120}.txt").read() == b"long"
        assert "pw" not in members and "fifo" not in members
        assert all(m.isdir() or m.isfile() for m in members.values())
    # One directory, named relative to it.
    r = api(gw, "GET", f"/v1/sessions/{sid}/workspace?path=data")
    assert r.status_code == 200 and 'filename="data.tar"' in r.headers["Content-Disposition"]
    with tarfile.open(fileobj=io.BytesIO(r.content)) as t:
        assert sorted(t.getnames()) == ["blob.bin", "raw", "raw/a.csv"]
    for path, statuses in (("../etc", {400}), ("nope", {404}), ("data/raw/a.csv", {409}), ("pw", {403, 409})):
        r = api(gw, "GET", f"/v1/sessions/{sid}/workspace", params={"path": path})
        assert r.status_code in statuses and r.json()["message"], (path, r.status_code, r.text)
    assert api(gw, "GET", "/v1/sessions/nope/workspace").status_code == 404
    assert api(gw, "GET", f"/v1/sessions/{sid}/workspace", token=TENANT_B).status_code == 404


def test_a_tar_archive_imports_into_a_workspace_and_nothing_escapes(gw, session):
    import io
    import tarfile
    sid = session["id"]
    # An export from one session moves into another, into a directory of it.
    run(gw, sid, "import os\nos.makedirs('src/pkg', exist_ok=True)\n"
                 "open('src/pkg/mod.py', 'w').write('VALUE = 42\\n')\nopen('src/big.bin', 'wb').write(b'z' * 300000)")
    archive = api(gw, "GET", f"/v1/sessions/{sid}/workspace?path=src").content
    r = api(gw, "POST", "/v1/sessions", json={"timeout_s": 30})
    other = r.json()["id"]
    try:
        r = api(gw, "PUT", f"/v1/sessions/{other}/workspace?path=moved", data=archive,
                headers={"Content-Type": "application/x-tar"})
        assert r.status_code == 200, r.text
        assert r.json()["files"] == 2 and r.json()["directories"] == 1 and r.json()["skipped_count"] == 0, r.json()
        out = run(gw, other, "import sys; sys.path.insert(0, 'moved')\nimport pkg.mod\n"
                             "print(pkg.mod.VALUE, len(open('moved/big.bin', 'rb').read()))")
        assert out["stdout"] == "42 300000\n", out

        # A hostile archive: '..', an absolute path, links, a device; only the plain file lands.
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
            def add(name, data=b"x", kind=tarfile.REGTYPE, link=""):
                info = tarfile.TarInfo(name)
                info.type, info.linkname, info.size = kind, link, len(data) if kind == tarfile.REGTYPE else 0
                t.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
            add("../../escape.txt")
            add("/etc/cellgate-import-escape")
            add("pw", kind=tarfile.SYMTYPE, link="/etc/passwd")
            add("hard", kind=tarfile.LNKTYPE, link="/etc/passwd")
            add("null", kind=tarfile.CHRTYPE)
            add("ok.txt", b"fine")
        r = api(gw, "PUT", f"/v1/sessions/{other}/workspace", data=buf.getvalue())
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["files"] == 1 and body["skipped_count"] == 5, body
        assert {s["path"] for s in body["skipped"]} >= {"pw", "hard", "null"}, body
        out = run(gw, other, "import os\nprint(sorted(n for n in os.listdir('.') if not n.startswith('.')), os.path.exists('/escape.txt'),"
                             " os.path.exists('/etc/cellgate-import-escape'), open('ok.txt').read())")
        assert out["stdout"].strip() == "['moved', 'ok.txt'] False False fine", out
        assert not Path("/etc/cellgate-import-escape").exists()

        # Not a tar, a truncated one, over the upload limit: clear errors, the session serves on.
        r = api(gw, "PUT", f"/v1/sessions/{other}/workspace", data=b"not a tar archive" * 100)
        assert r.status_code == 400 and "archive" in r.json()["message"], r.text
        r = api(gw, "PUT", f"/v1/sessions/{other}/workspace", data=archive[:1500])
        assert r.status_code == 400 and "ends in the middle" in r.json()["message"], r.text
        r = api(gw, "PUT", f"/v1/sessions/{other}/workspace", data=b"\0" * (5 << 20))
        assert r.status_code == 413, r.text
        assert api(gw, "PUT", "/v1/sessions/nope/workspace", data=archive).status_code == 404
        assert run(gw, other, "1 + 1")["status"] == "ok"
    finally:
        api(gw, "DELETE", f"/v1/sessions/{other}")


def _sessions(gw, token=None):
    r = api(gw, "GET", "/v1/sessions", token=token)
    assert r.status_code == 200, r.text
    return [x["id"] for x in r.json()["sessions"]]


def test_a_session_starts_from_a_tar_archive_or_a_form_with_its_request(gw, session):
    """POST /v1/sessions with an application/x-tar body (the default
    request) or a multipart form ("session": its JSON, "workspace": the
    archive): 201 once the files are in, the model says what was imported.
    A bad archive or form ends the new session: nothing is left."""
    import io
    import tarfile
    sid = session["id"]
    run(gw, sid, "import os\nos.makedirs('proj/data', exist_ok=True)\n"
                 "open('proj/data/rows.csv', 'w').write('a,b\\n1,2\\n')\nopen('proj/blob.bin', 'wb').write(bytes(range(256)) * 1000)\n"
                 "os.symlink('data/rows.csv', 'proj/link.csv')")
    exported = api(gw, "GET", f"/v1/sessions/{sid}/workspace")
    assert exported.headers["X-Cellgate-Skipped"] == "1"  # the link stays behind
    archive = exported.content
    made = []
    try:
        # A tar body: the default request.
        r = api(gw, "POST", "/v1/sessions", data=archive, headers={"Content-Type": "application/x-tar"})
        assert r.status_code == 201, r.text
        a = r.json()
        made.append(a["id"])
        assert r.headers["Location"] == f"/v1/sessions/{a['id']}"
        assert a["imported"]["files"] == 2 and a["imported"]["skipped_count"] == 0, a["imported"]
        assert a["imported"]["bytes"] == 256008 and a["state"] in ("idle", "busy", "starting"), a
        out = run(gw, a["id"], "import pandas as pd, hashlib\nprint(pd.read_csv('proj/data/rows.csv').b.sum(),"
                               " hashlib.md5(open('proj/blob.bin','rb').read()).hexdigest())")
        import hashlib
        assert out["stdout"] == f"2 {hashlib.md5(bytes(range(256)) * 1000).hexdigest()}\n", out

        # A form: the request's own limits apply, and the archive lands too.
        files = {"session": (None, json.dumps({"timeout_s": 33}), "application/json"),
                 "workspace": ("workspace.tar", archive, "application/x-tar")}
        r = api(gw, "POST", "/v1/sessions", files=files)
        assert r.status_code == 201, r.text
        b = r.json()
        made.append(b["id"])
        assert b["imported"]["files"] == 2 and b["limits"]["timeout_s"] == 33, b
        assert run(gw, b["id"], "print(open('proj/data/rows.csv').read())")["stdout"] == "a,b\n1,2\n\n"
        # The two are separate copies.
        run(gw, a["id"], "open('proj/data/rows.csv', 'w').write('changed')")
        assert run(gw, b["id"], "print(open('proj/data/rows.csv').read())")["stdout"] == "a,b\n1,2\n\n"

        # A JSON create is unchanged (and a JSON body is not mistaken for an archive).
        r = api(gw, "POST", "/v1/sessions", json={"timeout_s": 20})
        assert r.status_code == 201 and "imported" not in r.json(), r.text
        made.append(r.json()["id"])

        # Bad bodies: clear errors, and no session is left behind.
        before = set(_sessions(gw))
        cases = [
            (dict(data=b"not a tar archive" * 100, headers={"Content-Type": "application/x-tar"}), 400, "archive"),
            (dict(data=archive[:1500], headers={"Content-Type": "application/x-tar"}), 400, "ends in the middle"),
            (dict(data=b"\0" * (5 << 20), headers={"Content-Type": "application/x-tar"}), 413, "larger than"),
            (dict(files={"session": (None, "{not json"), "workspace": ("w.tar", archive)}), 400, "'session'"),
            (dict(files={"session": (None, "[1]"), "workspace": ("w.tar", archive)}), 400, "'session'"),
            (dict(files={"session": (None, json.dumps({"timeout_s": -1})), "workspace": ("w.tar", archive)}), 400, "timeout_s"),
            (dict(files={"session": (None, json.dumps({"kernel": "no-such"})), "workspace": ("w.tar", archive)}), 404, ""),
            (dict(files={"session": (None, "{}")}), 400, "'workspace'"),
            (dict(files={"workspace": ("w.tar", archive), "other": (None, "x")}), 400, "'other'"),
            (dict(data=b"--x\r\n", headers={"Content-Type": "multipart/form-data; boundary=x"}), 400, "malformed"),
            (dict(data=b"", headers={"Content-Type": "multipart/form-data"}), 400, "boundary"),
        ]
        for kw, status, words in cases:
            r = api(gw, "POST", "/v1/sessions", **kw)
            assert r.status_code == status, (kw.get("headers"), status, r.status_code, r.text)
            assert words in r.json()["message"], (words, r.text)
        deadline = time.time() + 30
        while set(_sessions(gw)) != before and time.time() < deadline:
            time.sleep(0.2)
        assert set(_sessions(gw)) == before
        # Another tenant's quota (max_sessions 2) full: 429 and nothing made.
        held = [api(gw, "POST", "/v1/sessions", token=TENANT_B, json={"timeout_s": 20}).json()["id"] for _ in range(2)]
        try:
            r = api(gw, "POST", "/v1/sessions", token=TENANT_B, data=archive, headers={"Content-Type": "application/x-tar"})
            assert r.status_code == 429, r.text
            assert sorted(_sessions(gw, TENANT_B)) == sorted(held)
        finally:
            for h in held:
                api(gw, "DELETE", f"/v1/sessions/{h}", token=TENANT_B)
        assert run(gw, sid, "1 + 1")["status"] == "ok"
    finally:
        for m in made:
            api(gw, "DELETE", f"/v1/sessions/{m}")


# --- one-shot ----------------------------------------------------------------------------

def test_one_shot_execute_takes_files_and_returns_produced_files_inline(gw):
    before = {s["id"] for s in api(gw, "GET", "/v1/sessions").json()["sessions"]}
    csv = b"city,temp\nOslo,3\nLima,19\n"
    r = api(gw, "POST", "/v1/execute", json={
        "code": "import pandas as pd\ndf = pd.read_csv('data/cities.csv')\n"
                "df.to_csv('out/hot.csv', index=False) if __import__('os').makedirs('out', exist_ok=True) is None else None\n"
                "print(df.temp.max())",
        "files": [{"path": "data/cities.csv", "content_base64": base64.b64encode(csv).decode()}]})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["status"] == "ok" and out["stdout"] == "19\n"
    produced = {f["path"]: f for f in out["files"]}
    assert base64.b64decode(produced["out/hot.csv"]["content_base64"]) == csv
    assert "url" not in produced["out/hot.csv"]
    assert {s["id"] for s in api(gw, "GET", "/v1/sessions").json()["sessions"]} == before, "nothing persists"
    bad = api(gw, "POST", "/v1/execute", json={"code": "1", "files": [{"path": "../x", "content_base64": ""}]})
    assert bad.status_code == 400


# --- policies ----------------------------------------------------------------------------

def test_an_idle_session_is_culled_and_its_sockets_closed_with_a_reason(gw):
    s = api(gw, "POST", "/v1/sessions", json={"idle_timeout_s": 3}).json()
    ws = websocket.create_connection(f"{gw.ws_url}/api/kernels/{s['id']}/channels?token={gw.token}", timeout=30)
    reason = None
    # Reconnects are not activity: keep opening fresh sockets while waiting.
    deadline = time.time() + 20
    while time.time() < deadline and api(gw, "GET", f"/v1/sessions/{s['id']}").status_code == 200:
        try:
            extra = websocket.create_connection(f"{gw.ws_url}/api/kernels/{s['id']}/channels?token={gw.token}", timeout=5)
            extra.ping()
            extra.close()
        except websocket.WebSocketException:
            pass
        time.sleep(0.5)
    assert api(gw, "GET", f"/v1/sessions/{s['id']}").status_code == 404
    try:
        while True:
            op, data = ws.recv_data(control_frame=True)
            if op == websocket.ABNF.OPCODE_CLOSE:
                reason = data[2:].decode()
                break
    except websocket.WebSocketConnectionClosedException:
        pass
    assert reason is not None and "idle" in reason
    assert api(gw, "POST", f"/v1/sessions/{s['id']}/execute", json={"code": "1"}).status_code == 404


def test_a_session_expires_at_the_end_of_its_lifetime_even_when_busy(gw):
    s = api(gw, "POST", "/v1/sessions", json={"lifetime_s": 3}).json()
    r = run(gw, s["id"], "import time; time.sleep(30)", timeout_s=25)
    assert r["status"] == "kernel_died"
    assert api(gw, "GET", f"/v1/sessions/{s['id']}").status_code == 404


def test_tenants_see_only_their_own_sessions(gw):
    a = api(gw, "POST", "/v1/sessions", token=TENANT_A).json()
    try:
        for path in (f"/v1/sessions/{a['id']}", f"/api/kernels/{a['id']}", f"/v1/sessions/{a['id']}/files",
                     f"/api/contents/{a['id']}"):
            r = api(gw, "GET", path, token=TENANT_B)
            assert r.status_code == 404, (path, r.status_code)
        assert api(gw, "POST", f"/v1/sessions/{a['id']}/execute", token=TENANT_B, json={"code": "1"}).status_code == 404
        assert api(gw, "DELETE", f"/v1/sessions/{a['id']}", token=TENANT_B).status_code == 404
        assert a["id"] not in [x["id"] for x in api(gw, "GET", "/v1/sessions", token=TENANT_B).json()["sessions"]]
        assert a["id"] not in [x["id"] for x in api(gw, "GET", "/api/kernels", token=TENANT_B).json()]
        with pytest.raises(websocket.WebSocketBadStatusException) as e:
            websocket.create_connection(f"{gw.ws_url}/api/kernels/{a['id']}/channels?token={TENANT_B}", timeout=10)
        assert e.value.status_code == 404
        assert run(gw, a["id"], "print('mine')", token=TENANT_A)["stdout"] == "mine\n"
    finally:
        api(gw, "DELETE", f"/v1/sessions/{a['id']}", token=TENANT_A)


def test_quotas_are_counted_at_admission_so_concurrent_requests_cannot_race_past_them(gw):
    results = []

    def create():
        results.append(api(gw, "POST", "/v1/sessions", token=TENANT_B))

    threads = [threading.Thread(target=create) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in results)
    try:
        assert codes == [201, 201, 429, 429, 429, 429], codes
        refused = [r for r in results if r.status_code == 429][0].json()
        assert "limit" in refused["message"].lower()
    finally:
        for r in results:
            if r.status_code == 201:
                api(gw, "DELETE", f"/v1/sessions/{r.json()['id']}", token=TENANT_B)
    assert api(gw, "POST", "/v1/sessions", token=TENANT_B).status_code == 201, "freed slots can be used again"


# --- with the default limits ---------------------------------------------------------------

@pytest.fixture(scope="module")
def roomy():
    g = Gateway("--max-kernels", "6").start()
    yield g
    g.stop()
    g.cleanup()


def sandboxes_of(g):
    import subprocess
    from support.prerequisites import BUILD, IMAGE_STORE
    out = subprocess.run([str(BUILD / "bin" / "cellgate-launch"), "--state-dir", str(g.state_dir), "--image-store",
                          str(IMAGE_STORE), "--workspace-root", str(g.workspace_root), "ps", "--json"],
                         capture_output=True, text=True, check=True)
    return {s["id"] for s in json.loads(out.stdout)}


def test_a_saved_plot_is_listed_and_downloads_byte_identical(roomy):
    s = api(roomy, "POST", "/v1/sessions").json()
    try:
        r = run(roomy, s["id"], "import matplotlib.pyplot as plt, hashlib\nplt.plot([3, 1, 2])\n"
                                "plt.savefig('chart.png')\nplt.show()\n"
                                "print(hashlib.sha256(open('chart.png','rb').read()).hexdigest())")
        assert r["status"] == "ok"
        assert any("image/png" in x["data"] for x in r["results"])
        chart = [f for f in r["files"] if f["path"] == "chart.png"]
        assert len(chart) == 1 and chart[0]["mime_type"] == "image/png"
        import hashlib
        body = api(roomy, "GET", chart[0]["url"]).content
        assert hashlib.sha256(body).hexdigest() == r["stdout"].strip()
        assert len(body) == chart[0]["size"]
    finally:
        api(roomy, "DELETE", f"/v1/sessions/{s['id']}")


def test_a_50_mb_upload_round_trips_byte_identical(roomy):
    import hashlib, os
    s = api(roomy, "POST", "/v1/sessions").json()
    try:
        blob = os.urandom(50 << 20)
        r = api(roomy, "PUT", f"/v1/sessions/{s['id']}/files/big/data.bin", data=blob,
                headers={"Expect": "100-continue"})
        assert r.status_code == 201 and r.json()["size"] == len(blob), r.text
        inside = run(roomy, s["id"], "import hashlib\nprint(hashlib.sha256(open('big/data.bin','rb').read()).hexdigest())")
        assert inside["stdout"].strip() == hashlib.sha256(blob).hexdigest()
        back = api(roomy, "GET", f"/v1/sessions/{s['id']}/files/big/data.bin")
        assert back.status_code == 200 and back.content == blob
    finally:
        api(roomy, "DELETE", f"/v1/sessions/{s['id']}")


def test_a_busy_loop_times_out_within_timeout_plus_grace(roomy):
    s = api(roomy, "POST", "/v1/sessions").json()
    try:
        t0 = time.time()
        r = run(roomy, s["id"], "while True: pass", timeout_s=3)
        elapsed = time.time() - t0
        assert r["status"] == "timeout"
        assert elapsed < 3 + 3 + 5, elapsed
        assert run(roomy, s["id"], "1+1")["results"][0]["data"]["text/plain"] == "2"
    finally:
        api(roomy, "DELETE", f"/v1/sessions/{s['id']}")


def test_a_200_mb_print_is_truncated_and_the_gateway_stays_responsive(roomy):
    s = api(roomy, "POST", "/v1/sessions").json()
    try:
        result = {}
        t = threading.Thread(target=lambda: result.update(run(roomy, s["id"], "print('y' * 200_000_000)\n'after'",
                                                              timeout_s=120)))
        t.start()
        # Meanwhile the gateway answers promptly.
        worst = 0.0
        while t.is_alive():
            t0 = time.time()
            assert requests.get(roomy.url + "/healthz", timeout=10).status_code == 200
            worst = max(worst, time.time() - t0)
            time.sleep(0.2)
        t.join()
        assert result["status"] == "ok"
        assert result["truncated"]["stdout"] is True
        assert result["stdout"].startswith("y" * 1000)
        assert result["stdout"].endswith("[cellgate: output truncated after 1048576 bytes]\n")
        assert len(result["stdout"]) < (1 << 20) + 100
        assert result["results"][0]["data"]["text/plain"] == "'after'"
        assert worst < 2.0, f"a health check took {worst:.2f} s during the flood"
    finally:
        api(roomy, "DELETE", f"/v1/sessions/{s['id']}")


def test_the_admission_cap_holds_under_20_concurrent_creates(roomy):
    results = []
    lock = threading.Lock()

    def create():
        r = api(roomy, "POST", "/v1/sessions")
        with lock:
            results.append(r)

    threads = [threading.Thread(target=create) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        codes = [r.status_code for r in results]
        assert codes.count(201) == 6 and codes.count(429) == 14, sorted(codes)
        assert len(sandboxes_of(roomy)) == 6
    finally:
        for r in results:
            if r.status_code == 201:
                api(roomy, "DELETE", f"/v1/sessions/{r.json()['id']}")
    assert sandboxes_of(roomy) == set()


def test_idle_culling_removes_the_sandbox_too(roomy):
    s = api(roomy, "POST", "/v1/sessions", json={"idle_timeout_s": 2}).json()
    assert s["id"] in sandboxes_of(roomy)
    deadline = time.time() + 20
    while time.time() < deadline and s["id"] in sandboxes_of(roomy):
        time.sleep(0.5)
    assert s["id"] not in sandboxes_of(roomy)
    assert api(roomy, "GET", f"/v1/sessions/{s['id']}").status_code == 404


def test_the_one_shot_endpoint_leaves_no_sandbox_behind(roomy):
    before = sandboxes_of(roomy)
    r = api(roomy, "POST", "/v1/execute", json={"code": "open('x.txt','w').write('x'); 1"})
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert sandboxes_of(roomy) == before


def test_bad_input_gets_clear_4xx_json(roomy):
    s = api(roomy, "POST", "/v1/sessions").json()
    sid = s["id"]
    try:
        cases = [
            ("POST", f"/v1/sessions/{sid}/execute", {"json": {}}, 400),
            ("POST", f"/v1/sessions/{sid}/execute", {"json": {"code": 42}}, 400),
            ("POST", f"/v1/sessions/{sid}/execute", {"json": {"code": "1", "timeout_s": "soon"}}, 400),
            ("POST", f"/v1/sessions/{sid}/execute", {"data": b"{broken", "headers": {"Content-Type": "application/json"}}, 400),
            ("POST", f"/v1/sessions/{uuid.uuid4()}/execute", {"json": {"code": "1"}}, 404),
            ("GET", f"/v1/sessions/{uuid.uuid4()}/files/x", {}, 404),
            ("PUT", f"/v1/sessions/{sid}/files/%2e%2e/x", {"data": b"x"}, 400),
            ("PUT", f"/v1/sessions/{sid}/files//etc/x", {"data": b"x"}, 400),
            ("GET", f"/v1/sessions/{sid}/files?path=../..", {}, 400),
            ("POST", f"/v1/sessions/{sid}/files", {"data": b"not multipart", "headers": {"Content-Type": "text/plain"}}, 415),
            ("POST", "/v1/sessions", {"json": {"env": {"LD_PRELOAD": "x"}}}, 400),
            ("POST", "/v1/execute", {"json": {"code": "1", "files": "nope"}}, 400),
            ("POST", "/v1/execute", {"json": {"code": "1", "files": [{"path": "a", "content_base64": "!!"}]}}, 400),
        ]
        for method, path, kw, status in cases:
            headers = kw.pop("headers", {})
            r = api(roomy, method, path, headers=headers, **kw)
            assert r.status_code == status, (method, path, r.status_code, r.text)
            body = r.json()
            assert set(body) == {"reason", "message"} and body["message"], body
        assert roomy.alive()
    finally:
        api(roomy, "DELETE", f"/v1/sessions/{sid}")


def test_a_second_tenant_cannot_read_the_first_tenants_files(gw):
    a = api(gw, "POST", "/v1/sessions", token=TENANT_A).json()
    try:
        assert api(gw, "PUT", f"/v1/sessions/{a['id']}/files/secret.txt", token=TENANT_A, data=b"alpha's").status_code == 201
        for method in ("GET", "DELETE"):
            assert api(gw, method, f"/v1/sessions/{a['id']}/files/secret.txt", token=TENANT_B).status_code == 404
        assert api(gw, "PUT", f"/v1/sessions/{a['id']}/files/x.txt", token=TENANT_B, data=b"x").status_code == 404
        assert api(gw, "GET", f"/files/{a['id']}/secret.txt", token=TENANT_B).status_code == 404
        assert api(gw, "GET", f"/v1/sessions/{a['id']}/files/secret.txt", token=TENANT_A).content == b"alpha's"
    finally:
        api(gw, "DELETE", f"/v1/sessions/{a['id']}", token=TENANT_A)


def test_input_in_an_agent_execution_fails_at_once_with_a_clear_error(gw, session):
    """The agent API has no stdin: a cell that calls input() ends at once with
    an error that says so, and the session keeps working."""
    body = run(gw, session["id"], "x = input('name? ')", timeout_s=60)
    assert body["status"] == "error", body
    assert body["error"]["ename"] == "StdinNotImplementedError", body["error"]
    assert "input" in body["error"]["evalue"], body["error"]
    assert body["duration_ms"] < 30000, body  # not the cell timeout: nothing waits for an answer
    assert run(gw, session["id"], "6*7")["results"][0]["data"]["text/plain"] == "42"
