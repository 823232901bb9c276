#!/usr/bin/python3
"""Can Debian's runsc fork a sandbox: one checkpoint image restored into
several new containers, each with its own copy of a bind-mounted directory?

    /usr/bin/python3 bench/runsc_fork_probe.py

A gVisor sandbox from the kernel image runs Python holding a number x (read
from a file on a bind mount at /run/kernel) and adds each line on stdin to
it, appending the result to a file on that mount. The probe checkpoints it
with --leave-running (a snapshot while it runs), then restores the one image
into two new containers, each on its own copy (cp -a) of the mount, and asks
all three. Input for issue 15 (snapshots and fork); it touches nothing of a
running gateway (its own runsc root in a temporary directory). Run as root.

On runsc 20221219 (December 2026): --leave-running fails ("stopping
container: context deadline exceeded") and the source sandbox dies, while
both children restore from the image in about 0.5 s each, answer from the
parent's memory and diverge independently, each writing its own copy.
"""
import json, select, shutil, subprocess, tempfile, time
from pathlib import Path

PROG = r'''
import sys, os
x = int(open("/run/kernel/seed.txt").read())
print("ready", flush=True)
for line in sys.stdin:
    x += int(line)
    open("/run/kernel/out.txt", "a").write("%d\n" % x)
    print(x, open("/run/kernel/seed.txt").read().strip(), flush=True)
'''
rootfs = (Path("/var/cache/cellgate/images/python/current")).resolve() / "rootfs"
work = Path(tempfile.mkdtemp(prefix="cellgate-fork-"))
state = work / "root"; state.mkdir()
def bundle(name, kdir):
    b = work / ("bundle-" + name); b.mkdir()
    subprocess.run(["runsc", "spec"], cwd=b, check=True, capture_output=True)
    c = json.loads((b / "config.json").read_text())
    c["root"] = {"path": str(rootfs), "readonly": True}
    c["process"].update(terminal=False, args=["/usr/bin/python3", "-u", "-c", PROG], env=["PATH=/usr/bin:/bin", "HOME=/tmp"])
    c["mounts"].append({"destination": "/run/kernel", "type": "bind", "source": str(kdir), "options": ["rbind", "rw"]})
    (b / "config.json").write_text(json.dumps(c))
    return b
runsc = ["runsc", "--root", str(state), "--network", "none", "--platform", "ptrace"]
def ask(p, n):
    """The sandbox's answer to n, or None when it is gone or silent."""
    try:
        p.stdin.write(b"%d\n" % n)
        p.stdin.flush()
    except BrokenPipeError:
        return None
    if select.select([p.stdout], [], [], 30)[0]:
        return p.stdout.readline().decode().strip() or None
    return None
out = {}
procs = []
try:
    k = work / "k-parent"; k.mkdir(); (k / "seed.txt").write_text("100")
    p = subprocess.Popen(runsc + ["run", "--bundle", str(bundle("parent", k)), "parent"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    procs.append(p)
    assert p.stdout.readline() == b"ready\n"
    out["parent_before"] = ask(p, 1)
    img = work / "image"; img.mkdir()
    t0 = time.monotonic()
    r = subprocess.run(runsc + ["checkpoint", "--leave-running", "--image-path", str(img), "parent"], capture_output=True, text=True)
    out["checkpoint_leave_running_rc"] = r.returncode; out["checkpoint_s"] = round(time.monotonic() - t0, 3); out["checkpoint_err"] = r.stderr[-300:]
    out["parent_after_checkpoint"] = ask(p, 1)
    for name in ("child1", "child2"):
        kc = work / ("k-" + name)
        subprocess.run(["cp", "-a", str(k), str(kc)], check=True)
        (kc / "seed.txt").write_text("100")  # same bytes as the parent's
        t0 = time.monotonic()
        q = subprocess.Popen(runsc + ["restore", "--image-path", str(img), "--bundle", str(bundle(name, kc)), name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        procs.append(q)
        out[name] = ask(q, 10 if name == "child1" else 20)
        out[name + "_s"] = round(time.monotonic() - t0, 3)
    out["parent_last"] = ask(p, 1)
    out["child1_again"] = ask(procs[1], 10)
    out["files"] = {n: (work / ("k-" + n) / "out.txt").read_text().split() if (work / ("k-" + n) / "out.txt").exists() else None for n in ("parent", "child1", "child2")}
finally:
    for q in procs:
        q.kill()
    for name in ("parent", "child1", "child2"):
        subprocess.run(runsc + ["delete", "-force", name], capture_output=True)
    print(json.dumps(out, indent=1))
    shutil.rmtree(work, ignore_errors=True)
