"""Controlled egress: a session with a network policy reaches the names it
allows, through the gateway's egress proxy, and nothing else; every attempt is
logged. Real gateway, real sandboxes under runc and runsc, the kernel image,
and listeners only on this machine (127.0.0.1 and its own addresses): names
reach them only through the operator's --egress-resolve map."""
import ipaddress
import json
import os
import shutil
import socket
import ssl
import subprocess
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from support.gateway import Gateway
from support.netns import NetnsHost

RUNTIMES = ["runc", "runsc"]
SECRET = "cellgate-egress-secret-" + uuid.uuid4().hex
SECRET_TLS = "cellgate-egress-secret-tls-" + uuid.uuid4().hex   # added inside TLS the proxy terminates
PIP_TOKEN = "cellgate-egress-secret-pip-" + uuid.uuid4().hex    # the private index's bearer token
TLS_NAMES = ["tls.test", "secure.test", "pypi.test"]             # what the upstream's certificate names


def tiny_wheel():
    """A real wheel (name, bytes) of a one-module package, made here."""
    import base64
    import hashlib
    import io
    import zipfile
    files = {"cellgate_tiny/__init__.py": b"VALUE = 'from the local index'\n",
             "cellgate_tiny-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: cellgate-tiny\nVersion: 1.0\n",
             "cellgate_tiny-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: cellgate-tests\n"
                                                  b"Root-Is-Purelib: true\nTag: py3-none-any\n"}
    record = ""
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record += f"{name},sha256={digest},{len(data)}\n"
    record += "cellgate_tiny-1.0.dist-info/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
        z.writestr("cellgate_tiny-1.0.dist-info/RECORD", record)
    return "cellgate_tiny-1.0-py3-none-any.whl", out.getvalue()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class Upstream:
    """An HTTP listener (and the same behind TLS) that records what arrives."""

    def __init__(self, tmp):
        self.seen = []
        seen = self.seen
        wheel_name, wheel = tiny_wheel()
        import hashlib
        wheel_sha = hashlib.sha256(wheel).hexdigest()

        class Handler(BaseHTTPRequestHandler):
            def reply(self, status, body, ctype="text/plain"):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                seen.append({"path": self.path, "host": self.headers.get("Host"),
                             "headers": {k.lower(): v for k, v in self.headers.items()}})
                # A private package index: only with its bearer token.
                if self.path.startswith(("/simple/", "/files/")):
                    if self.headers.get("Authorization") != f"Bearer {PIP_TOKEN}":
                        return self.reply(401, b"no token")
                    if self.path.rstrip("/") == "/simple/cellgate-tiny":
                        page = f'<html><body><a href="/files/{wheel_name}#sha256={wheel_sha}">{wheel_name}</a></body></html>'
                        return self.reply(200, page.encode(), "text/html")
                    if self.path == f"/files/{wheel_name}":
                        return self.reply(200, wheel, "application/octet-stream")
                    return self.reply(404, b"not here")
                self.reply(200, f"upstream {self.path}".encode())

            def do_TRACE(self):
                # As RFC 9110 describes: the request comes back as the body.
                seen.append({"path": self.path, "method": "TRACE", "headers": {k.lower(): v for k, v in self.headers.items()}})
                self.reply(200, (self.requestline + "\r\n" + str(self.headers)).encode(), "message/http")

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                seen.append({"path": self.path, "host": self.headers.get("Host"), "body": body.decode(errors="replace"),
                             "headers": {k.lower(): v for k, v in self.headers.items()}})
                self.reply(200, b"posted " + body)

            def log_message(self, *a):
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.https = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.cert = tmp / "tls.pem"
        key = tmp / "tls.key"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                        "-out", str(self.cert), "-days", "1", "-subj", "/CN=tls.test",
                        "-addext", "subjectAltName=" + ",".join(f"DNS:{n}" for n in TLS_NAMES)], check=True, capture_output=True)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.cert), str(key))
        self.https.socket = ctx.wrap_socket(self.https.socket, server_side=True)
        for s in (self.http, self.https):
            threading.Thread(target=s.serve_forever, daemon=True).start()

    def close(self):
        for s in (self.http, self.https):
            s.shutdown()
            s.server_close()


@pytest.fixture(scope="module")
def test_host():
    """The host end of a veth this module made: an address of this machine that
    is not loopback's (a test never sends to the machine's own network address)."""
    with NetnsHost("cg-egress") as host:
        yield host


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    u = Upstream(tmp_path_factory.mktemp("egress-upstream"))
    yield u
    u.close()


@pytest.fixture(scope="module", params=RUNTIMES)
def gw(request, upstream, tmp_path_factory):
    runtime = request.param
    if os.geteuid() != 0 or shutil.which(runtime) is None:
        if os.environ.get("CELLGATE_REQUIRE_SANDBOX") == "1":
            pytest.fail(f"egress tests need root and {runtime}")
        pytest.skip(f"needs root and {runtime}")
    d = tmp_path_factory.mktemp(f"egress-{runtime}")
    config = d / "config.json"
    config.write_text(json.dumps({
        "kernelspecs": {"python3": {"runtime": runtime}},
        "egress_secrets": [{"domain": "secret.test", "header": "X-Api-Key", "value": SECRET, "tenants": "*",
                            "plain_http": True},
                           {"domain": "secure.test", "header": "X-Api-Key", "value": SECRET_TLS, "tenants": "*"},
                           {"domain": "badcert.test", "header": "X-Api-Key", "value": SECRET_TLS, "tenants": "*"},
                           {"domain": "pypi.test", "bearer": PIP_TOKEN, "tenants": "*"},
                           # Review turn 3, M6: plain HTTP not allowed; another tenant's.
                           {"domain": "plain.test", "header": "X-Api-Key", "value": SECRET, "tenants": "*"},
                           {"domain": "scoped.test", "header": "X-Api-Key", "value": SECRET, "tenants": ["someone-else"],
                            "plain_http": True}],
    }))
    port = free_port()
    h, s = upstream.http.server_address[1], upstream.https.server_address[1]
    resolve = [f"allowed.test=127.0.0.1:{h}", f"denied.test=127.0.0.1:{h}", f"secret.test=127.0.0.1:{h}",
               f"other.test=127.0.0.1:{h}", f"tls.test=127.0.0.1:{s}", f"gw.test=127.0.0.1:{port}",
               f"secure.test=127.0.0.1:{s}", f"badcert.test=127.0.0.1:{s}", f"pypi.test=127.0.0.1:{s}",
               f"plain.test=127.0.0.1:{h}", f"scoped.test=127.0.0.1:{h}"]
    # The operator's mirror: a private index (its CA trusted by the proxy, its
    # token added by it) behind the python-packages preset.
    args = ["--config", str(config), "--port", str(port), "--max-kernels", "8",
            "--egress-upstream-ca", str(upstream.cert), "--egress-preset", "python-packages=pypi.test",
            "--egress-pip-index-url", "https://pypi.test/simple/"]
    for r in resolve:
        args += ["--egress-resolve", r]
    g = Gateway(*args).start()
    g.runtime = runtime
    g.sessions = []
    yield g
    g.stop()
    g.cleanup()


def session(gw, network=None):
    body = {"timeout_s": 120}
    if network is not None:
        body["network"] = network
    r = gw.api("POST", "/v1/sessions", json=body, timeout=180)
    assert r.status_code == 201, r.text
    gw.sessions.append(r.json()["id"])
    return r.json()["id"]


@pytest.fixture(autouse=True)
def sessions_end_with_their_test(request):
    """Each test's sessions are deleted after it (the gateway's cap is small)."""
    yield
    for name in ("gw", "ns_gw"):
        if name in request.fixturenames:
            gw = request.getfixturevalue(name)
            while gw.sessions:
                sid = gw.sessions.pop()
                sid, token = sid if isinstance(sid, tuple) else (sid, None)
                headers = {"Authorization": f"token {token}"} if token else {}
                gw.api("DELETE", f"/v1/sessions/{sid}", headers=headers, timeout=60)


def probe(gw, sid, code, token=None):
    headers = {"Authorization": f"token {token}"} if token else {}
    r = gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": code + "\nimport json as _j\nprint('@@' + _j.dumps(result))",
                                                            "timeout_s": 120}, headers=headers, timeout=240)
    assert r.status_code == 200, r.text
    out = r.json()
    lines = [l for l in out["stdout"].splitlines() if l.startswith("@@")]
    assert out["status"] == "ok" and lines, out
    return json.loads(lines[-1][2:])


FETCH = r"""
import json, socket, ssl, urllib.request, urllib.error
# NO_PROXY keeps loopback names off the proxy; this asks the proxy regardless.
def via_proxy(url):
    host = url.split('/')[2]
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    s.sendall(('GET ' + url + ' HTTP/1.1\r\nHost: ' + host + '\r\n\r\n').encode())
    data = b''
    while chunk := s.recv(4096):
        data += chunk
    head, _, body = data.decode(errors='replace').partition('\r\n\r\n')
    return {'status': int(head.split(' ')[1]), 'body': body}
def fetch(url, cafile=None):
    try:
        ctx = ssl.create_default_context(cafile=cafile) if cafile else None
        with urllib.request.urlopen(url, timeout=20, context=ctx) as r:
            return {'status': r.status, 'body': r.read().decode()}
    except urllib.error.HTTPError as e:
        return {'status': e.code, 'body': e.read().decode()}
    except Exception as e:
        return {'error': type(e).__name__ + ': ' + str(e)}
"""


def test_allowed_names_arrive_over_http_and_https_and_everything_else_is_refused_and_logged(gw, upstream, test_host):
    addr = test_host.host_addr
    sid = session(gw, {"allow": ["allowed.test", "tls.test", f"localhost:{upstream.http.server_address[1]}",
                                 f"gw.test:{gw.port}"]})
    # A session may name internal networks, but only the operator can open them.
    raw = session(gw, {"allow": ["127.0.0.1/32"] + ([addr + "/32"] if addr else [])})
    cert = upstream.cert.read_text()
    before = len(upstream.seen)
    res = probe(gw, sid, FETCH + f"""
open('/tmp/ca.pem', 'w').write({cert!r})
result = {{
  'http': fetch('http://allowed.test/one'),
  'https': fetch('https://tls.test/two', cafile='/tmp/ca.pem'),
  'denied': fetch('http://denied.test/three'),
  'port': fetch('http://allowed.test:8080/four'),
  'localhost': via_proxy('http://localhost:{upstream.http.server_address[1]}/five'),
  'gateway': fetch('http://gw.test:{gw.port}/api'),
}}
""")
    # Through the proxy by hand: a raw address, and the host's own.
    res.update(probe(gw, raw, f"""
import socket
def connect(target):
    s = socket.create_connection(('127.0.0.1', 3128), timeout=10)
    s.sendall(f'CONNECT {{target}} HTTP/1.1\\r\\nHost: {{target}}\\r\\n\\r\\n'.encode())
    return s.recv(200).decode(errors='replace').split('\\r\\n')[0]
result = {{}}
result['raw_ip'] = connect('127.0.0.1:{upstream.http.server_address[1]}')
result['host_addr'] = connect('{addr or "127.0.0.1"}:{upstream.http.server_address[1]}')
try:
    socket.getaddrinfo('denied.test', 80)
    result['dns'] = 'answered'
except OSError as e:
    result['dns'] = type(e).__name__
def udp():
    try:
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('{addr or "10.255.255.1"}', 53))
        return 'sent'
    except OSError as e:
        return e.errno
def icmp():
    try:
        socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        return 'opened'
    except OSError as e:
        return e.errno
result['udp'] = udp()
result['icmp'] = icmp()
"""))
    assert res["http"] == {"status": 200, "body": "upstream /one"}, res
    assert res["https"] == {"status": 200, "body": "upstream /two"}, res
    arrived = [s["path"] for s in upstream.seen[before:]]
    assert arrived == ["/one", "/two"], arrived
    for key in ("denied", "port", "localhost", "gateway"):
        assert res[key].get("status") == 403, (key, res[key])
    assert "internal address" in res["localhost"]["body"], res["localhost"]
    assert res["raw_ip"].startswith("HTTP/1.1 403"), res
    assert res["host_addr"].startswith("HTTP/1.1 403"), res
    assert res["dns"] == "gaierror", res
    assert res["udp"] != "sent" and res["icmp"] != "opened", res

    log = gw.api("GET", f"/v1/sessions/{sid}/network/log").json()["connections"]
    verdicts = {(c["host"], c["port"]): c["verdict"] for c in log}
    assert verdicts[("allowed.test", 80)] == "allowed" and verdicts[("tls.test", 443)] == "allowed", log
    for key in [("denied.test", 80), ("allowed.test", 8080), ("localhost", upstream.http.server_address[1]),
                ("gw.test", gw.port)]:
        assert verdicts.get(key) == "refused", (key, log)
    raw_log = gw.api("GET", f"/v1/sessions/{raw}/network/log").json()["connections"]
    assert raw_log and all(c["verdict"] == "refused" and "internal" in c["reason"] for c in raw_log), raw_log
    https = next(c for c in log if c["host"] == "tls.test")
    assert https["bytes_down"] > 500 and https["bytes_up"] > 100, https
    metrics = gw.api("GET", "/metrics").text
    assert 'cellgate_egress_connections_total{verdict="refused"}' in metrics


@pytest.mark.gateway_logic
def test_a_patch_takes_effect_for_new_connections(gw, upstream):
    sid = session(gw, {"allow": ["allowed.test"]})
    code = FETCH + "result = fetch('http://denied.test/later')"
    r = gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": code + "\nprint(result)"}, timeout=240)
    assert r.status_code == 200 and "403" in r.json()["stdout"], r.text
    # The execution's ledger record says what its code did on the network.
    egress = r.json()["usage"]["egress"]
    assert egress["connections"] == 1 and egress["refused"] == 1, egress
    assert egress["targets"] == [{"host": "denied.test", "port": 80, "verdict": "refused"}], egress
    ledger = gw.api("GET", f"/v1/sessions/{sid}/executions").json()["executions"]
    assert ledger[-1]["egress"] == egress, ledger[-1]
    r = gw.api("PATCH", f"/v1/sessions/{sid}/network", json={"allow": ["allowed.test", "denied.test"]})
    assert r.status_code == 200 and r.json()["allow"] == ["allowed.test", "denied.test"], r.text
    assert probe(gw, sid, code) == {"status": 200, "body": "upstream /later"}
    assert gw.api("GET", f"/v1/sessions/{sid}/network").json()["allow"] == ["allowed.test", "denied.test"]
    r = gw.api("PATCH", f"/v1/sessions/{sid}/network", json={"allow": ["*.*.bad"]})
    assert r.status_code == 400 and "network" in r.json()["message"], r.text


@pytest.mark.gateway_logic
def test_credentials_reach_only_their_domain_and_never_the_sandbox(gw, upstream):
    sid = session(gw, {"allow": ["secret.test", "other.test", "denied.test:81"]})
    before = len(upstream.seen)
    res = probe(gw, sid, FETCH + f"""
import os
SECRET_PREFIX = 'cellgate-egress-secret-'
result = {{'secret': fetch('http://secret.test/s'), 'other': fetch('http://other.test/o'),
          'error_page': fetch('http://denied.test/e'), 'error_page_2': fetch('http://secret.test:9/e')}}
found = []
for k, v in os.environ.items():
    if SECRET_PREFIX in v:
        found.append('env ' + k)
paths = [f'/proc/{{pid}}/{{name}}' for pid in os.listdir('/proc') if pid.isdigit()
         for name in ('environ', 'cmdline', 'maps')]
for root in ('/tmp', '/workspace', '/run', '/etc', '/mnt', '/opt/cellgate'):
    for dirpath, dirs, files in os.walk(root):
        paths += [os.path.join(dirpath, f) for f in files]
for p in paths:
    try:
        with open(p, 'rb') as fh:
            if SECRET_PREFIX.encode() in fh.read(1 << 20):
                found.append(p)
    except OSError:
        pass
result['found'] = found
result['pages'] = [result['error_page'].get('body', ''), result['error_page_2'].get('body', '')]
""")
    seen = upstream.seen[before:]
    by_path = {s["path"]: s for s in seen}
    assert by_path["/s"]["headers"].get("x-api-key") == SECRET, seen
    assert "x-api-key" not in by_path["/o"]["headers"], seen
    assert res["secret"]["body"] == "upstream /s" and res["found"] == [], res
    assert all(SECRET not in p for p in res["pages"]) and res["error_page"]["status"] == 403, res
    log = gw.api("GET", f"/v1/sessions/{sid}/network/log").json()["connections"]
    assert [c["credential_injected"] for c in log if c["host"] == "secret.test" and c["port"] == 80] == [True]
    assert SECRET not in json.dumps(log)


@pytest.mark.gateway_logic
def test_m6_a_secret_goes_only_to_its_tenants_over_tls_or_allowed_http_and_never_with_trace(gw, upstream):
    """Security review turn 3, M6: an operator secret is bound to tenants (or
    explicitly all); over plain HTTP only where the operator allows it; never
    with TRACE, whose answer would carry it back to the code."""
    sid = session(gw, {"allow": ["secret.test", "plain.test", "scoped.test"]})
    before = len(upstream.seen)
    res = probe(gw, sid, FETCH + """
def trace(url):
    req = urllib.request.Request(url, method='TRACE')
    with urllib.request.urlopen(req, timeout=20) as r:
        return {'status': r.status, 'body': r.read().decode()}
result = {'plain': fetch('http://plain.test/m6-plain'), 'scoped': fetch('http://scoped.test/m6-scoped'),
          'trace': trace('http://secret.test/m6-trace'), 'allowed': fetch('http://secret.test/m6-allowed')}
""")
    seen = {x["path"]: x for x in upstream.seen[before:]}
    assert "x-api-key" not in seen["/m6-plain"]["headers"], "a secret went over plain HTTP unasked"
    assert "x-api-key" not in seen["/m6-scoped"]["headers"], "another tenant's secret was sent"
    assert seen["/m6-trace"]["method"] == "TRACE" and "x-api-key" not in seen["/m6-trace"]["headers"]
    assert res["trace"]["status"] == 200 and SECRET not in res["trace"]["body"], res
    assert seen["/m6-allowed"]["headers"].get("x-api-key") == SECRET, "the operator's plain-HTTP secret"


@pytest.mark.gateway_logic
def test_https_credentials_are_added_inside_tls_the_proxy_terminates(gw, upstream):
    """The proxy ends TLS for a domain it adds a credential to (a leaf from
    the gateway's CA, which the image trusts), checks the Host inside, adds
    the header, and makes its own TLS upstream with full verification."""
    sid = session(gw, {"allow": ["secure.test", "tls.test", "badcert.test", "other.test"]})
    before = len(upstream.seen)
    res = probe(gw, sid, FETCH + r"""
import os, socket, ssl, urllib.request
result = {'get': fetch('https://secure.test/tls-get')}
req = urllib.request.Request('https://secure.test/tls-post', data=b'{"q": 1}', method='POST',
                             headers={'X-Api-Key': 'forged-by-the-cell', 'Content-Type': 'application/json'})
with urllib.request.urlopen(req, timeout=20) as r:
    result['post'] = {'status': r.status, 'body': r.read().decode()}
result['badcert'] = fetch('https://badcert.test/never')
# Who signed what the sandbox saw, and what it trusts.
ctx = ssl.create_default_context()
with socket.create_connection(('127.0.0.1', 3128), timeout=10) as raw:
    raw.sendall(b'CONNECT secure.test:443 HTTP/1.1\r\nHost: secure.test:443\r\n\r\n')
    assert raw.recv(4096).startswith(b'HTTP/1.1 200')
    with ctx.wrap_socket(raw, server_hostname='secure.test') as t:
        result['issuer'] = dict(x[0] for x in t.getpeercert()['issuer'])
        # Domain fronting: another allowed host named inside the tunnel.
        t.sendall(b'GET /fronted HTTP/1.1\r\nHost: other.test\r\n\r\n')
        data = b''
        while chunk := t.recv(4096):
            data += chunk
        result['fronted'] = data.decode(errors='replace').split('\r\n')[0]
result['ca_in_sandbox'] = open('/run/egress/ca.pem').read().count('BEGIN CERTIFICATE')
result['ssl_cert_file'] = os.environ.get('SSL_CERT_FILE')
""")
    seen = {s["path"]: s for s in upstream.seen[before:]}
    assert res["get"] == {"status": 200, "body": "upstream /tls-get"}, res
    assert seen["/tls-get"]["headers"].get("x-api-key") == SECRET_TLS, seen
    assert res["post"] == {"status": 200, "body": 'posted {"q": 1}'}, res
    assert seen["/tls-post"]["headers"].get("x-api-key") == SECRET_TLS, "the cell's own value was replaced"
    assert seen["/tls-post"]["body"] == '{"q": 1}'
    assert res["issuer"]["organizationName"] == "cellgate", res
    assert res["fronted"].startswith("HTTP/1.1 421"), res
    assert "/fronted" not in seen and "/never" not in seen, seen
    # The upstream's certificate does not name badcert.test: refused, said why, nothing sent.
    assert res["badcert"]["status"] == 502 and "TLS was not accepted" in res["badcert"]["body"], res
    assert SECRET_TLS not in res["badcert"]["body"]
    assert res["ca_in_sandbox"] == 1 and res["ssl_cert_file"], res

    log = gw.api("GET", f"/v1/sessions/{sid}/network/log").json()["connections"]
    secure = [c for c in log if c["host"] == "secure.test"]
    assert secure and all(c["tls_terminated"] for c in secure), secure
    assert [c["credential_injected"] for c in secure if c["verdict"] == "allowed"][:2] == [True, True], secure
    bad = [c for c in log if c["host"] == "badcert.test"]
    assert bad and bad[0]["verdict"] == "refused" and "TLS" in bad[0]["reason"], bad
    assert SECRET_TLS not in json.dumps(log)
    # A tunnel to a domain without a credential stays end to end.
    res = probe(gw, sid, FETCH + f"open('/tmp/up.pem', 'w').write({upstream.cert.read_text()!r})\n"
                                 "result = fetch('https://tls.test/e2e', cafile='/tmp/up.pem')")
    assert res == {"status": 200, "body": "upstream /e2e"}, res
    log = gw.api("GET", f"/v1/sessions/{sid}/network/log").json()["connections"]
    assert [c["tls_terminated"] for c in log if c["host"] == "tls.test"] == [False], log


def test_commands_beside_the_kernel_get_the_same_way_out(gw, upstream):
    """A command (/v1 commands; E2B commands and terminals use the same
    process table) finds the proxy and the CA bundle as the kernel does."""
    sid = session(gw, {"allow": ["allowed.test", "secure.test"]})
    script = ("import urllib.request\n"
              "for u in ('http://allowed.test/cmd', 'https://secure.test/cmd-tls'):\n"
              "    print(urllib.request.urlopen(u, timeout=20).read().decode())\n")
    r = gw.api("POST", f"/v1/sessions/{sid}/commands", json={"argv": ["/usr/bin/python3", "-c", script]}, timeout=120)
    assert r.status_code in (200, 201), r.text
    out = r.json()
    assert out["exit"]["exit_code"] == 0 and out["stdout"] == "upstream /cmd\nupstream /cmd-tls\n", out
    seen = {s["path"]: s for s in upstream.seen}
    assert seen["/cmd-tls"]["headers"].get("x-api-key") == SECRET_TLS
    # Without a network a command has no proxy to find.
    plain = session(gw)
    r = gw.api("POST", f"/v1/sessions/{plain}/commands", json={"cmd": "echo \"[$HTTPS_PROXY]\""}, timeout=120)
    assert r.json()["stdout"] == "[]\n", r.json()


@pytest.mark.gateway_logic
def test_pip_installs_from_the_operators_index_through_the_preset_and_keeps_it(gw, upstream):
    sid = session(gw, {"preset": "python-packages"})
    install = """
import subprocess, sys
p = subprocess.run([sys.executable, '-m', 'pip', 'install', 'cellgate-tiny'], capture_output=True, text=True)
print('rc', p.returncode)
print(p.stdout[-3000:], p.stderr[-3000:])
import cellgate_tiny
print('value:', cellgate_tiny.VALUE, cellgate_tiny.__file__)
"""
    r = gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": install, "timeout_s": 180}, timeout=240)
    out = r.json()
    assert r.status_code == 200 and out["status"] == "ok", out
    assert "rc 0" in out["stdout"] and "value: from the local index /workspace/.local/" in out["stdout"], out["stdout"]
    log = gw.api("GET", f"/v1/sessions/{sid}/network/log").json()["connections"]
    pypi = [c for c in log if c["host"] == "pypi.test" and c["verdict"] == "allowed"]
    assert pypi and all(c["credential_injected"] and c["tls_terminated"] for c in pypi), log
    # A kernel restart keeps what was installed (it is in the workspace).
    assert gw.api("POST", f"/v1/sessions/{sid}/restart", timeout=120).status_code in (200, 204)
    r = gw.api("POST", f"/v1/sessions/{sid}/execute",
               json={"code": "import cellgate_tiny; print(cellgate_tiny.VALUE)"}, timeout=120)
    assert r.json()["stdout"].strip() == "from the local index", r.json()
    # Without the preset the index is out of reach.
    other = session(gw, {"allow": ["allowed.test"]})
    r = gw.api("POST", f"/v1/sessions/{other}/execute", json={"code": install, "timeout_s": 180}, timeout=240)
    assert "rc 0" not in r.json()["stdout"] and "ModuleNotFoundError" in json.dumps(r.json()), r.json()


def test_a_session_without_a_policy_keeps_only_loopback_and_no_proxy(gw):
    sid = session(gw)
    res = probe(gw, sid, """
import os, socket
result = {'ifs': socket.if_nameindex(), 'egress': os.listdir('/run/egress'),
          'proxy_env': os.environ.get('HTTPS_PROXY')}
try:
    socket.create_connection(('127.0.0.1', 3128), timeout=3)
    result['forwarder'] = 'connected'
except OSError as e:
    result['forwarder'] = e.errno
""")
    assert res["ifs"] == [[1, "lo"]] and not res["egress"] and res["proxy_env"] is None, res
    assert res["forwarder"] != "connected", res
    assert gw.api("GET", f"/v1/sessions/{sid}/network").json() == {"enabled": False}
    r = gw.api("PATCH", f"/v1/sessions/{sid}/network", json={"allow": ["allowed.test"]})
    assert r.status_code == 409, r.text


@pytest.mark.gateway_logic
@pytest.mark.parametrize("network, needle", [
    ({"allow": "x"}, "array"), ({"allow": ["a..b"]}, "network"), ({"preset": "nope"}, "preset"),
    ({"allow": [], "colour": 1}, "unknown field"), ({"allow": ["x"] * 300}, "256")])
def test_a_bad_network_is_a_400_naming_it(gw, network, needle):
    r = gw.api("POST", "/v1/sessions", json={"network": network})
    assert r.status_code == 400 and needle in r.json()["message"], r.text
    assert gw.api("GET", "/api/status").status_code == 200


# Review turn 3: M1, M2, M5 and L3.

RAW = r"""
import socket, time
def raw(head, timeout=30):
    '''One request head straight to the proxy's forwarder; the status line back.'''
    s = socket.create_connection(('127.0.0.1', 3128), timeout=timeout)
    t0 = time.monotonic()
    s.sendall(head.encode())
    data = b''
    try:
        while b'\r\n\r\n' not in data:
            chunk = s.recv(4096)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        return {'status': 0, 'line': type(e).__name__, 's': time.monotonic() - t0}
    finally:
        s.close()
    line = data.decode(errors='replace').split('\r\n')[0]
    body = data.decode(errors='replace').partition('\r\n\r\n')[2]
    return {'status': int(line.split(' ')[1]) if line.startswith('HTTP/') else 0, 'line': line, 'body': body,
            's': time.monotonic() - t0}
def connect(target, timeout=30):
    return raw(f'CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n', timeout)
"""


def gateway_figures(g):
    """RSS (KiB), open fds and CPU seconds of a gateway process."""
    pid = g.proc.pid
    status = open(f"/proc/{pid}/status").read()
    rss = int(next(l for l in status.splitlines() if l.startswith("VmRSS:")).split()[1])
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    stat = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")
    return {"rss_kib": rss, "fds": fds, "cpu_s": cpu}


def metric(g, name):
    for line in g.api("GET", "/metrics").text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{") and line.split(" ")[0] == name:
            return float(line.split()[-1])
    return None


@pytest.mark.gateway_logic
def test_l3_ambiguous_request_heads_are_refused_with_400_and_never_forwarded(gw, upstream):
    sid = session(gw, {"allow": ["allowed.test"]})
    before = len(upstream.seen)
    heads = {
        "space_before_colon": "GET http://allowed.test/l3a HTTP/1.1\r\nHost : denied.test\r\n\r\n",
        "two_lengths": "POST http://allowed.test/l3b HTTP/1.1\r\nContent-Length: 0\r\nContent-Length: 5\r\n\r\nhello",
        "same_length_twice": "POST http://allowed.test/l3c HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
        "obs_fold": "GET http://allowed.test/l3d HTTP/1.1\r\nX-A: 1\r\n Host: denied.test\r\n\r\n",
        "te_with_space": "POST http://allowed.test/l3e HTTP/1.1\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n",
    }
    res = probe(gw, sid, RAW + f"result = {{k: raw(v) for k, v in {heads!r}.items()}}\n"
                               "result['fine'] = raw('GET http://allowed.test/l3ok HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n')")
    for key in heads:
        assert res[key]["status"] == 400, (key, res[key])
    assert res["fine"]["status"] == 200, res["fine"]
    assert [s["path"] for s in upstream.seen[before:]] == ["/l3ok"], upstream.seen[before:]


# A name server of our own, in the test's network namespace: it logs every
# query, answers A records of the names it knows with the namespace's
# public-looking address, and never answers names under slow.test.
DNS_SERVER = r"""
import socket, struct, sys
log = open(sys.argv[1], 'a', buffering=1)
known = {'fast.dns.test', 'pypi.test', 'inside.dns.test'}
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('127.0.0.1', 53))
print('ready', flush=True)
while True:
    data, peer = s.recvfrom(4096)
    try:
        qid, flags, qd = struct.unpack('>HHH', data[:6])
        at, labels = 12, []
        while data[at]:
            labels.append(data[at + 1:at + 1 + data[at]].decode()); at += 1 + data[at]
        qtype = struct.unpack('>H', data[at + 1:at + 3])[0]
        question = data[12:at + 5]
    except Exception:
        continue
    name = '.'.join(labels).lower()
    log.write(name + ' ' + str(qtype) + '\n')
    if name.endswith('slow.test'):
        continue
    if name in known:
        answers = b'\xc0\x0c' + struct.pack('>HHIH', 1, 1, 5, 4) + socket.inet_aton(sys.argv[2]) if qtype == 1 else b''
        rcode = 0
    else:
        answers, rcode = b'', 3
    s.sendto(struct.pack('>HHHHHH', qid, 0x8180 | rcode, 1, 1 if answers else 0, 0, 0) + question + answers, peer)
"""

PUBLIC_LOOKING = "192.88.99.7"  # the old 6to4 relay anycast: public, unused, and only ever on our dummy interface
CAPPED_TOKEN = "capped-token-" + uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def ns_gw(tmp_path_factory):
    """A gateway (runc) in a network namespace of its own with a resolv.conf
    of its own (a private mount namespace): the namespace has a dummy
    address that looks public on its interface, the gateway's own, and our name
    server on its loopback. Reached over the namespace's veth."""
    import ctypes
    if os.geteuid() != 0 or shutil.which("runc") is None:
        if os.environ.get("CELLGATE_REQUIRE_SANDBOX") == "1":
            pytest.fail("egress tests need root and runc")
        pytest.skip("needs root and runc")
    d = tmp_path_factory.mktemp("egress-ns")
    ns = NetnsHost("cg-egdns")
    procs = []
    try:
        ip = ["ip", "-n", ns.name]
        # A second address on the namespace's end of the veth (this kernel has
        # no dummy interfaces): in the namespace only, routed nowhere else.
        subprocess.run(ip + ["addr", "add", f"{PUBLIC_LOOKING}/32", "dev", ns.ns_if], check=True)
        # Nothing in the namespace routes anywhere but its /30 and itself.
        routes = subprocess.run(ip + ["-j", "route"], capture_output=True, text=True, check=True).stdout
        assert "default" not in routes, routes
        dns_log = d / "dns.log"
        dns_log.write_text("")
        dns = subprocess.Popen(["ip", "netns", "exec", ns.name, "/usr/bin/python3", "-c", DNS_SERVER, str(dns_log),
                                PUBLIC_LOOKING], stdout=subprocess.PIPE, text=True)
        procs.append(dns)
        assert dns.stdout.readline().strip() == "ready"
        # An HTTP listener on every address of the namespace (the public-looking one too).
        web = subprocess.Popen(["ip", "netns", "exec", ns.name, "/usr/bin/python3", "-m", "http.server", "--bind",
                                "0.0.0.0", "18080"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        procs.append(web)
        resolv = d / "resolv.conf"
        resolv.write_text("nameserver 127.0.0.1\noptions timeout:3 attempts:1\n")
        config = d / "config.json"
        config.write_text(json.dumps({
            "kernelspecs": {"python3": {"runtime": "runc"}},
            "tokens": [{"token": CAPPED_TOKEN, "tenant": "capped", "network": {"allow": ["pypi.test"]}}]}))
        netns_path = f"/run/netns/{ns.name}"

        def enter():
            libc = ctypes.CDLL(None, use_errno=True)
            fd = os.open(netns_path, os.O_RDONLY)
            if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
                os._exit(90)
            if libc.unshare(0x00020000) != 0:  # CLONE_NEWNS
                os._exit(91)
            if libc.mount(b"none", b"/", None, 16384 | 262144, None) != 0:  # MS_REC | MS_PRIVATE
                os._exit(92)
            if libc.mount(str(resolv).encode(), b"/etc/resolv.conf", None, 4096, None) != 0:  # MS_BIND
                os._exit(93)

        # 192.88.99.9, when the test adds it, is the host's own but opened by the operator.
        g = Gateway("--config", str(config), "--max-kernels", "6", "--egress-dns-timeout", "2",
                    "--egress-allow-internal", "192.88.99.9/32",
                    "--egress-dns-per-session", "4", "--egress-accept-rate", "50")
        g.args[g.args.index("--ip") + 1] = ns.addr
        g.host = ns.addr
        g.preexec = enter
        g.start()
        # The gateway must be in our namespace before any test makes it dial.
        assert os.stat(f"/proc/{g.proc.pid}/ns/net").st_ino == os.stat(netns_path).st_ino
        g.sessions = []
        g.ns, g.dns_log = ns, dns_log
        yield g
        g.stop()
        g.cleanup()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        ns.close()


def ns_session(g, network, token=None):
    """A session on the namespaced gateway (deleted after the test, as its owner)."""
    headers = {"Authorization": f"token {token}"} if token else {}
    r = g.api("POST", "/v1/sessions", json={"timeout_s": 120, "network": network}, headers=headers, timeout=180)
    assert r.status_code == 201, r.text
    g.sessions.append((r.json()["id"], token))
    return r.json()["id"]


def test_m1_a_name_outside_the_maximum_is_never_looked_up(ns_gw):
    g = ns_gw
    # The tenant's maximum is pypi.test; the session adds a public address (a CIDR entry).
    sid = ns_session(g, {"allow": ["pypi.test", "1.1.1.1"]}, token=CAPPED_TOKEN)
    res = probe(g, sid, RAW + "result = {'exfil': connect('secret123.exfil.test:443'), "
                              "'inside': connect('pypi.test:443')}", token=CAPPED_TOKEN)
    queried = g.dns_log.read_text()
    # The name inside the maximum was looked up (our server is the one asked) ...
    assert "pypi.test" in queried, queried
    assert res["inside"]["status"] == 403 and "own address" in res["inside"]["body"], res
    # ... and the one outside it never left the host.
    assert res["exfil"]["status"] == 403, res
    assert "exfil" not in queried, queried
    log = g.api("GET", f"/v1/sessions/{sid}/network/log",
                headers={"Authorization": f"token {CAPPED_TOKEN}"}).json()["connections"]
    assert any(c["host"] == "secret123.exfil.test" and c["verdict"] == "refused" for c in log), log


def test_m1_slow_lookups_of_one_session_do_not_delay_another(ns_gw):
    g = ns_gw
    a = ns_session(g, {"allow": ["*.slow.test"]})
    b = ns_session(g, {"allow": ["fast.dns.test"]})
    measure = RAW + """
import statistics
times = []
for i in range(5):
    r = connect('fast.dns.test:443')
    assert r['status'] == 403 and 'own address' in r['body'], r
    times.append(r['s'])
result = {'max_s': max(times), 'median_s': statistics.median(times)}
"""
    before = probe(g, b, measure)
    figures = {"before": gateway_figures(g)}
    # A: 24 threads asking for names that never answer, for 8 s.
    started = probe(g, a, RAW + """
import threading, time, uuid
flood = {'sent': 0, 'busy': 0, 'limited': 0, 'other': 0}
def hammer():
    end = time.monotonic() + 8
    while time.monotonic() < end:
        r = connect(f'{uuid.uuid4().hex}.slow.test:443', timeout=20)
        flood['sent'] += 1
        flood[{503: 'busy', 429: 'limited'}.get(r['status'], 'other')] += 1
for _ in range(24):
    threading.Thread(target=hammer, daemon=True).start()
time.sleep(1)
result = dict(flood)
""")
    during = probe(g, b, measure)
    figures["peak"] = gateway_figures(g)
    in_flight = metric(g, "cellgate_egress_dns_in_flight")
    import time
    time.sleep(9)
    after = probe(g, b, measure)
    figures["after"] = gateway_figures(g)
    flood = probe(g, a, "result = dict(flood)")
    print(f"\nM1 DNS flood (24 threads, 8 s): B's lookup max {before['max_s']*1000:.0f} / {during['max_s']*1000:.0f} / "
          f"{after['max_s']*1000:.0f} ms (before/during/after); gateway RSS "
          f"{figures['before']['rss_kib']}/{figures['peak']['rss_kib']}/{figures['after']['rss_kib']} KiB, fds "
          f"{figures['before']['fds']}/{figures['peak']['fds']}/{figures['after']['fds']}; "
          f"A: {flood['sent']} asked, {flood['busy']} refused busy; lookups in flight at peak {in_flight}")
    assert started["sent"] >= 0
    # The session's bound held: its lookups in flight never passed 4 ...
    assert in_flight is not None and in_flight <= 4, in_flight
    assert flood["busy"] > 0, flood
    # ... and B's lookups did not wait behind them (a queue would cost B a 2 s timeout or more).
    assert during["max_s"] < 1.0, during
    assert figures["peak"]["fds"] - figures["before"]["fds"] < 200, figures


def test_m2_the_hosts_own_address_is_refused(ns_gw):
    g = ns_gw
    sid = ns_session(g, {"allow": [PUBLIC_LOOKING, "0.0.0.0/0", "192.88.99.8", "192.88.99.9"]})
    res = probe(g, sid, RAW + f"result = {{'connect': connect('{PUBLIC_LOOKING}:18080'), "
                              f"'get': raw('GET http://{PUBLIC_LOOKING}:18080/ HTTP/1.1\\r\\nHost: {PUBLIC_LOOKING}:18080\\r\\n\\r\\n')}}")
    for key in ("connect", "get"):
        assert res[key]["status"] == 403 and "own address" in res[key]["body"], (key, res[key])
    # An address the host gains later is its own too (netlink's RTM_NEWADDR).
    subprocess.run(["ip", "-n", g.ns.name, "addr", "add", "192.88.99.8/32", "dev", g.ns.ns_if], check=True)
    try:
        res = probe(g, sid, RAW + "result = connect('192.88.99.8:18080')")
    finally:
        subprocess.run(["ip", "-n", g.ns.name, "addr", "del", "192.88.99.8/32", "dev", g.ns.ns_if], check=True)
    assert res["status"] == 403 and "own address" in res["body"], res
    # One the operator opened: reached, but never on the gateway's own port.
    subprocess.run(["ip", "-n", g.ns.name, "addr", "add", "192.88.99.9/32", "dev", g.ns.ns_if], check=True)
    try:
        get = "GET http://192.88.99.9:{0}/ HTTP/1.1\\r\\nHost: 192.88.99.9:{0}\\r\\n\\r\\n"
        res = probe(g, sid, RAW + f"result = {{'web': raw('{get.format(18080)}'), 'gateway': raw('{get.format(g.port)}')}}")
    finally:
        subprocess.run(["ip", "-n", g.ns.name, "addr", "del", "192.88.99.9/32", "dev", g.ns.ns_if], check=True)
    assert res["web"]["status"] == 200, res
    assert res["gateway"]["status"] == 403 and "gateway's own port" in res["gateway"]["body"], res
    metrics = g.api("GET", "/metrics").text
    assert "cellgate_egress_host_addresses " in metrics


@pytest.mark.gateway_logic
def test_m5_a_connect_flood_costs_bounded_cpu_and_others_keep_latency(gw):
    import time
    flooder = session(gw, {"allow": ["allowed.test"]})
    other = session(gw, {"allow": ["allowed.test"]})
    measure = FETCH + """
import time
times = []
for i in range(5):
    t0 = time.monotonic(); r = fetch('http://allowed.test/m5'); times.append(time.monotonic() - t0)
    assert r.get('status') == 200, r
result = {'max_s': max(times)}
"""

    def healthz_max():
        worst = 0
        for _ in range(10):
            t0 = time.monotonic()
            assert gw.api("GET", "/healthz", timeout=10).status_code == 200
            worst = max(worst, time.monotonic() - t0)
        return worst

    logged_before = len(gw.api("GET", f"/v1/sessions/{flooder}/network/log?limit=1000").json()["connections"])
    before = {"other": probe(gw, other, measure)["max_s"], "healthz": healthz_max(), **gateway_figures(gw)}
    limited_before = metric(gw, "cellgate_egress_rate_limited_total") or 0
    duration = 6
    # 4 processes: connect to the proxy's socket, send a bad head, close; as fast as they can.
    probe(gw, flooder, f"""
import multiprocessing, socket, time
def loop():
    end = time.monotonic() + {duration}
    n = 0
    while time.monotonic() < end:
        try:
            s = socket.socket(socket.AF_UNIX); s.settimeout(1); s.connect('/run/egress/proxy.sock'); s.send(b'X\\r\\n\\r\\n'); s.close()
        except OSError:
            pass
        n += 1
for _ in range(4):
    multiprocessing.Process(target=loop, daemon=False).start()
result = 'started'
""")
    t0 = time.monotonic()
    time.sleep(1)
    during = {"other": probe(gw, other, measure)["max_s"], "healthz": healthz_max(), **gateway_figures(gw)}
    time.sleep(max(0, duration + 1 - (time.monotonic() - t0)))
    after = {"other": probe(gw, other, measure)["max_s"], "healthz": healthz_max(), **gateway_figures(gw)}
    cpu = after["cpu_s"] - before["cpu_s"]
    limited = (metric(gw, "cellgate_egress_rate_limited_total") or 0) - limited_before
    logged = len(gw.api("GET", f"/v1/sessions/{flooder}/network/log?limit=1000").json()["connections"]) - logged_before
    print(f"\nM5 connect flood (4 processes, {duration} s): gateway CPU {cpu:.2f} s; another session's request max "
          f"{before['other']*1000:.0f}/{during['other']*1000:.0f}/{after['other']*1000:.0f} ms, /healthz max "
          f"{before['healthz']*1000:.0f}/{during['healthz']*1000:.0f}/{after['healthz']*1000:.0f} ms, RSS "
          f"{before['rss_kib']}/{during['rss_kib']}/{after['rss_kib']} KiB, fds {before['fds']}/{during['fds']}/{after['fds']} "
          f"(before/during/after); {limited:.0f} refused past the rate, {logged} logged")
    # Records: at most the rate (50/s, bursts of 100) for the flood's length, plus the other's probes.
    assert logged <= 50 * (duration + 3) + 100, logged
    assert limited > 0
    assert cpu < 0.5 * (duration + 3), cpu
    assert during["other"] < 1.0 and during["healthz"] < 0.5, during
