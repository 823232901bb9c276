"""Which sandbox a session runs in, and for gVisor on which platform: with
`--runsc-platform auto` (the default) the launcher runs runsc on ptrace
until a background probe proves kvm (test_start_anywhere has a kvm that
hangs); the session model, the Jupyter kernel model and /metrics say which,
and the runsc processes really run with it. An explicit `--runsc-platform
kvm` on a machine without a usable /dev/kvm stops the gateway at start with
a clear error instead of falling back. Real gateway, real runc and runsc."""
import os
import re
from pathlib import Path

import pytest

from support.gateway import runtime_gateway
from support.prerequisites import kvm_usable

RUNTIMES = ["runc", "runsc"]
@pytest.fixture(scope="module", params=RUNTIMES)
def gw(request, tmp_path_factory):
    yield from runtime_gateway(request, tmp_path_factory, "platform", "--max-kernels", "4")


def cgroup_parent():
    args = os.environ.get("CELLGATE_TEST_NODE_ARGS", "").split()
    return args[args.index("--cgroup-parent") + 1] if "--cgroup-parent" in args else "cellgate"


def test_the_session_says_which_sandbox_and_platform_it_runs_on(gw):
    r = gw.api("POST", "/v1/sessions", json={"timeout_s": 60}, timeout=180)
    assert r.status_code == 201, r.text
    expected = r.json()["sandbox"]["platform"]
    if gw.runtime == "runc":
        assert expected is None, r.json()
    elif not kvm_usable():
        assert expected == "ptrace", r.json()  # no device: no probe
    else:
        # kvm once the background probe has run a process on it, ptrace until then or if it did not.
        assert expected in ("kvm", "ptrace"), r.json()
    sid = r.json()["id"]
    try:
        # This gateway runs without --memory-merge: no kernel of it merges (test_memory_merge has it on).
        said = {"runtime": gw.runtime, "platform": expected, "memory_merge": False, "zygote": False}
        assert r.json()["sandbox"] == said, r.json()
        k = gw.api("GET", f"/api/kernels/{sid}").json()
        assert k["cellgate"]["sandbox"] == said, k
        metrics = gw.api("GET", "/metrics").text
        line = f'cellgate_sandboxes{{runtime="{gw.runtime}",platform="{expected or ""}"}} 1'
        assert line in metrics, [m for m in metrics.splitlines() if "cellgate_sandboxes" in m]
        assert gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print(1 + 1)"}).json()["stdout"] == "2\n"
        if gw.runtime == "runsc":
            # The sentry itself runs on that platform. runsc passes its own
            # flags on to the sentry only when they differ from the default
            # (ptrace), so no --platform there means ptrace.
            procs = Path(f"/sys/fs/cgroup/pids/{cgroup_parent()}/{sid}/cgroup.procs").read_text().split()
            sentries = []
            for pid in procs:
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                except OSError:
                    continue
                if argv[0] == b"runsc-sandbox":
                    sentries.append(argv)
            assert len(sentries) == 1, procs
            flags = {a.split(b"=", 1)[1].decode() for a in sentries[0] if a.startswith(b"--platform=")}
            assert (flags or {"ptrace"}) == {expected}, (flags, sentries)
    finally:
        gw.api("DELETE", f"/v1/sessions/{sid}")
    # No sandbox left: the gauge has no runsc/runc line with a count.
    assert not re.search(r'cellgate_sandboxes\{[^}]*\} [1-9]', gw.api("GET", "/metrics").text)


def test_an_explicit_kvm_platform_is_kvm_or_a_clear_error_at_start(tmp_path):
    """Asked for kvm, the launcher never falls back: sessions run on kvm where
    /dev/kvm works; where it does not, the gateway refuses to start, naming
    /dev/kvm (rather than serving a kernelspec that cannot start)."""
    import json
    import shutil
    from support.gateway import Gateway
    from support.prerequisites import gateway_missing
    if gateway_missing() or shutil.which("runsc") is None:
        if os.environ.get("CELLGATE_REQUIRE_SANDBOX") == "1":
            pytest.fail("needs root, runc, runsc and the built gateway")
        pytest.skip("needs root, runsc and the built gateway")
    config = tmp_path / "config.json"
    # A guest that hangs on this /dev/kvm holds a core until the start's
    # bound: keep it short.
    config.write_text(json.dumps({"kernelspecs": {"python3": {"runtime": "runsc", "start_timeout_s": 15}}}))
    g = Gateway("--config", str(config), "--max-kernels", "2", "--runsc-platform", "kvm")
    try:
        if not kvm_usable():
            with pytest.raises(RuntimeError) as refused:
                g.start()
            assert "runsc's kvm platform needs /dev/kvm" in str(refused.value), refused.value
            return
        g.start()
        r = g.api("POST", "/v1/sessions", json={"timeout_s": 60}, timeout=180)
        if r.status_code == 201:
            assert r.json()["sandbox"]["runtime"] == "runsc" and r.json()["sandbox"]["platform"] == "kvm", r.text
            g.api("DELETE", f"/v1/sessions/{r.json()['id']}")
        else:  # a /dev/kvm gVisor cannot use: the start fails, saying so, and nothing is left
            assert r.status_code in (500, 503) and r.json()["message"], r.text
            assert g.api("GET", "/v1/sessions").json()["sessions"] == []
    finally:
        g.stop()
        g.cleanup()
