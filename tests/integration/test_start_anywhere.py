"""A gateway starts at once and its sandboxes start wherever it is put:

- where /dev/kvm makes VMs but gVisor's guest hangs on it, the runsc platform
  probe runs in the background, bounded, and sessions use ptrace meanwhile
  and after (a stand-in runsc whose kvm runs hang comes first on PATH);
- with a state dir as deep as a cluster node's under a test's work dir, the
  sandboxes' sockets (runc's, gVisor's relay, the egress proxy's) still fit a
  unix socket's 107 bytes.

Real gateway, real runc and runsc, the kernel image."""
import json
import os
import shutil
import subprocess
import time

import pytest
import requests

from support.gateway import Gateway, HttpListener
from support.prerequisites import BUILD, gateway_missing, kvm_usable, require

RUNSC = shutil.which("runsc")


def needs_runsc():
    require("start-up tests", gateway_missing() or (None if RUNSC else "gVisor's runsc is not installed"))


def stand_in_runsc(bin_dir, runs_file):
    """A runsc whose kvm runs hang (recording their pids) and whose other
    runs are the real runsc's."""
    bin_dir.mkdir()
    fake = bin_dir / "runsc"
    fake.write_text("#!/bin/sh\n"
                    'case " $* " in *" --platform=kvm "*|*" --platform kvm "*)\n'
                    f"  echo $$ >> {runs_file}; exec sleep 600;;\n"
                    "esac\n"
                    f'exec {RUNSC} "$@"\n')
    fake.chmod(0o755)


def metric_reason(gw):
    for line in gw.api("GET", "/metrics").text.splitlines():
        if line.startswith("cellgate_runsc_platform_info{"):
            return line
    return None


def test_a_kvm_that_hangs_gvisor_never_delays_the_start_and_sessions_run_on_ptrace(tmp_path):
    needs_runsc()
    runs = tmp_path / "kvm-runs"
    stand_in_runsc(tmp_path / "bin", runs)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"kernelspecs": {"python3": {"runtime": "runsc"}}}))
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    g = Gateway("--config", str(config), "--max-kernels", "4", env=env)
    try:
        t0 = time.monotonic()
        g.start()
        while True:  # the first answer of /api, however soon after the port
            try:
                if requests.get(g.url + "/api", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() - t0 < 10, g.log_text()[-3000:]
            time.sleep(0.02)
        started_in = time.monotonic() - t0
        assert started_in < 2.0, f"/api answered {started_in:.1f} s after the start:\n{g.log_text()[-3000:]}"

        r = g.api("POST", "/v1/sessions", json={"timeout_s": 60}, timeout=180)
        assert r.status_code == 201, r.text
        assert r.json()["sandbox"]["platform"] == "ptrace", r.json()
        sid = r.json()["id"]
        out = g.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print(1 + 1)"}).json()
        assert out["stdout"] == "2\n", out
        first = metric_reason(g)
        assert first is not None and 'platform="ptrace"' in first, first

        if not kvm_usable():
            # No device that makes VMs: no probe at all, and the reason says so.
            assert not runs.exists()
            assert "/dev/kvm" in first, first
            return
        # The probe tried kvm once, in the background, and was stopped at its bound.
        deadline = time.monotonic() + 20
        while "did not run /bin/true" not in g.log_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "did not run /bin/true within" in g.log_text(), g.log_text()[-3000:]
        pids = runs.read_text().split()
        assert pids, "the probe never ran the stand-in"
        for pid in pids:
            assert not os.path.exists(f"/proc/{pid}") or \
                open(f"/proc/{pid}/stat").read().split()[2] == "Z", f"probe {pid} still runs"
        # A session made after the verdict says why it is on ptrace.
        r2 = g.api("POST", "/v1/sessions", json={"timeout_s": 60}, timeout=180)
        assert r2.status_code == 201, r2.text
        g.api("DELETE", f"/v1/sessions/{sid}")
        line = metric_reason(g)
        assert 'platform="ptrace"' in line and "did not run /bin/true within" in line, line
        g.api("DELETE", f"/v1/sessions/{r2.json()['id']}")

        # The verdict holds for this boot: a second gateway does not probe again.
        h = Gateway("--config", str(config), "--max-kernels", "2", env=env)
        try:
            h.start()
            r3 = h.api("POST", "/v1/sessions", json={"timeout_s": 60}, timeout=180)
            assert r3.status_code == 201 and r3.json()["sandbox"]["platform"] == "ptrace", r3.text
            assert "this boot's verdict" in h.log_text(), h.log_text()[-2000:]
            assert runs.read_text().split() == pids
            h.api("DELETE", f"/v1/sessions/{r3.json()['id']}")
        finally:
            h.stop()
            h.cleanup()
    finally:
        g.stop()
        g.cleanup()


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_a_deep_state_dir_still_starts_sandboxes_with_their_sockets_and_egress(tmp_path, runtime):
    require("start-up tests", gateway_missing() or (None if shutil.which(runtime) else f"{runtime} is not installed"))
    upstream = HttpListener()
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"kernelspecs": {"python3": {"runtime": runtime}}}))
    deep = "cluster-node0-work-directory-of-a-long-test-name/node0/state"
    g = Gateway("--config", str(config), "--max-kernels", "2",
                *upstream.resolve_args("allowed.test"), state_dir=deep)
    assert len(str(g.state_dir)) > 61
    try:
        g.start()
        r = g.api("POST", "/v1/sessions", json={"timeout_s": 60, "network": {"allow": ["allowed.test"]}},
                  timeout=180)
        assert r.status_code == 201, f"{r.status_code} {r.text}\n{g.log_text()[-3000:]}"
        sid = r.json()["id"]
        code = ("import urllib.request\n"
                "print(1 + 1)\n"
                "print(urllib.request.urlopen('http://allowed.test/deep', timeout=20).read().decode())")
        out = g.api("POST", f"/v1/sessions/{sid}/execute", json={"code": code}, timeout=120).json()
        assert out["stdout"] == "2\nupstream /deep\n", out
        assert "/deep" in upstream.paths
        # The sandbox's files are still found under the state dir.
        assert (g.state_dir / "sandboxes" / sid).is_dir()
        assert g.api("DELETE", f"/v1/sessions/{sid}").status_code == 204
    finally:
        g.stop()
        g.cleanup()
        upstream.close()


def test_a_launcher_service_socket_path_too_long_is_refused_at_start_naming_it(tmp_path):
    require("start-up tests", gateway_missing())
    socket = tmp_path / ("s" * 120) / "launcher.sock"
    r = subprocess.run([str(BUILD / "bin" / "cellgate-launchd"), "--socket", str(socket),
                        "--state-dir", str(tmp_path / "state")], capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert str(socket) in r.stderr and "at most 107" in r.stderr, r.stderr
