#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan, no recovery) and runs
# each one for a fixed time on its committed corpus; fails on any crash,
# sanitizer report, leak, timeout or out-of-memory.
#
#   fuzz/run.sh [--update-corpus] [seconds-per-target] [target...]
#
#   seconds-per-target   default 600; 0 only replays the committed corpus
#                        (a quick regression check, no fuzzing)
#   target               default: all ten (http_request_fuzzer,
#                        ws_json_fuzzer, ws_v1_fuzzer, zmq_wire_fuzzer,
#                        egress_fuzzer, tar_fuzzer, connect_fuzzer,
#                        mcp_rpc_fuzzer, terminado_fuzzer, multipart_fuzzer)
#   --update-corpus      after a clean run, minimise what the fuzzer found
#                        into fuzz/corpus/<target>/ (libFuzzer's set-cover
#                        merge over the named seeds of fuzz/make_corpus.py,
#                        which stay); with 0 seconds: merge only
#
# The fuzzer's working corpus is build-fuzz/corpus/<target>/. A failure
# leaves its reproducer in build-fuzz/artifacts/<target>/; replay it with
#   build-fuzz/<target> <file>
# and the full log is build-fuzz/<target>.log.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
build=${CELLGATE_FUZZ_BUILD_DIR:-$root/build-fuzz}
all_targets=(http_request_fuzzer ws_json_fuzzer ws_v1_fuzzer zmq_wire_fuzzer egress_fuzzer tar_fuzzer
             connect_fuzzer mcp_rpc_fuzzer terminado_fuzzer multipart_fuzzer)

update_corpus=0
seconds=600
targets=()
for arg in "$@"; do
    case $arg in
    --update-corpus) update_corpus=1 ;;
    -h | --help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *[!0-9]*)
        if [[ " ${all_targets[*]} " != *" $arg "* ]]; then
            echo "run.sh: unknown target or option '$arg' (targets: ${all_targets[*]})" >&2
            exit 2
        fi
        targets+=("$arg") ;;
    *) seconds=$arg ;;
    esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")

dict_for() {
    case $1 in
    http_request_fuzzer | egress_fuzzer | multipart_fuzzer) echo "$here/http.dict" ;;
    *) echo "$here/jupyter.dict" ;;
    esac
}

# libFuzzer ships with clang; on Debian 12 its runtime is libclang-rt-14-dev.
have_tools() {
    command -v clang++ >/dev/null && command -v cmake >/dev/null &&
        compgen -G "/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a" >/dev/null &&
        [[ -f /usr/include/nlohmann/json.hpp && -f /usr/include/openssl/evp.h && -f /usr/include/boost/beast.hpp ]]
}
if ! have_tools; then
    sudo=()
    [[ $(id -u) -ne 0 ]] && sudo=(sudo)
    "${sudo[@]}" apt-get update
    "${sudo[@]}" apt-get install -y --no-install-recommends \
        clang libclang-rt-14-dev cmake make nlohmann-json3-dev libssl-dev libboost-dev
fi

echo "building the fuzz targets in $build"
source "$root/scripts/compiler-cache.sh" "$root"
cmake -S "$here" -B "$build" -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo "${compiler_cache_args[@]}" >/dev/null
cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" >"$build/build.log" 2>&1 ||
    { tail -30 "$build/build.log"; echo "run.sh: build failed (log: $build/build.log)" >&2; exit 1; }

# What went wrong, from a libFuzzer log; empty when nothing did.
failure_in() {
    local log=$1
    if grep -q 'ERROR: LeakSanitizer' "$log"; then echo leak
    elif grep -q 'ERROR: AddressSanitizer' "$log"; then echo "asan: $(grep -m1 -o 'AddressSanitizer: [a-z-]*' "$log" | cut -d' ' -f2)"
    elif grep -q 'runtime error:' "$log"; then echo ubsan
    elif grep -q 'ERROR: libFuzzer: timeout' "$log"; then echo timeout
    elif grep -q 'ERROR: libFuzzer: out-of-memory' "$log"; then echo out-of-memory
    elif grep -q 'ERROR: libFuzzer: deadly signal' "$log"; then echo crash
    elif grep -q 'ERROR: libFuzzer' "$log"; then echo "libfuzzer: $(grep -m1 -o 'ERROR: libFuzzer: [a-z -]*' "$log" | cut -d' ' -f3-)"
    elif grep -qE '^==[0-9]+==ERROR|^SUMMARY: ' "$log"; then echo sanitizer
    fi
}

merged_name='^[0-9a-f]{40}$'
committed_count() { find "$here/corpus/$1" -maxdepth 1 -type f | wc -l; }

# Replaces the merged part of fuzz/corpus/<t> with a small set: the named
# seeds, then a greedy set cover (by edges, not hit counts, which keeps it to
# a few hundred files) of what they miss. The full working corpus stays in
# build-fuzz/corpus/<t>.
update_committed() {
    local t=$1 bin=$2 tmp="$build/merge/$1"
    rm -rf "$tmp" && mkdir -p "$tmp"
    find "$here/corpus/$t" -maxdepth 1 -type f -regextype posix-extended ! -regex ".*/[0-9a-f]{40}" \
        -exec cp {} "$tmp/" \;
    "$bin" -set_cover_merge=1 -use_counters=0 -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 "$tmp" "$here/corpus/$t" "$build/corpus/$t" \
        >"$build/$t.merge.log" 2>&1 || { echo "   merge failed (log: $build/$t.merge.log)"; return 1; }
    find "$here/corpus/$t" -maxdepth 1 -type f -regextype posix-extended -regex ".*/[0-9a-f]{40}" -delete
    find "$tmp" -maxdepth 1 -type f -regextype posix-extended -regex ".*/[0-9a-f]{40}" -exec cp {} "$here/corpus/$t/" \;
}

max_len=65536
rows=()
failed=()
for t in "${targets[@]}"; do
    bin="$build/$t"
    log="$build/$t.log"
    mkdir -p "$build/corpus/$t" "$build/artifacts/$t"
    rm -f "$build/artifacts/$t"/*
    if ((seconds == 0)); then
        echo "== $t: replaying fuzz/corpus/$t"
        mode=(-runs=0)
        dirs=("$here/corpus/$t")
    else
        echo "== $t: ${seconds}s"
        mode=(-max_total_time="$seconds")
        dirs=("$build/corpus/$t" "$here/corpus/$t")  # new inputs go to the first
    fi
    start=$(date +%s)
    status=0
    "$bin" "${mode[@]}" -timeout=10 -rss_limit_mb=2048 -max_len="$max_len" -dict="$(dict_for "$t")" \
        -print_final_stats=1 -artifact_prefix="$build/artifacts/$t/" "${dirs[@]}" >"$log" 2>&1 || status=$?
    took=$(($(date +%s) - start))
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    speed=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
    units=$(grep -Eo 'corp: [0-9]+' "$log" | tail -1 | cut -d' ' -f2 || true)
    why=$(failure_in "$log")
    if [[ $status -ne 0 && -z $why ]]; then why="exit $status"; fi
    if [[ -n $why ]]; then
        failed+=("$t")
        result="FAIL ($why)"
        echo "   $result; log: $log"
        grep -E '^==[0-9]+==ERROR|^SUMMARY|runtime error|Test unit written|ALARM' "$log" | head -6 | sed 's/^/   /'
    else
        result=ok
        if ((update_corpus)); then
            update_committed "$t" "$bin" && echo "   fuzz/corpus/$t: $(committed_count "$t") files after merging"
        fi
    fi
    rows+=("$(printf '%-20s %7s %12s %9s %7s %8s %10s  %s' "$t" "$took" "${execs:-?}" "${speed:-?}" "${cov:-?}" \
        "${units:-?}" "$(committed_count "$t")" "$result")")
done

echo
printf '%-20s %7s %12s %9s %7s %8s %10s  %s\n' target seconds execs exec/s cov corpus committed result
printf '%s\n' "${rows[@]}"
if ((${#failed[@]})); then
    echo "failed: ${failed[*]} (reproducers in $build/artifacts/)"
    exit 1
fi
if ((seconds == 0)); then
    echo "all ${#targets[@]} targets replayed their committed corpus cleanly"
else
    echo "all ${#targets[@]} targets ran ${seconds}s each: no crash, sanitizer report, leak or timeout"
fi
