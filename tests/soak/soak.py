#!/usr/bin/python3
"""cellgate's load and soak test, on loopback only.

It starts its own gateway (tests/integration/gateway.py's Gateway: port 0,
its own state dir, runc sandboxes), records what the gateway and its
sandboxes hold, then runs --sessions agent sessions at once, each executing
at least --cells cells (a mix: arithmetic, state across cells, pandas,
numpy, Matplotlib PNGs, prints of some KB, stderr, expected errors, files
written by the code and downloaded back, uploads hashed inside the kernel),
JSON and Server-Sent Events, while --transfer-threads other threads upload
files of up to a few MB into the same sessions, download them back, compare
the bytes, list and delete them. The load lasts at least --min-seconds
(the cell plan goes on past --cells until then), bounded by --max-seconds
and --max-cells.

Every request is checked: HTTP status, execute status, and that the output
is exactly what the cell must print. An expected error (a cell that
raises, a download of a file just deleted) is not a failed request. Then
every session is deleted and, within --teardown-timeout, containers,
cgroups, mounts, loop devices, child processes and the gateway's open fds
and threads must be back to the baseline; the gateway's RSS must be back
under baseline + --rss-slack-mib. Exit status 0 means all of that held.

    /usr/bin/python3 tests/soak/soak.py [--sessions 50] [--cells 200] [--min-seconds 300]
        [--transfer-threads 3] [--json out.json]

Run as root from a built tree with the kernel image built.
"""
import argparse
import base64
import hashlib
import json
import os
import random
import re
import statistics
import struct
import subprocess
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

import requests  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))
from support.gateway import Gateway  # noqa: E402
from support.prerequisites import BUILD, IMAGE_STORE  # noqa: E402

CGROUP_ROOT = Path("/sys/fs/cgroup")
# The launcher puts every sandbox at <controller>/cellgate/<sandbox id>.
CGROUP_PARENT = "cellgate"
HTTP_TIMEOUT = 180          # s; bounds every request, so a hung one cannot stall the run
EXEC_TIMEOUT = 120          # s; the cell's own timeout_s: no cell here comes near it
# An execute may take timeout_s + the interrupt grace + a kernel restart + its
# wait behind the session's earlier executions (docs/agent-api.md).
EXEC_HTTP_TIMEOUT = EXEC_TIMEOUT + HTTP_TIMEOUT
MIB = 1 << 20


# --- what the gateway and its sandboxes hold -------------------------------------------

def _proc_status(pid):
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])  # kB
        elif key == "Threads":
            out[key] = int(value)
    return out


def _fd_kinds(pid):
    """The gateway's open fds as sorted kinds: 'socket', 'pipe', 'anon_inode:[eventfd]', a path."""
    kinds = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue  # closed while we looked
        kinds.append(re.sub(r"^(socket|pipe):\[\d+\]$", r"\1", target))
    return sorted(kinds)


def _sockets(pid):
    """The gateway's sockets as lsof shows them, for a report on leaked fds (ss
    does not list a TCP socket whose connection is over but whose fd is open)."""
    r = subprocess.run(["lsof", "-n", "-P", "-p", str(pid)], capture_output=True, text=True, timeout=60)
    return [" ".join(line.split()) for line in r.stdout.splitlines() if " sock " in line or " IPv" in line][:500]


def _children(pid):
    """Processes whose parent is the gateway (runc, launch helpers, zombies)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        # comm may hold spaces and parentheses: the fields after the last ')' are fixed.
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(f"{d}:{stat[stat.find('(') + 1:stat.rfind(')')]}:{fields[0]}")
    return sorted(out)


def _containers(gw):
    r = subprocess.run(["runc", "--root", str(gw.state_dir / "runc"), "list", "--format", "json"],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        return []  # the root dir does not exist before the first sandbox
    return sorted(c["id"] for c in json.loads(r.stdout or "null") or [])


def _cgroup_dirs():
    """Every sandbox cgroup under cellgate/, ours or another gateway's: {'memory/ID', …}."""
    out = set()
    for controller in sorted(os.listdir(CGROUP_ROOT)):
        parent = CGROUP_ROOT / controller / CGROUP_PARENT
        try:
            out.update(f"{controller}/{d.name}" for d in parent.iterdir() if d.is_dir())
        except OSError:
            pass
    return out


def _mounts(base_dir):
    prefix = str(base_dir) + "/"
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4]
        if target.startswith(prefix):
            out.append(target)
    return sorted(out)


def _loops(base_dir):
    r = subprocess.run(["losetup", "--json", "--list"], capture_output=True, text=True, timeout=60)
    devices = json.loads(r.stdout)["loopdevices"] if r.stdout.strip() else []
    prefix = str(base_dir) + "/"
    return sorted(f"{d['name']}:{d['back-file']}" for d in devices
                  if (d.get("back-file") or "").startswith(prefix))


def _sandbox_dirs(gw):
    try:
        return sorted(os.listdir(gw.state_dir / "sandboxes"))
    except OSError:
        return []


def snapshot(gw):
    """What the gateway holds right now. Cgroups are taken whole; attribution is done later."""
    st = _proc_status(gw.proc.pid)
    return {
        "rss_kib": st["VmRSS"], "hwm_kib": st["VmHWM"], "threads": st["Threads"],
        "fds": _fd_kinds(gw.proc.pid), "children": _children(gw.proc.pid),
        "containers": _containers(gw), "cgroups": sorted(_cgroup_dirs()),
        "mounts": _mounts(gw.base_dir), "loops": _loops(gw.base_dir),
        "sandbox_dirs": _sandbox_dirs(gw),
    }


def metrics(gw):
    """/metrics as {'name{labels}': value}, histogram buckets left out."""
    r = requests.get(gw.url + "/metrics", headers={**gw.headers, "Connection": "close"}, timeout=60)
    r.raise_for_status()
    out = {}
    for line in r.text.splitlines():
        if not line or line.startswith("#") or "_bucket{" in line:
            continue
        key, _, value = line.rpartition(" ")
        out[key] = float(value)
    return out


def _metric_sum(m, name, **labels):
    total = 0.0
    for key, value in m.items():
        base, _, rest = key.partition("{")
        if base != name:
            continue
        if all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


# --- bookkeeping -----------------------------------------------------------------------

@dataclass
class stats:
    lock: threading.Lock = field(default_factory=threading.Lock)
    requests: int = 0
    latencies: dict = field(default_factory=dict)   # kind → [seconds]
    failures: list = field(default_factory=list)
    expected_errors: int = 0                          # cells that raise, 404s on deleted files
    expected_4xx: int = 0
    cells: int = 0
    setups: int = 0
    uploads: int = 0
    downloads: int = 0
    listings: int = 0
    deletes: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    output_bytes: int = 0

    def record(self, kind, seconds):
        with self.lock:
            self.requests += 1
            self.latencies.setdefault(kind, []).append(seconds)

    def add(self, **counts):
        with self.lock:
            for k, v in counts.items():
                setattr(self, k, getattr(self, k) + v)

    def fail(self, what, where, detail):
        with self.lock:
            self.failures.append({"what": what, "where": where, "detail": str(detail)[:800],
                                  "t": round(time.monotonic() - T0, 3)})
        print(f"FAIL {what} {where}: {str(detail)[:300]}".replace("\n", " | "), file=sys.stderr, flush=True)


T0 = time.monotonic()


def timed(st, kind, fn):
    """Runs one request; records its latency under `kind` whatever the outcome."""
    t = time.monotonic()
    try:
        return fn()
    finally:
        st.record(kind, time.monotonic() - t)


# --- the cell plan ---------------------------------------------------------------------
# Each cell comes with exactly what it must produce. A cell's check returns a
# list of mismatches (empty: correct).

SETUP_CELL = ("import hashlib, json, os, sys\n"
              "import numpy as np\n"
              "import pandas as pd\n"
              "import matplotlib.pyplot as plt\n"
              "acc = 0\n"
              "print('ready')")

# kind → weight in the mix
MIX = {"arith": 22, "state": 14, "expr": 9, "pandas": 11, "numpy": 6, "plot": 4, "print_kb": 9,
       "stderr": 4, "error": 5, "write_file": 9, "upload_hash": 5, "list": 2}


def _letters(n, a, b):
    return "".join(chr(97 + (i * a + b) % 26) for i in range(n))


def _png_size(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", data[16:24])


@dataclass
class cell:
    kind: str
    code: str
    stdout: str = ""
    stderr: str = ""
    status: str = "ok"
    error: tuple = None            # (ename, evalue)
    main_result: str = None        # text/plain of the execute_result
    png: bool = False
    file: tuple = None             # (path, content bytes, "created"|"modified")
    sse: bool = False


def plan_cell(rng, s, c, state):
    """The c-th cell of session s. `state` carries what the kernel must hold."""
    kind = rng.choices(list(MIX), weights=list(MIX.values()))[0]
    if kind == "arith":
        a, b, k = rng.randrange(10**6), rng.randrange(10**6), rng.randrange(1000)
        return cell(kind, f"print({a} * {b} + {k})", stdout=f"{a * b + k}\n")
    if kind == "state":
        v = rng.randrange(-1000, 1000)
        if state.get("acc") is None:  # unknown after a failed request: set it afresh
            state["acc"] = v
            return cell(kind, f"acc = {v}\nprint(acc)", stdout=f"{v}\n")
        state["acc"] += v
        return cell(kind, f"acc += {v}\nprint(acc)", stdout=f"{state['acc']}\n")
    if kind == "expr":
        n = rng.randrange(1, 10**5)
        return cell(kind, f"sum(range({n})) + {c}", main_result=str(n * (n - 1) // 2 + c))
    if kind == "pandas":
        n, g, m = rng.randrange(100, 20000), rng.randrange(2, 12), rng.randrange(1, 50)
        sums = {}
        for i in range(n):
            sums[str(i % g)] = sums.get(str(i % g), 0) + i * m % 101
        code = (f"df = pd.DataFrame({{'k': [i % {g} for i in range({n})], 'v': [i * {m} % 101 for i in range({n})]}})\n"
                "print(json.dumps({str(k): int(v) for k, v in df.groupby('k')['v'].sum().items()}, sort_keys=True))")
        return cell(kind, code, stdout=json.dumps(sums, sort_keys=True) + "\n")
    if kind == "numpy":
        w = rng.randrange(1, 9)
        n = w * rng.randrange(1, 5000)
        return cell(kind, f"print(np.arange({n}).reshape(-1, {w}).sum(axis=0).tolist())",
                    stdout=str([sum(range(j, n, w)) for j in range(w)]) + "\n")
    if kind == "plot":
        k = rng.randrange(1, 7)
        code = (f"fig, ax = plt.subplots(figsize=(3, 2))\n"
                f"ax.plot([i * {k} % 7 for i in range(50)])\n"
                f"ax.set_title('session {s} cell {c}')\n"
                "plt.show()")
        return cell(kind, code, png=True)
    if kind == "print_kb":
        n = 262144 if rng.random() < 0.1 else rng.randrange(1024, 65536)
        a, b = rng.randrange(1, 26), rng.randrange(26)
        return cell(kind, f"print(''.join(chr(97 + (i * {a} + {b}) % 26) for i in range({n})))",
                    stdout=_letters(n, a, b) + "\n")
    if kind == "stderr":
        return cell(kind, f"sys.stderr.write('warn {c}\\n')\nprint('out {c}')",
                    stdout=f"out {c}\n", stderr=f"warn {c}\n")
    if kind == "error":
        which = rng.randrange(3)
        if which == 0:
            return cell(kind, f"print('before {c}')\nraise ValueError('soak {s}/{c}')", stdout=f"before {c}\n",
                        status="error", error=("ValueError", f"soak {s}/{c}"))
        if which == 1:
            return cell(kind, f"{c} / 0", status="error", error=("ZeroDivisionError", "division by zero"))
        return cell(kind, f"undefined_{c} + 1", status="error",
                    error=("NameError", f"name 'undefined_{c}' is not defined"))
    if kind == "write_file":
        slot = rng.randrange(16)  # a bounded set of names: the workspace stays small
        line = f"session {s} cell {c}\n"
        content = line * rng.randrange(1, 3000)
        path = f"out/c{slot}.txt"
        change = "modified" if path in state["written"] else "created"
        state["written"].add(path)
        code = ("os.makedirs('/workspace/out', exist_ok=True)\n"
                f"with open('/workspace/{path}', 'w') as f:\n"
                f"    f.write({line!r} * {content.count(line)})\n"
                f"print('wrote {len(content)}')")
        return cell(kind, code, stdout=f"wrote {len(content)}\n", file=(path, content.encode(), change))
    if kind == "upload_hash":
        # The worker uploads the bytes first; the kernel must see exactly them.
        data = rng.randbytes(rng.randrange(1, 512 * 1024))
        path = f"in/w{rng.randrange(8)}.bin"
        return cell(kind, f"print(hashlib.sha256(open('/workspace/{path}', 'rb').read()).hexdigest())",
                    stdout=hashlib.sha256(data).hexdigest() + "\n", file=(path, data, None))
    if kind == "list":
        return cell(kind, "print(sorted(os.listdir('/workspace/out')) if os.path.isdir('/workspace/out') else [])",
                    stdout=str(sorted(p.split("/")[1] for p in state["written"])) + "\n")
    raise AssertionError(kind)


def check_result(x, r, prev_count):
    """Mismatches between the execute result `r` and what cell `x` must produce."""
    bad = []
    if r.get("status") != x.status:
        bad.append(f"status {r.get('status')!r}, want {x.status!r} (error: {r.get('error')})")
    if r.get("stdout") != x.stdout:
        bad.append(f"stdout {r.get('stdout', '')[:200]!r}… ({len(r.get('stdout') or '')} chars), "
                   f"want {x.stdout[:200]!r}… ({len(x.stdout)} chars)")
    if r.get("stderr") != x.stderr:
        bad.append(f"stderr {r.get('stderr', '')[:300]!r}, want {x.stderr!r}")
    if any((r.get("truncated") or {}).values()):
        bad.append(f"truncated {r.get('truncated')}")
    if r.get("kernel_restarted"):
        bad.append("kernel_restarted")
    if prev_count is not None and r.get("execution_count") != prev_count + 1:
        bad.append(f"execution_count {r.get('execution_count')}, want {prev_count + 1}")
    err = r.get("error")
    if x.error is None and err is not None:
        bad.append(f"unexpected error {err.get('ename')}: {err.get('evalue')}")
    if x.error is not None:
        if not err or (err.get("ename"), err.get("evalue")) != x.error:
            bad.append(f"error {err and (err.get('ename'), err.get('evalue'))}, want {x.error}")
        elif x.error[0] not in (err.get("traceback_text") or ""):
            bad.append("traceback_text does not name the exception")
    results = r.get("results") or []
    if x.main_result is not None:
        mains = [v for v in results if v.get("is_main_result")]
        if len(results) != 1 or len(mains) != 1 or mains[0]["data"].get("text/plain") != x.main_result:
            bad.append(f"results {results!r:.300}, want one main result {x.main_result!r}")
    elif x.png:
        pngs = [v for v in results if v.get("type") == "display_data" and "image/png" in v.get("data", {})]
        if len(results) != 1 or len(pngs) != 1:
            bad.append(f"want one PNG display, got {[list(v.get('data', {})) for v in results]}")
        else:
            size = _png_size(base64.b64decode(pngs[0]["data"]["image/png"]))
            if not size or min(size) < 50:
                bad.append(f"not a PNG of a plot: IHDR {size}")
    elif results:
        bad.append(f"unexpected results {[list(v.get('data', {})) for v in results]}")
    if x.file is not None and x.file[2] is not None:
        path, content, change = x.file
        mine = [f for f in r.get("files") or [] if f.get("path") == path]
        if len(mine) != 1 or mine[0].get("size") != len(content) or mine[0].get("change") != change:
            bad.append(f"files has {mine}, want {path} {change} of {len(content)} bytes")
    return bad


# --- one session's worker --------------------------------------------------------------

def execute(http, gw, sid, x, st, where):
    """POSTs the cell (JSON or SSE); returns the result object, or None after recording a failure."""
    url = f"{gw.url}/v1/sessions/{sid}/execute"
    body = {"code": x.code, "timeout_s": EXEC_TIMEOUT}
    if not x.sse:
        # The setup cell's imports (pandas, Matplotlib) take seconds: kept apart from the mix's latencies.
        kind = "execute_setup" if x.kind == "setup" else "execute"
        r = timed(st, kind, lambda: http.post(url, json=body, timeout=EXEC_HTTP_TIMEOUT))
        if r.status_code != 200:
            st.fail("execute-http", where, f"{r.status_code} {r.text[:300]}")
            return None
        return r.json()

    def stream():
        events, event = [], None
        with http.post(url, json=body, headers={"Accept": "text/event-stream"}, stream=True,
                       timeout=EXEC_HTTP_TIMEOUT) as r:
            if r.status_code != 200 or not r.headers.get("Content-Type", "").startswith("text/event-stream"):
                return r.status_code, r.headers.get("Content-Type"), None
            for line in r.iter_lines(decode_unicode=True):
                if line.startswith("event: "):
                    event = line[7:]
                elif line.startswith("data: "):
                    events.append((event, json.loads(line[6:])))
        return 200, None, events

    code, ctype, events = timed(st, "execute_sse", stream)
    if events is None:
        st.fail("execute-sse-http", where, f"{code} {ctype}")
        return None
    if not events or events[-1][0] != "end":
        st.fail("execute-sse-end", where, f"last event {events[-1][0] if events else None}")
        return None
    end = events[-1][1]
    streamed = {name: "".join(d["text"] for e, d in events if e == name) for name in ("stdout", "stderr")}
    bad = [f"{n} events {streamed[n][:100]!r} ≠ end.{n}" for n in streamed if streamed[n] != end.get(n)]
    if sum(1 for e, _ in events if e in ("display", "result")) != len(end.get("results") or []):
        bad.append("display/result events do not match end.results")
    if (end.get("status") == "error") != any(e == "error" for e, _ in events):
        bad.append("error event does not match end.status")
    if bad:
        st.fail("execute-sse-events", where, "; ".join(bad))
        return None
    return end


@dataclass
class session_run:
    index: int
    id: str = None
    setup_count: int = None
    cells: int = 0
    state: dict = field(default_factory=lambda: {"acc": 0, "written": set()})


def run_setup(http, gw, run, st):
    """The setup cell (imports, acc = 0), as an agent runs first and again after
    its kernel lost its state. Returns the execution count, or None after a failure."""
    setup = cell("setup", SETUP_CELL, stdout="ready\n")
    where = f"s{run.index}={run.id[:8]}/setup"
    st.add(setups=1)
    try:
        r = execute(http, gw, run.id, setup, st, where)
    except requests.RequestException as e:
        st.fail("transport", where, f"{type(e).__name__}: {e}")
        return None
    if r is None:
        return None
    bad = check_result(setup, r, None)
    if bad:
        st.fail("cell-output", where, "; ".join(bad))
        return None
    run.state["acc"] = 0
    return r.get("execution_count")


def session_worker(gw, run, args, st, stop_at, inject):
    """Runs this session's cells until it has done --cells and --min-seconds have passed."""
    rng = random.Random(args.seed * 1_000_003 + run.index)
    http = requests.Session()
    http.headers.update(gw.headers)
    prev_count = run.setup_count  # the setup cell ran when the session was made
    try:
        c = 0
        while True:
            now = time.monotonic()
            if now >= stop_at["hard"] or c >= args.max_cells:
                break
            if c >= args.cells and now >= stop_at["soft"]:
                break
            if prev_count is None:
                # After a failure the kernel's state is unknown (it may have been
                # restarted): set it up again rather than count every later cell.
                prev_count = run_setup(http, gw, run, st)
                if prev_count is None:
                    time.sleep(1)
                    continue
            x = plan_cell(rng, run.index, c, run.state)
            x.sse = rng.random() < args.sse_fraction
            where = f"s{run.index}={run.id[:8]}/c{c}:{x.kind}{'/sse' if x.sse else ''}"
            if "wrong-output" in inject and run.index == 0 and c == 1:
                x.stdout += "this line is not printed\n"  # proves a wrong output is caught
            c += 1
            try:
                if x.kind == "upload_hash" and not upload_for_cell(http, gw, run, x, st, where):
                    prev_count = None
                    continue
                r = execute(http, gw, run.id, x, st, where)
                st.add(cells=1)
                if r is None:
                    prev_count = None
                    continue
                st.add(output_bytes=len(r.get("stdout") or "") + len(r.get("stderr") or ""))
                if x.status == "error":
                    st.add(expected_errors=1)
                bad = check_result(x, r, prev_count)
                if bad:
                    st.fail("cell-output", where, "; ".join(bad))
                    prev_count = None
                    continue
                prev_count = r.get("execution_count")
                if x.kind == "write_file":
                    download_written(http, gw, run, x, r, st, where)
            except requests.RequestException as e:  # refused, reset, timed out: a failed request
                st.fail("transport", where, f"{type(e).__name__}: {e}")
                prev_count = None
        run.cells = c
    except Exception as e:  # a bug here must show, not stall the run
        st.fail("worker-exception", f"s{run.index}", f"{type(e).__name__}: {e}\n" +
                "".join(traceback.format_exception(e))[-800:])
    finally:
        http.close()


def upload_for_cell(http, gw, run, x, st, where):
    path, data, _ = x.file
    existed = path in run.state.setdefault("uploaded", set())
    r = timed(st, "upload", lambda: http.put(f"{gw.url}/v1/sessions/{run.id}/files/{path}", data=data,
                                             timeout=HTTP_TIMEOUT))
    st.add(uploads=1, bytes_up=len(data))
    want = 200 if existed else 201
    if r.status_code != want or r.json().get("size") != len(data) or r.json().get("path") != path:
        st.fail("upload", where, f"{r.status_code} (want {want}) {r.text[:300]}")
        return False
    run.state["uploaded"].add(path)
    return True


def download_written(http, gw, run, x, r, st, where):
    """The file the cell wrote, fetched through the URL the result gave."""
    path, content, _ = x.file
    entry = next(f for f in r["files"] if f["path"] == path)
    if entry.get("url") != f"/v1/sessions/{run.id}/files/{path}":
        st.fail("files-url", where, entry)
        return
    d = timed(st, "download", lambda: http.get(gw.url + entry["url"], timeout=HTTP_TIMEOUT))
    st.add(downloads=1, bytes_down=len(d.content))
    if d.status_code != 200 or d.content != content:
        st.fail("download-written", where, f"{d.status_code}, {len(d.content)} bytes, want {len(content)}")
    elif not d.headers.get("Content-Type", "").startswith("text/plain"):
        st.fail("download-written", where, f"Content-Type {d.headers.get('Content-Type')}")


# --- uploads and downloads alongside ---------------------------------------------------

def _transfer_size(rng, max_bytes):
    p = rng.random()
    if p < 0.6:
        return rng.randrange(1, 64 * 1024)
    if p < 0.9:
        return rng.randrange(64 * 1024, MIB)
    return rng.randrange(MIB, max_bytes + 1)


def transfer_worker(gw, tid, runs, args, st, done):
    """Uploads (PUT, and multipart now and then) into random sessions, downloads
    back and compares, lists, deletes and checks the 404 after, until the cells are done."""
    rng = random.Random(args.seed * 7919 + 100 + tid)
    http = requests.Session()
    http.headers.update(gw.headers)
    present = {}  # (session id, path) → size, for what this thread put there
    n = 0
    try:
        while not done.is_set():
            n += 1
            run = rng.choice(runs)
            name = f"t{tid}-{rng.randrange(6)}.bin"
            path = f"up/{name}"
            data = rng.randbytes(_transfer_size(rng, args.max_upload_bytes))
            where = f"t{tid}/{n} s{run.index}={run.id[:8]} {path} {len(data)}B"
            try:
                transfer_once(http, gw, run, n, name, path, data, present, st, where)
            except requests.RequestException as e:
                st.fail("transport", where, f"{type(e).__name__}: {e}")
                present.pop((run.id, path), None)
    except Exception as e:
        st.fail("transfer-exception", f"t{tid}", f"{type(e).__name__}: {e}\n" +
                "".join(traceback.format_exception(e))[-800:])
    finally:
        http.close()


def transfer_once(http, gw, run, n, name, path, data, present, st, where):
    """One upload (PUT, or multipart every 5th), its download, and now and then a listing and a delete."""
    base = f"{gw.url}/v1/sessions/{run.id}/files"
    if n % 5 == 0:
        r = timed(st, "upload_multipart", lambda: http.post(
            base, data={"path": "up"}, files={"file": (name, data, "application/octet-stream")},
            timeout=HTTP_TIMEOUT))
        ok = r.status_code == 201 and [(f.get("path"), f.get("size")) for f in r.json().get("files", [])] \
            == [(path, len(data))]
    else:
        want = 200 if (run.id, path) in present else 201
        r = timed(st, "upload", lambda: http.put(f"{base}/{path}", data=data, timeout=HTTP_TIMEOUT))
        ok = r.status_code == want and r.json().get("size") == len(data)
    st.add(uploads=1, bytes_up=len(data))
    if not ok:
        st.fail("upload", where, f"{r.status_code} {r.text[:300]}")
        present.pop((run.id, path), None)
        return
    present[(run.id, path)] = len(data)
    d = timed(st, "download", lambda: http.get(f"{base}/{path}", timeout=HTTP_TIMEOUT))
    st.add(downloads=1, bytes_down=len(d.content))
    if d.status_code != 200 or d.content != data:
        st.fail("download", where, f"{d.status_code}, {len(d.content)} bytes back")
    if n % 4 == 0:
        ls = timed(st, "list", lambda: http.get(base, params={"path": "up"}, timeout=HTTP_TIMEOUT))
        st.add(listings=1)
        entry = [e for e in (ls.json().get("entries", []) if ls.status_code == 200 else [])
                 if e.get("path") == path]
        if ls.status_code != 200 or len(entry) != 1 or entry[0].get("size") != len(data) \
                or entry[0].get("type") != "file":
            st.fail("list", where, f"{ls.status_code} {entry or ls.text[:300]}")
    if n % 6 == 0:
        rm = timed(st, "delete_file", lambda: http.delete(f"{base}/{path}", timeout=HTTP_TIMEOUT))
        st.add(deletes=1)
        present.pop((run.id, path), None)
        if rm.status_code != 204:
            st.fail("delete-file", where, f"{rm.status_code} {rm.text[:300]}")
            return
        gone = timed(st, "download", lambda: http.get(f"{base}/{path}", timeout=HTTP_TIMEOUT))
        if gone.status_code != 404 or "reason" not in gone.json():
            st.fail("download-deleted", where, f"{gone.status_code} {gone.text[:200]}")
        else:
            st.add(expected_errors=1, expected_4xx=1)


# --- sampling while it runs ------------------------------------------------------------

def sampler(gw, samples, known_ids, done, interval):
    """Peaks of RSS, fds, threads, containers; and every sandbox id this gateway made."""
    while not done.wait(interval):
        try:
            st = _proc_status(gw.proc.pid)
            known_ids.update(_sandbox_dirs(gw))
            containers = _containers(gw)
            known_ids.update(containers)
            samples.append({"t": round(time.monotonic() - T0, 1), "rss_kib": st["VmRSS"], "threads": st["Threads"],
                            "fds": len(os.listdir(f"/proc/{gw.proc.pid}/fd")), "containers": len(containers)})
        except OSError:
            return  # the gateway is gone; the main thread sees that


# --- the phases ------------------------------------------------------------------------

def create_sessions(gw, runs, st, concurrency):
    """Makes the sessions, `concurrency` at a time, each with its setup cell run."""
    lock = threading.Lock()
    queue = list(runs)

    def creator():
        http = requests.Session()
        http.headers.update(gw.headers)
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    run = queue.pop(0)
                try:
                    r = timed(st, "create", lambda: http.post(
                        f"{gw.url}/v1/sessions", json={"timeout_s": EXEC_TIMEOUT, "idle_timeout_s": 3600,
                                                       "lifetime_s": 7200}, timeout=HTTP_TIMEOUT))
                except requests.RequestException as e:
                    st.fail("transport", f"s{run.index}/create", f"{type(e).__name__}: {e}")
                    continue
                if r.status_code != 201 or r.json().get("state") not in ("idle", "starting", "busy"):
                    st.fail("create", f"s{run.index}", f"{r.status_code} {r.text[:300]}")
                    continue
                run.id = r.json()["id"]
                # The imports cost seconds of CPU: done here, a few sessions at a
                # time, rather than by all sessions at once when the load starts.
                run.setup_count = run_setup(http, gw, run, st)
        finally:
            http.close()

    threads = [threading.Thread(target=creator) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def delete_sessions(gw, runs, st, concurrency):
    lock = threading.Lock()
    queue = [r for r in runs if r.id]

    def deleter():
        http = requests.Session()
        http.headers.update(gw.headers)
        try:
            while True:
                with lock:
                    if not queue:
                        return
                    run = queue.pop(0)
                try:
                    r = timed(st, "delete_session", lambda: http.delete(f"{gw.url}/v1/sessions/{run.id}",
                                                                        timeout=HTTP_TIMEOUT))
                except requests.RequestException as e:
                    st.fail("transport", f"s{run.index}/delete", f"{type(e).__name__}: {e}")
                    continue
                if r.status_code != 204:
                    st.fail("delete-session", f"s{run.index}", f"{r.status_code} {r.text[:300]}")
                    continue
                try:
                    g = timed(st, "get_session", lambda: http.get(f"{gw.url}/v1/sessions/{run.id}",
                                                                  timeout=HTTP_TIMEOUT))
                except requests.RequestException as e:
                    st.fail("transport", f"s{run.index}/get", f"{type(e).__name__}: {e}")
                    continue
                if g.status_code != 404:
                    st.fail("deleted-session-still-there", f"s{run.index}", f"{g.status_code} {g.text[:300]}")
                else:
                    st.add(expected_4xx=1)
        finally:
            http.close()

    threads = [threading.Thread(target=deleter) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def warm_up(gw):
    """One session through every path once, then deleted. The first sandbox makes
    the gateway's one-time resources (libzmq's context starts its I/O and reaper
    threads, with their eventfds and epolls, on the first socket); they belong
    in the baseline, they are not per-session. It takes no path that is under
    test for leaks beyond that (no SSE): main() checks that what it left is
    only such eventfds and epolls."""
    with requests.Session() as http:
        http.headers.update(gw.headers)
        r = http.post(f"{gw.url}/v1/sessions", json={}, timeout=HTTP_TIMEOUT)
        r.raise_for_status()
        sid = r.json()["id"]
        x = http.post(f"{gw.url}/v1/sessions/{sid}/execute", timeout=HTTP_TIMEOUT,
                      json={"code": SETUP_CELL + "\nplt.plot([1, 2]); plt.show()"})
        assert x.status_code == 200 and x.json()["status"] == "ok", x.text[:500]
        assert http.put(f"{gw.url}/v1/sessions/{sid}/files/w.bin", data=b"x" * MIB,
                        timeout=HTTP_TIMEOUT).status_code == 201
        assert http.get(f"{gw.url}/v1/sessions/{sid}/files/w.bin", timeout=HTTP_TIMEOUT).content == b"x" * MIB
        assert http.delete(f"{gw.url}/v1/sessions/{sid}", timeout=HTTP_TIMEOUT).status_code == 204
    return sid


def wait_settled(gw, base, ours, timeout, process=True):
    """Polls until the gateway is back to `base` (or the time is up); returns the
    last snapshot and whether it got there. process=False: sandboxes only."""
    end = time.monotonic() + timeout
    while True:
        snap = snapshot(gw)
        if not compare(base, snap, ours, rss_slack_kib=None, process=process):
            return snap, True
        if time.monotonic() >= end:
            return snap, False
        time.sleep(0.5)


def compare(base, after, ours, rss_slack_kib, process=True):
    """What is not back to the baseline: [(resource, detail)]. Cgroups count
    when their sandbox id is one this gateway made (another gateway on the host
    may make and remove its own meanwhile)."""
    leaks = []
    for key in ("containers", "mounts", "loops", "children", "sandbox_dirs"):
        extra = sorted(set(after[key]) - set(base[key]))
        missing = sorted(set(base[key]) - set(after[key]))
        if extra or missing:
            leaks.append((key, f"{len(extra)} more, {len(missing)} fewer: {(extra + missing)[:6]}"))
    new_cgroups = sorted(set(after["cgroups"]) - set(base["cgroups"]))
    ours_left = [c for c in new_cgroups if c.split("/", 1)[1] in ours]
    if ours_left:
        leaks.append(("cgroups", f"{len(ours_left)} of ours left: {ours_left[:6]}"))
    if not process:
        return leaks
    if after["fds"] != base["fds"]:
        extra = list(after["fds"])
        for k in base["fds"]:
            if k in extra:
                extra.remove(k)
        missing = list(base["fds"])
        for k in after["fds"]:
            if k in missing:
                missing.remove(k)
        leaks.append(("fds", f"{len(after['fds'])} vs {len(base['fds'])}: more {extra[:8]}, fewer {missing[:8]}"))
    if after["threads"] != base["threads"]:
        leaks.append(("threads", f"{after['threads']} vs {base['threads']}"))
    if rss_slack_kib is not None and after["rss_kib"] > base["rss_kib"] + rss_slack_kib:
        leaks.append(("rss", f"{after['rss_kib']} KiB > baseline {base['rss_kib']} + {rss_slack_kib} KiB"))
    return leaks


def _pct(values, p):
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(round(p / 100 * (len(v) - 1))))]


def log_lines(path, levels=("warning", "error", "critical")):
    """The gateway log's warnings and errors, ids folded, with their counts."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        parts = line.split(" ", 2)
        if len(parts) == 3 and parts[1] in levels:
            key = parts[1] + " " + re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "ID", parts[2])[:160]
            out[key] = out.get(key, 0) + 1
    return out


def check_prerequisites():
    if os.geteuid() != 0:
        return "needs root (runc, cgroups, loop mounts)"
    for what, path in (("the gateway", BUILD / "bin" / "cellgate"), ("the launcher", BUILD / "bin" / "cellgate-launch")):
        if not path.exists():
            return f"{what} is not built: {path} (scripts/build.sh)"
    if not (IMAGE_STORE / "python" / "current" / "rootfs").is_dir():
        return "the kernel image is not built (images/build.sh)"
    if subprocess.run(["which", "runc"], capture_output=True).returncode != 0:
        return "runc is not installed"
    return None


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sessions", type=int, default=50)
    p.add_argument("--cells", type=int, default=200, help="cells per session, at least (default 200)")
    p.add_argument("--min-seconds", type=float, default=300, help="load lasts at least this long (default 300)")
    p.add_argument("--max-seconds", type=float, default=None,
                   help="hard stop for the load phase (default: 3 × min-seconds + 600)")
    p.add_argument("--max-cells", type=int, default=None, help="hard cap per session (default 20 × cells)")
    p.add_argument("--transfer-threads", type=int, default=3)
    p.add_argument("--max-upload-bytes", type=int, default=4 * MIB)
    p.add_argument("--sse-fraction", type=float, default=0.2, help="share of cells streamed as SSE")
    p.add_argument("--create-concurrency", type=int, default=8)
    p.add_argument("--teardown-timeout", type=float, default=180)
    p.add_argument("--rss-slack-mib", type=float, default=None,
                   help="RSS allowed above the baseline after teardown (default: 8 × the largest upload in "
                        "MiB + 0.5 per session; 57 MiB for 50 sessions and 4 MiB uploads; see README)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json", type=Path, help="write the results here")
    p.add_argument("--gateway-arg", action="append", default=[], help="extra gateway option (repeatable)")
    p.add_argument("--glibc-tunables", default=None,
                   help="GLIBC_TUNABLES for the gateway, e.g. glibc.malloc.trim_threshold=131072:"
                        "glibc.malloc.mmap_threshold=131072 to tell allocator retention from a leak")
    p.add_argument("--inject", choices=["wrong-output", "mount-leak"], action="append", default=[],
                   help="self-test (repeatable): make the run fail in a known way, to show the checks can fail")
    a = p.parse_args(argv)
    if a.sessions < 1 or a.cells < 1 or a.min_seconds < 0 or a.transfer_threads < 0:
        p.error("--sessions and --cells must be ≥ 1, --min-seconds and --transfer-threads ≥ 0")
    if not 0 <= a.sse_fraction <= 1:
        p.error("--sse-fraction must be within 0..1")
    a.max_seconds = a.max_seconds if a.max_seconds is not None else 3 * a.min_seconds + 600
    a.max_cells = a.max_cells if a.max_cells is not None else 20 * a.cells
    if a.max_seconds < a.min_seconds or a.max_cells < a.cells:
        p.error("--max-seconds/--max-cells must not be below --min-seconds/--cells")
    # Allocator retention, not live data (README): glibc keeps up to twice the
    # largest block freed (a multipart body is read whole: up to the largest
    # upload) free at the top of each arena, and about four of the gateway's
    # threads allocate (two I/O threads, the ZeroMQ reactor, main); plus
    # fragmentation that grows with the peak of live sessions (≤ 0.3 MiB each
    # measured with fixed malloc thresholds).
    if a.rss_slack_mib is None:
        a.rss_slack_mib = 2 * 4 * a.max_upload_bytes / MIB + 0.5 * a.sessions
    return a


def main(argv=None):
    args = parse_args(argv)
    why = check_prerequisites()
    if why:
        print(f"soak: cannot run: {why}", file=sys.stderr)
        return 2
    # One token drives every session: no per-tenant share.
    gw_args = ["--max-kernels", str(max(64, args.sessions + 4)), "--max-kernels-per-tenant", "0", *args.gateway_arg]
    env = None
    if args.glibc_tunables:
        env = {**os.environ, "GLIBC_TUNABLES": args.glibc_tunables}
    gw = Gateway(*gw_args, env=env)
    result = {"config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
              "gateway_args": gw_args}
    st = stats()
    runs = [session_run(i) for i in range(args.sessions)]
    samples, known_ids = [], set()
    try:
        gw.start()
        time.sleep(1)
        cold = snapshot(gw)
        result["warm_up_session"] = warm_up(gw)
        known_ids.add(result["warm_up_session"])
        _, settled = wait_settled(gw, cold, known_ids, 60, process=False)
        if not settled:
            raise RuntimeError("the warm-up session's sandbox was not torn down within 60 s")
        time.sleep(2)  # let the warm-up's connections close on the gateway's side
        base = snapshot(gw)
        m0 = metrics(gw)
        one_time = list(base["fds"])
        for k in cold["fds"]:
            if k in one_time:
                one_time.remove(k)
        result["warm_up_one_time_fds"] = one_time
        if any(k not in ("anon_inode:[eventfd]", "anon_inode:[eventpoll]") for k in one_time):
            st.fail("warm-up-leak", "warm-up", f"the warm-up session left fds other than libzmq's: {one_time}")
        print(f"soak: gateway pid {gw.proc.pid} on {gw.url}; baseline: RSS {base['rss_kib']} KiB, "
              f"{len(base['fds'])} fds, {base['threads']} threads (cold: {cold['rss_kib']} KiB, "
              f"{len(cold['fds'])} fds, {cold['threads']} threads)", flush=True)
        if "mount-leak" in args.inject:
            leak = gw.base_dir / "soak-injected-leak"
            leak.mkdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "soak-leak", str(leak)], check=True)

        done = threading.Event()
        sampler_thread = threading.Thread(target=sampler, args=(gw, samples, known_ids, done, 2.0), daemon=True)
        sampler_thread.start()

        t_create = time.monotonic()
        create_sessions(gw, runs, st, args.create_concurrency)
        created = [r for r in runs if r.id]
        known_ids.update(r.id for r in created)
        create_seconds = time.monotonic() - t_create
        print(f"soak: {len(created)}/{args.sessions} sessions created and set up in {create_seconds:.1f} s",
              flush=True)

        t_load, requests_before = time.monotonic(), st.requests
        stop_at = {"soft": t_load + args.min_seconds, "hard": t_load + args.max_seconds}
        transfers_done = threading.Event()
        workers = [threading.Thread(target=session_worker, args=(gw, r, args, st, stop_at, args.inject))
                   for r in created]
        transfers = [threading.Thread(target=transfer_worker, args=(gw, i, created, args, st, transfers_done))
                     for i in range(args.transfer_threads if created else 0)]
        for t in workers + transfers:
            t.start()
        while any(t.is_alive() for t in workers):
            for t in workers:
                t.join(timeout=15)
                if t.is_alive():
                    break
            el = time.monotonic() - t_load
            with st.lock:
                print(f"soak: {el:6.0f} s  cells {st.cells}  uploads {st.uploads}  downloads {st.downloads}  "
                      f"failures {len(st.failures)}  RSS {samples[-1]['rss_kib'] if samples else '?'} KiB",
                      flush=True)
        transfers_done.set()
        for t in transfers:
            t.join()
        load_seconds = time.monotonic() - t_load
        load_requests = st.requests - requests_before

        # Every session still there and idle before we delete them: none lost.
        live = timed(st, "list_sessions", lambda: requests.get(
            f"{gw.url}/v1/sessions", headers={**gw.headers, "Connection": "close"}, timeout=60))
        live_ids = {s["id"]: s["state"] for s in live.json().get("sessions", [])} if live.status_code == 200 else {}
        lost = [f"s{r.index}={r.id[:8]}:{live_ids.get(r.id, 'missing')}" for r in created
                if live_ids.get(r.id) not in ("idle", "busy")]
        if live.status_code != 200 or lost:
            st.fail("sessions-lost", "", f"{live.status_code}; sessions missing or not alive: {lost[:10]}")
        peak = snapshot(gw)  # all sessions live: the resources at full load

        t_del = time.monotonic()
        delete_sessions(gw, created, st, args.create_concurrency)
        done.set()
        sampler_thread.join()
        after, settled = wait_settled(gw, base, known_ids, args.teardown_timeout)
        teardown_seconds = time.monotonic() - t_del
        time.sleep(2)
        after = snapshot(gw)
        m1 = metrics(gw)
        rss_slack_kib = int(args.rss_slack_mib * 1024)
        leaks = compare(base, after, known_ids, rss_slack_kib)
        sockets_after = _sockets(gw.proc.pid) if any(k == "fds" for k, _ in leaks) else []
        foreign = sorted(c for c in set(after["cgroups"]) - set(base["cgroups"])
                         if c.split("/", 1)[1] not in known_ids)

        # The gateway's own account must agree with the client's.
        delta = lambda name, **lab: _metric_sum(m1, name, **lab) - _metric_sum(m0, name, **lab)  # noqa: E731
        metric_checks = {
            "sandbox_starts": (delta("cellgate_sandbox_starts_total"), len(created)),
            "sandbox_start_failures": (delta("cellgate_sandbox_start_failures_total"), 0),
            "kernel_deaths": (delta("cellgate_kernel_deaths_total"), 0),
            "kernel_restarts": (delta("cellgate_kernel_restarts_total"), 0),
            "kernel_messages_dropped": (delta("cellgate_kernel_messages_dropped_total"), 0),
            "http_5xx": (delta("cellgate_http_request_duration_seconds_count", status="5xx"), 0),
            "http_4xx": (delta("cellgate_http_request_duration_seconds_count", status="4xx"), st.expected_4xx),
            "kernels_after": (_metric_sum(m1, "cellgate_kernels"), 0),
            "ws_connections_after": (_metric_sum(m1, "cellgate_ws_connections"), 0),
        }
        metric_bad = {k: v for k, v in metric_checks.items() if v[0] != v[1]}
        gw_alive = gw.proc.poll() is None
    finally:
        stop_code = gw.stop()
        gw.cleanup()
    log_path = Path(os.environ.get("CELLGATE_TEST_LOGS", "/tmp/cellgate-test-logs")) / f"{gw.base_dir.name}.log"

    # --- the report ---
    cell_lat = st.latencies.get("execute", []) + st.latencies.get("execute_sse", [])  # the mix, without setup
    total_cells = st.cells + st.setups
    reasons = []
    if st.failures:
        reasons.append(f"{len(st.failures)} failed requests")
    if leaks:
        reasons.append("not back to the baseline: " + ", ".join(k for k, _ in leaks))
    if metric_bad:
        reasons.append(f"gateway metrics: {sorted(metric_bad)}")
    if not gw_alive:
        reasons.append("the gateway died")
    if len(created) != args.sessions:
        reasons.append(f"only {len(created)} of {args.sessions} sessions created")
    short = [r.index for r in created if r.cells < args.cells]
    if short:
        reasons.append(f"{len(short)} sessions did fewer than {args.cells} cells by --max-seconds")
    passed = not reasons
    lat = {k: {"n": len(v), "p50_ms": round(1000 * _pct(v, 50), 1), "p99_ms": round(1000 * _pct(v, 99), 1),
               "max_ms": round(1000 * max(v), 1)} for k, v in sorted(st.latencies.items()) if v}
    result.update({
        "passed": passed, "reasons": reasons,
        "sessions": len(created), "cells": total_cells, "setup_cells": st.setups, "cells_per_session_min": min((r.cells for r in created), default=0),
        "requests": st.requests, "failures": len(st.failures), "failure_list": st.failures[:200],
        "expected_errors": st.expected_errors, "uploads": st.uploads, "downloads": st.downloads,
        "listings": st.listings, "file_deletes": st.deletes, "bytes_up": st.bytes_up, "bytes_down": st.bytes_down,
        "output_bytes": st.output_bytes,
        "create_seconds": round(create_seconds, 1), "load_seconds": round(load_seconds, 1),
        "teardown_seconds": round(teardown_seconds, 1), "teardown_settled": settled,
        "requests_per_second": round(load_requests / load_seconds, 1) if load_seconds else None,
        "cells_per_second": round(st.cells / load_seconds, 1) if load_seconds else None,
        "cell_latency_ms": {"p50": round(1000 * _pct(cell_lat, 50), 1), "p99": round(1000 * _pct(cell_lat, 99), 1),
                            "max": round(1000 * max(cell_lat), 1)} if cell_lat else None,
        "latency_by_request": lat,
        "resources": {
            "cold": _summ(cold, known_ids), "baseline": _summ(base, known_ids),
            "full_load": _summ(peak, known_ids), "after": _summ(after, known_ids),
            "rss_peak_kib": after["hwm_kib"], "rss_slack_kib": rss_slack_kib,
            "samples": samples,
        },
        "leaks": leaks, "gateway_sockets_after": sockets_after, "foreign_cgroups_ignored": foreign[:20],
        "metric_checks": {k: {"got": v[0], "want": v[1]} for k, v in metric_checks.items()},
        "gateway_alive_at_end": gw_alive, "gateway_exit_code": stop_code,
        "gateway_log": str(log_path), "gateway_log_warnings": log_lines(log_path),
    })
    print_summary(result)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
        print(f"soak: results written to {args.json}")
    return 0 if passed else 1


def _summ(s, ours):
    return {"rss_kib": s["rss_kib"], "threads": s["threads"], "fds": len(s["fds"]), "children": len(s["children"]),
            "containers": len(s["containers"]),
            "cgroups_ours": sum(1 for c in s["cgroups"] if c.split("/", 1)[1] in ours),
            "cgroups_all": len(s["cgroups"]),
            "mounts": len(s["mounts"]), "loops": len(s["loops"]), "sandbox_dirs": len(s["sandbox_dirs"])}


def print_summary(r):
    res = r["resources"]
    print("\n=== cellgate soak ===")
    print(f"sessions {r['sessions']}  cells {r['cells']} (≥ {r['cells_per_session_min']} per session)  "
          f"requests {r['requests']}  failures {r['failures']}  expected errors {r['expected_errors']}")
    print(f"uploads {r['uploads']} ({r['bytes_up'] / MIB:.1f} MiB)  downloads {r['downloads']} "
          f"({r['bytes_down'] / MIB:.1f} MiB)  listings {r['listings']}  file deletes {r['file_deletes']}  "
          f"kernel output {r['output_bytes'] / MIB:.1f} MiB")
    print(f"create {r['create_seconds']} s  load {r['load_seconds']} s  teardown {r['teardown_seconds']} s  "
          f"→ {r['requests_per_second']} requests/s, {r['cells_per_second']} cells/s")
    if r["cell_latency_ms"]:
        c = r["cell_latency_ms"]
        print(f"cell latency (the mix, JSON and SSE; setup cells apart) p50 {c['p50']} ms  p99 {c['p99']} ms  "
              f"max {c['max']} ms")
    print(f"{'request':18} {'n':>7} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9}")
    for k, v in r["latency_by_request"].items():
        print(f"{k:18} {v['n']:7} {v['p50_ms']:9} {v['p99_ms']:9} {v['max_ms']:9}")
    cols = ("cold", "baseline", "full_load", "after")
    print(f"\n{'resource':14}" + "".join(f"{c:>12}" for c in cols))
    for key in ("rss_kib", "threads", "fds", "children", "containers", "cgroups_ours", "cgroups_all", "mounts",
                "loops", "sandbox_dirs"):
        print(f"{key:14}" + "".join(f"{res[c][key]:>12}" for c in cols))
    print(f"RSS: baseline {res['baseline']['rss_kib']} KiB, peak {res['rss_peak_kib']} KiB, after "
          f"{res['after']['rss_kib']} KiB (allowed: baseline + {res['rss_slack_kib']} KiB)")
    bad_metrics = {k: v for k, v in r["metric_checks"].items() if v["got"] != v["want"]}
    print(f"gateway metrics: {'as expected' if not bad_metrics else bad_metrics}")
    if r["foreign_cgroups_ignored"]:
        print(f"note: cgroups not made by this gateway appeared meanwhile (ignored): {r['foreign_cgroups_ignored'][:5]}")
    for leak in r["leaks"]:
        print(f"LEAK {leak[0]}: {leak[1]}")
    socks = [x for x in r["gateway_sockets_after"] if "(LISTEN)" not in x]
    for line in socks[:8]:
        print(f"  socket: {line[:220]}")
    if len(socks) > 8:
        print(f"  … and {len(socks) - 8} more sockets (all in --json)")
    for f in r["failure_list"][:20]:
        print(f"FAILED {f['what']} {f['where']}: {f['detail'][:300]}")
    if r["gateway_log_warnings"]:
        print("gateway log warnings/errors:")
        for line, n in sorted(r["gateway_log_warnings"].items(), key=lambda kv: -kv[1])[:15]:
            print(f"  {n:5} × {line}")
    print(f"gateway log: {r['gateway_log']}")
    print(f"RESULT: {'PASS' if r['passed'] else 'FAIL: ' + '; '.join(r['reasons'])}")


if __name__ == "__main__":
    sys.exit(main())
