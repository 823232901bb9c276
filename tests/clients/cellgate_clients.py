"""Helpers shared by the client tests (kept out of conftest.py so that test
modules can import them by a name no other suite uses)."""
from pathlib import Path

from support import prerequisites
from support.gateway import Gateway, log_tail  # noqa: F401  (the suite's names)

CLIENTS = Path(__file__).resolve().parent


def require(*tools):
    """Skips (or, under CELLGATE_REQUIRE_SANDBOX=1, fails) without the prerequisites."""
    prerequisites.require("client tests", prerequisites.gateway_missing() or prerequisites.tools_missing(*tools))
