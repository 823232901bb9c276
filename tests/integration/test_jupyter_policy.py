"""One policy model for every surface (issue 11, part 3): a cell sent over the
Jupyter kernel WebSocket runs under its session's exec_timeout, output_limit
and result_limit, set per kernelspec and per tenant in the config. A client
hears about a limit the Jupyter way (a stderr stream message under the cell,
the kernel's error reply, or one made up by the gateway when the kernel had
to be restarted); the socket is never dropped."""
import contextlib
import json
import time
import uuid

import pytest
import requests

from support.gateway import Gateway, KernelChannel
from support.prerequisites import gateway_missing, require

KiB = 1 << 10
SPEC_OUTPUT_LIMIT = 256 * KiB
SPEC_RESULT_LIMIT = 512 * KiB
LAB_TOKEN = "lab-token-" + uuid.uuid4().hex


@pytest.fixture(scope="module", autouse=True)
def _prerequisites():
    require("Jupyter policy tests", gateway_missing())


@pytest.fixture(scope="module")
def gw(tmp_path_factory):
    config = tmp_path_factory.mktemp("policy") / "config.json"
    config.write_text(json.dumps({
        # The kernelspec's policy: tight limits for everyone on the Jupyter
        # surface, and an /v1 output limit of its own.
        "kernelspecs": {"python3": {"policy": {
            "jupyter": {"exec_timeout": 3, "output_limit": SPEC_OUTPUT_LIMIT, "result_limit": SPEC_RESULT_LIMIT},
            "agent": {"output_limit": 4096}}}},
        # A tenant whose operator relaxed them (a JupyterLab user who runs long cells).
        "tokens": [{"token": LAB_TOKEN, "tenant": "lab",
                    "policy": {"jupyter": {"exec_timeout": 0, "output_limit": 0}}}],
    }))
    g = Gateway("--config", str(config), "--cell-interrupt-grace", "2").start()
    yield g
    g.stop()
    g.cleanup()


def run(ch, code, timeout=90, until_restart=False, stop_on_error=True):
    """Runs a cell and returns everything the client saw of it: stream text by
    name, the reply, the other messages under it, and (with until_restart)
    whether the kernel announced a restart after the reply. With
    stop_on_error, ipykernel aborts what arrives in the moment after the
    cell's error (a loaded machine can stretch that moment past the next
    request)."""
    msg_id = ch.send("execute_request", {"code": code, "silent": False, "store_history": True,
                                         "user_expressions": {}, "allow_stdin": False, "stop_on_error": stop_on_error})
    seen = {"stdout": "", "stderr": "", "reply": None, "idle": False, "outputs": [], "restarting": False}
    ch.ws.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = ch.recv()
        if "binary" in m:
            continue
        t = m["header"]["msg_type"]
        if t == "status" and m["content"]["execution_state"] == "restarting":
            seen["restarting"] = True
        if m.get("parent_header", {}).get("msg_id") == msg_id:
            if m["channel"] == "shell" and t == "execute_reply":
                seen["reply"] = m["content"]
            elif t == "status":
                seen["idle"] = seen["idle"] or m["content"]["execution_state"] == "idle"
            elif t == "stream":
                seen[m["content"]["name"]] += m["content"]["text"]
            else:
                seen["outputs"].append(m)
        if seen["reply"] is not None and (seen["restarting"] if until_restart else seen["idle"]):
            return seen
    raise AssertionError(f"the cell did not finish within {timeout} s: {seen}")


@contextlib.contextmanager
def kernel_channel(g):
    """A kernel of g's tenant and a WebSocket on it, both gone afterwards."""
    k = g.start_kernel()
    ch = KernelChannel(g, k["id"])
    try:
        yield k, ch
    finally:
        ch.close()
        g.api("DELETE", f"/api/kernels/{k['id']}")


def wait_ready(g, kernel_id, token=None, timeout=90):
    headers = {"Authorization": f"token {token or g.token}"}
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        state = requests.get(f"{g.url}/api/kernels/{kernel_id}", headers=headers, timeout=10).json()
        if state["execution_state"] == "idle":
            return
        time.sleep(0.2)
    raise AssertionError("the kernel did not come back")


def test_the_kernel_model_reports_the_limits_the_config_resolved(gw):
    k = gw.start_kernel()
    limits = gw.api("GET", f"/api/kernels/{k['id']}").json()["cellgate"]["limits"]
    assert limits["exec_timeout"] == 3
    assert limits["output_limit"] == SPEC_OUTPUT_LIMIT
    r = requests.post(f"{gw.url}/api/kernels", json={"name": "python3"},
                      headers={"Authorization": f"token {LAB_TOKEN}"}, timeout=120)
    assert r.status_code == 201, r.text
    lab = r.json()
    assert lab["cellgate"]["limits"]["exec_timeout"] == 0  # none: the tenant's policy
    assert lab["cellgate"]["limits"]["result_limit"] == SPEC_RESULT_LIMIT  # the kernelspec's still applies
    for kid, token in ((k["id"], gw.token), (lab["id"], LAB_TOKEN)):
        requests.delete(f"{gw.url}/api/kernels/{kid}", headers={"Authorization": f"token {token}"}, timeout=60)


def test_an_endless_cell_is_interrupted_at_its_time_limit_and_the_kernel_keeps_its_state(gw):
    with kernel_channel(gw) as (k, ch):
        assert run(ch, "kept = 41")["reply"]["status"] == "ok"
        # stop_on_error=False: the next cell is not aborted by ipykernel after this one's error.
        seen = run(ch, "while True:\n    pass\n", stop_on_error=False)
        assert "time limit of 3 s (exec_timeout); interrupting it" in seen["stderr"], seen
        # The kernel's own answer to the interrupt: the Jupyter way.
        assert seen["reply"]["status"] == "error"
        assert seen["reply"]["ename"] == "KeyboardInterrupt", seen["reply"]
        assert any(o["header"]["msg_type"] == "error" for o in seen["outputs"])
        # Same socket, same kernel, same variables.
        after = run(ch, "print(kept + 1)")
        assert after["reply"]["status"] == "ok" and after["stdout"] == "42\n"
        metrics = requests.get(gw.url + "/metrics", headers=gw.headers, timeout=10).text
        counted = [line for line in metrics.splitlines() if line.startswith("cellgate_cell_time_limits_total ")]
        assert counted and int(counted[0].split()[1]) >= 1, counted


def test_a_cell_that_ignores_the_interrupt_gets_an_error_reply_and_the_kernel_restarts(gw):
    with kernel_channel(gw) as (k, ch):
        assert run(ch, "gone = 1")["reply"]["status"] == "ok"
        seen = run(ch, "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass\n",
                   until_restart=True)
        assert "interrupting it" in seen["stderr"]
        assert "restarting the kernel" in seen["stderr"], seen["stderr"]
        assert seen["reply"]["status"] == "error"
        assert seen["reply"]["ename"] == "TimeoutError", seen["reply"]
        assert isinstance(seen["reply"]["execution_count"], int)
        errors = [o for o in seen["outputs"] if o["header"]["msg_type"] == "error"]
        assert errors and errors[0]["content"]["ename"] == "TimeoutError"
        wait_ready(gw, k["id"])
        # The socket survived the restart; the variables did not.
        after = run(ch, "print('gone' in globals())")
        assert after["reply"]["status"] == "ok" and after["stdout"] == "False\n", after


def test_output_past_the_limit_is_cut_with_a_notice_and_the_next_cell_starts_afresh(gw):
    with kernel_channel(gw) as (k, ch):
        # One 3 MiB print, and the same in 3000 small ones.
        for code in ("print('x' * (3 << 20))", "for i in range(3000):\n    print('y' * 1023)"):
            seen = run(ch, code)
            assert seen["reply"]["status"] == "ok"  # the cell ran to its end
            # What fits, then the notice a /v1 cell's text ends with, on the same stream.
            assert seen["stdout"].endswith(truncated_notice(SPEC_OUTPUT_LIMIT)), seen["stdout"][-200:]
            kept = seen["stdout"][:-len(truncated_notice(SPEC_OUTPUT_LIMIT))]
            assert 0 < len(kept) <= SPEC_OUTPUT_LIMIT, len(kept)
            assert set(kept.strip()) <= {"x", "y", "\n"}
            assert seen["stderr"] == "", seen["stderr"]
        after = run(ch, "print('z' * 1000)")
        assert after["stdout"] == "z" * 1000 + "\n" and after["stderr"] == ""


def truncated_notice(limit):
    return f"\n[cellgate: output truncated after {limit} bytes]\n"


def time_limit_notice(seconds):
    return f"[cellgate: this cell ran past its time limit of {seconds} s (exec_timeout); interrupting it]"


def test_a_websocket_cell_and_a_v1_cell_are_told_the_same(gw):
    """One cell engine's words: past the output limit and past the time limit,
    a /v1 execution gets the notices a WebSocket cell gets (each with its own
    session's limit)."""
    r = gw.api("POST", "/v1/sessions", json={"timeout_s": 2})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    try:
        out = gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "print('v' * 10000)"}, timeout=120).json()
        assert out["stdout"].endswith(truncated_notice(4096)), out["stdout"][-200:]  # the kernelspec's /v1 limit
        assert out["truncated"]["stdout"] is True
        out = gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": "while True:\n    pass\n"}, timeout=120).json()
        assert out["status"] == "timeout" and time_limit_notice(2) in out["stderr"], out
    finally:
        gw.api("DELETE", f"/v1/sessions/{sid}")
    with kernel_channel(gw) as (k, ch):
        seen = run(ch, "while True:\n    pass\n")
        assert time_limit_notice(3) in seen["stderr"], seen["stderr"]


def test_rich_outputs_past_their_limit_are_withheld(gw):
    with kernel_channel(gw) as (k, ch):
        seen = run(ch, "from IPython.display import display\n"
                       "for i in range(40):\n    display({'text/plain': str(i) * 50000}, raw=True)\n")
        shown = [o for o in seen["outputs"] if o["header"]["msg_type"] == "display_data"]
        assert 0 < len(shown) < 40
        assert sum(len(json.dumps(o["content"])) for o in shown) <= SPEC_RESULT_LIMIT
        assert "result_limit" in seen["stderr"]
        assert seen["reply"]["status"] == "ok"


def test_a_tenant_policy_relaxes_the_kernelspecs_limits(gw):
    headers = {"Authorization": f"token {LAB_TOKEN}"}
    r = requests.post(f"{gw.url}/api/kernels", json={"name": "python3"}, headers=headers, timeout=120)
    assert r.status_code == 201, r.text
    kid = r.json()["id"]
    lab = Gateway.__new__(Gateway)  # the same gateway, seen with the lab tenant's token
    lab.token, lab.port = LAB_TOKEN, gw.port
    ch = KernelChannel(lab, kid)
    try:
        seen = run(ch, "import time\ntime.sleep(5)\nprint('x' * (1 << 20))")
        assert seen["reply"]["status"] == "ok", seen["reply"]
        assert len(seen["stdout"]) == (1 << 20) + 1
        assert seen["stderr"] == ""
    finally:
        ch.close()
        requests.delete(f"{gw.url}/api/kernels/{kid}", headers=headers, timeout=60)


def test_the_same_policy_reaches_the_agent_surface(gw):
    r = gw.api("POST", "/v1/sessions", json={})
    assert r.status_code == 201, r.text
    s = r.json()
    try:
        assert s["limits"]["output_limit_bytes"] == 4096  # the kernelspec's agent value
        assert s["limits"]["timeout_s"] == 300            # the /v1 default: the spec set none for it
        out = gw.api("POST", f"/v1/sessions/{s['id']}/execute", json={"code": "print('a' * 10000)"}).json()
        assert out["truncated"]["stdout"] is True and len(out["stdout"]) < 4096 + 200, json.dumps(out)[:3000]
    finally:
        gw.api("DELETE", f"/v1/sessions/{s['id']}")


def test_a_kernel_that_prints_by_itself_is_still_culled_when_idle(gw):
    """Review L13: only what a client does counts as activity. A thread that
    prints for ever after its cell ended must not keep the session alive past
    its idle timeout."""
    r = gw.api("POST", "/v1/sessions", json={"idle_timeout_s": 3})
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    code = ("import threading, time\n"
            "def chatter():\n"
            "    while True:\n"
            "        print('still here', flush=True)\n"
            "        time.sleep(0.2)\n"
            "threading.Thread(target=chatter, daemon=True).start()\n")
    assert gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": code}).json()["status"] == "ok"
    end = time.monotonic() + 60
    while time.monotonic() < end:
        if gw.api("GET", f"/v1/sessions/{sid}").status_code == 404:
            break
        time.sleep(0.5)
    else:
        gw.api("DELETE", f"/v1/sessions/{sid}")
        raise AssertionError("a session whose kernel keeps printing was never culled")
    assert "session culled: idle for 3 s" in gw.log_text()
