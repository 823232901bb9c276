"""The unmodified Piston client from npm (`piston-client`, pinned in
package-lock.json, installed with `npm ci`, never patched) against the real
gateway and the languages image: piston_client.test.mjs drives it with only
its server changed, and without a token, as the anonymous tenant.

Needs root, runc, build/bin/cellgate, the languages image, Node.js and npm;
without them the test is skipped, unless CELLGATE_REQUIRE_SANDBOX=1 (CI).
"""
import os
import subprocess
import uuid
from pathlib import Path

import pytest

from support.gateway import Gateway
from support.prerequisites import IMAGE_STORE, node_test, npm_ci, require, runtime_missing

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def gw():
    require("piston-client", runtime_missing("runc") or (
        None if (IMAGE_STORE / "languages" / "current" / "rootfs").is_dir() else "the languages image is not built"))
    npm_ci(HERE, "piston-client")
    g = Gateway("--piston-anonymous-tenant", "anonymous-" + uuid.uuid4().hex[:8], "--runtime-pool", "2")
    g.start()
    yield g
    g.stop()


def test_unmodified_piston_client(gw):
    env = {**os.environ, "CG_PISTON_URL": gw.url}
    r = subprocess.run(node_test("--test-concurrency=1", "piston_client.test.mjs"),
                       cwd=HERE, env=env, capture_output=True, text=True, timeout=600)
    print(r.stdout)
    assert r.returncode == 0, f"{r.stdout}\n{r.stderr}\n--- gateway log ---\n{gw.log_text()[-4000:]}"
    assert "ℹ fail 0" in r.stdout and "ℹ pass 6" in r.stdout, r.stdout
