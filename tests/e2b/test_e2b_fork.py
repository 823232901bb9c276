"""Snapshots and fork (issue 15) through the unmodified E2B JS SDK (npm `e2b`
and `@e2b/code-interpreter`, pinned in package-lock.json, installed with
`npm ci`, never patched) against the REAL cellgate: built binary, runc
sandboxes, the kernel image. e2b_fork.test.mjs drives the SDK; the tests
here check the wire: statuses and bodies for bad input, quotas (the SDK
retries a 429, so it is checked here), paging, and that nothing is left.

Needs root, runc, build/bin/cellgate, the kernel image, Node.js ≥ 20 and
npm; without them the tests are skipped, unless CELLGATE_REQUIRE_SANDBOX=1
(CI).
"""
import uuid
from pathlib import Path

import pytest
import requests

HERE = Path(__file__).resolve().parent

from e2b_support import e2b_env, run_node_suite, tokens_gateway

KEY = "e2b-fork-" + uuid.uuid4().hex
OTHER = "e2b-fork-other-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def gateway(tmp_path_factory):
    yield from tokens_gateway(tmp_path_factory, "fork",
                              [{"token": KEY, "tenant": "e2b-fork"},
                               {"token": OTHER, "tenant": "e2b-fork-other", "max_sessions": 3}],
                              "--max-kernels", "16")


def _api(gw, method, path, key=KEY, **kw):
    return requests.request(method, f"{gw.url}/e2b{path}", headers={"X-API-KEY": key}, timeout=300, **kw)


def _v1(gw, path, key=KEY):
    r = requests.get(f"{gw.url}/v1{path}", headers={"Authorization": f"Bearer {key}"}, timeout=30)
    assert r.status_code == 200, r.text
    return r.json()


def test_unmodified_e2b_sdk_snapshots_and_fork(gateway, node_modules):
    run_node_suite(gateway, "e2b_fork.test.mjs", e2b_env(gateway, KEY))
    # Every sandbox the suite made is gone; the snapshots it kept are deleted.
    assert _v1(gateway, "/sessions")["sessions"] == []
    assert _v1(gateway, "/snapshots")["snapshots"] == []


def _create(gw, key=KEY, **body):
    r = _api(gw, "POST", "/sandboxes", key=key, json={"templateID": "code-interpreter-v1", "timeout": 300, **body})
    assert r.status_code == 201, r.text
    return r.json()["sandboxID"]


def _error(r, status, *words):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert body["code"] == status, body
    for w in words:
        assert w in body["message"], (w, body)


def test_snapshot_and_fork_on_the_wire(gateway):
    """Bodies the SDK reads (201 SnapshotInfo, 201 [{sandbox}]), paging with
    X-Next-Token, and clear {"code", "message"} errors for bad input."""
    sid = _create(gateway, metadata={"who": "wire"})
    snaps = []
    try:
        for name in ("wire-a", None, "wire-a"):
            r = _api(gateway, "POST", f"/sandboxes/{sid}/snapshots", json={"name": name} if name else {})
            assert r.status_code == 201, r.text
            info = r.json()
            # An unnamed snapshot's name is its id (E2B: "falls back to the raw template ID").
            assert set(info) == {"snapshotID", "names"} and info["names"] == [name or info["snapshotID"]], info
            snaps.append(info["snapshotID"])
        # The /v1 model is the same snapshot, mode files.
        models = {s["id"]: s for s in _v1(gateway, "/snapshots")["snapshots"]}
        assert set(models) == set(snaps) and all(m["mode"] == "files" and m["session"] == sid for m in models.values())

        # Paging: one per page, oldest first, all three, then no token.
        seen, token = [], None
        for _ in range(5):
            r = _api(gateway, "GET", "/snapshots", params={"limit": 1, **({"nextToken": token} if token else {})})
            assert r.status_code == 200, r.text
            seen += [s["snapshotID"] for s in r.json()]
            token = r.headers.get("X-Next-Token")
            if not token:
                break
        assert seen == snaps, (seen, snaps)
        # By name: both builds of "wire-a"; "team/wire-a:v1" is the same name.
        for q in ("wire-a", "team/wire-a:v1"):
            r = _api(gateway, "GET", "/snapshots", params={"name": q})
            assert [s["snapshotID"] for s in r.json()] == [snaps[0], snaps[2]], (q, r.text)
        r = _api(gateway, "GET", "/snapshots", params={"sandboxID": "no-such"})
        assert r.status_code == 200 and r.json() == [], r.text
        # Another tenant sees none of them and cannot start from or delete one.
        assert _api(gateway, "GET", "/snapshots", key=OTHER).json() == []
        _error(_api(gateway, "POST", "/sandboxes", key=OTHER, json={"templateID": snaps[0]}), 404, "not found")
        _error(_api(gateway, "DELETE", f"/templates/{snaps[0]}", key=OTHER), 404)

        # A name starts the newest snapshot of that name.
        child = _create(gateway, templateID="wire-a")
        assert _api(gateway, "GET", f"/sandboxes/{child}").json()["templateID"] == "wire-a"
        origin = next(s for s in _v1(gateway, "/sessions")["sessions"] if s["id"] == child)["origin"]
        assert origin["snapshot"] == snaps[2] and origin["source"] == sid, origin
        _api(gateway, "DELETE", f"/sandboxes/{child}")

        # Bad input.
        for body, words in (({"name": 7}, ["'name'"]), ({"name": ""}, ["'name'"]), ({"name": "a/b"}, ["'/'"]),
                            ({"name": "base"}, ["built-in"]), ({"name": snaps[1]}, ["snapshot id"])):
            _error(_api(gateway, "POST", f"/sandboxes/{sid}/snapshots", json=body), 400, *words)
        for body in ({"count": 0}, {"count": 17}, {"count": "2"}, {"count": 1.5}):
            _error(_api(gateway, "POST", f"/sandboxes/{sid}/fork", json=body), 400, "'count'")
        _error(_api(gateway, "POST", f"/sandboxes/{sid}/fork", json={"timeout": 0}), 400, "'timeout'")
        _error(_api(gateway, "POST", "/sandboxes/no-such/fork", json={}), 404, "not found")
        _error(_api(gateway, "POST", "/sandboxes/no-such/snapshots", json={}), 404, "not found")
        _error(_api(gateway, "POST", "/sandboxes", json={"templateID": snaps[0], "network": {"allowOut": ["x.test"]}}),
               400, "'network'")
        _error(_api(gateway, "DELETE", "/templates/code-interpreter-v1"), 404, "built in")

        # Deleting by name removes both builds of that name, not the unnamed one.
        assert _api(gateway, "DELETE", "/templates/wire-a").status_code == 204
        assert [s["snapshotID"] for s in _api(gateway, "GET", "/snapshots").json()] == [snaps[1]]
        assert _api(gateway, "DELETE", f"/templates/{snaps[1]}").status_code == 204
        _error(_api(gateway, "DELETE", f"/templates/{snaps[1]}"), 404)
    finally:
        _api(gateway, "DELETE", f"/sandboxes/{sid}")
        for s in snaps:
            _api(gateway, "DELETE", f"/templates/{s}")
    assert _v1(gateway, "/sessions")["sessions"] == [] and _v1(gateway, "/snapshots")["snapshots"] == []


def test_fork_past_the_quota_makes_nothing(gateway):
    """A tenant capped at 3 sandboxes with one running: a fork of 3 → 429
    before anything is copied (no sandbox, no snapshot); a fork of 2 fits."""
    sid = _create(gateway, key=OTHER)
    try:
        r = _api(gateway, "POST", f"/sandboxes/{sid}/fork", key=OTHER, json={"count": 3})
        _error(r, 429, "none was started")
        assert [s["id"] for s in _v1(gateway, "/sessions", OTHER)["sessions"]] == [sid]
        assert _v1(gateway, "/snapshots", OTHER)["snapshots"] == []
        r = _api(gateway, "POST", f"/sandboxes/{sid}/fork", key=OTHER, json={"count": 2, "timeout": 60})
        assert r.status_code == 201, r.text
        kids = [e["sandbox"]["sandboxID"] for e in r.json()]
        assert len(set(kids)) == 2 and sid not in kids
        for e in r.json():
            assert set(e) == {"sandbox"} and e["sandbox"]["envdAccessToken"], e
        assert sorted(s["id"] for s in _v1(gateway, "/sessions", OTHER)["sessions"]) == sorted([sid, *kids])
        assert _v1(gateway, "/snapshots", OTHER)["snapshots"] == []
        for k in kids:
            assert _api(gateway, "DELETE", f"/sandboxes/{k}", key=OTHER).status_code == 204
    finally:
        _api(gateway, "DELETE", f"/sandboxes/{sid}", key=OTHER)
