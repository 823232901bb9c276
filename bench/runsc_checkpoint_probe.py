#!/usr/bin/python3
"""Does Debian's runsc checkpoint and restore a kernel-like process here, with
its stdio on host pipes (as cellgate's relay has it), and what does it cost?

    /usr/bin/python3 bench/runsc_checkpoint_probe.py [--image-store /var/cache/cellgate/images]

A gVisor sandbox from the kernel image (read-only root, no network, ptrace
platform) runs Python with numpy and pandas imported and a 1,000,000-element
array and DataFrame in memory, answering each line on stdin with the array's
sum (then adding 1 to it). The probe sends a line, checkpoints the sandbox
(`runsc checkpoint`, which stops it), restores it from the image on new pipes
(`runsc restore`) and sends another line: the answer shows whether the memory
came back. It prints the times, the image size and the answers as JSON.
Input for issue 15 (pause/resume under gVisor); it touches nothing of a
running gateway (its own runsc root in a temporary directory). Run as root.
"""
import argparse
import json
import select
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

PROGRAM = ("import numpy as np, pandas as pd, sys\n"
           "x = np.arange(10**6)\ndf = pd.DataFrame({'a': x})\nprint('ready', flush=True)\n"
           "for line in sys.stdin:\n    print(int(x.sum()), len(df), line.strip(), flush=True)\n    x = x + 1\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--image-store", default="/var/cache/cellgate/images")
    args = ap.parse_args()
    rootfs = (Path(args.image_store) / "python" / "current").resolve() / "rootfs"
    work = Path(tempfile.mkdtemp(prefix="cellgate-ckpt-"))
    bundle, image, state = work / "bundle", work / "image", work / "root"
    for d in (bundle, image, state):
        d.mkdir()
    subprocess.run(["runsc", "spec"], cwd=bundle, check=True, capture_output=True)
    config = json.loads((bundle / "config.json").read_text())
    config["root"] = {"path": str(rootfs), "readonly": True}
    config["process"].update(terminal=False, args=["/usr/bin/python3", "-u", "-c", PROGRAM],
                             env=["PATH=/usr/bin:/bin", "HOME=/tmp", "OPENBLAS_NUM_THREADS=1"])
    (bundle / "config.json").write_text(json.dumps(config))
    runsc = ["runsc", "--root", str(state), "--network", "none", "--platform", "ptrace"]
    out = {"runsc": subprocess.run(["runsc", "--version"], capture_output=True, text=True).stdout.split("\n")[0]}
    name = "probe"
    try:
        t0 = time.monotonic()
        p = subprocess.Popen(runsc + ["run", "--bundle", str(bundle), name], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.stdout.readline() == b"ready\n"
        out["start_to_ready_s"] = round(time.monotonic() - t0, 3)
        p.stdin.write(b"before\n")
        p.stdin.flush()
        out["before"] = p.stdout.readline().decode().strip()
        t0 = time.monotonic()
        r = subprocess.run(runsc + ["checkpoint", "--image-path", str(image), name], capture_output=True, text=True)
        out["checkpoint_s"] = round(time.monotonic() - t0, 3)
        out["checkpoint_rc"] = r.returncode
        out["checkpoint_stderr"] = r.stderr[-500:]
        p.wait(timeout=30)
        out["image_bytes"] = sum(f.stat().st_size for f in image.iterdir())
        subprocess.run(runsc + ["delete", "-force", name], capture_output=True)
        t0 = time.monotonic()
        q = subprocess.Popen(runsc + ["restore", "--image-path", str(image), "--bundle", str(bundle), name],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        q.stdin.write(b"after\n")
        q.stdin.flush()
        if select.select([q.stdout], [], [], 60)[0]:
            out["after"] = q.stdout.readline().decode().strip()
            out["restore_to_answer_s"] = round(time.monotonic() - t0, 3)
        else:
            out["after"] = None
        q.kill()
        q.wait(timeout=30)
        out["restore_stderr"] = q.stderr.read().decode(errors="replace")[-500:]
        before, after = out["before"].split()[0], (out["after"] or "0").split()[0]
        out["memory_came_back"] = int(after) == int(before) + 10**6
    finally:
        subprocess.run(runsc + ["delete", "-force", name], capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
