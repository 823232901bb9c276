"""Bursts of creates against a warm pool smaller than the burst (issue 16).
A create that finds the pool empty waits for the next kernel to be ready,
from whichever start (a refill already under way, or a start made for the
waiting claims, at most --pool-concurrency at once); its own env still
reaches its kernel. The misses raise the pool's target up to --pool-max for
--pool-growth-window seconds, and past it the extra warm kernels are stopped.
Real gateway, runc sandboxes, real ipykernel."""
import re
import threading

from support.waiting import wait_for
from support.gateway import Gateway

BURST = 5


def metric(g, name, spec="python3"):
    text = g.api("GET", "/metrics").text
    m = re.search(rf'^{name}(?:{{kernelspec="{spec}"}})? (\d+)$', text, re.M)
    assert m, f"{name} missing from /metrics"
    return int(m.group(1))


def test_a_burst_larger_than_the_pool_waits_for_starts_then_the_pool_grows_and_shrinks():
    g = Gateway("--pool-size", "1", "--pool-max", "3", "--pool-growth-window", "6",
                "--max-kernels", "12").start()
    sessions = []
    try:
        wait_for(lambda: metric(g, "cellgate_pool_ready") == 1, "the pool to fill", timeout=120, step=0.5)
        results, errors = [None] * BURST, []

        def create(i):
            try:
                r = g.api("POST", "/v1/sessions", json={"env": {"KERNEL_BURST": str(i)}, "timeout_s": 120})
                assert r.status_code == 201, r.text
                sid = r.json()["id"]
                sessions.append(sid)
                out = g.api("POST", f"/v1/sessions/{sid}/execute",
                            json={"code": "import os; print(os.environ.get('KERNEL_BURST'))"}).json()
                assert out["status"] == "ok", out
                results[i] = (sid, r.json()["kernel"]["id"] if isinstance(r.json().get("kernel"), dict)
                              else r.json().get("kernel_id"), out["stdout"].strip())
            except Exception as e:  # reported below
                errors.append(f"{i}: {e!r}")

        threads = [threading.Thread(target=create, args=(i,)) for i in range(BURST)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
        assert not errors, errors
        # Each create got its own kernel, and its own env reached it.
        assert [r[2] for r in results] == [str(i) for i in range(BURST)]
        assert len({r[0] for r in results}) == BURST
        assert metric(g, "cellgate_pool_claims_total") == 1
        assert metric(g, "cellgate_pool_misses_total") == BURST - 1
        assert metric(g, "cellgate_pool_waited_total") == BURST - 1  # every miss got a kernel started for the pool
        assert metric(g, "cellgate_pool_waiting") == 0
        # The misses raised the target (1 + 4, capped at --pool-max 3) ...
        assert metric(g, "cellgate_pool_target_max") == 3
        assert metric(g, "cellgate_pool_target") == 3
        # ... and once the window has passed without a miss it is 1 again and
        # the extra warm kernels are stopped (the housekeeping tick trims).
        wait_for(lambda: metric(g, "cellgate_pool_target") == 1 and metric(g, "cellgate_pool_ready") == 1
                 and metric(g, "cellgate_pool_starting") == 0, "the pool to shrink back to 1", timeout=180)
        # The burst's sessions kept running throughout.
        for sid, _, want in results:
            out = g.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print(6*7)"}).json()
            assert out["status"] == "ok" and out["stdout"].strip() == "42", out
    finally:
        for sid in sessions:
            g.api("DELETE", f"/v1/sessions/{sid}")
        g.stop()
        g.cleanup()


def test_pool_max_below_pool_size_is_refused_at_start():
    import subprocess
    from support.prerequisites import GATEWAY
    r = subprocess.run([str(GATEWAY), "--pool-size", "4", "--pool-max", "2", "--port", "0"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert "--pool-max is below --pool-size" in r.stderr
