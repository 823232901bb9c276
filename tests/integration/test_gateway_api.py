"""The gateway's REST surface against real sandboxed kernels: models, auth,
errors, kernels, sessions and contents (including escape attempts)."""
import base64
import http.client
import os
import time
import uuid

import pytest
import requests

from support.gateway import Gateway, KernelChannel


@pytest.fixture(scope="module")
def gw():
    g = Gateway().start()
    yield g
    g.stop()
    g.cleanup()


@pytest.fixture(scope="module")
def kernel(gw):
    k = gw.start_kernel()
    yield k
    gw.api("DELETE", f"/api/kernels/{k['id']}")


def raw_get(gw, path, token=True):
    """GET with the path sent exactly as given (requests would normalise '..')."""
    c = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=30)
    c.putrequest("GET", path, skip_accept_encoding=True)
    if token:
        c.putheader("Authorization", f"token {gw.token}")
    c.endheaders()
    r = c.getresponse()
    body = r.read()
    c.close()
    return r.status, body


def assert_error(r, status):
    assert r.status_code == status, (r.status_code, r.text)
    body = r.json()
    assert set(body) == {"reason", "message"}, body
    assert body["message"]
    assert "Traceback" not in r.text and ".cpp" not in r.text


# --- surface and models ------------------------------------------------------------------

def test_api_root_status_me_and_health(gw):
    assert requests.get(gw.url + "/api").json()["version"]
    assert gw.api("GET", "/api/status").json()["kernels"] >= 0
    me = gw.api("GET", "/api/me").json()
    assert "identity" in me and "permissions" in me
    assert requests.get(gw.url + "/healthz").json()["status"] == "ok"


def test_kernelspecs_and_their_resources(gw):
    specs = gw.api("GET", "/api/kernelspecs").json()
    assert specs["default"] == "python3"
    spec = specs["kernelspecs"]["python3"]
    assert spec["spec"]["language"] == "python" and spec["spec"]["display_name"]
    assert gw.api("GET", "/api/kernelspecs/python3").json()["name"] == "python3"
    assert_error(gw.api("GET", "/api/kernelspecs/ruby"), 404)
    logo = gw.api("GET", spec["resources"]["logo-64x64"])
    assert logo.status_code == 200 and logo.content.startswith(b"\x89PNG")


def test_a_bare_cache_buster_query_key_is_tolerated(gw):
    r = gw.api("GET", "/api/kernelspecs?1480636982374")
    assert r.status_code == 200
    assert gw.api("GET", "/api/kernels?1480636982374&x").status_code == 200


def test_kernel_lifecycle_models_and_codes(gw):
    r = gw.api("POST", "/api/kernels", json={"name": "python3"})
    assert r.status_code == 201
    k = r.json()
    assert set(k) >= {"id", "name", "last_activity", "execution_state", "connections"}
    assert r.headers["Location"] == f"/api/kernels/{k['id']}"
    assert k["id"] in [x["id"] for x in gw.api("GET", "/api/kernels").json()]
    assert gw.api("GET", f"/api/kernels/{k['id']}").json()["execution_state"] in ("idle", "busy", "starting")
    assert gw.api("POST", f"/api/kernels/{k['id']}/interrupt", json={}).status_code == 204
    ch = KernelChannel(gw, k["id"])
    ch.execute("x = 42")
    r = gw.api("POST", f"/api/kernels/{k['id']}/restart", json={})
    assert r.status_code == 200 and r.json()["id"] == k["id"]
    ch.close()
    ch = KernelChannel(gw, k["id"])
    assert ch.execute("x")["reply"]["ename"] == "NameError", "restart clears state"
    ch.close()
    assert gw.api("DELETE", f"/api/kernels/{k['id']}").status_code == 204
    assert_error(gw.api("GET", f"/api/kernels/{k['id']}"), 404)
    assert k["id"] not in [x["id"] for x in gw.api("GET", "/api/kernels").json()]


def test_only_kernel_variables_reach_the_sandbox(gw):
    secret = uuid.uuid4().hex
    k = gw.start_kernel(env={"KERNEL_USERNAME": "alice", "PATH": "/evil", "AWS_SECRET_ACCESS_KEY": secret})
    try:
        ch = KernelChannel(gw, k["id"])
        out = ch.execute("import os; print(os.environ.get('KERNEL_USERNAME'), os.environ['PATH'], "
                         f"any('{secret}' in v for v in os.environ.values()))")["stdout"]
        assert out.split() == ["alice", "/usr/local/bin:/usr/bin:/bin", "False"]
        ch.close()
    finally:
        gw.api("DELETE", f"/api/kernels/{k['id']}")


def test_sessions_create_list_patch_delete(gw):
    r = gw.api("POST", "/api/sessions", json={"path": "nb1.ipynb", "name": "nb1", "type": "notebook",
                                               "kernel": {"name": "python3"}})
    assert r.status_code == 201, r.text
    s = r.json()
    assert s["kernel"]["name"] == "python3" and s["path"] == "nb1.ipynb" and s["notebook"]["path"] == "nb1.ipynb"
    again = gw.api("POST", "/api/sessions", json={"path": "nb1.ipynb", "type": "notebook", "kernel": {"name": "python3"}})
    assert again.status_code == 201 and again.json()["id"] == s["id"], "the same path gives the same session"
    assert s["id"] in [x["id"] for x in gw.api("GET", "/api/sessions").json()]
    p = gw.api("PATCH", f"/api/sessions/{s['id']}", json={"path": "renamed.ipynb"})
    assert p.status_code == 200 and p.json()["path"] == "renamed.ipynb"
    assert gw.api("GET", f"/api/sessions/{s['id']}").json()["path"] == "renamed.ipynb"
    assert gw.api("DELETE", f"/api/sessions/{s['id']}").status_code == 204
    assert_error(gw.api("GET", f"/api/sessions/{s['id']}"), 404)
    assert_error(gw.api("GET", f"/api/kernels/{s['kernel']['id']}"), 404), "deleting the session stops its kernel"


def test_a_session_can_bind_an_existing_kernel(gw):
    k = gw.start_kernel()
    r = gw.api("POST", "/api/sessions", json={"path": "bind.ipynb", "type": "notebook", "kernel": {"id": k["id"]}})
    assert r.status_code == 201 and r.json()["kernel"]["id"] == k["id"]
    assert_error(gw.api("POST", "/api/sessions", json={"path": "x.ipynb", "kernel": {"id": str(uuid.uuid4())}}), 404)
    gw.api("DELETE", f"/api/sessions/{r.json()['id']}")
    assert_error(gw.api("GET", f"/api/kernels/{k['id']}"), 404)


def test_metrics_are_prometheus_text(gw, kernel):
    text = gw.api("GET", "/metrics").text
    for name in ("cellgate_kernels{state=", "cellgate_executions_total", "cellgate_sandbox_starts_total",
                 "cellgate_sandbox_start_failures_total", "cellgate_http_request_duration_seconds_bucket",
                 "cellgate_sandbox_start_seconds_bucket"):
        assert name in text, name


# --- bad input ---------------------------------------------------------------------------

def test_no_token_is_401_and_a_wrong_token_is_403(gw):
    assert_error(requests.get(gw.url + "/api/kernels"), 401)
    assert_error(requests.get(gw.url + "/api/kernels", headers={"Authorization": "token nope"}), 403)
    assert_error(requests.get(gw.url + "/api/kernels?token=nope"), 403)
    assert_error(requests.get(gw.url + "/api/kernels", headers={"Authorization": "Basic abc"}), 403)
    assert requests.get(gw.url + "/api/kernels", headers={"Authorization": f"Bearer {gw.token}"}).status_code == 200
    assert requests.get(gw.url + f"/api/kernels?token={gw.token}").status_code == 200


def test_malformed_json_is_400_and_the_server_keeps_serving(gw):
    for body in (b"{not json", b"[1,2,3]", b'"string"', b"\xff\xfe"):
        assert_error(gw.api("POST", "/api/kernels", data=body, headers={"Content-Type": "application/json"}), 400)
    assert_error(gw.api("POST", "/api/kernels", json={"name": 3}), 400)
    assert_error(gw.api("POST", "/api/kernels", json={"name": "python3", "env": ["x"]}), 400)
    assert_error(gw.api("POST", "/api/sessions", json={"kernel": {"name": "python3"}}), 400)
    assert gw.alive()


def test_unknown_kernels_and_routes_are_404(gw):
    missing = str(uuid.uuid4())
    assert_error(gw.api("GET", f"/api/kernels/{missing}"), 404)
    assert_error(gw.api("DELETE", f"/api/kernels/{missing}"), 404)
    assert_error(gw.api("POST", f"/api/kernels/{missing}/interrupt"), 404)
    assert_error(gw.api("POST", f"/api/kernels/{missing}/restart"), 404)
    assert_error(gw.api("GET", f"/api/contents/{missing}/x.txt"), 404)
    assert_error(gw.api("POST", "/api/kernels", json={"name": "no-such-spec"}), 404)
    assert_error(gw.api("GET", "/api/nothing-here"), 404)
    assert_error(gw.api("PUT", "/api/kernels"), 405)


# --- contents ----------------------------------------------------------------------------

def test_contents_root_lists_the_callers_kernels(gw, kernel):
    root = gw.api("GET", "/api/contents").json()
    assert root["type"] == "directory"
    assert kernel["id"] in [e["name"] for e in root["content"]]
    ws = gw.api("GET", f"/api/contents/{kernel['id']}").json()
    assert ws["type"] == "directory" and ws["path"] == kernel["id"]


def test_contents_text_binary_chunked_rename_delete_and_checkpoints(gw, kernel):
    kid = kernel["id"]
    r = gw.api("PUT", f"/api/contents/{kid}/notes.txt", json={"type": "file", "format": "text", "content": "héllo\n"})
    assert r.status_code == 201, r.text
    assert gw.api("PUT", f"/api/contents/{kid}/notes.txt", json={"type": "file", "format": "text", "content": "héllo\n"}).status_code == 200
    blob = bytes(range(256)) * 64
    r = gw.api("PUT", f"/api/contents/{kid}/blob.bin",
               json={"type": "file", "format": "base64", "content": base64.b64encode(blob).decode()})
    assert r.status_code == 201
    got = gw.api("GET", f"/api/contents/{kid}/notes.txt").json()
    assert got["content"] == "héllo\n" and got["format"] == "text" and got["type"] == "file"
    got = gw.api("GET", f"/api/contents/{kid}/blob.bin").json()
    assert got["format"] == "base64" and base64.b64decode(got["content"]) == blob
    assert gw.api("GET", f"/api/contents/{kid}/blob.bin?content=0").json()["content"] is None
    # Chunked upload, as JupyterLab sends large files.
    parts = [b"a" * 1000, b"b" * 1000, b"c" * 10]
    for i, chunk_no in enumerate([1, 2, -1]):
        r = gw.api("PUT", f"/api/contents/{kid}/big.dat", json={"type": "file", "format": "base64", "chunk": chunk_no,
                                                                "content": base64.b64encode(parts[i]).decode()})
        assert r.status_code in (200, 201), r.text
    assert base64.b64decode(gw.api("GET", f"/api/contents/{kid}/big.dat?format=base64").json()["content"]) == b"".join(parts)
    # The kernel sees the files and may change them (they are its own).
    ch = KernelChannel(gw, kid)
    out = ch.execute("print(open('/workspace/notes.txt').read().strip()); open('/workspace/notes.txt','a').write('more\\n')")
    assert out["stdout"].strip() == "héllo" and out["reply"]["status"] == "ok"
    ch.close()
    # Directory listing, rename, checkpoints, delete.
    names = {e["name"] for e in gw.api("GET", f"/api/contents/{kid}").json()["content"]}
    assert {"notes.txt", "blob.bin", "big.dat"} <= names
    r = gw.api("PATCH", f"/api/contents/{kid}/notes.txt", json={"path": f"{kid}/renamed.txt"})
    assert r.status_code == 200 and r.json()["path"] == f"{kid}/renamed.txt"
    cp = gw.api("POST", f"/api/contents/{kid}/renamed.txt/checkpoints")
    assert cp.status_code == 201 and cp.json()["id"]
    gw.api("PUT", f"/api/contents/{kid}/renamed.txt", json={"type": "file", "format": "text", "content": "changed"})
    assert [c["id"] for c in gw.api("GET", f"/api/contents/{kid}/renamed.txt/checkpoints").json()] == [cp.json()["id"]]
    assert gw.api("POST", f"/api/contents/{kid}/renamed.txt/checkpoints/{cp.json()['id']}").status_code == 204
    assert gw.api("GET", f"/api/contents/{kid}/renamed.txt").json()["content"] == "héllo\nmore\n"
    assert gw.api("DELETE", f"/api/contents/{kid}/renamed.txt/checkpoints/{cp.json()['id']}").status_code == 204
    for name in ("renamed.txt", "blob.bin", "big.dat"):
        assert gw.api("DELETE", f"/api/contents/{kid}/{name}").status_code == 204
    assert_error(gw.api("GET", f"/api/contents/{kid}/blob.bin"), 404)


def test_contents_directories_untitled_and_notebooks(gw, kernel):
    kid = kernel["id"]
    r = gw.api("POST", f"/api/contents/{kid}", json={"type": "directory"})
    assert r.status_code == 201 and r.json()["type"] == "directory"
    folder = r.json()["path"]
    r = gw.api("POST", f"/api/contents/{folder}", json={"type": "notebook"})
    assert r.status_code == 201 and r.json()["name"].endswith(".ipynb")
    nb = gw.api("GET", f"/api/contents/{r.json()['path']}").json()
    assert nb["type"] == "notebook" and nb["format"] == "json" and nb["content"]["nbformat"] == 4
    assert_error(gw.api("DELETE", f"/api/contents/{folder}"), 400)  # not empty
    gw.api("DELETE", f"/api/contents/{r.json()['path']}")
    assert gw.api("DELETE", f"/api/contents/{folder}").status_code == 204


def test_files_endpoint_streams_bytes_with_a_sandboxing_policy(gw, kernel):
    kid = kernel["id"]
    ch = KernelChannel(gw, kid)
    ch.execute("open('/workspace/page.html','w').write('<script>alert(1)</script>')")
    ch.close()
    r = gw.api("GET", f"/files/{kid}/page.html")
    assert r.status_code == 200 and r.content == b"<script>alert(1)</script>"
    assert "sandbox" in r.headers["Content-Security-Policy"]
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    r = gw.api("GET", f"/files/{kid}/page.html?download=1")
    assert "attachment" in r.headers["Content-Disposition"]


@pytest.mark.parametrize("path", [
    "/api/contents/{kid}/../../../etc/passwd",
    "/api/contents/{kid}/%2e%2e/%2e%2e/etc/passwd",
    "/api/contents/{kid}/%2E%2E%2Fetc%2Fpasswd",
    "/api/contents/{kid}//etc/passwd",
    "/api/contents/{kid}/sub/./../x",
    "/files/{kid}/../../../../etc/shadow",
    "/files/{kid}/%2e%2e/%2e%2e/%2e%2e/etc/shadow",
    "/api/contents/{kid}/a%00b",
    "/api/contents/%2Fetc/passwd",
])
def test_escaping_paths_are_refused(gw, kernel, path):
    status, body = raw_get(gw, path.format(kid=kernel["id"]))
    assert status in (400, 403, 404), (status, body)
    assert b"root:" not in body


def test_symlinks_the_kernel_plants_never_lead_outside_the_workspace(gw, kernel, tmp_path):
    kid = kernel["id"]
    target = tmp_path / "host-secret.txt"
    target.write_text("host secret")
    os.chmod(tmp_path, 0o755)
    ch = KernelChannel(gw, kid)
    r = ch.execute(f"import os\nos.symlink('/etc/passwd', '/workspace/passwd-link')\n"
                   f"os.symlink('/', '/workspace/rootdir')\nos.symlink({str(target)!r}, '/workspace/host-link')")
    assert r["reply"]["status"] == "ok"
    ch.close()
    for path in ("passwd-link", "rootdir/etc/passwd", "host-link"):
        for prefix in ("/api/contents", "/files"):
            r = gw.api("GET", f"{prefix}/{kid}/{path}")
            assert r.status_code in (403, 404), (prefix, path, r.status_code)
            assert "root:" not in r.text and "host secret" not in r.text
    r = gw.api("PUT", f"/api/contents/{kid}/host-link", json={"type": "file", "format": "text", "content": "pwned"})
    assert r.status_code in (403, 404, 409)
    r = gw.api("PUT", f"/api/contents/{kid}/rootdir/tmp/pwned.txt", json={"type": "file", "format": "text", "content": "x"})
    assert r.status_code in (403, 404)
    assert target.read_text() == "host secret"
    assert not os.path.exists("/tmp/pwned.txt")
    listing = {e["name"]: e for e in gw.api("GET", f"/api/contents/{kid}").json()["content"]}
    assert listing["passwd-link"]["writable"] is False and listing["rootdir"]["type"] == "file"
