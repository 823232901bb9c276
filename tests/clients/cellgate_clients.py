"""Helpers shared by the client tests (kept out of conftest.py so that test
modules can import them by a name no other suite uses)."""
import os
import shutil
import sys
from pathlib import Path

import pytest

CLIENTS = Path(__file__).resolve().parent
sys.path.insert(0, str(CLIENTS.parent / "integration"))

from gateway import GATEWAY, IMAGE_STORE, Gateway  # noqa: E402


def missing_prerequisite(*tools):
    if os.geteuid() != 0:
        return "needs root (runc, cgroups, loop mounts)"
    if shutil.which("runc") is None:
        return "runc is not installed"
    if not GATEWAY.exists():
        return f"{GATEWAY} is not built"
    if not (IMAGE_STORE / "python" / "current" / "rootfs").is_dir():
        return "the kernel image is not built (images/build.sh)"
    for tool in tools:
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def require(*tools):
    """Skips (or, under CELLGATE_REQUIRE_SANDBOX=1, fails) without the prerequisites."""
    why = missing_prerequisite(*tools)
    if why is None:
        return
    if os.environ.get("CELLGATE_REQUIRE_SANDBOX") == "1":
        pytest.fail(f"client tests required but cannot run: {why}", pytrace=False)
    pytest.skip(why)


def log_tail(gw, chars=6000):
    text = gw.log_text()
    return text[-chars:] if len(text) > chars else text
