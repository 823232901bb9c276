"""Fixtures for the Python SDK tests: the real cellgate gateway (built binary,
runc sandboxes, the built kernel image) and the SDK from clients/python.

When CELLGATE_REQUIRE_SANDBOX=1 (CI sets it), a missing prerequisite fails
the run instead of skipping it.
"""
import pytest

from sdk_support import Gateway, require


@pytest.fixture(scope="session")
def gateway():
    """One running cellgate for the whole run, with its own state dir and token,
    and the default configuration's warm pool: the SDK's sessions are claims,
    as a user's are (and the suite does not wait for ninety cold starts)."""
    require()
    gw = Gateway("--pool-size", "2")
    try:
        gw.start()
        yield gw
    finally:
        gw.stop()
        gw.cleanup()


@pytest.fixture
def connection(gateway):
    """{"url", "token"} for the SDK."""
    return {"url": gateway.url, "token": gateway.token}


@pytest.fixture(scope="module")
def sandbox(gateway):
    """A session shared by a module's tests (tests that need a fresh kernel make their own)."""
    from cellgate import Sandbox

    sb = Sandbox(gateway.url, gateway.token)
    yield sb
    sb.close()
