"""Fixtures for tests on sandboxes straight from the launcher (support.sandboxes).
A missing prerequisite skips them, or fails the run under
CELLGATE_REQUIRE_SANDBOX=1 (CI)."""
from pathlib import Path

import pytest

from support.prerequisites import launcher_missing, required
from support.sandboxes import Launcher


def pytest_collection_modifyitems(config, items):
    why = launcher_missing()
    if why is None:
        return
    if required():
        raise pytest.UsageError(f"sandbox tests required but cannot run: {why}")
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents and ("sandbox" in item.fixturenames or "launcher" in item.fixturenames):
            item.add_marker(pytest.mark.skip(reason=why))


@pytest.fixture(scope="session")
def launcher():
    l = Launcher.make()
    yield l
    l.cleanup()


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
