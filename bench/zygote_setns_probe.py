#!/usr/bin/python3
"""Can a kernel forked from a zygote be put into a runc sandbox made for it?
(issue 16, memory density: input for the design, not a feature.)

    /usr/bin/python3 bench/zygote_setns_probe.py

A runc container from the kernel image (read-only rootfs, its own user
namespace mapping 0-65535 to host ids 800000000+, pid, mount, network, IPC
and UTS namespaces) runs `sleep`. This script, as the "zygote", imports
numpy, pandas and matplotlib, calls gc.freeze(), and forks. The parent puts
the child in the container's cgroups. The child joins the container's
namespaces (user first: its namespaces belong to that user namespace), then
forks once more so that the grandchild is inside the pid namespace. The
grandchild drops to uid/gid 1000 of the container and reports what it sees:
its namespaces against the container init's, its pid, /etc/os-release and
/ read-only from the image, no network but loopback, numpy still working,
and its own PSS and private dirty memory. Seccomp, capabilities and
no_new_privs (which cellgate's launcher applies) are not applied here.

2026-12-05 on this machine (runc 1.1.5, Linux 6.18): it works. The grandchild
is in all six of the container's namespaces (pid 6 inside, uid 1000), sees
the image read-only and only `lo`, runs numpy, sits in the container's
cgroups, and owns 1.5 MiB of private dirty memory (PSS 23.1 MiB, shared with
the zygote; the zygote alone: 83.9 MiB PSS).

Its own runc root, bundle and container in a temporary directory; it stops
and removes them before exiting. Run as root.
"""
import ctypes
import gc
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

ROOTFS = Path("/var/cache/cellgate/images/python/current").resolve() / "rootfs"
HOST_BASE = 800000000
CLONE_NEWUSER = 0x10000000
libc = ctypes.CDLL(None, use_errno=True)


def setns(path):
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, 0) != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"setns {path}: {os.strerror(e)}")
    finally:
        os.close(fd)


def mem(pid="self"):
    out = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        k, *v = line.split()
        if k in ("Pss:", "Private_Dirty:"):
            out[k.rstrip(":")] = round(int(v[0]) / 1024, 1)
    return out


def main():
    work = Path(tempfile.mkdtemp(prefix="cellgate-zygote-"))
    root = work / "runc"
    bundle = work / "bundle"
    bundle.mkdir()
    subprocess.run(["runc", "spec"], cwd=bundle, check=True, capture_output=True)
    spec = json.loads((bundle / "config.json").read_text())
    spec["root"] = {"path": str(ROOTFS), "readonly": True}
    spec["process"].update(terminal=False, args=["/bin/sleep", "120"])
    spec["linux"]["namespaces"].append({"type": "user"})
    spec["linux"]["uidMappings"] = [{"containerID": 0, "hostID": HOST_BASE, "size": 65536}]
    spec["linux"]["gidMappings"] = [{"containerID": 0, "hostID": HOST_BASE, "size": 65536}]
    spec["linux"]["cgroupsPath"] = "cellgate-zygote-probe/c1"
    # The mounts runc's default spec makes need ids that exist in the mapping.
    for m in spec["mounts"]:
        m["options"] = [o for o in m.get("options", []) if not o.startswith("gid=")]
    (bundle / "config.json").write_text(json.dumps(spec))
    name = "zygote-probe"
    runc = ["runc", "--root", str(root)]
    report = {}
    try:
        # The detached container keeps runc's stdio: a file, not a pipe we would wait on.
        with open(work / "runc.log", "wb") as log:
            r = subprocess.run(runc + ["run", "--detach", "--bundle", str(bundle), name], stdout=log, stderr=log,
                               stdin=subprocess.DEVNULL, timeout=60)
        if r.returncode != 0:
            raise SystemExit(f"runc run failed: {(work / 'runc.log').read_text()[-800:]}")
        init = json.loads(subprocess.run(runc + ["state", name], capture_output=True, text=True, check=True).stdout)["pid"]
        ns_init = {n: os.readlink(f"/proc/{init}/ns/{n}") for n in ("user", "mnt", "pid", "net", "ipc", "uts")}

        import numpy  # noqa: F401  (the zygote's stack)
        import pandas  # noqa: F401
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot  # noqa: F401
        gc.collect()
        gc.freeze()
        report["zygote"] = mem()

        rfd, wfd = os.pipe()
        go_r, go_w = os.pipe()
        child = os.fork()
        if child == 0:
            os.close(rfd)
            os.close(go_w)
            os.read(go_r, 1)  # the parent has moved us into the cgroups
            try:
                for n in ("user", "ipc", "uts", "net", "pid", "mnt"):
                    setns(f"/proc/{init}/ns/{n}")
                grand = os.fork()
                if grand == 0:
                    os.setgroups([])
                    os.setresgid(1000, 1000, 1000)
                    os.setresuid(1000, 1000, 1000)
                    os.chdir("/")
                    import numpy as np
                    seen = {
                        "pid_inside": os.getpid(),
                        "ns_equal": {n: os.readlink(f"/proc/self/ns/{n}") == ns_init[n] for n in ns_init},
                        "uid": os.getuid(),
                        "os_release": Path("/etc/os-release").read_text().splitlines()[0],
                        "root_writable": os.access("/", os.W_OK),
                        "net_devices": sorted(os.listdir("/sys/class/net")) if os.path.isdir("/sys/class/net") else None,
                        "numpy_sum": int(np.arange(1000).sum()),
                        "cgroup": Path("/proc/self/cgroup").read_text().splitlines()[:3],
                    }
                    time.sleep(1)
                    seen["memory"] = mem()
                    os.write(wfd, json.dumps(seen).encode())
                    os._exit(0)
                os.waitpid(grand, 0)
                os._exit(0)
            except Exception as e:
                os.write(wfd, json.dumps({"error": repr(e)}).encode())
                os._exit(1)
        os.close(wfd)
        os.close(go_r)
        for ctrl in ("memory", "pids", "cpu,cpuacct"):
            procs = Path(f"/sys/fs/cgroup/{ctrl}/cellgate-zygote-probe/c1/cgroup.procs")
            if procs.exists():
                procs.write_text(str(child))
        os.write(go_w, b"x")
        data = b""
        while chunk := os.read(rfd, 65536):
            data += chunk
        os.waitpid(child, 0)
        report["kernel"] = json.loads(data or b"{}")
    finally:
        subprocess.run(runc + ["kill", name, "KILL"], capture_output=True)
        time.sleep(0.5)
        subprocess.run(runc + ["delete", "--force", name], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
        for ctrl in ("memory", "pids", "cpu,cpuacct", "cpuset", "blkio", "devices", "freezer"):
            for d in ("cellgate-zygote-probe/c1", "cellgate-zygote-probe"):
                try:
                    os.rmdir(f"/sys/fs/cgroup/{ctrl}/{d}")
                except OSError:
                    pass
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
