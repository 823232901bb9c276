#!/usr/bin/python3
"""What a hop costs (issue 16, Part 2): `1+1` on one session, sent straight to
its node, through HAProxy (the config and sync of deploy/cellgate-router, a
3-member etcd behind them), and through a second node that relays it to the
owner (the internal hop, http/hop.hpp), interleaved in one run so all see the
same machine. Two paths:

  v1   POST /v1/sessions/{id}/execute {"code": "1+1"} (a new HTTP connection
       per request, as most agent SDKs make);
  ws   one execute_request on the kernel's Jupyter WebSocket, opened once
       (the tunnel HAProxy keeps after the upgrade).

    /usr/bin/python3 bench/cluster_hop.py [--count 300] [--json bench/results/cluster_hop.json]

Ratios are router ÷ direct and relay ÷ direct medians. Bounded: at most 3000 cells per path.
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

sys.path.insert(0, str(REPO / "tests"))
from support.cluster import EtcdCluster, Router, node  # noqa: E402
from support.gateway import KernelChannel  # noqa: E402

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
    n = relay = router = None
    results = {}
    try:
        n = node(30, "beec0001", etcd.endpoints, "--lease-ttl", "10", token=token).start()
        relay = node(31, "beec0002", etcd.endpoints, "--lease-ttl", "10", "--pool-size", "0", token=token).start()
        router = Router(etcd.endpoints, token).start()
        end = time.monotonic() + 30
        while not {"beec0001", "beec0002"} <= set(router.owners()) and time.monotonic() < end:
            time.sleep(0.2)
        # Made on the first node, so the second one relays.
        sid = n.api("POST", "/v1/sessions", json={}).json()["id"]
        k = n.api("POST", "/api/kernels", json={"name": "python3"}).json()["id"]
        end = time.monotonic() + 30  # the relay learns its peer at its next refresh
        while relay.api("GET", f"/v1/sessions/{sid}").status_code != 200 and time.monotonic() < end:
            time.sleep(0.2)
        targets = {"direct": n, "router": router, "relay": relay}
        samples = {f"{p}_{t}": [] for p in ("v1", "ws") for t in targets}
        chans = {t: KernelChannel(g, k) for t, g in targets.items()}
        try:
            for ch in chans.values():
                for _ in range(10):
                    ch.execute("1+1")  # warm-up, not counted
            order = list(targets)
            for i in range(count + 10):
                # Rotating which goes first, so none always meets a kernel just woken.
                turn = order[i % 3:] + order[:i % 3]
                for t in turn:
                    start = time.perf_counter()
                    r = targets[t].api("POST", f"/v1/sessions/{sid}/execute", json={"code": "1+1"})
                    dt = time.perf_counter() - start
                    if r.status_code != 200 or r.json().get("status") != "ok":
                        raise RuntimeError(f"v1 {t}: {r.status_code} {r.text[:200]}")
                    if i >= 10:
                        samples[f"v1_{t}"].append(dt * 1000)
                for t in turn:
                    start = time.perf_counter()
                    res = chans[t].execute("1+1")
                    dt = time.perf_counter() - start
                    if res["reply"]["status"] != "ok":
                        raise RuntimeError(f"ws {t}: {res}")
                    if i >= 10:
                        samples[f"ws_{t}"].append(dt * 1000)
        finally:
            for ch in chans.values():
                ch.ws.close()
        for name, xs in samples.items():
            results[name] = {"median_ms": statistics.median(xs), "p99_ms": pct(xs, 0.99), "n": len(xs)}
        for path in ("v1", "ws"):
            d = results[f"{path}_direct"]
            line = f"{path}: direct {d['median_ms']:.2f} ms (p99 {d['p99_ms']:.2f})"
            for via, label in (("router", "through HAProxy"), ("relay", "relayed by another node")):
                r = results[f"{path}_{via}"]
                results[f"{path}_{via}_ratio"] = r["median_ms"] / d["median_ms"]
                line += (f"; {label} {r['median_ms']:.2f} ms (p99 {r['p99_ms']:.2f}): "
                         f"{results[f'{path}_{via}_ratio']:.2f}×, +{r['median_ms'] - d['median_ms']:.2f} ms")
            print(line, flush=True)
    finally:
        if router:
            router.cleanup()
        for g in (n, relay):
            if g:
                g.stop()
                g.cleanup()
        etcd.cleanup()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
