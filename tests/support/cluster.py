"""Real cluster parts for the tests, all on loopback: a 3-member etcd (Debian's
etcd-server), its leader found and killed by pid, members restarted on their
own data dirs; and cellgate nodes, each with its own tag, cgroup parent and
id range so several run side by side on one machine. Authentication is on,
as deployed (security review turn 3, H4): etcd's clients and members use TLS
with client certificates from a CA of the cluster's own (support/pki.py),
and the nodes share a cluster secret."""
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

from support.gateway import Gateway
from support.pki import Pki
from support.waiting import wait_for


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def terminate(procs, timeout):
    """SIGTERM, then SIGKILL whatever has not ended within `timeout` seconds."""
    for p in procs:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def keep_logs(logs, prefix):
    """Copies the logs that exist to CELLGATE_TEST_LOGS for a post-mortem."""
    keep = Path(os.environ.get("CELLGATE_TEST_LOGS", "/tmp/cellgate-test-logs"))
    keep.mkdir(parents=True, exist_ok=True)
    for log in logs:
        if log.exists():
            shutil.copy(log, keep / f"{prefix}-{log.name}")


def cluster_missing():
    for tool in ("etcd", "etcdctl", "haproxy"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install etcd-server etcd-client)"
    return None


class EtcdCluster:
    def __init__(self, members=3, extra_hosts=()):
        """`extra_hosts`: addresses besides 127.0.0.1 the members also serve
        clients on (a network namespace's link to the host)."""
        self.extra_hosts = list(extra_hosts)
        self.dir = Path("/run") / f"cellgate-etcd-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir(mode=0o700)
        self.names = [f"m{i}" for i in range(members)]
        self.client = {n: free_port() for n in self.names}
        self.peer = {n: free_port() for n in self.names}
        self.procs = {}
        self.initial = ",".join(f"{n}=https://127.0.0.1:{self.peer[n]}" for n in self.names)
        self.pki = Pki(self.dir / "pki", hosts=["127.0.0.1", *self.extra_hosts])

    @property
    def endpoints(self):
        return self.endpoints_at("127.0.0.1")

    def endpoints_at(self, host):
        return ",".join(f"https://{host}:{self.client[n]}" for n in self.names)

    def start_member(self, n, state="new"):
        log = open(self.dir / f"{n}.log", "ab")
        cert, key, ca = str(self.pki.server[0]), str(self.pki.server[1]), str(self.pki.ca)
        self.procs[n] = subprocess.Popen(
            ["etcd", "--name", n, "--data-dir", str(self.dir / n),
             "--listen-client-urls", ",".join(f"https://{h}:{self.client[n]}" for h in ["127.0.0.1", *self.extra_hosts]),
             "--advertise-client-urls", f"https://127.0.0.1:{self.client[n]}",
             "--listen-peer-urls", f"https://127.0.0.1:{self.peer[n]}",
             "--initial-advertise-peer-urls", f"https://127.0.0.1:{self.peer[n]}",
             "--cert-file", cert, "--key-file", key, "--client-cert-auth", "--trusted-ca-file", ca,
             "--peer-cert-file", cert, "--peer-key-file", key, "--peer-client-cert-auth",
             "--peer-trusted-ca-file", ca,
             "--initial-cluster", self.initial, "--initial-cluster-token", self.dir.name,
             "--initial-cluster-state", state, "--heartbeat-interval", "100", "--election-timeout", "1000"],
            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "ETCD_UNSUPPORTED_ARCH": ""})
        log.close()

    def start(self, timeout=60):
        for n in self.names:
            self.start_member(n)
        self.wait_healthy(timeout)
        return self

    def ctl(self, *args, endpoints=None, timeout=10, credentials=True, command_timeout="3s"):
        """etcdctl with the cluster's CA and a client certificate (`credentials`
        False: the CA only, as anyone who can reach the port)."""
        tls = self.pki.etcdctl_args() if credentials else ["--cacert", str(self.pki.ca)]
        return subprocess.run(["etcdctl", "--endpoints", endpoints or self.endpoints, "--dial-timeout", "2s",
                               "--command-timeout", command_timeout, *tls, *args],
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
        terminate(list(self.procs.values()), 15)
        self.procs.clear()

    def cleanup(self):
        self.stop()
        keep_logs([self.dir / f"{n}.log" for n in self.names], self.dir.name)
        shutil.rmtree(self.dir, ignore_errors=True)


NODE_UID_BASE = 400_000_000  # well above the default range (1000000 + 4096 × 65536)


def node(index, tag, etcd, *extra, token=None, host="127.0.0.1", credentials=None):
    """A cellgate node of a test cluster: its tag, its own cgroup parent and
    uid range, and `etcd`'s (an EtcdCluster) members at `host` with the
    cluster's certificates and secret (`credentials`: other arguments for those)."""
    kw = {"token": token} if token else {}
    return Gateway("--node-tag", tag, "--etcd", etcd.endpoints_at(host),
                   *(credentials if credentials is not None else etcd.pki.node_args()),
                   "--cgroup-parent", f"cellgate-node{index}",
                   "--uid-range-start", str(NODE_UID_BASE + index * 64 * 65536), "--uid-range-slots", "64", *extra,
                   **kw)


ROUTER = Path(__file__).resolve().parents[2] / "deploy" / "cellgate-router"


class Router:
    """Debian's HAProxy with the config `cellgate-router config` writes, and
    `cellgate-router sync` keeping it in step with etcd."""

    def __init__(self, etcd, token, slots=8):
        self.dir = Path("/run") / f"cellgate-router-{uuid.uuid4().hex[:8]}"
        self.dir.mkdir(mode=0o700)
        self.port = free_port()
        self.socket = self.dir / "haproxy.sock"
        self.map = self.dir / "owners.map"
        self.map.write_text("")
        self.token = token
        self.etcd = etcd.endpoints
        self.pki = etcd.pki
        self.slots = slots
        self.procs = []

    def start(self):
        cfg = subprocess.run(["/usr/bin/python3", str(ROUTER), "config", "--bind", f"127.0.0.1:{self.port}",
                              "--socket", str(self.socket), "--map", str(self.map), "--slots", str(self.slots)],
                             capture_output=True, text=True, check=True).stdout
        (self.dir / "haproxy.cfg").write_text(cfg)
        check = subprocess.run(["haproxy", "-c", "-f", str(self.dir / "haproxy.cfg")], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        for name, argv in (("haproxy", ["haproxy", "-db", "-f", str(self.dir / "haproxy.cfg")]),
                           ("sync", ["/usr/bin/python3", str(ROUTER), "sync", "--etcd", self.etcd,
                                     "--etcd-ca", str(self.pki.ca), "--etcd-cert", str(self.pki.client[0]),
                                     "--etcd-key", str(self.pki.client[1]),
                                     "--cluster-secret-file", str(self.pki.secret), "--socket",
                                     str(self.socket), "--map", str(self.map), "--slots", str(self.slots),
                                     "--interval", "30"])):
            log = open(self.dir / f"{name}.log", "ab")
            self.procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
            log.close()
            if name == "haproxy":
                end = time.monotonic() + 15
                while not self.socket.exists() and time.monotonic() < end:
                    time.sleep(0.1)
        return self

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self):
        return f"ws://127.0.0.1:{self.port}"

    def api(self, method, path, **kw):
        import requests
        headers = {"Authorization": f"token {self.token}", **kw.pop("headers", {})}
        return requests.request(method, self.url + path, headers=headers, timeout=kw.pop("timeout", 120), **kw)

    def runtime(self, command):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.socket))
            s.sendall(command.encode() + b"\n")
            out = b""
            while chunk := s.recv(65536):
                out += chunk
        return out.decode()

    def owners(self):
        """tag → backend, as HAProxy holds it now."""
        rows = [line.split() for line in self.runtime(f"show map {self.map}").splitlines() if line.strip()]
        return {r[1]: r[2] for r in rows if len(r) >= 3}

    def log_text(self):
        return "\n".join((self.dir / f"{n}.log").read_text(errors="replace")[-3000:] for n in ("haproxy", "sync")
                         if (self.dir / f"{n}.log").exists())

    def cleanup(self):
        terminate(self.procs, 10)
        keep_logs([self.dir / "haproxy.log", self.dir / "sync.log"], self.dir.name)
        shutil.rmtree(self.dir, ignore_errors=True)


def sign_as_peer(secret, from_tag, to_tag, method, target, hop="", scope="", tenant="", at=None, nonce=None):
    """The headers a node signs a request to a peer with (gateway/src/http/peer_auth.hpp),
    made here from the cluster secret: what a test needs to play a node."""
    import hashlib
    import hmac
    import secrets as random
    at = str(int(time.time()) if at is None else at)
    nonce = nonce or random.token_hex(16)
    fields = [b"cellgate peer request v1", from_tag, to_tag, at, nonce, method, target, hop, scope, tenant]
    text = b"".join(str(len(f)).encode() + b":" + f + b"\n" for f in
                    (f if isinstance(f, bytes) else f.encode() for f in fields))
    sig = hmac.new(secret, text, hashlib.sha256).hexdigest()
    headers = {"X-Cellgate-Peer": f"v1 from={from_tag} to={to_tag} at={at} nonce={nonce} sig={sig}"}
    if hop:
        headers["X-Cellgate-Hop"] = hop
    if scope:
        headers["X-Cellgate-Scope"] = scope
    if tenant:
        headers["X-Cellgate-Tenant"] = tenant
    return headers


def vouch(tenant, token_name="default"):
    """X-Cellgate-Tenant for a tenant and its token's name."""
    return tenant.encode().hex() + "." + token_name.encode().hex()


class Listener:
    """A plain HTTP listener on loopback that records every request (line and
    headers) and answers 200 with an empty list: a stranger etcd may name as
    a peer."""

    def __init__(self):
        import http.server
        import threading
        self.requests = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                outer.requests.append({"line": self.requestline, "headers": dict(self.headers.items()), "body": body})
                out = b"[]"
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _any

            def log_message(self, *a):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()
