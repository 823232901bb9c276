"""Sandboxes straight from the launcher, without a gateway: the cellgate-launch
binary, runc or runsc, the built kernel image and a real ipykernel, reached
through jupyter_client over the sandbox's sockets. Every Launcher has its own
state dir and workspace root, so tests never touch sandboxes not theirs."""
import json
import shutil
import subprocess
import uuid
from pathlib import Path

from support import accounting
from support.prerequisites import IMAGE_STORE, LAUNCH


class Launcher:
    """Runs cellgate-launch against its own state."""

    def __init__(self, base: Path):
        self.base = base
        self.state_dir = base / "state"
        self.workspace_root = base / "workspaces"

    @classmethod
    def make(cls):
        base = Path("/run") / f"cellgate-test-{uuid.uuid4().hex[:8]}"
        base.mkdir(parents=True, mode=0o711)
        return cls(base)

    def cmd(self, *args, env=None, check=True, timeout=180):
        argv = [str(LAUNCH), "--state-dir", str(self.state_dir),
                "--image-store", str(IMAGE_STORE),
                "--workspace-root", str(self.workspace_root), *args]
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(args[:1])} failed ({r.returncode}): {r.stderr}")
        return r

    def run(self, *args, env=None):
        accounting.charge(accounting.current, 1)
        return Sandbox(self, json.loads(self.cmd("run", *args, env=env).stdout))

    def status(self, sandbox_id):
        return json.loads(self.cmd("status", sandbox_id, check=False).stdout)

    def cleanup(self):
        """Removes what the tests left (sandboxes, workspaces, mounts) and the dirs."""
        self.cmd("reap", "--workspaces", check=False)
        roots = [str(self.base)]
        link = self.state_dir / "sandboxes"
        if link.is_symlink():  # a short stand-in for a deep state dir (socket paths)
            roots.append(str(link.resolve().parent))
        leftovers = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout
        for target in sorted((t for t in leftovers.split() if t.startswith(tuple(roots))), reverse=True):
            subprocess.run(["umount", "-l", target])
        for root in roots[1:]:
            shutil.rmtree(root, ignore_errors=True)
        shutil.rmtree(self.base, ignore_errors=True)


class Sandbox:
    def __init__(self, launcher: Launcher, info: dict):
        from jupyter_client import BlockingKernelClient

        self.launcher = launcher
        self.info = info
        self.id = info["id"]
        self.client = BlockingKernelClient()
        self.client.load_connection_file(info["endpoints"]["connection_file"])
        self.client.start_channels()
        self.client.wait_for_ready(timeout=60)

    def execute(self, code, timeout=120):
        """Runs a cell; returns stdout, stderr, rich outputs, error and reply status."""
        out = {"stdout": "", "stderr": "", "data": [], "error": None}

        def hook(msg):
            t, c = msg["msg_type"], msg["content"]
            if t == "stream":
                out[c["name"]] += c["text"]
            elif t in ("display_data", "execute_result"):
                out["data"].append(c["data"])
            elif t == "error":
                out["error"] = c

        reply = self.client.execute_interactive(code, output_hook=hook, timeout=timeout)
        out["status"] = reply["content"]["status"]
        return out

    def value(self, expression):
        """Evaluates an expression in the kernel and returns it, via repr/eval."""
        r = self.execute(f"print(repr({expression}))")
        assert r["error"] is None, r["error"]
        import ast
        return ast.literal_eval(r["stdout"].strip())

    def remove(self):
        try:
            self.client.stop_channels()
        finally:
            self.launcher.cmd("rm", self.id, check=False)
