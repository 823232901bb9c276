"""The cellgate CLI (clients/python/bin/cellgate) as a user runs it: a
subprocess against the real gateway."""
import os
import re

from sdk_support import run_cli

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_run_uploads_streams_and_downloads_byte_identical(gateway, tmp_path):
    data = os.urandom(100_000)
    (tmp_path / "data.bin").write_bytes(data)
    (tmp_path / "table.csv").write_text("region,sales\nNorth,3\nSouth,4\n")
    (tmp_path / "script.py").write_text(
        "import hashlib, pandas as pd, matplotlib.pyplot as plt\n"
        "raw = open('data.bin', 'rb').read()\n"
        "print('sha', hashlib.sha256(raw).hexdigest())\n"
        "open('copy.bin', 'wb').write(raw[::-1])\n"
        "df = pd.read_csv('inputs/sales.csv')\n"
        "print('total', df['sales'].sum())\n"
        "df.plot.bar(x='region', y='sales')\n"
        "plt.savefig('chart.png')\n"
        "plt.show()\n"
        "'answer is %d' % df['sales'].sum()\n")
    r = run_cli(gateway, "run", "script.py", "--upload", "data.bin", "--upload", "table.csv:inputs/sales.csv",
                "--download", "copy.bin", "--download", "chart.png:got/chart.png", "--image-dir", "imgs",
                cwd=tmp_path)
    assert r.returncode == 0, (r.stdout, r.stderr)
    import hashlib
    assert f"sha {hashlib.sha256(data).hexdigest()}\ntotal 7\n" in r.stdout
    assert "'answer is 7'" in r.stdout
    assert (tmp_path / "copy.bin").read_bytes() == data[::-1]
    chart = (tmp_path / "got" / "chart.png").read_bytes()
    assert chart.startswith(PNG_MAGIC)
    saved = re.search(r"image/png saved to (\S+)\]", r.stderr)
    assert saved, r.stderr
    assert (tmp_path / saved.group(1)).read_bytes().startswith(PNG_MAGIC)
    assert "chart.png" in r.stderr and "copy.bin" in r.stderr   # the produced files are reported


def test_run_error_prints_traceback_and_exits_1(gateway, tmp_path):
    (tmp_path / "bad.py").write_text("print('partial')\ndef f():\n    raise ValueError('bad value')\nf()\n")
    r = run_cli(gateway, "run", "bad.py", cwd=tmp_path)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert r.stdout == "partial\n"
    assert "ValueError" in r.stderr and "bad value" in r.stderr and "f()" in r.stderr
    assert "\x1b[" not in r.stderr


def test_run_timeout_exits_1(gateway, tmp_path):
    (tmp_path / "slow.py").write_text("import time\nprint('start', flush=True)\ntime.sleep(60)\n")
    r = run_cli(gateway, "run", "slow.py", "--timeout", "2", cwd=tmp_path)
    assert r.returncode == 1 and "start" in r.stdout and "timed out" in r.stderr, (r.stdout, r.stderr)


def test_run_from_stdin_and_missing_download(gateway, tmp_path):
    r = run_cli(gateway, "run", "-", "--download", "nope.txt", cwd=tmp_path, stdin="print(2 + 3)\n")
    assert r.stdout == "5\n"
    assert r.returncode == 1 and "nope.txt" in r.stderr


def test_keep_sessions_exec_rm(gateway, tmp_path):
    (tmp_path / "setup.py").write_text("state = 'kept'\n")
    r = run_cli(gateway, "run", "setup.py", "--keep", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    sid = re.search(r"session kept: (\S+)\]", r.stderr).group(1)

    listed = run_cli(gateway, "sessions")
    assert listed.returncode == 0 and sid in listed.stdout

    ex = run_cli(gateway, "exec", sid, "print(state.upper())\nstate")
    assert ex.returncode == 0, ex.stderr
    assert ex.stdout == "KEPT\n'kept'\n"
    failing = run_cli(gateway, "exec", sid, "1/0")
    assert failing.returncode == 1 and "ZeroDivisionError" in failing.stderr

    rm = run_cli(gateway, "rm", sid)
    assert rm.returncode == 0, rm.stderr
    assert sid not in run_cli(gateway, "sessions").stdout
    gone = run_cli(gateway, "exec", sid, "1")
    assert gone.returncode == 2 and "404" in gone.stderr


def test_config_from_flags_and_bad_token(gateway, tmp_path):
    env_free = dict(os.environ)
    env_free.pop("CELLGATE_URL", None)
    env_free.pop("CELLGATE_TOKEN", None)
    import subprocess
    from sdk_support import CLI
    ok = subprocess.run([str(CLI), "--url", gateway.url, "--token", gateway.token, "sessions", "--json"],
                        env=env_free, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and ok.stdout.strip().startswith("["), ok.stderr
    denied = subprocess.run([str(CLI), "sessions", "--url", gateway.url, "--token", "wrong"],
                            env=env_free, capture_output=True, text=True, timeout=60)
    assert denied.returncode == 2 and "403" in denied.stderr
    unset = subprocess.run([str(CLI), "sessions"], env=env_free, capture_output=True, text=True, timeout=60)
    assert unset.returncode == 2 and "CELLGATE_URL" in unset.stderr
