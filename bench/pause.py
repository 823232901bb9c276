#!/usr/bin/python3
"""What pausing a session costs and what it gives back, in one run on one
machine, for each runtime (runc, then runsc/gVisor), through the agent API of
a gateway this script starts (loopback, port 0, --pool-size 0).

    /usr/bin/python3 bench/pause.py [--count 5] [--warmup 1] [--runtimes runc,runsc]
        [--json bench/results/pause.json]

The reference is the runtime's own cold start, measured in the same run:
  cold               POST /v1/sessions, then a first cell `import numpy, pandas`
                     (x = 41), then `1+1`: the time until that `1+1` answers, i.e.
                     a new sandbox brought to a usable state with the stack imported;
  pause              the round trip of POST /v1/sessions/{id}/pause;
  resume → answer    POST …/resume (it answers once the kernel does) plus `1+1`;
  resume → usable    the same plus `import numpy, pandas` again: back to the state
                     the cold path reached. Under runsc the modules are still in
                     the restored kernel (a no-op cell); under runc the resumed
                     kernel is a new one (mode "files") and imports them again.
Each is the median of --count rounds (a new session per round: cold start,
one pause, one resume, delete), after --warmup rounds not counted, and
reported as a ratio to the cold median. A check cell after each resume says
whether the kernel's variables came back (runsc: yes; runc: no, by design).

Per paused session it also reads the disk it holds (image_bytes from the
model, the allocated size of <state dir>/paused/<id>, of the sandbox's run
dir if it stays, and of the sparse workspace image <workspace root>/<name>.img)
and the memory of its sandbox before the pause and while paused
(`cellgate-launch ps --json` memory_bytes, the cgroup's usage with page cache,
and the PSS of the cgroup's processes).

Fork (a paused image restored as a second session) is not implemented in
cellgate yet: not measured here.

Run as root from a built tree (./scripts/build.sh, images/build.sh). Extra
per-node gateway options (cgroup parent, uid range) come from
CELLGATE_TEST_NODE_ARGS, as for every gateway the tests and bench.py start.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench import LAUNCH, Cellgate, pss_kib, summary, timed  # noqa: E402  (also puts tests/ on the path)
sys.path.insert(0, str(REPO / "tests"))
from support.prerequisites import IMAGE_STORE  # noqa: E402

FIRST_CELL = "import numpy, pandas\nx = 41"
IMPORT_CELL = "import numpy, pandas"
CHECK_CELL = "print(globals().get('x'))"
MAX_COUNT, MAX_WARMUP = 20, 3


class Failure(RuntimeError):
    pass


def once(fn):
    """fn's result and its wall time in seconds (bench.py's timer, one sample)."""
    box = []
    (seconds,) = timed(lambda: box.append(fn()), 1)
    return box[0], seconds


def call(cg, args, method, path, expect, **kw):
    r = cg.session.request(method, cg.url + path, timeout=args.request_timeout, **kw)
    if r.status_code != expect:
        raise Failure(f"{method} {path}: {r.status_code} {r.text[:500]}")
    return r.json() if r.content else None


def execute(cg, args, sid, code):
    out = call(cg, args, "POST", f"/v1/sessions/{sid}/execute", 200,
               json={"code": code, "timeout_s": args.cell_timeout})
    if out["status"] != "ok":
        raise Failure(f"cell {code!r}: {out['status']} {out.get('error')}")
    return out


def launcher_ps(cg):
    """The launcher's view of the gateway's sandboxes (as tests/integration/test_pause.py reads it)."""
    out = subprocess.run([str(LAUNCH), "--state-dir", str(cg.g.state_dir), "--image-store", str(IMAGE_STORE),
                          "--workspace-root", str(cg.g.workspace_root), *cg.g.node_args, "ps", "--json"],
                         capture_output=True, text=True, check=True, timeout=60)
    return {s["id"]: s for s in json.loads(out.stdout or "[]")}


def cgroup_pids(cg, sid):
    parent = "cellgate"
    if "--cgroup-parent" in cg.g.node_args:
        parent = cg.g.node_args[cg.g.node_args.index("--cgroup-parent") + 1]
    try:
        return [int(p) for p in Path(f"/sys/fs/cgroup/pids/{parent}/{sid}/cgroup.procs").read_text().split()]
    except OSError:
        return []


def allocated(path):
    """Bytes of disk blocks allocated under path (a file or a tree; du, not the apparent size)."""
    p = Path(path)
    if not p.exists():
        return None
    if p.is_file():
        return p.lstat().st_blocks * 512
    total = 0
    for root, _, files in os.walk(p):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def fs_type(path):
    return subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True).stdout.strip()


def one_round(cg, args, runtime):
    """A new session brought to the usable state, paused, resumed, deleted."""
    memory = runtime == "runsc"
    r = {}
    sid = None
    try:
        model, r["create_s"] = once(lambda: call(cg, args, "POST", "/v1/sessions", 201,
                                                 json={"timeout_s": args.cell_timeout}))
        sid = model["id"]
        _, r["first_cell_s"] = once(lambda: execute(cg, args, sid, FIRST_CELL))
        _, r["first_1plus1_s"] = once(lambda: execute(cg, args, sid, "1+1"))
        r["cold_s"] = r["create_s"] + r["first_cell_s"] + r["first_1plus1_s"]

        time.sleep(args.settle_s)
        running = launcher_ps(cg)[sid]
        r["memory_before_bytes"] = running["memory_bytes"]
        r["pss_before_bytes"] = pss_kib(cgroup_pids(cg, sid)) * 1024
        workspace_img = Path(running["workspace_dir"] + ".img") if running.get("workspace_dir") else None

        paused, r["pause_s"] = once(lambda: call(cg, args, "POST", f"/v1/sessions/{sid}/pause", 200))
        p = paused["pause"]
        if paused["state"] != "paused" or not p["paused"] or p["mode"] != ("memory" if memory else "files"):
            raise Failure(f"unexpected pause model: {paused['state']} {p}")
        r["mode"] = p["mode"]
        after = launcher_ps(cg).get(sid, {})
        r["memory_paused_bytes"] = after.get("memory_bytes") or 0
        r["pids_paused"] = after.get("pids") or 0
        r["pss_paused_bytes"] = pss_kib(cgroup_pids(cg, sid)) * 1024
        r["image_bytes"] = p["image_bytes"]
        r["paused_dir_allocated_bytes"] = allocated(cg.g.state_dir / "paused" / sid) or 0
        r["run_dir_allocated_bytes"] = allocated(cg.g.state_dir / "sandboxes" / sid) or 0
        if workspace_img is not None and workspace_img.exists():
            r["workspace_img_allocated_bytes"] = allocated(workspace_img)
            r["workspace_img_apparent_bytes"] = workspace_img.stat().st_size
        else:
            r["workspace_img_allocated_bytes"] = r["workspace_img_apparent_bytes"] = 0
        r["disk_paused_bytes"] = r["image_bytes"] + r["workspace_img_allocated_bytes"]

        resumed, r["resume_post_s"] = once(lambda: call(cg, args, "POST", f"/v1/sessions/{sid}/resume", 200))
        r["resumed_from"] = resumed["pause"]["resumed_from"]
        _, r["resume_1plus1_s"] = once(lambda: execute(cg, args, sid, "1+1"))
        r["resume_to_answer_s"] = r["resume_post_s"] + r["resume_1plus1_s"]
        _, r["resume_import_s"] = once(lambda: execute(cg, args, sid, IMPORT_CELL))
        r["resume_to_usable_s"] = r["resume_to_answer_s"] + r["resume_import_s"]
        r["state_kept"] = execute(cg, args, sid, CHECK_CELL)["stdout"].strip() == "41"
        if r["state_kept"] != memory:
            raise Failure(f"{runtime}: the resumed kernel's variables {'were' if r['state_kept'] else 'were not'} kept")
    finally:
        if sid is not None:
            cg.session.request("DELETE", cg.url + f"/v1/sessions/{sid}", timeout=args.request_timeout)
    return r


def median(rounds, key):
    return statistics.median(r[key] for r in rounds)


def measure(runtime, args, deadline):
    print(f"== {runtime}: {args.warmup} warm-up + {args.count} rounds (cold start, pause, resume, delete)",
          flush=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"cellgate-bench-pause-{runtime}-"))
    config = tmp / "config.json"
    config.write_text(json.dumps({"kernelspecs": {"python3": {"runtime": runtime}}}))
    cg = Cellgate("--config", str(config), "--pool-size", "0", "--max-kernels", "4")
    rounds, stopped_early = [], None
    try:
        fs = fs_type(cg.g.state_dir.parent)
        for i in range(args.warmup + args.count):
            if time.monotonic() > deadline:
                stopped_early = f"deadline reached after {len(rounds)} counted rounds"
                break
            r = one_round(cg, args, runtime)
            print(f"   {'warm-up' if i < args.warmup else 'round'} {i + 1}: cold {r['cold_s'] * 1000:.0f} ms, "
                  f"pause {r['pause_s'] * 1000:.0f} ms, resume→1+1 {r['resume_to_answer_s'] * 1000:.0f} ms",
                  flush=True)
            if i >= args.warmup:
                rounds.append(r)
    finally:
        cg.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if not rounds:
        raise Failure(f"{runtime}: no round measured ({stopped_early})")
    s = lambda key: summary([r[key] for r in rounds])  # noqa: E731
    cold = s("cold_s")
    out = {
        "rounds": len(rounds), "stopped_early": stopped_early, "state_dir_fs": fs,
        "mode": rounds[0]["mode"], "resumed_from": rounds[0]["resumed_from"],
        "state_kept_after_resume": all(r["state_kept"] for r in rounds),
        "cold": cold, "cold_create": s("create_s"), "cold_first_cell": s("first_cell_s"),
        "cold_first_1plus1": s("first_1plus1_s"),
        "pause": s("pause_s"), "resume_post": s("resume_post_s"),
        "resume_to_answer": s("resume_to_answer_s"), "resume_to_usable": s("resume_to_usable_s"),
        "ratios_to_cold": {k: round(s(f"{k}_s")["median_ms"] / cold["median_ms"], 3)
                           for k in ("pause", "resume_to_answer", "resume_to_usable")},
        "disk_per_paused_session": {k: int(median(rounds, k)) for k in (
            "disk_paused_bytes", "image_bytes", "paused_dir_allocated_bytes", "run_dir_allocated_bytes",
            "workspace_img_allocated_bytes", "workspace_img_apparent_bytes")},
        "memory": {k: int(median(rounds, k)) for k in (
            "memory_before_bytes", "memory_paused_bytes", "pss_before_bytes", "pss_paused_bytes", "pids_paused")},
        "samples": rounds,
    }
    return out


def mib(b):
    return f"{b / 2**20:.1f} MiB"


def report(results):
    print(f"\n{'measure (median of n)':44} {'median ms':>10} {'min ms':>9} {'max ms':>9} {'n':>3} {'÷cold':>7}")
    for runtime, m in results["runtimes"].items():
        cold = m["cold"]["median_ms"]
        for name, key in (("cold: create+import+1+1 (reference)", "cold"),
                          ("   of which POST /v1/sessions", "cold_create"),
                          ("   of which import numpy, pandas", "cold_first_cell"),
                          ("pause (POST …/pause)", "pause"),
                          ("resume → 1+1 answered", "resume_to_answer"),
                          ("resume → 1+1 + import (usable again)", "resume_to_usable")):
            v = m[key]
            print(f"{runtime + ': ' + name:44} {v['median_ms']:10.1f} {v['min_ms']:9.1f} {v['p99_ms']:9.1f} "
                  f"{v['n']:3d} {v['median_ms'] / cold:7.3f}")
    print()
    for runtime, m in results["runtimes"].items():
        d, mem = m["disk_per_paused_session"], m["memory"]
        print(f"{runtime}: mode {m['mode']}, variables kept across resume: {m['state_kept_after_resume']}; "
              f"paused on disk {mib(d['disk_paused_bytes'])} (image {mib(d['image_bytes'])}, workspace image "
              f"{mib(d['workspace_img_allocated_bytes'])} allocated of {mib(d['workspace_img_apparent_bytes'])}); "
              f"memory {mib(mem['memory_before_bytes'])} (PSS {mib(mem['pss_before_bytes'])}) running → "
              f"{mib(mem['memory_paused_bytes'])} paused")
    print("fork: not implemented in cellgate yet, not measured")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runtimes", default="runc,runsc")
    ap.add_argument("--count", type=int, default=5, help=f"rounds per runtime, 1…{MAX_COUNT}")
    ap.add_argument("--warmup", type=int, default=1, help=f"uncounted rounds first, 0…{MAX_WARMUP}")
    ap.add_argument("--settle-s", type=float, default=1.0, help="wait before reading a running sandbox's memory")
    ap.add_argument("--cell-timeout", type=int, default=120, help="each cell's timeout_s")
    ap.add_argument("--request-timeout", type=float, default=180, help="each HTTP request's timeout, s")
    ap.add_argument("--deadline-s", type=float, default=1800, help="no new round starts after this, s")
    ap.add_argument("--json", default=str(REPO / "bench" / "results" / "pause.json"))
    args = ap.parse_args()
    if not 1 <= args.count <= MAX_COUNT or not 0 <= args.warmup <= MAX_WARMUP:
        ap.error(f"--count must be 1…{MAX_COUNT} and --warmup 0…{MAX_WARMUP}")
    args.settle_s = min(max(args.settle_s, 0), 10)
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
               "cold_path": "POST /v1/sessions + execute 'import numpy, pandas' + execute '1+1'",
               "fork": "not implemented in cellgate yet; not measured",
               "runtimes": {}}
    deadline = time.monotonic() + args.deadline_s
    for runtime in runtimes:
        results["runtimes"][runtime] = measure(runtime, args, deadline)
    results["machine"]["loadavg_at_end"] = os.getloadavg()
    report(results)
    summary_only = {k: v for k, v in results.items() if k != "runtimes"}
    summary_only["runtimes"] = {rt: {k: v for k, v in m.items() if k != "samples"}
                                for rt, m in results["runtimes"].items()}
    print(json.dumps(summary_only, indent=1))
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"\nwritten: {args.json}")


if __name__ == "__main__":
    main()
