"""Fixtures for the real-client tests: a live cellgate gateway (the built
binary, runc sandboxes, the built kernel image) that real Jupyter clients talk
to — @jupyterlab/services under Node.js, and jupyter_server's gateway client.

When CELLGATE_REQUIRE_SANDBOX=1 (CI sets it), a missing prerequisite fails the
run instead of skipping it.
"""
import json
import uuid

import pytest

from cellgate_clients import Gateway, require

# A second tenant whose policy is tight on the Jupyter surface, so that a real
# client can be shown a cell's time and output limits without waiting minutes.
TIGHT_POLICY = {"jupyter": {"exec_timeout": 2, "output_limit": 65536}}


def _cellgate(tmp_path_factory, *extra):
    require()
    tight_token = "tight-" + uuid.uuid4().hex
    config = tmp_path_factory.mktemp("clients") / "config.json"
    config.write_text(json.dumps({"tokens": [{"token": tight_token, "tenant": "tight", "policy": TIGHT_POLICY}]}))
    gw = Gateway("--config", str(config), "--cell-interrupt-grace", "2", *extra)
    gw.tight_token = tight_token
    try:
        gw.start()
        yield gw
    finally:
        gw.stop()
        gw.cleanup()


@pytest.fixture(scope="module")
def cellgate(tmp_path_factory):
    """A running cellgate on a free port with its own state dir and token, and
    `tight_token` for a tenant with TIGHT_POLICY."""
    yield from _cellgate(tmp_path_factory)


@pytest.fixture(scope="module")
def cellgate_zygote(tmp_path_factory):
    """The same with --zygote on, once the zygote serves: kernels are forked
    from a pre-imported interpreter instead of started cold."""
    for gw in _cellgate(tmp_path_factory, "--zygote", "on"):
        gw.wait_for_zygote()
        yield gw
