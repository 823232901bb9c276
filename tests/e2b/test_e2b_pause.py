"""Pause and resume (issue 15) through the unmodified E2B JS SDK (npm `e2b`
and `@e2b/code-interpreter`, the versions pinned in package-lock.json,
installed with `npm ci`, never patched) against the REAL cellgate: built
binary, runc sandboxes, the kernel image. e2b_pause.test.mjs drives the
SDK; the tests here check what it cannot see on the wire.

The SDK gets only E2B_API_KEY, E2B_API_URL and E2B_SANDBOX_URL, as the
README (and docs/e2b.md) says. Needs root, runc, build/bin/cellgate, the
kernel image, Node.js ≥ 20 and npm; without them the tests are skipped,
unless CELLGATE_REQUIRE_SANDBOX=1 (CI).
"""
import time
import uuid
from pathlib import Path

import pytest
import requests

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

from e2b_support import e2b_env, run_node_suite, tokens_gateway

KEY = "e2b-pause-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    yield from tokens_gateway(tmp_path_factory, "pause", [{"token": KEY, "tenant": "e2b-pause"}], "--max-kernels", "16")


def _sessions(gw):
    r = requests.get(f"{gw.url}/v1/sessions", headers={"Authorization": f"Bearer {KEY}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()["sessions"]


def test_unmodified_e2b_sdk_pause_and_connect(gateway, node_modules):
    run_node_suite(gateway, "e2b_pause.test.mjs", e2b_env(gateway, KEY))
    # Every sandbox the suite made is gone again, paused ones too.
    assert _sessions(gateway) == []


def _api(gw, method, path, **kw):
    return requests.request(method, f"{gw.url}/e2b{path}", headers={"X-API-KEY": KEY}, timeout=180, **kw)


def test_pause_and_connect_on_the_wire(gateway):
    """Statuses and bodies the SDK maps: pause 204 then 409 {"code": 409};
    connect 201 when it resumed, 200 when it was running; resume (the older
    path) the same; the /v1 session model agrees."""
    r = _api(gateway, "POST", "/sandboxes", json={"templateID": "code-interpreter-v1", "timeout": 120})
    assert r.status_code == 201, r.text
    sb = r.json()
    sid = sb["sandboxID"]
    try:
        r = _api(gateway, "POST", f"/sandboxes/{sid}/pause", json={})
        assert r.status_code == 204 and r.content == b"", (r.status_code, r.text)
        r = _api(gateway, "POST", f"/sandboxes/{sid}/pause", json={})
        assert r.status_code == 409 and r.json()["code"] == 409 and "paused" in r.json()["message"], r.text
        assert _api(gateway, "GET", f"/sandboxes/{sid}").json()["state"] == "paused"
        model = next(s for s in _sessions(gateway) if s["id"] == sid)
        assert model["state"] == "paused" and model["pause"]["mode"] == "files", model

        r = _api(gateway, "GET", "/v2/sandboxes", params={"state": "paused"})
        assert r.status_code == 200 and [s["sandboxID"] for s in r.json()] == [sid], r.text
        assert r.json()[0]["state"] == "paused"
        r = _api(gateway, "GET", "/v2/sandboxes", params={"state": "running"})
        assert r.status_code == 200 and r.json() == [], r.text

        before = time.time()
        r = _api(gateway, "POST", f"/v2/sandboxes/{sid}/connect", json={"timeout": 90})
        assert r.status_code == 201, (r.status_code, r.text)
        body = r.json()
        assert body["sandboxID"] == sid and body["envdAccessToken"] == sb["envdAccessToken"], body
        detail = _api(gateway, "GET", f"/sandboxes/{sid}").json()
        assert detail["state"] == "running", detail
        # Resuming counts the timeout again from now.
        from datetime import datetime
        end = datetime.fromisoformat(detail["endAt"].replace("Z", "+00:00")).timestamp()
        assert before + 80 <= end <= time.time() + 95, (before, detail["endAt"])
        r = _api(gateway, "POST", f"/v2/sandboxes/{sid}/connect", json={})
        assert r.status_code == 200, (r.status_code, r.text)
        model = next(s for s in _sessions(gateway) if s["id"] == sid)
        assert model["pause"]["paused"] is False and model["pause"]["resumed_from"] == "files", model["pause"]

        # The older resume path and the v1 connect path do the same.
        for path in (f"/sandboxes/{sid}/resume", f"/sandboxes/{sid}/connect"):
            assert _api(gateway, "POST", f"/sandboxes/{sid}/pause", json={}).status_code == 204
            r = _api(gateway, "POST", path, json={})
            assert r.status_code == 201 and r.json()["sandboxID"] == sid, (path, r.status_code, r.text)
            assert _api(gateway, "GET", f"/sandboxes/{sid}").json()["state"] == "running"
            r = _api(gateway, "POST", path, json={})
            assert r.status_code == 200, (path, r.status_code, r.text)

        # Unknown ids: 404 {"code": 404}, as the SDK expects.
        for path in ("/sandboxes/no-such-sandbox/pause", "/v2/sandboxes/no-such-sandbox/connect",
                     "/sandboxes/no-such-sandbox/resume"):
            r = _api(gateway, "POST", path, json={})
            assert r.status_code == 404 and r.json()["code"] == 404, (path, r.status_code, r.text)
    finally:
        _api(gateway, "DELETE", f"/sandboxes/{sid}")
    assert _sessions(gateway) == []
