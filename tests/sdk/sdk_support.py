"""Helpers shared by the SDK tests (kept out of conftest.py so that test
modules can import them by a name no other suite uses)."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SDK = REPO / "clients" / "python"
CLI = SDK / "bin" / "cellgate"
NOTEBOOKS = REPO / "notebooks"
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(SDK))

from gateway import GATEWAY, IMAGE_STORE, Gateway, HttpListener  # noqa: E402,F401


def missing_prerequisite():
    if os.geteuid() != 0:
        return "needs root (runc, cgroups, loop mounts)"
    if shutil.which("runc") is None:
        return "runc is not installed"
    if not GATEWAY.exists():
        return f"{GATEWAY} is not built"
    if not (IMAGE_STORE / "python" / "current" / "rootfs").is_dir():
        return "the kernel image is not built (images/build.sh)"
    for module, package in (("nbformat", "python3-nbformat"), ("openpyxl", "python3-openpyxl"),
                            ("jsonschema", "python3-jsonschema")):
        try:
            __import__(module)
        except ImportError:
            return f"{package} is not installed"
    return None


def require():
    """Skips (or, under CELLGATE_REQUIRE_SANDBOX=1, fails) without the prerequisites."""
    why = missing_prerequisite()
    if why is None:
        return
    if os.environ.get("CELLGATE_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"SDK tests required but cannot run: {why}", pytrace=False)
    pytest.skip(why)


def run_cli(gateway, *args, cwd=None, timeout=300, stdin=None):
    """Runs the cellgate CLI script (its own #!/usr/bin/python3) against the gateway."""
    env = dict(os.environ, CELLGATE_URL=gateway.url, CELLGATE_TOKEN=gateway.token)
    return subprocess.run([str(CLI), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, input=stdin)


def log_tail(gw, chars=6000):
    text = gw.log_text()
    return text[-chars:] if len(text) > chars else text
