#!/usr/bin/env bash
# Builds the libFuzzer targets with clang and runs each one for a while on its
# seed corpus, reporting crashes.
#
#   fuzz/run.sh [seconds-per-target]      (default 60)
#
# New inputs the fuzzer finds go to build-fuzz/corpus/<target>/, not into the
# committed seeds (regenerate those with fuzz/make_corpus.py). A crash leaves
# its reproducer in build-fuzz/artifacts/<target>/; replay it with
#   build-fuzz/<target> <file>
set -euo pipefail

seconds=${1:-60}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
build=${CELLGATE_FUZZ_BUILD_DIR:-$root/build-fuzz}
targets=(ws_json_fuzzer ws_v1_fuzzer zmq_wire_fuzzer)

# libFuzzer ships with clang; on Debian 12 its runtime is libclang-rt-14-dev.
have_tools() {
    command -v clang++ >/dev/null && command -v cmake >/dev/null &&
        compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null &&
        [[ -f /usr/include/nlohmann/json.hpp && -f /usr/include/openssl/evp.h ]]
}
if ! have_tools; then
    sudo=()
    [[ $(id -u) -ne 0 ]] && sudo=(sudo)
    "${sudo[@]}" apt-get update
    "${sudo[@]}" apt-get install -y --no-install-recommends \
        clang libclang-rt-14-dev cmake make nlohmann-json3-dev libssl-dev
fi

cmake -S "$here" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null

failed=()
for t in "${targets[@]}"; do
    mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
    log="$build/$t.log"
    echo "== $t: ${seconds}s"
    status=0
    "$build/$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
        -dict="$here/jupyter.dict" -print_final_stats=1 \
        -artifact_prefix="$build/artifacts/$t/" \
        "$build/corpus/$t" "$here/corpus/$t" >"$log" 2>&1 || status=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 || true)
    if [[ $status -ne 0 ]]; then
        failed+=("$t")
        echo "   CRASH (exit $status); log: $log"
        grep -E '^==[0-9]+==ERROR|SUMMARY|runtime error|Test unit written' "$log" | head -5 | sed 's/^/   /'
    else
        echo "   ok: ${execs:-?} execs, ${speed:-?} exec/s, ${cov:-cov ?}, corpus $(ls "$build/corpus/$t" | wc -l) files"
    fi
done

if ((${#failed[@]})); then
    echo "crashed: ${failed[*]}"
    exit 1
fi
echo "all ${#targets[@]} targets ran ${seconds}s without a crash"
