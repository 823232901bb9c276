"""Many boxes as one cellgate (issue 16, Part 2), all real on loopback: a
3-member etcd, three cellgate nodes (runc sandboxes), Debian's HAProxy with
the config `deploy/cellgate-router config` writes, kept in step with etcd by
`cellgate-router sync` through HAProxy's runtime API.

Through the router: creates land on the nodes and every later request for an
id (REST, /v1, the kernel's WebSocket) reaches the node whose tag the id
carries. A node asked directly for another node's id relays the request to
its owner (the internal hop), streams and WebSockets included. SIGKILL of a node: its ids answer 410
once its lease expires, the other nodes' sessions keep working and creates
land on them, and lists (answered by any node for the whole cluster) drop
them. An id no node made answers 404. A tenant's cap holds across the
cluster under concurrent creates (compare-and-swap in etcd), and a session
that ends gives its place back."""
import json
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from support.cluster import EtcdCluster, Router, cluster_missing, node
from support.waiting import wait_for
from support.gateway import KernelChannel

TTL = 3
QUOTA = 8  # the tenant's cap, on every node: the cluster holds at most this many of its sessions
TAGS = ["11110001", "22220002", "33330003"]
TOKEN = "cluster-token-" + uuid.uuid4().hex[:8]
# A second tenant beside the first, with a cap of its own, on every node.
TOKEN_B = "cluster-tenant-b-" + uuid.uuid4().hex[:8]
QUOTA_B = 2


@pytest.fixture(scope="module")
def cluster():
    why = cluster_missing()
    if why:
        from support.prerequisites import require
        require("the cluster tests", why)
    etcd = EtcdCluster().start()
    nodes, router = [], None
    config = Path(tempfile.mkdtemp(prefix="cellgate-cluster-config-")) / "config.json"
    config.write_text(json.dumps({"tokens": [{"token": TOKEN_B, "tenant": "b", "max_sessions": QUOTA_B}]}))
    try:
        for i, tag in enumerate(TAGS):
            nodes.append(node(10 + i, tag, etcd, "--lease-ttl", str(TTL), "--pool-size", "1",
                              "--max-kernels-per-tenant", str(QUOTA), "--config", str(config),
                              token=TOKEN).start())
        router = Router(etcd, TOKEN).start()
        end = time.monotonic() + 30
        while time.monotonic() < end and set(router.owners()) != set(TAGS):
            time.sleep(0.2)
        assert set(router.owners()) == set(TAGS), router.log_text()
        yield etcd, nodes, router
    finally:
        if router:
            router.cleanup()
        for n in nodes:
            n.stop()
            n.cleanup()
        etcd.cleanup()
        config.unlink(missing_ok=True)
        config.parent.rmdir()


def owner_of(nodes, sid):
    return next(n for n, tag in zip(nodes, TAGS) if sid.startswith(tag + "-"))


def six_times_seven_over_websocket(gateway, kid):
    """A cell on the kernel's Jupyter WebSocket, opened through `gateway`."""
    ch = KernelChannel(gateway, kid)
    try:
        res = ch.execute("print(6 * 7)")
        assert res["reply"]["status"] == "ok" and res["stdout"].strip() == "42", res
    finally:
        ch.ws.close()


def test_creates_spread_and_each_id_reaches_its_own_node(cluster):
    etcd, nodes, router = cluster
    made = []
    try:
        for i in range(QUOTA):  # all on one node by chance: 3 in 3^8
            r = router.api("POST", "/v1/sessions", json={"env": {"KERNEL_N": str(i)}})
            assert r.status_code == 201, r.text
            made.append(r.json()["id"])
        tags = {sid[:8] for sid in made}
        assert tags <= set(TAGS)
        assert len(tags) >= 2, f"{len(made)} creates all landed on one node: {made}"
        for i, sid in enumerate(made):
            out = router.api("POST", f"/v1/sessions/{sid}/execute",
                             json={"code": "import os; print(os.environ['KERNEL_N'])"}).json()
            assert out["status"] == "ok" and out["stdout"].strip() == str(i), out
            # The owner holds it; the others do not (asked as a relayed
            # request, which a node never passes on again).
            owner = owner_of(nodes, sid)
            assert owner.api("GET", f"/v1/sessions/{sid}").status_code == 200
            for other in nodes:
                if other is not owner and other.alive():
                    r = other.api("GET", f"/v1/sessions/{sid}", headers={"X-Cellgate-Hop": "test"})
                    assert r.status_code == 404, r.text
    finally:
        for sid in made:
            router.api("DELETE", f"/v1/sessions/{sid}")


def test_a_kernels_websocket_through_the_router_lands_on_its_node(cluster):
    etcd, nodes, router = cluster
    k = router.api("POST", "/api/kernels", json={"name": "python3"})
    assert k.status_code == 201, k.text
    kid = k.json()["id"]
    try:
        owner = owner_of(nodes, kid)
        six_times_seven_over_websocket(router, kid)
        # The kernel the socket reached is the owner's: its execution count moved there.
        assert owner.api("GET", f"/api/kernels/{kid}").json()["execution_state"] in ("idle", "busy")
        assert router.api("GET", f"/api/kernels/{kid}").json()["id"] == kid
    finally:
        router.api("DELETE", f"/api/kernels/{kid}")


def test_lists_span_the_cluster_on_every_node(cluster):
    etcd, nodes, router = cluster
    mine = [n.api("POST", "/v1/sessions", json={}).json()["id"] for n in nodes]
    k = nodes[1].api("POST", "/api/kernels", json={"name": "python3"}).json()["id"]
    s = nodes[2].api("POST", "/api/sessions", json={"path": "c.ipynb", "type": "notebook",
                                                    "kernel": {"name": "python3"}}).json()
    try:
        # Asked of the router (any node) or of each node directly: the whole cluster's.
        for via in [router, *nodes]:
            listed = {x["id"] for x in via.api("GET", "/v1/sessions").json()["sessions"]}
            assert set(mine) <= listed, (via.url, mine, listed)
            kernels = via.api("GET", "/api/kernels")
            assert kernels.status_code == 200 and "X-Cellgate-Unreachable" not in kernels.headers
            assert {k, *mine} <= {x["id"] for x in kernels.json()}
            assert s["id"] in {x["id"] for x in via.api("GET", "/api/sessions").json()}
        # A node's own part only, when asked for it.
        local = nodes[0].api("GET", "/v1/sessions", headers={"X-Cellgate-Scope": "node"}).json()["sessions"]
        assert {x["id"] for x in local} & set(mine) == {mine[0]}
        # Another tenant's token sees none of them (each node checks the caller itself).
        other = router.api("GET", "/api/kernels", headers={"Authorization": "token wrong-token-123"})
        assert other.status_code == 403
    finally:
        for sid in mine:
            router.api("DELETE", f"/v1/sessions/{sid}")
        router.api("DELETE", f"/api/sessions/{s['id']}")
        router.api("DELETE", f"/api/kernels/{s['kernel']['id']}")
        router.api("DELETE", f"/api/kernels/{k}")


def test_jupyterlab_services_through_the_router(cluster):
    """@jupyterlab/services (npm, unmodified) pointed at the router."""
    import os
    import subprocess
    from support.prerequisites import REPO, node_missing, node_test, npm_ci, require
    require("@jupyterlab/services through the router", node_missing("npm"))
    here = REPO / "tests" / "clients" / "jupyterlab"
    npm_ci(here, "@jupyterlab/services", env={"PUPPETEER_SKIP_DOWNLOAD": "1", "PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD": "1"})
    etcd, nodes, router = cluster
    r = subprocess.run(node_test("cluster.test.mjs"), cwd=here, capture_output=True,
                       text=True, timeout=300,
                       env={**os.environ, "CELLGATE_URL": router.url, "CELLGATE_TOKEN": TOKEN,
                            "CELLGATE_NODE_TAGS": ",".join(TAGS), "NODE_NO_WARNINGS": "1"})
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]
    assert "the kernel list, through any node" in r.stdout


def test_the_python_sdk_through_the_router(cluster):
    """Our SDK (clients/python), pointed at the router: create, run (plain and
    streamed over SSE), upload and download, list, fork, close."""
    import sys
    from support.prerequisites import REPO
    sys.path.insert(0, str(REPO / "clients" / "python"))
    from cellgate import Sandbox
    etcd, nodes, router = cluster
    boxes = [Sandbox(router.url, TOKEN) for _ in range(3)]
    try:
        for i, sb in enumerate(boxes):
            assert sb.id[:8] in TAGS
            ex = sb.run_code(f"x = {i}\nx * 10")
            assert ex.ok and ex.text == str(i * 10), ex.raw
            streamed = []
            ex = sb.run_code("print('streamed')", on_stdout=streamed.append)
            assert ex.ok and "".join(streamed).strip() == "streamed"
            sb.upload("data.txt", f"box {i}".encode())
            assert sb.download("data.txt") == f"box {i}".encode()
        listed = {s.id for s in Sandbox.list(router.url, TOKEN)}
        assert {sb.id for sb in boxes} <= listed
        with boxes[0].fork(count=1) as forked:
            child = forked.sandboxes[0]
            assert child.id[:8] == boxes[0].id[:8], "a fork's children live on their source's node"
            assert child.download("data.txt") == b"box 0"
        from cellgate import delete_snapshot
        delete_snapshot(forked.snapshot.id, router.url, TOKEN)
    finally:
        for sb in boxes:
            sb.close()


def test_the_e2b_planes_through_the_router(cluster):
    """E2B's control plane (/e2b/sandboxes/<id>) and sandbox plane (the
    E2b-Sandbox-Id header) reach the sandbox's node through the router."""
    import json as _json
    etcd, nodes, router = cluster
    key = {"X-API-KEY": TOKEN}
    made = []
    try:
        for _ in range(3):
            r = router.api("POST", "/e2b/sandboxes", json={"templateID": "code-interpreter-v1"}, headers=key)
            assert r.status_code == 201, r.text
            made.append(r.json())
        assert {sb["sandboxID"][:8] for sb in made} <= set(TAGS)
        for i, sb in enumerate(made):
            sid = sb["sandboxID"]
            got = router.api("GET", f"/e2b/sandboxes/{sid}", headers=key)
            assert got.status_code == 200 and got.json()["sandboxID"] == sid, got.text
            plane = {"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49999",
                     "E2B-Traffic-Access-Token": sb["trafficAccessToken"]}
            r = router.api("POST", "/e2b/execute", json={"code": f"print({i} + 100)"}, headers=plane)
            assert r.status_code == 200, r.text
            lines = [_json.loads(x) for x in r.text.splitlines() if x.strip()]
            assert any(x.get("type") == "stdout" and x.get("text", "").strip() == str(i + 100) for x in lines), lines
    finally:
        for sb in made:
            router.api("DELETE", f"/e2b/sandboxes/{sb['sandboxID']}", headers=key)


def test_snapshots_and_e2b_lists_span_the_cluster(cluster):
    """A snapshot is kept on the node that took it: a start from it asked of
    any other node runs there (/v1 `from_snapshot`, E2B's templateID), and it
    is listed from every node after its session has ended (the index names
    nodes holding a tenant's snapshots too). E2B's sandbox list is the
    cluster's, and its pages (limit + nextToken, asked of a different node
    each time) walk every sandbox once, oldest first."""
    etcd, nodes, router = cluster
    key = {"X-API-KEY": TOKEN}
    made, sandboxes, snap = [], [], None
    try:
        src = nodes[0].api("POST", "/v1/sessions", json={}).json()["id"]
        made.append(src)
        r = nodes[0].api("POST", f"/v1/sessions/{src}/execute",
                         json={"code": "open('note.txt', 'w').write('kept on node 0')"})
        assert r.status_code == 200 and r.json()["status"] == "ok", r.text
        r = nodes[0].api("POST", f"/v1/sessions/{src}/snapshots", json={"name": "base"}, timeout=120)
        assert r.status_code == 201, r.text
        snap = r.json()["id"]
        assert snap.startswith(TAGS[0] + "-")
        router.api("DELETE", f"/v1/sessions/{made.pop()}")
        # Asked of another node: started on the snapshot's, with its files.
        r = nodes[1].api("POST", "/v1/sessions", json={"from_snapshot": snap})
        assert r.status_code == 201, r.text
        child = r.json()["id"]
        made.append(child)
        assert child.startswith(TAGS[0] + "-") and r.headers.get("Location") == f"/v1/sessions/{child}"
        r = router.api("POST", f"/v1/sessions/{child}/execute", json={"code": "print(open('note.txt').read())"})
        assert r.json()["stdout"].strip() == "kept on node 0", r.text
        r = nodes[2].api("POST", "/e2b/sandboxes", json={"templateID": snap}, headers=key)
        assert r.status_code == 201 and r.json()["sandboxID"].startswith(TAGS[0] + "-"), r.text
        sandboxes.append(r.json()["sandboxID"])
        router.api("DELETE", f"/v1/sessions/{made.pop()}")
        time.sleep(2.5)  # past the index's grace for a node's last session
        for n in nodes:
            listed = n.api("GET", "/v1/snapshots").json()["snapshots"]
            assert snap in [x["id"] for x in listed], (n.url, listed)
            e2b = n.api("GET", "/e2b/snapshots", headers=key)
            assert e2b.status_code == 200 and snap in [x["snapshotID"] for x in e2b.json()], (n.url, e2b.text)
        # E2B sandboxes: one made on each node.
        for n in nodes[1:]:
            r = n.api("POST", "/e2b/sandboxes", json={"templateID": "code-interpreter-v1"}, headers=key)
            assert r.status_code == 201, r.text
            sandboxes.append(r.json()["sandboxID"])
        assert {x[:8] for x in sandboxes} == set(TAGS)
        for n in nodes:
            r = n.api("GET", "/e2b/v2/sandboxes", headers=key)
            assert r.status_code == 200 and "X-Cellgate-Unreachable" not in r.headers, r.text
            assert {x["sandboxID"] for x in r.json()} == set(sandboxes), (n.url, r.text)
        seen, token = [], None
        for page in range(len(sandboxes) + 1):
            q = "?limit=1" + (f"&nextToken={token}" if token else "")
            r = nodes[page % len(nodes)].api("GET", "/e2b/v2/sandboxes" + q, headers=key)
            assert r.status_code == 200 and len(r.json()) <= 1, r.text
            seen += r.json()
            token = r.headers.get("X-Next-Token")
            if not token:
                break
        assert [x["sandboxID"] for x in seen] == [x["sandboxID"] for x in sorted(
            seen, key=lambda x: (x["startedAt"], x["sandboxID"]))]
        assert sorted(x["sandboxID"] for x in seen) == sorted(sandboxes)
    finally:
        for sid in made:
            router.api("DELETE", f"/v1/sessions/{sid}")
        for sb in sandboxes:
            router.api("DELETE", f"/e2b/sandboxes/{sb}", headers=key)
        if snap:
            router.api("DELETE", f"/v1/snapshots/{snap}")


def hops(n):
    for line in n.api("GET", "/metrics").text.splitlines():
        if line.startswith("cellgate_cluster_hops_total "):
            return float(line.split()[1])
    raise AssertionError("no cellgate_cluster_hops_total")


def test_a_node_asked_for_another_nodes_id_relays_it(cluster):
    """The internal hop: a client that reaches a node directly with an id
    another node made gets its answer from the owner: REST with bodies both
    ways, an event stream, the kernel's WebSocket, the E2B sandbox plane's
    streamed execute. The caller's token is checked before anything is
    relayed."""
    import json as _json
    import os
    etcd, nodes, router = cluster
    owner, other = nodes[0], nodes[1]
    sid = owner.api("POST", "/v1/sessions", json={}).json()["id"]
    kid = owner.api("POST", "/api/kernels", json={"name": "python3"}).json()["id"]
    key = {"X-API-KEY": TOKEN}
    sb = owner.api("POST", "/e2b/sandboxes", json={"templateID": "code-interpreter-v1"}, headers=key).json()
    try:
        before = hops(other)
        assert other.api("GET", f"/v1/sessions/{sid}").json()["id"] == sid
        out = other.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "x = 20\nprint(x + 1)"}).json()
        assert out["status"] == "ok" and out["stdout"].strip() == "21", out
        # A body larger than one read, each way.
        blob = os.urandom(3 << 20)
        r = other.api("PUT", f"/v1/sessions/{sid}/files/blob.bin", data=blob,
                      headers={"Content-Type": "application/octet-stream"})
        assert r.status_code in (200, 201), r.text
        back = other.api("GET", f"/v1/sessions/{sid}/files/blob.bin")
        assert back.status_code == 200 and back.content == blob
        out = owner.api("POST", f"/v1/sessions/{sid}/execute",
                        json={"code": "import os; print(os.path.getsize('blob.bin'), x)"}).json()
        assert out["stdout"].split() == [str(len(blob)), "20"], out
        # An event stream, relayed as it comes.
        r = other.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print('streamed')"},
                      headers={"Accept": "text/event-stream"}, stream=True)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/event-stream")
        text = "".join(chunk.decode() for chunk in r.iter_content(None))
        assert "streamed" in text and "event:" in text, text
        # The kernel's WebSocket, through the node that does not hold it.
        six_times_seven_over_websocket(other, kid)
        assert other.api("GET", f"/api/kernels/{kid}").json()["execution_state"] in ("idle", "busy")
        # The E2B sandbox plane: its per-sandbox token is the owner's to check.
        plane = {"E2b-Sandbox-Id": sb["sandboxID"], "E2b-Sandbox-Port": "49999",
                 "E2B-Traffic-Access-Token": sb["trafficAccessToken"]}
        r = other.api("POST", "/e2b/execute", json={"code": "print(7 * 6)"}, headers=plane)
        assert r.status_code == 200, r.text
        lines = [_json.loads(x) for x in r.text.splitlines() if x.strip()]
        assert any(x.get("type") == "stdout" and x.get("text", "").strip() == "42" for x in lines), lines
        bad = other.api("POST", "/e2b/execute", json={"code": "1"},
                        headers={**plane, "E2B-Traffic-Access-Token": "wrong"})
        assert bad.status_code in (401, 403), bad.text
        assert hops(other) >= before + 8
        # No token, or a wrong one: refused by the node asked, nothing relayed.
        counted = hops(other)
        import requests
        assert requests.get(f"{other.url}/v1/sessions/{sid}", timeout=30).status_code == 401
        assert requests.get(f"{other.url}/v1/sessions/{sid}", headers={"Authorization": "token nope"},
                            timeout=30).status_code == 403
        assert hops(other) == counted
    finally:
        owner.api("DELETE", f"/v1/sessions/{sid}")
        owner.api("DELETE", f"/api/kernels/{kid}")
        owner.api("DELETE", f"/e2b/sandboxes/{sb['sandboxID']}", headers=key)


def shell(via, name, command, marker):
    """Runs `command` in terminal `name` over its WebSocket, opened through `via`; its output up to `marker`."""
    import websocket
    ws = websocket.create_connection(f"{via.ws_url}/terminals/websocket/{name}?token={TOKEN}", timeout=30)
    try:
        assert json.loads(ws.recv()) == ["setup", {}]
        ws.send(json.dumps(["stdin", command + "\r"]))
        out, end = "", time.monotonic() + 30
        while marker not in out:
            assert time.monotonic() < end, f"no {marker!r} from terminal {name}: {out!r}"
            m = json.loads(ws.recv())
            if m[0] == "stdout":
                out += m[1]
        return out
    finally:
        ws.close()


def test_a_terminal_runs_beside_its_kernel_whichever_node_is_asked(cluster):
    """Terminals across the cluster: a node names its terminals after its
    tag, so the router and the internal hop bring each one's REST and
    WebSocket to the node whose sandbox runs it; a POST that lands on
    another node goes on to the kernel's (the one named, or the caller's most
    recently active across the cluster); the list is the cluster's."""
    etcd, nodes, router = cluster
    kids = [n.api("POST", "/api/kernels", json={"name": "python3"}).json()["id"] for n in nodes[:2]]
    names = []
    try:
        for kid in kids:
            r = router.api("PUT", f"/api/contents/{kid}/marker.txt",
                           json={"type": "file", "format": "text", "content": f"workspace of {kid}"})
            assert r.status_code in (200, 201), r.text
        # Named, asked of the node that runs neither kernel: made on the kernel's node.
        r = nodes[2].api("POST", "/api/terminals", json={"kernel_id": kids[1]})
        assert r.status_code == 200, r.text
        t = r.json()
        names.append(t["name"])
        assert t["name"].startswith(TAGS[1] + "-") and t["kernel_id"] == kids[1], t
        out = shell(router, t["name"], "cat marker.txt; echo; echo end-$((6*7))", "end-42")
        assert f"workspace of {kids[1]}" in out, out
        # Its WebSocket through a node that does not run it (the internal hop).
        assert f"workspace of {kids[1]}" in shell(nodes[0], t["name"], "cat marker.txt; echo; echo e-$((6*7))", "e-42")
        # Unnamed: beside the caller's most recently active kernel, wherever it runs.
        for last, asked in ((0, nodes[1]), (1, nodes[0]), (0, nodes[2])):
            six_times_seven_over_websocket(router, kids[last])
            r = asked.api("POST", "/api/terminals", json={})
            assert r.status_code == 200, r.text
            names.append(r.json()["name"])
            assert r.json()["kernel_id"] == kids[last] and r.json()["name"].startswith(TAGS[last] + "-"), r.json()
        # A name of the caller's own gets the node's tag in front.
        r = router.api("POST", "/api/terminals", json={"kernel_id": kids[0], "name": "mine"})
        assert r.status_code == 200 and r.json()["name"] == TAGS[0] + "-mine", r.text
        names.append(r.json()["name"])
        assert router.api("POST", "/api/terminals", json={"kernel_id": kids[0], "name": "mine"}).status_code == 409
        # Every node lists them all; each one's model comes from its node, asked of any.
        for via in [router, *nodes]:
            listed = via.api("GET", "/api/terminals")
            assert listed.status_code == 200 and "X-Cellgate-Unreachable" not in listed.headers
            assert set(names) <= {x["name"] for x in listed.json()}, (via.url, listed.json())
            assert via.api("GET", f"/api/terminals/{names[0]}").json()["kernel_id"] == kids[1]
        # Closed through a node that does not run it: gone everywhere.
        assert nodes[2].api("DELETE", f"/api/terminals/{names[-1]}").status_code == 204
        assert router.api("GET", f"/api/terminals/{names[-1]}").status_code == 404
        names.pop()
        # A kernel no live node has: 404, whichever node is asked.
        ghost = TAGS[1] + "-0000-4000-8000-000000000000"
        assert nodes[0].api("POST", "/api/terminals", json={"kernel_id": ghost}).status_code == 404
    finally:
        for name in names:
            router.api("DELETE", f"/api/terminals/{name}")
        for kid in kids:
            router.api("DELETE", f"/api/kernels/{kid}")


def test_an_id_no_node_made_is_404_through_the_router(cluster):
    etcd, nodes, router = cluster
    r = router.api("GET", "/v1/sessions/99999999-0000-4000-8000-000000000000")
    assert r.status_code == 404 and r.json()["reason"] == "Not Found", r.text
    # An id of a live node that does not exist there: the node itself answers 404.
    r = router.api("GET", f"/v1/sessions/{TAGS[0]}-0000-4000-8000-000000000000")
    assert r.status_code == 404, r.text


def held(etcd):
    r = etcd.ctl("get", "--prefix", "--keys-only", "-w", "json", "/cellgate/admit/")
    return int(json.loads(r.stdout).get("count", 0))


def test_a_tenants_cap_holds_across_the_cluster_under_concurrent_creates(cluster):
    import threading
    etcd, nodes, router = cluster
    end = time.monotonic() + 15
    while held(etcd) and time.monotonic() < end:
        time.sleep(0.2)
    assert held(etcd) == 0, "earlier tests' sessions still hold places"
    results, burst = [], 14
    lock = threading.Lock()

    def create():
        r = router.api("POST", "/v1/sessions", json={})
        with lock:
            results.append(r)

    threads = [threading.Thread(target=create) for _ in range(burst)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    made = [r.json()["id"] for r in results if r.status_code == 201]
    try:
        assert sorted(r.status_code for r in results) == [201] * QUOTA + [429] * (burst - QUOTA), \
            [(r.status_code, r.text[:120]) for r in results]
        assert len({sid[:8] for sid in made}) >= 2, f"all {QUOTA} on one node: the cap was not tested across nodes"
        for r in results:
            if r.status_code == 429:
                assert "across the cluster" in r.json()["message"], r.text
        assert held(etcd) == QUOTA
    finally:
        for sid in made:
            router.api("DELETE", f"/v1/sessions/{sid}")
    # Ended sessions give their places back within a few seconds.
    end = time.monotonic() + 15
    while held(etcd) and time.monotonic() < end:
        time.sleep(0.2)
    assert held(etcd) == 0
    again = router.api("POST", "/v1/sessions", json={})
    assert again.status_code == 201, again.text
    router.api("DELETE", f"/v1/sessions/{again.json()['id']}")


def test_a_fork_counts_its_children_once_against_the_cluster_cap(cluster):
    """A fork's children are reserved once, before its snapshot: with 4 of
    the cap's 8 held, a fork of 3 fits (7) and then a fork of 2 does not (9),
    leaving nothing made."""
    etcd, nodes, router = cluster
    end = time.monotonic() + 15
    while held(etcd) and time.monotonic() < end:
        time.sleep(0.2)
    assert held(etcd) == 0, "earlier tests' sessions still hold places"
    made = []
    try:
        for _ in range(4):
            r = router.api("POST", "/v1/sessions", json={})
            assert r.status_code == 201, r.text
            made.append(r.json()["id"])
        parent = made[0]
        router.api("POST", f"/v1/sessions/{parent}/execute", json={"code": "open('seed.txt', 'w').write('1234')"})
        r = router.api("POST", f"/v1/sessions/{parent}/fork", json={"count": 3}, timeout=300)
        assert r.status_code == 201, r.text
        children = [c["id"] for c in r.json()["sessions"]]
        made += children
        assert len(children) == 3 and all(c[:8] == parent[:8] for c in children), children
        for c in children:
            out = router.api("POST", f"/v1/sessions/{c}/execute", json={"code": "print(open('seed.txt').read())"}).json()
            assert out["stdout"].strip() == "1234", out
        assert held(etcd) == 7
        over = router.api("POST", f"/v1/sessions/{parent}/fork", json={"count": 2}, timeout=300)
        assert over.status_code == 429 and "across the cluster" in over.json()["message"], over.text
        assert held(etcd) == 7
    finally:
        for sid in made:
            router.api("DELETE", f"/v1/sessions/{sid}")


def held_by(etcd, tenant):
    r = etcd.ctl("get", "--prefix", "--keys-only", "-w", "json", f"/cellgate/admit/{tenant.encode().hex()}/")
    return int(json.loads(r.stdout).get("count", 0))


def test_a_second_tenant_keeps_its_own_cap_and_sees_none_of_the_firsts(cluster):
    """Two tenants on one cluster: the first at its cap (8) leaves the second
    its own (2), each cap counted across the nodes; neither lists the other's
    sessions from any node, and an id of the other's is 404 whether it goes
    through the router or to a node that relays it to its owner."""
    etcd, nodes, router = cluster
    end = time.monotonic() + 15
    while held(etcd) and time.monotonic() < end:
        time.sleep(0.2)
    assert held(etcd) == 0, "earlier tests' sessions still hold places"
    b = {"Authorization": f"token {TOKEN_B}"}
    made_a, made_b = [], []
    try:
        for _ in range(QUOTA):
            r = router.api("POST", "/v1/sessions", json={})
            assert r.status_code == 201, r.text
            made_a.append(r.json()["id"])
        over = router.api("POST", "/v1/sessions", json={})
        assert over.status_code == 429 and "across the cluster" in over.json()["message"], over.text
        for _ in range(QUOTA_B):
            r = router.api("POST", "/v1/sessions", json={}, headers=b)
            assert r.status_code == 201, r.text  # the first tenant's full cap is not the second's
            made_b.append(r.json()["id"])
        over_b = router.api("POST", "/v1/sessions", json={}, headers=b)
        assert over_b.status_code == 429 and "across the cluster" in over_b.json()["message"], over_b.text
        assert (held_by(etcd, "b"), held(etcd)) == (QUOTA_B, QUOTA + QUOTA_B)
        for n in nodes:  # every node lists each tenant's own sessions, and only those
            mine_a = {x["id"] for x in n.api("GET", "/v1/sessions").json()["sessions"]}
            mine_b = {x["id"] for x in n.api("GET", "/v1/sessions", headers=b).json()["sessions"]}
            assert mine_a == set(made_a) and mine_b == set(made_b), (n.url, mine_a, mine_b)
        sid_b = made_b[0]
        stranger = next(n for n, tag in zip(nodes, TAGS) if not sid_b.startswith(tag + "-"))
        for via in (router, owner_of(nodes, sid_b), stranger):
            r = via.api("POST", f"/v1/sessions/{sid_b}/execute", json={"code": "1+1"})
            assert r.status_code == 404, (via.url, r.status_code, r.text)
            r = via.api("POST", f"/v1/sessions/{sid_b}/execute", json={"code": "print(6*7)"}, headers=b)
            assert r.status_code == 200 and r.json()["stdout"].strip() == "42", (via.url, r.text)
    finally:
        for sid in made_a:
            router.api("DELETE", f"/v1/sessions/{sid}")
        for sid in made_b:
            router.api("DELETE", f"/v1/sessions/{sid}", headers=b)


def holders(etcd, tenant):
    """The tags the cluster's index names as holding some of the tenant's
    kernels, and each key's lease (hex)."""
    prefix = f"/cellgate/holders/{tenant.encode().hex()}/"
    r = etcd.ctl("get", "--prefix", "-w", "json", prefix)
    assert r.returncode == 0, r.stderr
    import base64
    return {base64.b64decode(kv["key"]).decode()[len(prefix):]: format(int(kv.get("lease", 0)), "x")
            for kv in json.loads(r.stdout).get("kvs") or []}


def test_the_index_names_the_nodes_holding_a_tenants_sessions_and_lists_ask_only_them(cluster):
    """etcd's index (`holders/<tenant>/<tag>`, on the node's lease) names a
    node as soon as a create of the tenant's is admitted there, is written
    again when it goes missing (it can be rebuilt from the nodes), and drops
    the node once it holds none of the tenant's sessions. A tenant's list asks
    only the nodes it names: with a third node frozen (SIGSTOP), the second
    tenant's list from any other node is whole and names no node it could
    not reach, while the first tenant's, which that node holds some of,
    names it."""
    import signal
    etcd, nodes, router = cluster
    b = {"Authorization": f"token {TOKEN_B}"}
    # The previous test ended tenant b's sessions just now: a node drops its
    # index key at its next refresh (a third of the TTL), not at the delete.
    wait_for(lambda: holders(etcd, "b") == {}, "earlier tests' sessions of tenant b to leave the index",
             timeout=TTL * 3)
    sid_b = nodes[0].api("POST", "/v1/sessions", json={}, headers=b).json()["id"]
    sid_a = nodes[2].api("POST", "/v1/sessions", json={}).json()["id"]
    frozen = False
    try:
        node_lease = etcd.get(f"/cellgate/nodes/{TAGS[0]}")[1]
        # Written before the create answered: no wait.
        assert holders(etcd, "b") == {TAGS[0]: node_lease}
        assert TAGS[2] in holders(etcd, "default")
        # Rebuilt when lost: the node's next refresh (a third of the TTL) puts it back.
        assert etcd.ctl("del", f"/cellgate/holders/{'b'.encode().hex()}/{TAGS[0]}").returncode == 0
        wait_for(lambda: holders(etcd, "b") == {TAGS[0]: node_lease}, "the index to be rebuilt", timeout=TTL * 3)
        nodes[2].proc.send_signal(signal.SIGSTOP)
        frozen = True
        r = nodes[1].api("GET", "/v1/sessions", headers=b)
        assert r.status_code == 200 and "X-Cellgate-Unreachable" not in r.headers, (r.status_code, r.headers)
        assert [x["id"] for x in r.json()["sessions"]] == [sid_b]
        r = nodes[1].api("GET", "/v1/sessions")
        assert r.headers.get("X-Cellgate-Unreachable") == TAGS[2], (r.status_code, r.headers)
    finally:
        if frozen:
            nodes[2].proc.send_signal(signal.SIGCONT)
        # The frozen node may have lost its lease meanwhile: it joins again.
        wait_for(lambda: set(router.owners()) == set(TAGS), "every node to be routed again")
        router.api("DELETE", f"/v1/sessions/{sid_a}")
        router.api("DELETE", f"/v1/sessions/{sid_b}", headers=b)
    wait_for(lambda: holders(etcd, "b") == {}, "the index to drop the node with no session of tenant b",
             timeout=TTL * 3)


def metric(g, name):
    for line in g.api("GET", "/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_h4_an_unauthenticated_put_of_a_node_record_is_refused(cluster):
    """Security review turn 3, H4: etcd takes no client without a certificate
    from the cluster's CA: not etcdctl with the CA alone, not a certificate
    from another CA, not plain HTTP on its port."""
    import ssl
    import urllib.request
    from support.pki import Pki
    etcd, nodes, router = cluster
    key, value = "/cellgate/nodes/deadbeef", json.dumps({"tag": "deadbeef", "address": "127.0.0.1:9"})
    r = etcd.ctl("put", key, value, credentials=False, command_timeout="1s")
    assert r.returncode != 0, r.stdout
    rogue = Pki(etcd.dir / "rogue-pki", name="rogue-ca")
    endpoint = etcd.endpoints.split(",")[0]
    body = json.dumps({"key": "L2NlbGxnYXRlL25vZGVzL2RlYWRiZWVm", "value": "e30="}).encode()
    for context in (ssl.create_default_context(cafile=str(etcd.pki.ca)), None):
        if context is not None:
            context.load_cert_chain(str(rogue.client[0]), str(rogue.client[1]))
        url = endpoint if context is not None else endpoint.replace("https://", "http://")
        with pytest.raises(OSError):  # the TLS handshake fails, or the plain request gets no answer
            urllib.request.urlopen(urllib.request.Request(url + "/v3/kv/put", data=body), context=context, timeout=5)
    assert etcd.get(key) == (None, None)
    # With the cluster's client certificate the same put is taken: the refusals above are the certificate's.
    control = "/cellgate/h4-control"
    assert etcd.ctl("put", control, value).returncode == 0
    assert etcd.ctl("del", control).returncode == 0


def test_h4_a_forged_peer_in_etcd_receives_no_token(cluster):
    """Security review turn 3, H4: a node record that the nodes did not sign
    (written by anyone who got at etcd) names no peer: lists, hops and the
    router send it nothing. And a peer the nodes do take is sent no token:
    it gets the node's signed word for the tenant, which no other node
    takes, and which its own node takes once."""
    from support.cluster import Listener, vouch
    etcd, nodes, router = cluster
    secret = etcd.pki.secret.read_bytes().rstrip(b"\n")
    listener = Listener()
    forged, signed = "deadbeef", "deadbee0"
    tenant_hex = "default".encode().hex()
    keys = []

    def put(key, value):
        assert etcd.ctl("put", key, value).returncode == 0
        keys.append(key)

    def ask_everything(n, tag):
        for path, params, headers in (("/v1/sessions", {}, {}), ("/api/kernels", {}, {}),
                                      ("/api/sessions", {"token": TOKEN}, {"Authorization": None}),
                                      ("/api/terminals", {}, {}), ("/e2b/sandboxes", {}, {"X-API-Key": TOKEN})):
            r = n.api("GET", path, params=params, headers=headers)
            assert r.status_code == 200, (path, r.status_code, r.text[:300])
        return n.api("GET", f"/api/kernels/{tag}-0000-4000-8000-00000000abcd")

    try:
        before = [metric(n, "cellgate_cluster_forged_records_total") for n in nodes]
        put(f"/cellgate/nodes/{forged}", json.dumps({"tag": forged, "address": f"127.0.0.1:{listener.port}",
                                                      "sig": "0" * 64}))
        put(f"/cellgate/holders/{tenant_hex}/{forged}", "{}")
        # Every node has read the record, and refused it.
        wait_for(lambda: all(metric(n, "cellgate_cluster_forged_records_total") > b for n, b in zip(nodes, before)),
                 "each node to see the forged record", timeout=TTL + 5)
        for n in nodes:
            assert ask_everything(n, forged).status_code == 404  # no hop to it either
        assert forged not in router.owners(), router.owners()
        assert listener.requests == [], listener.requests

        # A record signed with the cluster's secret (as if a node's, at the listener): the nodes take it…
        put(f"/cellgate/nodes/{signed}", json.dumps({
            "tag": signed, "address": f"127.0.0.1:{listener.port}",
            "sig": hmac_of(secret, b"cellgate node record v1", signed, f"127.0.0.1:{listener.port}")}))
        put(f"/cellgate/holders/{tenant_hex}/{signed}", "{}")
        expected = {"/v1/sessions", "/api/kernels", "/api/sessions", "/e2b/sandboxes",
                    f"/api/kernels/{signed}-0000-4000-8000-00000000abcd"}

        def asked():
            return {r["line"].split()[1].split("?")[0] for r in listener.requests if "X-Cellgate-Peer" in r["headers"]}
        wait_for(lambda: (ask_everything(nodes[0], signed), expected <= asked())[1],
                 "a node to ask the signed record's address for lists and a hop", timeout=TTL + 10)
        # …and send it no credential of the tenant's: no Authorization, X-API-Key, cookie or ?token=.
        # (The router, which routes signed records too, sends it its health checks.)
        from_nodes = [r for r in listener.requests if "X-Cellgate-Peer" in r["headers"]]
        assert from_nodes, listener.requests
        for r in listener.requests:
            text = (r["line"] + json.dumps(r["headers"])).lower()
            assert TOKEN.lower() not in text and "token=" not in text, r
            assert not {"authorization", "x-api-key", "cookie"} & {k.lower() for k in r["headers"]}, r
        for r in from_nodes:
            assert r["headers"]["X-Cellgate-Peer"].startswith(f"v1 from={TAGS[0]} to={signed} "), r
            assert r["headers"]["X-Cellgate-Tenant"] == vouch("default"), r
        # What it got is worth nothing elsewhere: each real node refuses it, as is or re-addressed.
        for got in from_nodes[:4]:
            method, target = got["line"].split()[:2]
            relayed = {k: v for k, v in got["headers"].items() if k.lower().startswith("x-cellgate-")}
            for n, tag in zip(nodes, TAGS):
                for headers in (relayed, {**relayed, "X-Cellgate-Peer": relayed["X-Cellgate-Peer"].replace(
                        f"to={signed}", f"to={tag}")}):
                    r = n.api(method, target, headers={**headers, "Authorization": None})
                    assert r.status_code == 403, (tag, headers, r.status_code, r.text[:200])
    finally:
        for key in keys:
            etcd.ctl("del", key)
        listener.close()


def hmac_of(secret, *fields):
    import hashlib
    import hmac
    text = b"".join(str(len(f)).encode() + b":" + f + b"\n" for f in
                    (f if isinstance(f, bytes) else f.encode() for f in fields))
    return hmac.new(secret, text, hashlib.sha256).hexdigest()


def test_h4_a_node_takes_a_peers_word_for_a_tenant_once_addressed_to_it_and_fresh(cluster):
    """Security review turn 3, H4: what a real node checks of a request that
    claims to come from a peer, with the cluster's real secret: the same
    signature twice, one 40 s old, one under another secret, one for a
    tenant it does not know, and X-Cellgate-Tenant without a signature, each
    refused; a good one answered as the tenant."""
    from support.cluster import sign_as_peer, vouch
    etcd, nodes, router = cluster
    secret = etcd.pki.secret.read_bytes().rstrip(b"\n")
    to = nodes[0]
    mine = to.api("POST", "/v1/sessions", json={}).json()["id"]
    try:
        def ask(headers):
            return to.api("GET", "/v1/sessions", headers={**headers, "Authorization": None})
        good = sign_as_peer(secret, TAGS[1], TAGS[0], "GET", "/v1/sessions", scope="node", tenant=vouch("default"))
        first = ask(good)
        assert first.status_code == 200 and mine in {x["id"] for x in first.json()["sessions"]}, first.text
        assert ask(good).status_code == 403  # a replay
        for bad in (sign_as_peer(secret, TAGS[1], TAGS[0], "GET", "/v1/sessions", scope="node",
                                 tenant=vouch("default"), at=int(time.time()) - 40),
                    sign_as_peer(b"x" * 64, TAGS[1], TAGS[0], "GET", "/v1/sessions", scope="node",
                                 tenant=vouch("default")),
                    sign_as_peer(secret, TAGS[1], TAGS[0], "GET", "/v1/sessions", scope="node",
                                 tenant=vouch("nobody")),
                    sign_as_peer(secret, TAGS[1], TAGS[0], "GET", "/v1/sessions/x", scope="node",
                                 tenant=vouch("default")),
                    {"X-Cellgate-Tenant": vouch("default"), "X-Cellgate-Scope": "node"}):
            r = ask(bad)
            assert r.status_code == 403, (bad, r.status_code, r.text[:200])
        # Beside the caller's own good token, an unsigned X-Cellgate-Tenant is refused too.
        r = to.api("GET", "/v1/sessions", headers={"X-Cellgate-Tenant": vouch("b")})
        assert r.status_code == 403, r.text
        assert metric(to, 'cellgate_cluster_peer_requests_total{outcome="refused"}') is not None
    finally:
        router.api("DELETE", f"/v1/sessions/{mine}")


def test_a_killed_nodes_ids_answer_410_and_the_others_keep_working(cluster):
    etcd, nodes, router = cluster
    sessions = {}
    # One session on each node, made directly (placement is the router's business).
    for n, tag in zip(nodes, TAGS):
        r = n.api("POST", "/v1/sessions", json={})
        assert r.status_code == 201, r.text
        sessions[tag] = r.json()["id"]
    victim = nodes[2]
    import signal
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(timeout=30)
    killed = time.monotonic()
    gone = sessions[TAGS[2]]
    end = killed + TTL + 10
    while time.monotonic() < end:
        r = router.api("GET", f"/v1/sessions/{gone}")
        if r.status_code == 410:
            break
        time.sleep(0.2)
    assert r.status_code == 410, (r.status_code, r.text, router.log_text())
    assert r.json()["reason"] == "Gone" and "left the cluster" in r.json()["message"]
    assert time.monotonic() - killed <= TTL + 10
    # A survivor asked directly says the same, once its view of the cluster has caught up.
    end = time.monotonic() + TTL + 2
    while True:
        direct = nodes[0].api("GET", f"/v1/sessions/{gone}")
        if direct.status_code == 410 or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert direct.status_code == 410 and "left the cluster" in direct.json()["message"], direct.text
    # Lists drop the gone node's sessions (once its lease expired, it is no peer).
    end = time.monotonic() + TTL + 2  # each node's view of its peers is at most a third of the TTL old
    while True:
        listed = router.api("GET", "/v1/sessions")
        if "X-Cellgate-Unreachable" not in listed.headers or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert listed.status_code == 200 and "X-Cellgate-Unreachable" not in listed.headers, listed.headers
    ids = {x["id"] for x in listed.json()["sessions"]}
    assert gone not in ids and {sessions[t] for t in TAGS[:2]} <= ids
    # The others keep running, through the router.
    for tag in TAGS[:2]:
        out = router.api("POST", f"/v1/sessions/{sessions[tag]}/execute", json={"code": "print(1 + 1)"}).json()
        assert out["status"] == "ok" and out["stdout"].strip() == "2", out
    # New creates land on the live nodes only.
    made = []
    for _ in range(4):
        r = router.api("POST", "/v1/sessions", json={})
        assert r.status_code == 201, r.text
        made.append(r.json()["id"])
    assert all(sid[:8] in TAGS[:2] for sid in made), made
    for sid in made + [sessions[t] for t in TAGS[:2]]:
        router.api("DELETE", f"/v1/sessions/{sid}")
