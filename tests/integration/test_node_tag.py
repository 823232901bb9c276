"""A node's tag in its ids (issue 16, "many boxes"): with --node-tag, every id
the node makes — Jupyter kernels and sessions, /v1 sessions (warm claims and
cold starts), snapshots, forks — is UUID-shaped with the tag as its
first group, so a router sends a request to the owner by the id alone
(volumes are addressed by their names, which the cluster index will route). A bad
tag stops the gateway at start. Real gateway, runc sandboxes."""
import re
import subprocess

from support.gateway import Gateway
from support.prerequisites import GATEWAY

TAG = "c0ffee42"
SHAPE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def owned(i):
    assert SHAPE.match(i), i
    assert i.startswith(TAG + "-"), i
    return i


def test_every_id_a_tagged_node_makes_carries_its_tag():
    g = Gateway("--node-tag", TAG, "--pool-size", "1").start()
    made = []
    try:
        assert f'cellgate_node_info{{tag="{TAG}"}} 1' in g.api("GET", "/metrics").text
        k = g.api("POST", "/api/kernels", json={"name": "python3"})
        assert k.status_code == 201, k.text
        owned(k.json()["id"])
        made.append(("/api/kernels/", k.json()["id"]))
        s = g.api("POST", "/api/sessions", json={"path": "a.ipynb", "type": "notebook", "kernel": {"id": k.json()["id"]}})
        assert s.status_code == 201, s.text
        owned(s.json()["id"])
        # Two /v1 sessions: one takes the warm kernel, the other waits for a start.
        v1 = [g.api("POST", "/v1/sessions", json={}) for _ in range(2)]
        for r in v1:
            assert r.status_code == 201, r.text
            owned(r.json()["id"])
            made.append(("/v1/sessions/", r.json()["id"]))
        sid = v1[0].json()["id"]
        assert g.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "open('f', 'w').write('x')"}).json()["status"] == "ok"
        snap = g.api("POST", f"/v1/sessions/{sid}/snapshots", json={})
        assert snap.status_code == 201, snap.text
        owned(snap.json()["id"])
        fork = g.api("POST", f"/v1/sessions/{sid}/fork", json={"count": 1})
        assert fork.status_code == 201, fork.text
        for child in fork.json()["sessions"]:
            owned(child["id"])
            made.append(("/v1/sessions/", child["id"]))
        g.api("DELETE", f"/v1/snapshots/{snap.json()['id']}")
    finally:
        for prefix, i in made:
            g.api("DELETE", prefix + i)
        g.stop()
        g.cleanup()


def test_a_bad_node_tag_stops_the_gateway_at_start():
    for bad in ("node-1", "C0FFEE42", "c0ffee4"):
        r = subprocess.run([str(GATEWAY), "--node-tag", bad, "--port", "0"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2, (bad, r.returncode, r.stderr)
        assert "--node-tag must be 8 lowercase hex digits" in r.stderr
