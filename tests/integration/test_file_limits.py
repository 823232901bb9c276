"""File-system bounds a hostile kernel must not get around (security review
H4, H5, M2, M3, L11): checkpoints stay inside the capped workspace, listings
are capped with a visible flag, contents models refuse what would amplify,
one tenant's slow file work leaves the io threads to everyone else, and a
dropped upload keeps the previous file.

Each attack prints the gateway's RSS and fd count before, at peak and after
(sampled from /proc every few milliseconds), so the figures can be compared
between runs; none of them is asserted against a threshold."""
import json
import os
import socket
import threading
import time
import uuid
from pathlib import Path

import pytest
import requests

from support.gateway import Gateway

MiB = 1 << 20
WORKSPACE = 64 * MiB
LISTED = 5000  # the gateway's cap per directory model or /v1 listing
TENANT_A = "files-a-" + uuid.uuid4().hex
TENANT_B = "files-b-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    d = tmp_path_factory.mktemp("files")
    tokens = d / "tokens.json"
    tokens.write_text(json.dumps([{"token": TENANT_A, "tenant": "alpha"}, {"token": TENANT_B, "tenant": "beta"}]))
    config = d / "config.json"
    config.write_text(json.dumps({"kernelspecs": {"python3": {"limits": {"workspace_bytes": WORKSPACE}}}}))
    # Two io threads, as on a small host: two blocking requests would hold them all.
    g = Gateway("--tokens-file", str(tokens), "--config", str(config), "--io-threads", "2",
                "--max-kernels", "8").start()
    yield g
    g.stop()
    g.cleanup()


def api(gw, method, path, token=TENANT_A, **kw):
    headers = {"Authorization": f"Bearer {token}"}
    headers.update(kw.pop("headers", {}))
    return requests.request(method, gw.url + path, headers=headers, timeout=kw.pop("timeout", 300), **kw)


@pytest.fixture
def session(gw):
    r = api(gw, "POST", "/v1/sessions", json={"timeout_s": 300})
    assert r.status_code == 201, r.text
    s = r.json()
    yield s
    api(gw, "DELETE", f"/v1/sessions/{s['id']}")


def run(gw, sid, code, token=TENANT_A):
    r = api(gw, "POST", f"/v1/sessions/{sid}/execute", token=token, json={"code": code})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["status"] == "ok", out
    return out


def assert_error(r, status):
    assert r.status_code == status, (r.status_code, r.text[:500])
    body = r.json()
    assert set(body) == {"reason", "message"} and body["message"], body


class Usage:
    """The gateway's RSS (KiB) and open fds: before, peak while running, after."""

    def __init__(self, gw, label):
        self.pid, self.label = gw.proc.pid, label
        self.peak_rss = self.peak_fds = 0
        self._stop = threading.Event()

    def sample(self):
        with open(f"/proc/{self.pid}/status") as f:
            rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
        return rss, len(os.listdir(f"/proc/{self.pid}/fd"))

    def _loop(self):
        while not self._stop.is_set():
            rss, fds = self.sample()
            self.peak_rss, self.peak_fds = max(self.peak_rss, rss), max(self.peak_fds, fds)
            self._stop.wait(0.005)

    def __enter__(self):
        self.before = self.sample()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.after = self.sample()
        print(f"\n[{self.label}] gateway RSS KiB before/peak/after: {self.before[0]}/{self.peak_rss}/{self.after[0]}; "
              f"fds: {self.before[1]}/{self.peak_fds}/{self.after[1]}")


def host_workspace(gw, marker):
    """The host directory of the workspace holding `marker` (tests run as root)."""
    for depth in ("*", "*/*", "*/*/*"):
        for p in Path(gw.workspace_root).glob(depth):
            if (p / marker).exists():
                return p
    raise AssertionError(f"no workspace under {gw.workspace_root} holds {marker}")


def disk_bytes(root):
    """Allocated bytes under `root` outside the workspaces: neither their
    mounts nor their images (<dir>.img, which the workspace cap bounds)."""
    dev, total = os.lstat(root).st_dev, 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if os.lstat(os.path.join(dirpath, d)).st_dev == dev]
        for name in filenames:
            if name.endswith(".img"):
                continue
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_dev == dev:
                total += st.st_blocks * 512
    return total


# Files of holes: their size costs the kernel nothing.
SPARSE = "def sparse(path, size):\n    with open(path, 'wb') as f:\n        f.truncate(size)\n"


# --- H4: checkpoints ----------------------------------------------------------------------

def test_checkpoints_stay_in_the_workspace_under_its_cap(gw, session):
    sid = session["id"]
    run(gw, sid, SPARSE + "sparse('/workspace/small.bin', 4 << 20)\nsparse('/workspace/huge.bin', 100 << 20)")
    host_before = disk_bytes(gw.base_dir)
    with Usage(gw, "checkpoints"):
        for _ in range(8):
            r = api(gw, "POST", f"/api/contents/{sid}/small.bin/checkpoints")
            assert r.status_code == 201, r.text
        # A dense copy of 100 MiB cannot fit in 64 MiB: refused, with nothing left behind.
        assert_error(api(gw, "POST", f"/api/contents/{sid}/huge.bin/checkpoints"), 507)
    grown = disk_bytes(gw.base_dir) - host_before
    print(f"[checkpoints] host disk outside the workspaces grew by {grown} bytes")
    assert grown < 1 * MiB, grown
    seen = run(gw, sid, "import os\nprint(sorted(os.listdir('/workspace/.ipynb_checkpoints')), "
                        "os.path.getsize('/workspace/.ipynb_checkpoints/small-checkpoint.bin'))")["stdout"]
    assert seen.strip() == "['small-checkpoint.bin'] 4194304", seen
    names = [e["name"] for e in api(gw, "GET", f"/api/contents/{sid}").json()["content"]]
    assert ".ipynb_checkpoints" not in names and "small.bin" in names  # hidden, as jupyter_server does
    # The checkpoint follows a rename and goes with a delete.
    assert api(gw, "PATCH", f"/api/contents/{sid}/small.bin", json={"path": f"{sid}/renamed.bin"}).status_code == 200
    assert [c["id"] for c in api(gw, "GET", f"/api/contents/{sid}/renamed.bin/checkpoints").json()] == ["checkpoint"]
    assert api(gw, "DELETE", f"/api/contents/{sid}/renamed.bin").status_code == 204
    assert run(gw, sid, "import os; print(os.listdir('/workspace/.ipynb_checkpoints'))")["stdout"].strip() == "[]"


# --- H5: listings -------------------------------------------------------------------------

LINKS = """
import os
os.makedirs('/workspace/many', exist_ok=True)
n = 0
for i in range(4):
    src = f'/workspace/.src{i}'
    open(src, 'w').close()
    for j in range(50000):
        os.link(src, f'/workspace/many/{i}_{j}')
        n += 1
print(n)
"""


def test_a_directory_of_200k_names_keeps_listings_and_executions_bounded(gw, session):
    sid = session["id"]
    assert run(gw, sid, LINKS)["stdout"].strip() == "200000"
    with Usage(gw, "200k names"):
        r = api(gw, "GET", f"/api/contents/{sid}/many")
        assert r.status_code == 200
        model = r.json()
        assert len(model["content"]) == LISTED and model["truncated"] is True
        assert r.headers["X-Cellgate-Truncated"] == str(LISTED)
        r = api(gw, "GET", f"/v1/sessions/{sid}/files?path=many")
        assert r.status_code == 200
        listing = r.json()
        assert len(listing["entries"]) == LISTED and listing["truncated"] is True
        for _ in range(3):
            out = run(gw, sid, "1+1")
            assert out["truncated"]["files"] is True  # the snapshot stopped at its budget
    small = api(gw, "GET", f"/v1/sessions/{sid}/files").json()
    assert small["truncated"] is False


# --- M2: contents GET amplification -----------------------------------------------------

def test_sparse_files_are_not_amplified_by_contents_models(gw, session):
    sid = session["id"]
    run(gw, sid, SPARSE + "sparse('/workspace/zeros.bin', 12 << 20)\nsparse('/workspace/holes.txt', 60 << 20)\n"
                          "sparse('/workspace/big.ipynb', 40 << 20)")
    with Usage(gw, "sparse GETs"):
        r = api(gw, "GET", f"/api/contents/{sid}/zeros.bin")
        assert r.status_code == 200 and r.json()["format"] == "base64"  # NUL bytes: never six-byte escapes
        assert len(r.content) < 20 * MiB
        assert_error(api(gw, "GET", f"/api/contents/{sid}/zeros.bin?format=text"), 413)
        assert_error(api(gw, "GET", f"/api/contents/{sid}/holes.txt"), 413)
        assert_error(api(gw, "GET", f"/api/contents/{sid}/big.ipynb"), 413)
    # The bytes stay available as they are.
    r = api(gw, "GET", f"/files/{sid}/holes.txt", stream=True)
    assert r.status_code == 200 and int(r.headers["Content-Length"]) == 60 << 20
    r.close()


# --- M3: file work off the io threads ------------------------------------------------

TREES = """
import os
for t in range(2):
    for d in range(200):
        path = f'/workspace/t{t}/d{d}'
        os.makedirs(path)
        src = f'{path}/f0'
        open(src, 'w').close()
        for f in range(1, 1000):
            os.link(src, f'{path}/f{f}')
open('/workspace/marker-trees', 'w').close()
"""


def test_another_tenant_is_answered_while_one_deletes_big_trees(gw, session):
    sid = session["id"]
    run(gw, sid, TREES)
    ws = host_workspace(gw, "marker-trees")
    tops = [ws / "t0", ws / "t1"]
    full = os.stat(tops[0]).st_nlink
    other = api(gw, "POST", "/v1/sessions", token=TENANT_B, json={})
    assert other.status_code == 201, other.text
    other_id = other.json()["id"]
    try:
        results = {}

        def delete(t):
            results[t] = api(gw, "DELETE", f"/v1/sessions/{sid}/files/t{t}").status_code

        with Usage(gw, "two recursive deletes"):
            threads = [threading.Thread(target=delete, args=(t,)) for t in range(2)]
            for t in threads:
                t.start()
            # Both deletes are under way in the gateway (their trees shrink)...
            deadline = time.monotonic() + 120
            while any(os.stat(t).st_nlink == full for t in tops):
                assert time.monotonic() < deadline, "the deletes did not start"
                time.sleep(0.005)
            # ...and the other tenant is answered, both on the io threads and on the file pool,
            status = api(gw, "GET", "/api/status", token=TENANT_B)
            files = api(gw, "GET", f"/v1/sessions/{other_id}/files", token=TENANT_B)
            # before either tree is gone.
            still_there = [t.exists() for t in tops]
            for t in threads:
                t.join()
        assert status.status_code == 200 and files.status_code == 200
        assert still_there == [True, True], "the other tenant waited for a delete to finish"
        assert results == {0: 204, 1: 204}
        assert not any(t.exists() for t in tops)
    finally:
        api(gw, "DELETE", f"/v1/sessions/{other_id}", token=TENANT_B)


# --- L11: uploads ---------------------------------------------------------------------

def test_an_upload_cut_off_mid_body_keeps_the_previous_file(gw, session):
    sid = session["id"]
    assert api(gw, "PUT", f"/v1/sessions/{sid}/files/keep.txt", data=b"precious").status_code == 201
    c = socket.create_connection(("127.0.0.1", gw.port), timeout=60)
    c.sendall((f"PUT /v1/sessions/{sid}/files/keep.txt HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TENANT_A}\r\n"
               f"Content-Length: 1000000\r\nExpect: 100-continue\r\n\r\n").encode())
    assert c.recv(64).startswith(b"HTTP/1.1 100")  # the upload is open: its destination is prepared
    c.sendall(b"y" * 1000)
    assert api(gw, "GET", f"/v1/sessions/{sid}/files/keep.txt").content == b"precious"
    c.close()
    # The gateway drops the partial upload; the old file is what remains.
    deadline = time.monotonic() + 60
    while any(e["name"].startswith(".cellgate-upload-") for e in api(gw, "GET", f"/v1/sessions/{sid}/files").json()["entries"]):
        assert time.monotonic() < deadline, "the partial upload was not removed"
        time.sleep(0.05)
    assert api(gw, "GET", f"/v1/sessions/{sid}/files/keep.txt").content == b"precious"
    r = api(gw, "PUT", f"/v1/sessions/{sid}/files/keep.txt", data=b"replaced")
    assert r.status_code == 200 and api(gw, "GET", f"/v1/sessions/{sid}/files/keep.txt").content == b"replaced"


# --- the contents root ------------------------------------------------------------------

def test_a_folder_cannot_be_made_at_the_contents_root(gw, session):
    for r in (api(gw, "PUT", "/api/contents/New%20Folder", json={"type": "directory"}),
              api(gw, "POST", "/api/contents/", json={"type": "directory"}),
              api(gw, "POST", "/api/contents", json={"type": "directory"})):
        assert_error(r, 403)
        assert "one folder per kernel" in r.json()["message"]
    assert gw.alive()
