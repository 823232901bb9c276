#!/usr/bin/env bash
# The host's KSM daemon (ksmd) for cellgate's memory merging (docs/memory.md).
# Kernels of a gateway or launcher run with --memory-merge on opt themselves
# into KSM; ksmd, which this script starts and tunes, is what finds their
# identical pages and keeps one copy. It is machine-wide: other processes that
# opted in (QEMU guests, say) merge too. Run as root.
#
#   scripts/ksm.sh on [PAGES_TO_SCAN [SLEEP_MS]]   default 2000 pages every 20 ms
#   scripts/ksm.sh off                             stop ksmd and unmerge every page
#   scripts/ksm.sh status                          what it shares, what it cost
#
# The trade-off (SECURITY.md): a session whose pages are merged can tell, by
# timing a write, whether some other merging session holds a page with the
# same bytes. Leave it off where tenants must not learn that much about each
# other.
set -euo pipefail
ksm=/sys/kernel/mm/ksm
[[ -w $ksm/run ]] || { echo "ksm.sh: $ksm is missing or not writable (this kernel lacks KSM, or not root)" >&2; exit 2; }

status() {
    local shared sharing profit pid ticks
    shared=$(<"$ksm/pages_shared"); sharing=$(<"$ksm/pages_sharing")
    profit=$(cat "$ksm/general_profit" 2>/dev/null || echo $(( sharing * 4096 )))
    pid=$(pgrep -x ksmd | head -n 1 || true)
    ticks=0
    if [[ -n $pid ]]; then
        read -r -a stat < <(sed 's/.*) //' "/proc/$pid/stat")
        ticks=$(( stat[11] + stat[12] ))  # utime + stime
    fi
    printf 'run %s, %s pages every %s ms; %s pages kept for %s mappings, %d MiB saved; ksmd CPU %d s; full scans %s\n' \
        "$(<"$ksm/run")" "$(<"$ksm/pages_to_scan")" "$(<"$ksm/sleep_millisecs")" "$shared" "$sharing" \
        $(( profit / 1048576 )) $(( ticks / $(getconf CLK_TCK) )) "$(<"$ksm/full_scans")"
}

case ${1:-status} in
on)
    pages=${2:-2000} sleep_ms=${3:-20}
    [[ $pages =~ ^[0-9]+$ && $pages -ge 1 && $pages -le 100000 ]] || { echo "ksm.sh: PAGES_TO_SCAN must be 1…100000" >&2; exit 2; }
    [[ $sleep_ms =~ ^[0-9]+$ && $sleep_ms -ge 1 && $sleep_ms -le 10000 ]] || { echo "ksm.sh: SLEEP_MS must be 1…10000" >&2; exit 2; }
    echo "$pages" > "$ksm/pages_to_scan"
    echo "$sleep_ms" > "$ksm/sleep_millisecs"
    [[ -w $ksm/smart_scan ]] && echo 1 > "$ksm/smart_scan"  # skip pages that never merge (6.7+)
    echo 1 > "$ksm/run"
    status ;;
off)
    echo 2 > "$ksm/run"  # unmerge everything, then stop
    echo 0 > "$ksm/run"
    status ;;
status) status ;;
*) echo "usage: scripts/ksm.sh on [PAGES_TO_SCAN [SLEEP_MS]] | off | status" >&2; exit 2 ;;
esac
