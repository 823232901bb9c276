#!/usr/bin/env bash
# Quick start, step 1 of 2: installs the dependencies, builds cellgate, builds
# (or reuses) the kernel image, then starts a sandboxed kernel and runs a demo
# cell through it.
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
scripts/build.sh
image=$(images/build.sh python | tail -n 1)
echo "kernel image: $image"
exec build/bin/cellgate-launch run --rm --exec '
import sys, platform, numpy as np, pandas as pd
print(f"Python {platform.python_version()} in a cellgate sandbox, numpy {np.__version__}, pandas {pd.__version__}")
df = pd.DataFrame({"x": np.arange(5), "y": np.arange(5) ** 2})
print(df.describe().loc[["mean", "max"]])
import matplotlib.pyplot as plt
plt.plot(df.x, df.y); plt.show()
'
