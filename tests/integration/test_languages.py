"""The stateful kernels beside Python (issue 37) on the real gateway and real
runc sandboxes of the languages image: R (IRkernel, with ggplot2 drawing a
PNG and data.table and dplyr loaded), JavaScript and TypeScript (Deno's
kernel) and Bash keep their state across cells through /v1; a cell past its
timeout is interrupted and the session goes on; the ledger records each
cell as for Python; the one-shot runs' kernel is not offered.

Needs root, runc, build/bin/cellgate and the languages image; skipped
without them unless CELLGATE_REQUIRE_SANDBOX=1.
"""
import base64

import pytest

from support.gateway import Gateway
from support.prerequisites import IMAGE_STORE, require, runtime_missing

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def gw():
    require("the language kernels", runtime_missing("runc") or (
        None if (IMAGE_STORE / "languages" / "current" / "rootfs").is_dir() else "the languages image is not built"))
    g = Gateway("--max-kernels", "8", "--runtime-pool", "0")
    g.start()
    yield g
    g.stop()


def session(gw, kernel):
    r = gw.api("POST", "/v1/sessions", json={"kernel": kernel})
    assert r.status_code == 201, r.text
    return r.json()["id"]


def run(gw, sid, code, **extra):
    r = gw.api("POST", f"/v1/sessions/{sid}/execute", json={"code": code, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_the_language_kernels_are_offered_and_the_runs_kernel_is_not(gw):
    specs = gw.api("GET", "/api/kernelspecs").json()["kernelspecs"]
    languages = {name: s["spec"]["language"] for name, s in specs.items()}
    assert languages == {"python3": "python", "ir": "R", "javascript": "javascript", "typescript": "typescript",
                         "bash": "bash", "code-interpreter": "python"}, languages
    assert all(s["spec"]["metadata"]["cellgate"]["image"] in ("python", "languages") for s in specs.values())


def test_r_keeps_state_draws_a_ggplot_png_and_is_interrupted_at_its_timeout(gw):
    sid = session(gw, "ir")
    try:
        run(gw, sid, "library(data.table); library(dplyr, warn.conflicts = FALSE); library(ggplot2)\n"
                     "dt <- data.table(x = 1:10, y = (1:10)^2)")
        out = run(gw, sid, "total <- dt %>% summarise(s = sum(y)); cat(total$s, '\\n')")
        assert out["status"] == "ok" and out["stdout"].strip() == "385", out
        plot = run(gw, sid, "ggplot(dt, aes(x, y)) + geom_line()")
        pngs = [r for r in plot["results"] if "image/png" in r.get("data", {})]
        assert pngs and base64.b64decode(pngs[0]["data"]["image/png"]).startswith(PNG), plot
        slow = run(gw, sid, "Sys.sleep(60)", timeout_s=2)
        assert slow["status"] != "ok", slow
        # Interrupted, not restarted: the session's data is still there.
        after = run(gw, sid, "cat(nrow(dt), '\\n')")
        assert after["status"] == "ok" and after["stdout"].strip() == "10", after
        assert run(gw, sid, "cat(21 * 2, '\\n')")["stdout"].strip() == "42"
        ledger = gw.api("GET", f"/v1/sessions/{sid}/executions").json()["executions"]
        assert len(ledger) >= 5 and all("cpu_s" in rec for rec in ledger), ledger[:1]
    finally:
        gw.api("DELETE", f"/v1/sessions/{sid}")


@pytest.mark.parametrize("kernel,first,second,expect", [
    ("javascript", "let a = 20; const add = (x) => x + 22;", "add(a)", "42"),
    ("typescript", "const n: number = 40;\nfunction twice(s: string): string { return s + s; }", "`${n + 2} ${twice('ab')}`",
     '"42 abab"'),
])
def test_deno_kernels_keep_state_across_cells(gw, kernel, first, second, expect):
    sid = session(gw, kernel)
    try:
        assert run(gw, sid, first)["status"] == "ok"
        out = run(gw, sid, second)
        assert out["status"] == "ok", out
        assert [r["data"]["text/plain"] for r in out["results"] if r.get("is_main_result")] == [expect], out
        err = run(gw, sid, "throw new Error('boom')")
        assert err["status"] == "error" and "boom" in str(err["error"]), err
    finally:
        gw.api("DELETE", f"/v1/sessions/{sid}")


def test_bash_keeps_its_variables_and_working_directory(gw):
    sid = session(gw, "bash")
    try:
        assert run(gw, sid, "X=21; mkdir -p sub && cd sub && echo made > f.txt")["status"] == "ok"
        out = run(gw, sid, "echo $((X * 2)) $(pwd) $(cat f.txt)")
        assert out["stdout"].split() == ["42", "/workspace/sub", "made"], out
        # What the cell wrote is in the workspace, where /v1's files see it.
        assert gw.api("GET", f"/v1/sessions/{sid}/files/sub/f.txt").text == "made\n"
    finally:
        gw.api("DELETE", f"/v1/sessions/{sid}")
