#!/usr/bin/python3
"""Kernel start and 1+1 round trip under runc and under gVisor's runsc.

    sudo kernel-launcher/scripts/measure_runtimes.py [--build-dir build] [--starts 10] [--round-trips 100]

Start: `cellgate-launch run` to the kernel's first kernel_info_reply, as the
launcher times it (step_ms.total: run dir, workspace, config, runtime, sockets,
kernel_info); the command's wall time is printed beside it. Round trip: an
execute_request for "1+1" until both its execute_reply and the kernel's idle
status have arrived, over ZeroMQ straight to the host endpoints the launcher
returns (runc: the kernel's own sockets; runsc: the relay's). Medians, with
the spread; runtimes are interleaved so that other load falls on both
alike. Uses its own state dirs under /run and removes what it starts.
"""
import argparse
import hashlib
import hmac
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import zmq

REPO = Path(__file__).resolve().parents[2]


def header(msg_type):
    return {"msg_id": uuid.uuid4().hex, "session": "measure", "username": "measure", "msg_type": msg_type,
            "version": "5.3", "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


class Kernel:
    """shell + iopub over ZeroMQ, signed with the kernel's key."""

    def __init__(self, conn_file):
        info = json.loads(Path(conn_file).read_text())
        self.key = info["key"].encode()
        self.ctx = zmq.Context()
        base = f"ipc://{info['ip']}-"
        self.shell = self.ctx.socket(zmq.DEALER)
        self.shell.connect(f"{base}{info['shell_port']}")
        self.iopub = self.ctx.socket(zmq.SUB)
        self.iopub.setsockopt(zmq.SUBSCRIBE, b"")
        self.iopub.connect(f"{base}{info['iopub_port']}")
        self.poller = zmq.Poller()
        self.poller.register(self.shell, zmq.POLLIN)
        self.poller.register(self.iopub, zmq.POLLIN)
        while True:  # until iopub is subscribed
            self.request("kernel_info_request", {}, until={"kernel_info_reply"})
            if self.iopub.poll(200):
                while self.iopub.poll(0):
                    self.iopub.recv_multipart()
                break

    def sign(self, parts):
        h = hmac.new(self.key, digestmod=hashlib.sha256)
        for p in parts:
            h.update(p)
        return h.hexdigest().encode()

    def request(self, msg_type, content, until):
        h = header(msg_type)
        parts = [json.dumps(h).encode(), b"{}", b"{}", json.dumps(content).encode()]
        self.shell.send_multipart([b"<IDS|MSG>", self.sign(parts), *parts])
        waiting = set(until)
        while waiting:
            for sock, _ in self.poller.poll(30000) or [(None, None)]:
                if sock is None:
                    raise TimeoutError(f"no {waiting} for {msg_type}")
                frames = sock.recv_multipart()
                i = frames.index(b"<IDS|MSG>")
                parts = frames[i + 2:i + 6]
                if not hmac.compare_digest(frames[i + 1], self.sign(parts)):
                    raise RuntimeError("bad signature")
                hdr, parent, body = json.loads(parts[0]), json.loads(parts[1]), json.loads(parts[3])
                if parent.get("msg_id") != h["msg_id"]:
                    continue
                if hdr["msg_type"] == "status":
                    waiting.discard("idle" if body["execution_state"] == "idle" else "")
                else:
                    waiting.discard(hdr["msg_type"])

    def execute(self, code):
        self.request("execute_request", {"code": code, "silent": False, "store_history": True,
                                         "user_expressions": {}, "allow_stdin": False, "stop_on_error": False},
                     until={"execute_reply", "idle"})

    def close(self):
        self.ctx.destroy(linger=0)


def run_json(argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({r.returncode}): {r.stderr}")
    return json.loads(r.stdout)


def summary(samples_ms):
    s = sorted(samples_ms)
    return {"median_ms": round(statistics.median(s), 2), "min_ms": round(s[0], 2), "max_ms": round(s[-1], 2),
            "n": len(s)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build-dir", default=str(REPO / "build"))
    ap.add_argument("--runtimes", default="runc,runsc")
    ap.add_argument("--starts", type=int, default=10)
    ap.add_argument("--round-trips", type=int, default=100)
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cellgate-measure-", dir="/run"))
    base.chmod(0o711)  # gVisor's gofer, as the sandbox's mapped root, must pass through
    launch = [str(Path(args.build_dir) / "bin" / "cellgate-launch"), "--state-dir", str(base / "state"),
              "--workspace-root", str(base / "workspaces")]
    runtimes = args.runtimes.split(",")
    totals = {rt: [] for rt in runtimes}
    walls = {rt: [] for rt in runtimes}
    rtts = {rt: [] for rt in runtimes}
    kernels, infos = {}, {}
    try:
        # Interleaved, so that whatever else the machine does falls on both alike.
        for _ in range(args.starts):
            for rt in runtimes:
                t0 = time.perf_counter()
                info = run_json([*launch, "run", "--runtime", rt])
                walls[rt].append((time.perf_counter() - t0) * 1000)
                totals[rt].append(info["step_ms"]["total"])
                subprocess.run([*launch, "rm", info["id"]], check=True)
        for rt in runtimes:
            infos[rt] = run_json([*launch, "run", "--runtime", rt])
            kernels[rt] = Kernel(infos[rt]["endpoints"]["connection_file"])
            for _ in range(20):  # warm-up
                kernels[rt].execute("1+1")
        for _ in range(args.round_trips):
            for rt in runtimes:
                t0 = time.perf_counter()
                kernels[rt].execute("1+1")
                rtts[rt].append((time.perf_counter() - t0) * 1000)
        results = {rt: {"start_to_kernel_info": summary(totals[rt]), "start_command_wall": summary(walls[rt]),
                        "round_trip_1_plus_1": summary(rtts[rt])} for rt in runtimes}
        results["load_average"] = os.getloadavg()
        for k in kernels.values():
            k.close()
        for info in infos.values():
            subprocess.run([*launch, "rm", info["id"]], check=True)
    finally:
        subprocess.run([*launch, "reap", "--workspaces"], capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
