"""Fixtures for the real-client tests: a live cellgate gateway (the built
binary, runc sandboxes, the built kernel image) that real Jupyter clients talk
to — @jupyterlab/services under Node.js, and jupyter_server's gateway client.

When CELLGATE_REQUIRE_SANDBOX=1 (CI sets it), a missing prerequisite fails the
run instead of skipping it.
"""
import pytest

from cellgate_clients import Gateway, require


@pytest.fixture(scope="module")
def cellgate():
    """A running cellgate on a free port with its own state dir and token."""
    require()
    gw = Gateway()
    try:
        gw.start()
        yield gw
    finally:
        gw.stop()
        gw.cleanup()
