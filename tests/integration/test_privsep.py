"""Privilege separation: the gateway runs as an unprivileged user with no
capabilities; cellgate-launchd (root) starts sandboxes for it over a unix
socket with a closed request schema. Real service, real gateway, real runc
sandboxes and ipykernels."""
import json
import os
import pwd
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
import requests

from support.gateway import KernelChannel
from support.prerequisites import BUILD, IMAGE_STORE

USER = "cellgate-test"
LAUNCHD = BUILD / "bin" / "cellgate-launchd"
GATEWAY = BUILD / "bin" / "cellgate"


def ensure_user():
    try:
        return pwd.getpwnam(USER)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER], check=True)
        return pwd.getpwnam(USER)


def wait_for(predicate, timeout=30, what="condition"):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


class Split:
    """cellgate-launchd as root + the gateway as USER, on private dirs."""

    def __init__(self):
        self.user = ensure_user()
        self.base = Path("/run") / f"cellgate-ps-{uuid.uuid4().hex[:8]}"
        self.base.mkdir(mode=0o711)
        self.socket = self.base / "launcher.sock"
        self.state = self.base / "state"
        self.workspaces = self.base / "workspaces"
        # The gateway's own files: its database, checkpoints, port file.
        self.gw_dir = self.base / "gateway"
        self.gw_dir.mkdir(mode=0o700)
        os.chown(self.gw_dir, self.user.pw_uid, self.user.pw_gid)
        # The binary where the user can run it (a clone may sit in /root).
        bin_dir = self.base / "bin"
        bin_dir.mkdir(mode=0o755)
        self.gateway_bin = bin_dir / "cellgate"
        shutil.copy2(GATEWAY, self.gateway_bin)
        self.token = "ps-" + uuid.uuid4().hex
        self.launchd_log = open(self.base / "launchd.log", "wb")
        self.gateway_log_path = self.base / "gateway.log"
        self.start_launchd()
        # A second kernelspec under gVisor, when runsc is here: its relay
        # sockets must be reachable by the unprivileged gateway too.
        specs = {"python3": {}}
        if shutil.which("runsc"):
            specs["python3-gvisor"] = {"display_name": "Python 3 (gVisor)", "runtime": "runsc"}
        self.config = self.base / "config.json"
        self.config.write_text(json.dumps({"kernelspecs": specs}))
        os.chmod(self.config, 0o644)
        self.gateway_log = open(self.gateway_log_path, "wb")
        port_file = self.gw_dir / "port"
        self.gateway = subprocess.Popen(
            ["setpriv", f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--clear-groups",
             "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all", "--",
             str(self.gateway_bin), "--ip", "127.0.0.1", "--port", "0", "--port-file", str(port_file),
             "--token", self.token, "--launcher-socket", str(self.socket), "--state-dir", str(self.gw_dir),
             "--image-store", str(IMAGE_STORE), "--pool-size", "0", "--config", str(self.config)],
            stdout=self.gateway_log, stderr=subprocess.STDOUT, env={"PATH": "/usr/bin:/bin"})
        wait_for(lambda: port_file.exists() and port_file.read_text().strip() or self.gateway.poll() is not None,
                 what="the gateway's port")
        assert self.gateway.poll() is None, self.log()
        self.port = int(port_file.read_text())
        self.url = f"http://127.0.0.1:{self.port}"
        self.ws_url = f"ws://127.0.0.1:{self.port}"

    def start_launchd(self):
        self.launchd = subprocess.Popen(
            [str(LAUNCHD), "--socket", str(self.socket), "--client-user", USER, "--state-dir", str(self.state),
             "--image-store", str(IMAGE_STORE), "--workspace-root", str(self.workspaces)],
            stdout=self.launchd_log, stderr=subprocess.STDOUT)
        wait_for(self.socket.exists, what="the launcher socket")

    def stop_launchd(self):
        self.launchd.terminate()
        self.launchd.wait(timeout=60)
        wait_for(lambda: not self.socket.exists(), what="the launcher socket to go")

    def log(self):
        return (self.gateway_log_path.read_text(errors="replace") + "\n--- launchd ---\n" +
                (self.base / "launchd.log").read_text(errors="replace"))

    def api(self, method, path, **kw):
        return requests.request(method, self.url + path, headers={"Authorization": f"token {self.token}"},
                                timeout=kw.pop("timeout", 120), **kw)

    def raw(self, payload: bytes):
        """One request straight to the service (as root, which it also serves)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.socket))
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return json.loads(data)

    def sandboxes(self):
        return {s["id"] for s in self.raw(b'{"op":"list"}\n')["result"]}

    def close(self):
        for proc in (self.gateway, self.launchd):
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.gateway_log.close()
        self.launchd_log.close()
        launch = BUILD / "bin" / "cellgate-launch"
        base = ["--state-dir", str(self.state), "--image-store", str(IMAGE_STORE), "--workspace-root",
                str(self.workspaces)]
        out = subprocess.run([str(launch), *base, "ps", "--json"], capture_output=True, text=True)
        for s in json.loads(out.stdout or "[]"):
            subprocess.run([str(launch), *base, "rm", s["id"]], capture_output=True)
        mounts = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout.split()
        for target in sorted((t for t in mounts if t.startswith(str(self.base))), reverse=True):
            subprocess.run(["umount", "-l", target])
        subprocess.run([str(launch), *base, "reap", "--workspaces"], capture_output=True)
        keep = Path(os.environ.get("CELLGATE_TEST_LOGS", "/tmp/cellgate-test-logs"))
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{self.base.name}.log").write_text(self.log())
        subprocess.run(["rm", "-rf", str(self.base)])


@pytest.fixture(scope="module")
def split():
    s = Split()
    yield s
    s.close()


def proc_status(pid):
    return dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)


def test_the_gateway_runs_unprivileged(split):
    st = proc_status(split.gateway.pid)
    uid = str(split.user.pw_uid)
    assert st["Uid"].split() == [uid] * 4 and st["Gid"].split()[0] == str(split.user.pw_gid)
    for caps in ("CapEff", "CapPrm", "CapBnd", "CapAmb", "CapInh"):
        assert int(st[caps].strip(), 16) == 0, (caps, st[caps])
    assert st["NoNewPrivs"].strip() == "1"
    assert "sandboxes through the launcher service" in split.log()


def test_sessions_run_code_and_move_files_through_the_service(split):
    s = split.api("POST", "/v1/sessions").json()
    try:
        r = split.api("POST", f"/v1/sessions/{s['id']}/execute",
                      json={"code": "import os\nopen('made.txt', 'w').write('by the kernel')\nprint(os.getuid())"}).json()
        assert r["status"] == "ok", r
        assert r["stdout"] == "1000\n"
        # The cell's record: the cgroup's CPU time and memory peak, read and reset through the service.
        assert r["usage"]["cpu_s"] is not None and r["usage"]["peak_memory_bytes"] > 0, r["usage"]
        # The unprivileged gateway writes into the workspace; on disk the file is the kernel's.
        payload = os.urandom(300_000)
        assert split.api("PUT", f"/v1/sessions/{s['id']}/files/sub/up.bin", data=payload).status_code in (200, 201)
        r = split.api("POST", f"/v1/sessions/{s['id']}/execute", json={
            "code": "import os\nst = os.stat('sub/up.bin')\nprint(st.st_uid, st.st_gid, os.path.getsize('sub/up.bin'))\n"
                    "open('sub/up.bin', 'ab').write(b'!')"}).json()
        assert r["stdout"] == f"1000 1000 {len(payload)}\n", r
        assert split.api("GET", f"/v1/sessions/{s['id']}/files/sub/up.bin").content == payload + b"!"
        assert split.api("GET", f"/v1/sessions/{s['id']}/files/made.txt").content == b"by the kernel"
        names = {e["name"] for e in split.api("GET", f"/v1/sessions/{s['id']}/files").json()["entries"]}
        assert {"made.txt", "sub"} <= names
        # Jupyter's surface too: contents and the kernel WebSocket.
        c = split.api("GET", f"/api/contents/{s['id']}/made.txt?content=1")
        assert c.status_code == 200 and c.json()["content"] == "by the kernel", c.text
        ch = KernelChannel(split, s["id"])
        assert ch.execute("print(6 * 7)")["stdout"] == "42\n"
        ch.close()
    finally:
        assert split.api("DELETE", f"/v1/sessions/{s['id']}").status_code == 204
    wait_for(lambda: s["id"] not in split.sandboxes(), what="the sandbox to go")
    assert str(split.state / "views" / s["id"]) not in Path("/proc/self/mountinfo").read_text()


@pytest.mark.skipif(not shutil.which("runsc"), reason="gVisor's runsc is not installed")
def test_a_gvisor_session_runs_through_the_service(split):
    """Under runsc the kernel is reached through a relay whose sockets the
    launcher makes: the unprivileged gateway must be able to use them."""
    r = split.api("POST", "/v1/sessions", json={"kernel": "python3-gvisor"})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    # The service's launcher chose the platform; the gateway reports it.
    assert r.json()["sandbox"]["runtime"] == "runsc" and r.json()["sandbox"]["platform"] in ("ptrace", "kvm"), r.json()
    try:
        r = split.api("POST", f"/v1/sessions/{sid}/execute",
                      json={"code": "import platform\nopen('g.txt', 'w').write('gvisor')\nprint(6 * 7)"}).json()
        assert r["status"] == "ok" and r["stdout"] == "42\n", r
        assert split.api("GET", f"/v1/sessions/{sid}/files/g.txt").content == b"gvisor"
        ch = KernelChannel(split, sid)
        assert ch.execute("print('ws')")["stdout"] == "ws\n"
        ch.close()
    finally:
        assert split.api("DELETE", f"/v1/sessions/{sid}").status_code == 204
    wait_for(lambda: sid not in split.sandboxes(), what="the sandbox to go")


@pytest.mark.parametrize("kernel", ["python3", "python3-gvisor"])
def test_pause_and_resume_go_through_the_service(split, kernel):
    """checkpoint and restore are launchd ops: the unprivileged gateway pauses
    a session, reads and writes its files while it is paused (the workspace
    view stays), and resumes it (under runsc with the kernel's memory)."""
    if kernel == "python3-gvisor" and not shutil.which("runsc"):
        pytest.skip("gVisor's runsc is not installed")
    r = split.api("POST", "/v1/sessions", json={"kernel": kernel})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    try:
        r = split.api("POST", f"/v1/sessions/{sid}/execute",
                      json={"code": "kept = 6 * 7\nopen('p.txt', 'w').write('before')"}).json()
        assert r["status"] == "ok", r
        m = split.api("POST", f"/v1/sessions/{sid}/pause", timeout=180).json()
        memory = kernel == "python3-gvisor"
        assert m["state"] == "paused" and m["pause"]["mode"] == ("memory" if memory else "files"), m
        assert split.api("GET", f"/v1/sessions/{sid}/files/p.txt").content == b"before"
        assert split.api("PUT", f"/v1/sessions/{sid}/files/q.txt", data=b"while paused").status_code in (200, 201)
        m = split.api("POST", f"/v1/sessions/{sid}/resume", timeout=180).json()
        assert m["pause"]["resumed_from"] == ("memory" if memory else "files"), m
        r = split.api("POST", f"/v1/sessions/{sid}/execute",
                      json={"code": "print(open('q.txt').read(), globals().get('kept'))"}).json()
        assert r["stdout"] == f"while paused {42 if memory else None}\n", r
    finally:
        assert split.api("DELETE", f"/v1/sessions/{sid}").status_code == 204
    wait_for(lambda: sid not in split.sandboxes(), what="the sandbox to go")


def test_a_fork_goes_through_the_service(split):
    """snapshot and a start from it are launchd ops: the unprivileged gateway
    forks a session, and the child's copy of the files is its own (readable
    and writable by the child's kernel and through the gateway's view)."""
    r = split.api("POST", "/v1/sessions", json={})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    kids = []
    try:
        r = split.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "open('f.txt', 'w').write('from parent')"}).json()
        assert r["status"] == "ok", r
        r = split.api("POST", f"/v1/sessions/{sid}/fork", json={"count": 1}, timeout=300)
        assert r.status_code == 201, r.text
        kids = [c["id"] for c in r.json()["sessions"]]
        kid = kids[0]
        assert split.api("GET", f"/v1/sessions/{kid}/files/f.txt").content == b"from parent"
        assert split.api("PUT", f"/v1/sessions/{kid}/files/g.txt", data=b"child only").status_code in (200, 201)
        r = split.api("POST", f"/v1/sessions/{kid}/execute",
                      json={"code": "open('f.txt', 'a').write(' + child'); print(open('f.txt').read(), open('g.txt').read())"}).json()
        assert r["stdout"] == "from parent + child child only\n", r
        assert split.api("GET", f"/v1/sessions/{sid}/files/f.txt").content == b"from parent"
        assert split.api("GET", f"/v1/sessions/{sid}/files/g.txt").status_code == 404
    finally:
        for k in [sid, *kids]:
            split.api("DELETE", f"/v1/sessions/{k}")
        for s in split.api("GET", "/v1/snapshots").json()["snapshots"]:
            split.api("DELETE", f"/v1/snapshots/{s['id']}")


def test_volumes_go_through_the_service(split):
    """create_volume, volume_usage and remove_volume are launchd ops: the
    unprivileged gateway makes a volume, a session writes it, a later one
    reads it, and its use is reported."""
    r = split.api("POST", "/v1/volumes", json={"name": "pv", "size_bytes": 16 << 20})
    assert r.status_code == 201, r.text
    sids = []
    try:
        for code in ("open('/volumes/pv/x.txt', 'w').write('y' * 3_000_000)",
                     "print(len(open('/volumes/pv/x.txt').read()))"):
            r = split.api("POST", "/v1/sessions", json={"volumes": [{"name": "pv"}]})
            assert r.status_code == 201, r.text
            sids.append(r.json()["id"])
            out = split.api("POST", f"/v1/sessions/{sids[-1]}/execute", json={"code": code}).json()
            assert out["status"] == "ok", out
            assert split.api("DELETE", f"/v1/sessions/{sids[-1]}").status_code == 204
        assert out["stdout"] == "3000000\n"
        assert split.api("GET", "/v1/volumes/pv").json()["used_bytes"] >= 3_000_000
    finally:
        for sid in sids:
            split.api("DELETE", f"/v1/sessions/{sid}")
        assert split.api("DELETE", "/v1/volumes/pv").status_code == 204


def test_a_template_builds_and_runs_through_the_service(split):
    """build_step and remove_layer are launchd ops: the unprivileged gateway
    builds a template's layer, a session runs on it, deleting it removes it."""
    r = split.api("POST", "/v1/templates", json={"name": "svc", "steps": [
        {"type": "RUN", "args": [f"echo made-by-launchd > /opt/marker; id -u; : {uuid.uuid4()}"]}]})
    assert r.status_code == 202, r.text
    at = r.json()["status_url"]
    wait_for(lambda: split.api("GET", at).json()["status"] in ("ready", "error"), timeout=120, what="the build")
    b = split.api("GET", at).json()
    assert b["status"] == "ready", b
    assert "0" in b["logs"], b["logs"]  # root inside its user namespace
    layer = split.api("GET", "/v1/templates/svc").json()["image"][2:]
    assert (IMAGE_STORE / ".layers" / layer / ".complete").exists()
    r = split.api("POST", "/v1/sessions", json={"template": "svc"})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    try:
        out = split.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print(open('/opt/marker').read())"}).json()
        assert out["stdout"] == "made-by-launchd\n\n", out
    finally:
        assert split.api("DELETE", f"/v1/sessions/{sid}").status_code == 204
    assert split.api("DELETE", "/v1/templates/svc").status_code == 204
    # Removed once no session runs on it (the last one's end reclaims it).
    wait_for(lambda: not (IMAGE_STORE / ".layers" / layer).exists(), timeout=30, what="the layer to go")


@pytest.mark.parametrize("payload, expect", [
    (b'{"op":"spawn","cmd":"id"}\n', "unknown op"),
    (b'{"op":"exec","cmd":"id"}\n', "takes no field"),
    (b'{"op":"list","all":true}\n', "takes no field"),
    (b'{"op":"create","spec":{"image":"/"}}\n', "image"),
    (b'{"op":"create","spec":{"uid":0}}\n', "uid"),
    (b'{"op":"create","spec":{"workspace_dir":"/etc"}}\n', "workspace_dir"),
    (b'{"op":"create","spec":{"mounts":[{"source":"/"}]}}\n', "mounts"),
    (b'{"op":"create","spec":{"env":{"LD_PRELOAD":"/tmp/x.so"}}}\n', "LD_PRELOAD"),
    (b'{"op":"signal","id":"x","signal":"SIGSTOP"}\n', "signal"),
    (b'{"op":"remove","id":"../../etc"}\n', "sandbox id"),
    (b'{"op":"set_cpu_shares","id":"a","shares":1}\n', "shares"),
    (b'{"op":"build_step","step":{"layer":"zz","parent":"python","argv":["true"]}}\n', "layer id"),
    (b'{"op":"build_step","step":{"layer":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","parent":"/etc","argv":["true"]}}\n', "not a path"),
    (b'{"op":"build_step","step":{"layer":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","parent":"python","argv":["true"],"mounts":[]}}\n', "no field"),
    (b'{"op":"build_step","step":{"layer":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","parent":"python","argv":[]}}\n', "1 to 256"),
    (b'{"op":"build_step","step":{"layer":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","parent":"l-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb","argv":["true"]}}\n', "no layer"),
    (b'{"op":"remove_layer","layer":"../../etc"}\n', "layer id"),
    # A registry image's pull: a reference is host/repository[:tag], never an option or another transport.
    (b'{"op":"import_image","import":{"layer":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","reference":"--src-creds=a:b"}}\n', "not an image reference"),
    (b'{"op":"import_image","import":{"layer":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","reference":"dir:/etc"}}\n', "not an image reference"),
    (b'{"op":"import_image","import":{"layer":"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","reference":"127.0.0.1:5000/x","creds":"a"}}\n', "no field"),
    (b'{"op":"import_image","import":{"layer":"../x","reference":"127.0.0.1:5000/x"}}\n', "layer id"),
    (b'not json at all\n', "one JSON object"),
    (b'', "one JSON object"),
])
def test_the_service_refuses_anything_outside_its_schema(split, payload, expect):
    reply = split.raw(payload)
    assert reply["ok"] is False, reply
    assert expect in reply["error"]["message"], reply
    # …and keeps serving.
    assert split.raw(b'{"op":"list"}\n')["ok"] is True


def test_only_the_gateways_user_and_root_reach_the_service(split):
    st = split.socket.stat()
    assert oct(st.st_mode & 0o777) == "0o660" and st.st_uid == 0 and st.st_gid == split.user.pw_gid
    probe = ("import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
             "try:\n s.connect(sys.argv[1])\nexcept PermissionError:\n print('denied')\nelse:\n print('connected')")
    r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "/usr/bin/python3", "-c",
                        probe, str(split.socket)], capture_output=True, text=True)
    assert r.stdout.strip() == "denied", r.stdout + r.stderr


def test_a_sandbox_the_gateway_did_not_ask_for_is_not_reachable_by_it(split):
    """The gateway user can use the sockets and the view of its own sandboxes;
    the service's state (connection files, runc state) stays root's."""
    s = split.api("POST", "/v1/sessions").json()
    try:
        probe = ("import os,sys\nfor p in sys.argv[1:]:\n"
                 " try:\n  os.listdir(p); print('listed', p)\n except PermissionError:\n  print('denied')")
        r = subprocess.run(["setpriv", f"--reuid={split.user.pw_uid}", f"--regid={split.user.pw_gid}", "--clear-groups",
                            "/usr/bin/python3", "-c", probe, str(split.state / "views"), str(split.workspaces),
                            str(split.state / "sandboxes")], capture_output=True, text=True)
        assert r.stdout.split() == ["denied"] * 3, r.stdout + r.stderr
    finally:
        split.api("DELETE", f"/v1/sessions/{s['id']}")


def test_a_kernel_whose_restart_fails_answers_at_once_and_is_restarted_later(split):
    """The kernel dies while the launcher service is down, so its automatic
    restart fails. An execution must be told so at once (503, Retry-After),
    not wait out its timeout; the gateway keeps trying and, once the service
    is back, the session runs again with its files."""
    s = split.api("POST", "/v1/sessions").json()
    sid = s["id"]
    try:
        r = split.api("POST", f"/v1/sessions/{sid}/execute",
                      json={"code": "x = 41\nopen('kept.txt', 'w').write('kept')"}).json()
        assert r["status"] == "ok", r
        pid = split.raw(json.dumps({"op": "status", "id": sid}).encode() + b"\n")["result"]["pid"]
        split.stop_launchd()
        try:
            os.kill(pid, 9)
            wait_for(lambda: split.api("GET", f"/v1/sessions/{sid}").json()["state"] == "dead", timeout=60,
                     what="the session to be reported dead")
            wait_for(lambda: "restart failed" in split.log(), timeout=30, what="the failed restart in the log")
            t0 = time.monotonic()
            r = split.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print(1)", "timeout": 60})
            took = time.monotonic() - t0
            assert r.status_code == 503, r.text
            assert "dead" in r.json()["message"] and r.headers.get("Retry-After"), r.text
            assert took < 10, f"the refusal took {took:.1f} s"
        finally:
            split.start_launchd()
        # The gateway retries on its own (and the refused execution asked it to).
        wait_for(lambda: split.api("GET", f"/v1/sessions/{sid}").json()["state"] == "idle", timeout=90,
                 what="the session to be restarted")
        r = split.api("POST", f"/v1/sessions/{sid}/execute",
                      json={"code": "print(open('kept.txt').read(), 'x' in globals())"}).json()
        assert r["status"] == "ok" and r["stdout"] == "kept False\n", r
    finally:
        assert split.api("DELETE", f"/v1/sessions/{sid}").status_code == 204
    wait_for(lambda: sid not in split.sandboxes(), what="the sandbox to go")
