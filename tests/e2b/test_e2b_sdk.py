"""Runs the unmodified E2B SDKs (npm `e2b` and `@e2b/code-interpreter`, the
versions pinned in package-lock.json, installed with `npm ci`, never patched)
against the REAL cellgate: built binary, runc sandboxes, the kernel image.

The SDK gets exactly what the README (and docs/e2b.md) tells a user to set —
E2B_API_KEY, E2B_API_URL, E2B_SANDBOX_URL — and nothing else of cellgate's.
A second tenant's token (CELLGATE_OTHER_KEY) is passed in code by the test
that checks isolation.

Needs root, runc, build/bin/cellgate, the kernel image, Node.js ≥ 20 and npm.
Without them the tests are skipped, unless CELLGATE_REQUIRE_SANDBOX=1 (CI).
"""
import json
import time
import uuid
from pathlib import Path

import pytest
import requests

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

from e2b_support import e2b_env, require_e2b, run_node_suite
from support.gateway import Gateway, HttpListener

KEY_A = "e2b-tenant-a-" + uuid.uuid4().hex
KEY_B = "e2b-tenant-b-" + uuid.uuid4().hex


def _require():
    require_e2b("E2B SDK tests")


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    _require()
    d = tmp_path_factory.mktemp("e2b")
    tokens = d / "tokens.json"
    tokens.write_text(json.dumps([{"token": KEY_A, "tenant": "e2b-alpha"}, {"token": KEY_B, "tenant": "e2b-beta"}]))
    # A listener on this machine that sandboxes with network.allowOut reach by name.
    upstream = HttpListener()
    gw = Gateway("--tokens-file", str(tokens), "--pool-size", "1", "--pool", "code-interpreter=1", "--max-kernels", "16",
                 *upstream.resolve_args("e2b-allowed.test", "e2b-denied.test")).start()
    try:
        yield gw
    finally:
        gw.stop()
        gw.cleanup()
        upstream.close()


def test_unmodified_e2b_sdk(gateway, node_modules):
    run_node_suite(gateway, "e2b_sdk.test.mjs", {**e2b_env(gateway, KEY_A), "CELLGATE_OTHER_KEY": KEY_B})
    # Every sandbox the suite made is gone again.
    left = requests.get(f"{gateway.url}/v1/sessions", headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30)
    assert left.json()["sessions"] == [], left.text


def test_unmodified_e2b_sdk_in_r_javascript_typescript_and_bash(gateway, node_modules):
    run_node_suite(gateway, "e2b_languages.test.mjs", e2b_env(gateway, KEY_A))
    # The sandbox and its language contexts are gone again.
    left = requests.get(f"{gateway.url}/v1/sessions", headers={"Authorization": f"Bearer {KEY_A}"}, timeout=30)
    assert left.json()["sessions"] == [], left.text


def _sandbox(gw, key=KEY_A, **body):
    r = requests.post(f"{gw.url}/e2b/sandboxes", headers={"X-API-KEY": key}, json=body, timeout=120)
    assert r.status_code == 201, r.text
    return r.json()


def _kill(gw, sid, key=KEY_A):
    requests.delete(f"{gw.url}/e2b/sandboxes/{sid}", headers={"X-API-KEY": key}, timeout=60)


def test_wire_details_the_sdk_relies_on(gateway):
    """What the JS tests cannot see: statuses and bodies of the refusals."""
    url = gateway.url
    r = requests.post(f"{url}/e2b/sandboxes", json={}, timeout=30)
    assert r.status_code == 401 and r.json()["code"] == 401, r.text
    r = requests.post(f"{url}/e2b/v2/sandboxes", headers={"X-API-KEY": "wrong-key"}, json={}, timeout=30)
    assert r.status_code == 401 and r.json()["code"] == 401
    sb = _sandbox(gateway)
    try:
        for k in ("templateID", "sandboxID", "clientID", "envdVersion", "envdAccessToken", "trafficAccessToken"):
            assert sb.get(k), (k, sb)
        assert sb["envdVersion"] == "0.5.7"
        sid = sb["sandboxID"]
        r = requests.delete(f"{url}/e2b/sandboxes/{sid}", headers={"X-API-KEY": KEY_B}, timeout=30)
        assert r.status_code == 404 and r.json()["code"] == 404, r.text
        r = requests.post(f"{url}/e2b/sandboxes", headers={"X-API-KEY": KEY_A},
                          json={"templateID": "no-such-template"}, timeout=30)
        assert r.status_code == 404 and r.json()["code"] == 404
        r = requests.post(f"{url}/e2b/sandboxes", headers={"X-API-KEY": KEY_A}, json={"timeout": -5}, timeout=30)
        assert r.status_code == 400 and "timeout" in r.json()["message"]
        # Sandbox plane: the token is checked, the header names the sandbox.
        plane = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983"}
        r = requests.get(f"{url}/e2b/health", headers=plane, timeout=30)
        assert r.status_code == 401
        r = requests.get(f"{url}/e2b/health", headers={**plane, "X-Access-Token": sb["trafficAccessToken"]}, timeout=30)
        assert r.status_code == 401, "the traffic token does not open envd"
        r = requests.get(f"{url}/e2b/health", headers={**plane, "X-Access-Token": sb["envdAccessToken"]}, timeout=30)
        assert r.status_code == 204
        r = requests.post(f"{url}/e2b/filesystem.Filesystem/Stat", json={"path": "/etc/passwd"},
                          headers={**plane, "X-Access-Token": sb["envdAccessToken"]}, timeout=30)
        assert r.status_code == 404 and r.json()["code"] == "not_found", r.text
        r = requests.post(f"{url}/e2b/filesystem.Filesystem/Stat", json={"path": "/home/user/../../etc/passwd"},
                          headers={**plane, "X-Access-Token": sb["envdAccessToken"]}, timeout=30)
        assert r.status_code == 400 and r.json()["code"] == "invalid_argument", r.text
        r = requests.get(f"{url}/e2b/files", params={"path": "/home/user/none"},
                         headers={**plane, "X-Access-Token": sb["envdAccessToken"]}, timeout=30)
        assert r.status_code == 404 and r.json()["code"] == 404
        ci = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999", "E2B-Traffic-Access-Token": sb["trafficAccessToken"]}
        r = requests.post(f"{url}/e2b/execute", json={"code": "1", "language": "cobol"}, headers=ci, timeout=30)
        assert r.status_code == 400 and "'cobol' is not available in this sandbox (python, r, javascript, typescript, bash" \
            in r.json()["message"], r.text
        # The base template is the default kernelspec's Python: no other language there.
        base = _sandbox(gateway, templateID="base")
        try:
            at_base = {**ci, "E2b-Sandbox-Id": base["sandboxID"], "E2B-Traffic-Access-Token": base["trafficAccessToken"]}
            r = requests.post(f"{url}/e2b/contexts", json={"language": "r"}, headers=at_base, timeout=30)
            assert r.status_code == 400 and "(python; the code-interpreter-v1 template has R" in r.json()["message"], r.text
        finally:
            _kill(gateway, base["sandboxID"])
        r = requests.get(f"{url}/e2b/contexts", headers=ci, timeout=30)
        assert r.status_code == 200 and r.json()[0]["id"] == "default"
        r = requests.post(f"{url}/e2b/execute", json={"code": "print(1)"},
                          headers={**ci, "E2b-Sandbox-Port": "49983"}, timeout=30)
        assert r.status_code == 404, "/execute is not on envd's port"
        other = _sandbox(gateway, key=KEY_B)
        try:
            r = requests.post(f"{url}/e2b/execute", json={"code": "1"},
                              headers={**ci, "E2b-Sandbox-Id": other["sandboxID"]}, timeout=30)
            assert r.status_code == 401, "one sandbox's token does not open another"
        finally:
            _kill(gateway, other["sandboxID"], KEY_B)
    finally:
        _kill(gateway, sb["sandboxID"])


def test_polled_watchers_and_context_bounds(gateway):
    """The Python SDK's sync client polls watchers (CreateWatcher,
    GetWatcherEvents, RemoveWatcher) instead of streaming; and the bounds on
    watches and code contexts answer with the statuses the SDK maps."""
    url = gateway.url
    sb = _sandbox(gateway)
    try:
        sid = sb["sandboxID"]
        envd = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb["envdAccessToken"]}
        rpc = lambda method, body: requests.post(f"{url}/e2b/filesystem.Filesystem/{method}", json=body,  # noqa: E731
                                                 headers=envd, timeout=60)
        assert rpc("MakeDir", {"path": "/home/user/polled"}).status_code == 200
        r = rpc("CreateWatcher", {"path": "/home/user/polled", "recursive": True})
        assert r.status_code == 200, r.text
        watcher = r.json()["watcherId"]
        r = requests.post(f"{url}/e2b/files", params={"path": "/home/user/polled/one.txt"}, data=b"1",
                          headers={**envd, "Content-Type": "application/octet-stream"}, timeout=60)
        assert r.status_code == 200, r.text
        events, deadline = [], time.monotonic() + 20
        while not any(e == {"name": "one.txt", "type": "EVENT_TYPE_CREATE"} for e in events):
            assert time.monotonic() < deadline, events
            r = rpc("GetWatcherEvents", {"watcherId": watcher})
            assert r.status_code == 200, r.text
            events += r.json()["events"]
            time.sleep(0.1)
        assert rpc("GetWatcherEvents", {"watcherId": watcher}).json()["events"] in ([], [{"name": "one.txt", "type": "EVENT_TYPE_WRITE"}])
        assert rpc("RemoveWatcher", {"watcherId": watcher}).status_code == 200
        r = rpc("GetWatcherEvents", {"watcherId": watcher})
        assert r.status_code == 404 and r.json()["code"] == "not_found", r.text
        # Bad input: clear errors.
        assert rpc("CreateWatcher", {"path": "/home/user/none"}).json()["code"] == "not_found"
        assert rpc("CreateWatcher", {"path": "/home/user/polled/one.txt"}).status_code in (400, 404)
        assert rpc("CreateWatcher", {"path": "/home/user/polled", "recursive": "yes"}).status_code == 400
        assert rpc("CreateWatcher", {"path": "/etc"}).status_code == 404
        # At most 8 watches per sandbox; a removed one makes room again.
        ids = []
        for _ in range(8):
            r = rpc("CreateWatcher", {"path": "/home/user/polled"})
            assert r.status_code == 200, r.text
            ids.append(r.json()["watcherId"])
        r = rpc("CreateWatcher", {"path": "/home/user/polled"})
        assert r.status_code == 429 and r.json()["code"] == "resource_exhausted", r.text
        assert rpc("RemoveWatcher", {"watcherId": ids.pop()}).status_code == 200
        assert rpc("CreateWatcher", {"path": "/home/user/polled"}).status_code == 200
        # Code contexts: at most 8 per sandbox, 429 past it, room again after a removal.
        ci = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999", "E2B-Traffic-Access-Token": sb["trafficAccessToken"]}
        made = []
        for _ in range(8):
            r = requests.post(f"{url}/e2b/contexts", json={}, headers=ci, timeout=120)
            assert r.status_code == 200, r.text
            made.append(r.json()["id"])
        r = requests.post(f"{url}/e2b/contexts", json={}, headers=ci, timeout=120)
        assert r.status_code == 429 and r.json()["code"] == 429, r.text
        assert requests.delete(f"{url}/e2b/contexts/{made[0]}", headers=ci, timeout=30).status_code == 204
        assert requests.delete(f"{url}/e2b/contexts/{made[0]}", headers=ci, timeout=30).status_code == 404
        assert requests.delete(f"{url}/e2b/contexts/default", headers=ci, timeout=30).status_code == 400
        r = requests.post(f"{url}/e2b/execute", json={"code": "1", "context_id": "nope"}, headers=ci, timeout=30)
        assert r.status_code == 404
    finally:
        _kill(gateway, sb["sandboxID"])
