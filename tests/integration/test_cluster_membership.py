"""A cluster node's membership (issue 16, Part 2): real 3-member etcd on
loopback, real cellgate nodes with runc sandboxes. A node registers its
record on a lease (address, tag, load) and keeps it fresh; a SIGKILLed node's
record goes when its lease expires, a stopped node's at once. A node that
loses etcd admits no new session (503 with the reason) while its open
sessions keep working and lists answer 503, and admits again when etcd is
back; killing the etcd
leader alone costs no open session and creates resume after re-election."""
import json
import signal
import time

import pytest

from support.cluster import EtcdCluster, cluster_missing, node
from support.waiting import wait_for

TTL = 3


@pytest.fixture(scope="module")
def etcd():
    why = cluster_missing()
    if why:
        from support.prerequisites import require
        require("the cluster tests", why)
    e = EtcdCluster().start()
    yield e
    e.cleanup()


def record(etcd, tag):
    value, lease = etcd.get(f"/cellgate/nodes/{tag}")
    return (json.loads(value), lease) if value else (None, None)


def metric(g, name):
    for line in g.api("GET", "/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_a_node_registers_on_a_lease_and_its_record_goes_when_it_dies_or_stops(etcd):
    a = node(1, "aaaa0001", etcd, "--lease-ttl", str(TTL), "--pool-size", "1").start()
    try:
        rec, lease = wait_for(lambda: record(etcd, "aaaa0001")[0] and record(etcd, "aaaa0001"), "a's record")
        assert rec["tag"] == "aaaa0001" and rec["address"] == f"127.0.0.1:{a.port}" and rec["ttl"] == TTL
        assert rec["max_kernels"] == 64 and rec["admitted"] == 0
        ttl = etcd.ctl("lease", "timetolive", lease)
        assert ttl.returncode == 0 and "remaining" in ttl.stdout, ttl.stdout + ttl.stderr
        # The record follows the node's load.
        wait_for(lambda: record(etcd, "aaaa0001")[0]["pool_ready"] == 1, "the pool's figure")
        s = a.api("POST", "/v1/sessions", json={})
        assert s.status_code == 201, s.text
        assert s.json()["id"].startswith("aaaa0001-")
        wait_for(lambda: record(etcd, "aaaa0001")[0]["admitted"] == 1, "the admitted figure")
        assert metric(a, "cellgate_cluster_admitting") == 1
        # SIGKILL: no goodbye; the record goes when the lease expires.
        a.proc.send_signal(signal.SIGKILL)
        a.proc.wait(timeout=30)
        killed = time.monotonic()
        wait_for(lambda: record(etcd, "aaaa0001")[0] is None, "the dead node's record to go", timeout=TTL + 5)
        assert time.monotonic() - killed <= TTL + 5
    finally:
        a.stop()
        a.cleanup()
    # A clean stop revokes the lease: the record goes at once.
    b = node(2, "bbbb0002", etcd, "--lease-ttl", "30").start()
    try:
        wait_for(lambda: record(etcd, "bbbb0002")[0], "b's record")
        b.stop()
        assert record(etcd, "bbbb0002")[0] is None, "a stopped node's record must go with it (lease revoked)"
    finally:
        b.stop()
        b.cleanup()


def test_a_node_that_loses_etcd_admits_nothing_new_and_keeps_its_sessions(etcd):
    a = node(3, "cccc0003", etcd, "--lease-ttl", str(TTL)).start()
    try:
        wait_for(lambda: record(etcd, "cccc0003")[0], "the record")
        s = a.api("POST", "/v1/sessions", json={})
        assert s.status_code == 201, s.text
        sid = s.json()["id"]
        assert a.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "x = 41"}).json()["status"] == "ok"
        etcd.kill_all()
        # Within two thirds of the TTL (+ one refresh) creates are refused, on every surface.
        refused = wait_for(lambda: (r := a.api("POST", "/v1/sessions", json={})).status_code == 503 and [r],
                           "creates to be refused", timeout=TTL + 3)[0]
        # At once the quota check cannot reach etcd; after 2/3 of the TTL the node has fenced itself.
        assert "etcd" in refused.json()["message"], refused.text
        wait_for(lambda: metric(a, "cellgate_cluster_admitting") == 0, "the node to fence itself", timeout=TTL + 2)
        k = a.api("POST", "/api/kernels", json={"name": "python3"})
        assert k.status_code == 503 and "lost etcd" in k.json()["message"], k.text
        # Lists span the cluster: without etcd a node cannot say what the others hold.
        lst = a.api("GET", "/v1/sessions")
        assert lst.status_code == 503 and "need etcd" in lst.json()["message"], lst.text
        # …but a node's own part is still there for whoever asks for just that.
        own = a.api("GET", "/v1/sessions", headers={"X-Cellgate-Scope": "node"})
        assert own.status_code == 200 and sid in {x["id"] for x in own.json()["sessions"]}
        # The open session keeps working: the data path never asks etcd.
        out = a.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print(x + 1)"}).json()
        assert out["status"] == "ok" and out["stdout"].strip() == "42", out
        # etcd back (same data dirs): the node registers again and admits.
        for n in etcd.names:
            etcd.start_member(n, state="existing")
        etcd.wait_healthy()
        wait_for(lambda: metric(a, "cellgate_cluster_admitting") == 1, "the node to admit again", timeout=20)
        # With its old lease (etcd renews leases when a leader is elected) or a
        # new one if that had lapsed.
        assert metric(a, "cellgate_cluster_joins_total") in (1, 2)
        wait_for(lambda: record(etcd, "cccc0003")[0], "the record to be back", timeout=10)
        again = a.api("POST", "/v1/sessions", json={})
        assert again.status_code == 201, again.text
        a.api("DELETE", f"/v1/sessions/{again.json()['id']}")
        a.api("DELETE", f"/v1/sessions/{sid}")
    finally:
        a.stop()
        a.cleanup()
        if len(etcd.procs) < len(etcd.names):
            for n in etcd.names:
                if n not in etcd.procs:
                    etcd.start_member(n, state="existing")
            etcd.wait_healthy()


def test_killing_the_etcd_leader_costs_no_session_and_creates_resume(etcd):
    a = node(4, "dddd0004", etcd, "--lease-ttl", "6").start()
    try:
        wait_for(lambda: record(etcd, "dddd0004")[0], "the record")
        s = a.api("POST", "/v1/sessions", json={})
        assert s.status_code == 201, s.text
        sid = s.json()["id"]
        leader = etcd.leader()
        assert leader
        etcd.kill(leader)
        out = a.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print(6 * 7)"}).json()
        assert out["status"] == "ok" and out["stdout"].strip() == "42", out
        # A new leader is elected; the node's lease and record carry on.
        wait_for(lambda: etcd.leader() not in (None, leader), "a new leader", timeout=20)
        created = wait_for(lambda: (r := a.api("POST", "/v1/sessions", json={})).status_code == 201 and [r],
                           "a create after re-election", timeout=10)[0]
        assert record(etcd, "dddd0004")[0] is not None
        assert metric(a, "cellgate_cluster_joins_total") == 1, "the lease must survive a leader change"
        a.api("DELETE", f"/v1/sessions/{created.json()['id']}")
        a.api("DELETE", f"/v1/sessions/{sid}")
        etcd.start_member(leader, state="existing")
        etcd.wait_healthy()
    finally:
        a.stop()
        a.cleanup()


def test_h4_a_node_that_cannot_authenticate_to_etcd_admits_nothing_new(etcd):
    """Security review turn 3, H4: a node whose client certificate etcd does
    not take (another CA's) never joins; one whose cluster secret is not the
    cluster's does not either, and a member whose secret stops matching
    (the check key changed under it) fences itself. Each says why in its log
    and /metrics and admits no new session; an open session keeps working;
    with the check key back, the node admits again."""
    import secrets
    import tempfile
    from pathlib import Path
    from support.pki import Pki
    rogue = Pki(Path(tempfile.mkdtemp(prefix="cellgate-rogue-pki-")), name="rogue-ca")
    stranger = rogue.dir / "other-secret"
    stranger.write_text(secrets.token_hex(32))
    stranger.chmod(0o600)
    ca = str(etcd.pki.ca)
    bad_cert = ["--etcd-ca", ca, "--etcd-cert", str(rogue.client[0]), "--etcd-key", str(rogue.client[1]),
                "--cluster-secret-file", str(etcd.pki.secret)]
    a = node(5, "eeee0005", etcd, "--lease-ttl", str(TTL), credentials=bad_cert)
    b = node(6, "eeee0006", etcd, "--lease-ttl", str(TTL), credentials=etcd.pki.node_args(secret=stranger))
    c = node(7, "eeee0007", etcd, "--lease-ttl", str(TTL)).start()
    check = "/cellgate/secret-check"
    try:
        # c first: the first node to join writes the secret's check (docs/cluster.md).
        wait_for(lambda: record(etcd, "eeee0007")[0], "c's record")
        a.start()
        b.start()
        s = c.api("POST", "/v1/sessions", json={})
        assert s.status_code == 201, s.text
        sid = s.json()["id"]
        for g, says in ((a, "TLS"), (b, "cluster secret")):
            r = wait_for(lambda: (r := g.api("POST", "/v1/sessions", json={})).status_code == 503 and says in
                         r.json()["message"] and [r], f"{says}: a refusal that says so", timeout=TTL + 5)[0]
            assert "has not joined its cluster" in r.json()["message"], r.text
            assert metric(g, "cellgate_cluster_admitting") == 0
            assert says in g.log_text()
        assert metric(b, "cellgate_cluster_secret_mismatch") == 1
        assert record(etcd, "eeee0005")[0] is None and record(etcd, "eeee0006")[0] is None
        # A member whose secret stops matching: fenced, its open session works on.
        held, _ = etcd.get(check)
        assert held
        assert etcd.ctl("put", check, "0" * 64).returncode == 0
        wait_for(lambda: metric(c, "cellgate_cluster_admitting") == 0, "c to fence itself", timeout=TTL + 3)
        r = c.api("POST", "/v1/sessions", json={})
        assert r.status_code == 503 and "cluster secret" in r.json()["message"], r.text
        out = c.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print(6 * 7)"}).json()
        assert out["status"] == "ok" and out["stdout"].strip() == "42", out
        assert etcd.ctl("put", check, held).returncode == 0
        wait_for(lambda: metric(c, "cellgate_cluster_admitting") == 1, "c to admit again", timeout=TTL + 5)
        again = c.api("POST", "/v1/sessions", json={})
        assert again.status_code == 201, again.text
        c.api("DELETE", f"/v1/sessions/{again.json()['id']}")
        c.api("DELETE", f"/v1/sessions/{sid}")
    finally:
        for g in (a, b, c):
            g.stop()
            g.cleanup()
        import shutil
        shutil.rmtree(rogue.dir, ignore_errors=True)


def test_cluster_options_are_checked_at_start():
    import subprocess
    from support.prerequisites import GATEWAY
    creds = ["--etcd-ca", "/nonexistent/ca.pem", "--etcd-cert", "/nonexistent/n.pem", "--etcd-key",
             "/nonexistent/k.pem", "--cluster-secret-file", "/nonexistent/secret"]
    for args, says in ((["--etcd", "https://127.0.0.1:2379"], "--etcd needs --node-tag"),
                       (["--etcd", "127.0.0.1:2379", "--node-tag", "abcdef01"], "--etcd: an etcd endpoint is"),
                       (["--etcd", "https://127.0.0.1:2379", "--node-tag", "abcdef01", "--lease-ttl", "1", *creds],
                        "--lease-ttl is 2 to 300 seconds"),
                       # Security review turn 3, H4: etcd over TLS with a client certificate, and the secret.
                       (["--etcd", "http://127.0.0.1:2379", "--node-tag", "abcdef01", *creds], "https://host:port"),
                       (["--etcd", "https://127.0.0.1:2379", "--node-tag", "abcdef01", *creds[2:]], "--etcd-ca"),
                       (["--etcd", "https://127.0.0.1:2379", "--node-tag", "abcdef01", *creds[:6]],
                        "--cluster-secret-file"),
                       # The files are read before the node listens: a missing one stops it (exit 2).
                       (["--etcd", "https://127.0.0.1:2379", "--node-tag", "abcdef01", *creds],
                        "the cluster secret file /nonexistent/secret cannot be read")):
        r = subprocess.run([str(GATEWAY), *args, "--port", "0"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and says in r.stderr, (args, r.returncode, r.stderr)
