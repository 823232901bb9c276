"""deploy/ stays valid (issue 16): the Kubernetes manifests parse and hang
together (selectors, volumes, the etcd members, privileges), and every
command the manifests and systemd units run is accepted by the binary it
names — the gateway's arguments by `cellgate --check-config`, the
launcher's flags by its usage, the router's config by `haproxy -c`. Runs
the real binaries of this tree; needs no cluster."""
import configparser
import os
import re
import shlex
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
BUILD = Path(os.environ.get("CELLGATE_BUILD_DIR", REPO / "build"))
CELLGATE, LAUNCHD = BUILD / "bin" / "cellgate", BUILD / "bin" / "cellgate-launchd"
ROUTER = DEPLOY / "cellgate-router"
SAMPLE = {"CELLGATE_NODE_TAG": "0a1b2c3d", "CELLGATE_ETCD": "https://10.0.0.11:2379,https://10.0.0.12:2379",
          "CELLGATE_NODE_ADDRESS": "10.0.0.21:8888", "CELLGATE_CGROUP_PARENT": "cellgate",
          "CELLGATE_UID_RANGE_START": "1000000", "CELLGATE_UID_RANGE_SLOTS": "4096",
          "ETCD_NAME": "m1", "ETCD_HOST": "10.0.0.11",
          "ETCD_INITIAL_CLUSTER": "m1=https://10.0.0.11:2380,m2=https://10.0.0.12:2380,m3=https://10.0.0.13:2380"}


def docs():
    out = []
    for f in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for d in yaml.safe_load_all(f.read_text()):
            if d is not None:
                out.append((f.name, d))
    return out


def by_kind(kind):
    return [d for _, d in docs() if d["kind"] == kind]


def pod_spec(workload):
    return workload["spec"]["template"]["spec"]


def containers(workload):
    spec = pod_spec(workload)
    return spec.get("initContainers", []) + spec["containers"]


def check_config(args, tokens_json):
    """`cellgate --check-config` on these arguments, the tokens file made real."""
    with tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens.json"
        tokens.write_text(tokens_json)
        args = [str(tokens) if a == "/etc/cellgate/tokens.json" else a for a in args]
        r = subprocess.run([str(CELLGATE), *args, "--check-config"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "valid" in r.stdout, (args, r.stdout, r.stderr)


def launchd_flags_known(args):
    usage = subprocess.run([str(LAUNCHD), "--help"], capture_output=True, text=True).stdout + \
        subprocess.run([str(LAUNCHD), "--help"], capture_output=True, text=True).stderr
    for a in args:
        if a.startswith("--"):
            flag = a.split("=", 1)[0]
            assert f"[{flag} " in usage or f"[{flag}]" in usage, f"cellgate-launchd has no {flag}: {usage}"


def router_config_valid(args):
    with tempfile.TemporaryDirectory() as tmp:
        args = [a.replace("/run/cellgate-router", tmp) for a in args]
        Path(tmp, "owners.map").touch()
        cfg = subprocess.run(["/usr/bin/python3", str(ROUTER), *args], capture_output=True, text=True, check=True).stdout
        Path(tmp, "haproxy.cfg").write_text(cfg)
        r = subprocess.run(["haproxy", "-c", "-f", str(Path(tmp, "haproxy.cfg"))], capture_output=True, text=True)
        assert r.returncode == 0, r.stdout + r.stderr


def tokens_example():
    secret = next(d for d in by_kind("Secret") if d["metadata"]["name"] == "cellgate-tokens")
    return secret["stringData"]["tokens.json"]


def test_every_manifest_parses_and_names_itself():
    seen = docs()
    assert len(seen) >= 7
    for name, d in seen:
        assert {"apiVersion", "kind", "metadata"} <= set(d), name
        assert d["metadata"].get("name"), name
        if d["kind"] != "Namespace":
            assert d["metadata"].get("namespace") == "cellgate", (name, d["metadata"])
    kinds = sorted(d["kind"] for _, d in seen)
    for kind in ("DaemonSet", "Deployment", "Namespace", "Secret", "Service", "StatefulSet"):
        assert kind in kinds, kinds


def test_workloads_select_their_own_pods_and_mount_only_their_volumes():
    for w in by_kind("DaemonSet") + by_kind("Deployment") + by_kind("StatefulSet"):
        labels = w["spec"]["template"]["metadata"]["labels"]
        for k, v in w["spec"]["selector"]["matchLabels"].items():
            assert labels.get(k) == v, (w["metadata"]["name"], k)
        volumes = {v["name"] for v in pod_spec(w).get("volumes", [])}
        volumes |= {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
        for c in containers(w):
            assert c.get("image"), (w["metadata"]["name"], c["name"])
            for m in c.get("volumeMounts", []):
                assert m["name"] in volumes, (w["metadata"]["name"], c["name"], m["name"])
    # Every Service selects some workload's pods.
    pods = [w["spec"]["template"]["metadata"]["labels"] for w in
            by_kind("DaemonSet") + by_kind("Deployment") + by_kind("StatefulSet")]
    for s in by_kind("Service"):
        sel = s["spec"]["selector"]
        assert any(all(p.get(k) == v for k, v in sel.items()) for p in pods), s["metadata"]["name"]


def test_etcd_has_three_members_that_name_each_other():
    sts = next(w for w in by_kind("StatefulSet") if w["metadata"]["name"] == "etcd")
    assert sts["spec"]["replicas"] == 3
    headless = next(s for s in by_kind("Service") if s["metadata"]["name"] == sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    cmd = containers(sts)[0]["command"]
    initial = next(a.split("=", 1)[1] for a in cmd if a.startswith("--initial-cluster="))
    members = dict(m.split("=", 1) for m in initial.split(","))
    assert sorted(members) == [f"etcd-{i}" for i in range(3)]
    for name, url in members.items():
        assert url == f"https://{name}.etcd:2380"
    etcd_serves_only_tls_with_client_certificates(cmd[1:])
    # The probe reads health where no certificate is asked for, and nothing else is served there.
    probe = containers(sts)[0]["readinessProbe"]["httpGet"]
    assert probe["port"] == 2381 and "--listen-metrics-urls=http://0.0.0.0:2381" in cmd
    tls = next(v for v in pod_spec(sts)["volumes"] if v["name"] == "tls")
    assert tls["secret"]["secretName"] == "cellgate-etcd-tls"


ETCD_HELP = None


def etcd_serves_only_tls_with_client_certificates(args):
    """Security review turn 3, H4: every URL etcd listens on or advertises
    for clients and members is https, client certificates are required of
    both, and each flag is one Debian's etcd takes."""
    global ETCD_HELP
    if ETCD_HELP is None:
        r = subprocess.run(["etcd", "--help"], capture_output=True, text=True)
        ETCD_HELP = r.stdout + r.stderr
    flags = {}
    it = iter(args)
    for a in it:
        if not a.startswith("--"):
            continue
        name, eq, value = a.partition("=")
        if not eq and name not in ("--client-cert-auth", "--peer-client-cert-auth"):
            value = next(it)
        flags[name] = value
        assert f"  {name} " in ETCD_HELP or f"  {name}\n" in ETCD_HELP or f"  {name}=" in ETCD_HELP, name
    for f in ("--listen-client-urls", "--advertise-client-urls", "--listen-peer-urls", "--initial-advertise-peer-urls"):
        assert all(u.startswith("https://") for u in flags[f].split(",")), (f, flags[f])
    assert all(m.split("=", 1)[1].startswith("https://") for m in flags["--initial-cluster"].split(","))
    for f in ("--client-cert-auth", "--peer-client-cert-auth", "--cert-file", "--key-file", "--trusted-ca-file",
              "--peer-cert-file", "--peer-key-file", "--peer-trusted-ca-file"):
        assert f in flags, f
    return flags


def test_only_the_router_and_the_nodes_machines_reach_etcd():
    """Security review turn 3, H4: a NetworkPolicy selects etcd's pods and
    admits, on the client port, the router's pods and an ipBlock (the node
    pods use the host's network) only; members reach each other."""
    policies = [p for p in by_kind("NetworkPolicy") if p["spec"]["podSelector"]["matchLabels"] ==
                {"app.kubernetes.io/name": "etcd"}]
    assert len(policies) == 1
    spec = policies[0]["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    admitted = []
    for rule in spec["ingress"]:
        assert rule.get("from"), "a rule without 'from' admits every pod"
        ports = {p["port"] for p in rule["ports"]}
        for peer in rule["from"]:
            assert set(peer) <= {"podSelector", "ipBlock"}, peer  # no namespaceSelector: no other namespace
            who = peer.get("podSelector", {}).get("matchLabels", {}).get("app.kubernetes.io/name") or "ipBlock"
            admitted.append((who, frozenset(ports)))
            if who == "ipBlock":
                assert peer["ipBlock"]["cidr"] != "0.0.0.0/0"
    assert sorted(admitted, key=str) == sorted([("cellgate-router", frozenset({2379})), ("ipBlock", frozenset({2379})),
                                                ("etcd", frozenset({2379, 2380}))], key=str)
    # The pods the policy names are the router's and etcd's own.
    names = {w["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"]
             for w in by_kind("Deployment") + by_kind("StatefulSet")}
    assert {"cellgate-router", "etcd"} <= names


def test_the_node_pods_launcher_is_privileged_and_its_gateway_is_not():
    ds = next(w for w in by_kind("DaemonSet") if w["metadata"]["name"] == "cellgate-node")
    assert pod_spec(ds)["hostNetwork"] is True
    c = {c["name"]: c for c in containers(ds)}
    assert c["launchd"]["securityContext"]["privileged"] is True
    gw = c["gateway"]["securityContext"]
    assert gw.get("privileged") is not True and gw["runAsNonRoot"] is True
    assert gw["allowPrivilegeEscalation"] is False and gw["capabilities"]["drop"] == ["ALL"]


def test_the_node_pods_commands_are_accepted_by_the_binaries():
    ds = next(w for w in by_kind("DaemonSet") if w["metadata"]["name"] == "cellgate-node")
    c = {c["name"]: c for c in containers(ds)}
    launchd_flags_known(c["launchd"]["command"][1:])
    script = c["gateway"]["command"][2]
    script = script.replace('"$(printf %s "$NODE_NAME" | sha256sum | cut -c1-8)"', "0a1b2c3d")
    script = script.replace('"$HOST_IP:8888"', "10.0.0.21:8888")
    args = shlex.split(script)
    assert args[:2] == ["exec", "/usr/local/bin/cellgate"], args
    assert "$" not in " ".join(args), args
    check_config(args[2:], tokens_example())
    # Each member the node is given is one of the StatefulSet's.
    etcd = args[args.index("--etcd") + 1].split(",")
    assert etcd == [f"https://etcd-{i}.etcd.cellgate.svc:2379" for i in range(3)]
    # H4: its credentials are the init container's copies, in a volume of the pod's own.
    creds = {args[args.index(f) + 1] for f in ("--etcd-ca", "--etcd-cert", "--etcd-key", "--cluster-secret-file")}
    assert all(p.startswith("/run/cellgate-credentials/") for p in creds), creds
    copy = c["credentials"]["command"][2]
    assert "install -o 999 -g 999 -m 600" in copy and all(Path(p).name in copy for p in creds)
    assert c["gateway"]["securityContext"]["runAsUser"] == 999


def test_the_routers_config_is_valid_haproxy_and_its_sync_takes_its_flags():
    dep = next(w for w in by_kind("Deployment") if w["metadata"]["name"] == "cellgate-router")
    c = {c["name"]: c for c in containers(dep)}
    script = c["config"]["command"][2]
    args = shlex.split(script.split("&&", 1)[1].split(">", 1)[0])
    assert args[0] == "/usr/local/bin/cellgate-router"
    router_config_valid(args[1:])
    sync = c["sync"]["command"]
    r = subprocess.run(["/usr/bin/python3", str(ROUTER), "sync", "--help"], capture_output=True, text=True)
    for a in sync[2:]:
        assert a.split("=", 1)[0] in r.stdout, a
    given = dict(a.split("=", 1) for a in sync[2:])
    assert all(u.startswith("https://") for u in given["--etcd"].split(","))
    assert {"--etcd-ca", "--etcd-cert", "--etcd-key", "--cluster-secret-file"} <= set(given)
    # HAProxy reads the config the init container writes, at the same path.
    assert c["haproxy"]["command"][-1] == "/run/cellgate-router/haproxy.cfg"


def unit(name):
    text = (DEPLOY / "systemd" / name).read_text()
    text = re.sub(r"\\\n\s*", " ", text)  # systemd's line continuations
    p = configparser.ConfigParser(strict=False, interpolation=None)
    p.optionxform = str
    p.read_string(text)
    assert {"Unit", "Service", "Install"} <= set(p.sections()), name
    return p


def expand(command):
    return shlex.split(re.sub(r"\$\{(\w+)\}", lambda m: SAMPLE.get(m.group(1), "x"), command))


@pytest.mark.parametrize("name", sorted(p.name for p in (DEPLOY / "systemd").glob("*.service")))
def test_every_systemd_unit_parses(name):
    p = unit(name)
    assert p["Service"].get("ExecStart")


def test_the_systemd_units_commands_are_accepted_by_the_binaries():
    node = expand(unit("cellgate-node.service")["Service"]["ExecStart"])
    assert node[0] == "/usr/local/bin/cellgate"
    check_config(node[1:], '[{"token": "a-long-enough-token", "tenant": "t"}]')
    for f in ("--etcd-ca", "--etcd-cert", "--etcd-key", "--cluster-secret-file"):
        assert f in node, f
    etcd = expand(unit("cellgate-etcd.service")["Service"]["ExecStart"])
    assert etcd[0] == "/usr/bin/etcd"
    etcd_serves_only_tls_with_client_certificates(etcd[1:])
    launchd = expand(unit("cellgate-launchd.service")["Service"]["ExecStart"])
    launchd_flags_known(launchd[1:])
    pre = unit("cellgate-router.service")["Service"]["ExecStartPre"]
    inner = shlex.split(pre)[2]  # /bin/sh -c '…'
    router_config_valid(shlex.split(inner.split("&&", 1)[1].split(">", 1)[0])[1:])
    sync = expand(unit("cellgate-router-sync.service")["Service"]["ExecStart"])
    r = subprocess.run(["/usr/bin/python3", str(ROUTER), "sync", "--help"], capture_output=True, text=True)
    for a in sync[2:]:
        if a.startswith("--"):
            assert a in r.stdout, a
    for f in ("--etcd-ca", "--etcd-cert", "--etcd-key", "--cluster-secret-file"):
        assert f in sync, f


def test_check_config_refuses_what_the_gateway_would_refuse():
    # The check the tests above rely on can fail.
    r = subprocess.run([str(CELLGATE), "--node-tag", "NOT-HEX", "--check-config"], capture_output=True, text=True)
    assert r.returncode == 2 and "--node-tag" in r.stderr
    r = subprocess.run([str(CELLGATE), "--no-such-option", "1", "--check-config"], capture_output=True, text=True)
    assert r.returncode == 2
    # H4: a node of a cluster reaches etcd over TLS with its certificate and has the cluster secret.
    node = ["--node-tag", "0a1b2c3d", "--etcd", "https://10.0.0.11:2379"]
    creds = ["--etcd-ca", "ca.pem", "--etcd-cert", "n.pem", "--etcd-key", "n-key.pem", "--cluster-secret-file", "s"]
    for args, says in (([*node[:3], "http://10.0.0.11:2379", *creds], "https://"),
                       ([*node, *creds[2:]], "--etcd-ca"), ([*node, *creds[:6]], "--cluster-secret-file")):
        r = subprocess.run([str(CELLGATE), *args, "--check-config"], capture_output=True, text=True)
        assert r.returncode == 2 and says in r.stderr, (args, r.stderr)
    assert subprocess.run([str(CELLGATE), *node, *creds, "--check-config"], capture_output=True).returncode == 0


def _router_module():
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("cellgate_router", str(ROUTER))
    spec = importlib.util.spec_from_loader("cellgate_router", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def test_the_router_sync_sends_haproxy_nothing_from_etcd_it_has_not_validated():
    """Security review turn 3, H4: the sync pasted etcd's tags and addresses
    into HAProxy runtime-API commands, where ';' starts another command. A
    record whose tag, key or address is not one is ignored; a record's
    numbers that are not numbers do not stop the sync."""
    router = _router_module()
    sent = []

    class Etcd:
        def range_prefix(self, prefix):
            if prefix.endswith("tags/"):
                return {"0badcafe": {}, "x; shutdown sessions server any/node1": {}}
            return {
                "0badcafe": {"tag": "0badcafe", "address": "10.0.0.5:8888", "pool_ready": "lots", "max_kernels": 4},
                "deadbeef": {"tag": "deadbeef", "address": "10.0.0.6:8888; set server any/node1 addr 6.6.6.6"},
                "feedface": {"tag": "0badcafe", "address": "10.0.0.7:8888"},
                "FEEDFACE": {"tag": "FEEDFACE", "address": "10.0.0.8:8888"},
                "c0ffee00": {"tag": "c0ffee00", "address": "evil.example:8888\nshow info"},
            }

    sync = object.__new__(router.Sync)
    sync.rt = lambda command: sent.append(command) or ""
    sync.etcd = Etcd()
    sync.prefix, sync.map, sync.slots, sync.secret = "/cellgate/", "/run/ids.map", 4, None
    sync.owner, sync.address, sync.weights, sync.gone = {}, {}, {}, set()
    sync.once()
    assert sync.owner == {"0badcafe": 1}, sync.owner
    assert sent and all(";" not in c and "\n" not in c and "6.6.6.6" not in c and "evil" not in c for c in sent), sent
    assert "set server slot1/s addr 10.0.0.5 port 8888" in sent
    assert "set server any/node1 weight 5" in sent, sent  # 1 + 4 free; "lots" ready counts as none
    for ok in ("10.0.0.5:8888", "[fd00::2]:80", "node-a.svc.cluster.local:8888"):
        assert router.valid_address(ok), ok
    for bad in ("10.0.0.5", "a b:80", "a:0", "a:70000", "[fd00::2;x]:80", "-a:80", "a..b:80", 5):
        assert not router.valid_address(bad), bad


def test_the_router_sync_routes_only_records_the_nodes_signed():
    """Security review turn 3, H4: with --cluster-secret-file the sync takes
    a record only with the nodes' HMAC of its tag and address."""
    router = _router_module()
    secret = b"s" * 32
    good = {"tag": "0badcafe", "address": "10.0.0.5:8888"}
    good["sig"] = router.record_signature(secret, good["tag"], good["address"])
    assert router.valid_record("0badcafe", good, secret)
    assert router.valid_record("0badcafe", good)  # without a secret: form only
    assert not router.valid_record("0badcafe", {**good, "address": "10.0.0.6:8888"}, secret)
    assert not router.valid_record("0badcafe", {k: v for k, v in good.items() if k != "sig"}, secret)
    assert not router.valid_record("0badcafe", good, b"t" * 32)
    # The same signature as the gateway's (util/cluster_secret.cpp): length-prefixed fields.
    import hashlib
    import hmac
    text = b"23:cellgate node record v1\n8:0badcafe\n13:10.0.0.5:8888\n"
    assert good["sig"] == hmac.new(secret, text, hashlib.sha256).hexdigest()
    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp, "secret")
        f.write_bytes(secret + b"\n")
        f.chmod(0o644)
        with pytest.raises(SystemExit):
            router.read_secret(str(f))
        f.chmod(0o600)
        assert router.read_secret(str(f)) == secret


def test_the_cluster_script_makes_a_ca_whose_certificates_etcd_and_its_clients_take():
    """Security review turn 3, H4: `cellgate-cluster pki` makes the CA,
    etcd's certificate for the hosts named, the node's and the router's
    client certificates and the cluster secret; keys and secret are mode 600;
    each certificate chains to the CA; etcd's flags from the script are
    flags etcd takes."""
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp, "pki")
        r = subprocess.run(["/usr/bin/python3", str(DEPLOY / "cellgate-cluster"), "pki", "--dir", str(d), "--hosts",
                            "10.0.0.11,etcd-0.etcd"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert oct(d.stat().st_mode & 0o777) == "0o700"
        for name in ("ca-key.pem", "etcd-key.pem", "node-key.pem", "router-key.pem", "cluster-secret"):
            assert oct((d / name).stat().st_mode & 0o777) == "0o600", name
        assert len((d / "cluster-secret").read_text().strip()) == 64
        for name in ("etcd", "node", "router"):
            v = subprocess.run(["openssl", "verify", "-CAfile", str(d / "ca.pem"), str(d / f"{name}.pem")],
                               capture_output=True, text=True)
            assert v.returncode == 0, v.stdout + v.stderr
        text = subprocess.run(["openssl", "x509", "-noout", "-text", "-in", str(d / "etcd.pem")],
                              capture_output=True, text=True).stdout
        assert "IP Address:10.0.0.11" in text and "DNS:etcd-0.etcd" in text
        again = subprocess.run(["/usr/bin/python3", str(DEPLOY / "cellgate-cluster"), "pki", "--dir", str(d),
                                "--hosts", "10.0.0.11"], capture_output=True, text=True, timeout=60)
        assert again.returncode != 0 and "already" in again.stderr  # never a second CA over the first
    import importlib.machinery
    import importlib.util
    loader = importlib.machinery.SourceFileLoader("cellgate_cluster", str(DEPLOY / "cellgate-cluster"))
    spec = importlib.util.spec_from_loader("cellgate_cluster", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    argv = module.etcd_argv("m1", "10.0.0.11", 2379, 2380, "m1=https://10.0.0.11:2380", "/var/lib/e", "/etc/pki")
    etcd_serves_only_tls_with_client_certificates(argv[1:])
