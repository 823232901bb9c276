#!/usr/bin/python3
"""What cellgate's languages cost, in one run on one machine, against their
floors and against Python, through gateways this script starts (loopback,
port 0):

    /usr/bin/python3 bench/piston.py [--count 20] [--burst 200] [--json bench/results/piston.json]

  one-shot hello    POST /api/v2/execute of each runtime's hello world
                    (tests/support/programs.py, stdin and two args), --count
                    times each, one at a time after a warm-up: p50 and p99 of
                    the client's wall time, against
  bare runc         the same compile and run, in the same image, as one
                    `runc run` of a bundle made once per runtime (read-only
                    rootfs, a fresh tmpfs for the files, no network, no
                    cgroup limits, no gateway): the floor of a fresh sandbox;
  throughput        --burst concurrent jobs of Python and of C (one tenant,
                    the default admission: 8 at once, 256 waiting), their
                    wall time, jobs per second and failures (any status but
                    200 counts);
  first result      POST /v1/sessions + a trivial cell, from a warm pool of 2,
                    for Python, R and JavaScript (each the default kernelspec
                    of its own gateway, so each has the pool), median of --count.

Ratios: each runtime's p50 / its bare runc p50; R's and JavaScript's first
result / Python's. Run as root from a built tree (./scripts/build.sh,
images/build.sh python, images/build.sh languages).
"""
import argparse
import concurrent.futures
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests"))

from bench import Cellgate, summary  # noqa: E402
from support.programs import PROGRAMS, program  # noqa: E402

ROOTFS = Path("/var/cache/cellgate/images/languages/current/rootfs").resolve()


def pick(runtimes, name):
    language, _, toolchain = name.partition("/")
    return next(rt for rt in runtimes if rt["language"] == language and (not toolchain or rt.get("runtime") == toolchain))


def percentile(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def one_shot(cg, runtimes, count):
    out = {}
    for name in PROGRAMS:
        rt = pick(runtimes, name)
        body = {"language": rt["language"], "version": rt["version"], "files": [{"content": program(name, "hello")}],
                "stdin": "abc\n", "args": ["x", "y"]}
        samples, failures = [], []
        for i in range(count + 1):
            t0 = time.perf_counter()
            r = cg.api("POST", "/api/v2/execute", json=body)
            dt = time.perf_counter() - t0
            if r.status_code != 200 or r.json()["run"]["code"] != 0:
                failures.append(r.text[:400])
                continue
            if i:
                samples.append(dt * 1000)
        out[name] = {"p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99), "failed": len(failures),
                     "failures": failures}
        print(f"  {name:16s} p50 {out[name]['p50_ms']:7.1f} ms  p99 {out[name]['p99_ms']:7.1f} ms  failed {len(failures)}",
              flush=True)
        for f in failures:
            print(f"    failed: {f}", flush=True)
    return out


def bare_runc(runtimes, count):
    """The floor: one `runc run` per job of a bundle on the same image, the
    runtime's compile and run scripts in one shell, files on a fresh tmpfs."""
    table = {(r["language"], r.get("runtime")): r for r in json.loads((ROOTFS / "opt/cellgate/runtimes.json").read_text())}
    out = {}
    work = Path(tempfile.mkdtemp(prefix="cg-bench-runc-"))
    try:
        for name in PROGRAMS:
            language, _, toolchain = name.partition("/")
            rt = table.get((language, toolchain or None)) or next(v for (l, _), v in table.items() if l == language)
            src = work / "src"
            shutil.rmtree(src, ignore_errors=True)
            src.mkdir()
            (src / "file0.code").write_text(program(name, "hello"))
            (src / "stdin").write_text("abc\n")
            script = "set -e; cp -r /src/. /w/; cd /w; export HOME=/tmp\n"
            if rt.get("compile"):
                script += "bash -c %s cellgate-run file0.code >/dev/null\n" % shlex.quote(rt["compile"])
            script += "bash -c %s cellgate-run file0.code x y < /w/stdin\n" % shlex.quote(rt["run"])
            bundle = work / "bundle"
            shutil.rmtree(bundle, ignore_errors=True)
            bundle.mkdir()
            subprocess.run(["runc", "spec", "--bundle", str(bundle)], check=True)
            config = json.loads((bundle / "config.json").read_text())
            config["root"] = {"path": str(ROOTFS), "readonly": True}
            config["process"]["terminal"] = False
            config["process"]["args"] = ["/bin/bash", "-c", script]
            config["process"]["env"].append("LANG=C.UTF-8")
            config["mounts"] += [
                {"destination": "/w", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=268435456"]},
                {"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "size=268435456"]},
                {"destination": "/src", "type": "bind", "source": str(src), "options": ["rbind", "ro"]},
            ]
            (bundle / "config.json").write_text(json.dumps(config))
            samples = []
            for i in range(count + 1):
                t0 = time.perf_counter()
                r = subprocess.run(["runc", "run", "--bundle", str(bundle), f"cg-bench-{os.getpid()}-{i}"],
                                   capture_output=True, text=True, timeout=120)
                dt = time.perf_counter() - t0
                if r.returncode != 0 or not r.stdout.startswith("hello abc"):
                    raise RuntimeError(f"bare runc {name}: {r.returncode} {r.stdout[:200]} {r.stderr[:300]}")
                if i:
                    samples.append(dt * 1000)
            out[name] = {"p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99)}
            print(f"  {name:16s} bare runc p50 {out[name]['p50_ms']:7.1f} ms", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def throughput(cg, runtimes, burst):
    out = {}
    for name, source in (("python", 'print("hi")'), ("c", '#include <stdio.h>\nint main(void) { puts("hi"); }\n')):
        rt = pick(runtimes, name)
        body = {"language": rt["language"], "version": rt["version"], "files": [{"content": source}]}

        def one(_):
            r = cg.api("POST", "/api/v2/execute", json=body)
            return r.status_code == 200 and r.json()["run"]["stdout"] == "hi\n"

        t0 = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(burst) as pool:
            ok = list(pool.map(one, range(burst)))
        wall = time.perf_counter() - t0
        out[name] = {"jobs": burst, "failed": ok.count(False), "wall_s": wall, "jobs_per_s": burst / wall}
        print(f"  {name}: {burst} jobs in {wall:.1f} s ({burst / wall:.1f}/s), {ok.count(False)} failed", flush=True)
    return out


def first_result(count):
    cells = {"python3": "1+1", "ir": "1+1", "javascript": "1+1"}
    out = {}
    for spec, code in cells.items():
        cg = Cellgate("--default-kernelspec", spec, "--pool-size", "2", "--runtime-pool", "0")
        try:
            samples = []
            for i in range(count + 1):
                cg.wait_pool(2)
                t0 = time.perf_counter()
                r = cg.api("POST", "/v1/sessions", json={"kernel": spec})
                sid = r.json()["id"]
                res = cg.api("POST", f"/v1/sessions/{sid}/execute", json={"code": code}).json()
                dt = time.perf_counter() - t0
                if res["status"] != "ok":
                    raise RuntimeError(f"{spec}: {res}")
                cg.api("DELETE", f"/v1/sessions/{sid}")
                if i:
                    samples.append(dt)
            out[spec] = summary(samples)
            print(f"  {spec}: first result median {out[spec]['median_ms']:.1f} ms", flush=True)
        finally:
            cg.stop()
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--burst", type=int, default=200)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    results = {"machine": platform.node(), "cpus": os.cpu_count(), "count": args.count}
    cg = Cellgate("--runtime-pool", "4", "--max-queued-runs-per-tenant", "256")
    try:
        runtimes = cg.api("GET", "/api/v2/runtimes").json()
        print("one-shot hello world, through /api/v2/execute:", flush=True)
        results["one_shot"] = one_shot(cg, runtimes, args.count)
        print(f"throughput, {args.burst} concurrent jobs:", flush=True)
        results["throughput"] = throughput(cg, runtimes, args.burst)
    finally:
        cg.stop()
    print("the floor, a bare runc run of the same toolchain in the same image:", flush=True)
    results["bare_runc"] = bare_runc(runtimes, args.count)
    print("first result from a warm pool of 2:", flush=True)
    results["first_result"] = first_result(args.count)
    print("\nratios (one run):")
    for name, m in results["one_shot"].items():
        floor = results["bare_runc"][name]["p50_ms"]
        print(f"  {name:16s} {m['p50_ms']:7.1f} / {floor:7.1f} ms = {m['p50_ms'] / floor:.2f}")
    py = results["first_result"]["python3"]["median_ms"]
    for spec in ("ir", "javascript"):
        print(f"  first result {spec} / python3: {results['first_result'][spec]['median_ms'] / py:.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
