"""Templates (issue 36) on the real gateway and real runc build sandboxes:
a template from packages (a wheel from an index this test serves on
loopback, reached only through the egress proxy and the operator's build
allow-list), layers reused by a second build and rebuilt from a changed
step, a failing step that says which, its exit code and its log, a build
step held to a session's confinement, the caps, another tenant's template
invisible, and the build's log as Server-Sent Events.

Needs root, runc, build/bin/cellgate and the kernel image; skipped without
them unless CELLGATE_REQUIRE_SANDBOX=1.
"""
import contextlib
import json
import socket
import time
import uuid

import pytest
import requests

from support.gateway import Gateway
from support.oci_registry import oci_registry  # noqa: F401 (a fixture)
from support.package_index import NPM_PACKAGE, package_index  # noqa: F401 (a fixture)
from support.prerequisites import IMAGE_STORE, require, runtime_missing

TOKEN_A = "tpl-a-" + uuid.uuid4().hex
TOKEN_B = "tpl-b-" + uuid.uuid4().hex
TOKEN_C = "tpl-c-" + uuid.uuid4().hex
TOKEN_D = "tpl-d-" + uuid.uuid4().hex
MiB = 1 << 20
# Layers are keyed by tenant and kept in the machine's image store between
# gateways: tenants of this run's own, so no earlier run's layer is found.
RUN = uuid.uuid4().hex[:8]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gw(tmp_path_factory, package_index):
    require("templates", runtime_missing("runc"))
    d = tmp_path_factory.mktemp("templates")
    tokens = d / "tokens.json"
    tokens.write_text(json.dumps([{"token": TOKEN_A, "tenant": "alpha-" + RUN, "operator": True},
                                  {"token": TOKEN_B, "tenant": "beta-" + RUN},
                                  {"token": TOKEN_C, "tenant": "gamma-" + RUN},
                                  {"token": TOKEN_D, "tenant": "delta-" + RUN}]))
    # A second listener the allow-list does not name: a build step must not reach it.
    g = Gateway("--tokens-file", str(tokens), "--max-kernels", "8",
                "--egress-resolve", f"pypi.test=127.0.0.1:{package_index.port}",
                "--egress-resolve", f"elsewhere.test=127.0.0.1:{package_index.port}",
                "--egress-resolve", f"apt.test=127.0.0.1:{package_index.port}",
                "--egress-resolve", f"npm.test=127.0.0.1:{package_index.port}",
                "--egress-pip-index-url", "http://pypi.test/simple/",
                "--template-npm-registry", "http://npm.test/npm/",
                "--template-build-allow", "pypi.test,apt.test,npm.test",
                "--template-apt-sources", "deb [trusted=yes] http://apt.test/apt/ ./",
                "--max-templates-per-tenant", "4", "--max-template-bytes-per-tenant", str(4 * MiB),
                "--template-step-timeout", "120", "--max-template-pool-per-tenant", "2",
                "--template-step-disk", str(96 * MiB),
                token=TOKEN_A)
    try:
        g.start()
        yield g
        # What the tests left: deleted, so their layers leave the machine's store.
        for token in (TOKEN_A, TOKEN_B, TOKEN_C, TOKEN_D):
            for t in call(g, token, "GET", "/v1/templates").json()["templates"]:
                call(g, token, "DELETE", f"/v1/templates/{t['reference']}")
    finally:
        g.stop()
        g.cleanup()


def call(gw, token, method, path, **kw):
    kw.setdefault("timeout", 60)
    return requests.request(method, gw.url + path, headers={"Authorization": f"token {token}"}, **kw)


def build(gw, body, token=TOKEN_A, timeout=300):
    """Submits a template and waits for its build to end; returns the build's model."""
    r = call(gw, token, "POST", "/v1/templates", json=body)
    assert r.status_code == 202, r.text
    at = r.json()["status_url"]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        b = call(gw, token, "GET", at).json()
        if b["status"] in ("ready", "error"):
            return b
        time.sleep(0.2)
    raise AssertionError(f"the build did not end within {timeout} s: {b}")


def run(gw, session, code, token=TOKEN_A):
    r = call(gw, token, "POST", f"/v1/sessions/{session}/execute", json={"code": code}, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


@contextlib.contextmanager
def session_on(gw, template, token=TOKEN_A):
    """A session started from `template` (201 asserted), deleted after."""
    r = call(gw, token, "POST", "/v1/sessions", json={"template": template}, timeout=120)
    assert r.status_code == 201, r.text
    try:
        yield r.json()["id"]
    finally:
        call(gw, token, "DELETE", f"/v1/sessions/{r.json()['id']}")


def test_a_template_from_packages_installs_a_wheel_from_the_tests_own_index(gw, package_index):
    t0 = time.monotonic()
    b = build(gw, {"name": "analytics:v1", "packages": {"pip": ["cgdemo==1.0"]},
                   "steps": [{"type": "ENV", "args": ["CGDEMO_MODE", "template"]}],
                   "kernel": {"preload": ["cgdemo"]}})
    cold = time.monotonic() - t0
    assert b["status"] == "ready", b
    assert b["built_steps"] == 1 and b["cached_steps"] == 0, b
    assert any("Successfully installed cgdemo-1.0" in line for line in b["logs"]), b["logs"]
    assert f"/files/{package_index.wheel_name}" in package_index.fetched  # through the proxy, from the allowed name
    print(f"\ntemplates: a cold build of one pip package took {cold:.1f} s")

    r = call(gw, TOKEN_A, "POST", "/v1/sessions", json={"template": "analytics:v1"}, timeout=120)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    try:
        out = run(gw, sid, "import cgdemo, os, sys\nprint(cgdemo.ANSWER, os.environ['CGDEMO_MODE'], 'cgdemo' in sys.modules)")
        assert out["stdout"].split() == ["42", "template", "True"], out
    finally:
        call(gw, TOKEN_A, "DELETE", f"/v1/sessions/{sid}")

    # A Jupyter client sees it as a kernelspec of this tenant's only.
    specs = call(gw, TOKEN_A, "GET", "/api/kernelspecs").json()["kernelspecs"]
    mine = [s for s in specs.values() if s["spec"]["display_name"] == "analytics:v1"]
    assert len(mine) == 1, specs.keys()
    name = mine[0]["name"]
    theirs = call(gw, TOKEN_B, "GET", "/api/kernelspecs").json()["kernelspecs"]
    assert name not in theirs and all(s["spec"]["display_name"] != "analytics:v1" for s in theirs.values())

    # Another tenant: the same 404 as for a name nobody used, at every way in.
    for path in ("/v1/templates/analytics:v1", f"/api/kernelspecs/{name}"):
        assert call(gw, TOKEN_B, "GET", path).status_code == 404, path
    assert call(gw, TOKEN_B, "GET", "/v1/templates/nobody-built-this:v1").status_code == 404
    r = call(gw, TOKEN_B, "POST", "/v1/sessions", json={"template": "analytics:v1"})
    assert r.status_code == 404, r.text
    r = call(gw, TOKEN_B, "POST", "/api/kernels", json={"name": name})
    assert r.status_code == 404, r.text
    assert call(gw, TOKEN_B, "GET", "/v1/templates").json()["templates"] == []
    assert call(gw, TOKEN_B, "DELETE", "/v1/templates/analytics:v1").status_code == 404
    b_id = b["build_id"]
    assert call(gw, TOKEN_B, "GET", f"/v1/templates/analytics:v1/builds/{b_id}").status_code == 404


def test_a_second_build_reuses_every_layer_and_a_changed_step_rebuilds_from_it(gw):
    steps = [{"type": "RUN", "args": ["echo one > /opt/one; sleep 0.5"]},
             {"type": "RUN", "args": ["echo two > /opt/two"]},
             {"type": "RUN", "args": ["cat /opt/one /opt/two > /opt/both"]}]
    first = build(gw, {"name": "layers:v1", "steps": steps})
    assert first["status"] == "ready" and first["built_steps"] == 3, first
    t0 = time.monotonic()
    again = build(gw, {"name": "layers:v1", "steps": steps})
    cached = time.monotonic() - t0
    assert again["status"] == "ready" and again["cached_steps"] == 3 and again["built_steps"] == 0, again
    assert [s["status"] for s in again["steps"]] == ["cached"] * 3
    changed = [steps[0], {"type": "RUN", "args": ["echo TWO > /opt/two"]}, steps[2]]
    third = build(gw, {"name": "layers:v1", "steps": changed})
    assert [s["status"] for s in third["steps"]] == ["cached", "done", "done"], third
    print(f"\ntemplates: a fully cached rebuild of 3 steps took {cached:.2f} s")

    sid = call(gw, TOKEN_A, "POST", "/v1/sessions", json={"template": "layers:v1"}, timeout=120).json()["id"]
    try:
        assert run(gw, sid, "print(open('/opt/both').read().split())")["stdout"].strip() == "['one', 'TWO']"
    finally:
        call(gw, TOKEN_A, "DELETE", f"/v1/sessions/{sid}")
    # Forced: every step built again, with new layers.
    forced = build(gw, {"name": "layers:v1", "steps": changed, "force": True})
    assert forced["built_steps"] == 3 and forced["cached_steps"] == 0, forced
    assert call(gw, TOKEN_A, "DELETE", "/v1/templates/layers:v1").status_code == 204
    assert call(gw, TOKEN_A, "GET", "/v1/templates/layers:v1").status_code == 404


def test_a_failing_step_says_which_its_exit_code_and_the_tail_of_its_log(gw):
    b = build(gw, {"name": "broken", "steps": [{"type": "RUN", "args": ["echo fine"]},
                                                {"type": "RUN", "args": ["echo about to fail >&2; exit 7"]},
                                                {"type": "RUN", "args": ["echo never"]}]})
    assert b["status"] == "error", b
    f = b["failure"]
    assert f["step"] == {"index": 1, "type": "RUN"} and f["exit_code"] == 7, f
    assert "about to fail" in f["log_tail"] and "exited with code 7" in f["message"], f
    assert [s["status"] for s in b["steps"]] == ["done", "failed", "pending"], b["steps"]
    assert not any("never" == line for line in b["logs"])
    # The layer its first step made goes with it.
    made = [line.split()[2] for line in b["logs"] if line.startswith(" ---> layer ")]
    assert len(made) == 1, b["logs"]
    assert not list((IMAGE_STORE / ".layers").glob(made[0] + "*"))
    # Nothing was made of it: no template, no kernelspec.
    assert call(gw, TOKEN_A, "GET", "/v1/templates/broken").json()["status"] == "error"  # only its build is there
    r = call(gw, TOKEN_A, "POST", "/v1/sessions", json={"template": "broken"})
    assert r.status_code == 404, r.text


PROBE = r'''
import os, socket, ctypes, urllib.request
found = []
# Only loopback: the gateway's port on the host is not there.
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("127.0.0.1", GATEWAY_PORT)); found.append("reached the gateway's port")
except OSError:
    pass
# Through the proxy, a name the build allow-list does not hold is refused.
try:
    urllib.request.urlopen("http://elsewhere.test/simple/cgdemo/", timeout=10); found.append("reached elsewhere.test")
except Exception as e:
    print("elsewhere.test:", e)
# A user namespace: root here is not root on the host.
if open("/proc/self/uid_map").read().split()[:2] == ["0", "0"]:
    found.append("root is the host's root")
# No mount, no raw sockets, no kernel modules.
libc = ctypes.CDLL(None, use_errno=True)
if libc.mount(b"none", b"/mnt", b"tmpfs", 0, None) == 0:
    found.append("mounted a tmpfs")
try:
    socket.socket(socket.AF_PACKET, socket.SOCK_RAW); found.append("opened a raw socket")
except OSError:
    pass
caps = int([l for l in open("/proc/self/status") if l.startswith("CapEff")][0].split()[1], 16)
if caps & (1 << 21):
    found.append("has CAP_SYS_ADMIN")
# The host's files: the gateway's own state is not in this root.
if os.path.exists("GATEWAY_DIR"):
    found.append("sees the gateway's directory")
print("confined" if not found else "ESCAPED: " + "; ".join(found))
raise SystemExit(1 if found else 0)
'''


def test_a_step_that_writes_past_its_disk_fails_and_the_host_keeps_its_space(gw):
    b = build(gw, {"name": "filler", "steps": [{"type": "RUN", "args": ["head -c 200000000 /dev/zero > /opt/fill"]}]})
    assert b["status"] == "error", b
    assert "No space left on device" in b["failure"]["log_tail"], b["failure"]
    assert list((IMAGE_STORE / ".layers").glob(".tmp-*")) == []  # its scratch file system is gone


def test_a_build_step_is_confined_like_a_session(gw):
    code = PROBE.replace("GATEWAY_PORT", str(gw.port)).replace("GATEWAY_DIR", str(gw.base_dir))
    b = build(gw, {"name": "probe", "steps": [{"type": "RUN", "args": ["python3 - <<'EOF'\n" + code + "EOF"]}]})
    print("\n".join(b["logs"]))
    assert b["status"] == "ready", b
    assert "confined" in b["logs"], b["logs"]
    assert any("403" in line or "Forbidden" in line for line in b["logs"] if line.startswith("elsewhere.test")), b["logs"]
    assert call(gw, TOKEN_A, "DELETE", "/v1/templates/probe").status_code == 204


def test_the_caps_refuse_with_reasons(gw):
    # gamma's templates may keep 2 warm sandboxes together.
    r = call(gw, TOKEN_C, "POST", "/v1/templates", json={"name": "pooled", "kernel": {"pool": 3}})
    assert r.status_code == 429 and "warm sandboxes" in r.json()["message"], r.text
    # gamma may keep 4 templates: a fifth is refused (ENV only: no layer, no sandbox).
    for n in range(4):
        assert build(gw, {"name": f"t{n}", "steps": [{"type": "ENV", "args": ["N", str(n)]}]}, token=TOKEN_C)["status"] == "ready"
    r = call(gw, TOKEN_C, "POST", "/v1/templates", json={"name": "t4"})
    assert r.status_code == 429 and "4" in r.json()["message"], r.text
    # Its layers may hold 4 MiB: a 5 MiB layer is built, then the next build is refused.
    assert call(gw, TOKEN_C, "DELETE", "/v1/templates/t3").status_code == 204
    big = build(gw, {"name": "t3", "steps": [{"type": "RUN", "args": ["head -c 5242880 /dev/urandom > /opt/big"]}]},
                token=TOKEN_C)
    assert big["status"] == "ready", big
    r = call(gw, TOKEN_C, "POST", "/v1/templates", json={"name": "t3", "steps": [{"type": "RUN", "args": ["true"]}]})
    assert r.status_code == 413 and "cap" in r.json()["message"], r.text
    # Another tenant is not held by gamma's caps.
    assert build(gw, {"name": "t4", "steps": [{"type": "ENV", "args": ["N", "4"]}]}, token=TOKEN_B)["status"] == "ready"
    # Deleting gives the room back.
    assert call(gw, TOKEN_C, "DELETE", "/v1/templates/t3").status_code == 204
    assert build(gw, {"name": "t3", "steps": [{"type": "RUN", "args": ["true"]}]}, token=TOKEN_C)["status"] == "ready"


@pytest.mark.parametrize("body, says", [
    ({"name": "Bad Name"}, "name"),
    ({"name": "ok", "stepz": []}, "stepz"),
    ({"name": "ok", "steps": [{"type": "FROB", "args": []}]}, "FROB"),
    ({"name": "ok", "steps": [{"type": "RUN", "args": ["true", "nobody"]}]}, "USER"),
    ({"name": "ok", "packages": {"pip": ["--index-url=http://evil/"]}}, "package"),
    ({"name": "ok", "steps": [{"type": "RUN", "args": ["true"]}] * 65}, "64"),
])
def test_a_bad_definition_gets_400_saying_what(gw, body, says):
    r = call(gw, TOKEN_A, "POST", "/v1/templates", json=body)
    assert r.status_code == 400 and says in r.json()["message"], r.text


def test_a_builds_log_streams_as_server_sent_events(gw):
    r = call(gw, TOKEN_A, "POST", "/v1/templates",
             json={"name": "streamed", "steps": [{"type": "RUN", "args": ["for i in 1 2 3; do echo line $i; sleep 0.2; done"]}]})
    assert r.status_code == 202, r.text
    events, current = [], None
    with requests.get(gw.url + r.json()["status_url"], headers={"Authorization": f"token {TOKEN_A}",
                                                                 "Accept": "text/event-stream"},
                      stream=True, timeout=120) as s:
        assert s.headers["Content-Type"].startswith("text/event-stream")
        for raw in s.iter_lines(decode_unicode=True):
            if raw.startswith("event:"):
                current = raw.split(":", 1)[1].strip()
            elif raw.startswith("data:"):
                events.append((current, json.loads(raw.split(":", 1)[1])))
                if current == "end":
                    break
    lines = [e["log"] for kind, e in events if kind == "log"]
    assert ["line 1", "line 2", "line 3"] == [l for l in lines if l.startswith("line ")], lines
    assert events[-1][0] == "end" and events[-1][1]["status"] == "ready", events[-1]
    assert call(gw, TOKEN_A, "DELETE", "/v1/templates/streamed").status_code == 204


def metric(gw, name, spec=None):
    label = f'{{kernelspec="{spec}"}}' if spec else ""
    for line in call(gw, TOKEN_A, "GET", "/metrics").text.splitlines():
        if line.startswith(name + label + " "):
            return float(line.split()[-1])
    return None


def test_tags_name_a_build_and_move_as_dockers_do(gw):
    """A build under several tags at once; a tag added later to what another
    names (the same build and layers, no step run); a tag moved by a rebuild
    of its own; deleting a tag leaves the build's other names and their
    layers; the tags' list; another tenant sees none of it."""
    first = build(gw, {"name": "tagged:v1", "tags": ["stable"], "steps": [{"type": "RUN", "args": ["echo one > /opt/n"]}]},
                  token=TOKEN_D)
    assert first["status"] == "ready", first
    listed = call(gw, TOKEN_D, "GET", "/v1/templates/tagged/tags").json()["tags"]
    assert sorted(t["tag"] for t in listed) == ["stable", "v1"] and {t["build_id"] for t in listed} == {first["build_id"]}
    r = call(gw, TOKEN_D, "POST", "/v1/templates/tagged:v1/tags", json={"tags": ["prod"]})
    assert r.status_code == 201 and r.json() == {"build_id": first["build_id"], "tags": ["prod"]}, r.text
    # v2 is built anew; "stable" then moves to it.
    second = build(gw, {"name": "tagged:v2", "steps": [{"type": "RUN", "args": ["echo two > /opt/n"]}]}, token=TOKEN_D)
    assert second["status"] == "ready", second
    assert call(gw, TOKEN_D, "POST", "/v1/templates/tagged:v2/tags", json={"tags": ["stable"]}).status_code == 201
    seen = {}
    for tag in ("v1", "prod", "stable", "v2"):
        r = call(gw, TOKEN_D, "POST", "/v1/sessions", json={"template": f"tagged:{tag}"}, timeout=120)
        assert r.status_code == 201, r.text
        seen[tag] = run(gw, r.json()["id"], "print(open('/opt/n').read().strip())", token=TOKEN_D)["stdout"].strip()
        call(gw, TOKEN_D, "DELETE", f"/v1/sessions/{r.json()['id']}")
    assert seen == {"v1": "one", "prod": "one", "stable": "two", "v2": "two"}, seen
    # Four names are the tenant's cap: a fifth tag is refused, as a fifth template is.
    r = call(gw, TOKEN_D, "POST", "/v1/templates/tagged:v2/tags", json={"tags": ["latest"]})
    assert r.status_code == 429 and "templates" in r.json()["message"], r.text
    # Deleting v1 leaves prod, which stands on the same layers.
    assert call(gw, TOKEN_D, "DELETE", "/v1/templates/tagged:v1").status_code == 204
    r = call(gw, TOKEN_D, "POST", "/v1/sessions", json={"template": "tagged:prod"}, timeout=120)
    assert r.status_code == 201, r.text
    assert run(gw, r.json()["id"], "print(open('/opt/n').read().strip())", token=TOKEN_D)["stdout"].strip() == "one"
    call(gw, TOKEN_D, "DELETE", f"/v1/sessions/{r.json()['id']}")
    assert call(gw, TOKEN_B, "GET", "/v1/templates/tagged/tags").status_code == 404
    assert call(gw, TOKEN_B, "POST", "/v1/templates/tagged:prod/tags", json={"tags": ["mine"]}).status_code == 404
    bad = call(gw, TOKEN_D, "POST", "/v1/templates/tagged:prod/tags", json={"tags": ["no spaces"]})
    assert bad.status_code == 400 and "tag" in bad.json()["message"], bad.text
    for tag in ("prod", "stable", "v2"):
        assert call(gw, TOKEN_D, "DELETE", f"/v1/templates/tagged:{tag}").status_code == 204


def test_a_template_keeps_its_own_warm_pool(gw):
    b = build(gw, {"name": "warm:v1", "steps": [{"type": "RUN", "args": ["echo warm > /opt/warm"]}],
                   "kernel": {"pool": 1, "preload": ["json"]}})
    assert b["status"] == "ready", b
    spec = call(gw, TOKEN_A, "GET", "/v1/templates/warm:v1").json()["kernelspec"]
    end = time.monotonic() + 90
    while metric(gw, "cellgate_pool_ready", spec) != 1 and time.monotonic() < end:
        time.sleep(0.2)
    assert metric(gw, "cellgate_pool_ready", spec) == 1, call(gw, TOKEN_A, "GET", "/metrics").text
    claims, misses = metric(gw, "cellgate_pool_claims_total"), metric(gw, "cellgate_pool_misses_total")
    t0 = time.monotonic()
    sid = call(gw, TOKEN_A, "POST", "/v1/sessions", json={"template": "warm:v1"}, timeout=120).json()["id"]
    try:
        out = run(gw, sid, "print(open('/opt/warm').read().strip())")
        first = time.monotonic() - t0
        assert out["stdout"] == "warm\n", out
        assert metric(gw, "cellgate_pool_claims_total") == claims + 1
        assert metric(gw, "cellgate_pool_misses_total") == misses
        print(f"\ntemplates: create → first result from the template's warm pool: {first * 1000:.0f} ms")
    finally:
        call(gw, TOKEN_A, "DELETE", f"/v1/sessions/{sid}")
    # Deleting the template ends its pool.
    assert call(gw, TOKEN_A, "DELETE", "/v1/templates/warm:v1").status_code == 204
    end = time.monotonic() + 30
    while metric(gw, "cellgate_pool_ready", spec) not in (None, 0) and time.monotonic() < end:
        time.sleep(0.2)
    assert metric(gw, "cellgate_pool_ready", spec) in (None, 0)


def test_a_plain_pip_install_step_installs_from_the_operators_index(gw):
    """What E2B's pipInstall sends: `pip install …` as root, no flags; the
    build's pip finds the operator's index and may install into the image."""
    b = build(gw, {"name": "plainpip", "steps": [{"type": "RUN", "args": ["pip install cgdemo", "root"]}]})
    assert b["status"] == "ready", b["logs"]
    assert any("Successfully installed cgdemo-1.0" in line for line in b["logs"]), b["logs"]
    assert call(gw, TOKEN_A, "DELETE", "/v1/templates/plainpip").status_code == 204


def tar_of(files, gzip=True):
    """A tar archive (gzip'd by default) of {path: bytes}, as a client uploads one."""
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz" if gzip else "w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size = len(data)
            info.mode = 0o644
            info.uid = 4242  # the client's own ids: never the files' owner in the image
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_copy_steps_unpack_the_tenants_uploaded_archive(gw):
    key = "files-" + uuid.uuid4().hex
    archive = tar_of({"app/main.py": b"print('hello from app')\n", "app/data/rows.csv": b"a,b\n1,2\n",
                      "README.md": b"# readme\n"})
    assert call(gw, TOKEN_A, "GET", f"/v1/templates/files/{key}").status_code == 404
    r = call(gw, TOKEN_A, "PUT", f"/v1/templates/files/{key}", data=archive)
    assert r.status_code == 201, r.text
    import hashlib
    assert r.json()["sha256"] == hashlib.sha256(archive).hexdigest() and r.json()["bytes"] == len(archive)
    assert call(gw, TOKEN_A, "GET", f"/v1/templates/files/{key}").json()["sha256"] == r.json()["sha256"]
    # Another tenant neither sees them nor builds from them.
    assert call(gw, TOKEN_B, "GET", f"/v1/templates/files/{key}").status_code == 404
    steps = [{"type": "USER", "args": ["user"]}, {"type": "WORKDIR", "args": ["/srv"]},
             {"type": "COPY", "args": ["app", "app/"], "files": key},
             {"type": "COPY", "args": ["README.md", "/opt/readme.txt", "root", "0600"], "files": key}]
    theirs = build(gw, {"name": "copied", "steps": steps}, token=TOKEN_B)
    assert theirs["status"] == "error" and "no files were uploaded" in theirs["failure"]["message"], theirs

    b = build(gw, {"name": "copied", "steps": steps})
    assert b["status"] == "ready", b["logs"]
    assert b["built_steps"] == 2, b
    with session_on(gw, "copied") as sid:
        out = run(gw, sid, "import os, subprocess\n"
                           "print(subprocess.run(['python3', '/srv/app/main.py'], capture_output=True, text=True).stdout.strip())\n"
                           "print(open('/srv/app/data/rows.csv').read().split())\n"
                           "for p in ('/srv/app/main.py', '/srv/app', '/opt/readme.txt'):\n"
                           "    st = os.stat(p); print(p, st.st_uid, oct(st.st_mode & 0o777))")
        lines = out["stdout"].splitlines()
        assert lines[0] == "hello from app", out
        assert lines[1] == "['a,b', '1,2']", out
        assert lines[2].endswith(" 0o644") and lines[4].endswith(" 0o600"), out
    # In the layers (as a later step and the image keep them): the template's
    # USER owns what the first COPY placed, root what the second did, never
    # the uid the client's archive named.
    made = [line.split()[2] for line in b["logs"] if line.startswith(" ---> layer ")]
    layers = [d for d in (IMAGE_STORE / ".layers").iterdir() if d.name.startswith(tuple(made))]
    owners = {}
    for d in layers:
        for rel in ("srv/app/main.py", "srv/app", "opt/readme.txt"):
            p = d / "diff" / rel
            if p.exists():
                owners[rel] = (p.stat().st_uid, oct(p.stat().st_mode & 0o777))
    assert owners["srv/app/main.py"] == (1000, "0o644"), owners
    assert owners["srv/app"][0] == 1000, owners
    assert owners["opt/readme.txt"] == (0, "0o600"), owners

    # The same archive again: cached. Changed files under a new key: that step and those after it are built.
    again = build(gw, {"name": "copied", "steps": steps})
    assert again["cached_steps"] == 2 and again["built_steps"] == 0, again
    key2 = "files-" + uuid.uuid4().hex
    changed = tar_of({"app/main.py": b"print('changed')\n", "README.md": b"# readme\n"}, gzip=False)
    assert call(gw, TOKEN_A, "PUT", f"/v1/templates/files/{key2}", data=changed).status_code == 201
    steps2 = [steps[0], steps[1], {**steps[2], "files": key2}, steps[3]]
    rebuilt = build(gw, {"name": "copied", "steps": steps2})
    assert rebuilt["status"] == "ready", rebuilt["logs"]
    assert rebuilt["built_steps"] == 2 and rebuilt["cached_steps"] == 0, rebuilt

    # A pattern nothing matches fails its step, saying so.
    bad = build(gw, {"name": "copybad", "steps": [{"type": "COPY", "args": ["nothing/*.py", "/opt/"], "files": key}]})
    assert bad["status"] == "error" and bad["failure"]["step"]["index"] == 0, bad
    assert "nothing in the uploaded files matches" in bad["failure"]["log_tail"], bad
    r = call(gw, TOKEN_A, "POST", "/v1/templates", json={"name": "x", "steps": [{"type": "COPY", "args": ["a", "/b"]}]})
    assert r.status_code == 400 and "files" in r.json()["message"], r.text
    r = call(gw, TOKEN_A, "POST", "/v1/templates", json={"name": "x", "steps": [{"type": "COPY", "args": ["../etc", "/b"], "files": key}]})
    assert r.status_code == 400 and "source" in r.json()["message"], r.text
    assert call(gw, TOKEN_A, "PUT", "/v1/templates/files/bad", data=b"x").status_code == 400
    for name in ("copied", "copybad"):
        call(gw, TOKEN_A, "DELETE", f"/v1/templates/{name}")


def test_a_start_command_runs_and_its_ready_check_passes_before_the_first_cell(gw):
    serve = ("python3 -c \"import http.server, os; os.chdir('/srv/site'); "
             "http.server.ThreadingHTTPServer(('127.0.0.1', 8731), http.server.SimpleHTTPRequestHandler).serve_forever()\"")
    ready = "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8731), 1)\""
    b = build(gw, {"name": "served", "start_cmd": "sleep 1; " + serve, "ready_cmd": ready,
                   "steps": [{"type": "RUN", "args": ["mkdir -p /srv/site && echo served-page > /srv/site/index.html"]},
                             {"type": "WORKDIR", "args": ["/srv/site"]}]})
    assert b["status"] == "ready", b["logs"]
    with session_on(gw, "served") as sid:
        # The server slept a second before it listened: the sandbox waited for it.
        out = run(gw, sid, "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:8731/', timeout=5).read().decode().strip())")
        assert out["stdout"].strip() == "served-page", out
        # An interrupt of the kernel does not reach the server.
        assert call(gw, TOKEN_A, "POST", f"/v1/sessions/{sid}/interrupt").status_code in (200, 202, 204)
        out = run(gw, sid, "import urllib.request\nprint(urllib.request.urlopen('http://127.0.0.1:8731/', timeout=5).status)")
        assert out["stdout"].strip() == "200", out

    # A check that never passes: the session does not start, and says why.
    b = build(gw, {"name": "neverready", "start_cmd": "echo starting; exit 3", "ready_cmd": "false",
                   "kernel": {"start_timeout_s": 6}})
    assert b["status"] == "ready", b
    r = call(gw, TOKEN_A, "POST", "/v1/sessions", json={"template": "neverready"}, timeout=120)
    assert r.status_code >= 500 and "ready check did not pass in 3 s: false" in r.text, r.text
    assert "starting" in r.text, r.text  # the start command's own output, its log's tail
    for name in ("served", "neverready"):
        call(gw, TOKEN_A, "DELETE", f"/v1/templates/{name}")


def test_a_template_on_minimal_debian_installs_a_debian_package_from_the_operators_mirror(gw, package_index):
    """from: debian (E2B's fromDebianImage) with packages.apt: apt-get fetches
    from the mirror the operator names (--template-apt-sources, served here on
    loopback), through the proxy; a session on it runs the installed tool."""
    b = build(gw, {"name": "deb", "from": {"image": "debian"}, "packages": {"apt": ["cgtool"]}})
    assert b["status"] == "ready", "\n".join(b["logs"])
    assert f"/apt/{package_index.deb_name}" in package_index.fetched
    assert any("Setting up cgtool (1.0)" in line for line in b["logs"]), b["logs"]
    with session_on(gw, "deb") as sid:
        out = run(gw, sid, "import subprocess, sys\n"
                           "print(subprocess.run(['cgtool'], capture_output=True, text=True).stdout.strip())\n"
                           "print(sys.version_info[0])\n"
                           "try:\n    import pandas\nexcept ImportError:\n    print('no pandas')")
        assert out["stdout"].splitlines() == ["cgtool 1.0 says hello", "3", "no pandas"], out
    assert call(gw, TOKEN_A, "DELETE", "/v1/templates/deb").status_code == 204


def test_a_template_on_node_installs_an_npm_package_from_the_operators_registry(gw, package_index):
    """from: node (Debian 12 with Node.js and npm; E2B's fromNodeImage) with
    packages.apt and packages.npm: apt first, then npm, which fetches from the
    registry the operator names (--template-npm-registry, served here on
    loopback) through the proxy; a session runs the package's command."""
    b = build(gw, {"name": "web", "from": {"image": "node"}, "packages": {"npm": [NPM_PACKAGE], "apt": ["cgtool"]}})
    assert b["status"] == "ready", "\n".join(b["logs"])
    assert [s["summary"].split()[1] for s in b["steps"]] == ["apt-get", "npm"], b["steps"]
    assert f"/npm/{NPM_PACKAGE}/-/{package_index.npm_name}" in package_index.fetched
    with session_on(gw, "web") as sid:
        out = run(gw, sid, "import subprocess\n"
                           f"print(subprocess.run(['{NPM_PACKAGE}', 'the kernel'], capture_output=True, text=True).stdout.strip())\n"
                           "print(subprocess.run(['cgtool'], capture_output=True, text=True).stdout.strip())")
        assert out["stdout"].splitlines() == ["cg-greet 1.0.0 greets the kernel", "cgtool 1.0 says hello"], out
    assert call(gw, TOKEN_A, "DELETE", "/v1/templates/web").status_code == 204


def test_a_sessions_workspace_starts_with_what_the_template_put_there(gw):
    """What the steps wrote under /workspace (E2B's /home/user, its default
    WORKDIR) is each new session's to start with, owned as the steps left
    it, in a workspace of its own: one session's changes are not another's."""
    b = build(gw, {"name": "seeded", "steps": [
        {"type": "RUN", "args": ["mkdir -p /workspace/data && echo seeded > /workspace/data/notes.txt", "user"]},
        {"type": "RUN", "args": ["echo by-root > /home/user/root-owned.txt && chmod 0644 /home/user/root-owned.txt"]}]})
    assert b["status"] == "ready", "\n".join(b["logs"])
    sids = []
    try:
        for _ in range(2):
            r = call(gw, TOKEN_A, "POST", "/v1/sessions", json={"template": "seeded"}, timeout=120)
            assert r.status_code == 201, r.text
            sids.append(r.json()["id"])
        code = ("import os\n"
                "print(open('/workspace/data/notes.txt').read().strip(), open('/home/user/root-owned.txt').read().strip())\n"
                "print(os.stat('/workspace/data/notes.txt').st_uid, os.stat('/workspace/root-owned.txt').st_uid)\n"
                "open('/workspace/data/notes.txt', 'a').write('changed\\n')\n"
                "print(len(open('/workspace/data/notes.txt').read().split()))")
        first = run(gw, sids[0], code)
        assert first["stdout"].splitlines() == ["seeded by-root", "1000 0", "2"], first
        # The second session's copy is its own: the first one's change is not in it.
        second = run(gw, sids[1], "print(open('/workspace/data/notes.txt').read().split())")
        assert second["stdout"].strip() == "['seeded']", second
    finally:
        for sid in sids:
            call(gw, TOKEN_A, "DELETE", f"/v1/sessions/{sid}")
    assert call(gw, TOKEN_A, "DELETE", "/v1/templates/seeded").status_code == 204


DOCKERFILE = """\
# A single-stage Dockerfile, as a data team writes one.
ARG GREETING=hello
FROM python:3.11-slim
ENV APP_HOME=/srv/app \\
    MODE=docker
WORKDIR $APP_HOME
COPY --chown=user app/ ./
COPY ["README.md", "/opt/"]
RUN echo "$GREETING from a build arg" > /opt/greeting \\
 && python3 -m pip install cgdemo
USER user
CMD ["python3", "-m", "http.server", "8732", "--bind", "127.0.0.1"]
"""


def test_a_dockerfile_with_its_files_builds_the_same_steps(gw, package_index):
    archive = tar_of({"app/main.py": b"print('dockerfile app')\n", "README.md": b"# from the form\n"})
    form = {"dockerfile": ("Dockerfile", DOCKERFILE, "text/plain"),
            "files": ("context.tar.gz", archive, "application/gzip"),
            "template": (None, json.dumps({"name": "dockered:v1", "build_args": {"GREETING": "hi"},
                                           "ready_cmd": "python3 -c \"import socket; socket.create_connection(('127.0.0.1', 8732), 1)\""}),
                         "application/json")}
    r = call(gw, TOKEN_A, "POST", "/v1/templates", files=form)
    assert r.status_code == 202, r.text
    at = r.json()["status_url"]
    for _ in range(1500):
        b = call(gw, TOKEN_A, "GET", at).json()
        if b["status"] in ("ready", "error"):
            break
        time.sleep(0.2)
    assert b["status"] == "ready", "\n".join(b["logs"])
    assert [s["type"] for s in b["steps"]] == ["ENV", "WORKDIR", "COPY", "COPY", "RUN", "USER"], b["steps"]
    r = call(gw, TOKEN_A, "POST", "/v1/sessions", json={"template": "dockered:v1"}, timeout=120)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    try:
        out = run(gw, sid, "import os, subprocess, urllib.request, cgdemo\n"
                           "print(subprocess.run(['python3', '/srv/app/main.py'], capture_output=True, text=True).stdout.strip())\n"
                           "print(open('/opt/README.md').read().strip(), '|', open('/opt/greeting').read().strip())\n"
                           "print(os.environ['MODE'], cgdemo.ANSWER, urllib.request.urlopen('http://127.0.0.1:8732/', timeout=5).status)")
        assert out["stdout"].splitlines() == ["dockerfile app", "# from the form | hi from a build arg", "docker 42 200"], out
    finally:
        call(gw, TOKEN_A, "DELETE", f"/v1/sessions/{sid}")
    # The same Dockerfile as JSON, its files uploaded first under a key of the client's: every layer is found.
    key = "ctx-" + uuid.uuid4().hex
    assert call(gw, TOKEN_A, "PUT", f"/v1/templates/files/{key}", data=archive).status_code == 201
    again = build(gw, {"name": "dockered:v1", "dockerfile": DOCKERFILE, "files": key, "build_args": {"GREETING": "hi"}})
    assert again["status"] == "ready" and again["built_steps"] == 0 and again["cached_steps"] == 3, again
    # What it cannot take: 400 naming the line.
    for text, says in (("FROM python\nFROM debian\n", "line 2"), ("FROM alpine:3.20\n", "registry"),
                       ("FROM python\nVOLUME /data\n", "line 2 (VOLUME)"), ("RUN true\n", "FROM"),
                       ("FROM python\nCOPY a /b\n", "files"), ("FROM python\nADD https://x.test/a /b\n", "URL")):
        r = call(gw, TOKEN_A, "POST", "/v1/templates", json={"name": "badfile", "dockerfile": text, "files": key})
        if "COPY a /b" in text:
            r = call(gw, TOKEN_A, "POST", "/v1/templates", json={"name": "badfile", "dockerfile": text})
        # A FROM that names no built-in image is a template of the tenant's: none of that name is a 404.
        assert r.status_code == (404 if "alpine" in text else 400) and says in r.json()["message"], (text, r.text)
    assert call(gw, TOKEN_A, "DELETE", "/v1/templates/dockered:v1").status_code == 204


@pytest.fixture(scope="module")
def registry_gw(tmp_path_factory, oci_registry):
    """A gateway whose tenants may keep a whole image (the module's other gateway keeps 4 MiB)."""
    d = tmp_path_factory.mktemp("templates-registry")
    tokens = d / "tokens.json"
    tokens.write_text(json.dumps([{"token": TOKEN_A, "tenant": "reg-" + RUN, "operator": True}]))
    g = Gateway("--tokens-file", str(tokens), "--template-registries", f"http://{oci_registry.host}",
                "--max-template-bytes-per-tenant", str(2048 * MiB), "--template-step-timeout", "300", token=TOKEN_A)
    try:
        g.start()
        yield g
        for t in call(g, TOKEN_A, "GET", "/v1/templates").json()["templates"]:
            call(g, TOKEN_A, "DELETE", f"/v1/templates/{t['reference']}")
    finally:
        g.stop()
        g.cleanup()


def test_a_registry_base_without_python_gets_cellgates(registry_gw, oci_registry):
    """A Debian with neither Python nor tini (as debian:bookworm-slim is) gets
    cellgate's runtime at its import: Python with ipykernel under
    /opt/cellgate/runtime, run by its own loader, as /usr/bin/python3; build
    steps and sessions use it, the image's own files stay."""
    gw = registry_gw
    ref = oci_registry.push_rootfs(IMAGE_STORE / "debian" / "current" / "rootfs", "cellgate/slim:1",
                                   exclude=["./usr/lib/python3*", "./usr/bin/python3*", "./usr/bin/tini*",
                                            "./usr/bin/pip*", "./opt/cellgate", "./usr/local/share/jupyter"])
    b = build(gw, {"name": "slim", "from": {"oci": ref},
                   "steps": [{"type": "RUN", "args": ["python3 -c 'print(6 * 7)' > /opt/answer"]}]})
    assert b["status"] == "ready", "\n".join(b["logs"])
    assert any("cellgate's (Debian's Python 3 with ipykernel) is added" in line for line in b["logs"]), b["logs"]
    with session_on(gw, "slim") as sid:
        out = run(gw, sid, "import os, subprocess, sys\n"
                           "print(sys.prefix, open('/opt/answer').read().strip())\n"
                           "print(subprocess.run(['python3', '-c', 'import ipykernel; print(1 + 1)'],\n"
                           "                     capture_output=True, text=True).stdout.strip())\n"
                           "print(os.path.exists('/usr/lib/python3'), os.path.realpath('/usr/bin/python3'))")
        assert out["stdout"].splitlines() == ["/opt/cellgate/runtime/usr 42", "2", "False /opt/cellgate/python3"], out


def test_a_template_from_a_registry_image_pulled_from_the_operators_registry(registry_gw, oci_registry):
    """from: {"oci": …}: an image pushed to a registry on loopback (one the
    operator names, plain HTTP) is pulled into a base layer once; its config's
    environment is the template's, its WorkingDir and User (a name in its
    /etc/passwd) the first steps', steps build on it, sessions run on it."""
    gw = registry_gw
    ref = oci_registry.push_rootfs(IMAGE_STORE / "debian" / "current" / "rootfs", "cellgate/deb:1",
                                   env=["CGREG=from-the-registry", "PATH=/usr/local/bin:/usr/bin:/bin"],
                                   workdir="/home/user/proj", user="kernel")
    b = build(gw, {"name": "fromreg", "from": {"oci": ref},
                   "steps": [{"type": "RUN", "args": ["pwd > where; id -u >> where"]},
                             {"type": "RUN", "args": ["echo built-on-registry > /opt/reg-marker", "root"]}]})
    assert b["status"] == "ready", "\n".join(b["logs"])
    assert any(line.startswith(" ---> sha256:") for line in b["logs"]), b["logs"]
    with session_on(gw, "fromreg") as sid:
        out = run(gw, sid, "import os\nprint(os.environ['CGREG'], open('/opt/reg-marker').read().strip())\n"
                           "print(open('/workspace/proj/where').read().split())")
        assert out["stdout"].splitlines() == ["from-the-registry built-on-registry", "['/home/user/proj', '1000']"], out
    again = build(gw, {"name": "fromreg", "from": {"oci": ref},
                       "steps": [{"type": "RUN", "args": ["pwd > where; id -u >> where"]},
                                 {"type": "RUN", "args": ["echo built-on-registry > /opt/reg-marker", "root"]}]})
    assert again["status"] == "ready" and again["cached_steps"] == 2, again
    assert again["logs"][0].startswith("Pulling ") and again["logs"][1].startswith(" ---> cached"), again["logs"]
    # A registry the operator does not name: 400 before anything is pulled. A missing image: the build says so.
    r = call(gw, TOKEN_A, "POST", "/v1/templates", json={"name": "elsewhere", "from": {"oci": "ghcr.io/org/img:1"}})
    assert r.status_code == 400 and "registry" in r.json()["message"], r.text
    missing = build(gw, {"name": "missing", "from": {"oci": f"{oci_registry.host}/cellgate/nope:1"}})
    assert missing["status"] == "error" and "pulling" in missing["failure"]["message"], missing
    assert call(gw, TOKEN_A, "DELETE", "/v1/templates/fromreg").status_code == 204


def test_a_template_its_files_and_its_pool_come_back_after_a_restart(tmp_path):
    """Stopped and started on the same state: the template (its start command,
    ready check, WORKDIR and start timeout too), the tenant's uploaded files
    and every layer are still there; its warm pool fills again; a session runs
    as before and the same definition builds from the cache."""
    require("templates", runtime_missing("runc"))
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps([{"token": TOKEN_A, "tenant": "restart-" + RUN, "operator": True}]))
    g = Gateway("--tokens-file", str(tokens), "--max-kernels", "4", token=TOKEN_A)
    key = "restart-" + uuid.uuid4().hex
    body = {"name": "lasting:v1", "start_cmd": "echo started > /tmp/started", "ready_cmd": "test -f /tmp/started",
            "kernel": {"pool": 1, "start_timeout_s": 20},
            "steps": [{"type": "WORKDIR", "args": ["/srv/app"]},
                      {"type": "COPY", "args": ["app.py", "./app.py"], "files": key}]}
    try:
        g.start()
        assert call(g, TOKEN_A, "PUT", f"/v1/templates/files/{key}", data=tar_of({"app.py": b"print('app')\n"})).status_code == 201
        assert build(g, body)["status"] == "ready"
        before = call(g, TOKEN_A, "GET", "/v1/templates/lasting:v1").json()
        g.stop()
        g.port_file.unlink()  # the next start reports its own port
        g.start()
        after = call(g, TOKEN_A, "GET", "/v1/templates/lasting:v1")
        assert after.status_code == 200, after.text
        assert after.json()["definition"] == before["definition"] and after.json()["kernelspec"] == before["kernelspec"]
        assert call(g, TOKEN_A, "GET", f"/v1/templates/files/{key}").status_code == 200
        end = time.monotonic() + 90
        while metric(g, "cellgate_pool_ready", before["kernelspec"]) != 1 and time.monotonic() < end:
            time.sleep(0.2)
        assert metric(g, "cellgate_pool_ready", before["kernelspec"]) == 1
        r = call(g, TOKEN_A, "POST", "/v1/sessions", json={"template": "lasting:v1"}, timeout=120)
        assert r.status_code == 201, r.text
        out = run(g, r.json()["id"], "print(open('/tmp/started').read().strip(), open('/srv/app/app.py').read().strip())")
        assert out["stdout"].strip() == "started print('app')", out
        call(g, TOKEN_A, "DELETE", f"/v1/sessions/{r.json()['id']}")
        again = build(g, body)
        assert again["status"] == "ready" and again["built_steps"] == 0 and again["cached_steps"] == 1, again
        assert call(g, TOKEN_A, "DELETE", "/v1/templates/lasting:v1").status_code == 204
    finally:
        g.stop()
        g.cleanup()
