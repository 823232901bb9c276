"""Named volumes (issue 15): per-token, size-capped file systems that outlive
sessions, mounted at /volumes/<name> by the sessions that name them at
start; one writer at a time, any number of read-only mounts. Real gateway,
real runc and runsc sandboxes, the kernel image."""
import json

import pytest

from support.gateway import runtime_gateway

RUNTIMES = ["runc", "runsc"]


@pytest.fixture(scope="module", params=RUNTIMES)
def gw(request, tmp_path_factory):
    yield from runtime_gateway(request, tmp_path_factory, "volumes", "--max-kernels", "8",
                               config={"max_volumes_per_tenant": 3, "max_volume_bytes_per_tenant": 200 << 20})


def new_session(gw, **body):
    r = gw.api("POST", "/v1/sessions", json={"timeout_s": 120, **body}, timeout=180)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def run(gw, sid, code, ok=True):
    r = gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": code}, timeout=180)
    assert r.status_code == 200, r.text
    out = r.json()
    if ok:
        assert out["status"] == "ok", out
    return out


def make_volume(gw, name, size=32 << 20):
    r = gw.api("POST", "/v1/volumes", json={"name": name, "size_bytes": size}, timeout=120)
    assert r.status_code == 201, r.text
    assert r.headers["Location"] == f"/v1/volumes/{name}"
    return r.json()


def delete_all(gw):
    for s in gw.api("GET", "/v1/sessions").json()["sessions"]:
        gw.api("DELETE", f"/v1/sessions/{s['id']}")
    for v in gw.api("GET", "/v1/volumes").json()["volumes"]:
        gw.api("DELETE", f"/v1/volumes/{v['name']}")


def test_a_volume_written_in_one_session_is_read_in_a_later_one(gw):
    try:
        v = make_volume(gw, "data")
        assert v["size_bytes"] == 32 << 20 and v["mounts"] == [] and v["used_bytes"] < 8 << 20, v
        first = new_session(gw, volumes=[{"name": "data"}])
        m = gw.api("GET", f"/v1/sessions/{first}").json()
        assert m["volumes"] == [{"name": "data", "path": "/volumes/data", "read_only": False}], m
        run(gw, first, "import os; os.makedirs('/volumes/data/sub'); open('/volumes/data/sub/result.csv','w').write('a,b\\n1,2\\n')")
        listed = gw.api("GET", "/v1/volumes/data").json()
        assert listed["mounts"] == [{"session": first, "path": "/volumes/data", "read_only": False}], listed
        # The session ends; its workspace goes, the volume stays.
        assert gw.api("DELETE", f"/v1/sessions/{first}").status_code == 204
        assert gw.api("GET", "/v1/volumes/data").json()["mounts"] == []
        later = new_session(gw, volumes=[{"name": "data", "path": "/volumes/inputs"}])
        out = run(gw, later, "print(open('/volumes/inputs/sub/result.csv').read(), end='')")
        assert out["stdout"] == "a,b\n1,2\n"
        # The later writer owns the files now: it can change what the first one wrote.
        run(gw, later, "open('/volumes/inputs/sub/result.csv','a').write('3,4\\n')")
        # And the volume survives a gateway SIGKILL, mounted in the session that had it.
        gw.kill_and_restart()
        out = run(gw, later, "print(open('/volumes/inputs/sub/result.csv').read(), end='')")
        assert out["stdout"] == "a,b\n1,2\n3,4\n"
        assert [x["name"] for x in gw.api("GET", "/v1/volumes").json()["volumes"]] == ["data"]
    finally:
        delete_all(gw)


def test_one_writer_at_a_time_and_any_number_of_read_only_mounts(gw):
    try:
        make_volume(gw, "shared")
        writer = new_session(gw, volumes=[{"name": "shared"}])
        run(gw, writer, "import os; open('/volumes/shared/model.txt','w').write('v1'); open('/volumes/shared/open.txt','w');"
                        "os.chmod('/volumes/shared/open.txt', 0o666); os.mkdir('/volumes/shared/pub'); os.chmod('/volumes/shared/pub', 0o777)")
        # A second writer is refused with a clear reason, and nothing is started.
        before = {s["id"] for s in gw.api("GET", "/v1/sessions").json()["sessions"]}
        r = gw.api("POST", "/v1/sessions", json={"volumes": [{"name": "shared"}]}, timeout=120)
        assert r.status_code == 409 and "one writer" in r.json()["message"] and writer in r.json()["message"], r.text
        assert {s["id"] for s in gw.api("GET", "/v1/sessions").json()["sessions"]} == before
        # Two readers at once, beside the writer.
        readers = [new_session(gw, volumes=[{"name": "shared", "read_only": True}]) for _ in range(2)]
        for rd in readers:
            assert run(gw, rd, "print(open('/volumes/shared/model.txt').read())")["stdout"].strip() == "v1"
            # Mounted read-only, not just someone else's files: even a file and
            # a dir the writer opened to everyone take no write.
            for code in ("open('/volumes/shared/model.txt','w').write('x')", "open('/volumes/shared/open.txt','w').write('x')",
                         "open('/volumes/shared/pub/new.txt','w')"):
                out = run(gw, rd, code, ok=False)
                assert out["status"] == "error" and out["error"]["ename"] in ("OSError", "PermissionError"), out
        mounts = gw.api("GET", "/v1/volumes/shared").json()["mounts"]
        assert sorted((m["session"], m["read_only"]) for m in mounts) == sorted(
            [(writer, False)] + [(rd, True) for rd in readers]), mounts
        # Deleting a mounted volume is refused; once the writer is gone another may write.
        r = gw.api("DELETE", "/v1/volumes/shared")
        assert r.status_code == 409 and "mounted" in r.json()["message"], r.text
        assert gw.api("DELETE", f"/v1/sessions/{writer}").status_code == 204
        second = new_session(gw, volumes=[{"name": "shared"}])
        run(gw, second, "open('/volumes/shared/model.txt','w').write('v2')")
        assert run(gw, readers[0], "print(open('/volumes/shared/model.txt').read())")["stdout"].strip() == "v2"
    finally:
        delete_all(gw)


@pytest.mark.gateway_logic
def test_a_volume_past_its_size_or_the_tokens_quota_is_a_clear_error(gw):
    try:
        make_volume(gw, "small", 16 << 20)
        s = new_session(gw, volumes=[{"name": "small"}])
        out = run(gw, s, "open('/volumes/small/big.bin','wb').write(b'x' * (64 << 20))", ok=False)
        assert out["status"] == "error" and "No space left on device" in json.dumps(out), out
        # The session goes on, the workspace is not the volume's.
        run(gw, s, "import os; os.remove('/volumes/small/big.bin'); open('/workspace/ok','w').write('1')")
        # The token's quota: 3 volumes and 200 MiB in all.
        r = gw.api("POST", "/v1/volumes", json={"name": "huge", "size_bytes": 190 << 20})
        assert r.status_code == 429 and "quota" in r.json()["message"], r.text
        make_volume(gw, "b", 16 << 20)
        make_volume(gw, "c", 16 << 20)
        r = gw.api("POST", "/v1/volumes", json={"name": "d", "size_bytes": 16 << 20})
        assert r.status_code == 429 and "limit" in r.json()["message"], r.text
        assert sorted(v["name"] for v in gw.api("GET", "/v1/volumes").json()["volumes"]) == ["b", "c", "small"]
    finally:
        delete_all(gw)


@pytest.mark.gateway_logic
def test_volume_requests_refuse_bad_input_clearly(gw):
    try:
        make_volume(gw, "v")
        cases = [
            ("POST", "/v1/volumes", {"name": "v"}, 409, "exists"),
            ("POST", "/v1/volumes", {"name": "../etc"}, 400, "name"),
            ("POST", "/v1/volumes", {"name": "x", "size_bytes": 1024}, 400, "size_bytes"),
            ("POST", "/v1/volumes", {"name": "x", "size_bytes": 1 << 40}, 400, "size_bytes"),
            ("POST", "/v1/volumes", {"name": "x", "owner": "me"}, 400, "owner"),
            ("POST", "/v1/sessions", {"volumes": [{"name": "nope"}]}, 404, "nope"),
            ("POST", "/v1/sessions", {"volumes": [{"name": "v", "path": "/etc"}]}, 400, "path"),
            ("POST", "/v1/sessions", {"volumes": [{"name": "v", "path": "/volumes/../etc"}]}, 400, "path"),
            ("POST", "/v1/sessions", {"volumes": [{"name": "v"}, {"name": "v"}]}, 400, "once"),
            ("POST", "/v1/sessions", {"volumes": [{"name": "v", "read_only": "yes"}]}, 400, "read_only"),
            ("POST", "/v1/sessions", {"volumes": "v"}, 400, "volumes"),
            ("GET", "/v1/volumes/nope", None, 404, "volume"),
            ("DELETE", "/v1/volumes/nope", None, 404, "volume"),
        ]
        for method, path, body, status, word in cases:
            r = gw.api(method, path, json=body) if body is not None else gw.api(method, path)
            assert r.status_code == status and word in r.json()["message"], (method, path, body, r.status_code, r.text)
        # Another token sees none of it.
        assert gw.api("GET", "/v1/volumes/v", headers={"Authorization": "token other"}).status_code in (401, 403, 404)
        assert gw.api("DELETE", "/v1/volumes/v").status_code == 204
        assert gw.api("GET", "/v1/volumes").json()["volumes"] == []
        assert not list((gw.state_dir / "volumes").glob("*.img"))
    finally:
        delete_all(gw)
