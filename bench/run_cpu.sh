#!/usr/bin/env bash
# run_cpu.sh - CPU cost of `oomless run` supervising a job on a busy node: NPROCS sleeping
# processes besides the job, GPU memory sampled every 50 ms (the default) from the fake NVML.
#
#   bench/run_cpu.sh [BUILD_DIR] [SECONDS] [NPROCS]      defaults: build 30 2000
#
# Starts NPROCS `sleep` processes, then
#   oomless run --batch-size 4 -- fakejob --procdir DIR --steps 100000 --step-time-ms 50 ...
# against the fake NVML (the job's own memory plus 4 static PIDs of other users), lets it settle
# for 1 s, and reads oomless's own user+system CPU time (fields 14 and 15 of /proc/PID/stat:
# the job's CPU is not in them) before and after SECONDS seconds. Prints it as a share of one
# core.
set -eu
BUILD=${1:-build}
SECONDS_=${2:-30}
NPROCS=${3:-2000}
BIN=$BUILD/oomless
FAKE=$BUILD/tests/fake/libnvidia-ml.so.1
JOB=$BUILD/tests/fakejob
[ -x "$BIN" ] && [ -f "$FAKE" ] && [ -x "$JOB" ] || { echo "build first (make)" >&2; exit 2; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/oomless-bench.XXXXXX")
SLEEPERS=()
RUN=
cleanup() {
    set +e
    if [ -n "$RUN" ]; then
        kill "$RUN" 2>/dev/null # oomless forwards it to the job and waits for it
        wait "$RUN" 2>/dev/null
    fi
    # the sleepers, one by one by their own pids (never by name)
    for p in "${SLEEPERS[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

for ((i = 0; i < NPROCS; i++)); do
    sleep 3600 &
    SLEEPERS+=($!)
done
mkdir "$TMP/procs"
cat >"$TMP/spec" <<EOF
gpu name="NVIDIA A100-SXM4-80GB" total=85899345920 used=1073741824 util=45 temp=62
proc gpu=0 pid=4000001 used=1073741824
proc gpu=0 pid=4000002 used=1073741824
proc gpu=0 pid=4000003 used=1073741824
proc gpu=0 pid=4000004 used=1073741824
procdir $TMP/procs
EOF
export OOMLESS_NVML_LIBRARY=$FAKE FAKE_NVML_SPEC=$TMP/spec XDG_CACHE_HOME=$TMP/cache
export OOMLESS_DATA_DIR=${OOMLESS_DATA_DIR:-$(cd "$(dirname "$0")/.." && pwd)/data}

"$BIN" run --batch-size 4 -- "$JOB" --batch-size '{batch}' --procdir "$TMP/procs" \
    --steps 100000 --step-time-ms 50 --fixed 1G --per-sample 1M >/dev/null 2>&1 &
RUN=$!
cpu_ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$RUN/stat"; }
sleep 1
t0=$(cpu_ticks)
w0=$(date +%s.%N)
sleep "$SECONDS_"
t1=$(cpu_ticks)
w1=$(date +%s.%N)
procs=$(ls /proc | grep -c '^[0-9]')
awk -v a="$t0" -v b="$t1" -v w0="$w0" -v w1="$w1" -v hz="$(getconf CLK_TCK)" -v n="$procs" 'BEGIN {
    cpu = (b - a) / hz; wall = w1 - w0
    printf "oomless run, sampling every 50 ms, %d processes on the node: %.2f s CPU in %.1f s: %.1f%% of one core\n",
        n, cpu, wall, 100 * cpu / wall }'
