"""The kernel zygote (issue 16, Part 1: bursts and density): with --zygote on,
runc kernels are forked from the image's pre-imported zygote into sandboxes
made for them. Checked from the host and from inside: the kernel is in every
namespace and cgroup of its sandbox, has exactly what runc gives a
container's process (the very seccomp filter, no capability, no_new_privs,
the sandbox's user, its rlimits), holds no descriptor of the zygote's or the
host's, draws its own randomness, sees its own environment; signals, death,
restarts and removal work as for a cold kernel; and the zygote itself runs
without any capability in a read-only view of the image. test_hostile runs
the whole battery against such kernels too (runc-zygote)."""
import ctypes
import json
import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from support.gateway import Gateway
from support.waiting import wait_for

libc = ctypes.CDLL(None, use_errno=True)
PTRACE_SEIZE, PTRACE_INTERRUPT, PTRACE_DETACH, PTRACE_SECCOMP_GET_FILTER = 0x4206, 0x4207, 17, 0x420C
NAMESPACES = ("user", "mnt", "pid", "net", "ipc", "uts", "cgroup")

LOOK = r"""
import json, os, random, numpy
status = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)
fds = {}
for fd in os.listdir('/proc/self/fd'):
    try:
        fds[fd] = os.readlink(f'/proc/self/fd/{fd}')
    except OSError:
        pass
import resource
print('@@' + json.dumps({
    'pid': os.getpid(), 'ppid': os.getppid(), 'uid': os.getuid(), 'gid': os.getgid(), 'groups': os.getgroups(),
    'caps': {k: status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb')},
    'no_new_privs': status['NoNewPrivs'].strip(), 'seccomp': status['Seccomp'].strip(),
    'filters': status.get('Seccomp_filters', '').strip(), 'dumpable': open('/proc/self/stat').read() != '',
    'fds': fds, 'random': random.random(), 'numpy': float(numpy.random.random()),
    'env': dict(os.environ), 'cwd': os.getcwd(), 'umask': os.umask(0o022),
    'nofile': resource.getrlimit(resource.RLIMIT_NOFILE), 'core': resource.getrlimit(resource.RLIMIT_CORE),
    'oom': open('/proc/self/oom_score_adj').read().strip(), 'hostname': os.uname().nodename,
}))
"""


def run(g, sid, code, timeout_s=60):
    r = g.api("POST", f"/v1/sessions/{sid}/execute", json={"code": code, "timeout_s": timeout_s}, timeout=timeout_s + 60)
    assert r.status_code == 200, r.text
    return r.json()


def look(g, sid):
    out = run(g, sid, LOOK)
    lines = [l for l in out["stdout"].splitlines() if l.startswith("@@")]
    assert out["status"] == "ok" and lines, out
    return json.loads(lines[-1][2:])


def create(g, **body):
    r = g.api("POST", "/v1/sessions", json={"timeout_s": 120, **body})
    assert r.status_code == 201, r.text
    return r.json()


def cgroup_procs(sid):
    for ctrl in ("pids", "memory", "unified"):
        for d in Path(f"/sys/fs/cgroup/{ctrl}").glob(f"**/{sid}"):
            return [int(p) for p in (d / "cgroup.procs").read_text().split()]
    return []


def cmdline(pid):
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def gone(*pids, timeout=20):
    """Whether each pid has ended (a zombie waiting for its reaper counts)
    within the timeout."""
    def ended(pid):
        try:
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")
        except OSError:
            return True
    deadline = time.monotonic() + timeout
    while not all(ended(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return all(ended(p) for p in pids)


def sandbox_processes(sid):
    """The sandbox's init (tini), the zygote's supervisor and the kernel, by
    host pid."""
    procs = cgroup_procs(sid)
    init = next(p for p in procs if cmdline(p)[:1] == [b"/usr/bin/tini"])
    forked = [p for p in procs if b"/opt/cellgate/cellgate-zygote" in cmdline(p)]
    kernel = next(p for p in forked if Path(f"/proc/{p}/status").read_text().find("NSpid:\t") >= 0
                  and len(Path(f"/proc/{p}/status").read_text().split("NSpid:")[1].split("\n")[0].split()) == 2)
    supervisor = next(p for p in forked if p != kernel)
    return init, supervisor, kernel


def seccomp_filters(pid):
    """The BPF of each of pid's seccomp filters, newest first (ptrace, as root)."""
    assert libc.ptrace(PTRACE_SEIZE, pid, None, None) == 0, os.strerror(ctypes.get_errno())
    try:
        assert libc.ptrace(PTRACE_INTERRUPT, pid, None, None) == 0
        os.waitpid(pid, getattr(os, "__WALL", 0x40000000))
        out = []
        for i in range(16):
            n = libc.ptrace(PTRACE_SECCOMP_GET_FILTER, pid, ctypes.c_void_p(i), None)
            if n < 0:
                break
            buf = ctypes.create_string_buffer(n * 8)
            assert libc.ptrace(PTRACE_SECCOMP_GET_FILTER, pid, ctypes.c_void_p(i), buf) == n
            out.append(buf.raw)
        return out
    finally:
        libc.ptrace(PTRACE_DETACH, pid, None, None)


@pytest.fixture(scope="module")
def g():
    gw = Gateway("--zygote", "on").start()
    gw.wait_for_zygote()
    yield gw
    gw.stop()
    gw.cleanup()


def test_a_forked_kernel_is_confined_as_runc_confines_a_cold_one(g):
    s = create(g, env={"KERNEL_MARK": "zygote-test"})
    sid = s["id"]
    assert s["sandbox"] == {"runtime": "runc", "platform": None, "memory_merge": False, "zygote": True}, s
    inside = look(g, sid)
    init, supervisor, kernel = sandbox_processes(sid)

    # Every namespace of the sandbox, from the host's view.
    for ns in NAMESPACES:
        assert os.readlink(f"/proc/{kernel}/ns/{ns}") == os.readlink(f"/proc/{init}/ns/{ns}"), ns
        assert os.readlink(f"/proc/{supervisor}/ns/{ns}") == os.readlink(f"/proc/{init}/ns/{ns}") or ns == "pid", ns
    # The supervisor is outside the sandbox's pid namespace: the kernel's parent is invisible to it.
    assert inside["ppid"] == 0 and 1 < inside["pid"] < 10, inside
    assert Path(f"/proc/{kernel}/cgroup").read_text() == Path(f"/proc/{init}/cgroup").read_text()
    assert Path(f"/proc/{supervisor}/cgroup").read_text() == Path(f"/proc/{init}/cgroup").read_text()

    # What runc gives the container's process: the same filter, bit for bit.
    assert seccomp_filters(kernel) == seccomp_filters(init) != []
    assert seccomp_filters(supervisor) == seccomp_filters(init)
    assert inside["seccomp"] == "2" and inside["no_new_privs"] == "1", inside
    assert set(inside["caps"].values()) == {"0000000000000000"}, inside["caps"]
    assert (inside["uid"], inside["gid"], inside["groups"]) == (1000, 1000, []), inside
    assert inside["umask"] == 0o022 and inside["core"] == [0, 0], inside
    assert inside["oom"] == "800" and inside["hostname"] == "cellgate", inside
    host = dict(l.split(":", 1) for l in Path(f"/proc/{supervisor}/status").read_text().splitlines() if ":" in l)
    assert host["CapBnd"].strip() == host["CapEff"].strip() == "0000000000000000" and host["NoNewPrivs"].strip() == "1"

    # No descriptor of the zygote's, the host's or another namespace's.
    for fd, target in inside["fds"].items():
        assert not any(target.startswith(p) for p in ("user:", "mnt:", "pid:", "net:", "ipc:", "uts:", "cgroup:",
                                                       "anon_inode:[pidfd]", "/usr", "/opt")), (fd, target)
    # Its own environment (from inside its sandbox), none of the zygote's.
    assert inside["env"]["KERNEL_MARK"] == "zygote-test", inside["env"]
    assert inside["env"]["HOME"] in ("/home/user", "/workspace") and inside["cwd"] in ("/home/user", "/workspace")
    assert "CELLGATE_MEMORY_MERGE" not in inside["env"] and "IPYTHONDIR" in inside["env"]
    g.api("DELETE", f"/v1/sessions/{sid}")


def test_two_forked_kernels_draw_their_own_randomness_and_keep_their_own_state(g):
    a, b = create(g)["id"], create(g)["id"]
    la, lb = look(g, a), look(g, b)
    assert la["random"] != lb["random"] and la["numpy"] != lb["numpy"], (la["random"], lb["random"])
    assert run(g, a, "x = 'a'")["status"] == "ok" and run(g, b, "x = 'b'")["status"] == "ok"
    assert run(g, a, "print(x)")["stdout"].strip() == "a"
    assert run(g, b, "print(x)")["stdout"].strip() == "b"
    # numpy, pandas and Matplotlib work in the forked process (a plot comes back).
    out = run(g, a, "import matplotlib.pyplot as plt, pandas as pd\nplt.plot(pd.Series([1, 3, 2]))\nplt.show()")
    assert out["status"] == "ok" and any("image/png" in r.get("data", r) for r in out["results"]), out
    for sid in (a, b):
        g.api("DELETE", f"/v1/sessions/{sid}")


def test_interrupt_death_restart_and_removal_work_as_for_a_cold_kernel(g):
    sid = create(g)["id"]
    assert run(g, sid, "open('/workspace/kept', 'w').write('1')")["status"] == "ok"
    # Interrupt: the supervisor forwards SIGINT to the kernel's group.
    started = time.monotonic()
    out = run(g, sid, "import time\ntime.sleep(60)", timeout_s=3)
    assert out["status"] in ("error", "timeout") and time.monotonic() - started < 30, out
    assert run(g, sid, "print(1 + 1)")["stdout"].strip() == "2"
    init, supervisor, kernel = sandbox_processes(sid)
    # Death: the kernel's end ends the sandbox; the gateway restarts it, from the zygote again.
    run(g, sid, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", timeout_s=10)
    deadline = time.monotonic() + 60
    while f"kernel {sid}: automatic restart done" not in g.log_text():
        assert time.monotonic() < deadline, "the killed kernel was not restarted: " + g.log_text()[-1500:]
        time.sleep(0.2)
    assert gone(init, supervisor, kernel)
    assert g.api("GET", f"/v1/sessions/{sid}").json()["sandbox"]["zygote"] is True
    assert run(g, sid, "print(open('/workspace/kept').read())")["stdout"].strip() == "1"
    # An explicit restart, then removal: nothing of the sandbox is left.
    r = g.api("POST", f"/api/kernels/{sid}/restart")
    assert r.status_code == 200, r.text
    assert run(g, sid, "print(2 + 2)")["stdout"].strip() == "4"
    assert g.api("GET", f"/v1/sessions/{sid}").json()["sandbox"]["zygote"] is True
    _, supervisor, kernel = sandbox_processes(sid)
    assert g.api("DELETE", f"/v1/sessions/{sid}").status_code in (200, 204)
    assert gone(kernel, supervisor) and cgroup_procs(sid) == []


def zygotes_of(g):
    return [int(p) for p in os.listdir("/proc") if p.isdigit()
            and cmdline(int(p))[:3] == [b"/usr/bin/python3", b"-s", b"/opt/cellgate/cellgate-zygote"]
            and int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[1]) == g.proc.pid]


def test_the_zygote_has_no_capability_and_a_read_only_view_of_the_image(g):
    zygotes = zygotes_of(g)
    assert len(zygotes) == 1, zygotes
    z = zygotes[0]
    status = dict(l.split(":", 1) for l in Path(f"/proc/{z}/status").read_text().splitlines() if ":" in l)
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert status[cap].strip() == "0000000000000000", (cap, status[cap])
    assert status["NoNewPrivs"].strip() == "1"
    for ns in ("net", "mnt", "ipc", "uts"):
        assert os.readlink(f"/proc/{z}/ns/{ns}") != os.readlink(f"/proc/self/ns/{ns}"), ns
    root = [l.split() for l in Path(f"/proc/{z}/mountinfo").read_text().splitlines() if l.split()[4] == "/"]
    assert root and "ro" in root[-1][5].split(","), root
    # Nothing of a session's reaches it: no environment of a kernel's, no connection key.
    environ = Path(f"/proc/{z}/environ").read_bytes()
    assert b"KERNEL_MARK" not in environ and b"key" not in environ.lower()


def test_a_zygote_that_ends_costs_no_session_and_is_made_again(g):
    """Killed between two creates: the next start goes cold (the launcher
    notices the broken channel, drops the half-made sandbox and starts
    again without it), and a new zygote serves the starts after."""
    before = zygotes_of(g)
    assert len(before) == 1, before
    os.kill(before[0], signal.SIGKILL)
    assert gone(before[0])
    first = create(g)
    assert first["sandbox"]["zygote"] is False, first
    assert run(g, first["id"], "print(6 * 7)")["stdout"].strip() == "42"
    g.wait_for_zygote()
    after = zygotes_of(g)
    assert len(after) == 1 and after != before, (before, after)
    s = create(g)
    assert s["sandbox"]["zygote"] is True and run(g, s["id"], "print(6 * 7)")["stdout"].strip() == "42"
    for sid in (first["id"], s["id"]):
        g.api("DELETE", f"/v1/sessions/{sid}")


def test_a_templates_kernels_fork_from_a_zygote_of_its_own_image(g):
    """A template's image gets a zygote of its own at its first session;
    the sessions after it are forked from it, on the template's layers."""
    marker = uuid.uuid4().hex
    r = g.api("POST", "/v1/templates", json={"name": "zy-" + marker[:8], "steps": [
        {"type": "RUN", "args": [f"echo {marker} > /opt/marker"]}]})
    assert r.status_code == 202, r.text
    at = r.json()["status_url"]
    wait_for(lambda: g.api("GET", at).json()["status"] in ("ready", "error"), "the build", timeout=120)
    assert g.api("GET", at).json()["status"] == "ready"
    forked = None
    try:
        for _ in range(20):
            model = create(g, template="zy-" + marker[:8])
            sid = model["id"]
            out = run(g, sid, "print(open('/opt/marker').read().strip())")
            assert out["stdout"].strip() == marker, out
            if model["sandbox"]["zygote"]:
                forked = sid
                break
            g.api("DELETE", f"/v1/sessions/{sid}")
            time.sleep(1)
        assert forked, "no session of the template was forked from a zygote"
    finally:
        if forked:
            g.api("DELETE", f"/v1/sessions/{forked}")
        g.api("DELETE", f"/v1/templates/zy-{marker[:8]}")
