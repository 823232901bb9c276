"""Memory merging (issue 16, Part 1: density): with --memory-merge on, runc
kernels opt into KSM, start with a fixed address layout and string hash seed,
and ksmd really shares the pages their imports fill; without it, none of that.
The KSM test turns the host's ksmd on for its own run and puts the host's
settings back."""
import json
import time

import pytest

from support.gateway import Gateway
from support.ksm import KSM, ksmd_running

ADDR_NO_RANDOMIZE = 0x0040000

LOOK = """
import ctypes, json, os
stat = dict(l.replace(':', ' ').split(None, 1) for l in open('/proc/self/ksm_stat').read().splitlines())
print('@@' + json.dumps({
    'personality': int(open('/proc/self/personality').read(), 16),
    'merge_any': stat.get('ksm_merge_any', '').strip(),
    'merging_pages': int(stat.get('ksm_merging_pages', '0')),
    'hashseed': os.environ.get('PYTHONHASHSEED'),
    'hash': hash('cellgate'),
    'libc': ctypes.cast(ctypes.CDLL(None).printf, ctypes.c_void_p).value,  # where libc was mapped
    'env_leaks': 'CELLGATE_MEMORY_MERGE' in os.environ,
}))
"""


def look(g, sid):
    r = g.api("POST", f"/v1/sessions/{sid}/execute", json={"code": LOOK, "timeout_s": 60})
    assert r.status_code == 200, r.text
    out = r.json()
    lines = [l for l in out["stdout"].splitlines() if l.startswith("@@")]
    assert out["status"] == "ok" and lines, out
    return json.loads(lines[-1][2:])


def sessions(g, n):
    ids = []
    for _ in range(n):
        r = g.api("POST", "/v1/sessions", json={"timeout_s": 120})
        assert r.status_code in (200, 201), r.text
        ids.append(r.json()["id"])
    return ids


@pytest.fixture(scope="module")
def merging():
    if not (KSM / "run").exists():
        pytest.fail("this kernel has no KSM (/sys/kernel/mm/ksm)")
    g = Gateway("--memory-merge", "on").start()
    yield g
    g.stop()
    g.cleanup()


@pytest.fixture(scope="module")
def plain():
    g = Gateway().start()
    yield g
    g.stop()
    g.cleanup()


def merge_reported(g, sid):
    """What the session model and /metrics say of merging."""
    model = g.api("GET", f"/v1/sessions/{sid}").json()["sandbox"]
    counted = [l for l in g.api("GET", "/metrics").text.splitlines() if l.startswith("cellgate_sandboxes_memory_merge ")]
    assert len(counted) == 1, counted
    return model["memory_merge"], float(counted[0].split()[1])


def test_merging_kernels_start_with_a_fixed_layout_and_opt_into_ksm(merging):
    ids = sessions(merging, 2)
    a, b = (look(merging, sid) for sid in ids)
    said, counted = merge_reported(merging, ids[0])
    assert said is True and counted >= 2
    for k in (a, b):
        assert k["personality"] & ADDR_NO_RANDOMIZE, k
        assert k["merge_any"] == "yes", k
        assert k["hashseed"] == "0", k
        assert not k["env_leaks"], k
    # the same layout and the same string hashes in both sandboxes
    assert a["libc"] == b["libc"] and a["hash"] == b["hash"], (a, b)


def test_without_it_kernels_keep_a_random_layout_and_do_not_merge(plain):
    ids = sessions(plain, 2)
    a, b = (look(plain, sid) for sid in ids)
    assert merge_reported(plain, ids[0]) == (False, 0.0)
    for k in (a, b):
        assert not k["personality"] & ADDR_NO_RANDOMIZE, k
        assert k["merge_any"] == "no", k
        assert k["hashseed"] is None, k
    assert a["libc"] != b["libc"] and a["hash"] != b["hash"], (a, b)  # ASLR, random hash seeds


def test_ksmd_shares_what_the_merging_kernels_imported(merging):
    ids = sessions(merging, 3)
    for sid in ids:
        r = merging.api("POST", f"/v1/sessions/{sid}/execute",
                        json={"code": "import numpy, pandas, matplotlib.pyplot", "timeout_s": 120})
        assert r.status_code == 200 and r.json()["status"] == "ok", r.text
    want = (32 << 20) // 4096  # pages of each kernel's ~95 MiB that ksmd shares (probe: ~70 MiB)
    seen = {}
    with ksmd_running():
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline:
            seen = {sid: look(merging, sid)["merging_pages"] for sid in ids}
            if min(seen.values()) >= want:
                break
            time.sleep(3)
    assert min(seen.values()) >= want, (want, seen)
