"""Real cluster parts for the tests, all on loopback: a 3-member etcd (Debian's
etcd-server), its leader found and killed by pid, members restarted on their
own data dirs; and cellgate nodes, each with its own tag, cgroup parent and
id range so several run side by side on one machine."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from gateway import Gateway


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cluster_missing():
    for tool in ("etcd", "etcdctl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install etcd-server etcd-client)"
    return None


class EtcdCluster:
    def __init__(self, members=3):
        self.dir = Path("/run") / f"cellgate-etcd-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir(mode=0o700)
        self.names = [f"m{i}" for i in range(members)]
        self.client = {n: free_port() for n in self.names}
        self.peer = {n: free_port() for n in self.names}
        self.procs = {}
        self.initial = ",".join(f"{n}=http://127.0.0.1:{self.peer[n]}" for n in self.names)

    @property
    def endpoints(self):
        return ",".join(f"http://127.0.0.1:{self.client[n]}" for n in self.names)

    def start_member(self, n, state="new"):
        log = open(self.dir / f"{n}.log", "ab")
        self.procs[n] = subprocess.Popen(
            ["etcd", "--name", n, "--data-dir", str(self.dir / n),
             "--listen-client-urls", f"http://127.0.0.1:{self.client[n]}",
             "--advertise-client-urls", f"http://127.0.0.1:{self.client[n]}",
             "--listen-peer-urls", f"http://127.0.0.1:{self.peer[n]}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{self.peer[n]}",
             "--initial-cluster", self.initial, "--initial-cluster-token", self.dir.name,
             "--initial-cluster-state", state, "--heartbeat-interval", "100", "--election-timeout", "1000"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "ETCD_UNSUPPORTED_ARCH": ""})
        log.close()

    def start(self, timeout=60):
        for n in self.names:
            self.start_member(n)
        self.wait_healthy(timeout)
        return self

    def ctl(self, *args, endpoints=None, timeout=10):
        return subprocess.run(["etcdctl", "--endpoints", endpoints or self.endpoints, "--dial-timeout", "2s",
                               "--command-timeout", "3s", *args],
                              capture_output=True, text=True, timeout=timeout, env={**os.environ, "ETCDCTL_API": "3"})

    def wait_healthy(self, timeout=60):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.ctl("endpoint", "health").returncode == 0 and self.leader():
                return
            time.sleep(0.3)
        raise RuntimeError("etcd did not become healthy:\n" + "\n".join(
            (self.dir / f"{n}.log").read_text(errors="replace")[-2000:] for n in self.names))

    def leader(self):
        r = self.ctl("endpoint", "status", "-w", "json")
        try:
            for s in json.loads(r.stdout or "[]"):
                st = s["Status"]
                if st["header"]["member_id"] == st["leader"]:
                    port = int(s["Endpoint"].rsplit(":", 1)[1])
                    return next(n for n in self.names if self.client[n] == port)
        except (ValueError, KeyError, StopIteration):
            pass
        return None

    def get(self, key):
        """The value at `key` (None when absent) and its lease (hex string)."""
        r = self.ctl("get", key, "-w", "json")
        if r.returncode != 0:
            raise RuntimeError(r.stderr)
        kvs = json.loads(r.stdout).get("kvs") or []
        if not kvs:
            return None, None
        import base64
        kv = kvs[0]
        return base64.b64decode(kv["value"]).decode(), format(int(kv.get("lease", 0)), "x")

    def kill(self, n):
        p = self.procs.pop(n)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)

    def kill_all(self):
        for n in list(self.procs):
            self.kill(n)

    def stop(self):
        for n, p in list(self.procs.items()):
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.clear()

    def cleanup(self):
        self.stop()
        keep = Path(os.environ.get("CELLGATE_TEST_LOGS", "/tmp/cellgate-test-logs"))
        keep.mkdir(parents=True, exist_ok=True)
        for n in self.names:
            if (self.dir / f"{n}.log").exists():
                shutil.copy(self.dir / f"{n}.log", keep / f"{self.dir.name}-{n}.log")
        shutil.rmtree(self.dir, ignore_errors=True)


NODE_UID_BASE = 400_000_000  # well above the default range (1000000 + 4096 × 65536)


def node(index, tag, etcd, *extra):
    """A cellgate node of a test cluster: its tag, its own cgroup parent and uid range."""
    return Gateway("--node-tag", tag, "--etcd", etcd, "--cgroup-parent", f"cellgate-node{index}",
                   "--uid-range-start", str(NODE_UID_BASE + index * 64 * 65536), "--uid-range-slots", "64", *extra)
