"""The Python SDK's network calls against the real gateway: a session created
with a policy (Sandbox(network=…)), network(), set_network(), network_log(),
the CLI's --allow, and the gateway's 400s raised as CellgateError.

The sandbox reaches a listener on 127.0.0.1 only by name, through the
gateway's egress proxy and its --egress-resolve map (allowed.test and
denied.test both lead there, so a refusal is the policy's doing). Nothing
here connects to any other address."""
import ast
import time

import pytest

from sdk_support import Gateway, HttpListener, log_tail, require, run_cli
from cellgate import CellgateError, NetworkConnection, NetworkPolicy, Sandbox

# The kernel's urllib goes through HTTP_PROXY (the sandbox's NO_PROXY covers loopback names only).
FETCH = """
import urllib.request, urllib.error
def fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=20) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, 'refused'
    except OSError as e:
        return None, type(e).__name__
"""


@pytest.fixture(scope="module")
def upstream():
    u = HttpListener()
    yield u
    u.close()


@pytest.fixture(scope="module")
def egress_gateway(upstream):
    require()
    gw = Gateway(*upstream.resolve_args("allowed.test", "denied.test"))
    try:
        gw.start()
        yield gw
    finally:
        gw.stop()
        gw.cleanup()


def wait_for_log(sb, done, timeout=20):
    """The session's log once done(records) holds (the proxy logs a
    connection when it closes, which may be just after the cell)."""
    end = time.monotonic() + timeout
    while True:
        records = sb.network_log(limit=1000)
        if done(records) or time.monotonic() > end:
            return records
        time.sleep(0.2)


def run_fetches(sb, *urls):
    ex = sb.run_code(FETCH + "".join(f"print(repr(fetch({u!r})))\n" for u in urls))
    assert ex.ok, ex.error
    return [ast.literal_eval(line) for line in ex.logs.stdout.splitlines()]


def test_policy_get_patch_fetch_and_log(egress_gateway, upstream):
    gw = egress_gateway
    with Sandbox(gw.url, gw.token, network={"allow": ["allowed.test"]}) as sb:
        policy = sb.network()
        assert isinstance(policy, NetworkPolicy)
        assert (policy.enabled, policy.allow, policy.deny, policy.presets) == (True, ["allowed.test"], [], [])

        # PATCH: the lists given replace the session's, the others stay.
        changed = sb.set_network(deny=["denied.test"])
        assert (changed.allow, changed.deny) == (["allowed.test"], ["denied.test"])
        changed = sb.set_network(allow=["allowed.test", "denied.test"])
        assert (changed.allow, changed.deny) == (["allowed.test", "denied.test"], ["denied.test"])
        assert sb.network().raw == changed.raw

        # Through the proxy: the allowed name reaches the listener; the denied
        # one (allowed too, but deny wins) never gets there.
        allowed, denied = run_fetches(sb, "http://allowed.test/sdk-allowed", "http://denied.test/sdk-denied")
        assert allowed == (200, "upstream /sdk-allowed")
        assert denied[0] != 200, denied
        assert "/sdk-allowed" in upstream.paths and "/sdk-denied" not in upstream.paths

        records = wait_for_log(sb, lambda rs: {r.host for r in rs} >= {"allowed.test", "denied.test"})
        assert all(isinstance(r, NetworkConnection) for r in records)
        ok = [r for r in records if r.host == "allowed.test"]
        refused = [r for r in records if r.host == "denied.test"]
        assert len(ok) == 1 and len(refused) == 1, records
        assert (ok[0].verdict, ok[0].allowed, ok[0].port, ok[0].method) == ("allowed", True, 80, "GET")
        assert ok[0].bytes_down > len("upstream /sdk-allowed") and ok[0].bytes_up > 0
        assert "127.0.0.1" in ok[0].address and ok[0].time_ms > 1_600_000_000_000
        assert (refused[0].verdict, refused[0].allowed, refused[0].port) == ("refused", False, 80)
        assert refused[0].reason and refused[0].bytes_down == 0

        # Paging: after=, limit=.
        first = sb.network_log(limit=1)
        assert [r.seq for r in first] == [records[0].seq]
        assert [r.seq for r in sb.network_log(after=first[0].seq)] == [r.seq for r in records[1:]]

        # Narrowed at run time: the same name is refused from now on.
        assert sb.set_network(allow=[]).allow == []
        again, = run_fetches(sb, "http://allowed.test/sdk-after-patch")
        assert again[0] != 200, again
        assert "/sdk-after-patch" not in upstream.paths
        later = wait_for_log(sb, lambda rs: len(rs) > len(records))
        assert [(r.host, r.verdict) for r in later[len(records):]] == [("allowed.test", "refused")]


def test_no_network_by_default(egress_gateway, upstream):
    gw = egress_gateway
    with Sandbox(gw.url, gw.token) as sb:
        policy = sb.network()
        assert policy.enabled is False and policy.allow == []
        with pytest.raises(CellgateError) as e:
            sb.set_network(allow=["allowed.test"])
        assert e.value.status == 409 and "without a network" in e.value.message
        got, = run_fetches(sb, "http://allowed.test/sdk-no-network")
        assert got[0] is None, got
        assert "/sdk-no-network" not in upstream.paths
        assert sb.network_log() == []


def test_bad_network_input_raises_the_gateways_400(egress_gateway):
    gw = egress_gateway
    before = {s.id for s in Sandbox.list(gw.url, gw.token)}
    cases = [({"allow": ["allowed.test", "no such host!"]}, "no such host!"),
             ({"allow": ["allowed.test"], "ports": [80]}, "unknown field 'ports'"),
             ({"preset": "no-such-preset"}, "no preset 'no-such-preset'"),
             (["allowed.test"], "'network' must be an object")]
    for network, says in cases:
        with pytest.raises(CellgateError) as e:
            Sandbox(gw.url, gw.token, network=network)
        assert e.value.status == 400, (network, e.value)
        assert says in e.value.message, (network, e.value.message)
    assert {s.id for s in Sandbox.list(gw.url, gw.token)} == before, "a refused create left a session"

    with Sandbox(gw.url, gw.token, network={"allow": ["allowed.test"]}) as sb:
        with pytest.raises(CellgateError) as e:
            sb.set_network(deny=["*.*.bad entry"])
        assert e.value.status == 400 and "*.*.bad entry" in e.value.message, e.value
        assert sb.network().deny == [], "a refused PATCH changed nothing"


def test_cli_run_with_allow_reports_refused_connections(egress_gateway, upstream, tmp_path):
    script = tmp_path / "fetch.py"
    script.write_text(FETCH + "print(fetch('http://allowed.test/cli'))\nprint(fetch('http://denied.test/cli'))\n")
    r = run_cli(egress_gateway, "run", script, "--allow", "allowed.test", cwd=tmp_path)
    assert r.returncode == 0, r.stderr + log_tail(egress_gateway)
    assert "(200, 'upstream /cli')" in r.stdout, r.stdout
    assert "[network: refused denied.test:80" in r.stderr, r.stderr
    assert "allowed.test" not in r.stderr, r.stderr
    # Without --allow the sandbox has no network and nothing is reported.
    r = run_cli(egress_gateway, "run", script, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "(None, " in r.stdout and "[network:" not in r.stderr, (r.stdout, r.stderr)
