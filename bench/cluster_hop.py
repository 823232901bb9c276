#!/usr/bin/python3
"""What the router's hop costs (issue 16, Part 2): `1+1` on one session, sent
straight to its node and through HAProxy (the config and sync of
deploy/cellgate-router, a 3-member etcd behind them), interleaved in one run
so both see the same machine. Two paths:

  v1   POST /v1/sessions/{id}/execute {"code": "1+1"} (a new HTTP connection
       per request, as most agent SDKs make);
  ws   one execute_request on the kernel's Jupyter WebSocket, opened once
       (the tunnel HAProxy keeps after the upgrade).

    /usr/bin/python3 bench/cluster_hop.py [--count 300] [--json bench/results/cluster_hop.json]

Ratios are router ÷ direct medians. Bounded: at most 3000 cells per path.
Run as root from a built tree (runc sandboxes), with etcd and HAProxy installed.
"""
import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))

from cluster import EtcdCluster, Router, node  # noqa: E402
from gateway import KernelChannel  # noqa: E402

MAX_COUNT = 3000


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "cluster_hop.json"))
    args = ap.parse_args()
    count = max(10, min(args.count, MAX_COUNT))
    token = "bench-" + uuid.uuid4().hex[:12]
    etcd = EtcdCluster().start()
    n = router = None
    results = {}
    try:
        n = node(30, "beec0001", etcd.endpoints, "--lease-ttl", "10", token=token).start()
        router = Router(etcd.endpoints, token).start()
        end = time.monotonic() + 30
        while "beec0001" not in router.owners() and time.monotonic() < end:
            time.sleep(0.2)
        sid = router.api("POST", "/v1/sessions", json={}).json()["id"]
        k = router.api("POST", "/api/kernels", json={"name": "python3"}).json()["id"]
        samples = {"v1_direct": [], "v1_router": [], "ws_direct": [], "ws_router": []}
        direct_ch, router_ch = KernelChannel(n, k), KernelChannel(router, k)
        try:
            for ch in (direct_ch, router_ch):
                for _ in range(10):
                    ch.execute("1+1")  # warm-up, not counted
            for i in range(count + 10):
                # Alternating which goes first, so neither always meets a kernel just woken.
                pair = (("v1_direct", n), ("v1_router", router))
                for name, target in (pair if i % 2 else pair[::-1]):
                    t = time.perf_counter()
                    r = target.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "1+1"})
                    dt = time.perf_counter() - t
                    if r.status_code != 200 or r.json().get("status") != "ok":
                        raise RuntimeError(f"{name}: {r.status_code} {r.text[:200]}")
                    if i >= 10:
                        samples[name].append(dt * 1000)
                chans = (("ws_direct", direct_ch), ("ws_router", router_ch))
                for name, ch in (chans if i % 2 else chans[::-1]):
                    t = time.perf_counter()
                    res = ch.execute("1+1")
                    dt = time.perf_counter() - t
                    if res["reply"]["status"] != "ok":
                        raise RuntimeError(f"{name}: {res}")
                    if i >= 10:
                        samples[name].append(dt * 1000)
        finally:
            direct_ch.ws.close()
            router_ch.ws.close()
        for name, xs in samples.items():
            results[name] = {"median_ms": statistics.median(xs), "p99_ms": pct(xs, 0.99), "n": len(xs)}
        for path in ("v1", "ws"):
            d, r = results[f"{path}_direct"], results[f"{path}_router"]
            results[f"{path}_ratio"] = r["median_ms"] / d["median_ms"]
            print(f"{path}: direct {d['median_ms']:.2f} ms (p99 {d['p99_ms']:.2f}), through HAProxy "
                  f"{r['median_ms']:.2f} ms (p99 {r['p99_ms']:.2f}): {results[f'{path}_ratio']:.2f}×, "
                  f"+{r['median_ms'] - d['median_ms']:.2f} ms", flush=True)
    finally:
        if router:
            router.cleanup()
        if n:
            n.stop()
            n.cleanup()
        etcd.cleanup()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
