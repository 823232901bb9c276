#!/usr/bin/env bash
# Configures and builds cellgate into build/ (executables in build/bin/).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/compiler-cache.sh "$PWD"
cmake -S . -B build -DCMAKE_BUILD_TYPE="${CELLGATE_BUILD_TYPE:-RelWithDebInfo}" "${compiler_cache_args[@]}" >/dev/null
cmake --build build -j"$(nproc)"
