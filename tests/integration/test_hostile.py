"""The hostile-code battery: what model-written or user code might try from
inside a session, sent through the gateway's agent API (/v1) exactly as an
agent would, under each OCI runtime (runc, and gVisor's runsc).

Every attack is its own test and asserts containment concretely (the errno,
the listener that saw nothing, the limit that was hit). After every test the
gateway must still answer /healthz and a neighbour session, started before
the battery, must still compute with the state it had (so it was neither
disturbed nor restarted). The last test per runtime stops the gateway and
checks that no container, cgroup, mount, loop device or process of the
battery is left.

Network probes stay on this machine: listeners on 127.0.0.1, ::1, the host
end of a veth pair into a network namespace this module creates, and in that
namespace (10.x addresses that exist only here, removed at the end); never
the machine's own network address. No probe ever
targets an address outside this machine; the AF_VSOCK check binds a port and
never connects (a vsock connect from a VM guest goes to its hypervisor).

SECURITY.md carries the table of these tests. Figures (latencies, RSS) are
printed at the end of each runtime's run and written to
$CELLGATE_TEST_LOGS/hostile-<runtime>.json.
"""
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

from support.confinement import LIMITS, MiB, RUNTIMES
from support.gateway import Gateway
from support.netns import NetnsHost
from support.prerequisites import BUILD, require, runtime_missing

# The battery also runs against runc-zygote: runc sandboxes whose kernels the
# launcher forks from the image's zygote (--zygote on). Attacks on the gateway
# (floods of messages, replayed frames) run under runc alone, where the
# runtime is not their subject (gateway_logic); those that do not depend on
# how the kernel was made skip the zygote (zygote_independent).
VARIANTS = RUNTIMES + ["runc-zygote"]
LAUNCH = BUILD / "bin" / "cellgate-launch"
DEV_SHM_BYTES = 64 * MiB        # the launcher's fixed /dev/shm size
OUTPUT_LIMIT = 1 * MiB          # the agent API's default per-execution text cap
RESULTS_LIMIT = 32 * MiB        # the agent API's cap on rich results per execution

# Planted in the gateway's environment; must never be found inside a sandbox.
SECRET = "cellgate-hostile-secret-" + uuid.uuid4().hex
TOKEN = "cellgate-hostile-token-" + uuid.uuid4().hex

REFUSED = {"EPERM", "EACCES", "ENOSYS"}
LOGS = Path(os.environ.get("CELLGATE_TEST_LOGS", "/tmp/cellgate-test-logs"))


# --- prerequisites ---------------------------------------------------------------------

def _require(runtime):
    require(f"the hostile battery on {runtime}", runtime_missing(runtime))


# --- the gateway under attack, and its neighbour ----------------------------------------

def api(gw, method, path, **kw):
    return gw.api(method, path, **kw)


def run(gw, sid, code, timeout_s=60, http_timeout=None):
    r = api(gw, "POST", f"/v1/sessions/{sid}/execute", json={"code": code, "timeout_s": timeout_s},
            timeout=http_timeout or timeout_s + 120)
    assert r.status_code == 200, r.text
    return r.json()


def probe(gw, sid, code, timeout_s=120):
    """Runs code that leaves a JSON-able `result`; returns it."""
    r = run(gw, sid, code + "\nimport json as _json\nprint('@@' + _json.dumps(result))", timeout_s=timeout_s)
    lines = [l for l in r["stdout"].splitlines() if l.startswith("@@")]
    assert r["status"] == "ok" and lines, (r["status"], r["stdout"][-2000:], r["stderr"][-2000:], r["error"])
    return json.loads(lines[-1][2:])


def new_session(gw, **body):
    r = api(gw, "POST", "/v1/sessions", json={"timeout_s": 120, **body})
    assert r.status_code == 201, r.text
    # Under runc-zygote every attack runs in a kernel forked from the zygote.
    assert r.json()["sandbox"]["zygote"] is gw.zygote, r.json()
    sid = r.json()["id"]
    gw.session_ids.append(sid)
    return sid


def kernel_log(gw, sid):
    """The gateway's log lines about one kernel (for failure messages)."""
    return [l[:300] for l in gw.log_text().splitlines() if sid in l][-12:]


def death_lines(gw, sid, timeout=30):
    """The gateway's "kernel …: died (why)" lines for a kernel; the line is
    written a moment after the death is noticed, so wait for one."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [l for l in kernel_log(gw, sid) if f"kernel {sid}: died (" in l]
        if lines or time.monotonic() > deadline:
            return lines
        time.sleep(0.2)


def wait_idle(gw, sid, timeout=90):
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        state = api(gw, "GET", f"/v1/sessions/{sid}").json().get("state")
        if state == "idle":
            return state
        time.sleep(0.3)
    return state


def rss_bytes(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def measure(gw, name, **values):
    gw.figures.setdefault(name, {}).update(values)
    print(f"[{gw.runtime}] {name}: {values}")


@pytest.fixture(scope="module", params=VARIANTS)
def gw(request, tmp_path_factory):
    variant = request.param
    runtime = variant.removesuffix("-zygote")
    _require(runtime)
    d = tmp_path_factory.mktemp(f"hostile-{variant}")
    config = d / "config.json"
    config.write_text(json.dumps({"kernelspecs": {"python3": {"runtime": runtime, "limits": LIMITS}}}))
    # Secrets a real deployment might have in its environment, under their
    # usual names and one of ours.
    env = dict(os.environ, CELLGATE_HOSTILE_SECRET=SECRET, AWS_SECRET_ACCESS_KEY=SECRET,
               OPENAI_API_KEY=SECRET, DATABASE_URL=f"postgres://gw:{SECRET}@127.0.0.1/db", CELLGATE_TOKEN=TOKEN)
    zygote = variant != runtime
    g = Gateway("--config", str(config), "--max-kernels", "16", *(["--zygote", "on"] if zygote else []),
                token=TOKEN, env=env)
    g.runtime = runtime
    g.zygote = zygote
    g.session_ids = []
    g.figures = {}
    g.stopped = False
    try:
        g.start()
        if zygote:
            g.wait_for_zygote()
        g.neighbour = new_session(g)
        r = run(g, g.neighbour, "neighbour_state = 1\nneighbour_state")
        assert r["status"] == "ok", r
        g.gateway_pid = g.proc.pid
        g.rss_start = rss_bytes(g.gateway_pid)
        yield g
    finally:
        LOGS.mkdir(parents=True, exist_ok=True)
        (LOGS / f"hostile-{variant}.json").write_text(json.dumps(g.figures, indent=1, sort_keys=True))
        # Straight to the terminal, past pytest's capture, so a passing run shows them too.
        reporter = request.config.pluginmanager.get_plugin("terminalreporter")
        capture = request.config.pluginmanager.get_plugin("capturemanager")
        if reporter is not None and capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.write_line("")
                reporter.write_line(f"hostile battery under {variant}: figures")
                for name, values in sorted(g.figures.items()):
                    reporter.write_line(f"  {name}: {json.dumps(values, sort_keys=True)}")
        g.stop()
        g.cleanup()


def assert_serving(gw):
    assert gw.proc.poll() is None, f"the gateway exited: {gw.log_text()[-3000:]}"
    assert gw.proc.pid == gw.gateway_pid
    t0 = time.monotonic()
    assert requests.get(gw.url + "/healthz", timeout=30).status_code == 200
    health_s = time.monotonic() - t0
    t0 = time.monotonic()
    r = run(gw, gw.neighbour, "neighbour_state + 1", timeout_s=60)
    neighbour_s = time.monotonic() - t0
    assert r["status"] == "ok", f"the neighbour session lost its kernel or state: {r}"
    assert r["results"][0]["data"]["text/plain"] == "2"
    return health_s, neighbour_s


@pytest.fixture(autouse=True)
def still_serving(request, gw):
    """After every attack: /healthz answers and the neighbour still computes."""
    yield
    if gw.stopped:
        return
    health_s, neighbour_s = assert_serving(gw)
    gw.figures.setdefault("after each test", {})[request.node.originalname] = \
        {"healthz_s": round(health_s, 3), "neighbour_1+1_s": round(neighbour_s, 3)}


# Attacks the battery shows are NOT contained today (SECURITY.md, "Known
# gaps"). They stay in the battery and run every time; they are expected to
# fail until fixed, and a strict one that starts passing fails the run so
# its entry here (and in SECURITY.md) gets removed.
# (test, runtime, runsc platform or None for any) → (strict, why).
KNOWN_GAPS = {
    ("test_a_fork_bomb_is_stopped_and_a_fork_loop_ends_at_the_pids_limit", "runsc", "ptrace"):
        (True, "under gVisor's ptrace platform each guest process costs ~34 MiB of host memory (a stub "
               "process): a fork loop is OOM-killed first"),
    # On kvm there are no stub processes; not measured on a machine with /dev/kvm yet, so either outcome.
    ("test_a_fork_bomb_is_stopped_and_a_fork_loop_ends_at_the_pids_limit", "runsc", None):
        (False, "gVisor on kvm: whether a fork loop meets the limit or the memory first is not measured yet"),
}


def sandbox_platform(gw):
    """The platform the gateway's sandboxes run on (asked once: a session's model)."""
    if not hasattr(gw, "sandbox_platform"):
        r = api(gw, "POST", "/v1/sessions", json={"timeout_s": 60})
        assert r.status_code == 201, r.text
        gw.sandbox_platform = r.json()["sandbox"]["platform"]
        api(gw, "DELETE", f"/v1/sessions/{r.json()['id']}")
    return gw.sandbox_platform


@pytest.fixture(autouse=True)
def known_gap(request):
    runtime = request.node.callspec.params.get("gw") if hasattr(request.node, "callspec") else None
    for (name, gap_runtime, platform), (strict, reason) in KNOWN_GAPS.items():
        if name != request.node.originalname or gap_runtime != runtime:
            continue
        if platform is not None and sandbox_platform(request.getfixturevalue("gw")) != platform:
            continue
        request.applymarker(pytest.mark.xfail(strict=strict, reason=f"known gap ({runtime}/{platform or 'any'}): {reason}"))
        break


@pytest.fixture
def attacker(gw):
    sid = new_session(gw)
    yield sid
    api(gw, "DELETE", f"/v1/sessions/{sid}")


@pytest.fixture(scope="module")
def prober(gw):
    """One session per gateway for the probes that only look and are refused
    (interfaces, socket families, processes, files, the environment,
    capabilities, privileged calls): a session each cost 2 to 5 s more per
    probe. Attacks that change or break their session get their own."""
    sid = new_session(gw)
    yield sid
    if not gw.stopped:
        api(gw, "DELETE", f"/v1/sessions/{sid}")


# --- a network namespace of our own -------------------------------------------------------

@pytest.fixture(scope="module")
def egress_netns():
    ns = NetnsHost("cg-hostile")
    try:
        yield ns
    finally:
        ns.close()


# --- egress ------------------------------------------------------------------------------

def test_the_sandbox_has_only_loopback_and_no_route(gw, prober):
    res = probe(gw, prober, """
import os, socket
def maybe(f):
    try:
        return f()
    except OSError as e:
        return 'absent: ' + e.strerror
result = {
  'if_nameindex': socket.if_nameindex(),
  'sys_class_net': maybe(lambda: sorted(os.listdir('/sys/class/net'))),
  'proc_net_dev': maybe(lambda: [l.split(':')[0].strip() for l in open('/proc/net/dev').read().splitlines()[2:]]),
  'routes_v4': maybe(lambda: open('/proc/net/route').read().splitlines()[1:]),
  'routes_v6_devs': maybe(lambda: sorted({l.split()[-1] for l in open('/proc/net/ipv6_route').read().splitlines()})),
}
""")
    measure(gw, "interfaces and routes", **res)
    assert res["if_nameindex"] == [[1, "lo"]]
    assert res["sys_class_net"] == ["lo"]
    assert res["proc_net_dev"] == ["lo"]
    assert res["routes_v4"] == [] or res["routes_v4"].startswith("absent")
    assert isinstance(res["routes_v6_devs"], str) or set(res["routes_v6_devs"]) <= {"lo"}


EGRESS_PROBE = r"""
import errno, json, socket
targets = json.loads(TARGETS)
result = {}
for t in targets:
    key = t['label']
    try:
        if t['kind'] == 'unix':
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(3)
            s.connect(t['addr'])
            result[key] = 'connected'
        elif t['kind'] == 'tcp':
            s = socket.socket(t['family'], socket.SOCK_STREAM)
            s.settimeout(3)
            s.connect((t['addr'], t['port']))
            s.sendall(b'GET /api HTTP/1.0\r\n\r\n')
            result[key] = 'connected'
        else:
            s = socket.socket(t['family'], socket.SOCK_DGRAM)
            s.sendto(b'cellgate-egress-probe', (t['addr'], t['port']))
            result[key] = 'sent'
        s.close()
    except socket.timeout:
        result[key] = 'timeout'
    except OSError as e:
        result[key] = errno.errorcode.get(e.errno, str(e))
"""


PROXY_PROBE = r"""
import json, socket
targets = json.loads(TARGETS)
result = {}
def ask(line):
    try:
        s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
        s.sendall(line.encode())
        data = b''
        while b'\r\n' not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
        s.close()
        return data.decode(errors='replace').split('\r\n')[0]
    except OSError as e:
        return 'error ' + str(e)
for t in targets:
    host = '[' + t['addr'] + ']' if ':' in t['addr'] else t['addr']
    target = f"{host}:{t['port']}"
    result['CONNECT ' + t['label']] = ask(f'CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n')
    result['GET ' + t['label']] = ask(f'GET http://{target}/api HTTP/1.1\r\nHost: {target}\r\n\r\n')
"""


# A session with a network policy (the proxy's socket mounted, the forwarder
# on 127.0.0.1:3128) has no more network than one without: the same probes
# reach nothing, and asking the proxy for any of these listeners is refused,
# although the session names every internal network: only the operator can
# open one.
NETWORK_POLICY = {"allow": ["*.example.test", "127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                            "::1/128", "fc00::/7", "fe80::/10"]}


@pytest.fixture(params=["no network", "a network policy"])
def net_attacker(request, gw):
    body = {} if request.param == "no network" else {"network": NETWORK_POLICY}
    sid = new_session(gw, **body)
    yield sid, request.param != "no network"
    api(gw, "DELETE", f"/v1/sessions/{sid}")


@pytest.mark.zygote_independent
def test_tcp_udp_and_unix_egress_to_every_listener_on_this_machine_never_arrives(gw, net_attacker, egress_netns, tmp_path):
    attacker, with_policy = net_attacker
    listeners = []  # (label, kind, family, addr, sock)
    # This machine's addresses a test may use: loopback's, and the host end of
    # the veth this module made (never the machine's own network address).
    for family, addr in [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1"),
                         (socket.AF_INET, egress_netns.host_addr)]:
        try:
            tcp = socket.socket(family, socket.SOCK_STREAM)
            tcp.bind((addr, 0))
            tcp.listen(16)
            udp = socket.socket(family, socket.SOCK_DGRAM)
            udp.bind((addr, 0))
        except OSError as e:
            print(f"cannot listen on {addr}: {e}")
            continue
        tcp.setblocking(False)
        udp.setblocking(False)
        listeners.append((f"tcp {addr}", "tcp", family, addr, tcp))
        listeners.append((f"udp {addr}", "udp", family, addr, udp))
    bound = {l[3] for l in listeners}
    assert "127.0.0.1" in bound and egress_netns.host_addr in bound, bound
    abstract = "\0cellgate-hostile-" + uuid.uuid4().hex
    unix_abstract = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_abstract.bind(abstract)
    unix_abstract.listen(4)
    unix_abstract.setblocking(False)
    path = str(tmp_path / "host.sock")
    unix_path = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    unix_path.bind(path)
    unix_path.listen(4)
    unix_path.setblocking(False)
    listeners += [("unix abstract", "unix", socket.AF_UNIX, abstract, unix_abstract),
                  ("unix path", "unix", socket.AF_UNIX, path, unix_path)]
    try:
        def drain():
            """Connections and datagrams each host listener has received."""
            seen = {}
            for label, kind, _, _, s in listeners:
                n = 0
                while True:
                    try:
                        if kind == "udp":
                            s.recvfrom(65536)
                        else:
                            s.accept()[0].close()
                        n += 1
                    except BlockingIOError:
                        break
                seen[label] = n
            return seen

        # The listeners work: the host reaches each of them (so a sandbox
        # that could reach them would be seen).
        for label, kind, family, addr, s in listeners:
            if kind == "udp":
                socket.socket(family, socket.SOCK_DGRAM).sendto(b"control", s.getsockname()[:2])
            else:
                c = socket.socket(family, socket.SOCK_STREAM)
                c.connect(s.getsockname() if kind == "unix" else s.getsockname()[:2])
                c.close()
        ns_before = egress_netns.counts()
        for _ in range(3):
            c = socket.create_connection((egress_netns.addr, egress_netns.tcp_port), timeout=5)
            c.close()
            socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"control", (egress_netns.addr, egress_netns.udp_port))
        time.sleep(0.3)
        controls = drain()
        ns_after_control = egress_netns.counts()
        assert all(n >= 1 for n in controls.values()), f"a listener did not see the host's own probe: {controls}"
        assert ns_after_control["tcp"] > ns_before["tcp"] and ns_after_control["udp"] > ns_before["udp"], \
            "the test netns listener did not see the host's own probe"

        targets = []
        for label, kind, family, addr, s in listeners:
            port = None if kind == "unix" else s.getsockname()[1]
            targets.append({"label": label, "kind": kind, "family": int(family), "addr": addr, "port": port})
        targets += [
            {"label": f"tcp netns {egress_netns.addr}", "kind": "tcp", "family": int(socket.AF_INET),
             "addr": egress_netns.addr, "port": egress_netns.tcp_port},
            {"label": f"udp netns {egress_netns.addr}", "kind": "udp", "family": int(socket.AF_INET),
             "addr": egress_netns.addr, "port": egress_netns.udp_port},
            {"label": "tcp gateway 127.0.0.1", "kind": "tcp", "family": int(socket.AF_INET), "addr": "127.0.0.1",
             "port": gw.port},
        ]
        res = probe(gw, attacker, f"TARGETS = {json.dumps(targets)!r}\n" + EGRESS_PROBE)
        via_proxy = {}
        if with_policy:
            tcp_targets = [t for t in targets if t["kind"] == "tcp"]
            via_proxy = probe(gw, attacker, f"TARGETS = {json.dumps(tcp_targets)!r}\n" + PROXY_PROBE)
        time.sleep(1.0)  # let any datagram that got out arrive
        arrived = drain()
        ns_after = egress_netns.counts()
        measure(gw, "egress" + (" with a network policy" if with_policy else ""), results=res, arrived=arrived,
                via_proxy=via_proxy, netns_arrived={k: ns_after[k] - ns_after_control[k] for k in ns_after})
        if with_policy:
            assert len(via_proxy) == 2 * len(tcp_targets), via_proxy
            for label, status in via_proxy.items():
                assert status.startswith("HTTP/1.1 403"), (label, status)
            log = api(gw, "GET", f"/v1/sessions/{attacker}/network/log").json()["connections"]
            assert len(log) >= len(via_proxy) and all(c["verdict"] == "refused" for c in log), log

        assert all(n == 0 for n in arrived.values()), f"something from the sandbox reached a host listener: {arrived}"
        assert ns_after == ns_after_control, f"something from the sandbox reached the test netns: {ns_after}"
        loopback = {"127.0.0.1", "::1"}
        for t in targets:
            got = res[t["label"]]
            assert got not in ("connected", "timeout"), (t["label"], got)
            if t["kind"] == "unix":
                # The host's abstract namespace belongs to its network
                # namespace; its file system is not mounted in the sandbox.
                assert got in ("ECONNREFUSED", "ENOENT"), (t["label"], got)
            elif t["addr"] in loopback:
                # The sandbox's own loopback: nothing listens there.
                if t["kind"] == "tcp":
                    assert got in ("ECONNREFUSED", "EADDRNOTAVAIL"), (t["label"], got)
            else:
                # No route at all (Linux says ENETUNREACH, gVisor EHOSTUNREACH).
                assert got in ("ENETUNREACH", "EHOSTUNREACH"), (t["label"], got)
    finally:
        for *_, s in listeners:
            s.close()


def test_socket_families_that_bypass_the_network_namespace_are_refused(gw, prober):
    """AF_VSOCK is not confined by a network namespace: in a VM guest (as
    here) its connections go to the hypervisor. AF_ALG is kernel crypto
    attack surface (CVE-2026-31431 wrote to the shared page cache through
    it). Neither has a use in a notebook; other rare families neither.
    Nothing here connects anywhere."""
    families = {"AF_VSOCK": 40, "AF_ALG": 38, "AF_PACKET": 17, "AF_KEY": 15, "AF_RDS": 21, "AF_TIPC": 30,
                "AF_BLUETOOTH": 31, "AF_KCM": 41, "AF_QIPCRTR": 42, "AF_SMC": 43, "AF_XDP": 44, "AF_CAN": 29,
                "AF_APPLETALK": 5, "AF_X25": 9, "AF_AX25": 3, "AF_NETROM": 6, "AF_ROSE": 11, "AF_ATMPVC": 8,
                "AF_LLC": 26, "AF_PHONET": 35, "AF_IEEE802154": 36, "AF_CAIF": 37, "AF_NFC": 39, "AF_MCTP": 45}
    port = random.randint(1 << 20, 1 << 30)
    res = probe(gw, prober, f"""
import errno, socket
families = {families!r}
result = {{}}
kept = []
for name, fam in families.items():
    created = None
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM, socket.SOCK_SEQPACKET, socket.SOCK_RAW):
        try:
            s = socket.socket(fam, kind)
            created = 'created'
            if name == 'AF_VSOCK':
                # Binding is local: it claims a port in the vsock port space.
                s.bind((socket.VMADDR_CID_ANY, {port}))
                created = 'created, bound port {port}'
                kept.append(s)
            break
        except OSError as e:
            created = created or errno.errorcode.get(e.errno, str(e))
    result[name] = created
vsock_holder = kept
""")
    shared = None
    if str(res["AF_VSOCK"]).startswith("created"):
        # Is that port space the host's? A host bind of the same port says so
        # without a packet being sent.
        h = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
        try:
            h.bind((socket.VMADDR_CID_ANY, port))
            shared = False
        except OSError as e:
            shared = e.strerror
        finally:
            h.close()
    run(gw, prober, "for s in vsock_holder: s.close()")
    measure(gw, "socket families", results=res, vsock_port_shared_with_host=shared)
    created = {k: v for k, v in res.items() if str(v).startswith("created")}
    assert not created, (f"socket families usable inside the sandbox: {created}"
                         + (f"; the AF_VSOCK port space is the host's (host bind: {shared})" if shared else ""))


# --- host files, processes, environment ------------------------------------------------

def test_no_host_process_is_visible_or_reachable(gw, prober):
    host_pids = [gw.proc.pid, os.getpid()]
    res = probe(gw, prober, f"""
import errno, os, socket
procs = {{}}
for p in os.listdir('/proc'):
    if p.isdigit():
        try:
            procs[p] = open(f'/proc/{{p}}/cmdline', 'rb').read().replace(b'\\0', b' ').decode(errors='replace')
        except OSError as e:
            procs[p] = 'unreadable'
signals = {{}}
for pid in {host_pids!r}:
    try:
        os.kill(pid, 0)
        signals[pid] = 'reachable'
    except OSError as e:
        signals[pid] = errno.errorcode[e.errno]
result = {{'procs': procs, 'signals': signals, 'hostname': socket.gethostname(),
          'pid1': open('/proc/1/cmdline', 'rb').read().split(b'\\0')[0].decode()}}
""")
    measure(gw, "host processes", **res)
    allowed = ("/usr/bin/tini", "/usr/bin/python3 -s /opt/cellgate/cellgate-kernel",
               "/usr/bin/python3 -I -S /mnt/cellgate-relay.py",
               # runc-zygote: tini holds the sandbox over a sleep; the kernel keeps the zygote's command line
               "/bin/sleep infinity", "/usr/bin/python3 -s /opt/cellgate/cellgate-zygote")
    assert all(cmd.startswith(allowed) for cmd in res["procs"].values()), res["procs"]
    assert len(res["procs"]) <= 3, res["procs"]
    assert res["pid1"] == "/usr/bin/tini"
    assert set(res["signals"].values()) == {"ESRCH"}, res["signals"]
    assert res["hostname"] != socket.gethostname()


def test_host_files_and_host_kernel_settings_are_out_of_reach(gw, prober):
    marker = f"cellgate-hostile-marker-{uuid.uuid4().hex}"
    planted = [Path("/tmp") / marker, Path("/root") / marker, Path("/run") / marker, gw.base_dir / marker,
               gw.state_dir / marker]
    for p in planted:
        p.write_text("host secret " + SECRET)
    try:
        res = probe(gw, prober, f"""
import errno, os, stat
def attempt(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
found = [os.path.join(r, n) for r, d, f in os.walk('/') if not r.startswith(('/proc', '/sys'))
         for n in f + d if {marker!r} in n]
reads = {{p: attempt(lambda p=p: open(p).read()) for p in {[str(p) for p in planted]!r}}}
writes = {{p: attempt(lambda p=p: open(p, 'w').write('x')) for p in
          ('/proc/sys/kernel/core_pattern', '/proc/sysrq-trigger', '/proc/sys/vm/drop_caches',
           '/sys/kernel/uevent_helper', '/proc/sys/kernel/modprobe', '/etc/passwd', '/usr/bin/python3',
           '/opt/cellgate/cellgate-kernel')}}
secrets = {{p: attempt(lambda p=p: open(p, 'rb').read(1)) for p in ('/proc/kcore', '/dev/mem', '/dev/kmsg', '/dev/vda')}}
kallsyms = open('/proc/kallsyms').read(200) if os.path.exists('/proc/kallsyms') else ''
block = [n for n in os.listdir('/dev') if stat.S_ISBLK(os.lstat('/dev/' + n).st_mode)]
result = {{'found': found, 'reads': reads, 'writes': writes, 'secrets': secrets, 'block_devices': block,
          'kallsyms_addresses': [l.split()[0] for l in kallsyms.splitlines()[:3]]}}
""")
    finally:
        for p in planted:
            p.unlink()
    measure(gw, "host files", **{k: v for k, v in res.items() if k != "found"})
    assert res["found"] == [], "a file planted on the host is visible inside"
    assert set(res["reads"].values()) <= {"ENOENT", "EACCES"}, res["reads"]
    assert all(v in ("EROFS", "EACCES", "EPERM", "ENOENT") for v in res["writes"].values()), res["writes"]
    assert all(v in ("EACCES", "EPERM", "ENOENT") for v in res["secrets"].values()), res["secrets"]
    assert res["block_devices"] == []
    assert all(set(a) <= {"0"} for a in res["kallsyms_addresses"]), "kernel addresses leak through /proc/kallsyms"


SEARCH_PROBE = r"""
import os
# Given in hex, so that the probe's own code (kept in IPython's history
# under /tmp) does not hold what it looks for.
needles = [bytes.fromhex(n) for n in NEEDLES_HEX]
hits = []
def look(where, data):
    for n in needles:
        if n in data:
            hits.append(where)
look('os.environ', repr(dict(os.environ)).encode())
for p in os.listdir('/proc'):
    if p.isdigit() or p in ('self', 'thread-self'):
        for f in ('environ', 'cmdline'):
            try:
                look(f'/proc/{p}/{f}', open(f'/proc/{p}/{f}', 'rb').read())
            except OSError:
                pass
scanned = 0
for top in ('/workspace', '/tmp', '/run', '/dev/shm', '/etc', '/var', '/home', '/root', '/mnt', '/opt', '/srv'):
    for root, dirs, files in os.walk(top):
        for name in files:
            path = os.path.join(root, name)
            try:
                if os.path.islink(path) or os.path.getsize(path) > (1 << 20):
                    continue
                with open(path, 'rb') as f:
                    look(path, f.read())
                scanned += 1
            except OSError:
                pass
result = {'hits': hits, 'files_scanned': scanned, 'env_names': sorted(os.environ)}
"""


def test_the_gateways_environment_and_token_never_reach_the_kernel(gw, prober):
    res = probe(gw, prober, f"NEEDLES_HEX = {[SECRET.encode().hex(), TOKEN.encode().hex()]!r}\n" + SEARCH_PROBE)
    measure(gw, "gateway environment", files_scanned=res["files_scanned"], env_names=res["env_names"])
    assert res["hits"] == [], f"the gateway's secret or token is readable inside at {res['hits']}"
    for name in ("CELLGATE_HOSTILE_SECRET", "AWS_SECRET_ACCESS_KEY", "OPENAI_API_KEY", "DATABASE_URL",
                 "CELLGATE_TOKEN"):
        assert name not in res["env_names"]
    assert res["files_scanned"] > 50, "the search must actually have read files"


# --- privileges ---------------------------------------------------------------------------

def test_no_capabilities_and_no_way_to_regain_privileges(gw, prober):
    res = probe(gw, prober, """
import ctypes, errno, os, resource
def attempt(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
    except ValueError as e:
        return 'ValueError'
status = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)
libc = ctypes.CDLL(None, use_errno=True)
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
cgroup_files = [p for p in ('/sys/fs/cgroup/memory/memory.limit_in_bytes', '/sys/fs/cgroup/pids/pids.max',
                            '/sys/fs/cgroup/memory.max', '/sys/fs/cgroup/pids.max', '/sys/fs/cgroup/cpu/cpu.cfs_quota_us')
                if os.path.exists(p)]
open('/workspace/owner-probe', 'w').write('x')
result = {
  'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(), 'groups': os.getgroups(),
  'caps': {k: status[k].strip() for k in ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb') if k in status},
  'seccomp': status.get('Seccomp', '').strip(),
  'no_new_privs': libc.prctl(39, 0, 0, 0, 0),
  'setuid0': attempt(lambda: os.setuid(0)),
  'setgid0': attempt(lambda: os.setgid(0)),
  'setgroups0': attempt(lambda: os.setgroups([0])),
  'raise_nofile': attempt(lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (hard + 1, hard + 1))),
  'raise_cgroup': {p: attempt(lambda p=p: open(p, 'w').write('-1')) for p in cgroup_files},
  'setuid_binaries': {p: [os.stat(p).st_uid, oct(os.stat(p).st_mode & 0o6000)]
                      for top in ('/usr/bin', '/usr/sbin', '/usr/libexec') if os.path.isdir(top)
                      for p in (os.path.join(top, n) for n in os.listdir(top))
                      if not os.path.islink(p) and os.path.isfile(p) and os.stat(p).st_mode & 0o6000},
  'su_euid': None,
}
# A setuid-root program run by the kernel: what does it run as? su waits for a
# password on its stdin, which gives time to look.
if '/usr/bin/su' in result['setuid_binaries']:
    import subprocess, time
    su = subprocess.Popen(['/usr/bin/su', 'root', '-c', 'true'], stdin=subprocess.PIPE,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(50):
        time.sleep(0.05)
        try:
            st = open(f'/proc/{su.pid}/status').read()
            if '/usr/bin/su' in open(f'/proc/{su.pid}/cmdline').read().replace('\\0', ' '):
                result['su_euid'] = int([l for l in st.splitlines() if l.startswith('Uid:')][0].split()[2])
                break
        except OSError:
            break
    su.kill()
    su.wait()
""")
    measure(gw, "capabilities", **res)
    assert res["uid"] == res["euid"] == 1000 and res["gid"] == 1000 and 0 not in res["groups"]
    assert res["caps"] and all(int(v, 16) == 0 for v in res["caps"].values()), res["caps"]
    assert res["seccomp"] == "2"
    assert res["no_new_privs"] == 1
    for k in ("setuid0", "setgid0", "setgroups0", "raise_nofile"):
        assert res[k] in ("EPERM", "ValueError"), (k, res[k])
    assert all(v in ("EROFS", "EACCES", "EPERM") for v in res["raise_cgroup"].values()), res["raise_cgroup"]
    # The image has setuid programs (su, newgrp): with no_new_privs, and with
    # their owner (host root) unmapped in the user namespace, they run as the
    # kernel's own uid.
    if res["su_euid"] is not None:
        assert res["su_euid"] == 1000, res["su_euid"]
    # uid 1000 inside is a high, per-session uid on the host.
    owner = os.stat(gw.workspace_root / prober / "owner-probe").st_uid
    assert owner >= 1_000_000, owner


SYSCALL_PROBE = r"""
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
buf = ctypes.create_string_buffer(4096)
def sys_(nr, *args):
    ctypes.set_errno(0)
    rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    if rc == 0 and nr in (56, 435):   # a clone that succeeded: the child leaves at once
        os._exit(0)
    return 'ok' if rc >= 0 else errno.errorcode.get(ctypes.get_errno(), str(ctypes.get_errno()))
def sock(*a):
    try:
        socket.socket(*a).close()
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
netns = os.open('/proc/self/ns/net', os.O_RDONLY)
clone_args = (ctypes.c_uint64 * 11)(0x10000000, 0, 0, 0, 17, 0, 0, 0, 0, 0, 0)
# Arguments are chosen so that a call that got past the permission checks would fail
# harmlessly (bad magic, bad size, nonexistent path) instead of doing anything.
result = {
  'mount tmpfs': sys_(165, b'none', b'/tmp', b'tmpfs', 0, 0),
  'mount (x32 ABI)': sys_(0x40000000 | 165, b'none', b'/tmp', b'tmpfs', 0, 0),
  'umount2 /workspace': sys_(166, b'/workspace', 2),
  'pivot_root': sys_(155, b'/tmp', b'/tmp'),
  'chroot': sys_(161, b'/tmp'),
  'unshare user': sys_(272, 0x10000000),
  'unshare net': sys_(272, 0x40000000),
  'unshare mount': sys_(272, 0x00020000),
  'setns net': sys_(308, netns, 0),
  'clone newuser': sys_(56, 0x10000000 | 17, 0, 0, 0, 0),
  'clone3 newuser': sys_(435, ctypes.byref(clone_args), 88),
  'ptrace attach pid 1': sys_(101, 16, 1, 0, 0),
  'ptrace traceme': sys_(101, 0, 0, 0, 0),
  'process_vm_readv pid 1': sys_(310, 1, buf, 1, buf, 1, 0),
  'init_module': sys_(175, buf, 64, b''),
  'finit_module': sys_(313, os.open('/dev/null', os.O_RDONLY), b'', 0),
  'delete_module': sys_(176, b'ext4', 0x800),
  'kexec_load': sys_(246, 0, 0, 0, 0),
  'kexec_file_load': sys_(320, -1, -1, 0, b'', 0),
  'reboot (bad magic)': sys_(169, 0, 0, 0, 0),
  'swapon': sys_(167, b'/nonexistent', 0),
  'syslog read (dmesg)': sys_(103, 3, buf, 4096),
  'acct': sys_(163, b'/nonexistent'),
  'settimeofday (bad value)': sys_(164, (ctypes.c_long * 2)(0, 2_000_000), 0),
  'clock_settime (bad value)': sys_(227, 0, (ctypes.c_long * 2)(0, 2_000_000_000)),
  'sethostname': sys_(170, b'x', 1),
  'iopl': sys_(172, 3),
  'ioperm': sys_(173, 0, 1, 1),
  'bpf map create': sys_(321, 0, buf, 128),
  'perf_event_open': sys_(298, buf, 0, -1, -1, 0),
  'userfaultfd': sys_(323, 0),
  'io_uring_setup': sys_(425, 1, buf),
  'keyctl': sys_(250, 0, -3, 0),
  'add_key': sys_(248, b'user', b'x', b'x', 1, -3),
  'open_by_handle_at': sys_(304, -100, buf, 0),
  'name_to_handle_at': sys_(303, -100, b'/', buf, buf, 0),
  'kcmp': sys_(312, 1, os.getpid(), 0, 0, 0),
  'fanotify_init': sys_(300, 0, 0),
  'quotactl': sys_(179, 0, b'/dev/null', 0, 0),
  'raw socket (inet)': sock(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
  'raw socket (inet6)': sock(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6),
  'packet socket': sock(socket.AF_PACKET, socket.SOCK_RAW, 0),
}
"""


def test_mount_unshare_ptrace_module_loading_raw_sockets_and_other_privileged_calls_are_refused(gw, prober):
    res = probe(gw, prober, SYSCALL_PROBE)
    measure(gw, "privileged system calls", **res)
    not_refused = {k: v for k, v in res.items() if v not in REFUSED and not (k == "packet socket" and v == "EAFNOSUPPORT")}
    assert not not_refused, f"not refused (a call that reached its implementation): {not_refused}"


DEVICE_PROBE = r"""
import errno, fcntl, os, stat, struct
nodes = {'null': (stat.S_IFCHR, 1, 3), 'mem': (stat.S_IFCHR, 1, 1), 'kmsg': (stat.S_IFCHR, 1, 11),
         'kvm': (stat.S_IFCHR, 10, 232), 'tun': (stat.S_IFCHR, 10, 200), 'vda': (stat.S_IFBLK, 253, 0),
         'sda': (stat.S_IFBLK, 8, 0), 'loop0': (stat.S_IFBLK, 7, 0)}
result = {'mknod': {}, 'tunsetiff': None}
for d in ('/tmp', '/dev/shm', '/workspace'):
    for name, (kind, major, minor) in nodes.items():
        p = f'{d}/cellgate-dev-{name}'
        try:
            os.mknod(p, kind | 0o666, os.makedev(major, minor))
        except OSError as e:
            result['mknod'][p] = errno.errorcode[e.errno]
            continue
        try:
            os.close(os.open(p, os.O_RDWR))
            result['mknod'][p] = 'created, opened'
        except OSError as e:
            result['mknod'][p] = 'created, open ' + errno.errorcode[e.errno]
        os.unlink(p)
# A tun device would be a network interface of the sandbox's own.
try:
    fd = os.open('/dev/net/tun', os.O_RDWR)
    try:
        fcntl.ioctl(fd, 0x400454ca, struct.pack('16sH', b'cellgate0', 0x1001))  # TUNSETIFF, IFF_TUN|IFF_NO_PI
        result['tunsetiff'] = 'ok'
    except OSError as e:
        result['tunsetiff'] = errno.errorcode[e.errno]
    os.close(fd)
except OSError as e:
    result['tunsetiff'] = 'no tun: ' + errno.errorcode[e.errno]
"""


def test_device_nodes_lead_to_no_host_device(gw, attacker):
    """Under runc mknod needs CAP_MKNOD (absent) and the devices cgroup denies
    every device the spec does not list. gVisor's sentry (2022 release) lets
    uid 1000 create device nodes in its own tmpfs and ignores nodev there,
    but its devices are its own emulations: no host device is behind them."""
    res = probe(gw, attacker, DEVICE_PROBE)
    measure(gw, "device nodes", **res)
    host_devices = ("mem", "kmsg", "kvm", "vda", "sda", "loop0")
    for path, got in res["mknod"].items():
        if gw.runtime == "runc":
            assert got == "EPERM", (path, got)
        if path.rsplit("-", 1)[1] in host_devices:
            assert got in ("EPERM", "EACCES") or got.startswith("created, open E"), (path, got)
    assert all(v in ("EPERM", "EACCES") for p, v in res["mknod"].items() if p.startswith("/workspace")), res["mknod"]
    assert res["tunsetiff"] == "EPERM" or res["tunsetiff"].startswith("no tun"), res["tunsetiff"]


# --- other sessions -----------------------------------------------------------------------

def test_one_session_cannot_read_or_reach_another(gw, attacker):
    victim = new_session(gw)
    try:
        marker = f"victim-private-{uuid.uuid4().hex}"
        abstract = "cellgate-victim-" + uuid.uuid4().hex
        shm_key = random.randint(1 << 20, 1 << 30)
        r = run(gw, victim, f"""
import ctypes, socket
open('/workspace/{marker}.txt', 'w').write('private')
open('/tmp/{marker}.tmp', 'w').write('private')
open('/dev/shm/{marker}.shm', 'w').write('private')
victim_secret = 'private'
listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
listener.bind('\\0{abstract}')
listener.listen(4)
libc = ctypes.CDLL(None, use_errno=True)
shm_id = libc.shmget({shm_key}, 4096, 0o1666)
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); c.connect('\\0{abstract}'); c.close()
print(shm_id >= 0)
""")
        assert r["status"] == "ok" and r["stdout"] == "True\n", r
        assert api(gw, "PUT", f"/v1/sessions/{victim}/files/{marker}.up", data=b"uploaded").status_code == 201
        conn = json.loads((gw.state_dir / "sandboxes" / victim / "connection.json").read_text())
        victim_key = conn["key"]
        # The host ends of the victim's kernel sockets (the relay's, under gVisor).
        victim_ipc = [str(p) for p in (gw.state_dir / "sandboxes" / victim).rglob("k-*")]
        victim_workspace = str(gw.workspace_root / victim)
        res = probe(gw, attacker, f"""
import ctypes, errno, os, socket
def attempt(f):
    try:
        f()
        return 'ok'
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e))
found = [os.path.join(r, n) for r, d, f in os.walk('/') if not r.startswith(('/proc', '/sys'))
         for n in f + d if {marker!r} in n]
libc = ctypes.CDLL(None, use_errno=True)
ctypes.set_errno(0)
shm = libc.shmget({shm_key}, 0, 0)
def connect_abstract():
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect('\\0{abstract}')
result = {{
  'found': found,
  'workspace': sorted(os.listdir('/workspace')),
  'victim_workspace_on_host': attempt(lambda: os.listdir({victim_workspace!r})),
  'victim_ipc_sockets': {{p: attempt(lambda p=p: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect(p))
                          for p in {victim_ipc!r}}},
  'victim_abstract_socket': attempt(connect_abstract),
  'victim_sysv_shm': 'found' if shm >= 0 else errno.errorcode.get(ctypes.get_errno()),
  'procs': sorted(open(f'/proc/{{p}}/cmdline', 'rb').read().split(b'\\0')[0].decode()
                  for p in os.listdir('/proc') if p.isdigit()),
}}
""")
        keys = probe(gw, attacker, f"NEEDLES_HEX = {[victim_key.encode().hex()]!r}\n" + SEARCH_PROBE)
        measure(gw, "cross-session", **{k: v for k, v in res.items() if k != "found"}, key_hits=keys["hits"])
        assert res["found"] == [], "the victim's files are visible to the attacker"
        assert res["workspace"] == [], res["workspace"]
        assert res["victim_workspace_on_host"] == "ENOENT"
        assert res["victim_ipc_sockets"] and set(res["victim_ipc_sockets"].values()) == {"ENOENT"}, \
            res["victim_ipc_sockets"]
        assert res["victim_abstract_socket"] == "ECONNREFUSED"
        assert res["victim_sysv_shm"] == "ENOENT"
        assert keys["hits"] == [], f"the victim's kernel key is readable by the attacker at {keys['hits']}"
        # Distinct host uids: even outside its mounts the attacker could not
        # open the victim's files.
        run(gw, attacker, "open('/workspace/mine', 'w').write('x')")
        assert os.stat(gw.workspace_root / victim / f"{marker}.txt").st_uid != \
            os.stat(gw.workspace_root / attacker / "mine").st_uid
        # And the victim still has everything.
        r = run(gw, victim, f"print(victim_secret, open('/workspace/{marker}.up').read())")
        assert r["stdout"] == "private uploaded\n", r
    finally:
        api(gw, "DELETE", f"/v1/sessions/{victim}")


# --- resource bombs -----------------------------------------------------------------------

def test_a_fork_bomb_is_stopped_and_a_fork_loop_ends_at_the_pids_limit(gw, attacker):
    # The real thing: every process forks forever and ignores SIGINT, so the
    # interrupt cannot stop it and the gateway must kill the sandbox.
    t0 = time.monotonic()
    r = run(gw, attacker, """
import os, signal
signal.signal(signal.SIGINT, signal.SIG_IGN)
open('/workspace/before-bomb', 'w').write('x')
while True:
    try:
        os.fork()
    except OSError:
        pass
""", timeout_s=5)
    bomb_s = time.monotonic() - t0
    during = assert_serving(gw)
    died = death_lines(gw, attacker) if r["status"] == "kernel_died" else []
    state = wait_idle(gw, attacker)
    after = run(gw, attacker, "import os\nprint(1 + 1, os.path.exists('/workspace/before-bomb'))")
    # Counted: fork until refused; the children sleep and are reaped.
    counted = run(gw, attacker, """
import errno, os, time
pids, err = [], None
try:
    for _ in range(10000):
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        pids.append(pid)
except OSError as e:
    err = errno.errorcode[e.errno]
for p in pids:
    os.kill(p, 9)
for p in pids:
    os.waitpid(p, 0)
print(len(pids), err)
""")
    measure(gw, "fork bomb", bomb={"status": r["status"], "kernel_restarted": r["kernel_restarted"],
                                   "call_s": round(bomb_s, 2), "death": died[-1:]},
            healthz_and_neighbour_during_s=[round(x, 3) for x in during],
            fork_loop={"status": counted["status"], "stdout": counted["stdout"].strip(),
                       "death": death_lines(gw, attacker)[-1:] if counted["status"] == "kernel_died" else []})
    # The bomb ends: the kernel is killed and restarted (by the timeout, or
    # by the memory limit when the processes cost more memory than the pids
    # limit allows for), and the session carries on with its files.
    assert (r["status"] == "timeout" and r["kernel_restarted"] is True) or \
        (r["status"] == "kernel_died" and died and "OOM-killed" in died[-1]), (r["status"], kernel_log(gw, attacker))
    assert state == "idle", (state, kernel_log(gw, attacker))
    assert after["status"] == "ok" and after["stdout"] == "2 True\n", (after, kernel_log(gw, attacker))
    # A fork loop meets the pids limit itself: fork fails with EAGAIN and the
    # kernel lives on.
    assert counted["status"] == "ok", ("the fork loop did not end in a refused fork: the kernel went "
                                       f"{counted['status']}", kernel_log(gw, attacker))
    forked, err = counted["stdout"].split()
    assert err == "EAGAIN" and int(forked) < LIMITS["pids"], counted["stdout"]


def test_a_memory_bomb_is_oom_killed_reported_and_the_session_restarted(gw, attacker):
    avail_before = _mem_available()
    run(gw, attacker, "kept_variable = 1\nopen('/workspace/kept-file', 'w').write('x')")
    t0 = time.monotonic()
    r = run(gw, attacker, "hog = b'x' * (2 << 30)\nprint('allocated')", timeout_s=60)
    measure(gw, "memory bomb", status=r["status"], stderr=r["stderr"][-300:], call_s=round(time.monotonic() - t0, 2),
            host_mem_available_mib_before_after=[avail_before >> 20, _mem_available() >> 20])
    assert r["status"] == "kernel_died", r
    assert "allocated" not in r["stdout"]
    # The client is told why, in the cell's error and its stderr.
    assert r["error"]["ename"] == "KernelDied" and "memory limit of 512 MiB" in r["error"]["evalue"], r
    assert "OOM-killed" in r["stderr"], r
    # The log names the cause.
    died = death_lines(gw, attacker)
    assert died and "OOM-killed by its memory limit" in died[-1], died
    # Restarted per policy: back to idle, state lost, files kept.
    state = wait_idle(gw, attacker)
    assert state == "idle", (f"the session did not come back after the OOM kill (state {state})",
                             kernel_log(gw, attacker))
    after = run(gw, attacker, "import os\nprint('kept_variable' in dir(), os.path.exists('/workspace/kept-file'))")
    assert after["status"] == "ok" and after["stdout"] == "False True\n", (after, kernel_log(gw, attacker))


def _mem_available():
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


DISK_BOMB = r"""
import errno, os
candidates = {'/workspace', '/tmp', '/dev/shm', '/run/kernel', '/', '/etc', '/usr', '/opt', '/var', '/var/tmp',
              '/home', '/root', '/mnt', '/dev', '/run', '/srv'}
for line in open('/proc/self/mountinfo'):
    mp = line.split()[4]
    if not mp.startswith(('/proc', '/sys', '/dev/pts', '/dev/mqueue')) and os.path.isdir(mp):
        candidates.add(mp)
chunk = b'\xa5' * (1 << 20)
result = {}
for d in sorted(candidates):
    written, err, files = 0, None, []
    try:
        for i in range(MAX_MIB // 4):
            name = os.path.join(d, f'cellgate-fill-{i}')
            files.append(name)
            with open(name, 'wb') as f:
                for _ in range(4):
                    f.write(chunk)
                    f.flush()
                    written += 1
        err = 'no limit within %d MiB' % MAX_MIB
    except OSError as e:
        err = errno.errorcode.get(e.errno, str(e))
    for name in files:
        try:
            os.unlink(name)
        except OSError:
            pass
    result[d] = {'mib_written': written, 'stopped_by': err}
"""


def test_a_disk_bomb_stops_at_each_writable_places_cap(gw, attacker):
    usage_before = shutil.disk_usage(gw.workspace_root).used
    res = probe(gw, attacker, "MAX_MIB = 256\n" + DISK_BOMB, timeout_s=300)
    image = gw.workspace_root / f"{attacker}.img"
    image_bytes = image.stat().st_blocks * 512 if image.exists() else 0
    usage_delta = shutil.disk_usage(gw.workspace_root).used - usage_before
    writable = {d: v for d, v in res.items() if v["mib_written"] > 0 or v["stopped_by"] not in
                ("EROFS", "EACCES", "EPERM", "ENOENT")}
    measure(gw, "disk bomb", writable=writable, workspace_image_mib=round(image_bytes / MiB, 1),
            host_disk_used_delta_mib=round(usage_delta / MiB, 1))
    caps = {"/workspace": LIMITS["workspace_bytes"], "/tmp": LIMITS["tmp_bytes"], "/dev/shm": DEV_SHM_BYTES}
    assert set(writable) <= set(caps), f"writable places the battery does not know: {writable}"
    for d, cap in caps.items():
        assert res[d]["stopped_by"] in ("ENOSPC", "EFBIG"), (d, res[d])
        assert res[d]["mib_written"] * MiB <= cap, (d, res[d])
        assert res[d]["mib_written"] * MiB >= cap // 2, f"{d} filled less than half its cap: {res[d]}"
    assert res["/workspace"]["stopped_by"] == "ENOSPC" and res["/tmp"]["stopped_by"] == "ENOSPC"
    # The host holds no more than the cap for the workspace (a sparse image).
    assert image_bytes <= LIMITS["workspace_bytes"] + 2 * MiB, image_bytes
    assert run(gw, attacker, "open('/workspace/small', 'w').write('fine')")["status"] == "ok", \
        "the workspace is usable again once the fill is gone"


def test_a_cpu_bomb_is_held_to_its_quota_while_the_neighbour_answers(gw, attacker):
    cpuacct = Path("/sys/fs/cgroup/cpuacct/cellgate") / attacker / "cpuacct.usage"
    seconds = 7
    result = {}
    t = threading.Thread(target=lambda: result.update(run(gw, attacker, f"""
import os, threading, time
deadline = time.time() + {seconds}
def spin():
    while time.time() < deadline:
        pass
threads = [threading.Thread(target=spin) for _ in range(4)]
for th in threads:
    th.start()
kids = []
for _ in range(8):
    pid = os.fork()
    if pid == 0:
        spin()
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
for th in threads:
    th.join()
print('done')
""", timeout_s=seconds + 60)))
    usage0, t0 = (int(cpuacct.read_text()) if cpuacct.exists() else None), time.monotonic()
    t.start()
    time.sleep(2)
    neighbour, health = [], []
    while t.is_alive() and time.monotonic() - t0 < seconds - 1:
        s = time.monotonic()
        assert requests.get(gw.url + "/healthz", timeout=30).status_code == 200
        health.append(time.monotonic() - s)
        s = time.monotonic()
        r = run(gw, gw.neighbour, "neighbour_state + 1", timeout_s=60)
        neighbour.append(time.monotonic() - s)
        assert r["status"] == "ok" and r["results"][0]["data"]["text/plain"] == "2"
        time.sleep(0.5)
    usage1, t1 = (int(cpuacct.read_text()) if cpuacct.exists() else None), time.monotonic()
    t.join()
    cores = (usage1 - usage0) / 1e9 / (t1 - t0) if usage0 is not None else None
    measure(gw, "cpu bomb", attacker_cores=round(cores, 2) if cores is not None else "no cpuacct cgroup",
            neighbour_1plus1_s={"n": len(neighbour), "median": round(statistics.median(neighbour), 3),
                                "max": round(max(neighbour), 3)},
            healthz_s={"median": round(statistics.median(health), 3), "max": round(max(health), 3)},
            host_cores=os.cpu_count())
    assert result.get("status") == "ok" and result["stdout"] == "done\n", result
    assert len(neighbour) >= 3
    # Generous: the point is that it answers at all, not how fast.
    assert max(neighbour) < 30, neighbour
    if cores is not None:
        assert cores <= LIMITS["cpu_millis"] / 1000 * 1.25, f"the bomb used {cores:.2f} cores"


def flood(gw, sid, code, timeout_s=240):
    """Runs an output flood while sampling the gateway's RSS and the
    sandbox's memory; returns the result and the figures."""
    pid = gw.proc.pid
    base = rss_bytes(pid)
    peak, sandbox_peak = [base], [0]
    sandbox_usage = Path("/sys/fs/cgroup/memory/cellgate") / sid / "memory.usage_in_bytes"
    done = threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], rss_bytes(pid))
            try:
                sandbox_peak[0] = max(sandbox_peak[0], int(sandbox_usage.read_text()))
            except (OSError, ValueError):
                pass
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    t0 = time.monotonic()
    try:
        r = run(gw, sid, code, timeout_s=timeout_s)
    finally:
        done.set()
        sampler.join()
    figures = {
        "status": r["status"], "call_s": round(time.monotonic() - t0, 1), "truncated": r["truncated"],
        "text_bytes": len(r["stdout"].encode()) + len(r["stderr"].encode()), "results": len(r["results"]),
        "results_data_mib": round(sum(len(json.dumps(x["data"])) for x in r["results"]) / MiB, 1),
        "gateway_rss_mib": {"start_of_battery": round(gw.rss_start / MiB, 1), "before": round(base / MiB, 1),
                            "peak": round(peak[0] / MiB, 1), "after": round(rss_bytes(pid) / MiB, 1)},
        "gateway_rss_growth_mib": round((peak[0] - base) / MiB, 1),
        "sandbox_memory_peak_mib": round(sandbox_peak[0] / MiB, 1),
    }
    return r, figures


FLOOD_MIB = {"stdout": 300, "stderr": 50, "display": 100}
# Under gVisor's ptrace platform every write is several traced syscalls (190
# MiB took 75 s). There the subject is the relay's data path under a flood
# past every cap (8 MiB of text against 1, 40 of displays against 32); the
# gateway's memory bound, which does not depend on the runtime, is proved
# by the runc flood, which is larger than the bound.
FLOOD_MIB_RUNSC = {"stdout": 6, "stderr": 2, "display": 40}
SMALL_DISPLAYS = 10000
SMALL_DISPLAYS_RUNSC = 1500
GATEWAY_GROWTH_BOUND_MIB = 256


@pytest.mark.zygote_independent
def test_an_output_bomb_is_truncated_and_the_gateways_memory_stays_bounded(gw, attacker):
    """450 MiB of text and displays plus 10,000 small display messages (48
    and 1,500 under runsc), each piece flushed so that all of it leaves the
    kernel for the gateway."""
    sizes = FLOOD_MIB_RUNSC if gw.runtime == "runsc" else FLOOD_MIB
    small_displays = SMALL_DISPLAYS_RUNSC if gw.runtime == "runsc" else SMALL_DISPLAYS
    r, figures = flood(gw, attacker, f"""
import sys
from IPython.display import display
chunk = 'y' * (1 << 20)
for _ in range({sizes['stdout']}):
    sys.stdout.write(chunk)
    sys.stdout.flush()
for _ in range({sizes['stderr']}):
    sys.stderr.write(chunk)
    sys.stderr.flush()
for i in range({small_displays}):
    display({{'text/plain': 'tiny %d' % i}}, raw=True)
for _ in range({sizes['display']}):
    display({{'text/plain': 'z' * (1 << 20)}}, raw=True)
""")
    measure(gw, "output bomb (flushed)", flood_mib=sizes, small_displays=small_displays, **figures)
    assert r["status"] == "ok", (r["status"], r["stderr"][-500:], kernel_log(gw, attacker))
    assert r["truncated"]["stdout"] is True and r["truncated"]["results"] is True, r["truncated"]
    assert figures["text_bytes"] <= OUTPUT_LIMIT + 200, figures["text_bytes"]
    assert r["stdout"].startswith("y" * 1000)
    assert "[cellgate: output truncated after" in r["stdout"] + r["stderr"]
    assert figures["results_data_mib"] * MiB <= RESULTS_LIMIT + 4 * MiB, figures["results_data_mib"]
    # The gateway kept at most its caps of the flood (a bound that only a
    # flood larger than it can test).
    if sum(sizes.values()) > GATEWAY_GROWTH_BOUND_MIB:
        assert figures["gateway_rss_growth_mib"] < GATEWAY_GROWTH_BOUND_MIB, figures["gateway_rss_mib"]


@pytest.mark.gateway_logic
def test_display_metadata_counts_against_the_results_cap(gw, attacker):
    """The rich-results cap must hold whatever part of a display message
    carries the bytes: here 40 displays of one character, each with 8 MiB of
    metadata (320 MiB in all)."""
    r, figures = flood(gw, attacker, """
from IPython.display import display
pad = 'm' * (8 << 20)
for _ in range(40):
    display({'text/plain': 'x'}, metadata={'pad': pad}, raw=True)
""")
    kept = sum(len(json.dumps(x.get("metadata", {}))) for x in r["results"])
    measure(gw, "display metadata flood", flood_mib=320, metadata_kept_mib=round(kept / MiB, 1), **figures)
    assert r["status"] == "ok", (r["status"], kernel_log(gw, attacker))
    assert kept <= RESULTS_LIMIT + 4 * MiB, f"the gateway kept {kept >> 20} MiB of display metadata"
    assert figures["gateway_rss_growth_mib"] < 256, figures["gateway_rss_mib"]


def test_an_unflushed_print_flood_is_held_by_the_kernels_own_memory_limit(gw, attacker):
    """Without flushes ipykernel collects the text in the kernel's memory
    before it sends anything: with a small memory limit this is a memory
    bomb, and it must end as one (OOM kill, restart); with room it is
    truncated like any output."""
    r, figures = flood(gw, attacker, f"""
import sys
chunk = 'y' * (1 << 20)
for _ in range({FLOOD_MIB['stdout']}):
    sys.stdout.write(chunk)
print('written')
""")
    died = death_lines(gw, attacker) if r["status"] == "kernel_died" else []
    measure(gw, "output bomb (unflushed)", flood_mib=FLOOD_MIB["stdout"], **figures, death=died[-1:])
    assert figures["gateway_rss_growth_mib"] < 256, figures["gateway_rss_mib"]
    if r["status"] == "ok":
        assert r["truncated"]["stdout"] is True and figures["text_bytes"] <= OUTPUT_LIMIT + 200
        return
    assert r["status"] == "kernel_died", r["status"]
    assert died and "OOM-killed by its memory limit" in died[-1], died
    state = wait_idle(gw, attacker)
    assert state == "idle", (f"the session did not come back after the OOM kill (state {state})",
                             kernel_log(gw, attacker))
    assert run(gw, attacker, "1 + 1")["status"] == "ok", kernel_log(gw, attacker)


# --- the end ------------------------------------------------------------------------------

def metric(gw, name):
    for line in api(gw, "GET", "/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not in /metrics")


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def wire_attack(gw, sid, code, timeout_s=240):
    """Runs an attack on the kernel's own sockets while the neighbour computes
    `1+1` over and over; returns the attack's result and the figures
    (gateway RSS and fds before/peak/after, the neighbour's slowest answer,
    kernel deaths and dropped messages)."""
    pid = gw.proc.pid
    deaths, dropped = metric(gw, "cellgate_kernel_deaths_total"), metric(gw, "cellgate_kernel_messages_dropped_total")
    fds = [fd_count(pid)] * 2
    done = threading.Event()
    answers, failures = [], []

    def neighbour():
        while not done.is_set():
            t0 = time.monotonic()
            r = run(gw, gw.neighbour, "1+1", timeout_s=120)
            answers.append(time.monotonic() - t0)
            if r["status"] != "ok" or r["results"][0]["data"]["text/plain"] != "2":
                failures.append(r)

    def count_fds():
        while not done.is_set():
            fds[1] = max(fds[1], fd_count(pid))
            time.sleep(0.05)

    helpers = [threading.Thread(target=neighbour), threading.Thread(target=count_fds)]
    for t in helpers:
        t.start()
    try:
        r, figures = flood(gw, sid, code, timeout_s=timeout_s)
    finally:
        done.set()
        for t in helpers:
            t.join()
    figures.update({
        "gateway_fds": {"before": fds[0], "peak": fds[1], "after": fd_count(pid)},
        "neighbour_1+1_s": {"count": len(answers), "max": round(max(answers, default=0), 2)},
        "kernel_deaths": metric(gw, "cellgate_kernel_deaths_total") - deaths,
        "dropped": metric(gw, "cellgate_kernel_messages_dropped_total") - dropped,
    })
    assert not failures, failures[:1]
    return r, figures


BOMB_FRAMES = {"64 MiB": 14, "1 MiB": 600}


@pytest.mark.gateway_logic
def test_a_multipart_bomb_of_large_frames_is_cut_off_before_the_gateway_holds_it(gw, attacker):
    """H1: libzmq holds a whole multipart message before the gateway sees its
    first frame, and its per-frame limit says nothing of the count. The
    kernel sends, through its real iopub socket, one message of 14 frames of
    64 MiB (896 MiB) and one of 600 frames of 1 MiB, each frame the same
    buffer (zero-copy: the kernel pays for one). An unguarded gateway held
    each whole, and copied it again (about 1.8 GiB); the wire guard closes
    the connection at the frame that passes the limits and libzmq
    reconnects, so the cell's own output after the bombs still arrives."""
    r, figures = wire_attack(gw, attacker, f"""
import time, zmq
from zmq.utils.monitor import recv_monitor_message
k = get_ipython().kernel
head = [b"stream", b"<IDS|MSG>", b"0" * 64]
big, small = memoryview(bytearray((64 << 20) - 64)), memoryview(bytearray(1 << 20))
sent = []
def back(monitor, timeout_s=90):
    # the cut-off iopub is back once the kernel's bound socket accepts the
    # gateway's new connection (3-8 s under gVisor on a loaded host); a PUB
    # socket drops what it sends before then, so a fixed sleep was a race
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if monitor.poll(200) and recv_monitor_message(monitor)["event"] == zmq.EVENT_ACCEPTED:
            time.sleep(2)  # its subscription follows the connection
            return True
    return False
def bomb():
    monitor = k.iopub_thread.socket.get_monitor_socket(zmq.EVENT_ACCEPTED)
    k.iopub_thread.socket.send_multipart(head + [big] * {BOMB_FRAMES['64 MiB']}, copy=False)
    sent.append(back(monitor))
    k.iopub_thread.socket.send_multipart(head + [small] * {BOMB_FRAMES['1 MiB']}, copy=False)
    sent.append(back(monitor))
    k.iopub_thread.socket.disable_monitor()
k.iopub_thread.schedule(bomb)
while len(sent) < 2:
    time.sleep(0.05)
print("sent", *sent)
""")
    measure(gw, "multipart bomb of large frames", frames=BOMB_FRAMES, **figures)
    assert r["status"] == "ok", (r["status"], r["stderr"][-500:], kernel_log(gw, attacker))
    assert "sent True True" in r["stdout"], r["stdout"][-500:]  # the iopub came back after each bomb
    assert figures["dropped"] >= 2, figures  # each bomb cut off is counted as a dropped message
    assert figures["gateway_rss_growth_mib"] < 256, figures["gateway_rss_mib"]
    assert figures["kernel_deaths"] == 0, figures
    assert figures["gateway_fds"]["after"] <= figures["gateway_fds"]["before"] + 8, figures["gateway_fds"]


REPLAYS = 24


@pytest.mark.gateway_logic
def test_a_replayed_signed_large_message_neither_fills_the_gateway_nor_starves_heartbeats(gw, attacker):
    """H1: Jupyter messages carry no nonce, so one validly signed ~62 MiB
    message (31 MiB of metadata, 31 MiB of parent header) can be sent again
    and again at the cost of an ipc write, while each costs the gateway's
    one reactor thread an HMAC and a parse. 24 of them (1.5 GiB) sent at
    once used to pile up in libzmq's queue; now the guard lets libzmq hold
    about one message per socket and the rest waits in the kernel. The
    neighbour keeps answering and no kernel is declared dead."""
    r, figures = wire_attack(gw, attacker, f"""
import time
k = get_ipython().kernel
s = k.session
msg = s.msg("stream", {{"name": "stdout", "text": ""}})
msg["metadata"] = {{"pad": "x" * (31 << 20)}}
msg["parent_header"] = {{"msg_id": "p", "pad": "y" * (31 << 20)}}
frames = [b"stream"] + s.serialize(msg)
sent = []
def flood():
    for _ in range({REPLAYS}):
        k.iopub_thread.socket.send_multipart(frames, copy=False)
    sent.append(1)
k.iopub_thread.schedule(flood)
while not sent:
    time.sleep(0.05)
print("flooded")
""", timeout_s=300)
    measure(gw, "replayed signed 62 MiB message", replays=REPLAYS, **figures)
    assert r["status"] == "ok", (r["status"], r["stderr"][-500:], kernel_log(gw, attacker))
    assert "flooded" in r["stdout"], r["stdout"][-500:]
    assert figures["kernel_deaths"] == 0, figures
    assert figures["neighbour_1+1_s"]["count"] >= 1, figures
    assert figures["gateway_rss_growth_mib"] < 640, figures["gateway_rss_mib"]


def test_after_the_battery_nothing_is_left(gw):
    """Every session deleted, then the gateway stopped: no container, cgroup,
    mount, loop device, process or workspace of the battery remains."""
    assert_serving(gw)
    for sid in gw.session_ids:
        api(gw, "DELETE", f"/v1/sessions/{sid}")
    gw.stopped = True
    rc = gw.stop()
    assert rc == 0, gw.log_text()[-3000:]
    left = []
    for rt in RUNTIMES:
        root = gw.state_dir / rt
        if shutil.which(rt) is None or not root.exists():
            continue
        out = subprocess.run([rt, "--root", str(root), "list", "--quiet"], capture_output=True, text=True).stdout
        left += [f"{rt} container {c}" for c in out.split() if c]
    for sid in gw.session_ids:
        for h in Path("/sys/fs/cgroup").iterdir():
            if (h / "cellgate" / sid).exists():
                left.append(f"cgroup {h.name}/cellgate/{sid}")
        if (gw.state_dir / "sandboxes" / sid).exists():
            left.append(f"run dir {sid}")
        for p in (gw.workspace_root / sid, gw.workspace_root / f"{sid}.img"):
            if p.exists():
                left.append(f"workspace {p}")
    mounts = Path("/proc/self/mountinfo").read_text()
    left += [f"mount {l.split()[4]}" for l in mounts.splitlines() if str(gw.base_dir) in l]
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    left += [f"loop {l}" for l in loops.splitlines() if str(gw.base_dir) in l]
    for p in Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            cmdline = (p / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(gw.base_dir) in cmdline:
            left.append(f"process {p.name}: {cmdline.replace(chr(0), ' ')[:200]}")
    assert left == [], left
