"""Piston's v2 API (issue 37) on the real gateway: every built-in runtime of
the languages image run in real runc sandboxes — hello world with stdin and
arguments, a compile error in `compile`, a runtime error with its exit
code, an endless loop stopped at run_timeout (TO), output past the limit
(OL), a memory hog and a fork bomb contained, no network — then Piston's
400/415 messages, the WebSocket job (stdin, a signal, its close codes), the
anonymous tenant and the admission queue's 429.

Needs root, runc, build/bin/cellgate and the languages image; skipped
without them unless CELLGATE_REQUIRE_SANDBOX=1.
"""
import concurrent.futures
import json
import socket
import threading
import time
import uuid

import pytest
import requests
import websocket

from support.gateway import Gateway
from support.prerequisites import IMAGE_STORE, require, runtime_missing
from support.programs import COMPILED, PROGRAMS, program

TOKEN = "piston-" + uuid.uuid4().hex
OUTPUT_MAX = 4096
# Every runtime the issue names, as Piston names them (Kotlin for "Kotlin or Scala").
REQUIRED = {"c", "c++", "rust", "go", "java", "kotlin", "python", "javascript", "typescript", "ruby", "php",
            "perl", "lua", "bash", "rscript"}


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    require("Piston's API", runtime_missing("runc") or (
        None if (IMAGE_STORE / "languages" / "current" / "rootfs").is_dir() else "the languages image is not built"))
    d = tmp_path_factory.mktemp("piston")
    tokens = d / "tokens.json"
    tokens.write_text(json.dumps([{"token": TOKEN, "tenant": "piston-" + uuid.uuid4().hex[:8]}]))
    # The runs' sandboxes with a 768 MiB memory cap, so a hog meets it soon
    # (a config that names kernelspecs names them all).
    config = d / "config.json"
    config.write_text(json.dumps({"kernelspecs": {
        "python3": {}, "runs": {"image": "languages", "limits": {"memory_bytes": 768 << 20}}}}))
    g = Gateway("--config", str(config), "--tokens-file", str(tokens), "--piston-anonymous-tenant", "anonymous-" + uuid.uuid4().hex[:8],
                "--piston-output-max-size", str(OUTPUT_MAX), "--runtime-pool", "4", "--max-kernels", "16",
                # Six jobs compile at once on two cores here (kotlinc alone takes seconds).
                "--piston-compile-timeout", "30000",
                "--max-runs-per-tenant", "6", "--max-queued-runs-per-tenant", "6")
    g.start()
    yield g
    g.stop()
    g.cleanup()  # a warm sandbox whose start was under way at the stop


def execute(gw, body, token=TOKEN, prefix="/api/v2"):
    headers = {"Authorization": f"token {token}"} if token else {}
    r = requests.post(f"{gw.url}{prefix}/execute", json=body, headers=headers, timeout=180)
    return r


@pytest.fixture(scope="module")
def runtimes(gw):
    r = requests.get(f"{gw.url}/api/v2/runtimes", timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def job(runtimes, name, source, **extra):
    """A Piston job for one of programs.py's runtimes ("javascript/deno" picks a toolchain)."""
    language, _, toolchain = name.partition("/")
    matches = [rt for rt in runtimes if rt["language"] == language and (not toolchain or rt.get("runtime") == toolchain)]
    assert matches, f"no runtime {name} in {runtimes}"
    return {"language": language, "version": matches[0]["version"], "files": [{"content": source}], **extra}


def run_all(gw, runtimes, behaviour, port=0, **extra):
    """`behaviour` in every runtime that has it: {runtime: response JSON}."""
    return run_many(gw, runtimes, {behaviour: extra}, port)[behaviour]


def run_many(gw, runtimes, behaviours, port=0):
    """Each behaviour ({behaviour: the job's extra fields}) in every runtime
    that has it, six jobs at a time (the tenant's cap), so one job's wait for
    its time limit overlaps the others': {behaviour: {runtime: response JSON}}."""
    jobs = [(b, n) for b in behaviours for n in PROGRAMS if b in PROGRAMS[n]]

    def one(item):
        behaviour, name = item
        r = execute(gw, job(runtimes, name, program(name, behaviour, port), **behaviours[behaviour]))
        assert r.status_code == 200, f"{name}: {r.status_code} {r.text[:500]}"
        if behaviour != "broken" and "compile" in r.json():
            assert r.json()["compile"]["code"] == 0, (name, behaviour, r.json()["compile"])
        return item, r.json()

    out = {b: {} for b in behaviours}
    with concurrent.futures.ThreadPoolExecutor(6) as pool:
        for (behaviour, name), res in pool.map(one, jobs):
            out[behaviour][name] = res
    return out


def test_every_runtime_is_listed_with_its_version_and_aliases(gw, runtimes):
    languages = {rt["language"] for rt in runtimes}
    assert REQUIRED <= languages, REQUIRED - languages
    for rt in runtimes:
        assert rt["version"][0].isdigit() and isinstance(rt["aliases"], list), rt
    by = {(rt["language"], rt.get("runtime")): rt for rt in runtimes}
    assert "py" in by[("python", None)]["aliases"] and "js" in by[("javascript", "node")]["aliases"]
    assert by[("javascript", "deno")]["version"] == by[("typescript", "deno")]["version"]
    # The hosted Piston's prefix, and packages: every runtime here is installed.
    assert requests.get(f"{gw.url}/api/v2/piston/runtimes", timeout=30).json() == runtimes
    packages = requests.get(f"{gw.url}/api/v2/packages", timeout=30).json()
    assert {(p["language"], p["language_version"]) for p in packages} == {(rt["language"], rt["version"]) for rt in runtimes}
    assert all(p["installed"] is True for p in packages)


def test_every_runtime_runs_hello_world_with_stdin_and_arguments(gw, runtimes):
    results = run_all(gw, runtimes, "hello", stdin="abc\n", args=["x", "y z"])
    for name, res in results.items():
        run = res["run"]
        assert run["stdout"].splitlines() == ["hello abc", "arg x", "arg y z"], (name, res)
        assert run["code"] == 0 and run["signal"] is None and run["status"] is None, (name, res)
        assert run["output"].startswith("hello abc"), (name, res)
        # Measured from the sandbox's cgroup: the memory a stage took above
        # what the sandbox held before it (a small native program's may not
        # show), its CPU time, its wall time.
        assert run["wall_time"] >= 0 and run["cpu_time"] >= 0 and run["memory"] >= 0, (name, run)
        if name in ("java", "python", "javascript/node"):
            assert run["memory"] > 1 << 20, (name, run)
        if name.partition("/")[0] in COMPILED:
            assert res["compile"]["code"] == 0 and res["compile"]["status"] is None, (name, res["compile"])
        else:
            assert "compile" not in res, name


def test_every_runtime_reports_a_runtime_error_and_every_compiler_a_compile_error(gw, runtimes):
    for name, res in run_all(gw, runtimes, "fail").items():
        run = res["run"]
        assert run["code"] == 3 and run["status"] == "RE" and run["signal"] is None, (name, run)
        assert "boom" in run["stderr"] and run["message"] == "Exited with error status 3", (name, run)
    broken = run_all(gw, runtimes, "broken")
    assert set(broken) == COMPILED
    for name, res in broken.items():
        compile_ = res["compile"]
        assert compile_["code"] not in (0, None) and compile_["status"] == "RE", (name, compile_)
        assert compile_["stderr"] or compile_["stdout"], (name, compile_)
        # Piston's backward compatibility: the run stage is the failed compile.
        assert res["run"] == compile_, name


def test_every_runtime_is_stopped_at_its_limits_and_contained(gw, runtimes):
    started = time.monotonic()
    results = run_many(gw, runtimes, {"loop": {"run_timeout": 1000}, "flood": {"run_timeout": 3000},
                                      "hog": {"run_timeout": 3000}, "forkbomb": {"run_timeout": 2000}})
    for name, res in results["loop"].items():
        run = res["run"]
        assert run["status"] == "TO" and run["signal"] == "SIGKILL" and run["code"] is None, (name, run)
        assert run["wall_time"] < 5000, (name, run)
    for name, res in results["flood"].items():
        run = res["run"]
        assert run["status"] == "OL" and run["signal"] == "SIGKILL", (name, run)
        assert len(run["stdout"]) == OUTPUT_MAX and run["stdout"].startswith("xxxx"), (name, len(run["stdout"]))
    for name, res in results["hog"].items():
        # The sandbox's memory cap, or the runtime's own out-of-memory error.
        assert res["run"]["status"] in ("SG", "RE", "TO"), (name, res["run"])
        assert res["run"]["code"] != 0, (name, res["run"])
    for name, res in results["forkbomb"].items():
        # Stopped at the time limit, or by the pids cap's refusals (an error,
        # or a flood of them on stderr).
        assert res["run"]["status"] in ("TO", "RE", "SG", "EL"), (name, res["run"])
    # Fewer than a minute for all of it, and the gateway runs the next job as ever.
    assert time.monotonic() - started < 300
    again = execute(gw, job(runtimes, "python", 'print("still here")')).json()
    assert again["run"]["stdout"] == "still here\n"


def test_no_runtime_reaches_the_network(gw, runtimes):
    accepted = []
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        listener.settimeout(0.2)
        stop = threading.Event()

        def accept():
            while not stop.is_set():
                try:
                    accepted.append(listener.accept()[0])
                except OSError:
                    pass
        t = threading.Thread(target=accept)
        t.start()
        try:
            results = run_all(gw, runtimes, "connect", port=listener.getsockname()[1], run_timeout=3000)
        finally:
            stop.set()
            t.join()
    for name, res in results.items():
        assert "refused" in res["run"]["stdout"] and "connected" not in res["run"]["stdout"], (name, res["run"])
    assert accepted == [], "a sandbox reached the host's loopback"


def test_bad_bodies_get_pistons_statuses_and_messages(gw, runtimes):
    url = f"{gw.url}/api/v2/execute"
    for form in ({"Content-Type": "application/x-www-form-urlencoded"}, {"Content-Type": "application/xml"}):
        r = requests.post(url, data="{}", headers=form, timeout=30)
        assert r.status_code == 415 and r.json()["message"] == "requests must be of type application/json"
    python = next(rt for rt in runtimes if rt["language"] == "python")
    cases = [
        ({"version": "*", "files": [{"content": "1"}]}, "language is required as a string"),
        ({"language": "python", "files": [{"content": "1"}]}, "version is required as a string"),
        ({"language": "python", "version": "*"}, "files is required as an array"),
        ({"language": "python", "version": "*", "files": [{"name": "a.py"}]}, "files[0].content is required as a string"),
        ({"language": "python", "version": "9.9.9", "files": [{"content": "1"}]}, "python-9.9.9 runtime is unknown"),
        ({"language": "cobol", "version": "*", "files": [{"content": "1"}]}, "cobol-* runtime is unknown"),
        ({"language": "python", "version": "*", "files": [{"content": "MQ==", "encoding": "base64"}]},
         "files must include at least one utf8 encoded file"),
        ({"language": "python", "version": "*", "files": [{"content": "1"}], "run_timeout": 999999},
         "run_timeout cannot exceed the configured limit of 3000"),
        ({"language": "python", "version": "*", "files": [{"content": "1"}], "compile_memory_limit": "lots"},
         "If specified, compile_memory_limit must be a number"),
        ({"language": "python", "version": "*", "files": [{"content": "1"}], "run_cpu_time": -5},
         "run_cpu_time must be non-negative"),
    ]
    for body, message in cases:
        r = requests.post(url, json=body, timeout=30)
        assert r.status_code == 400 and r.json()["message"] == message, (body, r.status_code, r.text)
    # A version by its prefix, an alias, base64 files beside the entry point, the hosted prefix.
    body = {"language": "py", "version": python["version"].split(".")[0], "files": [
        {"name": "main.py", "content": "import helper\nprint(helper.V)"},
        {"name": "helper.py", "content": "Vl89NDI=", "encoding": "base64"}]}
    body["files"][1]["content"] = "ViA9IDQy"  # "V = 42"
    r = execute(gw, body, token=None, prefix="/api/v2/piston")
    assert r.status_code == 200 and r.json()["run"]["stdout"] == "42\n", r.text
    assert r.json()["language"] == "python" and r.json()["version"] == python["version"]
    # A wrong token is refused even though anonymous requests are let in.
    assert execute(gw, body, token="wrong-" + uuid.uuid4().hex).status_code == 403
    # The server kept serving through all of it.
    assert requests.get(f"{gw.url}/api/v2/runtimes", timeout=30).status_code == 200


def connect(gw):
    return websocket.create_connection(f"{gw.ws_url}/api/v2/connect", timeout=60)


def events_until_close(ws):
    events = []
    while True:
        op, data = ws.recv_data(control_frame=True)
        if op == websocket.ABNF.OPCODE_CLOSE:
            return events, int.from_bytes(data[:2], "big"), data[2:].decode()
        if op == websocket.ABNF.OPCODE_TEXT:
            events.append(json.loads(data))


def test_websocket_job_with_stdin_a_signal_and_pistons_close_codes(gw, runtimes):
    python = next(rt for rt in runtimes if rt["language"] == "python")
    ws = connect(gw)
    ws.send(json.dumps({"type": "init", "language": "python", "version": python["version"], "files": [{"content":
        "import sys\nfor line in sys.stdin:\n    print('got', line.strip(), flush=True)\n"}], "run_timeout": 3000}))
    first = [json.loads(ws.recv()) for _ in range(2)]
    assert first == [{"type": "runtime", "language": "python", "version": python["version"]},
                     {"type": "stage", "stage": "run"}]
    ws.send(json.dumps({"type": "data", "stream": "stdin", "data": "one\n"}))
    out = ""
    while out != "got one\n":  # as the program writes it: in one piece or several
        event = json.loads(ws.recv())
        assert event["type"] == "data" and event["stream"] == "stdout", event
        out += event["data"]
        assert "got one\n".startswith(out), out
    ws.send(json.dumps({"type": "signal", "signal": "SIGKILL"}))
    events, code, reason = events_until_close(ws)
    exit_ = events[-1]
    assert exit_["type"] == "exit" and exit_["stage"] == "run" and exit_["signal"] == "SIGKILL", events
    assert (code, reason) == (4999, "Job Completed")
    ws.close()

    ws = connect(gw)  # nothing sent in a second
    assert events_until_close(ws)[1:] == (4001, "Initialization Timeout")
    ws = connect(gw)
    ws.send(json.dumps({"type": "data", "stream": "stdin", "data": "x"}))
    assert events_until_close(ws)[1:] == (4003, "Not yet initialized")
    ws = connect(gw)
    ws.send(json.dumps({"type": "init", "language": "nope", "version": "*", "files": [{"content": "x"}]}))
    events, code, reason = events_until_close(ws)
    assert events == [{"type": "error", "message": "nope-* runtime is unknown"}] and code == 4002
    ws = connect(gw)
    loop = job(runtimes, "bash", "sleep 30", run_timeout=3000)
    ws.send(json.dumps({"type": "init", **loop}))
    ws.send(json.dumps({"type": "data", "stream": "stdout", "data": "x"}))
    assert events_until_close(ws)[1:] == (4004, "Can only write to stdin")
    ws = connect(gw)
    ws.send(json.dumps({"type": "init", **loop}))
    ws.send(json.dumps({"type": "signal", "signal": "SIGNOPE"}))
    assert events_until_close(ws)[1:] == (4005, "Invalid signal")
    ws = connect(gw)
    ws.send(json.dumps({"type": "init", **loop}))
    ws.send(json.dumps({"type": "init", **loop}))
    assert events_until_close(ws)[1:] == (4000, "Already Initialized")


def test_a_full_queue_answers_429_with_retry_after_and_drops_nothing(gw, runtimes):
    # Six run at once and six wait (the fixture's caps): of twenty, some are refused.
    body = job(runtimes, "bash", "sleep 1; echo done", run_timeout=3000)
    with concurrent.futures.ThreadPoolExecutor(20) as pool:
        responses = list(pool.map(lambda _: execute(gw, body), range(20)))
    ok = [r for r in responses if r.status_code == 200]
    refused = [r for r in responses if r.status_code == 429]
    assert len(ok) + len(refused) == 20, [r.status_code for r in responses]
    assert len(ok) >= 12 and refused, [r.status_code for r in responses]
    assert all(r.json()["run"]["stdout"] == "done\n" for r in ok)
    assert all(int(r.headers["Retry-After"]) >= 1 and "try again" in r.json()["message"] for r in refused)
    metrics = requests.get(f"{gw.url}/metrics", headers=gw.headers, timeout=30).text
    assert f"cellgate_runs_refused_total {len(refused)}" in metrics


def test_a_template_adds_a_runtime_its_tenant_alone_runs(gw, runtimes):
    """An operator's or tenant's own runtime: a template with a language, a
    compile and a run script is in that tenant's /api/v2/runtimes and runs
    its jobs in the template's sandboxes; other tenants do not see it, and
    it goes with the template."""
    auth = {"Authorization": f"token {TOKEN}"}
    body = {"name": "awk-runtime", "from": {"image": "python"},
            "steps": [{"type": "RUN", "args": ["echo 'BEGIN { printf \"from the template: \" }' > /opt/prelude.awk"]}],
            "runtimes": [{"language": "awk", "version": "1.3.4", "aliases": ["mawk"],
                          "compile": 'cat /opt/prelude.awk "$1" > program.awk',
                          "run": 'shift; exec awk -f program.awk -- "$@"'}]}
    bad = requests.post(f"{gw.url}/v1/templates", headers=auth, timeout=30,
                        json={**body, "runtimes": [{"language": "awk k", "version": "1", "run": "x"}]})
    assert bad.status_code == 400 and "a runtime's language is 1 to 32 of" in bad.json()["message"], bad.text
    r = requests.post(f"{gw.url}/v1/templates", json=body, headers=auth, timeout=30)
    assert r.status_code == 202, r.text
    at, end = r.json()["status_url"], time.monotonic() + 300
    while (b := requests.get(f"{gw.url}{at}", headers=auth, timeout=30).json())["status"] not in ("ready", "error"):
        assert time.monotonic() < end, b
        time.sleep(0.2)
    assert b["status"] == "ready", b
    try:
        mine = requests.get(f"{gw.url}/api/v2/runtimes", headers=auth, timeout=30).json()
        assert {"language": "awk", "version": "1.3.4", "aliases": ["mawk"]} in mine, mine
        anonymous = requests.get(f"{gw.url}/api/v2/runtimes", timeout=30).json()
        assert not any(rt["language"] == "awk" for rt in anonymous), anonymous
        job_body = {"language": "mawk", "version": "1.x", "files": [{"content": 'BEGIN { print ARGV[1] + ARGV[2] }'}],
                    "args": ["2", "3"]}
        res = execute(gw, job_body).json()
        assert res["compile"]["code"] == 0 and res["run"]["stdout"] == "from the template: 5\n", res
        assert res["language"] == "awk" and res["version"] == "1.3.4", res
        refused = execute(gw, job_body, token=None)
        assert refused.status_code == 400 and refused.json()["message"] == "mawk-1.x runtime is unknown", refused.text
    finally:
        assert requests.delete(f"{gw.url}/v1/templates/awk-runtime", headers=auth, timeout=30).status_code == 204
    gone = execute(gw, job_body)
    assert gone.status_code == 400 and gone.json()["message"] == "mawk-1.x runtime is unknown", gone.text
