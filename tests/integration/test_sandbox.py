"""The sandboxed kernel, end to end: the built image and a real ipykernel, under
each OCI runtime: runc, and gVisor's runsc (the kernel reached through the
relay over the container's stdio). Every test runs under both; where gVisor
shows the same property differently, the test says so and checks gVisor's
form of it. runsc tests are skipped only when runsc is not installed, and fail
instead when CELLGATE_REQUIRE_SANDBOX=1. A confinement property that the
hostile-code battery proves under runsc through the gateway runs here under
runc alone (runsc_proved_by names the battery's test)."""
import base64
import errno
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest

from support.prerequisites import RELAY, require, runsc_refusal
from support.netns import NetnsHost
from support.waiting import wait_for

RUNTIMES = ["runc", "runsc"]


def _need_runsc():
    require("runsc sandboxes", runsc_refusal())


@pytest.fixture(params=RUNTIMES)
def runtime(request):
    if request.param == "runsc":
        _need_runsc()
    return request.param


@pytest.fixture
def sandbox(launcher, runtime):
    """A factory: sandbox(*cli_args) starts one under this test's runtime; all
    are removed after the test."""
    made = []

    def make(*args, env=None):
        s = launcher.run("--runtime", runtime, *args, env=env)
        made.append(s)
        return s

    yield make
    for s in made:
        s.remove()


def _kernel_write(s, path, text):
    r = s.execute(f"open({path!r}, 'w').write({text!r})")
    assert r["error"] is None, r["error"]


def test_stdout_of_a_cell_comes_back(sandbox):
    s = sandbox()
    r = s.execute("print('hello', 6 * 7)")
    assert r["status"] == "ok"
    assert r["stdout"] == "hello 42\n"


def test_a_matplotlib_plot_returns_png_display_data(sandbox):
    s = sandbox()
    r = s.execute("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
    assert r["error"] is None, r["error"]
    pngs = [d["image/png"] for d in r["data"] if "image/png" in d]
    assert len(pngs) == 1
    raw = base64.b64decode(pngs[0])
    assert raw.startswith(b"\x89PNG\r\n\x1a\n") and len(raw) > 5000


def test_state_persists_between_cells(sandbox):
    s = sandbox()
    s.execute("import pandas as pd\ndf = pd.DataFrame({'a': [1, 2, 3]})\ncounter = 41")
    s.execute("counter += 1")
    assert s.value("(counter, int(df['a'].sum()))") == (42, 6)


def test_an_exception_arrives_as_an_error_with_traceback(sandbox):
    s = sandbox()
    r = s.execute("1/0")
    assert r["status"] == "error"
    assert r["error"]["ename"] == "ZeroDivisionError"
    assert any("ZeroDivisionError" in line for line in r["error"]["traceback"])


@pytest.mark.runsc_proved_by("test_hostile.py::test_the_sandbox_has_only_loopback_and_no_route")
def test_the_network_namespace_holds_only_loopback_and_no_route(sandbox):
    s = sandbox()
    assert s.value("socket.if_nameindex()" if False else "__import__('socket').if_nameindex()") == [(1, "lo")]
    routes = s.value("open('/proc/net/route').read().splitlines()[1:]")
    assert routes == []
    v6 = s.value("[l.split()[-1] for l in open('/proc/net/ipv6_route').read().splitlines()]")
    assert set(v6) <= {"lo"}, v6


@pytest.fixture(scope="module")
def test_host():
    with NetnsHost("cg-sandbox") as host:
        yield host


@pytest.mark.runsc_proved_by("test_hostile.py::test_tcp_udp_and_unix_egress_to_every_listener_on_this_machine_never_arrives")
def test_tcp_and_udp_egress_to_the_hosts_own_addresses_never_arrive(sandbox, test_host):
    # Loopback's address and the host end of a veth this test made: the
    # addresses of this machine a test may listen on.
    targets = ["127.0.0.1", test_host.host_addr]
    listeners = []
    for addr in targets:
        tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        tcp.bind((addr, 0))
        tcp.listen(8)
        tcp.settimeout(0.5)
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.bind((addr, 0))
        udp.settimeout(0.5)
        listeners.append((addr, tcp, udp))
    try:
        s = sandbox()
        probe = "\n".join([
            "import socket, errno",
            "results = {}",
            *[f"""
try:
    c = socket.create_connection(({addr!r}, {tcp.getsockname()[1]}), timeout=3)
    results['tcp {addr}'] = 'connected'
except OSError as e:
    results['tcp {addr}'] = errno.errorcode.get(e.errno, str(e))
try:
    u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    u.sendto(b'cellgate-egress-probe', ({addr!r}, {udp.getsockname()[1]}))
    results['udp {addr}'] = 'sent'
except OSError as e:
    results['udp {addr}'] = errno.errorcode.get(e.errno, str(e))
""" for addr, tcp, udp in listeners],
            "print(repr(results))",
        ])
        r = s.execute(probe)
        assert r["error"] is None, r["error"]
        import ast
        results = ast.literal_eval(r["stdout"].strip())
        for addr, tcp, udp in listeners:
            assert results[f"tcp {addr}"] != "connected", results
            with pytest.raises(socket.timeout):
                tcp.accept()
            with pytest.raises(socket.timeout):
                udp.recvfrom(100)
        # No route at all: the kernel cannot even try to leave. Linux says
        # ENETUNREACH; gVisor's netstack (loopback only) says EHOSTUNREACH.
        no_route = "ENETUNREACH" if s.info["runtime"] == "runc" else "EHOSTUNREACH"
        for addr in targets[1:]:
            assert results[f"tcp {addr}"] == no_route, results
            assert results[f"udp {addr}"] == no_route, results
    finally:
        for _, tcp, udp in listeners:
            tcp.close()
            udp.close()


@pytest.mark.runsc_proved_by("test_hostile.py::test_host_files_and_host_kernel_settings_are_out_of_reach")
def test_the_kernel_sees_no_host_process_and_no_host_file(sandbox, tmp_path):
    marker = f"cellgate-host-marker-{uuid.uuid4().hex}"
    planted = [Path("/tmp") / marker, Path("/root") / marker, tmp_path / marker]
    for p in planted:
        p.write_text("host secret")
    try:
        s = sandbox()
        procs = s.value("sorted(open(f'/proc/{p}/comm').read().strip() for p in __import__('os').listdir('/proc') if p.isdigit())")
        # Under gVisor the relay sits between tini and the kernel.
        allowed = {"tini", "cellgate-kernel"} | ({"cellgate-relay"} if s.info["runtime"] == "runsc" else set())
        assert set(procs) <= allowed, procs
        assert len(procs) <= 3
        found = s.value(f"""[r for r, d, f in __import__('os').walk('/') if {marker!r} in f and not r.startswith(('/proc', '/sys'))]""")
        assert found == []
        mounts = s.value("[l.split()[4] for l in open('/proc/self/mountinfo')]")
        assert "/workspace" in mounts and "/run/kernel" in mounts
        assert not any(m.startswith(("/var/lib", "/home", "/root", "/run/cellgate", "/host")) for m in mounts), mounts
    finally:
        for p in planted:
            p.unlink()


@pytest.mark.runsc_proved_by("test_hostile.py::test_no_capabilities_and_no_way_to_regain_privileges")
def test_the_kernel_is_unprivileged(sandbox):
    s = sandbox()
    status = s.value("open('/proc/self/status').read()")
    fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
    assert fields["Uid"].split()[0] == "1000" and fields["Uid"].split()[0] != "0"
    assert int(fields["CapEff"], 16) == 0
    assert int(fields["CapPrm"], 16) == 0
    assert int(fields["CapBnd"], 16) == 0
    assert fields["Seccomp"].strip() == "2"
    # gVisor's /proc/self/status has no NoNewPrivs line; prctl answers under both.
    assert s.value("__import__('ctypes').CDLL(None).prctl(39, 0, 0, 0, 0)") == 1  # PR_GET_NO_NEW_PRIVS
    if s.info["runtime"] == "runc":
        assert fields["NoNewPrivs"].strip() == "1"
    # uid 1000 in the sandbox is not uid 1000 on the host: what it writes is
    # owned by its own slot's host uid.
    _kernel_write(s, "/workspace/owner-probe", "x")
    owner = os.stat(Path(s.info["workspace_dir"]) / "owner-probe").st_uid
    assert owner == s.info["host_uid_base"] + 1000 and owner >= 1_000_000
    host = Path(f"/proc/{s.info['pid']}/status").read_text()
    host_fields = dict(line.split(":\t", 1) for line in host.splitlines() if ":\t" in line)
    if s.info["runtime"] == "runc":
        assert os.stat(f"/proc/{s.info['pid']}").st_uid >= 1_000_000
    else:
        # The pid is gVisor's sentry: host user nobody, in a user namespace of
        # its own, no new privileges, under gVisor's own seccomp filter.
        assert host_fields["Uid"].split()[0] == "65534"
        assert os.readlink(f"/proc/{s.info['pid']}/ns/user") != os.readlink("/proc/self/ns/user")
        assert host_fields["NoNewPrivs"].strip() == "1"
        assert host_fields["Seccomp"].strip() == "2"


@pytest.mark.runsc_proved_by("test_hostile.py::test_mount_unshare_ptrace_module_loading_raw_sockets_and_other_privileged_calls_are_refused")
def test_seccomp_and_missing_capabilities_refuse_mount_unshare_and_ptrace(sandbox):
    s = sandbox()
    code = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
def errno_of(rc):
    return ctypes.get_errno() if rc != 0 else 0
res = {
  'mount': errno_of(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)),
  'unshare_user': errno_of(libc.unshare(0x10000000)),
  'unshare_net': errno_of(libc.unshare(0x40000000)),
  'ptrace': errno_of(libc.ptrace(0, 0, None, None)),
  'raw_socket': None,
}
import socket
try:
    socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    res['raw_socket'] = 0
except OSError as e:
    res['raw_socket'] = e.errno
print(repr(res))
"""
    r = s.execute(code)
    import ast
    res = ast.literal_eval(r["stdout"].strip())
    for name, err in res.items():
        assert err in (errno.EPERM, errno.EACCES), (name, err)


def test_the_rootfs_is_read_only_and_tmp_is_capped(sandbox):
    s = sandbox("--tmp-size", "8M")
    r = s.execute("open('/usr/lib/evil', 'w')")
    assert r["error"]["ename"] in ("OSError", "PermissionError")
    assert "Read-only file system" in r["error"]["evalue"] or "Permission denied" in r["error"]["evalue"]
    # Said by the kernel itself, with the mount's size, so that a failure
    # shows whether the cap or the report went missing.
    r = s.execute("""
import errno, os
st = os.statvfs('/tmp')
try:
    with open('/tmp/big', 'wb') as f:
        f.write(b'x' * (16 << 20))
    outcome = 'written'
except OSError as e:
    outcome = errno.errorcode.get(e.errno, str(e))
finally:
    if os.path.exists('/tmp/big'):
        os.remove('/tmp/big')
print(outcome, st.f_blocks * st.f_frsize >> 20)
""")
    assert r["status"] == "ok" and r["stdout"] == "ENOSPC 8\n", r


def test_the_kernel_cannot_change_its_run_dir(sandbox):
    s = sandbox()
    r = s.execute("open('/run/kernel/k-9', 'w')")
    assert r["error"] is not None and "Permission denied" in r["error"]["evalue"]
    r = s.execute("import os; os.rename('/run/kernel/k-1', '/run/kernel/x')")
    assert r["error"] is not None and "Permission denied" in r["error"]["evalue"]


@pytest.mark.runsc_proved_by("test_hostile.py::test_a_memory_bomb_is_oom_killed_reported_and_the_session_restarted")
def test_a_4gib_allocation_is_oom_killed_and_reported(launcher, sandbox):
    s = sandbox("--memory", "1G")
    s.client.execute("x = b'x' * (4 << 30)")
    st = wait_for(lambda: (lambda v: v if v["state"] == "stopped" else None)(launcher.status(s.id)), timeout=60)
    assert st["state"] == "stopped", st
    assert st["oom_killed"] is True


@pytest.mark.runsc_proved_by("test_hostile.py::test_a_fork_bomb_is_stopped_and_a_fork_loop_ends_at_the_pids_limit")
def test_a_fork_bomb_is_stopped_by_the_pids_limit(sandbox):
    s = sandbox("--pids", "48")
    code = """
import os, time
pids, err = [], None
try:
    for _ in range(10000):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        pids.append(pid)
except OSError as e:
    err = e.errno
for p in pids:
    os.kill(p, 9)
for p in pids:
    os.waitpid(p, 0)
print(repr((len(pids), err)))
"""
    r = s.execute(code, timeout=120)
    import ast
    forked, err = ast.literal_eval(r["stdout"].strip())
    assert err == errno.EAGAIN
    assert forked < 48
    assert s.value("1 + 1") == 2, "the kernel survives the fork bomb"


@pytest.mark.runsc_proved_by("test_hostile.py::test_a_disk_bomb_stops_at_each_writable_places_cap")
def test_a_write_past_the_workspace_cap_fails_with_enospc(launcher, sandbox):
    s = sandbox("--workspace-size", "16M")
    code = """
import errno
written = 0
try:
    with open('/workspace/fill.bin', 'wb') as f:
        for _ in range(64):
            f.write(b'\\0' * (1 << 20)); f.flush(); written += 1
    result = 'no error'
except OSError as e:
    result = errno.errorcode[e.errno]
print(repr((result, written)))
"""
    r = s.execute(code)
    import ast
    result, written = ast.literal_eval(r["stdout"].strip())
    assert result == "ENOSPC"
    assert written <= 16
    image = Path(s.info["workspace_dir"] + ".img")
    assert image.stat().st_blocks * 512 <= 17 << 20, "the host holds no more than the cap"


@pytest.mark.runsc_proved_by("test_hostile.py::test_the_gateways_environment_and_token_never_reach_the_kernel")
def test_a_secret_in_the_launchers_environment_never_reaches_the_kernel(sandbox):
    secret = f"sk-{uuid.uuid4().hex}"
    env = dict(os.environ, CELLGATE_TEST_SECRET=secret, AWS_SECRET_ACCESS_KEY=secret)
    s = sandbox("--env", "KERNEL_USERNAME=alice", env=env)
    environ = s.value("dict(__import__('os').environ)")
    assert secret not in repr(environ)
    assert "CELLGATE_TEST_SECRET" not in environ
    assert environ["KERNEL_USERNAME"] == "alice"
    init_env = s.value("open('/proc/1/environ', 'rb').read()")
    assert secret.encode() not in init_env


@pytest.mark.runsc_proved_by("test_hostile.py::test_one_session_cannot_read_or_reach_another")
def test_two_kernels_cannot_see_each_others_workspace(sandbox):
    a, b = sandbox(), sandbox()
    name = f"only-in-a-{uuid.uuid4().hex}.txt"
    a.execute(f"open('/workspace/{name}', 'w').write('private')")
    assert a.value("__import__('os').listdir('/workspace')") == [name]
    assert b.value("__import__('os').listdir('/workspace')") == []
    found = b.value(f"[r for r, d, f in __import__('os').walk('/') if {name!r} in f and not r.startswith(('/proc', '/sys'))]")
    assert found == []
    # Distinct host ids: even out of its mounts, b could not read a's files.
    assert a.info["host_uid_base"] != b.info["host_uid_base"]


def test_sigint_interrupts_a_running_cell(launcher, sandbox):
    s = sandbox()
    result = {}
    sleeping = threading.Event()

    def hook(msg):
        if msg["msg_type"] == "stream" and "sleeping" in msg["content"]["text"]:
            sleeping.set()
        if msg["msg_type"] == "error":
            result["error"] = msg["content"]

    def run():
        s.client.execute_interactive("import time; print('sleeping', flush=True); time.sleep(30)",
                                     output_hook=hook, timeout=60)

    t = threading.Thread(target=run)
    t.start()
    # Wait until the kernel is busy in the sleep, then interrupt.
    assert sleeping.wait(timeout=30)
    time.sleep(0.2)
    launcher.cmd("kill", s.id, "SIGINT")
    t.join(timeout=20)
    assert not t.is_alive()
    assert result["error"]["ename"] == "KeyboardInterrupt"
    assert s.value("'still here'") == "still here"


def _leftovers(launcher, sandbox_id, workspace_dir):
    found = []
    for rt in RUNTIMES:
        if shutil.which(rt) is None:
            continue
        ids = subprocess.run([rt, "--root", str(launcher.state_dir / rt), "list", "--quiet"],
                             capture_output=True, text=True).stdout.split()
        if sandbox_id in ids:
            found.append(f"{rt} container")
    # Any process still naming the sandbox's run dir: the relay, or gVisor's
    # sentry and gofer (their argv carries the bundle).
    run_dir = str(launcher.state_dir / "sandboxes" / sandbox_id)
    for p in Path("/proc").iterdir():
        try:
            args = (p / "cmdline").read_bytes().decode(errors="replace").split("\0") if p.name.isdigit() else []
        except OSError:
            continue
        if any(a == run_dir or a.startswith(run_dir + "/") or a.endswith("=" + run_dir) for a in args):
            found.append(f"process {p.name}")
    for h in Path("/sys/fs/cgroup").iterdir():
        if (h / "cellgate" / sandbox_id).exists():
            found.append(f"cgroup {h.name}")
    mounts = Path("/proc/self/mountinfo").read_text()
    if sandbox_id in mounts:
        found.append("mount")
    if (launcher.state_dir / "sandboxes" / sandbox_id).exists():
        found.append("run dir")
    if Path(workspace_dir).exists() or Path(workspace_dir + ".img").exists():
        found.append("workspace")
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    if workspace_dir in loops:
        found.append("loop device")
    return found


def test_remove_leaves_nothing_behind(launcher, runtime):
    s = launcher.run("--runtime", runtime)
    s.execute("open('/workspace/a.txt', 'w').write('x')")
    assert _leftovers(launcher, s.id, s.info["workspace_dir"]) != [], "the check must see a live sandbox"
    s.remove()
    assert _leftovers(launcher, s.id, s.info["workspace_dir"]) == []


def test_reap_removes_stopped_sandboxes_and_stray_cgroups(launcher, runtime):
    s = launcher.run("--runtime", runtime)
    s.client.stop_channels()
    launcher.cmd("kill", s.id, "SIGKILL")
    wait_for(lambda: launcher.status(s.id)["state"] == "stopped", timeout=20)
    stray = Path("/sys/fs/cgroup/memory/cellgate") / f"stray-{uuid.uuid4().hex[:8]}"
    stray.mkdir(parents=True)
    out = launcher.cmd("reap").stdout
    assert f"reaped {s.id}" in out
    assert not stray.exists()
    assert _leftovers(launcher, s.id, s.info["workspace_dir"]) == []


def test_reap_never_kills_what_is_in_a_cgroup_it_does_not_own(launcher):
    # Every launcher instance (every gateway, every test) shares the cellgate
    # cgroup parent. A busy cgroup that is not this instance's sandbox may be
    # another instance's live kernel: reaping leaves it, and its processes, alone.
    stray = Path("/sys/fs/cgroup/pids/cellgate") / f"stray-{uuid.uuid4().hex[:8]}"
    stray.mkdir(parents=True)
    p = subprocess.Popen(["sleep", "600"])
    try:
        (stray / "cgroup.procs").write_text(str(p.pid))
        out = launcher.cmd("reap").stdout
        assert f"cgroup:{stray.name}" not in out, out
        time.sleep(0.5)
        assert p.poll() is None, "reap killed a process it does not own"
        assert stray.exists()
    finally:
        p.kill()
        p.wait()
        deadline = time.time() + 10
        while stray.exists() and time.time() < deadline:
            try:
                stray.rmdir()
            except OSError:
                time.sleep(0.1)


@pytest.mark.parametrize("args, message", [
    (["--memory", "-1"], "cannot be negative"),
    (["--memory", "1K"], "memory limit"),
    (["--image", "nope"], "unknown image 'nope'"),
    (["--workspace", "relative/dir"], "absolute"),
    (["--workspace", "/etc"], "directly under"),
    (["--uid", "0"], "uid or gid 0"),
    (["--env", "LD_PRELOAD=/tmp/x.so"], "not on the allow-list"),
    (["--pids", "100000000"], "pids limit"),
])
def test_bad_input_gets_a_clear_error_and_starts_nothing(launcher, runtime, args, message):
    before = set(os.listdir(launcher.state_dir / "sandboxes")) if (launcher.state_dir / "sandboxes").exists() else set()
    r = launcher.cmd("run", "--runtime", runtime, *args, check=False)
    assert r.returncode == 2
    assert message in r.stderr
    after = set(os.listdir(launcher.state_dir / "sandboxes")) if (launcher.state_dir / "sandboxes").exists() else set()
    assert after == before


def test_a_failed_start_tears_down_and_names_the_step(launcher, runtime):
    # Too little memory to import the scientific stack: the kernel is OOM-killed
    # while starting, the launch fails at a named step, says why, and leaves
    # nothing behind.
    preload = [a for m in ("numpy", "pandas", "matplotlib.pyplot", "scipy.optimize", "sklearn.ensemble")
               for a in ("--preload", m)]
    sid = f"too-small-{runtime}"
    r = launcher.cmd("run", "--runtime", runtime, "--id", sid, "--memory", "64M", *preload, check=False)
    assert r.returncode == 1, r.stderr
    assert "failed at step 'wait-for-sockets'" in r.stderr
    assert "OOM kill" in r.stderr
    assert _leftovers(launcher, sid, str(launcher.workspace_root / sid)) == []


def test_a_kernel_that_dies_is_reported_stopped(launcher, sandbox):
    s = sandbox()
    s.client.execute("import os; os.kill(os.getpid(), 9)")
    st = wait_for(lambda: (lambda v: v if v["state"] == "stopped" else None)(launcher.status(s.id)), timeout=30)
    assert st["state"] == "stopped", st
    assert st["oom_killed"] is False


def test_an_unknown_or_uninstalled_runtime_is_refused_clearly(launcher):
    r = launcher.cmd("run", "--runtime", "kata", check=False)
    assert r.returncode == 2
    assert "unknown runtime 'kata' (known: runc, runsc)" in r.stderr
    # A PATH without runsc: the launcher says so instead of failing at start.
    env = dict(os.environ, PATH="/nonexistent")
    r = launcher.cmd("run", "--runtime", "runsc", env=env, check=False)
    assert r.returncode == 2
    assert "runtime 'runsc' is not available: gVisor's runsc is not installed" in r.stderr
    r = launcher.cmd("run", "--runtime", "runc", env=env, check=False)
    assert r.returncode == 2
    assert "runtime 'runc' is not available: runc is not installed" in r.stderr


# --- gVisor only: the relay -----------------------------------------------------


def test_runsc_kernel_sockets_are_the_relays_and_the_sandbox_cannot_reach_them(launcher):
    _need_runsc()
    s = launcher.run("--runtime", "runsc")
    try:
        relay_dir = Path(s.info["run_dir"]) / "relay"
        assert s.info["endpoints"]["shell"] == f"ipc://{relay_dir}/k-1"
        # The relay runs as the sandbox's own host uid, not as root.
        relay_pid = int((Path(s.info["run_dir"]) / "relay.pid").read_text())
        assert os.stat(f"/proc/{relay_pid}").st_uid == s.info["host_uid_base"] + 1000
        # Inside, the relay's directory does not exist and the run dir is not mounted.
        found = s.value(f"__import__('os').path.exists({str(relay_dir)!r})")
        assert found is False
        assert s.value("sorted(__import__('os').listdir('/mnt'))") == ["cellgate-relay.py"]
        r = s.execute("open('/mnt/cellgate-relay.py', 'a')")
        assert r["error"] is not None
        assert "Read-only file system" in r["error"]["evalue"] or "Permission denied" in r["error"]["evalue"]
    finally:
        s.remove()


def test_runsc_garbage_from_inside_the_sandbox_ends_only_that_sandbox(launcher):
    """Hostile code can write to the relay's pipe (same uid inside). The host
    relay refuses the bad frame, ends, and that sandbox stops; another keeps
    serving."""
    _need_runsc()
    hostile, other = launcher.run("--runtime", "runsc"), launcher.run("--runtime", "runsc")
    try:
        hostile.client.execute("import os\n"
                               "fd = os.open(f'/proc/{os.getppid()}/fd/1', os.O_WRONLY)\n"
                               "os.write(fd, b'\\xff' * 64)")
        st = wait_for(lambda: (lambda v: v if v["state"] == "stopped" else None)(launcher.status(hostile.id)),
                      timeout=30)
        assert st["state"] == "stopped", st
        log = (Path(hostile.info["run_dir"]) / "relay.log").read_text()
        assert "protocol error from the sandbox: unknown frame type 255" in log, log
        assert other.value("6 * 7") == 42
    finally:
        hostile.remove()
        other.remove()


def test_runsc_a_relay_that_dies_takes_its_sandbox_along(launcher):
    _need_runsc()
    s = launcher.run("--runtime", "runsc")
    try:
        relay_pid = int((Path(s.info["run_dir"]) / "relay.pid").read_text())
        os.kill(relay_pid, signal.SIGKILL)
        # Unreachable at once (status says so), and the sandbox follows: the
        # relay inside sees its input end and stops the kernel.
        st = wait_for(lambda: (lambda v: v if v["state"] == "stopped" else None)(launcher.status(s.id)), timeout=5)
        assert st["state"] == "stopped", st
        sentry = Path(f"/proc/{s.info['pid']}")
        wait_for(lambda: not sentry.exists() or sentry.joinpath("stat").read_text().split()[2] == "Z", timeout=30)
        assert not sentry.exists() or sentry.joinpath("stat").read_text().split()[2] == "Z"
        assert "reaped " + s.id in launcher.cmd("reap").stdout
        assert _leftovers(launcher, s.id, s.info["workspace_dir"]) == []
    finally:
        s.remove()


def test_relay_binary_refuses_a_bad_first_frame_and_listens_on_nothing(tmp_path):
    """The host relay on its own, fed by the test instead of a sandbox."""
    if not RELAY.exists():
        pytest.skip(f"{RELAY} is not built")
    (tmp_path / "relay").mkdir()
    (tmp_path / "relay.lock").touch()
    to_relay_r, to_relay_w = os.pipe()
    from_relay_r, from_relay_w = os.pipe()
    log = open(tmp_path / "relay.log", "wb")
    # fds 3 and 4 in the relay: what it reads from the "sandbox", where it writes to it.
    import fcntl
    high_r, high_w = fcntl.fcntl(to_relay_r, fcntl.F_DUPFD, 100), fcntl.fcntl(from_relay_w, fcntl.F_DUPFD, 100)
    r = subprocess.run([str(RELAY), "--socket-dir", str(tmp_path / "relay"), "--lock", str(tmp_path / "relay.lock"),
                        "--pid-file", str(tmp_path / "relay.pid")],
                       stdout=log, stderr=log, pass_fds=(3, 4),
                       preexec_fn=lambda: (os.dup2(high_r, 3), os.dup2(high_w, 4)), timeout=10)
    for fd in (to_relay_r, from_relay_w, high_r, high_w):
        os.close(fd)
    assert r.returncode == 0
    pid = int((tmp_path / "relay.pid").read_text())
    try:
        # A valid header with a length far beyond any frame: refused at once,
        # without waiting for 4 GiB that will never come.
        os.write(to_relay_w, bytes([4]) + (1).to_bytes(4, "big") + (0xFFFFFFF0).to_bytes(4, "big"))
        wait_for(lambda: not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z",
                 timeout=10)
        text = (tmp_path / "relay.log").read_text()
        assert "protocol error from the sandbox: data frame of 4294967280 bytes" in text, text
        assert list((tmp_path / "relay").iterdir()) == []
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.close(to_relay_w)
        os.close(from_relay_r)
