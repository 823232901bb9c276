#!/usr/bin/python3
"""What forking a session costs against starting the same number of sessions
cold, in one run on one machine, for each runtime (runc, then runsc/gVisor),
through the agent API of a gateway this script starts (loopback, port 0,
--pool-size 0: no warm pool, so every cold start is a real sandbox start).

    /usr/bin/python3 bench/fork.py [--counts 1,4,8] [--count 3] [--warmup 1]
        [--data-mib 200] [--files 4] [--runtimes runc,runsc] [--json bench/results/fork.json]

One parent session per runtime writes --data-mib MiB of random bytes into
--files files under /workspace and imports numpy and pandas. Then, each round,
for each N in --counts:
  cold N         N POST /v1/sessions at once, each followed by the first cell
                 `import numpy, pandas` (no data: the reference is what a caller
                 without fork pays for N usable sessions), timed until the last
                 of the N answers;
  fork N         POST /v1/sessions/{parent}/fork {"count": N}, then the same
                 first cell in every child, which also reads the head of every
                 data file (checked against the parent's), timed from the POST
                 until the last child answers;
and once per round `snapshot`: the round trip of POST /v1/sessions/{parent}/snapshots
(the copy alone, no child). The order of cold and fork alternates by round.
Each figure is the median of --count rounds after --warmup uncounted rounds
(N = 1 only), and fork N is reported as a ratio to cold N of the same round
set. From the snapshot model and the disk it reads what the copy costs:
disk_bytes against the data written, and the blocks the N children's
workspace images add.

Run as root from a built tree (./scripts/build.sh, images/build.sh). Extra
per-node gateway options (cgroup parent, uid range) come from
CELLGATE_TEST_NODE_ARGS, as for every gateway the tests and bench.py start.
"""
import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import requests  # noqa: E402

from bench import Cellgate, summary  # noqa: E402  (also puts tests/ on the path)
from pause import Failure, allocated, fs_type  # noqa: E402

COLD_CELL = "import numpy, pandas\nprint('ok')"
# The children's first cell: the same imports, and proof that the files came along.
PROBE_CELL = """import numpy, pandas, os
print(' '.join(f'{n}:{os.path.getsize("/workspace/" + n)}:{open("/workspace/" + n, "rb").read(10).hex()}'
               for n in sorted(os.listdir('/workspace')) if n.startswith('data-')))"""
MAX_COUNT, MAX_WARMUP, MAX_N = 10, 3, 16
SNAPSHOT_LOG = re.compile(r"snapshot ([0-9a-f-]{36}) taken \(.*writes waited (\d+) ms\)")


def setup_cell(files, mib_per_file):
    return f"""import os, numpy, pandas
for i in range({files}):
    with open(f'/workspace/data-{{i}}.bin', 'wb') as f:
        for _ in range({mib_per_file}):
            f.write(os.urandom(1 << 20))
        f.flush()
        os.fsync(f.fileno())
print('written')"""


class Api:
    """The gateway's /v1 surface, one requests.Session per thread (a trial's
    requests go out at once)."""

    def __init__(self, cg, args):
        self.cg, self.args, self.local = cg, args, threading.local()

    def session(self):
        if not hasattr(self.local, "s"):
            self.local.s = requests.Session()
            self.local.s.headers["Authorization"] = f"token {self.cg.token}"
        return self.local.s

    def call(self, method, path, expect, **kw):
        r = self.session().request(method, self.cg.url + path, timeout=self.args.request_timeout, **kw)
        if r.status_code != expect:
            raise Failure(f"{method} {path}: {r.status_code} {r.text[:500]}")
        return r.json() if r.content else None

    def execute(self, sid, code):
        out = self.call("POST", f"/v1/sessions/{sid}/execute", 200,
                        json={"code": code, "timeout_s": self.args.cell_timeout})
        if out["status"] != "ok":
            raise Failure(f"cell {code[:40]!r}: {out['status']} {out.get('error')}")
        return out["stdout"].strip()

    def create(self):
        return self.call("POST", "/v1/sessions", 201, json={"timeout_s": self.args.cell_timeout})["id"]

    def delete_session(self, sid):
        self.session().request("DELETE", self.cg.url + f"/v1/sessions/{sid}", timeout=self.args.request_timeout)

    def delete_snapshot(self, snap):
        r = self.session().request("DELETE", self.cg.url + f"/v1/snapshots/{snap}", timeout=self.args.request_timeout)
        if r.status_code != 204:
            raise Failure(f"DELETE /v1/snapshots/{snap}: {r.status_code} {r.text[:300]}")


def images_allocated(cg):
    """Allocated bytes of every workspace image (<workspace root>/*.img, not the mounts)."""
    return sum(allocated(p) or 0 for p in cg.g.workspace_root.glob("*.img"))


def launch_steps(cg, sid):
    """The launcher's step times for a sandbox (its info.json), {} if gone."""
    try:
        return json.loads((cg.g.state_dir / "sandboxes" / sid / "info.json").read_text()).get("step_ms", {})
    except (OSError, ValueError):
        return {}


def copy_ms_from_log(cg, snap):
    """The launcher's time for a snapshot's freeze + copy, as the gateway logged it."""
    for m in SNAPSHOT_LOG.finditer(cg.g.log_text()):
        if m.group(1) == snap:
            return int(m.group(2))
    return None


def cleanup(api, pool, sessions, snap=None):
    list(pool.map(api.delete_session, sessions))
    if snap:
        api.delete_snapshot(snap)


def cold_trial(api, pool, n):
    made = []

    def one():
        sid = api.create()
        made.append(sid)
        t = time.monotonic()
        api.execute(sid, COLD_CELL)
        return time.monotonic() - t

    t0 = time.monotonic()
    try:
        cells = list(pool.map(lambda _: one(), range(n)))
        total = time.monotonic() - t0
        steps = [launch_steps(api.cg, s) for s in made]
    finally:
        cleanup(api, pool, made)
    return {"total_s": total, "first_cell_max_s": max(cells),
            "launch_workspace_ms": statistics.median(s.get("workspace", 0) for s in steps),
            "launch_total_ms": statistics.median(s.get("total", 0) for s in steps)}


def fork_trial(api, pool, parent, n, expected):
    before = images_allocated(api.cg)
    t0 = time.monotonic()
    body = api.call("POST", f"/v1/sessions/{parent}/fork", 201, json={"count": n})
    post = time.monotonic() - t0
    snap, children = body["snapshot"], [s["id"] for s in body["sessions"]]
    try:
        if len(children) != n:
            raise Failure(f"fork {n}: {len(children)} sessions came back")
        outs = list(pool.map(lambda sid: api.execute(sid, PROBE_CELL), children))
        total = time.monotonic() - t0
        if any(o != expected for o in outs):
            raise Failure(f"fork {n}: a child sees other files: {outs!r} (parent: {expected!r})")
        steps = [launch_steps(api.cg, s) for s in children]
        snap_img = api.cg.g.state_dir / "snapshots" / snap["id"] / "workspace.img"
        r = {"total_s": total, "post_s": post, "copy_ms": copy_ms_from_log(api.cg, snap["id"]),
             "disk_bytes": snap["disk_bytes"], "bytes": snap["bytes"], "reflinked": snap["reflinked"],
             "snapshot_img_allocated_bytes": allocated(snap_img) or 0,
             "children_img_allocated_bytes": images_allocated(api.cg) - before,
             "launch_workspace_ms": statistics.median(s.get("workspace", 0) for s in steps),
             "launch_total_ms": statistics.median(s.get("total", 0) for s in steps)}
    finally:
        cleanup(api, pool, children, snap["id"])
    return r


def snapshot_trial(api, parent):
    t0 = time.monotonic()
    snap = api.call("POST", f"/v1/sessions/{parent}/snapshots", 201, json={})
    r = {"total_s": time.monotonic() - t0, "copy_ms": copy_ms_from_log(api.cg, snap["id"]),
         "disk_bytes": snap["disk_bytes"], "bytes": snap["bytes"], "reflinked": snap["reflinked"]}
    api.delete_snapshot(snap["id"])
    return r


def measure(runtime, args, deadline):
    print(f"== {runtime}: parent with {args.data_mib} MiB in {args.files} files; {args.warmup} warm-up + "
          f"{args.count} rounds of cold/fork N = {args.counts} and a snapshot", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"cellgate-bench-fork-{runtime}-"))
    config = tmp / "config.json"
    config.write_text(json.dumps({"kernelspecs": {"python3": {"runtime": runtime}}}))
    cap = str(max(args.counts) * 2 + 4)
    cg = Cellgate("--config", str(config), "--pool-size", "0", "--max-kernels", cap, "--max-kernels-per-tenant", cap)
    api = Api(cg, args)
    pool = ThreadPoolExecutor(max_workers=max(args.counts))
    rounds, stopped_early, parent = [], None, None
    gw_args = cg.g.args[1:]
    out = {"state_dir_fs": fs_type(cg.g.state_dir.parent),  # the args without the token's value
           "gateway_args": [a for i, a in enumerate(gw_args) if i == 0 or gw_args[i - 1] != "--token"]}
    try:
        parent = api.create()
        t = time.monotonic()
        api.execute(parent, setup_cell(args.files, args.data_mib // args.files))
        out["parent_write_s"] = round(time.monotonic() - t, 2)
        expected = api.execute(parent, PROBE_CELL)
        out["data_bytes"] = sum(int(f.split(":")[1]) for f in expected.split())
        out["parent_img_allocated_bytes"] = images_allocated(cg)
        print(f"   parent: wrote {out['data_bytes'] >> 20} MiB in {out['parent_write_s']} s; its image holds "
              f"{out['parent_img_allocated_bytes'] >> 20} MiB", flush=True)
        for i in range(args.warmup + args.count):
            if time.monotonic() > deadline:
                stopped_early = f"deadline reached after {len(rounds)} counted rounds"
                break
            counted = i >= args.warmup
            r = {"snapshot": snapshot_trial(api, parent)}
            for n in (args.counts if counted else [1]):
                order = ("fork", "cold") if i % 2 else ("cold", "fork")
                for kind in order:
                    r[f"{kind}_{n}"] = (fork_trial(api, pool, parent, n, expected) if kind == "fork"
                                        else cold_trial(api, pool, n))
                print(f"   {'round' if counted else 'warm-up'} {i + 1}, N={n}: cold {r[f'cold_{n}']['total_s']:.2f} s, "
                      f"fork {r[f'fork_{n}']['total_s']:.2f} s (POST {r[f'fork_{n}']['post_s']:.2f} s, "
                      f"copy {r[f'fork_{n}']['copy_ms']} ms)", flush=True)
            print(f"   snapshot alone {r['snapshot']['total_s']:.2f} s (copy {r['snapshot']['copy_ms']} ms)", flush=True)
            if counted:
                rounds.append(r)
    finally:
        pool.shutdown(wait=True)
        if parent:
            api.delete_session(parent)
        cg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if not rounds:
        raise Failure(f"{runtime}: no round measured ({stopped_early})")

    def med(trial, key):
        return statistics.median(r[trial][key] for r in rounds)

    out.update({"rounds": len(rounds), "stopped_early": stopped_early,
                "snapshot": {**summary([r["snapshot"]["total_s"] for r in rounds]),
                             "copy_ms": med("snapshot", "copy_ms"), "disk_bytes": int(med("snapshot", "disk_bytes")),
                             "bytes": int(med("snapshot", "bytes")),
                             "reflinked": any(r["snapshot"]["reflinked"] for r in rounds)},
                "by_count": {}, "samples": rounds})
    for n in args.counts:
        cold, fork = summary([r[f"cold_{n}"]["total_s"] for r in rounds]), \
            summary([r[f"fork_{n}"]["total_s"] for r in rounds])
        out["by_count"][n] = {
            "cold": cold, "fork": fork, "fork_post": summary([r[f"fork_{n}"]["post_s"] for r in rounds]),
            "fork_copy_ms": med(f"fork_{n}", "copy_ms"),
            "ratio_fork_to_cold": round(fork["median_ms"] / cold["median_ms"], 3),
            "cold_launch_workspace_ms": med(f"cold_{n}", "launch_workspace_ms"),
            "fork_launch_workspace_ms": med(f"fork_{n}", "launch_workspace_ms"),
            "cold_launch_total_ms": med(f"cold_{n}", "launch_total_ms"),
            "fork_launch_total_ms": med(f"fork_{n}", "launch_total_ms"),
            "children_img_allocated_bytes": int(med(f"fork_{n}", "children_img_allocated_bytes")),
        }
    return out


def mib(b):
    return f"{b / 2**20:.1f} MiB"


def report(results):
    print(f"\n{'measure (median of n, ms)':40} {'median':>9} {'min':>9} {'max':>9} {'n':>3} {'÷cold N':>8}")
    for runtime, m in results["runtimes"].items():
        for n, c in m["by_count"].items():
            for name, v, ratio in ((f"cold N={n} → all answered", c["cold"], 1.0),
                                   (f"fork N={n} → all answered", c["fork"], c["ratio_fork_to_cold"]),
                                   (f"   of which POST …/fork", c["fork_post"],
                                    c["fork_post"]["median_ms"] / c["cold"]["median_ms"])):
                print(f"{runtime + ': ' + name:40} {v['median_ms']:9.0f} {v['min_ms']:9.0f} {v['p99_ms']:9.0f} "
                      f"{v['n']:3d} {ratio:8.3f}")
        s = m["snapshot"]
        print(f"{runtime + ': snapshot alone (POST …/snapshots)':40} {s['median_ms']:9.0f} {s['min_ms']:9.0f} "
              f"{s['p99_ms']:9.0f} {s['n']:3d}")
    print()
    for runtime, m in results["runtimes"].items():
        s = m["snapshot"]
        print(f"{runtime}: data {mib(m['data_bytes'])}, parent image {mib(m['parent_img_allocated_bytes'])} allocated; "
              f"snapshot disk_bytes {mib(s['disk_bytes'])} of {mib(s['bytes'])} apparent (reflinked {s['reflinked']}), "
              f"launcher copy {s['copy_ms']:.0f} ms; children add "
              + ", ".join(f"N={n}: {mib(c['children_img_allocated_bytes'])}" for n, c in m["by_count"].items()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtimes", default="runc,runsc")
    ap.add_argument("--counts", default="1,4,8", help=f"children per fork, each 1…{MAX_N}")
    ap.add_argument("--count", type=int, default=3, help=f"rounds per runtime, 1…{MAX_COUNT}")
    ap.add_argument("--warmup", type=int, default=1, help=f"uncounted rounds (N=1 only) first, 0…{MAX_WARMUP}")
    ap.add_argument("--data-mib", type=int, default=200, help="data the parent writes, MiB (1…800)")
    ap.add_argument("--files", type=int, default=4, help="in this many files")
    ap.add_argument("--cell-timeout", type=int, default=300, help="each cell's timeout_s")
    ap.add_argument("--request-timeout", type=float, default=600, help="each HTTP request's timeout, s")
    ap.add_argument("--deadline-s", type=float, default=420, help="per runtime: no new round starts after this, s")
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "fork.json"))
    args = ap.parse_args()
    try:
        args.counts = sorted({int(n) for n in args.counts.split(",") if n})
    except ValueError:
        ap.error("--counts takes whole numbers")
    if not args.counts or not all(1 <= n <= MAX_N for n in args.counts):
        ap.error(f"--counts must be 1…{MAX_N}")
    if not 1 <= args.count <= MAX_COUNT or not 0 <= args.warmup <= MAX_WARMUP:
        ap.error(f"--count must be 1…{MAX_COUNT} and --warmup 0…{MAX_WARMUP}")
    if not 1 <= args.files <= 64 or not args.files <= args.data_mib <= 800:
        ap.error("--files must be 1…64 and --data-mib from --files to 800")
    runtimes = [r for r in args.runtimes.split(",") if r]
    if any(r not in ("runc", "runsc") for r in runtimes):
        ap.error("--runtimes takes runc and/or runsc")
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    results = {"machine": {"cpus": os.cpu_count(), "kernel": platform.release(),
                           "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
                           "loadavg_at_start": os.getloadavg()},
               "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "commit": commit,
               "command": " ".join(sys.argv), "node_args": os.environ.get("CELLGATE_TEST_NODE_ARGS", ""),
               "cold_path": f"N x (POST /v1/sessions + execute {COLD_CELL!r}) at once, until the last answers",
               "fork_path": "POST /v1/sessions/{id}/fork {count: N} + the first cell (imports, reads every file's "
                            "head) in every child at once, until the last answers",
               "runtimes": {}}
    for runtime in runtimes:
        results["runtimes"][runtime] = measure(runtime, args, time.monotonic() + args.deadline_s)
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    report(results)
    summary_only = {k: v for k, v in results.items() if k != "runtimes"}
    summary_only["runtimes"] = {rt: {k: v for k, v in m.items() if k not in ("samples", "gateway_args")}
                                for rt, m in results["runtimes"].items()}
    print(json.dumps(summary_only, indent=1))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
