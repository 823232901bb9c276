#!/usr/bin/python3
"""gVisor against runc, in one run on one machine: how long a session takes to
start and to answer `1+1`, for runc, runsc on ptrace and runsc on kvm (where
/dev/kvm makes virtual machines: the launcher's own probe decides; without it
the kvm column says why it is missing). One gateway per runtime, started by
this script (loopback, port 0, --pool-size 0), driven through /v1.

    /usr/bin/python3 bench/runtimes.py [--starts 8] [--rtt 200]
        [--json bench/results/runtimes.json]

  start     POST /v1/sessions until it answers 201 (a cold sandbox with a
            kernel that answers), median of --starts, each deleted after;
  1+1       POST /v1/sessions/{id}/execute {"code": "1+1"} on one warm
            session, median (and p99) of --rtt after 10 not counted.

Ratios are against runc's median in the same run. Bounded: at most 30
starts and 2000 cells per runtime. Run as root from a built tree; extra
per-node gateway options come from CELLGATE_TEST_NODE_ARGS.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench import Cellgate  # noqa: E402  (also puts tests/ on the path)
from support.prerequisites import kvm_usable  # noqa: E402  (the launcher's probe, asked the same way)

MAX_STARTS, MAX_RTT = 30, 2000


def pct(values, q):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q * (len(s) - 1))))]


def measure(runtime, platform_flag, args, tmp):
    config = tmp / f"config-{runtime}-{platform_flag}.json"
    config.write_text(json.dumps({"kernelspecs": {"python3": {"runtime": runtime}}}))
    cg = Cellgate("--config", str(config), "--pool-size", "0", "--max-kernels", "4",
                  "--runsc-platform", platform_flag)
    try:
        starts, seen = [], set()
        for _ in range(args.starts):
            t0 = time.perf_counter()
            r = cg.api("POST", "/v1/sessions", json={"timeout_s": 60})
            starts.append(time.perf_counter() - t0)
            if r.status_code != 201:
                raise RuntimeError(f"{runtime}/{platform_flag}: create answered {r.status_code} {r.text[:300]}")
            seen.add(json.dumps(r.json()["sandbox"], sort_keys=True))
            cg.api("DELETE", f"/v1/sessions/{r.json()['id']}")
        sid = cg.api("POST", "/v1/sessions", json={"timeout_s": 60}).json()["id"]
        rtts = []
        for i in range(10 + args.rtt):
            t0 = time.perf_counter()
            out = cg.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "1+1"}).json()
            if i >= 10:
                rtts.append(time.perf_counter() - t0)
            if [r["data"].get("text/plain") for r in out.get("results", []) if r.get("is_main_result")] != ["2"]:
                raise RuntimeError(f"{runtime}: 1+1 gave {out}")
        cg.api("DELETE", f"/v1/sessions/{sid}")
        return {"sandbox": [json.loads(s) for s in sorted(seen)],
                "start_median_s": statistics.median(starts), "start_p90_s": pct(starts, 0.9),
                "rtt_median_ms": statistics.median(rtts) * 1000, "rtt_p99_ms": pct(rtts, 0.99) * 1000}
    finally:
        cg.g.stop()
        cg.g.cleanup()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--starts", type=int, default=8)
    ap.add_argument("--rtt", type=int, default=200)
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "runtimes.json"))
    args = ap.parse_args()
    args.starts = max(1, min(args.starts, MAX_STARTS))
    args.rtt = max(10, min(args.rtt, MAX_RTT))
    tmp = Path(tempfile.mkdtemp(prefix="cellgate-runtimes-"))
    results = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(), "kvm_usable": kvm_usable()}}
    columns = [("runc", "ptrace"), ("runsc", "ptrace")]
    if kvm_usable():
        columns.append(("runsc", "kvm"))
    else:
        results["runsc_kvm"] = {"missing": "no usable /dev/kvm on this machine: runsc runs on ptrace (the probe's fallback)"}
    for runtime, plat in columns:
        key = runtime if runtime == "runc" else f"runsc_{plat}"
        print(f"== {key}", flush=True)
        results[key] = measure(runtime, plat, args, tmp)
    ref = results["runc"]
    for key in ("runsc_ptrace", "runsc_kvm"):
        r = results.get(key)
        if r and "start_median_s" in r:
            r["start_ratio"] = r["start_median_s"] / ref["start_median_s"]
            r["rtt_ratio"] = r["rtt_median_ms"] / ref["rtt_median_ms"]
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))
    print(f"\n{'':14} {'start (median)':>16} {'ratio':>7} {'1+1 (median)':>14} {'p99':>9} {'ratio':>7}")
    for key in ("runc", "runsc_ptrace", "runsc_kvm"):
        r = results.get(key)
        if not r:
            continue
        if "missing" in r:
            print(f"{key:14} {r['missing']}")
            continue
        print(f"{key:14} {r['start_median_s'] * 1000:13.0f} ms {r.get('start_ratio', 1.0):7.2f} "
              f"{r['rtt_median_ms']:11.2f} ms {r['rtt_p99_ms']:6.2f} ms {r.get('rtt_ratio', 1.0):7.2f}")


if __name__ == "__main__":
    main()
