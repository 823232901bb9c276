"""Runs the real cellgate gateway for a test: its own state dir, port 0 (the
bound port comes back through --port-file), a fixed token, runc sandboxes and
the built kernel image; and the clients the tests speak to it with (the
kernel WebSocket, an HTTP upstream for egress). Every suite uses this one."""
import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import requests

from support import accounting
from support.prerequisites import GATEWAY, IMAGE_STORE, LAUNCH, require, runtime_missing

class Gateway:
    # Where a test reaches it: another address for a node in a network
    # namespace (a class default, so a Gateway made without __init__ has it).
    host = "127.0.0.1"

    def __init__(self, *extra_args, token="test-token-" + uuid.uuid4().hex[:8], env=None, state_dir=None):
        # CELLGATE_TEST_NODE_ARGS (e.g. "--cgroup-parent cellgate-b --uid-range-start 300000000")
        # gives every gateway of this run its own cgroup parent and id range,
        # so two test runs on one machine never share them.
        extra_args = (*extra_args, *os.environ.get("CELLGATE_TEST_NODE_ARGS", "").split())
        self.token = token
        self.base_dir = Path("/run") / f"cellgate-gw-{uuid.uuid4().hex[:8]}"
        self.base_dir.mkdir(mode=0o711)
        self.state_dir = self.base_dir / (state_dir or "state")
        self.workspace_root = self.base_dir / "workspaces"
        self.port_file = self.base_dir / "port"
        self.log_path = self.base_dir / "gateway.log"
        self.args = [str(GATEWAY), "--ip", "127.0.0.1", "--port", "0", "--port-file", str(self.port_file),
                     "--token", token, "--state-dir", str(self.state_dir), "--image-store", str(IMAGE_STORE),
                     "--workspace-root", str(self.workspace_root),
                # No warm pool unless a test asks for one (it would start
                # sandboxes in the background of every test).
                *([] if any(a == "--pool-size" for a in extra_args) else ["--pool-size", "0"]),
                # Nor one for E2B's default template (code-interpreter), which
                # --pool-size would bring too, unless a test names it.
                *([] if any(a.startswith("code-interpreter=") for a in extra_args)
                  else ["--pool", "code-interpreter=0"]),
                *extra_args]
        # Per-node launcher options, which cleanup's cellgate-launch needs too.
        node = ("--cgroup-parent", "--uid-range-start", "--uid-range-slots")
        self.node_args = [a for i, a in enumerate(extra_args)
                          if a in node or (i > 0 and extra_args[i - 1] in node)]
        self.env = env
        self.preexec = None  # runs in the child before exec (e.g. to lower a limit)
        self.proc = None
        self.port = None
        self.owner = accounting.current  # the test whose module its sandboxes are charged to

    def start(self, timeout=30):
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT, env=self.env,
                                     preexec_fn=self.preexec)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.port_file.exists() and self.port_file.read_text().strip():
                self.port = int(self.port_file.read_text())
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"cellgate exited at start: {self.log_text()}")
            time.sleep(0.02)
        else:
            raise RuntimeError("cellgate did not report its port")
        return self

    @property
    def url(self):
        return f"http://{self.host}:{self.port}"

    @property
    def ws_url(self):
        return f"ws://{self.host}:{self.port}"

    @property
    def headers(self):
        return {"Authorization": f"token {self.token}"}

    def api(self, method, path, **kw):
        headers = dict(self.headers)
        headers.update(kw.pop("headers", {}))
        return requests.request(method, self.url + path, headers=headers, timeout=kw.pop("timeout", 120), **kw)

    def e2b(self, method, path, sandbox=None, port=49999, **kw):
        """A request to the E2B surface as the SDK sends it: the control plane
        with X-API-KEY, or, given a sandbox (its create answer), that
        sandbox's `port` with its access tokens."""
        headers = {"X-API-KEY": self.token}
        if sandbox:
            headers = {"E2b-Sandbox-Id": sandbox["sandboxID"], "E2b-Sandbox-Port": str(port),
                       "E2B-Traffic-Access-Token": sandbox["trafficAccessToken"],
                       "X-Access-Token": sandbox["envdAccessToken"]}
        return requests.request(method, f"{self.url}/e2b{path}", headers=headers, timeout=180, **kw)

    def start_kernel(self, name="python3", **body):
        r = self.api("POST", "/api/kernels", json={"name": name, **body})
        assert r.status_code == 201, r.text
        return r.json()

    def wait_for_zygote(self, timeout=60):
        """With --zygote on: the zygote imports for a second or two after the
        gateway starts, and kernels start cold until then (a warm pool's, until
        it has refilled). Creates and deletes sessions until one's kernel says
        it was forked."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.api("POST", "/v1/sessions", json={"timeout_s": 120})
            assert r.status_code == 201, r.text
            self.api("DELETE", f"/v1/sessions/{r.json()['id']}")
            if r.json()["sandbox"]["zygote"]:
                return
            assert time.monotonic() < deadline, "no kernel came from the zygote: " + self.log_text()[-2000:]
            time.sleep(0.5)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None and \
            requests.get(self.url + "/healthz", timeout=10).status_code == 200

    def log_text(self):
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def kill_and_restart(self):
        """SIGKILL (no shutdown ladder runs), then the same command on the same dirs."""
        import signal
        accounting.charge(self.owner, self.sandboxes_started())
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)
        self.log.close()
        self.port_file.unlink()
        return self.start()

    def sandboxes_started(self):
        """cellgate_sandbox_starts_total, or 0 when the gateway does not answer."""
        try:
            text = requests.get(self.url + "/metrics", headers=self.headers, timeout=5).text
        except requests.RequestException:
            return 0
        for line in text.splitlines():
            if line.startswith("cellgate_sandbox_starts_total "):
                return int(float(line.split()[1]))
        return 0

    def stop(self, timeout=60):
        if self.proc is None:
            return None
        if self.proc.poll() is None and self.port is not None:
            accounting.charge(self.owner, self.sandboxes_started())
        if self.proc.poll() is not None and self.proc.returncode != 0:
            # It died by itself: say why, where CI shows it.
            import sys
            print(f"cellgate exited by itself (status {self.proc.returncode}); its log ends:\n"
                  f"{self.log_text()[-6000:]}", file=sys.stderr)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode

    def cleanup(self):
        """Removes whatever a crashed run left (sandboxes, mounts) and the dirs."""
        launch = LAUNCH
        base = ["--state-dir", str(self.state_dir), "--image-store", str(IMAGE_STORE),
                "--workspace-root", str(self.workspace_root), *self.node_args]
        out = subprocess.run([str(launch), *base, "ps", "--json"], capture_output=True, text=True)
        try:
            for s in json.loads(out.stdout or "[]"):
                subprocess.run([str(launch), *base, "rm", s["id"]], capture_output=True)
        except json.JSONDecodeError:
            pass
        subprocess.run([str(launch), *base, "reap", "--workspaces"], capture_output=True)
        # A state dir too deep for socket paths keeps its sandboxes in a short
        # stand-in under /run/cellgate, linked from it as `sandboxes`.
        roots = [str(self.base_dir)]
        link = self.state_dir / "sandboxes"
        stand_in = link.resolve().parent if link.is_symlink() else None
        if stand_in is not None:
            roots.append(str(stand_in))
        mounts = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout.split()
        for target in sorted((t for t in mounts if t.startswith(tuple(roots))), reverse=True):
            subprocess.run(["umount", "-l", target])
        if stand_in is not None and stand_in.parent == Path("/run/cellgate"):
            subprocess.run(["rm", "-rf", str(stand_in)])
        # Keep the log for a post-mortem of a failed run.
        keep = Path(os.environ.get("CELLGATE_TEST_LOGS", "/tmp/cellgate-test-logs"))
        keep.mkdir(parents=True, exist_ok=True)
        if self.log_path.exists():
            subprocess.run(["cp", str(self.log_path), str(keep / f"{self.base_dir.name}.log")])
        subprocess.run(["rm", "-rf", str(self.base_dir)])


def log_tail(gw, chars=6000):
    """The end of a gateway's log, for an assertion's message."""
    text = gw.log_text()
    return text[-chars:] if len(text) > chars else text


class KernelChannel:
    """A Jupyter client over the gateway's kernel WebSocket (default JSON protocol)."""

    def __init__(self, gateway, kernel_id, session_id=None, subprotocols=None, token_in_query=True):
        import websocket
        self.session_id = session_id if session_id is not None else uuid.uuid4().hex
        q = f"session_id={self.session_id}" if self.session_id else ""
        if token_in_query:
            q += ("&" if q else "") + f"token={gateway.token}"
        self.ws = websocket.create_connection(
            f"{gateway.ws_url}/api/kernels/{kernel_id}/channels?{q}", subprotocols=subprotocols, timeout=120,
            header=[] if token_in_query else [f"Authorization: token {gateway.token}"])

    def send(self, msg_type, content, channel="shell"):
        msg_id = uuid.uuid4().hex
        self.ws.send(json.dumps({
            "channel": channel,
            "header": {"msg_id": msg_id, "msg_type": msg_type, "session": self.session_id or "s",
                       "username": "test", "version": "5.3", "date": "2026-01-01T00:00:00Z"},
            "parent_header": {}, "metadata": {}, "content": content}))
        return msg_id

    def recv(self):
        import websocket
        op, data = self.ws.recv_data()
        if op == websocket.ABNF.OPCODE_TEXT:
            return json.loads(data)
        return {"binary": data}

    def execute(self, code, timeout=120):
        """Runs a cell; returns {'reply': content, 'outputs': [msgs], 'stdout': str}."""
        msg_id = self.send("execute_request", {"code": code, "silent": False, "store_history": True,
                                               "user_expressions": {}, "allow_stdin": False, "stop_on_error": True})
        result = {"reply": None, "outputs": [], "stdout": "", "stderr": "", "idle": False}
        self.ws.settimeout(timeout)
        while result["reply"] is None or not result["idle"]:
            m = self.recv()
            if "binary" in m or m.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            t = m["header"]["msg_type"]
            if m["channel"] == "shell" and t == "execute_reply":
                result["reply"] = m["content"]
            elif t == "status":
                result["idle"] = m["content"]["execution_state"] == "idle"
            else:
                result["outputs"].append(m)
                if t == "stream":
                    result[m["content"]["name"]] += m["content"]["text"]
        return result

    def close(self):
        self.ws.close()


def answer_input(send, recv, msg_id, value):
    """Runs the messages of execute request `msg_id` until its reply: answers
    its input_request (which must come on stdin) with `value` through
    send(channel, msg_type, content, parent_header), and returns
    (prompt, stdout, reply content)."""
    prompt, stdout, reply = None, "", None
    while reply is None:
        m = recv()
        if m.get("header", {}).get("msg_type") == "input_request":
            assert m["channel"] == "stdin", m
            prompt = m["content"]["prompt"]
            send("stdin", "input_reply", {"value": value}, m["header"])
        elif m.get("parent_header", {}).get("msg_id") != msg_id:
            continue
        elif m["header"]["msg_type"] == "stream":
            stdout += m["content"]["text"]
        elif m["channel"] == "shell" and m["header"]["msg_type"] == "execute_reply":
            reply = m["content"]
    return prompt, stdout, reply


class HttpListener:
    """An HTTP listener on 127.0.0.1 that answers every GET with
    'upstream <path>' and records the paths (what egress tests lead names to
    with --egress-resolve name=127.0.0.1:<port>)."""

    def __init__(self):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
        import threading
        self.paths = []
        paths = self.paths

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                paths.append(self.path)
                body = f"upstream {self.path}".encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def resolve_args(self, *names):
        """The gateway options that lead each name to this listener."""
        return [arg for name in names for arg in ("--egress-resolve", f"{name}=127.0.0.1:{self.port}")]

    def close(self):
        self.server.shutdown()
        self.server.server_close()



def runtime_gateway(request, tmp_path_factory, suite, *args, config=None):
    """Yields a started Gateway whose python3 kernelspec runs under
    request.param (runc or runsc), with `config` merged into its config file,
    and stops and cleans it up after. Without root or that runtime the test
    is skipped, or fails when CELLGATE_REQUIRE_SANDBOX=1 (as in CI)."""
    runtime = request.param
    require(f"{suite} tests on {runtime}", runtime_missing(runtime))
    path = tmp_path_factory.mktemp(f"{suite}-{runtime}") / "config.json"
    path.write_text(json.dumps({"kernelspecs": {"python3": {"runtime": runtime}}, **(config or {})}))
    g = Gateway("--config", str(path), *args).start()
    g.runtime = runtime
    try:
        yield g
    finally:
        g.stop()
        g.cleanup()
