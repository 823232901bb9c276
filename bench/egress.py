#!/usr/bin/python3
"""What the egress proxy costs, in one run on one machine.

    /usr/bin/python3 bench/egress.py [--count 100] [--connections 200] [--json bench/results/egress.json]

Latency: one HTTPS GET on a new connection each time (TCP, TLS handshake,
request, response) to a TLS listener on 127.0.0.1, measured by the same client
code four ways, and reported as medians and ratios to the direct request:
  direct             the host straight to the listener (the reference);
  proxy, tunnel      the host through a session's proxy socket (CONNECT, TLS end to end);
  proxy, terminated  the same for a domain with a credential (the proxy ends TLS
                     with its CA's leaf and makes its own TLS upstream);
  kernel, tunnel / kernel, terminated
                     the same requests made by code in the sandbox, through its
                     forwarder on 127.0.0.1:3128 (the whole path a cell sees).
Memory: the gateway's RSS with N open connections through the proxy (idle
tunnels, then idle terminated ones), per connection.

Run as root from a built tree (./scripts/build.sh, images/build.sh).
"""
import argparse
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import bench  # noqa: E402  (its timer)
sys.path.insert(0, str(REPO / "tests"))
from support.gateway import Gateway  # noqa: E402

SECRET = "bench-secret"


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        body = b"ok"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True

    def log_message(self, *a):
        pass


def rss_bytes(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def https_get(ctx, host, connect):
    """One GET on a new connection; `connect` gives a connected socket."""
    raw = connect()
    with ctx.wrap_socket(raw, server_hostname=host) as t:
        t.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        data = b""
        while chunk := t.recv(4096):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200") or data.startswith(b"HTTP/1.0 200"), data[:200]


def via_unix(path, host, port):
    def connect():
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(1)
        assert head.startswith(b"HTTP/1.1 200"), head
        return s
    return connect


def timed(fn, count, warmup=5):
    samples = bench.timed(fn, count, warmup)
    return {"median_ms": statistics.median(samples) * 1000, "p90_ms": sorted(samples)[int(len(samples) * 0.9)] * 1000,
            "n": count}


KERNEL_LOOP = r"""
import socket, ssl, statistics, time, json
def get(host):
    raw = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    raw.sendall(f'CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n'.encode())
    head = b''
    while b'\r\n\r\n' not in head:
        head += raw.recv(1)
    assert head.startswith(b'HTTP/1.1 200'), head
    with CTX.wrap_socket(raw, server_hostname=host) as t:
        t.sendall(f'GET / HTTP/1.1\r\nHost: {host}\r\n\r\n'.encode())
        data = b''
        while chunk := t.recv(4096):
            data += chunk
    assert b' 200 ' in data.split(b'\r\n')[0], data[:200]
out = {}
for name, host in (('tunnel', 'plain.bench'), ('terminated', 'secret.bench')):
    for _ in range(5):
        get(host)
    samples = []
    for _ in range(COUNT):
        t0 = time.perf_counter()
        get(host)
        samples.append(time.perf_counter() - t0)
    out[name] = {'median_ms': statistics.median(samples) * 1000, 'p90_ms': sorted(samples)[int(COUNT * 0.9)] * 1000, 'n': COUNT}
print('@@' + json.dumps(out))
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--connections", type=int, default=200)
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "egress.json"))
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="cellgate-bench-egress-"))
    cert, key = tmp / "tls.pem", tmp / "tls.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=plain.bench",
                    "-addext", "subjectAltName=DNS:plain.bench,DNS:secret.bench"], check=True, capture_output=True)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.load_cert_chain(str(cert), str(key))
    server.socket = sctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]

    config = tmp / "config.json"
    config.write_text(json.dumps({"egress_secrets": [{"domain": "secret.bench", "header": "X-Key", "value": SECRET}]}))
    per_session = 60  # under the proxy's 64 per session
    sessions_needed = max(1, (args.connections + per_session - 1) // per_session)
    gw = Gateway("--config", str(config), "--max-kernels", str(sessions_needed + 2), "--egress-upstream-ca", str(cert),
                 "--egress-resolve", f"plain.bench=127.0.0.1:{port}", "--egress-resolve", f"secret.bench=127.0.0.1:{port}")
    gw.start()
    results = {"count": args.count}
    try:
        def new_session():
            r = gw.api("POST", "/v1/sessions", json={"network": {"allow": ["plain.bench", "secret.bench"]},
                                                     "timeout_s": 300}, timeout=180)
            assert r.status_code == 201, r.text
            return r.json()["id"]

        sid = new_session()
        sock = str(gw.state_dir / "egress" / sid / "proxy.sock")
        ca = gw.state_dir / "egress-ca" / "ca.pem"
        upstream_ctx = ssl.create_default_context(cafile=str(cert))
        proxied_ctx = ssl.create_default_context(cafile=str(cert))
        proxied_ctx.load_verify_locations(cafile=str(ca))

        def direct():
            return socket.create_connection(("127.0.0.1", port), timeout=10)

        lat = {
            "direct": timed(lambda: https_get(upstream_ctx, "plain.bench", direct), args.count),
            "proxy, tunnel": timed(lambda: https_get(proxied_ctx, "plain.bench", via_unix(sock, "plain.bench", 443)),
                                   args.count),
            "proxy, terminated": timed(lambda: https_get(proxied_ctx, "secret.bench",
                                                         via_unix(sock, "secret.bench", 443)), args.count),
        }
        code = (f"COUNT = {args.count}\nimport ssl\nCTX = ssl.create_default_context()\n"
                f"CTX.load_verify_locations(cadata={cert.read_text()!r})\n" + KERNEL_LOOP)
        r = gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": code, "timeout_s": 600}, timeout=700)
        out = r.json()
        line = [l for l in out["stdout"].splitlines() if l.startswith("@@")]
        assert line, out
        kernel = json.loads(line[-1][2:])
        lat["kernel, tunnel"] = kernel["tunnel"]
        lat["kernel, terminated"] = kernel["terminated"]
        base = lat["direct"]["median_ms"]
        for name, v in lat.items():
            v["ratio_to_direct"] = round(v["median_ms"] / base, 2)
            v["added_ms"] = round(v["median_ms"] - base, 3)
        results["latency"] = lat

        # Memory per open connection: idle tunnels, then idle terminated ones.
        sids = [sid] + [new_session() for _ in range(sessions_needed - 1)]
        socks = [str(gw.state_dir / "egress" / s / "proxy.sock") for s in sids]
        pid = gw.proc.pid
        mem = {}
        for kind, host in (("tunnel", "plain.bench"), ("terminated", "secret.bench")):
            time.sleep(1.0)
            before = rss_bytes(pid)
            held = []
            for i in range(args.connections):
                s = via_unix(socks[i // per_session], host, 443)()
                if kind == "terminated":
                    s = proxied_ctx.wrap_socket(s, server_hostname=host)  # the handshake done, no request yet
                else:
                    s = upstream_ctx.wrap_socket(s, server_hostname=host)
                held.append(s)
            time.sleep(1.0)
            after = rss_bytes(pid)
            open_now = int([l for l in gw.api("GET", "/metrics").text.splitlines()
                            if l.startswith("cellgate_egress_open_connections ")][0].split()[1])
            for s in held:
                s.close()
            mem[kind] = {"connections": args.connections, "open_in_metrics": open_now,
                         "rss_before_mib": round(before / 2**20, 1), "rss_after_mib": round(after / 2**20, 1),
                         "kib_per_connection": round((after - before) / 1024 / args.connections, 1)}
        results["memory"] = mem
    finally:
        gw.stop()
        gw.cleanup()
        server.shutdown()
    print(json.dumps(results, indent=1))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
