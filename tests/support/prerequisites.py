"""Where the built parts are, and whether a suite can run here: a missing
prerequisite skips a test, or fails it under CELLGATE_REQUIRE_SANDBOX=1
(test.sh and CI set it), so no suite skips silently in CI."""
import fcntl
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("CELLGATE_BUILD_DIR", REPO / "build"))
GATEWAY = BUILD / "bin" / "cellgate"
LAUNCH = BUILD / "bin" / "cellgate-launch"
RELAY = BUILD / "bin" / "cellgate-relay"  # the host half of gVisor's relay
IMAGE_STORE = Path(os.environ.get("CELLGATE_IMAGE_STORE", "/var/cache/cellgate/images"))
LOGS = Path(os.environ.get("CELLGATE_TEST_LOGS", "/tmp/cellgate-test-logs"))


def required():
    return os.environ.get("CELLGATE_REQUIRE_SANDBOX") == "1"


def require(suite, why):
    """Skips when `why` is set, or fails under CELLGATE_REQUIRE_SANDBOX=1 (CI)."""
    if why is None:
        return
    if required():
        pytest.fail(f"{suite} required but cannot run: {why}", pytrace=False)
    pytest.skip(why)


def sandbox_missing(binary=GATEWAY):
    """Why real sandboxes cannot be started here through `binary` (None if they can)."""
    if os.geteuid() != 0:
        return "needs root (runc, cgroups, loop mounts)"
    if shutil.which("runc") is None:
        return "runc is not installed"
    if not binary.exists():
        return f"{binary} is not built"
    if not (IMAGE_STORE / "python" / "current" / "rootfs").is_dir():
        return "the kernel image is not built (images/build.sh)"
    return None


def gateway_missing():
    """Why a real gateway with runc sandboxes cannot run here (None if it can)."""
    return sandbox_missing(GATEWAY)


def launcher_missing():
    """Why cellgate-launch cannot start sandboxes here (None if it can)."""
    return sandbox_missing(LAUNCH)


def tools_missing(*tools):
    for tool in tools:
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


def node_missing(*tools):
    """Why Node.js ≥ 20 (and the other named tools) cannot run here."""
    why = tools_missing("node", *tools)
    if why:
        return why
    version = subprocess.run(["node", "--version"], capture_output=True, text=True).stdout.strip()
    try:
        if int(version.lstrip("v").split(".")[0]) < 20:
            return f"Node.js ≥ 20 is needed (found {version})"
    except ValueError:
        return f"cannot tell the Node.js version ({version!r})"
    return None


def node_test(*args):
    """`node --test --test-reporter=spec ARGS`, and --test-force-exit where
    Node has it (20.14 on): a suite's process ends when its tests do, not
    when a client library's forgotten timer fires (the E2B SDK leaves a
    60 s request timer behind every refused call)."""
    global _force_exit
    if _force_exit is None:
        _force_exit = subprocess.run(["node", "--test-force-exit", "-e", ""], capture_output=True).returncode == 0
    return ["node", "--test", "--test-reporter=spec", *(["--test-force-exit"] if _force_exit else []), *args]


_force_exit = None


def npm_ci(here, package, env=None):
    """Installs the packages locked in `here` (npm ci, no install scripts)
    unless its node_modules already matches the lock and holds `package`."""
    import hashlib
    stamp = here / "node_modules" / ".cellgate-lock-sha256"
    digest = hashlib.sha256((here / "package-lock.json").read_bytes() + (here / "package.json").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text().strip() == digest and (here / "node_modules" / package).is_dir():
        return
    r = subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=here,
                       env={**os.environ, "npm_config_update_notifier": "false", **(env or {})},
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"npm ci failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    stamp.write_text(digest + "\n")


def runtime_missing(runtime):
    """Why sandboxes of `runtime` (runc, runsc) cannot run here."""
    why = gateway_missing()
    if why is None and runtime == "runsc":
        why = runsc_refusal()
    return why


def runsc_refusal():
    """Why runsc cannot be used here, or None: not installed, or installed
    but refused by the launcher's own check."""
    if shutil.which("runsc") is None:
        return "gVisor's runsc is not installed (apt-get install runsc)"
    if not RELAY.exists():
        return f"{RELAY} is not built"
    LOGS.mkdir(parents=True, exist_ok=True)
    spec = LOGS / f"runsc-spec-{uuid.uuid4().hex[:8]}.json"
    spec.write_text(json.dumps({"runtime": "runsc"}))
    try:
        r = subprocess.run([str(LAUNCH), "validate", str(spec)], capture_output=True, text=True, timeout=30)
    finally:
        spec.unlink()
    if r.returncode != 0:
        return f"runsc is installed but cellgate-launch refuses it: {r.stderr.strip() or r.stdout.strip()}"
    return None


KVM_GET_API_VERSION, KVM_CREATE_VM = 0xAE00, 0xAE01


def kvm_usable():
    """Whether /dev/kvm makes virtual machines (what the launcher asks first)."""
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if fcntl.ioctl(fd, KVM_GET_API_VERSION, 0) != 12:
            return False
        os.close(fcntl.ioctl(fd, KVM_CREATE_VM, 0))
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
