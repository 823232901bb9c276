"""exec: a process run inside an existing sandbox, beside its kernel, with the
kernel's own confinement. Under each OCI runtime, through the launcher in the
CLI's own process (`cellgate-launch exec ID -- ARGV…`) and through
cellgate-launchd, whose `exec` op hands the process's descriptors to the
client (also to an unprivileged one) and keeps the connection as its handle.

The sandboxes run on this module's own state dir, workspace root, cgroup
parent and host id range, so nothing here meets another instance's sandboxes.
Where gVisor differs (an exec'd process gets no OCI seccomp filter in runsc
20221219; a signal it did not get from the handle is a plain exit code) the
test checks the documented behaviour, so that a change shows.
"""
import array
import fcntl
import json
import os
import pwd
import shutil
import signal
import socket
import struct
import subprocess
import sys
import termios
import threading
import time
import uuid
from pathlib import Path

import pytest

from support.prerequisites import BUILD, IMAGE_STORE, LAUNCH, require, runsc_refusal, sandbox_missing, tools_missing
from support.waiting import wait_for

RUNTIMES = ["runc", "runsc"]
LAUNCHD = BUILD / "bin" / "cellgate-launchd"
SHIM = BUILD / "bin" / "cellgate-exec-shim"
USER = "cellgate-test"
CGROUP_PARENT = os.environ.get("CELLGATE_EXEC_TEST_CGROUP_PARENT", "cellgate-exec-test")
UID_BASE = os.environ.get("CELLGATE_EXEC_TEST_UID_BASE", "30000000")
PIDS = 64


def _missing():
    return (sandbox_missing(LAUNCH) or tools_missing("setpriv")
            or next((f"{b} is not built" for b in (LAUNCHD, SHIM) if not b.exists()), None))


class Exec:
    """One exec over the launcher service: the connection is its handle."""

    def __init__(self, socket_path, sandbox_id, process):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(60)
        self.sock.connect(str(socket_path))
        self.sock.sendall(json.dumps({"op": "exec", "id": sandbox_id, "process": process}).encode() + b"\n")
        data, fds = b"", []
        while b"\n" not in data:
            chunk, got, _, _ = socket.recv_fds(self.sock, 65536, 8)
            if not chunk:
                break
            data += chunk
            fds += got
        line, _, self.rest = data.partition(b"\n")
        self.reply = json.loads(line)
        self.fds = dict(zip(self.reply["result"]["fds"], fds)) if self.reply.get("ok") else {}

    def write(self, data, name="stdin"):
        view = memoryview(data)
        while view:
            view = view[os.write(self.fds[name], view):]

    def close_stdin(self):
        os.close(self.fds.pop("stdin"))

    def read_all(self, name="stdout"):
        out = b""
        while chunk := os.read(self.fds[name], 65536):
            out += chunk
        return out

    def read_pty_until(self, needle, timeout=20):
        out = b""
        end = time.monotonic() + timeout
        while needle not in out and time.monotonic() < end:
            try:
                os.set_blocking(self.fds["pty"], False)
                out += os.read(self.fds["pty"], 65536)
            except BlockingIOError:
                time.sleep(0.02)
            except OSError:  # EIO: the terminal's other side is gone
                break
        return out

    def signal(self, name):
        self.sock.sendall(json.dumps({"signal": name}).encode() + b"\n")

    def exit(self, timeout=30):
        """The final line, or None when the service closed without one."""
        self.sock.settimeout(timeout)
        data = self.rest
        while b"\n" not in data:
            chunk = self.sock.recv(4096)
            if not chunk:
                return None
            data += chunk
        return json.loads(data.partition(b"\n")[0])["exit"]

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}
        self.sock.close()


class Service:
    """cellgate-launchd as root for USER, on this module's private dirs."""

    def __init__(self):
        try:
            self.user = pwd.getpwnam(USER)
        except KeyError:
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                           check=True)
            self.user = pwd.getpwnam(USER)
        self.base = Path("/run") / f"cellgate-exec-{uuid.uuid4().hex[:8]}"
        self.base.mkdir(mode=0o711)
        self.socket = self.base / "launcher.sock"
        self.node = ["--state-dir", str(self.base / "state"), "--image-store", str(IMAGE_STORE),
                     "--workspace-root", str(self.base / "workspaces"), "--cgroup-parent", CGROUP_PARENT,
                     "--uid-range-start", UID_BASE]
        self.log_path = self.base / "launchd.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen([str(LAUNCHD), "--socket", str(self.socket), "--client-user", USER, *self.node],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        wait_for(self.socket.exists, what="the launcher socket")

    def call(self, request):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.socket))
            s.sendall(json.dumps(request).encode() + b"\n")
            s.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return json.loads(data)

    def create(self, runtime):
        r = self.call({"op": "create", "spec": {"runtime": runtime, "limits": {"pids": PIDS}}})
        assert r["ok"], r
        return r["result"]["id"]

    def remove(self, sandbox_id):
        assert self.call({"op": "remove", "id": sandbox_id})["ok"]

    def exec(self, sandbox_id, argv, **process):
        return Exec(self.socket, sandbox_id, {"argv": argv, **process})

    def run(self, sandbox_id, argv, stdin=None, **process):
        """Runs to the end; returns (stdout, stderr, exit)."""
        e = self.exec(sandbox_id, argv, stdin=stdin is not None, **process)
        assert e.reply["ok"], e.reply
        def feed():
            e.write(stdin)
            e.close_stdin()

        # Fed from a thread: a process that writes as it reads fills its
        # stdout pipe while its stdin is still being written.
        writer = threading.Thread(target=feed) if stdin is not None else None
        try:
            if writer:
                writer.start()
            out = e.read_all("stdout").decode()
            return out, e.read_all("stderr").decode(), e.exit()
        finally:
            if writer:
                writer.join(timeout=30)
            e.close()

    def cli(self, *args, input=None):
        return subprocess.run([str(LAUNCH), *self.node, *args], capture_output=True, text=True, input=input,
                              timeout=120)

    def close(self):
        for s in self.call({"op": "list"}).get("result", []):
            self.call({"op": "remove", "id": s["id"]})
        self.proc.terminate()
        self.proc.wait(timeout=60)
        self.log.close()
        self.cli("reap", "--workspaces")
        mounts = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout.split()
        for target in sorted((t for t in mounts if t.startswith(str(self.base))), reverse=True):
            subprocess.run(["umount", "-l", target])
        keep = Path(os.environ.get("CELLGATE_TEST_LOGS", "/tmp/cellgate-test-logs"))
        keep.mkdir(parents=True, exist_ok=True)
        shutil.copy(self.log_path, keep / f"{self.base.name}.log")
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture(scope="module")
def service():
    require("exec tests", _missing())
    s = Service()
    yield s
    s.close()


@pytest.fixture(scope="module", params=RUNTIMES)
def box(request, service):
    """(runtime, sandbox id): one sandbox per runtime for the module."""
    if request.param == "runsc":
        require("runsc exec tests", runsc_refusal())
    sandbox_id = service.create(request.param)
    yield request.param, sandbox_id
    service.remove(sandbox_id)


def processes(service, sandbox_id):
    """The sandbox's processes as its own `ps` shows them."""
    out, _, _ = service.run(sandbox_id, ["ps", "-eo", "args="])
    return [line.strip() for line in out.splitlines()]


def test_the_cli_runs_a_command_with_its_output_code_cwd_env_and_stdin(service, box):
    _, sid = box
    r = service.cli("exec", sid, "--", "echo", "hi")
    assert (r.returncode, r.stdout) == (0, "hi\n"), r.stderr
    r = service.cli("exec", sid, "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")
    r = service.cli("exec", sid, "--cwd", "/tmp", "--env", "FOO=bar baz", "--", "sh", "-c",
                    'pwd; echo "$FOO"; echo "$HOME"; echo "$PATH"')
    assert r.stdout == "/tmp\nbar baz\n/tmp\n/usr/local/bin:/usr/bin:/bin\n", r.stderr
    r = service.cli("exec", sid, "--stdin", "--", "head", "-n1", input="first\nsecond\n")
    assert (r.returncode, r.stdout) == (0, "first\n"), r.stderr
    r = service.cli("exec", sid, "--", "no-such-program")
    assert r.returncode == 1 and "exec-start" in r.stderr and "no-such-program" in r.stderr, r.stderr


def test_the_service_runs_a_command_and_reports_its_exit(service, box):
    _, sid = box
    assert service.run(sid, ["echo", "hi"]) == ("hi\n", "", {"code": 0, "signal": 0})
    assert service.run(sid, ["sh", "-c", "echo oops >&2; exit 3"]) == ("", "oops\n", {"code": 3, "signal": 0})
    out, _, _ = service.run(sid, ["sh", "-c", 'pwd; echo "$A|$B|$LANG"'], env={"A": "1", "B": "two words", "LANG": "C"})
    assert out == "/workspace\n1|two words|C\n"
    out, _, _ = service.run(sid, ["pwd"], cwd="/tmp")
    assert out == "/tmp\n"


def test_a_bad_request_or_a_missing_sandbox_is_refused_before_anything_runs(service, box):
    _, sid = box
    for process, fragment in [({"argv": []}, "argv"), ({"argv": ["id"], "cwd": "/tmp/../etc"}, ".."),
                              ({"argv": ["id"], "env": {"CELLGATE_X": "1"}}, "reserved"),
                              ({"argv": ["id"], "user": 0}, "unknown field")]:
        r = service.call({"op": "exec", "id": sid, "process": process})
        assert r["ok"] is False and fragment in r["error"]["message"], (process, r)
    r = service.call({"op": "exec", "id": "no-such-sandbox", "process": {"argv": ["id"]}})
    assert r["ok"] is False and "no sandbox" in r["error"]["message"], r


def test_stdin_reaches_the_process_and_its_end_is_an_eof(service, box):
    _, sid = box
    assert service.run(sid, ["head", "-n1"], stdin=b"first\nsecond\n") == ("first\n", "", {"code": 0, "signal": 0})
    assert service.run(sid, ["cat"], stdin=b"x" * 200_000)[0] == "x" * 200_000
    # Without a stdin pipe the process reads /dev/null.
    assert service.run(sid, ["cat"]) == ("", "", {"code": 0, "signal": 0})


def test_the_process_has_the_kernels_uid_no_capabilities_and_no_new_privileges(service, box):
    runtime, sid = box
    out, _, _ = service.run(sid, ["python3", "-c", (
        "import ctypes, os\n"
        "print(os.getuid(), os.getgid(), os.getgroups())\n"
        "st = dict(l.split(':', 1) for l in open('/proc/self/status').read().splitlines() if ':' in l)\n"
        "print(*[int(st[k], 16) for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd')])\n"
        "print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))\n"  # PR_GET_NO_NEW_PRIVS
        "print(st['Seccomp'].strip())\n"
        "import resource\n"
        "print(*[resource.getrlimit(getattr(resource, n)) for n in ('RLIMIT_NOFILE', 'RLIMIT_CORE')])\n")])
    ids, caps, nnp, seccomp, limits = out.splitlines()
    assert ids == "1000 1000 []"  # additionalGids: none, as the kernel
    assert caps == "0 0 0 0"
    assert nnp == "1"
    assert limits == "(4096, 4096) (0, 0)"
    # runc applies the sandbox's seccomp profile to the exec'd process; runsc
    # 20221219 does not (SECURITY.md, "exec"): the documented gap, checked so
    # that a runsc that closes it shows up here.
    assert seccomp == ("2" if runtime == "runc" else "0")
    out, _, _ = service.run(sid, ["python3", "-c", (
        "import ctypes, errno\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "r = libc.syscall(165, b'none', b'/tmp', b'tmpfs', 0, None)\n"  # mount: no capability either way
        "print(r, errno.errorcode[ctypes.get_errno()])\n")])
    assert out == "-1 EPERM\n"


def test_the_process_has_no_network_and_sees_no_host_process(service, box):
    _, sid = box
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.settimeout(0.5)
    try:
        port = listener.getsockname()[1]
        out, _, _ = service.run(sid, ["python3", "-c", (
            "import socket, errno\n"
            "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]))\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')\n"
            "except OSError as e:\n"
            "    print(errno.errorcode.get(e.errno, str(e)))\n")])
        interfaces, connect = out.splitlines()
        assert interfaces == "['lo']"
        assert connect == "ECONNREFUSED"  # the sandbox's own loopback: nothing listens there
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()
    seen = processes(service, sid)
    assert not any(str(LAUNCHD) in p or "pytest" in p or "cellgate-exec-shim" in p for p in seen), seen
    assert any("cellgate-kernel" in p for p in seen), seen
    out, _, _ = service.run(sid, ["sh", "-c", f"kill -0 {os.getpid()} 2>/dev/null && echo reached || echo ESRCH"])
    assert out == "ESRCH\n"


def test_the_process_counts_against_the_sandboxs_pids_limit(service, box):
    runtime, sid = box
    # Forks until the limit says no (the cgroup under runc, RLIMIT_NPROC in
    # gVisor's sentry under runsc), then cleans up after itself.
    out, err, ex = service.run(sid, ["python3", "-c", (
        "import os, signal, errno\nkids = []\n"
        "try:\n"
        f"    for _ in range({PIDS} + 8):\n"
        "        pid = os.fork()\n"
        "        if pid == 0:\n"
        "            signal.pause(); os._exit(0)\n"
        "        kids.append(pid)\n"
        "    print('no limit', len(kids))\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno], len(kids))\n"
        "for k in kids: os.kill(k, 9)\n"
        "for k in kids: os.waitpid(k, 0)\n")])
    reason, count = out.split()
    assert ex == {"code": 0, "signal": 0}, err
    assert reason == "EAGAIN" and 0 < int(count) < PIDS, out
    if runtime == "runc":
        # On the host, a running exec is a task of the sandbox's own cgroup.
        e = service.exec(sid, ["sleep", "77777"])
        try:
            procs = Path(f"/sys/fs/cgroup/pids/{CGROUP_PARENT}/{sid}/cgroup.procs")
            if not procs.exists():  # cgroup v2
                procs = Path(f"/sys/fs/cgroup/{CGROUP_PARENT}/{sid}/cgroup.procs")
            wait_for(lambda: any(Path(f"/proc/{pid}/cmdline").read_bytes() == b"sleep\x0077777\x00"
                                 for pid in procs.read_text().split() if Path(f"/proc/{pid}").exists()),
                     what="the exec's process in the sandbox's cgroup")
        finally:
            e.close()


def test_signals_through_the_handle_end_the_process_and_are_reported(service, box):
    _, sid = box
    for name, number in [("SIGKILL", 9), ("SIGTERM", 15), ("SIGINT", 2)]:
        e = service.exec(sid, ["sleep", "1000"])
        try:
            assert e.reply["ok"], e.reply
            e.signal(name)
            assert e.exit() == {"code": 128 + number, "signal": number}
        finally:
            e.close()
    # A process that traps the signal exits as it likes: that is an exit code.
    e = service.exec(sid, ["sh", "-c", "trap 'exit 5' TERM; echo ready; while :; do sleep 0.1; done"])
    try:
        assert os.read(e.fds["stdout"], 100) == b"ready\n"
        e.signal("SIGTERM")
        assert e.exit() == {"code": 5, "signal": 0}
    finally:
        e.close()


def test_a_signal_outside_the_set_ends_the_handle_and_the_process(service, box):
    _, sid = box
    e = service.exec(sid, ["sh", "-c", "exec sleep 1002"])
    try:
        e.sock.sendall(b'{"signal":"SIGSTOP"}\n')
        assert e.exit() is None  # closed without an exit line
    finally:
        e.close()
    wait_for(lambda: not any("sleep 1002" in p for p in processes(service, sid)), what="the process to go")


def test_closing_the_handle_kills_the_process(service, box):
    _, sid = box
    e = service.exec(sid, ["sh", "-c", "exec sleep 1001"])
    assert e.reply["ok"], e.reply
    assert any("sleep 1001" in p for p in processes(service, sid))
    e.close()
    wait_for(lambda: not any("sleep 1001" in p for p in processes(service, sid)), what="the process to go")


def test_removing_the_sandbox_kills_its_running_execs(service, box):
    runtime, _ = box
    sid = service.create(runtime)
    e = service.exec(sid, ["sleep", "1000"])
    try:
        assert e.reply["ok"], e.reply
        service.remove(sid)
        assert e.exit() == {"code": 137, "signal": 9}
    finally:
        e.close()
    assert sid not in {s["id"] for s in service.call({"op": "list"})["result"]}


def test_a_pty_exec_is_a_terminal_of_the_asked_size_that_follows_resizes(service, box):
    _, sid = box
    script = ("test -t 0 && test -t 1 && echo isatty; stty size; trap 'stty size' WINCH; trap 'echo INT; exit 7' INT;"
              " echo ready; while :; do sleep 0.1; done")
    e = service.exec(sid, ["sh", "-c", script], tty=True, rows=33, cols=111)
    try:
        assert e.reply["ok"] and list(e.fds) == ["pty"], e.reply
        out = e.read_pty_until(b"ready")
        assert b"isatty\r\n33 111\r\n" in out, out
        fcntl.ioctl(e.fds["pty"], termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        assert b"40 120" in e.read_pty_until(b"40 120")
        os.write(e.fds["pty"], b"\x03")  # ^C, through the terminal's own line discipline
        assert b"INT" in e.read_pty_until(b"INT")
        assert e.exit() == {"code": 7, "signal": 0}
    finally:
        e.close()
    e = service.exec(sid, ["sh", "-c", 'echo "term=$TERM"'], tty=True)
    try:
        assert b"term=xterm-256color" in e.read_pty_until(b"term=xterm-256color\r\n")
        assert e.exit() == {"code": 0, "signal": 0}
    finally:
        e.close()


CLIENT = r"""
import json, os, socket, struct, sys, fcntl, termios, time
sock_path, sid, tty = sys.argv[1], sys.argv[2], sys.argv[3] == "tty"
s = socket.socket(socket.AF_UNIX)
s.connect(sock_path)
argv = ["sh", "-c", "stty size" if tty else 'read x; echo "got $x"; echo err >&2; exit 4']
s.sendall(json.dumps({"op": "exec", "id": sid, "process": {"argv": argv, "tty": tty, "stdin": not tty,
                                                           "rows": 12, "cols": 34}}).encode() + b"\n")
data, fds = b"", []
while b"\n" not in data:
    chunk, got, _, _ = socket.recv_fds(s, 65536, 8)
    data, fds = data + chunk, fds + got
reply = json.loads(data.partition(b"\n")[0])
named = dict(zip(reply["result"]["fds"], fds))
result = {"uid": os.getuid(), "fds": sorted(named)}
if tty:
    out = b""
    while b"12 34" not in out:
        out += os.read(named["pty"], 1024)
    result["pty"] = out.decode()
else:
    os.write(named["stdin"], b"hello\n")
    os.close(named["stdin"])
    result["stdout"] = os.read(named["stdout"], 1024).decode()
    result["stderr"] = os.read(named["stderr"], 1024).decode()
rest = data.partition(b"\n")[2]
while b"\n" not in rest:
    rest += s.recv(1024)
result["exit"] = json.loads(rest)["exit"]
print(json.dumps(result))
"""


def test_an_unprivileged_client_reads_and_writes_the_descriptors_itself(service, box):
    _, sid = box
    as_user = ["setpriv", f"--reuid={service.user.pw_uid}", f"--regid={service.user.pw_gid}", "--clear-groups",
               "--no-new-privs", "--", sys.executable, "-c", CLIENT, str(service.socket), sid]
    r = subprocess.run([*as_user, "pipes"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got == {"uid": service.user.pw_uid, "fds": ["stderr", "stdin", "stdout"], "stdout": "got hello\n",
                   "stderr": "err\n", "exit": {"code": 4, "signal": 0}}
    r = subprocess.run([*as_user, "tty"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["fds"] == ["pty"] and "12 34" in got["pty"] and got["exit"] == {"code": 0, "signal": 0}, got


def test_at_most_16_execs_run_in_one_sandbox(service, box):
    _, sid = box
    held = []
    try:
        for _ in range(16):
            held.append(service.exec(sid, ["sleep", "1000"]))
            assert held[-1].reply["ok"], held[-1].reply
        r = service.call({"op": "exec", "id": sid, "process": {"argv": ["true"]}})
        assert r["ok"] is False and r["error"]["step"] == "exec-limit", r
        assert "at most 16" in r["error"]["message"]
        # A handle that is dropped frees its place (once the service has seen it close).
        held.pop().close()

        def one_more():
            e = service.exec(sid, ["true"])
            e.close()
            return e.reply["ok"]

        wait_for(one_more, what="the place to be free")
    finally:
        for e in held:
            e.close()
