#!/usr/bin/python3
"""A burst of session creates (issue 16, "Bursts"): N clients at once each
POST /v1/sessions and run `1+1`; the time from the burst's start to each
client's first result, p50 and p99, with a warm pool smaller than the burst.
One gateway started by this script (loopback, port 0, runc), the pool filled
before each burst, sessions deleted after it.

    /usr/bin/python3 bench/burst.py [--sizes 20,50] [--pool 4] [--pool-max N] [--rounds 2]
        [--zygote] [--json bench/results/burst.json]

--zygote runs the gateway with --zygote on: kernels that miss the pool are
forked from the image's pre-imported zygote into sandboxes made for them
(the script waits until a lone create says its kernel came from it).

--pool-max (default: the pool's size, no growth) lets misses raise the pool's
target up to N for the gateway's growth window: then each round after the
first finds the pool as far as the earlier bursts grew it. Before each burst
the pool is left to settle (ready at its target, no start under way); each
round's p50/p99 is printed apart, as the first burst and the later ones
measure different things.

Bounded: bursts of at most 64, at most 5 rounds. The reference in the same
run is one lone create + `1+1` with the pool full (what a client that does
not share the machine with a burst waits), so the ratio says what the burst
costs its members. Run as root from a built tree.
"""
import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench import Cellgate  # noqa: E402

MAX_BURST, MAX_ROUNDS = 64, 5


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def first_result(cg, start, out, errors, forked=None):
    try:
        r = cg.api("POST", "/v1/sessions", json={"timeout_s": 120})
        if r.status_code != 201:
            raise RuntimeError(f"create: {r.status_code} {r.text[:200]}")
        sid = r.json()["id"]
        if forked is not None:
            forked.append(bool((r.json().get("sandbox") or {}).get("zygote")))
        res = cg.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "1+1"}).json()
        if res.get("status") != "ok":
            raise RuntimeError(f"1+1: {res}")
        out.append((time.perf_counter() - start, sid))
    except Exception as e:  # counted, reported
        errors.append(str(e))


def burst(cg, n, forked=None):
    out, errors, threads = [], [], []
    start = time.perf_counter()
    for _ in range(n):
        t = threading.Thread(target=first_result, args=(cg, start, out, errors, forked))
        t.start()
        threads.append(t)
    for t in threads:
        t.join(timeout=600)
    for _, sid in out:
        cg.api("DELETE", f"/v1/sessions/{sid}")
    return [s for s, _ in out], errors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="20,50")
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--pool-max", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--zygote", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    args.json = args.json or str(REPO / "bench" / "results" / ("burst-zygote.json" if args.zygote else "burst.json"))
    sizes = [max(1, min(int(x), MAX_BURST)) for x in args.sizes.split(",")]
    rounds = max(1, min(args.rounds, MAX_ROUNDS))
    pool_max = max(args.pool, args.pool_max)
    cg = Cellgate("--pool-size", str(args.pool), "--pool-max", str(pool_max),
                  "--max-kernels", str(max(sizes) + pool_max + 4),
                  "--max-kernels-per-tenant", "0", "--max-launches-per-tenant", "16",
                  *(["--zygote", "on"] if args.zygote else []))
    results = {"pool": args.pool, "pool_max": pool_max, "zygote": args.zygote}

    def settle():
        """The pool at its (possibly raised) target with no start under way."""
        end = time.time() + 300
        while time.time() < end:
            if (cg.metric("cellgate_pool_starting") == 0 and
                    cg.metric("cellgate_pool_ready") >= cg.metric("cellgate_pool_target")):
                return cg.metric("cellgate_pool_ready")
            time.sleep(0.2)
        raise RuntimeError("the warm pool did not settle")
    try:
        cg.wait_pool(args.pool)
        if args.zygote:
            cg.g.wait_for_zygote(timeout=120)
            cg.wait_pool(args.pool)
        lone = []
        for _ in range(5):
            times, errors = burst(cg, 1)
            if errors:
                raise RuntimeError(errors[0])
            lone += times
            cg.wait_pool(args.pool)
        results["lone_median_s"] = statistics.median(lone)
        for n in sizes:
            samples, failed, per_round, forked = [], [], [], []
            for r in range(rounds):
                ready = settle()
                times, errors = burst(cg, n, forked)
                samples += times
                failed += errors
                per_round.append({"ready_before": ready, "p50_s": statistics.median(times) if times else None,
                                  "p99_s": pct(times, 0.99) if times else None, "failed": len(errors)})
                if times:
                    print(f"  burst of {n}, round {r + 1}, {ready} ready before: p50 {statistics.median(times):.2f} s, "
                          f"p99 {pct(times, 0.99):.2f} s, failed {len(errors)}", flush=True)
            results[f"burst_{n}"] = {"p50_s": statistics.median(samples), "p99_s": pct(samples, 0.99),
                                     "max_s": max(samples), "failed": len(failed), "errors": failed[:3],
                                     "forked_from_zygote": sum(forked),
                                     "p50_ratio": statistics.median(samples) / results["lone_median_s"],
                                     "rounds": per_round}
            print(f"burst of {n} (pool {args.pool}): p50 {statistics.median(samples):.2f} s, "
                  f"p99 {pct(samples, 0.99):.2f} s, failed {len(failed)}", flush=True)
    finally:
        cg.g.stop()
        cg.g.cleanup()
    print(f"lone create + 1+1 with the pool full: {results['lone_median_s'] * 1000:.0f} ms")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
