"""The Python SDK end to end against the real gateway's /v1 API: sessions,
run_code (values, logs, errors, images, state, streaming, timeouts, output
limits), files both ways, one-shot runs and errors."""
import hashlib
import io
import re
import time

import pytest

import sdk_support  # noqa: F401  (puts the SDK on sys.path)
from cellgate import (CellgateError, Execution, NotFound, Result, Sandbox, SessionNotFound, run_once)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
ANSI = re.compile(r"\x1b\[")


# --- sessions ----------------------------------------------------------------------------------

def test_session_model_limits_and_listing(gateway):
    with Sandbox(gateway.url, gateway.token, timeout=45, idle_timeout=300) as sb:
        assert sb.id
        assert sb.limits["timeout_s"] == 45
        assert sb.limits["idle_timeout_s"] == 300
        for key in ("lifetime_s", "output_limit_bytes"):
            assert isinstance(sb.limits[key], int) and sb.limits[key] > 0, sb.limits
        info = sb.info()
        assert info.id == sb.id and info.kernel == "python3"
        assert info.state in ("idle", "busy", "starting")
        assert info.created and info.expires_at
        assert sb.id in [s.id for s in Sandbox.list(gateway.url, gateway.token)]
    # Leaving the with-block deleted it.
    assert sb.id not in [s.id for s in Sandbox.list(gateway.url, gateway.token)]


def test_url_and_token_from_environment(gateway, monkeypatch):
    monkeypatch.setenv("CELLGATE_URL", gateway.url)
    monkeypatch.setenv("CELLGATE_TOKEN", gateway.token)
    with Sandbox() as sb:
        assert sb.run_code("21 * 2").text == "42"


def test_connect_attaches_to_a_live_session(gateway, sandbox):
    sandbox.run_code("shared_marker = 'attached'")
    other = Sandbox.connect(sandbox.id, gateway.url, gateway.token)
    assert other.id == sandbox.id
    assert other.run_code("shared_marker").text == "'attached'"


def test_kernel_env_reaches_the_kernel(gateway):
    with Sandbox(gateway.url, gateway.token, env={"KERNEL_USERNAME": "alice"}) as sb:
        assert sb.run_code("import os; os.environ.get('KERNEL_USERNAME')").text == "'alice'"


# --- run_code ----------------------------------------------------------------------------------

def test_value_stdout_and_stderr(sandbox):
    ex = sandbox.run_code("import sys\nprint('hello')\nprint('warn', file=sys.stderr)\n6 * 7")
    assert isinstance(ex, Execution)
    assert ex.status == "ok" and ex.ok and ex.error is None
    assert ex.text == "42"
    assert ex.logs.stdout == "hello\n"
    assert ex.logs.stderr == "warn\n"
    assert [r.is_main_result for r in ex.results] == [True]
    assert ex.results[0].type == "execute_result"
    assert isinstance(ex.execution_count, int) and ex.execution_count >= 1
    assert isinstance(ex.duration_ms, int) and ex.duration_ms >= 0
    assert not ex.truncated and not ex.kernel_restarted


def test_no_value_gives_no_main_result(sandbox):
    ex = sandbox.run_code("x = 1")
    assert ex.status == "ok" and ex.text is None and ex.results == []


def test_state_persists_across_calls(sandbox):
    first = sandbox.run_code("counter = 41")
    second = sandbox.run_code("counter += 1\ncounter")
    assert second.text == "42"
    assert second.execution_count == first.execution_count + 1


def test_error_has_name_value_and_tracebacks(sandbox):
    ex = sandbox.run_code("def inner():\n    return 1 / 0\ninner()")
    assert ex.status == "error" and not ex.ok
    assert ex.error.name == "ZeroDivisionError"
    assert "division by zero" in ex.error.value
    assert ex.error.traceback and any(ANSI.search(line) for line in ex.error.traceback)
    assert not ANSI.search(ex.error.traceback_text)
    assert "ZeroDivisionError" in ex.error.traceback_text and "inner" in ex.error.traceback_text
    # The kernel is still usable.
    assert sandbox.run_code("'fine'").text == "'fine'"


def test_matplotlib_figure_is_a_png_result(sandbox):
    ex = sandbox.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.title('t')\nplt.show()\nprint('drawn')")
    assert ex.status == "ok", ex.error
    images = [r for r in ex.results if r.png]
    assert len(images) == 1
    img = images[0]
    assert img.png.startswith(PNG_MAGIC) and len(img.png) > 1000
    assert img.is_main_result is False and img.type == "display_data"
    assert img.text.startswith("<Figure")
    assert img._repr_png_() == img.png and "image/png" in img.formats()
    assert ex.logs.stdout == "drawn\n"


def test_rich_mime_types(sandbox):
    ex = sandbox.run_code(
        "from IPython.display import display, HTML, Markdown, JSON, SVG, Latex\n"
        "display(HTML('<b>bold</b>'))\n"
        "display(Markdown('# title'))\n"
        "display(JSON({'a': [1, 2]}))\n"
        "display(SVG('<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"4\" height=\"4\"></svg>'))\n"
        "display(Latex(r'$x^2$'))\n"
        "import pandas as pd\npd.DataFrame({'n': [1, 2]})")
    assert ex.status == "ok", ex.error
    html, md, js, svg, latex, frame = ex.results
    assert html.html == "<b>bold</b>" and html._repr_html_() == "<b>bold</b>"
    assert md.markdown == "# title"
    assert js.json == {"a": [1, 2]}
    assert svg.svg.startswith("<svg")
    assert latex.latex == "$x^2$"
    assert frame.is_main_result and "<table" in frame.html and "n" in frame.text


def test_streaming_callbacks_arrive_in_order_and_live(sandbox):
    events = []
    started = time.monotonic()

    def on(kind):
        return lambda payload: events.append((kind, payload, time.monotonic() - started))

    ex = sandbox.run_code(
        "import sys, time\n"
        "print('first', flush=True)\n"
        "time.sleep(2)\n"
        "from IPython.display import display, HTML\n"
        "display(HTML('<i>shown</i>'))\n"
        "print('to stderr', file=sys.stderr, flush=True)\n"
        "time.sleep(0.5)\n"
        "print('second', flush=True)\n"
        "'value'",
        on_stdout=on("stdout"), on_stderr=on("stderr"), on_result=on("result"), on_error=on("error"))
    finished = time.monotonic() - started
    kinds = [(k, p if isinstance(p, str) else (p.html or p.text)) for k, p, _ in events]
    assert kinds == [("stdout", "first\n"), ("result", "<i>shown</i>"), ("stderr", "to stderr\n"),
                     ("stdout", "second\n"), ("result", "'value'")], kinds
    # 'first' arrived while the cell was still sleeping, not with the end.
    assert finished - events[0][2] >= 1.5, (events[0][2], finished)
    assert events[1][1].is_main_result is False and events[-1][1].is_main_result is True
    # The end event's complete result matches what streamed.
    assert ex.status == "ok"
    assert ex.logs.stdout == "first\nsecond\n" and ex.logs.stderr == "to stderr\n"
    assert ex.text == "'value'" and len(ex.results) == 2


def test_streaming_reports_the_error(sandbox):
    seen = []
    ex = sandbox.run_code("print('before')\nraise KeyError('boom')", on_stdout=seen.append, on_error=seen.append)
    assert seen[0] == "before\n"
    assert seen[1].name == "KeyError" and "boom" in seen[1].value
    assert ex.status == "error" and ex.error.name == "KeyError"


def test_timeout_keeps_output_and_session(gateway):
    with Sandbox(gateway.url, gateway.token) as sb:
        started = time.monotonic()
        ex = sb.run_code("import time\nprint('before sleep', flush=True)\ntime.sleep(60)\nprint('never')", timeout=3)
        took = time.monotonic() - started
        assert ex.status == "timeout", ex.raw
        assert "before sleep" in ex.logs.stdout and "never" not in ex.logs.stdout
        assert took < 45, took
        assert isinstance(ex.kernel_restarted, bool)
        # The session still runs code afterwards.
        assert sb.run_code("1 + 1").text == "2"


def test_timeout_while_streaming(sandbox):
    chunks = []
    ex = sandbox.run_code("import time\nprint('tick', flush=True)\ntime.sleep(60)", timeout=2,
                          on_stdout=chunks.append)
    assert ex.status == "timeout"
    assert chunks[0] == "tick\n"


def test_a_callback_that_raises_disconnects_and_interrupts_the_cell(gateway):
    with Sandbox(gateway.url, gateway.token) as sb:
        def stop(_text):
            raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            sb.run_code("import time\nprint('go', flush=True)\ntime.sleep(30)\nopen('late.txt', 'w').write('x')",
                        on_stdout=stop)
        started = time.monotonic()
        after = sb.run_code("import os\nos.path.exists('late.txt')")
        assert after.status == "ok" and after.text == "False", after.raw
        assert time.monotonic() - started < 25


def test_kernel_death_is_reported_and_the_session_recovers(gateway):
    with Sandbox(gateway.url, gateway.token) as sb:
        ex = sb.run_code("import os\nos.kill(os.getpid(), 9)")
        assert ex.status == "kernel_died" and not ex.ok
        assert sb.run_code("'back'").text == "'back'"


def test_output_limit_truncates_with_flag_and_marker(gateway):
    limit = 20_000
    with Sandbox(gateway.url, gateway.token, output_limit=limit) as sb:
        assert sb.limits["output_limit_bytes"] == limit
        ex = sb.run_code("for i in range(5000):\n    print('line %05d ' % i + 'x' * 90)\n'done'")
        assert ex.status == "ok"
        assert ex.truncated and ex.truncated.stdout
        assert re.search(r"\n\[cellgate: output truncated after \d+ bytes\]\n$", ex.logs.stdout), \
            ex.logs.stdout[-200:]
        kept = ex.logs.stdout.split("\n[cellgate: output truncated")[0]
        assert len(kept.encode()) <= limit
        assert kept.startswith("line 00000 ")   # what came before is kept
        assert ex.text == "'done'"
        # A small output on the same session is not truncated.
        small = sb.run_code("print('ok')")
        assert small.logs.stdout == "ok\n" and not small.truncated


def test_output_limit_is_shared_and_flags_the_stream_that_lost_output(gateway):
    """stdout + stderr share one cap: stderr written after stdout used it up is
    lost, and its flag must say so (a caller reading truncated.stderr == False
    would take the empty stderr as complete)."""
    with Sandbox(gateway.url, gateway.token, output_limit=10_000) as sb:
        ex = sb.run_code("import sys\nprint('o' * 50_000)\nsys.stdout.flush()\nprint('late error', file=sys.stderr)")
        assert ex.truncated.stdout
        assert len((ex.logs.stdout + ex.logs.stderr).split("\n[cellgate: output truncated")[0].encode()) <= 10_000
        assert "late error" not in ex.logs.stderr
        assert ex.truncated.stderr, ex.raw["truncated"]


# --- files -------------------------------------------------------------------------------------

def test_produced_files_listed_and_downloaded_byte_identical(sandbox, connection, tmp_path):
    ex = sandbox.run_code(
        "import os, hashlib\n"
        "os.makedirs('out', exist_ok=True)\n"
        "blob = os.urandom(300_000)\n"
        "open('out/blob.bin', 'wb').write(blob)\n"
        "import matplotlib.pyplot as plt\n"
        "fig, ax = plt.subplots(); ax.bar([1, 2], [3, 4]); fig.savefig('out/chart.png'); plt.close(fig)\n"
        "hashlib.sha256(blob).hexdigest()")
    assert ex.status == "ok", ex.error
    digest = ex.text.strip("'")
    files = {f.path: f for f in ex.files}
    assert set(files) >= {"out/blob.bin", "out/chart.png"}, files
    blob, chart = files["out/blob.bin"], files["out/chart.png"]
    assert blob.size == 300_000 and blob.change == "created"
    assert chart.mime_type == "image/png" and chart.change == "created"
    assert chart.url.startswith(sandbox.url) and chart.url.endswith(f"/v1/sessions/{sandbox.id}/files/out/chart.png")

    data = sandbox.download("out/blob.bin")
    assert len(data) == 300_000 and hashlib.sha256(data).hexdigest() == digest
    local = sandbox.download(blob, tmp_path / "copy" / "blob.bin")
    assert (tmp_path / "copy" / "blob.bin").read_bytes() == data and str(local).endswith("blob.bin")
    assert sandbox.download("out/chart.png").startswith(PNG_MAGIC)
    # The workspace, or one directory of it, as a tar archive.
    import io
    import tarfile
    with tarfile.open(fileobj=io.BytesIO(sandbox.export_workspace(path="out"))) as t:
        assert hashlib.sha256(t.extractfile("blob.bin").read()).hexdigest() == digest
        assert "chart.png" in t.getnames()
    saved = sandbox.export_workspace(tmp_path / "ws.tar")
    with tarfile.open(saved) as t:
        assert {"out", "out/blob.bin", "out/chart.png"} <= set(t.getnames())
    report = sandbox.import_workspace(saved, path="restored")
    assert report["skipped_count"] == 0 and report["files"] >= 2, report
    assert sandbox.download("restored/out/blob.bin") == data
    # A new session starts on the archive (from a path, then a file object),
    # with its own request's limits.
    for source in (saved, open(saved, "rb")):
        with Sandbox(**connection, workspace=source, lifetime=600) as moved:
            assert moved.imported["files"] >= 2 and moved.imported["skipped_count"] == 0, moved.imported
            assert moved.limits["lifetime_s"] == 600
            assert moved.run_code("import hashlib\nhashlib.sha256(open('out/blob.bin','rb').read()).hexdigest()").text \
                == repr(digest)
        if hasattr(source, "close"):
            source.close()
    with pytest.raises(CellgateError) as bad:
        Sandbox(**connection, workspace=b"not a tar archive" * 64)
    assert bad.value.status == 400 and "archive" in str(bad.value)

    # Changing a file again reports it, as changed rather than created (the
    # contract does not name the value).
    again = sandbox.run_code("open('out/blob.bin', 'ab').write(b'more')")
    changed = {f.path: f for f in again.files}
    assert set(changed) == {"out/blob.bin"}
    assert changed["out/blob.bin"].change not in ("created", None) and changed["out/blob.bin"].size == 300_004


def test_upload_bytes_path_and_fileobj_then_read_in_code(sandbox, tmp_path):
    payload = bytes(range(256)) * 1000
    info = sandbox.upload("in/raw.bin", payload)
    assert info.path == "in/raw.bin" and info.size == len(payload)
    local = tmp_path / "data.csv"
    local.write_text("a,b\n1,2\n3,4\n")
    assert sandbox.upload("in/data.csv", str(local)).size == local.stat().st_size
    assert sandbox.upload("in/deep/er/stream.txt", io.BytesIO(b"from a file object")).size == 18

    ex = sandbox.run_code(
        "import hashlib, pandas as pd\n"
        "print(hashlib.sha256(open('in/raw.bin', 'rb').read()).hexdigest())\n"
        "print(open('in/deep/er/stream.txt').read())\n"
        "int(pd.read_csv('in/data.csv')['b'].sum())")
    assert ex.status == "ok", ex.error
    assert ex.logs.stdout == hashlib.sha256(payload).hexdigest() + "\nfrom a file object\n"
    assert ex.text == "6"
    # Replacing a file works and the new content wins.
    assert sandbox.upload("in/data.csv", b"a,b\n5,6\n").size == 8
    assert sandbox.run_code("open('in/data.csv').read()").text == repr("a,b\n5,6\n")
    assert sandbox.download("in/raw.bin") == payload


def test_upload_many_multipart(sandbox):
    infos = sandbox.upload_many({"one.txt": b"1", "two.txt": b"22"}, directory="multi")
    assert sorted((f.path, f.size) for f in infos) == [("multi/one.txt", 1), ("multi/two.txt", 2)]
    assert sandbox.download("multi/two.txt") == b"22"


def test_list_and_remove(sandbox):
    sandbox.upload("tree/a.txt", b"aaa")
    sandbox.upload("tree/sub/b.txt", b"bb")
    top = {e.name: e for e in sandbox.list_files()}
    assert top["tree"].is_dir
    entries = {e.name: e for e in sandbox.list_files("tree")}
    assert set(entries) == {"a.txt", "sub"}
    assert entries["a.txt"].type == "file" and entries["a.txt"].size == 3 and entries["a.txt"].path == "tree/a.txt"
    assert entries["a.txt"].mime_type == "text/plain" and entries["a.txt"].modified
    assert entries["sub"].type == "directory"

    sandbox.remove("tree/a.txt")
    assert {e.name for e in sandbox.list_files("tree")} == {"sub"}
    with pytest.raises(NotFound) as missing:
        sandbox.download("tree/a.txt")
    assert missing.value.status == 404 and missing.value.message
    sandbox.remove("tree")   # a directory: recursively
    assert "tree" not in {e.name for e in sandbox.list_files()}


def test_path_escapes_are_refused(sandbox):
    for bad in ("../../etc/passwd", "a/../../etc/passwd"):
        with pytest.raises(CellgateError) as refused:
            sandbox.download(bad)
        assert refused.value.status in (400, 403), (bad, refused.value)
        assert not isinstance(refused.value, SessionNotFound)


# --- one-shot, errors --------------------------------------------------------------------------

def test_run_once_with_inline_files(gateway, tmp_path):
    local = tmp_path / "numbers.txt"
    local.write_text("1\n2\n3\n")
    ex = run_once(
        "import os\n"
        "total = sum(int(x) for x in open('numbers.txt')) + len(open('extra/data.bin', 'rb').read())\n"
        "os.makedirs('out', exist_ok=True)\n"
        "open('out/total.txt', 'w').write(str(total))\n"
        "print('total', total)\ntotal",
        files={"numbers.txt": str(local), "extra/data.bin": b"\x00" * 10},
        url=gateway.url, token=gateway.token)
    assert ex.status == "ok", ex.error
    assert ex.logs.stdout == "total 16\n" and ex.text == "16"
    produced = {f.path: f for f in ex.files}
    assert produced["out/total.txt"].content == b"16"
    # Nothing persists: the sandbox is gone.
    assert ex.raw.get("id") is None or ex.raw["id"] not in [s.id for s in Sandbox.list(gateway.url, gateway.token)]


def test_run_once_error(gateway):
    ex = run_once("undefined_name", url=gateway.url, token=gateway.token)
    assert ex.status == "error" and ex.error.name == "NameError"


def test_session_404_after_close(gateway):
    sb = Sandbox(gateway.url, gateway.token)
    sid = sb.id
    sb.close()
    sb.close()   # harmless
    with pytest.raises(SessionNotFound) as gone:
        sb.run_code("1")
    assert gone.value.status == 404 and gone.value.reason and gone.value.message
    with pytest.raises(SessionNotFound):
        sb.info()
    with pytest.raises(SessionNotFound):
        sb.run_code("1", on_stdout=print)
    with pytest.raises(SessionNotFound):
        Sandbox.connect(sid, gateway.url, gateway.token)
    with pytest.raises(NotFound):
        sb.upload("x.txt", b"x")


def test_wrong_token_is_a_cellgate_error(gateway):
    with pytest.raises(CellgateError) as denied:
        Sandbox(gateway.url, "not-the-token")
    assert denied.value.status == 403 and denied.value.message
    with pytest.raises(CellgateError) as missing:
        Sandbox.list(gateway.url, "")
    assert missing.value.status == 401


def test_result_object_without_gateway():
    import base64
    r = Result({"image/png": base64.b64encode(PNG_MAGIC).decode(), "text/plain": "<img>",
                "application/json": {"k": 1}}, {}, False)
    assert r.png == PNG_MAGIC and r.text == "<img>" and r.json == {"k": 1} and r.html is None
    assert "image/png" in repr(r)


def test_usage_and_the_ledger(sandbox):
    ex = sandbox.run_code("import time\nt = time.process_time()\nwhile time.process_time() - t < 0.5: pass\n"
                          "open('ledger.txt', 'w').write('abc')")
    u = ex.usage
    assert ex.execution_id == u.execution_id and u.status == "ok"
    assert u.cpu_s >= 0.4 and u.peak_memory_bytes > 0 and u.wall_ms >= 500
    assert {"path": "ledger.txt", "size": 3} in u.files["created"]
    records = sandbox.executions()
    assert records[-1].execution_id == u.execution_id and records[-1].seq == len(records)
    assert sandbox.execution(u.execution_id).code_sha256 == u.code_sha256
    assert [r.seq for r in sandbox.executions(after=records[-1].seq)] == []
