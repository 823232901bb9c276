#!/usr/bin/env bash
# Configures and builds cellgate into build/ (executables in build/bin/), or
# into $CELLGATE_BUILD_DIR when set (the tests read the same variable).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${CELLGATE_BUILD_DIR:-build}
source scripts/compiler-cache.sh "$PWD"
# Ninja where it is installed (install-deps.sh installs it): it starts the
# next unit as soon as a core is free and rechecks less than make. A build
# tree made by another generator is configured anew.
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
if [[ -f $build/CMakeCache.txt ]]; then
  made_by=$(sed -n 's/^CMAKE_GENERATOR:INTERNAL=//p' "$build/CMakeCache.txt")
  wanted=${generator[1]:-Unix Makefiles}
  [[ $made_by == "$wanted" ]] || rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
fi
cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE="${CELLGATE_BUILD_TYPE:-RelWithDebInfo}" "${compiler_cache_args[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)"
