"""The Python SDK's pause and resume end to end against the real gateway's /v1
API (issue 15): Sandbox.pause()/resume(), the session model's lifecycle and
pause fields, the workspace while paused, auto_resume=False, and
on_idle="pause". The gateway runs the default runtime (runc), whose pause
keeps the files only: resume starts a new kernel on them (resumed_from
"files")."""
import time

import pytest

import sdk_support  # noqa: F401  (puts the SDK on sys.path)
from cellgate import CellgateError, NotFound, Sandbox, SessionNotFound
from cellgate.models import SessionInfo

# Under runc a pause keeps the workspace, not the kernel's memory.
MODE = "files"


def wait_paused(sb, within=30.0):
    """Polls info() until the session is paused; returns that SessionInfo."""
    deadline = time.monotonic() + within
    info = sb.info()
    while not info.paused and time.monotonic() < deadline:
        time.sleep(0.5)
        info = sb.info()
    assert info.paused, f"not paused within {within} s: state {info.state!r}, pause {info.pause}"
    return info


def settled(sb, within=10.0):
    """info() once the model no longer says paused (see
    test_the_model_says_resumed_as_soon_as_run_code_returns for why a
    model read right after an auto-resuming run_code may lag)."""
    deadline = time.monotonic() + within
    info = sb.info()
    while info.pause.get("paused") and time.monotonic() < deadline:
        time.sleep(0.2)
        info = sb.info()
    return info


def test_new_session_model_has_lifecycle_and_pause(gateway):
    with Sandbox(gateway.url, gateway.token, timeout=60) as sb:
        info = sb.info()
        assert info.lifecycle == {"on_idle": "delete", "auto_resume": True}, info.lifecycle
        assert info.paused is False
        p = info.pause
        assert p["paused"] is False and p["mode"] is None and p["since"] is None, p
        assert p["pauses"] == 0 and p["resumed_from"] is None, p
        assert isinstance(p["image_bytes"], int), p


def test_pause_keeps_files_and_resume_runs_again(gateway):
    with Sandbox(gateway.url, gateway.token, timeout=60) as sb:
        sb.upload("notes/kept.txt", b"uploaded before the pause\n")
        ex = sb.run_code("secret = 41\nopen('made.txt', 'w').write('written by the kernel')\nsecret + 1")
        assert ex.status == "ok" and ex.text == "42", ex.error

        paused = sb.pause()
        assert isinstance(paused, SessionInfo) and paused.id == sb.id
        assert paused.paused is True and paused.state == "paused"
        p = paused.pause
        assert p["paused"] is True and p["mode"] == MODE, p
        assert p["pauses"] == 1 and isinstance(p["since"], str) and p["since"], p
        assert isinstance(p["image_bytes"], int) and p["image_bytes"] >= 0, p

        # info() (and another client attaching) see it paused too.
        info = sb.info()
        assert info.paused and info.state == "paused" and info.pause["mode"] == MODE, info.pause
        other = Sandbox.connect(sb.id, gateway.url, gateway.token)
        assert other.info().paused
        listed = {s.id: s for s in Sandbox.list(gateway.url, gateway.token)}
        assert listed[sb.id].paused and listed[sb.id].pause["paused"] is True

        # The workspace can be listed and read while paused, and that does not resume it.
        top = {e.name: e for e in sb.list_files()}
        assert {"notes", "made.txt"} <= set(top), sorted(top)
        assert top["notes"].is_dir and top["made.txt"].size == len("written by the kernel")
        assert [e.name for e in sb.list_files("notes")] == ["kept.txt"]
        assert sb.download("notes/kept.txt") == b"uploaded before the pause\n"
        assert sb.download("made.txt") == b"written by the kernel"
        with pytest.raises(NotFound) as missing:
            sb.download("not-there.txt")
        assert not isinstance(missing.value, SessionNotFound)
        assert sb.info().paused, "reading files resumed the session"

        resumed = sb.resume()
        assert isinstance(resumed, SessionInfo) and resumed.id == sb.id
        assert resumed.paused is False and resumed.state != "paused"
        p = resumed.pause
        assert p["paused"] is False and p["mode"] is None and p["resumed_from"] == MODE, p
        assert p["pauses"] == 1, p

        # The files are still there, and the new kernel runs code.
        assert sb.download("notes/kept.txt") == b"uploaded before the pause\n"
        ex = sb.run_code("print(open('notes/kept.txt').read(), end='')\n"
                         "print(open('/workspace/made.txt').read())\n"
                         "'secret' in dir()")
        assert ex.status == "ok", ex.error
        assert ex.logs.stdout == "uploaded before the pause\nwritten by the kernel\n"
        assert ex.text == "False"  # files only: the variable went with the old kernel
        assert sb.run_code("6 * 7").text == "42"

        # Resuming a running session is a no-op that answers its model.
        again = sb.resume()
        assert again.paused is False and again.pause["pauses"] == 1 and again.pause["resumed_from"] == MODE


def test_a_second_pause_is_harmless_and_pause_counts(gateway):
    with Sandbox(gateway.url, gateway.token, timeout=60) as sb:
        sb.pause()
        twice = sb.pause()
        assert twice.paused and twice.pause["pauses"] == 1, twice.pause
        sb.resume()
        sb.run_code("open('cycle.txt', 'a').write('1')")
        info = sb.pause()
        assert info.pause["pauses"] == 2 and info.pause["mode"] == MODE, info.pause
        assert sb.resume().pause["resumed_from"] == MODE
        assert sb.run_code("open('cycle.txt').read()").text == "'1'"


def test_run_code_resumes_a_paused_session_by_itself(gateway):
    with Sandbox(gateway.url, gateway.token, timeout=60) as sb:
        sb.upload("data.csv", b"a,b\n1,2\n3,4\n")
        assert sb.pause().paused
        ex = sb.run_code("import pandas as pd\npd.read_csv('data.csv')['b'].sum()")
        assert ex.status == "ok" and ex.text == "6", (ex.status, ex.text, ex.error)
        info = settled(sb)
        assert not info.paused and info.pause["paused"] is False, (info.state, info.pause)
        assert info.pause["resumed_from"] == MODE and info.pause["pauses"] == 1, info.pause


def test_the_model_says_resumed_as_soon_as_run_code_returns(gateway):
    """Once a run_code that resumed a paused session has its answer, the
    session model agrees with itself: not paused, resumed from its files.
    Several cycles, since the gateway's bookkeeping races the cell."""
    with Sandbox(gateway.url, gateway.token, timeout=60) as sb:
        seen = []
        for cycle in range(1, 6):
            assert sb.pause().pause["pauses"] == cycle
            assert sb.run_code("6 * 7").text == "42"
            info = sb.info()
            seen.append((info.state, info.pause["paused"], info.pause["mode"], info.pause["resumed_from"],
                         info.pause["pauses"]))
            settled(sb)  # let the next pause find it resumed, whatever the first read said
        for cycle, (state, paused, mode, resumed_from, pauses) in enumerate(seen, 1):
            assert state != "paused" and pauses == cycle, seen
            assert paused is False and mode is None and resumed_from == MODE, \
                f"cycle {cycle}: state {state!r} but pause.paused {paused}, mode {mode!r}, " \
                f"resumed_from {resumed_from!r} (all cycles: {seen})"


def test_pause_right_after_an_auto_resuming_run_code(gateway):
    """A session that answered a cell is running: pausing it at once works
    (no 409 "restarting, pausing or resuming")."""
    with Sandbox(gateway.url, gateway.token, timeout=60) as sb:
        refused = []
        for cycle in range(1, 6):
            assert sb.pause().paused
            assert sb.run_code("1 + 1").text == "2"
            try:
                assert sb.pause().paused
            except CellgateError as e:
                refused.append((cycle, e.status, e.message))
                settled(sb)
                assert sb.pause().paused
            sb.resume()
        assert refused == [], f"pause() right after run_code was refused: {refused}"


def test_without_auto_resume_run_code_on_a_paused_session_is_refused(gateway):
    with Sandbox(gateway.url, gateway.token, timeout=60, auto_resume=False) as sb:
        assert sb.info().lifecycle == {"on_idle": "delete", "auto_resume": False}
        sb.upload("kept.txt", b"still here")
        assert sb.pause().paused
        # Plain JSON and streamed run_code: a clear 409, not a hang or a NotFound.
        for stream in (False, True):
            with pytest.raises(CellgateError) as refused:
                sb.run_code("1 + 1", stream=stream)
            e = refused.value
            assert type(e) is CellgateError, repr(e)
            assert e.status == 409, (stream, e.status, e.reason, e.message)
            assert "paused" in e.message and "resume" in e.message, e.message
        # The refusal did not resume it.
        info = sb.info()
        assert info.paused and info.pause["pauses"] == 1, info.pause
        # Asked to, it resumes, and its files are there.
        assert sb.resume().pause["resumed_from"] == MODE
        ex = sb.run_code("open('kept.txt').read()")
        assert ex.status == "ok" and ex.text == "'still here'", (ex.status, ex.text, ex.error)


def test_idle_session_with_on_idle_pause_is_paused_and_the_next_run_code_resumes_it(gateway):
    with Sandbox(gateway.url, gateway.token, timeout=60, idle_timeout=2, on_idle="pause") as sb:
        assert sb.limits["idle_timeout_s"] == 2, sb.limits
        assert sb.info().lifecycle == {"on_idle": "pause", "auto_resume": True}
        assert sb.run_code("x = 41\nopen('idle.txt', 'w').write('kept while idle')").status == "ok"
        info = wait_paused(sb, within=30)
        assert info.pause["mode"] == MODE and info.pause["pauses"] >= 1, info.pause
        # Paused, not culled: past its idle limit it is still there, still paused.
        time.sleep(4)
        info = sb.info()
        assert info.paused, info.state
        assert sb.id in [s.id for s in Sandbox.list(gateway.url, gateway.token)]
        assert sb.download("idle.txt") == b"kept while idle"
        # The next cell resumes it and runs on a new kernel over the same files.
        ex = sb.run_code("print(open('idle.txt').read())\n'x' in dir()")
        assert ex.status == "ok", ex.error
        assert ex.logs.stdout == "kept while idle\n" and ex.text == "False", (ex.logs.stdout, ex.text)
        info = settled(sb)
        assert info.pause["resumed_from"] == MODE, info.pause
        # Idle again, it is paused again.
        info = wait_paused(sb, within=30)
        assert info.pause["pauses"] >= 2, info.pause


def test_closing_a_paused_session_deletes_it(gateway):
    sb = Sandbox(gateway.url, gateway.token, timeout=60)
    sb.upload("f.txt", b"x")
    assert sb.pause().paused
    sb.close()
    assert sb.id not in [s.id for s in Sandbox.list(gateway.url, gateway.token)]
    for call in (sb.resume, sb.pause, sb.info):
        with pytest.raises(SessionNotFound):
            call()
