#!/usr/bin/python3
"""What a template costs against the built-in image, in one run on one
machine, through the agent API of a gateway this script starts (loopback,
port 0, --pool-size 1 for the built-in image, a template with kernel.pool 1):

    /usr/bin/python3 bench/templates.py [--count 20] [--idle 10] [--json bench/results/templates.json]

  build cold     POST /v1/templates with 3 RUN steps (files written, bytecode
                 compiled, a package's worth of modules) until its build is
                 ready, every step built (a name of this run's own);
  build cached   the same definition again: every layer found, no sandbox;
  first result   POST /v1/sessions (from the warm pool) + `1+1`, for the
                 built-in image and for the template, alternating, each
                 after its pool is full again; median of --count each;
  PSS per idle   a second gateway with --zygote on: --idle sessions of the
  session        built-in image, each with numpy, pandas and Matplotlib
                 imported, then --idle of the template; the PSS of every
                 process in their sandboxes' cgroups and of the image's
                 zygote (its share of the pages they share), per session.

Ratios: cached build / cold build, template / built-in first result, and
template / built-in PSS per idle session with the zygote.
Run as root from a built tree (./scripts/build.sh, images/build.sh). Extra
per-node gateway options come from CELLGATE_TEST_NODE_ARGS.
"""
import argparse
import json
import platform
import sys
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from bench import STACK, Cellgate, pss_kib, summary  # noqa: E402
from density import zygote_pids  # noqa: E402

STEPS = [
    {"type": "RUN", "args": ["mkdir -p /opt/pkg && for i in $(seq 200); do "
                             "printf 'def f%s(x):\\n    return x * %s\\n' $i $i > /opt/pkg/m$i.py; done"]},
    {"type": "RUN", "args": ["python3 -m compileall -q /opt/pkg && head -c 20971520 /dev/urandom > /opt/data.bin"]},
    {"type": "ENV", "args": ["PYTHONPATH", "/opt"]},
    {"type": "RUN", "args": ["python3 -c 'import sys; sys.path.insert(0, \"/opt\"); import pkg.m1' || true"]},
]


def build(cg, body):
    t0 = time.perf_counter()
    r = cg.api("POST", "/v1/templates", json=body)
    r.raise_for_status()
    at = r.json()["status_url"]
    while True:
        b = cg.api("GET", at).json()
        if b["status"] in ("ready", "error"):
            break
        time.sleep(0.02)
    if b["status"] != "ready":
        raise RuntimeError(f"the build failed: {b.get('failure')}")
    return time.perf_counter() - t0, b


def pool_ready(cg, spec):
    for line in cg.api("GET", "/metrics").text.splitlines():
        if line.startswith(f'cellgate_pool_ready{{kernelspec="{spec}"}} '):
            return int(float(line.split()[-1]))
    return 0


def first_result(cg, body, spec):
    end = time.time() + 300
    while pool_ready(cg, spec) < 1:
        if time.time() > end:
            raise RuntimeError(f"the pool of {spec} did not fill")
        time.sleep(0.05)
    t0 = time.perf_counter()
    r = cg.api("POST", "/v1/sessions", json=body)
    r.raise_for_status()
    sid = r.json()["id"]
    out = cg.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "1+1"}).json()
    took = time.perf_counter() - t0
    assert out["results"][0]["data"]["text/plain"] == "2", out
    cg.api("DELETE", f"/v1/sessions/{sid}")
    return took


def idle_pss_kib(cg, body, n):
    """PSS per session of n idle sessions (`body` for each) with the stack
    imported, with the zygote(s) that started for them; and how many forked
    from a zygote. An image's zygote starts at its first session: sessions
    are made (and deleted) until one forks from it, for at most a minute."""
    before = set(zygote_pids(cg.g.proc.pid)) if body else set()
    end = time.monotonic() + 60
    while time.monotonic() < end:
        r = cg.api("POST", "/v1/sessions", json=body)
        r.raise_for_status()
        cg.api("DELETE", f"/v1/sessions/{r.json()['id']}")
        if r.json()["sandbox"].get("zygote"):
            break
        time.sleep(1)
    ids, forked = [], 0
    try:
        for _ in range(n):
            r = cg.api("POST", "/v1/sessions", json=body)
            r.raise_for_status()
            ids.append(r.json()["id"])
            forked += bool(r.json()["sandbox"].get("zygote"))
            ex = cg.api("POST", f"/v1/sessions/{ids[-1]}/execute", json={"code": STACK}).json()
            assert ex.get("status") == "ok", ex
        time.sleep(3)
        pids = []
        for sid in ids:
            procs = Path(f"/sys/fs/cgroup/pids/cellgate/{sid}/cgroup.procs")
            if procs.exists():
                pids += [int(p) for p in procs.read_text().split()]
        zygotes = [p for p in zygote_pids(cg.g.proc.pid) if p not in before]
        return pss_kib(pids + zygotes) / n, forked
    finally:
        for sid in ids:
            cg.api("DELETE", f"/v1/sessions/{sid}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--idle", type=int, default=10)
    ap.add_argument("--json")
    a = ap.parse_args()
    cg = Cellgate("--pool-size", "1", "--max-kernels", "8")
    try:
        name = "bench-" + uuid.uuid4().hex[:8]
        body = {"name": name + ":v1", "steps": STEPS, "kernel": {"pool": 1}}
        cold, b = build(cg, body)
        assert b["built_steps"] == 3, b
        cached, b = build(cg, body)
        assert b["cached_steps"] == 3 and b["built_steps"] == 0, b
        spec = cg.api("GET", f"/v1/templates/{name}:v1").json()["kernelspec"]
        builtin, template = [], []
        for i in range(a.count + 1):  # the first pair warms up, uncounted
            pair = [("builtin", {}, "python3"), ("template", {"template": name + ":v1"}, spec)]
            if i % 2:
                pair.reverse()
            for which, req, s in pair:
                took = first_result(cg, req, s)
                if i:
                    (builtin if which == "builtin" else template).append(took)
        cg.api("DELETE", f"/v1/templates/{name}:v1")
    finally:
        cg.stop()
    # PSS per idle session, each image with its zygote.
    n = max(1, min(a.idle, 100))
    cg = Cellgate("--pool-size", "0", "--max-kernels", str(n + 4), "--max-kernels-per-tenant", "0",
                  "--idle-timeout", "0", "--cull-idle-timeout", "0", "--zygote", "on")
    try:
        cg.g.wait_for_zygote()
        name = "bench-" + uuid.uuid4().hex[:8]
        # The zygote's imports hold only under the environment they were made in:
        # a template that sets PYTHON* (the steps above do) starts its kernels cold.
        build(cg, {"name": name + ":v1", "steps": [s for s in STEPS if s["type"] != "ENV"]})
        pss_builtin, forked_builtin = idle_pss_kib(cg, {}, n)
        pss_template, forked_template = idle_pss_kib(cg, {"template": name + ":v1"}, n)
        cg.api("DELETE", f"/v1/templates/{name}:v1")
    finally:
        cg.stop()
    out = {"machine": platform.node(), "build_cold_s": cold, "build_cached_s": cached,
           "build_cached_over_cold": cached / cold,
           "first_result_builtin": summary(builtin), "first_result_template": summary(template),
           "first_result_template_over_builtin": summary(template)["median_ms"] / summary(builtin)["median_ms"],
           "idle_sessions": n, "pss_per_idle_session_builtin_mib": pss_builtin / 1024,
           "pss_per_idle_session_template_mib": pss_template / 1024,
           "forked_from_zygote": {"builtin": forked_builtin, "template": forked_template},
           "pss_template_over_builtin": pss_template / pss_builtin}
    print(json.dumps(out, indent=2))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
