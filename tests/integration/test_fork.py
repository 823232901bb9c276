"""Snapshots and fork (issue 15): a named, immutable copy of a session's
workspace taken while it runs; sessions started from it; a fork (snapshot +
N children) in one call. Children are new sessions (new ids, new Jupyter
kernel ids, their own keys and sandboxes) on their own copy of the files,
and share no writable state with the source or each other. Real gateway,
real runc and runsc sandboxes, the kernel image."""
import json
import os

import pytest

from support.gateway import runtime_gateway

RUNTIMES = ["runc", "runsc"]

# Files of several kinds: a text file, a nested dir, a 4 MiB binary, a symlink.
SETUP = """
import os, pathlib
pathlib.Path("/workspace/data.txt").write_text("parent\\n")
os.makedirs("/workspace/nested/deeper", exist_ok=True)
pathlib.Path("/workspace/nested/deeper/leaf.txt").write_text("leaf")
pathlib.Path("/workspace/blob.bin").write_bytes(os.urandom(4 << 20))
os.symlink("data.txt", "/workspace/link.txt")
x = 41
"""
# What a session sees of its workspace: every file's digest, and its owner
# (the session's own uid: a copy's files must be the child's, not the source's).
TREE = """
import hashlib, os, json
out = {}
for root, dirs, files in os.walk("/workspace"):
    for f in files:
        p = os.path.join(root, f)
        if os.path.islink(p):
            out[p] = "-> " + os.readlink(p)
        else:
            st = os.stat(p)
            out[p] = hashlib.sha256(open(p, "rb").read()).hexdigest()[:16] + (" mine" if st.st_uid == os.getuid() else " NOT MINE")
print(json.dumps(out, sort_keys=True))
"""


@pytest.fixture(scope="module", params=RUNTIMES)
def gw(request, tmp_path_factory):
    yield from runtime_gateway(request, tmp_path_factory, "fork", "--max-kernels", "12", "--max-kernels-per-tenant", "6",
                               config={"max_snapshots_per_tenant": 3})


def new_session(gw, **body):
    r = gw.api("POST", "/v1/sessions", json={"timeout_s": 120, **body}, timeout=180)
    assert r.status_code == 201, r.text
    return r.json()


def run(gw, sid, code):
    r = gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": code}, timeout=180)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["status"] == "ok", out
    return out["stdout"].strip()


def tree(gw, sid):
    return json.loads(run(gw, sid, TREE))


def delete_all(gw):
    for s in gw.api("GET", "/v1/sessions").json()["sessions"]:
        gw.api("DELETE", f"/v1/sessions/{s['id']}")
    for s in gw.api("GET", "/v1/snapshots").json()["snapshots"]:
        gw.api("DELETE", f"/v1/snapshots/{s['id']}")


def test_a_fork_into_three_children_that_diverge_on_their_own(gw):
    parent = new_session(gw)["id"]
    try:
        run(gw, parent, SETUP)
        before = tree(gw, parent)
        assert all(v.endswith(" mine") or v.startswith("->") for v in before.values()), before
        r = gw.api("POST", f"/v1/sessions/{parent}/fork", json={"count": 3, "name": "three ways"}, timeout=300)
        assert r.status_code == 201, r.text
        body = r.json()
        snap, children = body["snapshot"], [c["id"] for c in body["sessions"]]
        assert snap["name"] == "three ways" and snap["session"] == parent and snap["mode"] == "files", snap
        assert len(set(children)) == 3 and parent not in children
        for c in body["sessions"]:
            assert c["origin"] == {"snapshot": snap["id"], "source": parent, "mode": "files"}, c
        # New Jupyter kernels too, each its own (what JupyterLab lists).
        kernels = {k["id"]: k for k in gw.api("GET", "/api/kernels").json()}
        for c in children:
            assert c in kernels and kernels[c]["cellgate"]["origin"]["snapshot"] == snap["id"]
        # Each child has the parent's files at the moment of the fork, as its own.
        for c in children:
            assert tree(gw, c) == before
            # A new kernel: the files come along, the variables do not (mode "files").
            assert run(gw, c, "print('x' in dir())") == "False"
        # Each writes: to the shared-looking file, and a file of its own.
        for i, c in enumerate(children):
            run(gw, c, f"open('/workspace/data.txt', 'a').write('child {i}\\n'); open('/workspace/mine-{i}', 'w').write('{i}')")
        run(gw, parent, "open('/workspace/data.txt', 'a').write('parent again\\n'); os.remove('/workspace/blob.bin')")
        for i, c in enumerate(children):
            assert run(gw, c, "print(open('/workspace/data.txt').read())") == f"parent\nchild {i}"
            assert sorted(n for n in run(gw, c, "import os; print(' '.join(os.listdir('/workspace')))").split()
                          if n.startswith("mine-")) == [f"mine-{i}"]
            assert run(gw, c, "import os; print(os.path.exists('/workspace/blob.bin'))") == "True"
        assert run(gw, parent, "print(open('/workspace/data.txt').read())") == "parent\nparent again"
        assert "mine-0" not in run(gw, parent, "print(os.listdir('/workspace'))")
        # Deleting the parent leaves the children (and the snapshot) alone.
        assert gw.api("DELETE", f"/v1/sessions/{parent}").status_code == 204
        for i, c in enumerate(children):
            assert run(gw, c, "print(open('/workspace/mine-%d' % {}).read())".format(i)) == str(i)
        assert gw.api("GET", f"/v1/snapshots/{snap['id']}").status_code == 200
    finally:
        delete_all(gw)


def test_a_session_started_from_a_snapshot_twice_gives_identical_state(gw):
    src = new_session(gw)["id"]
    try:
        run(gw, src, SETUP)
        at_snapshot = tree(gw, src)
        r = gw.api("POST", f"/v1/sessions/{src}/snapshots", json={"name": "baseline"}, timeout=300)
        assert r.status_code == 201, r.text
        snap = r.json()
        assert r.headers["Location"] == f"/v1/snapshots/{snap['id']}"
        assert snap["bytes"] > 0 and snap["mode"] == "files", snap
        # The source runs on and changes after the snapshot: the snapshot does not.
        run(gw, src, "open('/workspace/data.txt', 'w').write('changed later')")
        listed = gw.api("GET", "/v1/snapshots").json()["snapshots"]
        assert [s["id"] for s in listed] == [snap["id"]]
        assert [s["id"] for s in gw.api("GET", f"/v1/sessions/{src}/snapshots").json()["snapshots"]] == [snap["id"]]
        a = new_session(gw, from_snapshot=snap["id"])
        b = new_session(gw, from_snapshot=snap["id"], timeout_s=60)
        assert a["origin"]["snapshot"] == snap["id"] and b["limits"]["timeout_s"] == 60
        assert tree(gw, a["id"]) == at_snapshot == tree(gw, b["id"])
        # The snapshot outlives its source, and a third start still gets the same.
        assert gw.api("DELETE", f"/v1/sessions/{src}").status_code == 204
        run(gw, a["id"], "open('/workspace/data.txt', 'w').write('a was here')")
        c = new_session(gw, from_snapshot=snap["id"])
        assert tree(gw, c["id"]) == at_snapshot
        # And it survives a gateway SIGKILL.
        gw.kill_and_restart()
        assert gw.api("GET", f"/v1/snapshots/{snap['id']}").json()["name"] == "baseline"
        d = new_session(gw, from_snapshot=snap["id"])
        assert tree(gw, d["id"]) == at_snapshot
        # Deleted, it is gone for good.
        assert gw.api("DELETE", f"/v1/snapshots/{snap['id']}").status_code == 204
        assert gw.api("GET", f"/v1/snapshots/{snap['id']}").status_code == 404
        r = gw.api("POST", "/v1/sessions", json={"from_snapshot": snap["id"]})
        assert r.status_code == 404 and "snapshot" in r.json()["message"], r.text
        assert not (gw.state_dir / "snapshots" / snap["id"]).exists()
    finally:
        delete_all(gw)


@pytest.mark.gateway_logic
def test_a_fork_past_the_quota_is_refused_and_makes_nothing(gw):
    parent = new_session(gw)["id"]
    try:
        run(gw, parent, "open('/workspace/f', 'w').write('1')")
        sessions = {s["id"] for s in gw.api("GET", "/v1/sessions").json()["sessions"]}
        workspaces = set(os.listdir(gw.workspace_root))
        # 6 per token: the parent and 5 more fit, 6 do not.
        r = gw.api("POST", f"/v1/sessions/{parent}/fork", json={"count": 6}, timeout=300)
        assert r.status_code == 429, r.text
        assert "none was started" in r.json()["message"], r.text
        assert {s["id"] for s in gw.api("GET", "/v1/sessions").json()["sessions"]} == sessions
        assert gw.api("GET", "/v1/snapshots").json()["snapshots"] == []
        assert set(os.listdir(gw.workspace_root)) == workspaces
        assert not any((gw.state_dir / "snapshots").glob("*")) if (gw.state_dir / "snapshots").exists() else True
        # The parent is untouched and a fork that fits works.
        assert run(gw, parent, "print(open('/workspace/f').read())") == "1"
        r = gw.api("POST", f"/v1/sessions/{parent}/fork", json={"count": 1}, timeout=300)
        assert r.status_code == 201, r.text
    finally:
        delete_all(gw)


@pytest.mark.gateway_logic
def test_snapshots_past_the_tokens_cap_are_refused_until_one_is_deleted(gw):
    s = new_session(gw)["id"]
    try:
        snaps = []
        for i in range(3):
            r = gw.api("POST", f"/v1/sessions/{s}/snapshots", json={"name": f"s{i}"}, timeout=300)
            assert r.status_code == 201, r.text
            snaps.append(r.json()["id"])
        sessions = {x["id"] for x in gw.api("GET", "/v1/sessions").json()["sessions"]}
        for path, body in ((f"/v1/sessions/{s}/snapshots", {}), (f"/v1/sessions/{s}/fork", {"count": 1})):
            r = gw.api("POST", path, json=body, timeout=300)
            assert r.status_code == 429 and "Snapshot limit" in r.json()["message"], r.text
        # Nothing was made by the refused calls.
        assert sorted(x["id"] for x in gw.api("GET", "/v1/snapshots").json()["snapshots"]) == sorted(snaps)
        assert {x["id"] for x in gw.api("GET", "/v1/sessions").json()["sessions"]} == sessions
        assert sorted(p.name for p in (gw.state_dir / "snapshots").iterdir()) == sorted(snaps)
        assert gw.api("DELETE", f"/v1/snapshots/{snaps[0]}").status_code == 204
        r = gw.api("POST", f"/v1/sessions/{s}/snapshots", json={}, timeout=300)
        assert r.status_code == 201, r.text
    finally:
        delete_all(gw)


def test_a_paused_session_can_be_snapshotted_and_its_copy_is_the_childs_own(gw):
    src = new_session(gw)["id"]
    try:
        run(gw, src, "open('/workspace/p.txt', 'w').write('kept while paused')")
        r = gw.api("POST", f"/v1/sessions/{src}/pause", timeout=180)
        assert r.status_code == 200 and r.json()["state"] == "paused", r.text
        r = gw.api("POST", f"/v1/sessions/{src}/snapshots", timeout=300)
        assert r.status_code == 201, r.text
        child = new_session(gw, from_snapshot=r.json()["id"])["id"]
        # Readable, and writable: the copy's files moved to the child's own user.
        assert run(gw, child, "open('/workspace/p.txt', 'a').write('!'); print(open('/workspace/p.txt').read())") == \
            "kept while paused!"
        assert gw.api("GET", f"/v1/sessions/{src}").json()["state"] == "paused"
    finally:
        delete_all(gw)


@pytest.mark.gateway_logic
def test_snapshot_and_fork_refuse_bad_requests_clearly(gw):
    s = new_session(gw)["id"]
    try:
        # What a fork or snapshot body may hold is request_models_test's
        # (snapshot_and_fork_requests); here, that a refusal reaches the wire.
        cases = [
            ("POST", "/v1/sessions/no-such-session/fork", {"count": 1}, 404, "No such"),
            ("POST", "/v1/sessions/no-such-session/snapshots", {}, 404, "No such"),
            ("POST", f"/v1/sessions/{s}/fork", {"count": 17}, 400, "count"),
            ("POST", f"/v1/sessions/{s}/snapshots", {"label": "a"}, 400, "label"),
            ("POST", "/v1/sessions", {"from_snapshot": "no-such-snapshot"}, 404, "snapshot"),
            ("POST", "/v1/sessions", {"from_snapshot": 12}, 400, "from_snapshot"),
            ("GET", "/v1/snapshots/no-such-snapshot", None, 404, "snapshot"),
            ("DELETE", "/v1/snapshots/no-such-snapshot", None, 404, "snapshot"),
        ]
        for method, path, body, status, word in cases:
            r = gw.api(method, path, json=body) if body is not None else gw.api(method, path)
            assert r.status_code == status and word in r.json()["message"], (method, path, body, r.status_code, r.text)
        r = gw.api("POST", f"/v1/sessions/{s}/snapshots", timeout=300)
        assert r.status_code == 201, r.text  # no body at all: a snapshot named by its id
        snap = r.json()
        assert snap["name"] == snap["id"], snap
        r = gw.api("POST", "/v1/sessions", json={"from_snapshot": snap["id"], "kernel": "python3"})
        assert r.status_code == 400 and "from_snapshot" in r.json()["message"], r.text
        # Another token sees none of it.
        other = {"Authorization": "token someone-else"}
        assert gw.api("GET", f"/v1/snapshots/{snap['id']}", headers=other).status_code in (401, 403, 404)
        # The server kept serving throughout.
        assert run(gw, s, "print(1+1)") == "2"
    finally:
        delete_all(gw)
