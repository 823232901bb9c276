"""Templates (issue 36) through the unmodified E2B JS SDK (npm `e2b` and
`@e2b/code-interpreter`, pinned in package-lock.json, installed with
`npm ci`, never patched) against the REAL cellgate: built binary, runc build
sandboxes, the kernel image, and a package index this test serves on
loopback, reached only through the egress proxy and the operator's build
allow-list. e2b_templates.test.mjs drives the SDK; the tests here check
the wire: statuses and bodies, another tenant's view.

Needs root, runc, build/bin/cellgate, the kernel image, Node.js ≥ 20 and
npm; without them the tests are skipped, unless CELLGATE_REQUIRE_SANDBOX=1
(CI).
"""
import uuid

import pytest
import requests

from e2b_support import e2b_env, run_node_suite, tokens_gateway
from support.oci_registry import oci_registry  # noqa: F401 (a fixture)
from support.package_index import NPM_PACKAGE, package_index  # noqa: F401 (a fixture)
from support.prerequisites import IMAGE_STORE

KEY = "e2b-tpl-" + uuid.uuid4().hex
OTHER = "e2b-tpl-other-" + uuid.uuid4().hex
RUN = uuid.uuid4().hex[:8]  # tenants of this run's own: no earlier run's layer is found


@pytest.fixture(scope="module")
def gateway(tmp_path_factory, package_index, oci_registry):
    yield from tokens_gateway(tmp_path_factory, "templates",
                              [{"token": KEY, "tenant": "e2b-tpl-" + RUN},
                               {"token": OTHER, "tenant": "e2b-tpl-other-" + RUN}],
                              "--max-kernels", "8",
                              "--egress-resolve", f"pypi.test=127.0.0.1:{package_index.port}",
                              "--egress-resolve", f"apt.test=127.0.0.1:{package_index.port}",
                              "--egress-resolve", f"npm.test=127.0.0.1:{package_index.port}",
                              "--template-npm-registry", "http://npm.test/npm/",
                              "--egress-pip-index-url", "http://pypi.test/simple/",
                              "--template-build-allow", "pypi.test,apt.test,npm.test",
                              "--template-apt-sources", "deb [trusted=yes] http://apt.test/apt/ ./",
                              "--template-registries", f"http://{oci_registry.host}")


def _api(gw, method, path, key=KEY, **kw):
    return requests.request(method, f"{gw.url}/e2b{path}", headers={"X-API-KEY": key}, timeout=120, **kw)


def test_unmodified_e2b_sdk_builds_and_starts_a_template(gateway, node_modules, package_index, oci_registry):
    env = e2b_env(gateway, KEY)
    # fromImage of an image in the operator's registry (one on loopback, pushed here).
    env["CG_REGISTRY_IMAGE"] = oci_registry.push_rootfs(IMAGE_STORE / "debian" / "current" / "rootfs", "e2b/deb:1",
                                                        env=["CGREG=pulled"])
    run_node_suite(gateway, "e2b_templates.test.mjs", env)
    assert any(p.startswith("/files/cgdemo") for p in package_index.fetched)
    assert f"/apt/{package_index.deb_name}" in package_index.fetched
    assert f"/npm/{NPM_PACKAGE}/-/{package_index.npm_name}" in package_index.fetched
    # Nothing is left: the suite deleted what it built.
    assert _api(gateway, "GET", "/templates").json() == []


def test_the_template_wire(gateway):
    r = _api(gateway, "POST", "/v3/templates", json={"name": "wire:v2", "cpuCount": 1, "memoryMB": 1024})
    assert r.status_code == 202, r.text
    req = r.json()
    assert req["templateID"] == "wire" and req["tags"] == ["v2"] and req["names"] == ["wire:v2"], req
    build = req["buildID"]
    # Before its steps: waiting. Another tenant sees no such build.
    st = _api(gateway, "GET", f"/templates/wire/builds/{build}/status").json()
    assert st["status"] == "waiting" and st["logEntries"] == [], st
    assert _api(gateway, "GET", f"/templates/wire/builds/{build}/status", key=OTHER).status_code == 404
    assert _api(gateway, "POST", f"/v2/templates/wire/builds/{build}", key=OTHER,
                json={"steps": []}).status_code == 404
    # Bad steps: 400 saying what.
    r = _api(gateway, "POST", f"/v2/templates/wire/builds/{build}",
             json={"fromImage": "python:3", "steps": [{"type": "FROB", "args": []}]})
    assert r.status_code == 400 and "FROB" in r.json()["message"], r.text
    r = _api(gateway, "POST", f"/v2/templates/wire/builds/{build}",
             json={"fromImage": "python:3", "steps": [{"type": "RUN", "args": ["echo wired > /opt/wired"]}]})
    assert r.status_code == 202, r.text
    assert _api(gateway, "POST", f"/v2/templates/wire/builds/{build}",
                json={"steps": []}).status_code == 409
    for _ in range(600):
        st = _api(gateway, "GET", f"/templates/wire/builds/{build}/status").json()
        if st["status"] in ("ready", "error"):
            break
    assert st["status"] == "ready", st
    # The list and one template, in E2B's shapes; another tenant sees none.
    listed = _api(gateway, "GET", "/templates").json()
    assert [t["templateID"] for t in listed] == ["wire"] and listed[0]["names"] == ["wire:v2"], listed
    assert listed[0]["memoryMB"] == 1024 and listed[0]["cpuCount"] == 1
    assert _api(gateway, "GET", "/templates", key=OTHER).json() == []
    assert _api(gateway, "GET", "/templates/aliases/wire").status_code == 200
    assert _api(gateway, "GET", "/templates/aliases/wire", key=OTHER).status_code == 404
    r = _api(gateway, "POST", "/sandboxes", key=OTHER, json={"templateID": "wire:v2"})
    assert r.status_code == 404, r.text
    r = _api(gateway, "POST", "/sandboxes", json={"templateID": "wire:v2", "timeout": 120})
    assert r.status_code == 201, r.text
    assert _api(gateway, "DELETE", f"/sandboxes/{r.json()['sandboxID']}").status_code == 204
    assert _api(gateway, "DELETE", "/templates/wire", key=OTHER).status_code == 404
    assert _api(gateway, "DELETE", "/templates/wire").status_code == 204
    assert _api(gateway, "GET", "/templates").json() == []


def test_the_files_wire_signs_each_upload_for_its_tenant(gateway):
    h = uuid.uuid4().hex + uuid.uuid4().hex
    r = _api(gateway, "GET", f"/templates/wire/files/{h}")
    assert r.status_code == 201 and r.json()["present"] is False, r.text  # E2B's API answers 201
    url = r.json()["url"]
    assert url.startswith(gateway.url + "/e2b/templates/wire/files/" + h + "?"), url
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("hello.txt")
        info.size = 6
        tar.addfile(info, io.BytesIO(b"hello\n"))
    body = buf.getvalue()
    # Not signed, signed for another hash or tenant, or expired: 403, nothing kept.
    bare = url.split("?")[0]
    assert requests.put(bare, data=body, timeout=30).status_code in (401, 403)
    other_hash = url.replace(h, h[:-1] + ("0" if h[-1] != "0" else "1"))
    assert requests.put(other_hash, data=body, timeout=30).status_code == 403
    other_tenant = url.replace("tenant=e2b-tpl-", "tenant=e2b-tpl-other-")
    assert requests.put(other_tenant, data=body, timeout=30).status_code == 403
    expired = url.split("&expires=")[0] + "&expires=1000&signature=" + url.split("&signature=")[1]
    assert requests.put(expired, data=body, timeout=30).status_code == 403
    assert _api(gateway, "GET", f"/templates/wire/files/{h}").json()["present"] is False
    # The URL as given (no key with it, as to a bucket): kept, for this tenant only.
    assert requests.put(url, data=body, timeout=30).status_code == 200
    again = _api(gateway, "GET", f"/templates/wire/files/{h}")
    assert again.status_code == 201 and again.json() == {"present": True}
    assert _api(gateway, "GET", f"/templates/wire/files/{h}", key=OTHER).json()["present"] is False
    assert _api(gateway, "GET", "/templates/wire/files/not-a-hash!").status_code in (400, 404)
