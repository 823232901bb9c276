#!/usr/bin/python3
"""Sessions per box (issue 16, Part 1): idle sessions, each with numpy,
pandas and Matplotlib imported, added one after another until --max or
until the machine's MemAvailable would fall under --reserve-gib; then each
is asked `1+1` once more. Reports how many fit, any failed request, and the
PSS per session (smaps_rollup of every process in each sandbox's cgroup),
against the reference in the same run: an unsandboxed ipykernel with the
same imports under jupyter_server (bench.py's memory scenario, 4 kernels).

    /usr/bin/python3 bench/density.py [--max 400] [--reserve-gib 2] [--json bench/results/density.json]
    /usr/bin/python3 bench/density.py --memory-merge [--ksm-pages 2000] [--ksm-sleep-ms 20]
    /usr/bin/python3 bench/density.py --zygote

--zygote runs the gateway with --zygote on: every session's kernel is
forked from the image's zygote (checked in each session's model) and
shares the pages of its imports with it. The zygote's own PSS is counted
with the sessions' (it holds its share of those pages).

--memory-merge runs the gateway with --memory-merge on and the host's ksmd
as scripts/ksm.sh would (the host's settings are put back after), waits for
ksmd to settle before it measures, and reports ksmd's CPU time over the run.

Bounded: at most 1000 sessions, and it stops adding before the machine runs
short of memory. One gateway started by this script (runc, no warm pool).
Run as root from a built tree.
"""
import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench import STACK, Cellgate, pss_kib, reference_stack_pss_kib  # noqa: E402
sys.path.insert(0, str(REPO / "tests"))
from support.ksm import ksm, ksmd_running  # noqa: E402


def mem_available_kib():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1])
    return 0


def ksmd_cpu_s():
    pid = subprocess.run(["pgrep", "-x", "ksmd"], capture_output=True, text=True).stdout.split()
    if not pid:
        return 0.0
    fields = Path(f"/proc/{pid[0]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100  # utime + stime, USER_HZ


def settle(timeout_s=300):
    """Waits until a full ksmd scan adds less than 1 % to what it shares."""
    end, last = time.monotonic() + timeout_s, -1
    while time.monotonic() < end:
        scans = ksm("full_scans")
        while ksm("full_scans") == scans and time.monotonic() < end:
            time.sleep(0.5)
        sharing = ksm("pages_sharing")
        if last >= 0 and sharing - last < max(1, last // 100):
            return
        last = sharing


def zygote_pids(gateway_pid):
    """The gateway's zygotes (its children running /opt/cellgate/cellgate-zygote)."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if ppid == gateway_pid and b"/opt/cellgate/cellgate-zygote" in (d / "cmdline").read_bytes():
                out.append(int(d.name))
        except (OSError, ValueError):
            pass
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--max", type=int, default=400)
    ap.add_argument("--reserve-gib", type=float, default=2.0)
    ap.add_argument("--json", default=None)
    ap.add_argument("--memory-merge", action="store_true")
    ap.add_argument("--ksm-pages", type=int, default=2000)
    ap.add_argument("--ksm-sleep-ms", type=int, default=20)
    ap.add_argument("--zygote", action="store_true")
    args = ap.parse_args()
    if args.json is None:
        name = "density-merge.json" if args.memory_merge else "density-zygote.json" if args.zygote else "density.json"
        args.json = str(REPO / "bench" / "results" / name)
    if not args.memory_merge:
        return run(args)
    with ksmd_running(max(1, min(args.ksm_pages, 100000)), max(1, min(args.ksm_sleep_ms, 10000))):
        run(args)


def run(args):
    limit = max(1, min(args.max, 1000))
    reserve = int(args.reserve_gib * 1024 * 1024)
    ref = reference_stack_pss_kib()
    cg = Cellgate("--pool-size", "0", "--max-kernels", str(limit + 4), "--max-kernels-per-tenant", "0",
                  "--idle-timeout", "0", "--cull-idle-timeout", "0",
                  *(["--memory-merge", "on"] if args.memory_merge else []),
                  *(["--zygote", "on"] if args.zygote else []))
    if args.zygote:
        cg.g.wait_for_zygote()
    cpu0 = ksmd_cpu_s()
    ids, failed, per, per_after, waited, steady = [], [], None, None, [], None
    stopped_by = "max"
    t0 = time.monotonic()
    try:
        while len(ids) < limit:
            # One session costs about as much as the reference; keep the reserve after it.
            if mem_available_kib() - 2 * ref < reserve:
                if args.memory_merge:  # ksmd lags the creates: let it catch up before calling the box full
                    print(f"  {len(ids)} sessions: waiting for ksmd", flush=True)
                    settle()
                    waited.append(len(ids))
                if mem_available_kib() - 2 * ref < reserve:
                    stopped_by = "memory"
                    break
            r = cg.api("POST", "/v1/sessions", json={})
            if r.status_code != 201:
                failed.append(f"create: {r.status_code} {r.text[:120]}")
                break
            sid = r.json()["id"]
            if r.json()["sandbox"]["zygote"] is not args.zygote:
                failed.append(f"create: the kernel's zygote flag is not {args.zygote}")
                break
            ex = cg.api("POST", f"/v1/sessions/{sid}/execute", json={"code": STACK}).json()
            if ex.get("status") != "ok":
                failed.append(f"import: {ex}")
                break
            ids.append(sid)
            if len(ids) % 50 == 0:
                print(f"  {len(ids)} sessions, MemAvailable {mem_available_kib() / 1048576:.1f} GiB", flush=True)
        fill_s = time.monotonic() - t0
        time.sleep(3)
        if args.memory_merge:
            settle()
            c0, w0 = ksmd_cpu_s(), time.monotonic()
            time.sleep(30)  # what ksmd costs once the box is full and merged
            steady = (ksmd_cpu_s() - c0) / (time.monotonic() - w0)
        pids = []
        for sid in ids:
            procs = Path(f"/sys/fs/cgroup/pids/cellgate/{sid}/cgroup.procs")
            if procs.exists():
                pids += [int(p) for p in procs.read_text().split()]
        if args.zygote:
            pids += zygote_pids(cg.g.proc.pid)
        per = pss_kib(pids) / max(1, len(ids))
        for sid in ids:  # every one still answers
            ex = cg.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "1+1"}).json()
            if ex.get("status") != "ok":
                failed.append(f"1+1 on {sid}: {ex}")
        per_after = pss_kib(pids) / max(1, len(ids))  # what the `1+1` round unshared
    finally:
        for sid in ids:
            cg.api("DELETE", f"/v1/sessions/{sid}")
        cg.stop()
    results = {"sessions": len(ids), "stopped_by": stopped_by, "failed": len(failed), "errors": failed[:5],
               "pss_per_session_mib": per / 1024, "pss_after_1+1_round_mib": (per_after or 0) / 1024, "reference_pss_mib": ref / 1024, "ratio": per / ref,
               "fill_seconds": fill_s, "memory_gib": round(mem_available_kib() / 1048576, 1),
               "memory_merge": args.memory_merge, "zygote": args.zygote}
    if args.memory_merge:
        results["ksmd"] = {"cpu_seconds": round(ksmd_cpu_s() - cpu0, 1), "pages_to_scan": args.ksm_pages,
                           "sleep_ms": args.ksm_sleep_ms, "wall_seconds": round(time.monotonic() - t0, 1),
                           "waited_for_ksmd_at": waited,
                           "steady_share_of_a_core": None if steady is None else round(steady, 3)}
    print(f"{len(ids)} idle sessions with the stack (stopped by {stopped_by}), {len(failed)} failed; "
          f"PSS {per / 1024:.1f} MiB per session against {ref / 1024:.1f} MiB unsandboxed "
          f"({per / ref:.2f}×); filled in {fill_s:.0f} s", flush=True)
    if args.memory_merge:
        print(f"ksmd: {results['ksmd']}", flush=True)
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
