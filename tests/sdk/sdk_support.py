"""Helpers shared by the SDK tests (kept out of conftest.py so that test
modules can import them by a name no other suite uses)."""
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SDK = REPO / "clients" / "python"
CLI = SDK / "bin" / "cellgate"
NOTEBOOKS = REPO / "notebooks"
sys.path.insert(0, str(SDK))

from support import prerequisites  # noqa: E402
from support.gateway import Gateway, HttpListener, log_tail  # noqa: E402,F401  (the suite's names)
from support.prerequisites import gateway_missing  # noqa: E402


def missing_prerequisite():
    why = gateway_missing()
    for module, package in (("nbformat", "python3-nbformat"), ("openpyxl", "python3-openpyxl"),
                            ("jsonschema", "python3-jsonschema")):
        try:
            __import__(module)
        except ImportError:
            why = why or f"{package} is not installed"
    return why


def require():
    """Skips (or, under CELLGATE_REQUIRE_SANDBOX=1, fails) without the prerequisites."""
    prerequisites.require("SDK tests", missing_prerequisite())


def run_cli(gateway, *args, cwd=None, timeout=300, stdin=None):
    """Runs the cellgate CLI script (its own #!/usr/bin/python3) against the gateway."""
    env = dict(os.environ, CELLGATE_URL=gateway.url, CELLGATE_TOKEN=gateway.token)
    return subprocess.run([str(CLI), *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, input=stdin)
