#!/usr/bin/env bash
# Quick start, step 1 of 2: installs the dependencies, builds cellgate, builds
# (or reuses) the kernel image, then starts the gateway on 127.0.0.1:8888 with
# its embedded default (runc + the built python image). A token is printed
# unless CELLGATE_TOKEN is set. Extra arguments go to the gateway
# (build/bin/cellgate --help).
set -euo pipefail
cd "$(dirname "$0")"
scripts/install-deps.sh
scripts/build.sh
image=$(images/build.sh python | tail -n 1)
echo "kernel image: $image"
echo "try:  curl -H 'Authorization: token <token>' -X POST http://127.0.0.1:8888/api/kernels"
exec build/bin/cellgate --ip 127.0.0.1 --port 8888 "$@"
