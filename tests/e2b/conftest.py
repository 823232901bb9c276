"""The E2B suites' shared fixture: the locked SDK packages."""
import pytest

from e2b_support import HERE, require_e2b
from support.prerequisites import npm_ci


@pytest.fixture(scope="module")
def node_modules():
    """The locked packages, installed with `npm ci` unless node_modules matches the lock."""
    require_e2b("E2B SDK tests")
    npm_ci(HERE, "e2b")
