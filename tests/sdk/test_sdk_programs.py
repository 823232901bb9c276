"""One-shot programs in other languages (issue 37) through the Python SDK
(`run_once(..., language=...)`) and the CLI (`cellgate run --language`),
against the real gateway and the languages image's runtimes.

When CELLGATE_REQUIRE_SANDBOX=1 (CI sets it), a missing prerequisite fails
the run instead of skipping it.
"""
import pytest

from sdk_support import run_cli
from support.prerequisites import IMAGE_STORE, require

C_PROGRAM = '#include <stdio.h>\nint main(int c, char **v) { char s[64]; scanf("%63s", s); ' \
            'printf("%s %s\\n", s, c > 1 ? v[1] : "-"); return c > 2 ? 7 : 0; }\n'


@pytest.fixture(autouse=True)
def languages_image():
    require("the one-shot runtimes", None if (IMAGE_STORE / "languages" / "current" / "rootfs").is_dir()
            else "the languages image is not built")


def test_run_once_with_a_language_compiles_and_runs_a_program(connection):
    from cellgate import ProgramRun, run_once

    res = run_once(C_PROGRAM, language="c", stdin="hi\n", args=["there"], **connection)
    assert isinstance(res, ProgramRun)
    assert res.status == "ok" and res.exit_code == 0 and res.stdout == "hi there\n", res.raw
    assert res.compile["exit_code"] == 0 and res.language == "c"
    assert res.usage["code_bytes"] == len(C_PROGRAM.encode()) and res.usage["wall_s"] > 0, res.usage
    failed = run_once(C_PROGRAM, language="c", stdin="x\n", args=["a", "b"], **connection)
    assert failed.status == "error" and failed.exit_code == 7 and failed.run["status"] == "RE", failed.raw
    broken = run_once("int main( {", language="c", **connection)
    assert broken.status == "compile_error" and broken.run is None and broken.compile["exit_code"] != 0, broken.raw
    r = run_once("cat(sum(1:10))", language="r", **connection)
    assert r.stdout == "55" and r.language == "rscript", r.raw
    # Python with stdin is a program too; without, it stays a cell (rich results).
    py = run_once("print(input()[::-1])", language="python", stdin="abc\n", **connection)
    assert py.stdout == "cba\n", py.raw


def test_an_unknown_language_is_a_clear_400(connection):
    from cellgate import CellgateError, run_once

    with pytest.raises(CellgateError) as e:
        run_once("x", language="cobol", **connection)
    assert e.value.status == 400 and "/api/v2/runtimes" in e.value.message


def test_cli_runs_a_program_with_its_language_stdin_and_args(gateway, tmp_path):
    prog = tmp_path / "main.c"
    prog.write_text(C_PROGRAM)
    stdin = tmp_path / "in.txt"
    stdin.write_text("moin\n")
    r = run_cli(gateway, "run", "--language", "c", "--stdin", str(stdin), "--arg", "world", str(prog))
    assert r.returncode == 0 and r.stdout == "moin world\n", (r.stdout, r.stderr)
    assert "c " in r.stderr and ": ok, exit 0" in r.stderr, r.stderr
    r = run_cli(gateway, "run", "--language", "c", "--stdin", str(stdin), "--arg", "a", "--arg", "b", str(prog))
    assert r.returncode == 7, (r.stdout, r.stderr)
