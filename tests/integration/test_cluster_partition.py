"""A node cut off from etcd, and only from etcd (issue 16, Part 2). The test
makes a network namespace with two links to the host: one the node reaches
etcd by, one the router and the test reach the node by. Taking the etcd link
down partitions the node: it stops admitting new sessions (503) while its
open session keeps working; its lease lapses, so the cluster treats its ids as
gone (410 through the router) and another node keeps admitting. With the link
back it registers again (a new lease, its sessions' quota places filled in)
and its session is reachable through the router once more. Real etcd (3
members), HAProxy, two cellgate nodes with runc sandboxes."""
import os
import subprocess
import uuid

import pytest

from support.cluster import EtcdCluster, Router, cluster_missing, free_port, node
from support.waiting import wait_for

TTL = 3
TOKEN = "partition-token-" + uuid.uuid4().hex[:8]
INSIDE, OUTSIDE = "aaaa1111", "bbbb2222"


def sh(*argv):
    r = subprocess.run(argv, capture_output=True, text=True)
    assert r.returncode == 0, (argv, r.stderr)
    return r.stdout


@pytest.fixture(scope="module")
def partition():
    why = cluster_missing()
    if why:
        from support.prerequisites import require
        require("the cluster partition test", why)
    ns = f"cgp{uuid.uuid4().hex[:6]}"
    # Two /30 links: e (etcd) and a (api). Addresses from a test-only range.
    net = 40 + (os.getpid() % 200)
    e_host, e_ns, a_host, a_ns = f"10.231.{net}.1", f"10.231.{net}.2", f"10.232.{net}.1", f"10.232.{net}.2"
    sh("ip", "netns", "add", ns)
    made = []
    try:
        for link, host, inside in (("e", e_host, e_ns), ("a", a_host, a_ns)):
            outer, inner = f"{ns}{link}0", f"{ns}{link}1"
            sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            made.append(outer)
            sh("ip", "link", "set", inner, "netns", ns)
            sh("ip", "addr", "add", f"{host}/30", "dev", outer)
            sh("ip", "link", "set", outer, "up")
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{inside}/30", "dev", inner)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
        sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")
        yield {"ns": ns, "etcd_host": e_host, "api_addr": a_ns, "etcd_link": f"{ns}e0"}
    finally:
        for outer in made:
            subprocess.run(["ip", "link", "del", outer], capture_output=True)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def test_a_node_partitioned_from_etcd_stops_admitting_and_comes_back(partition):
    etcd = EtcdCluster(extra_hosts=[partition["etcd_host"]]).start()
    port = free_port()
    inside = node(21, INSIDE, etcd, "--lease-ttl", str(TTL), "--ip", "0.0.0.0",
                  "--port", str(port), "--node-address", f"{partition['api_addr']}:{port}", token=TOKEN,
                  host=partition["etcd_host"])
    # Only the network namespace: `ip netns exec` would also remount /sys, and the cgroups with it.
    inside.args = ["nsenter", f"--net=/run/netns/{partition['ns']}", "--", *inside.args]
    inside.host = partition["api_addr"]
    outside = node(22, OUTSIDE, etcd, "--lease-ttl", str(TTL), token=TOKEN)
    router = None
    try:
        inside.start()
        outside.start()
        router = Router(etcd, TOKEN).start()
        wait_for(lambda: set(router.owners()) == {INSIDE, OUTSIDE}, "both nodes in the router")
        s = router.api("POST", "/v1/sessions", json={})
        while s.status_code == 201 and not s.json()["id"].startswith(INSIDE):
            router.api("DELETE", f"/v1/sessions/{s.json()['id']}")
            s = inside.api("POST", "/v1/sessions", json={})
        assert s.status_code == 201, s.text
        sid = s.json()["id"]
        assert router.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "x = 41"}).json()["status"] == "ok"

        sh("ip", "link", "set", partition["etcd_link"], "down")  # the partition
        refused = wait_for(lambda: (r := inside.api("POST", "/v1/sessions", json={})).status_code == 503 and [r],
                           "the partitioned node to refuse creates", timeout=TTL + 15)[0]
        assert "etcd" in refused.json()["message"], refused.text
        # Its open session keeps working (straight to the node: the data path needs no etcd).
        out = inside.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print(x + 1)"}).json()
        assert out["status"] == "ok" and out["stdout"].strip() == "42", out
        # The cluster lets it go when its lease lapses: its ids are gone through the router...
        wait_for(lambda: router.api("GET", f"/v1/sessions/{sid}").status_code == 410, "410 through the router",
                 timeout=TTL + 10)
        # ...and the other node keeps admitting.
        other = router.api("POST", "/v1/sessions", json={})
        assert other.status_code == 201 and other.json()["id"].startswith(OUTSIDE), other.text

        sh("ip", "link", "set", partition["etcd_link"], "up")  # healed
        wait_for(lambda: inside.api("POST", "/v1/sessions", json={}).status_code == 201, "creates again",
                 timeout=TTL + 20)
        wait_for(lambda: router.api("GET", f"/v1/sessions/{sid}").status_code == 200,
                 "the session reachable through the router again", timeout=15)
        out = router.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print(x + 2)"}).json()
        assert out["status"] == "ok" and out["stdout"].strip() == "43", out
        router.api("DELETE", f"/v1/sessions/{other.json()['id']}")
    finally:
        if router:
            router.cleanup()
        for g in (inside, outside):
            g.stop()
            g.cleanup()
        etcd.cleanup()
