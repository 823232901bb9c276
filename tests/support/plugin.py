"""The one pytest harness every suite shares (loaded by tests/conftest.py).

- The prerequisites: under CELLGATE_REQUIRE_SANDBOX=1 (CI) a suite that
  cannot run fails instead of skipping (support.prerequisites.require).
- The runtime matrix only where the runtime is the subject: a test marked
  `@pytest.mark.gateway_logic` proves the gateway's own rules (quotas, bad
  input, state machines), which do not depend on the sandbox, so of a module
  parametrized over runc and runsc it runs under runc alone; the runsc
  parametrization is deselected, and the count is printed. A test marked
  `@pytest.mark.zygote_independent` does not depend on how the kernel was
  made (a fresh start or a zygote's fork: the sandbox is the same), so its
  runc-zygote parametrization is deselected. A test marked
  `@pytest.mark.runsc_proved_by("test_module.py::test_name")` keeps its runc
  parametrization and leaves runsc to the named test, which proves the same
  property under runsc through the gateway; the run fails if that module is
  collected without the named test's runsc parametrization.
- What each suite cost: at the end of the run, per suite (the folder under
  tests/) and per module, the time its tests took and how many sandboxes the
  gateways and launchers it started had started (cellgate_sandbox_starts_total,
  read as each gateway stops), so a slow or sandbox-hungry module is seen.
"""
import time
from collections import defaultdict
from pathlib import Path

import pytest

from support import accounting

TESTS = Path(__file__).resolve().parents[1]


def _suite_and_module(nodeid):
    parts = nodeid.split("::", 1)[0].split("/")
    # nodeids are relative to the rootdir: tests/<suite>/<module>.py
    if parts and parts[0] == "tests":
        parts = parts[1:]
    return (parts[0] if len(parts) > 1 else "."), parts[-1]


def pytest_configure(config):
    config.addinivalue_line("markers", "gateway_logic: proves the gateway's own rules; under runc alone "
                                       "(the runtime matrix is for tests whose subject is the sandbox)")
    config.addinivalue_line("markers", "zygote_independent: does not depend on how the kernel was made; "
                                       "its runc-zygote parametrization is deselected")
    config.addinivalue_line("markers", "runsc_proved_by(nodeid): the named test proves this property under runsc; "
                                       "this test's runsc parametrization is deselected")


def _runtime_of(item):
    spec = getattr(item, "callspec", None)
    if spec is None:
        return None
    for value in spec.params.values():
        if value in ("runsc", "runc-zygote"):
            return value
    return None


def _check_runsc_proofs(items, claims):
    """Each runsc_proved_by names a test whose runsc parametrization exists
    (checked where the named module was collected)."""
    modules = {item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1] for item in items}
    under_runsc = {(item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1], item.originalname)
                   for item in items if _runtime_of(item) == "runsc"}
    for claimant, target in claims:
        module, _, name = target.partition("::")
        if module in modules and (module, name) not in under_runsc:
            raise pytest.UsageError(f"{claimant} leaves runsc to {target}, which has no runsc parametrization")


def pytest_collection_modifyitems(config, items):
    keep, drop, claims = [], [], []
    for item in items:
        runtime = _runtime_of(item)
        gateway_logic = item.get_closest_marker("gateway_logic") and runtime
        zygote_independent = item.get_closest_marker("zygote_independent") and runtime == "runc-zygote"
        proved = item.get_closest_marker("runsc_proved_by")
        if proved and runtime == "runsc":
            claims.append((item.nodeid, proved.args[0]))
        (drop if gateway_logic or zygote_independent or (proved and runtime == "runsc") else keep).append(item)
    _check_runsc_proofs(keep, claims)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
        config._cellgate_deselected = len(drop)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    accounting.current = _suite_and_module(item.nodeid)
    start = time.monotonic()
    yield
    accounting.seconds[accounting.current] += time.monotonic() - start


def pytest_terminal_summary(terminalreporter):
    tr = terminalreporter
    deselected = getattr(tr.config, "_cellgate_deselected", 0)
    if deselected:
        tr.write_line(f"{deselected} runsc/zygote parametrizations deselected (gateway_logic, zygote_independent, "
                      "runsc_proved_by: they run under runc)")
    if not accounting.seconds:
        return
    tr.section("time and sandboxes per suite")
    suites = defaultdict(lambda: [0.0, 0])
    for (suite, module), s in accounting.seconds.items():
        suites[suite][0] += s
    for (suite, module), n in accounting.sandboxes.items():
        suites[suite][1] += n
    for suite, (s, n) in sorted(suites.items()):
        tr.write_line(f"{suite:<14} {s:8.1f} s  {n:5d} sandboxes")
    tr.write_line("slowest modules:")
    ranked = sorted(accounting.seconds.items(), key=lambda kv: -kv[1])[:15]
    for (suite, module), s in ranked:
        tr.write_line(f"  {suite}/{module:<40} {s:7.1f} s  {accounting.sandboxes.get((suite, module), 0):4d} sandboxes")
