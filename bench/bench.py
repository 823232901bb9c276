#!/usr/bin/python3
"""cellgate's benchmark harness. In one run on one machine it measures cellgate
side by side with Debian's jupyter_server (the reference, unsandboxed local
kernels) and with the floor: the same requests sent straight over ZeroMQ to
the very same kind of sandboxed kernel (same image, same limits) that cellgate
runs. Every figure is printed with its ratio to the floor and to the
reference, and everything is written as JSON.

    /usr/bin/python3 bench/bench.py [--scenarios start,rtt,output,concurrency,memory,idle]
        [--rtt-count 300] [--start-count 10] [--sessions 100] [--json bench/results/latest.json]

Run as root from a built tree (./scripts/build.sh, images/build.sh). Clients on
every path are the same lean Python code (json + hmac + a socket), so the
ratios compare servers, not client libraries.
"""
import argparse
import hashlib
import hmac
import json
import os
import platform
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

import requests  # noqa: E402
import websocket  # noqa: E402
import zmq  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))
from support.gateway import Gateway  # noqa: E402
from support.prerequisites import BUILD, IMAGE_STORE  # noqa: E402

PY = "/usr/bin/python3"
LAUNCH = BUILD / "bin" / "cellgate-launch"
PLOT = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2, 4])\nplt.show()"
MB_PRINT = "print('x' * 1_000_000)"
STACK = "import numpy, pandas, matplotlib.pyplot"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def summary(samples):
    s = sorted(samples)
    return {"median_ms": statistics.median(s) * 1000, "p99_ms": s[min(len(s) - 1, int(len(s) * 0.99))] * 1000,
            "min_ms": s[0] * 1000, "n": len(s)}


def header(msg_type):
    return {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": "bench", "username": "bench",
            "version": "5.3", "date": "2026-01-01T00:00:00Z"}


def pss_kib(pids):
    total = 0
    for pid in pids:
        try:
            for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
        except OSError:
            pass
    return total


def tree_pids(root_pid):
    """root_pid and all its descendants."""
    children = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int(Path(d, "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root_pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(children.get(p, []))
    return out


# --- clients: one lean protocol layer for every path ----------------------------------------

class Channel:
    """Common execute/wait logic over some transport."""

    def execute(self, code):
        msg_id = self.send("shell", "execute_request", {"code": code, "silent": False, "store_history": True,
                                                         "user_expressions": {}, "allow_stdin": False,
                                                         "stop_on_error": False})
        replied = idle = False
        status = None
        while not (replied and idle):
            channel, msg_type, parent, content = self.recv()
            if parent != msg_id:
                continue
            if msg_type == "execute_reply":
                replied = True
                status = content.get("status")
            elif msg_type == "status" and content["execution_state"] == "idle":
                idle = True
        return status

    def kernel_info(self):
        msg_id = self.send("shell", "kernel_info_request", {})
        while True:
            channel, msg_type, parent, _ = self.recv()
            if parent == msg_id and msg_type == "kernel_info_reply":
                return


class ZmqChannel(Channel):
    """Straight to a kernel's sockets: sign, send, receive, verify, parse."""

    def __init__(self, conn_file):
        info = json.loads(Path(conn_file).read_text())
        self.key = info["key"].encode()
        self.ctx = zmq.Context()
        base = f"{info['transport']}://{info['ip']}" + ("-" if info["transport"] == "ipc" else ":")
        self.shell = self.ctx.socket(zmq.DEALER)
        self.shell.connect(f"{base}{info['shell_port']}")
        self.iopub = self.ctx.socket(zmq.SUB)
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect(f"{base}{info['iopub_port']}")
        self.poller = zmq.Poller()
        self.poller.register(self.shell, zmq.POLLIN)
        self.poller.register(self.iopub, zmq.POLLIN)
        self.pending = []
        # Wait until iopub is subscribed (as a gateway's nudge does).
        while True:
            self.kernel_info()
            if self.iopub.poll(200):
                while self.iopub.poll(0):
                    self.iopub.recv_multipart()
                break

    def sign(self, parts):
        h = hmac.new(self.key, digestmod=hashlib.sha256)
        for p in parts:
            h.update(p)
        return h.hexdigest().encode()

    def send(self, channel, msg_type, content):
        h = header(msg_type)
        parts = [json.dumps(h).encode(), b"{}", b"{}", json.dumps(content).encode()]
        self.shell.send_multipart([b"<IDS|MSG>", self.sign(parts), *parts])
        return h["msg_id"]

    def recv(self):
        while not self.pending:
            for sock, _ in self.poller.poll():
                frames = sock.recv_multipart()
                i = frames.index(b"<IDS|MSG>")
                sig, parts = frames[i + 1], frames[i + 2:i + 6]
                if not hmac.compare_digest(sig, self.sign(parts)):
                    raise RuntimeError("bad signature")
                hdr, parent, content = json.loads(parts[0]), json.loads(parts[1]), json.loads(parts[3])
                self.pending.append(("shell" if sock is self.shell else "iopub", hdr["msg_type"],
                                     parent.get("msg_id"), content))
        return self.pending.pop(0)

    def close(self):
        self.ctx.destroy(linger=0)


class WsChannel(Channel):
    """A Jupyter server's kernel WebSocket (cellgate or jupyter_server)."""

    def __init__(self, ws_url, kernel_id, token, v1=False):
        self.v1 = v1
        self.ws = websocket.create_connection(
            f"{ws_url}/api/kernels/{kernel_id}/channels?session_id={uuid.uuid4().hex}&token={token}",
            subprotocols=["v1.kernel.websocket.jupyter.org"] if v1 else None, timeout=300,
            skip_utf8_validation=True)  # the Python client validating UTF-8 would dominate big outputs
        self.ws.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, channel, msg_type, content):
        h = header(msg_type)
        if self.v1:
            parts = [channel.encode(), json.dumps(h).encode(), b"{}", b"{}", json.dumps(content).encode()]
            offsets, pos = [], 8 * 7
            for p in parts:
                offsets.append(pos)
                pos += len(p)
            offsets.append(pos)
            self.ws.send_binary(struct.pack("<Q", 6) + struct.pack("<6Q", *offsets) + b"".join(parts))
        else:
            self.ws.send(json.dumps({"channel": channel, "header": h, "parent_header": {}, "metadata": {},
                                     "content": content}))
        return h["msg_id"]

    def recv(self):
        op, data = self.ws.recv_data()
        if self.v1:
            n = struct.unpack_from("<Q", data)[0]
            off = struct.unpack_from(f"<{n}Q", data, 8)
            hdr = json.loads(data[off[1]:off[2]])
            parent = json.loads(data[off[2]:off[3]])
            content = json.loads(data[off[4]:off[5]])
            return data[off[0]:off[1]].decode(), hdr["msg_type"], parent.get("msg_id"), content
        m = json.loads(data)
        return m["channel"], m["header"]["msg_type"], m["parent_header"].get("msg_id"), m["content"]

    def close(self):
        self.ws.close()


# --- servers ------------------------------------------------------------------------------

class Floor:
    """Sandboxed kernels started by cellgate-launch, reached straight over ZeroMQ."""

    def __init__(self):
        self.base = Path(tempfile.mkdtemp(prefix="cellgate-bench-floor-", dir="/run"))
        self.common = [str(LAUNCH), "--state-dir", str(self.base / "state"), "--image-store", str(IMAGE_STORE),
                       "--workspace-root", str(self.base / "ws")]
        self.ids = []

    def start(self, preload=()):
        args = [*self.common, "run"]
        for m in preload:
            args += ["--preload", m]
        info = json.loads(subprocess.run(args, capture_output=True, text=True, check=True).stdout)
        self.ids.append(info["id"])
        return info

    def channel(self, info):
        return ZmqChannel(info["endpoints"]["connection_file"])

    def stop(self):
        for i in self.ids:
            subprocess.run([*self.common, "rm", i], capture_output=True)
        subprocess.run(["rm", "-rf", str(self.base)])


class JupyterServer:
    """Debian's jupyter_server with local, unsandboxed ipykernels: the reference."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="cellgate-bench-js-"))
        self.port = free_port()
        self.token = uuid.uuid4().hex
        env = dict(PATH="/usr/bin:/bin", HOME=str(self.dir), JUPYTER_RUNTIME_DIR=str(self.dir / "rt"),
                   JUPYTER_CONFIG_DIR=str(self.dir / "cfg"), JUPYTER_DATA_DIR=str(self.dir / "data"))
        self.log = open(self.dir / "server.log", "wb")
        self.proc = subprocess.Popen([PY, "-m", "jupyter_server", f"--ServerApp.port={self.port}",
                                      "--ServerApp.ip=127.0.0.1", f"--ServerApp.token={self.token}",
                                      "--ServerApp.allow_root=True", "--no-browser",
                                      f"--ServerApp.root_dir={self.dir}"], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"token {self.token}"
        end = time.time() + 60
        while time.time() < end:
            try:
                if requests.get(self.url + "/api", timeout=1).ok:
                    return
            except requests.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("jupyter_server did not start")

    def api(self, method, path, **kw):
        return self.session.request(method, self.url + path, timeout=300, **kw)

    def start_kernel(self):
        return self.api("POST", "/api/kernels", json={"name": "python3"}).json()["id"]

    def kernel_pids(self):
        return [p for p in tree_pids(self.proc.pid) if p != self.proc.pid]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()
        subprocess.run(["rm", "-rf", str(self.dir)])


class Cellgate:
    def __init__(self, *args):
        self.g = Gateway(*args).start()
        self.url, self.ws_url, self.token = self.g.url, self.g.ws_url, self.g.token
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"token {self.token}"

    def api(self, method, path, **kw):
        return self.session.request(method, self.url + path, timeout=300, **kw)

    def start_kernel(self):
        r = self.api("POST", "/api/kernels", json={"name": "python3"})
        r.raise_for_status()
        return r.json()["id"]

    def metric(self, name):
        for line in self.api("GET", "/metrics").text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return None

    def wait_pool(self, target, timeout=300):
        end = time.time() + timeout
        while time.time() < end:
            if self.metric("cellgate_pool_ready") == target:
                return
            time.sleep(0.1)
        raise RuntimeError("the warm pool did not fill")

    def gateway_stat(self):
        fields = Path(f"/proc/{self.g.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        ticks = os.sysconf("SC_CLK_TCK")
        rss = int([l for l in Path(f"/proc/{self.g.proc.pid}/status").read_text().splitlines()
                   if l.startswith("VmRSS:")][0].split()[1])
        return {"cpu_s": (int(fields[11]) + int(fields[12])) / ticks, "rss_kib": rss}

    def stop(self):
        self.g.stop()
        self.g.cleanup()


# --- scenarios ----------------------------------------------------------------------------

def timed(fn, count, warmup=0):
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return samples


def server_start(server, count, before_each=None):
    samples = []
    for _ in range(count):
        if before_each:
            before_each()
        t0 = time.perf_counter()
        kid = server.start_kernel()
        ch = WsChannel(server.ws_url, kid, server.token)
        ch.kernel_info()
        samples.append(time.perf_counter() - t0)
        ch.close()
        server.api("DELETE", f"/api/kernels/{kid}")
    return samples


def scenario_start(args, results):
    print("== session start → first kernel_info_reply", flush=True)
    floor = Floor()
    try:
        sandboxed = []
        for _ in range(args.start_count):
            info = floor.start()
            sandboxed.append(info["step_ms"]["total"] / 1000)
            subprocess.run([*floor.common, "rm", info["id"]], check=True)
            floor.ids.remove(info["id"])
    finally:
        floor.stop()
    js = JupyterServer()
    try:
        reference = server_start(js, args.start_count)
    finally:
        js.stop()
    cold = Cellgate("--pool-size", "0")
    try:
        cold_s = server_start(cold, args.start_count)
    finally:
        cold.stop()
    warm = Cellgate("--pool-size", "2")
    try:
        warm.wait_pool(2)
        warm_s = server_start(warm, args.start_count, before_each=lambda: warm.wait_pool(2))
    finally:
        warm.stop()
    results["start"] = {"launcher_sandboxed": summary(sandboxed), "jupyter_server": summary(reference),
                        "cellgate_cold": summary(cold_s), "cellgate_warm": summary(warm_s)}


def with_three(fn):
    """Runs fn(channel) on the floor, on jupyter_server and on cellgate (both protocols)."""
    out = {}
    floor = Floor()
    try:
        ch = floor.channel(floor.start())
        out["floor"] = fn(ch)
        ch.close()
    finally:
        floor.stop()
    js = JupyterServer()
    try:
        ch = WsChannel(js.ws_url, js.start_kernel(), js.token)
        ch.kernel_info()
        out["jupyter_server"] = fn(ch)
        ch.close()
    finally:
        js.stop()
    cg = Cellgate()
    try:
        kid = cg.start_kernel()
        before = cg.gateway_stat()
        ch = WsChannel(cg.ws_url, kid, cg.token)
        ch.kernel_info()
        out["cellgate_json"] = fn(ch)
        ch.close()
        out["gateway_after_json"] = cg.gateway_stat()
        out["gateway_before_json"] = before
        ch = WsChannel(cg.ws_url, kid, cg.token, v1=True)
        ch.kernel_info()
        out["cellgate_v1"] = fn(ch)
        ch.close()
    finally:
        cg.stop()
    return out


def scenario_rtt(args, results):
    print("== 1+1 round trip", flush=True)
    out = with_three(lambda ch: timed(lambda: ch.execute("1+1"), args.rtt_count, warmup=20))
    r = {k: summary(v) for k, v in out.items() if isinstance(v, list)}
    # The gateway's own CPU per message over the JSON run: 6 messages a cell
    # (request, busy, execute_input, execute_result, reply, idle).
    cpu = out["gateway_after_json"]["cpu_s"] - out["gateway_before_json"]["cpu_s"]
    r["gateway_cpu_us_per_message"] = cpu / ((args.rtt_count + 21) * 6) * 1e6
    results["rtt"] = r


def ran_ok(status, code):
    """A cell that failed (say, matplotlib missing beside the reference
    kernel) would be timed as a fast error: refuse it."""
    if status != "ok":
        raise RuntimeError(f"the cell {code!r} answered {status!r}: the comparison would be meaningless "
                           "(the unsandboxed reference needs python3-numpy, python3-pandas, python3-matplotlib)")


def scenario_output(args, results):
    print("== 1 MB stdout cell, Matplotlib PNG cell", flush=True)
    out = with_three(lambda ch: {"mb": timed(lambda: ran_ok(ch.execute(MB_PRINT), MB_PRINT), args.output_count, warmup=3),
                                 "png": timed(lambda: ran_ok(ch.execute(PLOT), PLOT), args.output_count, warmup=3)})
    results["output"] = {k: {"mb_stdout": summary(v["mb"]), "png": summary(v["png"])}
                         for k, v in out.items() if isinstance(v, dict) and "mb" in v}


def _worker(make, cells, barrier, out):
    try:
        ch = make()
        ch.kernel_info()
        for _ in range(5):
            ch.execute("1+1")
        barrier.wait()
        lat = []
        for _ in range(cells):
            t0 = time.perf_counter()
            ch.execute("1+1")
            lat.append(time.perf_counter() - t0)
        out.send(("ok", lat))
        ch.close()
    except Exception as e:  # noqa: BLE001
        out.send(("error", repr(e)))


def concurrent(makers, cells):
    """One client process per kernel (no GIL shared between clients, so the
    clients' own speed does not decide the result), started together."""
    import multiprocessing as mp
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(makers) + 1)
    pipes, procs = [], []
    for make in makers:
        recv, send = ctx.Pipe(duplex=False)
        p = ctx.Process(target=_worker, args=(make, cells, barrier, send))
        p.start()
        pipes.append(recv)
        procs.append(p)
    barrier.wait(timeout=300)
    t0 = time.perf_counter()
    results = [r.recv() for r in pipes]
    wall = time.perf_counter() - t0
    for p in procs:
        p.join(timeout=60)
    lat = [x for kind, v in results if kind == "ok" for x in v]
    s = summary(lat)
    s["cells_per_s"] = len(lat) / wall
    s["errors"] = [v for kind, v in results if kind != "ok"]
    return s


def scenario_concurrency(args, results):
    print("== 8 kernels at once", flush=True)
    n, cells = 8, args.concurrent_cells
    out = {}
    floor = Floor()
    try:
        infos = [floor.start() for _ in range(n)]
        out["floor"] = concurrent([lambda i=i: floor.channel(i) for i in infos], cells)
    finally:
        floor.stop()
    js = JupyterServer()
    try:
        kids = [js.start_kernel() for _ in range(n)]
        out["jupyter_server"] = concurrent([lambda k=k: WsChannel(js.ws_url, k, js.token) for k in kids], cells)
    finally:
        js.stop()
    cg = Cellgate()
    try:
        kids = [cg.start_kernel() for _ in range(n)]
        before = cg.gateway_stat()
        out["cellgate_json"] = concurrent([lambda k=k: WsChannel(cg.ws_url, k, cg.token) for k in kids], cells)
        after = cg.gateway_stat()
        out["cellgate_json"]["gateway_cpu_s"] = after["cpu_s"] - before["cpu_s"]
    finally:
        cg.stop()
    results["concurrency"] = out


def reference_stack_pss_kib(n=4):
    """PSS of an unsandboxed ipykernel under jupyter_server with the stack
    imported, the mean of `n` (the reference for every density figure)."""
    js = JupyterServer()
    try:
        for _ in range(n):
            ch = WsChannel(js.ws_url, js.start_kernel(), js.token)
            # The reference must hold the same modules: a kernel whose import
            # failed is a bare kernel, and the ratio would be meaningless.
            if ch.execute(STACK) != "ok":
                raise RuntimeError("the unsandboxed reference kernel cannot import numpy, pandas and matplotlib: "
                                   "apt-get install python3-numpy python3-pandas python3-matplotlib on the host")
            ch.close()
        time.sleep(2)
        return pss_kib(js.kernel_pids()) / n
    finally:
        js.stop()


def scenario_memory(args, results):
    print("== memory of an idle session with the scientific stack imported", flush=True)
    n = 4
    js_pss = reference_stack_pss_kib(n)
    cg = Cellgate()
    try:
        ids = []
        for _ in range(n):
            kid = cg.start_kernel()
            ch = WsChannel(cg.ws_url, kid, cg.token)
            if ch.execute(STACK) != "ok":
                raise RuntimeError("a cellgate kernel cannot import numpy, pandas and matplotlib")
            ch.close()
            ids.append(kid)
        time.sleep(2)
        pids = []
        for kid in ids:
            pids += [int(p) for p in Path(f"/sys/fs/cgroup/pids/cellgate/{kid}/cgroup.procs").read_text().split()]
        cg_pss = pss_kib(pids) / n
    finally:
        cg.stop()
    results["memory"] = {"jupyter_server_kernel_pss_mib": js_pss / 1024, "cellgate_session_pss_mib": cg_pss / 1024}


def scenario_idle(args, results):
    n = args.sessions
    print(f"== {n} idle sessions with the scientific stack imported", flush=True)
    cg = Cellgate("--max-kernels", str(n + 8), "--pool-size", "4", "--max-sessions-per-tenant", "0")
    failures, ids = [], []
    try:
        base_rss = cg.gateway_stat()["rss_kib"]
        t0 = time.time()
        lock = threading.Lock()

        def make(count):
            for _ in range(count):
                r = cg.api("POST", "/v1/sessions", json={"idle_timeout_s": 3600})
                if r.status_code != 201:
                    failures.append(f"create {r.status_code}")
                    continue
                sid = r.json()["id"]
                e = cg.api("POST", f"/v1/sessions/{sid}/execute", json={"code": STACK + "\nprint('ok')"})
                if e.status_code != 200 or e.json().get("stdout") != "ok\n":
                    failures.append(f"execute {e.status_code}")
                with lock:
                    ids.append(sid)

        workers = [threading.Thread(target=make, args=(n // 4 + (1 if i < n % 4 else 0),)) for i in range(4)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        created_s = time.time() - t0
        # Every session still answers.
        for sid in ids:
            r = cg.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "1+1"})
            if r.status_code != 200 or r.json()["status"] != "ok":
                failures.append(f"second execute {r.status_code}")
        time.sleep(2)
        stat = cg.gateway_stat()
        pids = []
        for sid in ids:
            try:
                pids += [int(p) for p in Path(f"/sys/fs/cgroup/pids/cellgate/{sid}/cgroup.procs").read_text().split()]
            except OSError:
                failures.append("cgroup gone")
        per_session = pss_kib(pids) / max(1, len(ids))
        mem = [l for l in Path("/proc/meminfo").read_text().splitlines() if l.startswith("MemAvailable")][0]
        results["idle"] = {"sessions": len(ids), "failed_requests": failures, "create_and_import_s": created_s,
                           "gateway_rss_mib": stat["rss_kib"] / 1024, "gateway_rss_at_start_mib": base_rss / 1024,
                           "gateway_rss_budget_mib": 64 + 0.25 * len(ids),
                           "pss_per_session_mib": per_session / 1024, "mem_available": mem}
    finally:
        cg.stop()


# --- report -------------------------------------------------------------------------------

def row(name, m, floor, ref):
    f = f"{m['median_ms'] / floor['median_ms']:8.2f}" if floor else "       -"
    r = f"{m['median_ms'] / ref['median_ms']:10.3f}" if ref else "         -"
    print(f"{name:48} {m['median_ms']:10.2f} {m['p99_ms']:9.2f} {m['n']:5d} {f} {r}")


def report(results):
    print(f"\n{'measure':48} {'median ms':>10} {'p99 ms':>9} {'n':>5} {'÷floor':>8} {'÷reference':>10}")
    if "start" in results:
        s = results["start"]
        row("start: launcher, sandboxed kernel (floor)", s["launcher_sandboxed"], s["launcher_sandboxed"], s["jupyter_server"])
        row("start: jupyter_server POST → kernel_info", s["jupyter_server"], s["launcher_sandboxed"], s["jupyter_server"])
        row("start: cellgate cold (pool empty)", s["cellgate_cold"], s["launcher_sandboxed"], s["jupyter_server"])
        row("start: cellgate warm (pool claim)", s["cellgate_warm"], s["launcher_sandboxed"], s["jupyter_server"])
    if "rtt" in results:
        r = results["rtt"]
        for name, key in (("1+1: ZMQ straight to the sandboxed kernel", "floor"),
                          ("1+1: jupyter_server WebSocket", "jupyter_server"),
                          ("1+1: cellgate WebSocket, JSON", "cellgate_json"),
                          ("1+1: cellgate WebSocket, v1", "cellgate_v1")):
            row(name, r[key], r["floor"], r["jupyter_server"])
        print(f"{'   p99 ÷ floor p99: cellgate JSON / v1':48} {r['cellgate_json']['p99_ms'] / r['floor']['p99_ms']:10.2f} "
              f"{r['cellgate_v1']['p99_ms'] / r['floor']['p99_ms']:9.2f}")
        print(f"{'   gateway CPU per message (µs)':48} {r['gateway_cpu_us_per_message']:10.1f}")
    if "output" in results:
        o = results["output"]
        for kind, label in (("mb_stdout", "1 MB stdout"), ("png", "PNG plot")):
            for name, key in (("floor", "floor"), ("jupyter_server", "jupyter_server"), ("cellgate JSON", "cellgate_json"),
                              ("cellgate v1", "cellgate_v1")):
                row(f"{label}: {name}", o[key][kind], o["floor"][kind], o["jupyter_server"][kind])
    if "concurrency" in results:
        c = results["concurrency"]
        print(f"\n{'8 kernels at once':48} {'cells/s':>10} {'p99 ms':>9} {'÷floor':>8} {'÷reference':>10}")
        for name, key in (("floor", "floor"), ("jupyter_server", "jupyter_server"), ("cellgate", "cellgate_json")):
            m = c[key]
            print(f"{'8 kernels: ' + name:48} {m['cells_per_s']:10.1f} {m['p99_ms']:9.2f} "
                  f"{m['cells_per_s'] / c['floor']['cells_per_s']:8.2f} {m['cells_per_s'] / c['jupyter_server']['cells_per_s']:10.2f}"
                  + (f"  errors: {len(m['errors'])}" if m["errors"] else ""))
    if "memory" in results:
        m = results["memory"]
        print(f"\nPSS per idle kernel with numpy+pandas+matplotlib: jupyter_server {m['jupyter_server_kernel_pss_mib']:.1f} MiB, "
              f"cellgate session {m['cellgate_session_pss_mib']:.1f} MiB")
    if "idle" in results:
        i = results["idle"]
        print(f"{i['sessions']} idle sessions: {len(i['failed_requests'])} failed requests, gateway RSS "
              f"{i['gateway_rss_mib']:.1f} MiB (budget {i['gateway_rss_budget_mib']:.1f} MiB), PSS per session "
              f"{i['pss_per_session_mib']:.1f} MiB, created+imported in {i['create_and_import_s']:.0f} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", default="start,rtt,output,concurrency,memory,idle")
    ap.add_argument("--rtt-count", type=int, default=300)
    ap.add_argument("--start-count", type=int, default=10)
    ap.add_argument("--output-count", type=int, default=20)
    ap.add_argument("--concurrent-cells", type=int, default=100)
    ap.add_argument("--sessions", type=int, default=100)
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "latest.json"))
    args = ap.parse_args()
    results = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                           "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
               "command": " ".join(sys.argv)}
    table = {"start": scenario_start, "rtt": scenario_rtt, "output": scenario_output,
             "concurrency": scenario_concurrency, "memory": scenario_memory, "idle": scenario_idle}
    for name in args.scenarios.split(","):
        table[name](args, results)
    report(results)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
