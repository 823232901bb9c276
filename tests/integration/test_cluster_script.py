"""deploy/cellgate-cluster (issue 16): `up` starts a cluster on this machine
(3-member etcd, N nodes, HAProxy and its sync) and says where; a session
made through it runs; `status` sees every piece; `down` stops all it started,
by pid, and the nodes' records leave etcd with them. Its etcd takes no
client without a certificate from the cluster's CA (security review turn 3,
H4)."""
import json
import os
import subprocess
import uuid
from pathlib import Path

import requests

from support.cluster import cluster_missing, free_port
from support.prerequisites import BUILD, IMAGE_STORE, require

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "cellgate-cluster"


def test_up_status_and_down():
    require("cellgate-cluster", cluster_missing())
    d = Path("/run") / f"cellgate-cluster-{uuid.uuid4().hex[:8]}"
    port, token = free_port(), "script-" + uuid.uuid4().hex[:12]
    run = lambda *a, timeout=180: subprocess.run(["/usr/bin/python3", str(SCRIPT), *a], capture_output=True,  # noqa: E731
                                                 text=True, timeout=timeout)
    try:
        up = run("up", "--nodes", "2", "--dir", str(d), "--port", str(port), "--token", token, "--bin-dir",
                 str(BUILD / "bin"), "--image-store", str(IMAGE_STORE), "--pool-size", "0", "--lease-ttl", "3")
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"2 nodes behind http://127.0.0.1:{port}" in up.stdout and token in up.stdout
        state = json.loads((d / "cluster.json").read_text())
        tags = {n["tag"] for n in state["nodes"]}
        h = {"Authorization": f"token {token}"}
        made = []
        for _ in range(4):
            r = requests.post(f"http://127.0.0.1:{port}/v1/sessions", json={}, headers=h, timeout=120)
            assert r.status_code == 201, r.text
            made.append(r.json()["id"])
            out = requests.post(f"http://127.0.0.1:{port}/v1/sessions/{made[-1]}/execute", json={"code": "print(2 * 21)"},
                                headers=h, timeout=120).json()
            assert out["status"] == "ok" and out["stdout"].strip() == "42", out
        assert {sid[:8] for sid in made} <= tags
        listed = requests.get(f"http://127.0.0.1:{port}/v1/sessions", headers=h, timeout=30).json()["sessions"]
        assert set(made) <= {s["id"] for s in listed}
        st = run("status", "--dir", str(d))
        assert st.returncode == 0 and "2 node(s) routed" in st.stdout, st.stdout + st.stderr
        # H4: the script's etcd takes no client without the cluster's certificates.
        pki = Path(state["pki"])
        assert oct(pki.stat().st_mode & 0o777) == "0o700"
        assert all(oct(f.stat().st_mode & 0o777) == "0o600" for f in pki.iterdir()
                   if f.name.endswith("-key.pem") or f.name == "cluster-secret")
        ctl = lambda *a: subprocess.run(["etcdctl", "--endpoints", state["etcd_endpoints"], "--dial-timeout", "2s",  # noqa: E731
                                         "--command-timeout", "3s", "--cacert", str(pki / "ca.pem"), *a],
                                        capture_output=True, text=True, timeout=30, env={**os.environ, "ETCDCTL_API": "3"})
        assert ctl("put", "/cellgate/nodes/deadbeef", '{"tag":"deadbeef","address":"127.0.0.1:1"}').returncode != 0
        assert ctl("--cert", str(pki / "router.pem"), "--key", str(pki / "router-key.pem"),
                   "get", "--prefix", "--keys-only", "/cellgate/nodes/").stdout.count("/cellgate/nodes/") == 2
        pids = [n["pid"] for n in state["nodes"]] + state["router_pids"] + state["etcd"]
        dn = run("down", "--dir", str(d))
        assert dn.returncode == 0, dn.stdout + dn.stderr
        for pid in pids:
            assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower(), pid
        assert run("status", "--dir", str(d)).returncode != 0
    finally:
        if (d / "cluster.json").exists():
            run("down", "--dir", str(d))
        mounts = subprocess.run(["findmnt", "-rn", "-o", "TARGET"], capture_output=True, text=True).stdout.split()
        for target in sorted((t for t in mounts if t.startswith(str(d))), reverse=True):
            subprocess.run(["umount", "-l", target])
        keep = Path(os.environ.get("CELLGATE_TEST_LOGS", "/tmp/cellgate-test-logs"))
        keep.mkdir(parents=True, exist_ok=True)
        for log in d.glob("*.log"):
            subprocess.run(["cp", str(log), str(keep / f"{d.name}-{log.name}")])
        subprocess.run(["rm", "-rf", str(d)])
        for parent in Path("/sys/fs/cgroup").glob(f"*/cellgate-{d.name}-*"):  # the nodes' (empty) cgroup parents
            subprocess.run(["rmdir", str(parent)], capture_output=True)
