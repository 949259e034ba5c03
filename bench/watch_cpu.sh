#!/usr/bin/env bash
# watch_cpu.sh - CPU cost of `oomless watch` sampling at 10 Hz, against the fake NVML.
#
#   bench/watch_cpu.sh [BUILD_DIR] [MODE]     MODE: json (default), text, csv
#
# Starts 4 live processes (procdir files, as the fake NVML reads them) spread over 2 GPUs plus
# 4 static PIDs that do not exist here, runs
#   oomless watch --interval 0.1 --count 300 --json > /dev/null
# under /usr/bin/time and prints user+system CPU seconds over the elapsed time, as a percentage
# of one core. The budget is 1%.
set -eu
BUILD=${1:-build}
MODE=${2:-json}
BIN=$BUILD/oomless
FAKE=$BUILD/tests/fake/libnvidia-ml.so.1
[ -x "$BIN" ] && [ -f "$FAKE" ] || { echo "build first (make)" >&2; exit 2; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/oomless-bench.XXXXXX")
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$TMP"; }
trap cleanup EXIT

mkdir "$TMP/procs"
for i in 0 1 2 3; do
    env OOMLESS_BATCH_SIZE=$((8 << i)) OOMLESS_GRAD_ACCUM=2 sleep 600 &
    PIDS+=($!)
    echo "$((i % 2)) $(((i + 1) * 1073741824))" >"$TMP/procs/$!"
done
cat >"$TMP/spec" <<EOF
gpu name="NVIDIA A100-SXM4-80GB" total=85899345920 used=1073741824 util=45 temp=62
gpu name="NVIDIA A100-SXM4-80GB" total=85899345920 used=1073741824 util=80 temp=70
proc gpu=0 pid=4000001 used=1073741824
proc gpu=0 pid=4000002 used=1073741824
proc gpu=1 pid=4000003 used=1073741824
proc gpu=1 pid=4000004 used=1073741824
procdir $TMP/procs
EOF
export OOMLESS_NVML_LIBRARY=$FAKE FAKE_NVML_SPEC=$TMP/spec
export OOMLESS_DATA_DIR=${OOMLESS_DATA_DIR:-$(cd "$(dirname "$0")/.." && pwd)/data}

case $MODE in
json) ARGS=(--json) ;;
text) ARGS=(--no-tui) ;;
csv) ARGS=(--json --log "$TMP/log.csv") ;;
*) echo "unknown mode '$MODE'" >&2; exit 2 ;;
esac
/usr/bin/time -f "%U %S %e" -o "$TMP/time" "$BIN" watch --interval 0.1 --count 300 "${ARGS[@]}" >/dev/null
read -r user sys elapsed <"$TMP/time"
awk -v u="$user" -v s="$sys" -v e="$elapsed" -v m="$MODE" 'BEGIN {
    printf "watch --interval 0.1 --count 300 (%s): user %.2f s, system %.2f s, elapsed %.2f s: %.2f%% of one core\n",
        m, u, s, e, 100 * (u + s) / e }'
