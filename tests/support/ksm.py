"""The host's KSM daemon, for the tests and benchmarks of memory merging
(`--memory-merge on`): run it for a while, then put the host's settings back."""
import contextlib
from pathlib import Path

KSM = Path("/sys/kernel/mm/ksm")


def ksm(name):
    return int((KSM / name).read_text().split()[0])


@contextlib.contextmanager
def ksmd_running(pages_to_scan=4000, sleep_ms=20):
    names = ("run", "pages_to_scan", "sleep_millisecs")
    saved = {n: (KSM / n).read_text().strip() for n in names}
    try:
        (KSM / "pages_to_scan").write_text(str(pages_to_scan))
        (KSM / "sleep_millisecs").write_text(str(sleep_ms))
        (KSM / "run").write_text("1")
        yield
    finally:
        if saved["run"] == "0":
            (KSM / "run").write_text("2")  # unmerge what was merged meanwhile
        for n in ("pages_to_scan", "sleep_millisecs", "run"):
            (KSM / n).write_text(saved[n])
