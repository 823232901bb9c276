#!/usr/bin/python3
"""cellgate's benchmark harness: measures cellgate side by side with Debian's
jupyter_server (the reference) and with the floor (the same request sent
straight to a kernel over ZeroMQ), in one run on one machine, and prints each
figure with its ratios. Writes the results as JSON.

    /usr/bin/python3 bench/bench.py [--scenarios start,rtt] [--rtt-count 300]
                                    [--start-count 10] [--json bench/results/latest.json]

Run as root from a built tree (./scripts/build.sh, images/build.sh).
"""
import argparse
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

import requests  # noqa: E402
import websocket  # noqa: E402
import zmq  # noqa: E402
from jupyter_client.session import Session  # noqa: E402

from gateway import BUILD, IMAGE_STORE, Gateway  # noqa: E402

PY = "/usr/bin/python3"


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


# --- clients ------------------------------------------------------------------------------

class ZmqKernel:
    """An unsandboxed ipykernel on ipc sockets, driven straight over ZeroMQ: the floor."""

    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="cellgate-bench-"))
        self.key = uuid.uuid4().hex
        self.conn = self.dir / "kernel.json"
        self.conn.write_text(json.dumps({"transport": "ipc", "ip": str(self.dir / "k"), "shell_port": 1,
                                         "iopub_port": 2, "stdin_port": 3, "control_port": 4, "hb_port": 5,
                                         "key": self.key, "signature_scheme": "hmac-sha256"}))
        env = {"PATH": "/usr/bin:/bin", "HOME": str(self.dir), "MPLBACKEND": "module://matplotlib_inline.backend_inline"}
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen([PY, "-m", "ipykernel_launcher", "-f", str(self.conn)], env=env, cwd=self.dir,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.session = Session(key=self.key.encode())
        self.ctx = zmq.Context()
        while not all((self.dir / f"k-{i}").exists() for i in range(1, 6)):
            time.sleep(0.002)
        self.shell = self.ctx.socket(zmq.DEALER)
        self.shell.connect(f"ipc://{self.dir}/k-1")
        self.iopub = self.ctx.socket(zmq.SUB)
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect(f"ipc://{self.dir}/k-2")
        msg = self.session.send(self.shell, "kernel_info_request", {})
        self.session.recv(self.shell, mode=0)
        self.started_s = time.perf_counter() - self.t0
        # Make sure iopub is subscribed before timing anything on it.
        while True:
            self.session.send(self.shell, "kernel_info_request", {})
            self.session.recv(self.shell, mode=0)
            if self.iopub.poll(100):
                while self.iopub.poll(0):
                    self.iopub.recv_multipart()
                break

    def execute(self, code):
        msg = self.session.send(self.shell, "execute_request", {"code": code, "silent": False})
        msg_id = msg["header"]["msg_id"]
        replied = idle = False
        while not (replied and idle):
            for sock in zmq.select([self.shell, self.iopub], [], [], 60)[0]:
                _, m = self.session.recv(sock, mode=0)
                if m["parent_header"].get("msg_id") != msg_id:
                    continue
                if sock is self.shell:
                    replied = True
                elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    idle = True

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self.ctx.destroy(linger=0)
        subprocess.run(["rm", "-rf", str(self.dir)])


class WsKernel:
    """A kernel behind a Jupyter server's WebSocket (cellgate or jupyter_server)."""

    def __init__(self, ws_url, kernel_id, token, v1=False):
        self.v1 = v1
        self.ws = websocket.create_connection(
            f"{ws_url}/api/kernels/{kernel_id}/channels?session_id={uuid.uuid4().hex}&token={token}",
            subprotocols=["v1.kernel.websocket.jupyter.org"] if v1 else None, timeout=120)
        self.ws.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _send(self, msg_type, content):
        header = {"msg_id": uuid.uuid4().hex, "msg_type": msg_type, "session": "bench", "username": "bench",
                  "version": "5.3", "date": "2026-01-01T00:00:00Z"}
        if self.v1:
            import struct
            parts = [b"shell", json.dumps(header).encode(), b"{}", b"{}", json.dumps(content).encode()]
            offsets, pos = [], 8 * 7
            for p in parts:
                offsets.append(pos)
                pos += len(p)
            offsets.append(pos)
            self.ws.send_binary(struct.pack("<Q", 6) + struct.pack("<6Q", *offsets) + b"".join(parts))
        else:
            self.ws.send(json.dumps({"channel": "shell", "header": header, "parent_header": {}, "metadata": {},
                                     "content": content}))
        return header["msg_id"]

    def _recv(self):
        op, data = self.ws.recv_data()
        if self.v1:
            import struct
            n = struct.unpack_from("<Q", data)[0]
            off = struct.unpack_from(f"<{n}Q", data, 8)
            channel = data[off[0]:off[1]].decode()
            header = json.loads(data[off[1]:off[2]])
            parent = json.loads(data[off[2]:off[3]])
            content = json.loads(data[off[4]:off[5]]) if header["msg_type"] == "status" else None
            return channel, header["msg_type"], parent.get("msg_id"), content
        m = json.loads(data)
        return m["channel"], m["header"]["msg_type"], m["parent_header"].get("msg_id"), m["content"]

    def kernel_info(self):
        msg_id = self._send("kernel_info_request", {})
        while True:
            channel, msg_type, parent, _ = self._recv()
            if parent == msg_id and msg_type == "kernel_info_reply":
                return

    def execute(self, code):
        msg_id = self._send("execute_request", {"code": code, "silent": False})
        replied = idle = False
        while not (replied and idle):
            channel, msg_type, parent, content = self._recv()
            if parent != msg_id:
                continue
            if msg_type == "execute_reply":
                replied = True
            elif msg_type == "status" and content["execution_state"] == "idle":
                idle = True

    def close(self):
        self.ws.close()


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
        end = time.time() + 60
        while time.time() < end:
            try:
                if requests.get(self.url + "/api", timeout=1).ok:
                    return
            except requests.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("jupyter_server did not start")

    def api(self, method, path, **kw):
        return requests.request(method, self.url + path, headers={"Authorization": f"token {self.token}"},
                                timeout=120, **kw)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()
        subprocess.run(["rm", "-rf", str(self.dir)])


class Cellgate:
    def __init__(self, *args):
        self.g = Gateway(*args).start()
        self.url, self.ws_url, self.token = self.g.url, self.g.ws_url, self.g.token

    def api(self, method, path, **kw):
        return self.g.api(method, path, **kw)

    def stop(self):
        self.g.stop()
        self.g.cleanup()


# --- scenarios ----------------------------------------------------------------------------

def server_start_to_kernel_info(server, count):
    """POST /api/kernels, then the first kernel_info_reply over the WebSocket."""
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        r = server.api("POST", "/api/kernels", json={"name": "python3"})
        r.raise_for_status()
        k = WsKernel(server.ws_url, r.json()["id"], server.token)
        k.kernel_info()
        samples.append(time.perf_counter() - t0)
        k.close()
        server.api("DELETE", f"/api/kernels/{r.json()['id']}")
    return samples


def scenario_start(args, results):
    print("== session start → first kernel_info_reply", flush=True)
    floor = []
    for _ in range(args.start_count):
        k = ZmqKernel()
        floor.append(k.started_s)
        k.close()
    launch = BUILD / "bin" / "cellgate-launch"
    base = Path(tempfile.mkdtemp(prefix="cellgate-bench-launch-", dir="/run"))
    common = [str(launch), "--state-dir", str(base / "state"), "--image-store", str(IMAGE_STORE),
              "--workspace-root", str(base / "ws")]
    sandboxed = []
    for _ in range(args.start_count):
        out = subprocess.run([*common, "run"], capture_output=True, text=True, check=True)
        info = json.loads(out.stdout)
        sandboxed.append(info["step_ms"]["total"] / 1000)
        subprocess.run([*common, "rm", info["id"]], check=True)
    subprocess.run(["rm", "-rf", str(base)])
    js = JupyterServer()
    try:
        reference = server_start_to_kernel_info(js, args.start_count)
    finally:
        js.stop()
    cg = Cellgate()
    try:
        gateway = server_start_to_kernel_info(cg, args.start_count)
    finally:
        cg.stop()
    results["start"] = {"unsandboxed_ipykernel": summary(floor), "sandboxed_launcher": summary(sandboxed),
                        "jupyter_server": summary(reference), "cellgate_cold": summary(gateway)}


def rtt(kernel, count):
    for _ in range(20):
        kernel.execute("1+1")  # warm up
    samples = []
    for _ in range(count):
        t0 = time.perf_counter()
        kernel.execute("1+1")
        samples.append(time.perf_counter() - t0)
    return samples


def scenario_rtt(args, results):
    print("== 1+1 round trip", flush=True)
    floor_kernel = ZmqKernel()
    try:
        floor = rtt(floor_kernel, args.rtt_count)
    finally:
        floor_kernel.close()
    js = JupyterServer()
    try:
        kid = js.api("POST", "/api/kernels", json={"name": "python3"}).json()["id"]
        k = WsKernel(js.ws_url, kid, js.token)
        k.kernel_info()
        reference = rtt(k, args.rtt_count)
        k.close()
    finally:
        js.stop()
    cg = Cellgate()
    try:
        kid = cg.api("POST", "/api/kernels", json={"name": "python3"}).json()["id"]
        k = WsKernel(cg.ws_url, kid, cg.token)
        k.kernel_info()
        json_proto = rtt(k, args.rtt_count)
        k.close()
        k = WsKernel(cg.ws_url, kid, cg.token, v1=True)
        k.kernel_info()
        v1_proto = rtt(k, args.rtt_count)
        k.close()
    finally:
        cg.stop()
    results["rtt"] = {"floor_zmq": summary(floor), "jupyter_server": summary(reference),
                      "cellgate_json": summary(json_proto), "cellgate_v1": summary(v1_proto)}


def report(results):
    rows = []
    if "start" in results:
        s = results["start"]
        rows.append(("start: unsandboxed ipykernel (floor)", s["unsandboxed_ipykernel"], s["unsandboxed_ipykernel"], s["jupyter_server"]))
        rows.append(("start: sandboxed kernel (launcher)", s["sandboxed_launcher"], s["unsandboxed_ipykernel"], s["jupyter_server"]))
        rows.append(("start: jupyter_server POST→kernel_info", s["jupyter_server"], s["unsandboxed_ipykernel"], s["jupyter_server"]))
        rows.append(("start: cellgate POST→kernel_info (cold)", s["cellgate_cold"], s["unsandboxed_ipykernel"], s["jupyter_server"]))
    if "rtt" in results:
        r = results["rtt"]
        for name, key in (("1+1: ZMQ straight to the kernel (floor)", "floor_zmq"),
                          ("1+1: jupyter_server WebSocket", "jupyter_server"),
                          ("1+1: cellgate WebSocket, JSON", "cellgate_json"),
                          ("1+1: cellgate WebSocket, v1", "cellgate_v1")):
            rows.append((name, r[key], r["floor_zmq"], r["jupyter_server"]))
    print(f"\n{'measure':44} {'median ms':>10} {'p99 ms':>9} {'n':>5} {'÷floor':>8} {'÷reference':>11}")
    for name, m, floor, ref in rows:
        print(f"{name:44} {m['median_ms']:10.2f} {m['p99_ms']:9.2f} {m['n']:5d} "
              f"{m['median_ms'] / floor['median_ms']:8.2f} {m['median_ms'] / ref['median_ms']:11.3f}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenarios", default="start,rtt")
    ap.add_argument("--rtt-count", type=int, default=300)
    ap.add_argument("--start-count", type=int, default=10)
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "latest.json"))
    args = ap.parse_args()
    results = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                           "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)},
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for name in args.scenarios.split(","):
        {"start": scenario_start, "rtt": scenario_rtt}[name](args, results)
    report(results)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
