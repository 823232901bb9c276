"""Per-node settings and tenant limits: two gateways on one host with their own
cgroup parents and host uid ranges do not reap or alias each other's
sandboxes; one token cannot take every kernel slot (review L15, quota)."""
import json
import os
import subprocess
import uuid
from pathlib import Path

import pytest
import requests

from support.gateway import Gateway
from support.prerequisites import BUILD, IMAGE_STORE

CGROUP_ROOT = Path("/sys/fs/cgroup")
SLOT = 65536
A = {"parent": "cg-test-a-" + uuid.uuid4().hex[:8], "start": 300_000_000, "slots": 4}
B = {"parent": "cg-test-b-" + uuid.uuid4().hex[:8], "start": 300_000_000 + 4 * SLOT, "slots": 4}
TENANT_B_TOKEN = "tenant-b-" + uuid.uuid4().hex


def node_args(n):
    return ["--cgroup-parent", n["parent"], "--uid-range-start", str(n["start"]),
            "--uid-range-slots", str(n["slots"])]


# The unified hierarchy, or under cgroup v1 the memory controller's.
UNIFIED = (CGROUP_ROOT / "cgroup.controllers").exists()
HIERARCHY = CGROUP_ROOT if UNIFIED else CGROUP_ROOT / "memory"


@pytest.fixture(scope="module")
def cgroups():
    yield
    for n in (A, B):  # the parents this module made (the gateway leaves them)
        for h in [CGROUP_ROOT] if UNIFIED else [d for d in CGROUP_ROOT.iterdir() if d.is_dir()]:
            for d in sorted(h.glob(n["parent"] + "/**/"), key=lambda p: -len(p.parts)):
                try:
                    d.rmdir()
                except OSError:
                    pass


@pytest.fixture(scope="module")
def gw_a(cgroups, tmp_path_factory):
    config = tmp_path_factory.mktemp("node-a") / "config.json"
    config.write_text(json.dumps({"tokens": [{"token": TENANT_B_TOKEN, "tenant": "b", "max_sessions": 1}]}))
    g = Gateway(*node_args(A), "--max-kernels-per-tenant", "2", "--config", str(config)).start()
    yield g
    g.stop()
    g.cleanup()


def sandboxes(g, n):
    out = subprocess.run([str(BUILD / "bin" / "cellgate-launch"), "--state-dir", str(g.state_dir),
                          "--image-store", str(IMAGE_STORE), "--workspace-root", str(g.workspace_root),
                          *node_args(n), "ps", "--json"], capture_output=True, text=True, check=True)
    return {s["id"]: s for s in json.loads(out.stdout)}


def placement(pid):
    """(cgroup path, host uid) of a host process."""
    lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    cgroup = [line.split(":", 2)[2] for line in lines
              if (line.startswith("0::") if UNIFIED else ":memory:" in line)][0]
    uid = int([line for line in Path(f"/proc/{pid}/status").read_text().splitlines()
               if line.startswith("Uid:")][0].split()[1])
    return cgroup, uid


def create(g, token=None):
    headers = {"Authorization": f"token {token}"} if token else {}
    return g.api("POST", "/v1/sessions", headers=headers)


def test_two_gateways_keep_their_own_cgroups_and_uid_ranges(gw_a):
    a = create(gw_a)
    assert a.status_code == 201, a.text
    a = a.json()
    a_box = sandboxes(gw_a, A)[a["id"]]
    # An empty sandbox-shaped cgroup under A's parent, as a crash would leave:
    # only A's own start-up reap may remove it.
    stray = HIERARCHY / A["parent"] / uuid.uuid4().hex
    stray.mkdir()
    b_gw = Gateway(*node_args(B)).start()
    try:
        b = create(b_gw)
        assert b.status_code == 201, b.text
        b = b.json()
        b_box = sandboxes(b_gw, B)[b["id"]]
        assert stray.is_dir(), "B's start-up reap removed a cgroup under A's parent"
        a_cgroup, a_uid = placement(a_box["pid"])
        b_cgroup, b_uid = placement(b_box["pid"])
        assert a_cgroup.startswith(f"/{A['parent']}/{a['id']}"), a_cgroup
        assert b_cgroup.startswith(f"/{B['parent']}/{b['id']}"), b_cgroup
        assert A["start"] <= a_uid < A["start"] + A["slots"] * SLOT, a_uid
        assert B["start"] <= b_uid < B["start"] + B["slots"] * SLOT, b_uid
        # A's kernel lived through B's start: same sandbox, still computing.
        assert sandboxes(gw_a, A)[a["id"]]["pid"] == a_box["pid"]
        r = gw_a.api("POST", f"/v1/sessions/{a['id']}/execute", json={"code": "print(6 * 7)"})
        assert r.status_code == 200 and r.json()["stdout"] == "42\n", r.text
    finally:
        b_gw.stop()
        b_gw.cleanup()
        stray.rmdir()
        gw_a.api("DELETE", f"/v1/sessions/{a['id']}")


def test_an_id_range_among_the_hosts_own_ids_is_refused_at_start():
    g = Gateway("--uid-range-start", "1000", "--uid-range-slots", "1")
    try:
        with pytest.raises(RuntimeError) as e:
            g.start()
        assert "65536" in str(e.value)
    finally:
        g.stop()
        g.cleanup()


def test_one_token_cannot_take_every_kernel_slot(gw_a):
    made = []
    try:
        for _ in range(2):
            r = create(gw_a)
            assert r.status_code == 201, r.text
            made.append((None, r.json()["id"]))
        r = create(gw_a)
        assert r.status_code == 429, r.text
        assert set(r.json()) >= {"reason", "message"} and "limit" in r.json()["message"].lower()
        # Another tenant still gets its own share, capped by its tokens entry.
        r = create(gw_a, TENANT_B_TOKEN)
        assert r.status_code == 201, r.text
        made.append((TENANT_B_TOKEN, r.json()["id"]))
        r = create(gw_a, TENANT_B_TOKEN)
        assert r.status_code == 429, r.text
    finally:
        for token, sid in made:
            gw_a.api("DELETE", f"/v1/sessions/{sid}",
                     headers={"Authorization": f"token {token}"} if token else {})


def test_only_the_operator_reads_what_spans_tenants(gw_a):
    """Review L4: /metrics counts every tenant's kernels (and names kernels in
    its per-kernel drop counts), so a tenant's token gets 403; /healthz is
    public and says only that the gateway serves."""
    r = gw_a.api("GET", "/metrics", headers={"Authorization": f"token {TENANT_B_TOKEN}"})
    assert r.status_code == 403, r.text
    assert set(r.json()) >= {"reason", "message"} and "operator" in r.json()["message"]
    r = gw_a.api("GET", "/metrics")  # the gateway's --token: the operator's
    assert r.status_code == 200 and "cellgate_kernels" in r.text
    assert requests.get(gw_a.url + "/healthz", timeout=10).json() == {"status": "ok"}
