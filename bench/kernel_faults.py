#!/usr/bin/python3
"""Where a kernel's start goes, per process of its sandbox: minor and major
page faults and CPU (user, system) from /proc/<pid>/stat, read right after
the session's first `1+1` (issue 16, "Bursts": why a forked kernel still
costs about 0.2 CPU-s on this VM).

    /usr/bin/python3 bench/kernel_faults.py [--zygote] [--count 4]

One gateway started by this script (loopback, runc, no warm pool, its own
cgroup parent); creates one at a time, each deleted after it is read.
Bounded: at most 20 creates. Run as root from a built tree.
"""
import argparse
import json
import os
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import Cellgate  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def processes(parent):
    """(command, minor faults, major faults, user s, system s) of every task under the cgroup parent."""
    rows = []
    for procs in (Path("/sys/fs/cgroup/pids") / parent).rglob("cgroup.procs"):
        for pid in procs.read_text().split():
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            name = stat.split("(", 1)[1].rsplit(")", 1)[0]
            f = stat.rsplit(")", 1)[1].split()
            rows.append({"command": name, "minflt": int(f[7]), "majflt": int(f[9]),
                         "user_s": int(f[11]) / TICK, "system_s": int(f[12]) / TICK})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--zygote", action="store_true")
    ap.add_argument("--count", type=int, default=4)
    args = ap.parse_args()
    parent = "cellgate-faults-" + uuid.uuid4().hex[:6]
    c = Cellgate("--pool-size", "0", "--zygote", "on" if args.zygote else "off", "--cgroup-parent", parent)
    try:
        if args.zygote:
            c.g.wait_for_zygote()
        for _ in range(min(args.count, 20)):
            r = c.api("POST", "/v1/sessions", json={"timeout_s": 120})
            r.raise_for_status()
            sid = r.json()["id"]
            res = c.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "1+1"}).json()
            assert res.get("status") == "ok", res
            print(json.dumps({"zygote": r.json()["sandbox"]["zygote"], "processes": processes(parent)}))
            c.api("DELETE", f"/v1/sessions/{sid}")
    finally:
        c.stop()


if __name__ == "__main__":
    main()
