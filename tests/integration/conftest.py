"""Fixtures for tests on the real thing: the cellgate-launch binary, runc, the
built kernel image and a real ipykernel, reached through jupyter_client over
the sandbox's ipc sockets.

Every test session gets its own state dir and workspace root, so the tests
never touch sandboxes that are not theirs. When CELLGATE_REQUIRE_SANDBOX=1 (CI
sets it), a missing prerequisite fails the run instead of skipping it.
"""
import json
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LAUNCH = Path(os.environ.get("CELLGATE_BUILD_DIR", REPO / "build")) / "bin" / "cellgate-launch"
IMAGE_STORE = Path(os.environ.get("CELLGATE_IMAGE_STORE", "/var/cache/cellgate/images"))


def _missing_prerequisite():
    if os.geteuid() != 0:
        return "needs root (runc, cgroups, loop mounts)"
    if shutil.which("runc") is None:
        return "runc is not installed"
    if not LAUNCH.exists():
        return f"{LAUNCH} is not built"
    if not (IMAGE_STORE / "python" / "current" / "rootfs").is_dir():
        return "the kernel image is not built (images/build.sh)"
    return None


def pytest_collection_modifyitems(config, items):
    why = _missing_prerequisite()
    if why is None:
        return
    if os.environ.get("CELLGATE_REQUIRE_SANDBOX") == "1":
        raise pytest.UsageError(f"sandbox tests required but cannot run: {why}")
    for item in items:
        if "sandbox" in item.fixturenames or "launcher" in item.fixturenames:
            item.add_marker(pytest.mark.skip(reason=why))


class Launcher:
    """Runs cellgate-launch against this test session's own state."""

    def __init__(self, base: Path):
        self.base = base
        self.state_dir = base / "state"
        self.workspace_root = base / "workspaces"

    def cmd(self, *args, env=None, check=True, timeout=180):
        argv = [str(LAUNCH), "--state-dir", str(self.state_dir),
                "--image-store", str(IMAGE_STORE),
                "--workspace-root", str(self.workspace_root), *args]
        r = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"{' '.join(args[:1])} failed ({r.returncode}): {r.stderr}")
        return r

    def run(self, *args, env=None):
        return Sandbox(self, json.loads(self.cmd("run", *args, env=env).stdout))

    def status(self, sandbox_id):
        return json.loads(self.cmd("status", sandbox_id, check=False).stdout)


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


@pytest.fixture(scope="session")
def launcher():
    base = Path("/run") / f"cellgate-test-{uuid.uuid4().hex[:8]}"
    base.mkdir(parents=True, mode=0o711)
    l = Launcher(base)
    yield l
    l.cmd("reap", "--workspaces", check=False)
    leftovers = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout
    for target in sorted((t for t in leftovers.split() if t.startswith(str(base))), reverse=True):
        subprocess.run(["umount", "-l", target])
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def sandbox(launcher):
    """A factory: sandbox(*cli_args) starts one; all are removed after the test."""
    made = []

    def make(*args, env=None):
        s = launcher.run(*args, env=env)
        made.append(s)
        return s

    yield make
    for s in made:
        s.remove()


def wait_for(predicate, timeout=30.0, interval=0.2):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()
