#!/bin/sh
# Brings what the languages image takes from registries other than Debian's,
# each with its ordinary client and pinned: Deno (npm, by the lock file's
# integrity hashes) and bash_kernel (PyPI, by its hash). Runs on the host
# before mmdebstrap (images/build.sh); customize.sh installs from DIR.
# Usage: fetch.sh DIR
set -eu
out=${1:?usage: fetch.sh DIR}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/deno" "$out/wheels"
cp "$here/deno-package.json" "$out/deno/package.json"
cp "$here/deno-package-lock.json" "$out/deno/package-lock.json"
(cd "$out/deno" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2)
[ -x "$out/deno/node_modules/@deno/linux-x64-glibc/deno" ] || { echo "fetch.sh: npm brought no deno binary" >&2; exit 1; }
/usr/bin/python3 -m pip download --quiet --no-deps --require-hashes --only-binary=:all: \
  -r "$here/python-requirements.txt" -d "$out/wheels" >&2
