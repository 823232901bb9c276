#!/usr/bin/python3
"""What one cold session costs the box in CPU, and so what a burst of
creates that misses the warm pool must cost (issue 16, "Bursts").

    /usr/bin/python3 bench/cold_cost.py [--count 10] [--burst 20] [--pool 4] [--zygote]
        [--json bench/results/cold-cost.json]

--zygote: the gateway runs with --zygote on, and every measured create's
kernel is forked from the image's zygote (the script checks the session
model); the zygote's own CPU (the fork) counts in "the rest".

One gateway started by this script (loopback, port 0, runc, no warm pool,
its own cgroup parent). Creates run one at a time on an otherwise quiet box:
each POST /v1/sessions + `1+1`, timed from the POST to the result, with the
CPU the whole machine spent meanwhile (/proc/stat) split into
  - the sandbox's: its cgroup's cpuacct (runc init inside the container, the
    kernel's imports and start, the cell);
  - the rest: runc's own process, the gateway, the launcher (what the
    machine spent outside the sandbox's cgroup).
The session is deleted after each measurement, outside it.

Then the floor: a burst of B creates on a pool of P leaves B - P cold starts,
which cannot all finish before (B - P) x CPU per start / cores seconds on
this box, however they are scheduled. Also the floor if the kernel itself
cost nothing (a kernel forked from a zygote into a sandbox made on demand):
only the rest. Bounded: at most 30 creates. Run as root from a built tree.
"""
import argparse
import json
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench import Cellgate  # noqa: E402

MAX_COUNT = 30
TICK = os.sysconf("SC_CLK_TCK")


def machine_busy_s():
    """CPU seconds the machine has spent on anything but idle and iowait."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / TICK  # user nice system idle iowait irq softirq steal


def cgroup_cpu_s(parent):
    """CPU seconds of every task that ran under the cgroup parent (0 before the
    launcher made it, with the first sandbox)."""
    for base in ("/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct", "/sys/fs/cgroup"):
        d = Path(base) / parent
        if (d / "cpuacct.usage").exists():
            return int((d / "cpuacct.usage").read_text()) / 1e9
        if (d / "cpu.stat").exists():  # cgroup v2
            for line in (d / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
    return 0.0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--burst", type=int, default=20)
    ap.add_argument("--pool", type=int, default=4)
    ap.add_argument("--zygote", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if not 1 <= args.count <= MAX_COUNT:
        raise SystemExit(f"--count: 1 to {MAX_COUNT}")
    parent = "cellgate-coldcost-" + uuid.uuid4().hex[:6]
    cg = Cellgate("--pool-size", "0", "--cgroup-parent", parent, *(["--zygote", "on"] if args.zygote else []))
    rows = []
    try:
        if args.zygote:
            cg.g.wait_for_zygote()
        for i in range(args.count + 1):  # the first one warms the page cache, not counted
            time.sleep(1.0)  # let the last delete settle
            busy0, box0, t0 = machine_busy_s(), cgroup_cpu_s(parent), time.perf_counter()
            r = cg.api("POST", "/v1/sessions", json={"timeout_s": 120})
            r.raise_for_status()
            sid = r.json()["id"]
            if r.json()["sandbox"]["zygote"] is not args.zygote:
                raise SystemExit(f"the kernel's zygote flag is not {args.zygote}: {r.json()['sandbox']}")
            res = cg.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "1+1"}).json()
            wall = time.perf_counter() - t0
            busy, box = machine_busy_s() - busy0, cgroup_cpu_s(parent) - box0
            if res.get("status") != "ok":
                raise SystemExit(f"1+1: {res}")
            cg.api("DELETE", f"/v1/sessions/{sid}")
            if i:
                rows.append({"wall_s": wall, "cpu_s": busy, "sandbox_cpu_s": box, "rest_cpu_s": max(0.0, busy - box)})
                print(f"create + 1+1: {wall:.3f} s wall, {busy:.3f} CPU-s ({box:.3f} in the sandbox)", flush=True)
    finally:
        cg.stop()
        for controller in Path("/sys/fs/cgroup").iterdir():  # the parent the launcher made, now empty
            try:
                (controller / parent).rmdir()
            except OSError:
                pass
    if not rows or not any(r["sandbox_cpu_s"] for r in rows):
        raise SystemExit("no sandbox CPU was counted: is the launcher's cgroup parent where this script looks?")
    cores = os.cpu_count()
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    cold = max(0, args.burst - args.pool)
    out = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cores": cores,
        "count": len(rows),
        "median": med,
        "zygote": args.zygote,
        "burst": args.burst,
        "pool": args.pool,
        "floor_s": cold * med["cpu_s"] / cores,
        "floor_if_the_kernel_were_free_s": cold * med["rest_cpu_s"] / cores,
        "rows": rows,
    }
    print(json.dumps({k: v for k, v in out.items() if k != "rows"}, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
