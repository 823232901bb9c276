"""Kernel start-up safety (security review M1, L14, task "per-node"): nothing a
session plants in its persistent workspace runs when its kernel (re)starts, and
the launch pool stays fair to other tenants."""
import json
import uuid

import pytest
import requests

from support.gateway import Gateway

# Each planted file, if it ever runs, leaves /workspace/ran-<name>.
MARK = "open('/workspace/ran-{name}', 'w').write('x')\n"
PLANTS = {
    # IPython's default extension, imported as a top-level module first.
    "storemagic.py": "storemagic",
    # Any module on sys.path named like one the kernel imports at start.
    "sitecustomize.py": "sitecustomize",
    "usercustomize.py": "usercustomize",
    "ipykernel_launcher.py": "ipykernel_launcher",
    # IPython's config files are also looked up in the cwd.
    "ipython_config.py": "ipython_config",
    "ipython_kernel_config.py": "ipython_kernel_config",
    # A profile dir in the workspace, in case IPYTHONDIR ever points there.
    ".ipython/profile_default/startup/00-plant.py": "profile_startup",
    ".ipython/profile_default/ipython_config.py": "profile_config",
    # The user site under a HOME in the workspace (.pth lines starting with
    # "import" are executed by site.py).
    ".local/lib/python3.11/site-packages/plant.pth": "user_site_pth",
}


@pytest.fixture(scope="module")
def gw():
    g = Gateway().start()
    yield g
    g.stop()
    g.cleanup()


def api(gw, method, path, **kw):
    return gw.api(method, path, **kw)


def run(gw, sid, code):
    r = api(gw, "POST", f"/v1/sessions/{sid}/execute", json={"code": code})
    assert r.status_code == 200, r.text
    return r.json()


def plant_code():
    lines = ["import os"]
    for path, name in PLANTS.items():
        body = MARK.format(name=name)
        if path.endswith(".pth"):
            body = "import os; " + body.strip().replace("\n", "; ") + "\n"
        lines.append(f"os.makedirs(os.path.dirname('/workspace/{path}') or '/workspace', exist_ok=True)")
        lines.append(f"open('/workspace/{path}', 'w').write({body!r})")
    # A workspace module the user imports on purpose still works.
    lines.append("open('/workspace/cg_helper_mod.py', 'w').write('VALUE = 42\\n')")
    # Tries to point the next start's IPython and Python at the workspace.
    lines.append("os.environ.update(IPYTHONDIR='/workspace/.ipython', PYTHONSTARTUP='/workspace/storemagic.py')")
    return "\n".join(lines)


def test_the_kernel_starts_without_debugpy_yet_a_cell_can_import_it(gw):
    """The kernelspec offers no debugger, so the entry point keeps ipykernel
    from importing debugpy at start (issue 16: a quarter of a cold start's
    imports, 11 MiB per kernel); it is hidden only while ipykernel loads."""
    s = api(gw, "POST", "/v1/sessions").json()
    try:
        probe = run(gw, s["id"], "import sys, ipykernel.debugger as d\n"
                                 "print(sorted(m for m in sys.modules if m.split('.')[0] in "
                                 "('debugpy', 'pydevd', '_pydevd_bundle', '_pydev_bundle')), d._is_debugpy_available)")
        assert probe["status"] == "ok", probe
        assert probe["stdout"].strip() == "[] False"
        again = run(gw, s["id"], "import debugpy, sys\nprint(type(debugpy.__version__).__name__, sys.modules['debugpy'] is debugpy)")
        assert again["status"] == "ok", again
        assert again["stdout"].strip() == "str True"
    finally:
        api(gw, "DELETE", f"/v1/sessions/{s['id']}")


def test_files_planted_in_the_workspace_do_not_run_after_a_restart(gw):
    s = api(gw, "POST", "/v1/sessions").json()
    try:
        r = run(gw, s["id"], plant_code())
        assert r["status"] == "ok", r
        r = api(gw, "POST", f"/v1/sessions/{s['id']}/restart", timeout=90)
        assert r.status_code == 200, r.text
        r = run(gw, s["id"], "import os, sys\n"
                             "print(sorted(f for f in os.listdir('/workspace') if f.startswith('ran-')))\n"
                             "print(os.getcwd())\n"
                             "import cg_helper_mod\nprint(cg_helper_mod.VALUE)\n"
                             "print('' in sys.path, sys.path[-1] == '/workspace')\n"
                             "print('storemagic' in sys.modules)")
        assert r["status"] == "ok", r
        ran, cwd, value, path_info, storemagic = r["stdout"].splitlines()
        assert ran == "[]", f"planted start-up code ran: {ran}"
        assert cwd == "/workspace"
        assert value == "42", "workspace modules must stay importable from cells"
        assert path_info == "False True", "the workspace must be on sys.path only at the end"
        assert storemagic == "False"
    finally:
        api(gw, "DELETE", f"/v1/sessions/{s['id']}")


# --- launch fairness -----------------------------------------------------------------------

HOG = "hog-" + uuid.uuid4().hex
OTHER = "other-" + uuid.uuid4().hex


@pytest.fixture(scope="module")
def fair_gw(tmp_path_factory):
    d = tmp_path_factory.mktemp("fair")
    tokens = d / "tokens.json"
    tokens.write_text(json.dumps([{"token": HOG, "tenant": "hog"}, {"token": OTHER, "tenant": "other"}]))
    # 1% of a CPU: the kernel cannot import ipykernel within the spec's 8 s
    # start timeout, so each start holds a launch thread the whole time, as a
    # start that hangs would (and the other tenant's start, about a second,
    # ends well before any of them).
    config = d / "config.json"
    config.write_text(json.dumps({"kernelspecs": {"python3": {}, "slow": {"limits": {"cpu_millis": 10},
                                                                          "start_timeout_s": 8}}}))
    g = Gateway("--tokens-file", str(tokens), "--config", str(config), "--max-launches-per-tenant", "2").start()
    yield g
    g.stop()
    g.cleanup()


def sandbox_count(g):
    import subprocess
    from support.prerequisites import BUILD, IMAGE_STORE
    out = subprocess.run([str(BUILD / "bin" / "cellgate-launch"), "--state-dir", str(g.state_dir), "--image-store",
                          str(IMAGE_STORE), "--workspace-root", str(g.workspace_root), "ps", "--json"],
                         capture_output=True, text=True)
    try:
        return len(json.loads(out.stdout or "[]"))
    except json.JSONDecodeError:
        return 0


def test_one_tenants_hanging_starts_do_not_hold_other_tenants_creates(fair_gw):
    import threading
    import time
    hog_results = []

    def hog():
        hog_results.append(requests.post(fair_gw.url + "/v1/sessions", json={"kernel": "slow"},
                                          headers={"Authorization": f"Bearer {HOG}"}, timeout=300))

    # As many hanging starts as the gateway has launch threads (4).
    threads = [threading.Thread(target=hog) for _ in range(4)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while sandbox_count(fair_gw) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sandbox_count(fair_gw) >= 2, "the hog's starts never began"
    other = requests.post(fair_gw.url + "/v1/sessions", headers={"Authorization": f"Bearer {OTHER}"}, timeout=300)
    finished_before = len(hog_results)
    try:
        assert other.status_code == 201, other.text
        # The other tenant's start did not wait for a hanging one to give up.
        assert finished_before == 0, [r.status_code for r in hog_results]
        r = requests.post(fair_gw.url + f"/v1/sessions/{other.json()['id']}/execute", json={"code": "print(1+1)"},
                          headers={"Authorization": f"Bearer {OTHER}"}, timeout=120)
        assert r.status_code == 200 and r.json()["stdout"] == "2\n", r.text
    finally:
        for t in threads:
            t.join()
        if other.status_code == 201:
            requests.delete(fair_gw.url + f"/v1/sessions/{other.json()['id']}",
                            headers={"Authorization": f"Bearer {OTHER}"}, timeout=60)
        for r in hog_results:
            if r.status_code == 201:
                requests.delete(fair_gw.url + f"/v1/sessions/{r.json()['id']}",
                                headers={"Authorization": f"Bearer {HOG}"}, timeout=60)
    # The hog's starts failed with a generic message: no host path, no kernel log.
    for r in hog_results:
        if r.status_code != 201:
            assert set(r.json()) >= {"reason", "message"}
            assert "/run/" not in r.json()["message"] and "log tail" not in r.json()["message"]


# --- warm-pool claims (L14) ----------------------------------------------------------------

def test_a_warm_claim_refuses_env_the_launcher_would_refuse(tmp_path):
    import time
    g = Gateway("--pool-size", "1").start()
    try:
        deadline = time.monotonic() + 120
        ready = lambda: 'cellgate_pool_ready{kernelspec="python3"} 1' in g.api("GET", "/metrics").text  # noqa: E731
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert ready(), "the warm pool never filled"
        # A value over the launcher's 4 KiB: claimed, it would be set in the
        # running kernel and refused at the session's next restart.
        r = g.api("POST", "/v1/sessions", json={"env": {"KERNEL_BIG": "x" * 5000}})
        assert r.status_code == 400, r.text
        assert set(r.json()) >= {"reason", "message"} and "KERNEL_BIG" in r.json()["message"]
        assert ready(), "the refused request must not take the warm kernel"
        ok = g.api("POST", "/v1/sessions", json={"env": {"KERNEL_SMALL": "y"}})
        assert ok.status_code == 201, ok.text
        g.api("DELETE", f"/v1/sessions/{ok.json()['id']}")
    finally:
        g.stop()
        g.cleanup()
