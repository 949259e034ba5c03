#!/bin/bash
# run.sh BUILD_DIR SECONDS [TARGET...] - runs each libFuzzer target of BUILD_DIR (make fuzz builds
# build-fuzz) for SECONDS, starting from its committed seed corpus tests/fuzz/corpus/<target>/.
# New inputs go to BUILD_DIR/fuzz-corpus/<target>/ (never into the repository); crash, leak,
# timeout and out-of-memory inputs to BUILD_DIR/fuzz-artifacts/<target>/.
# Prints, per target, the executions and the coverage (cov: edges, ft: features) of libFuzzer's
# final stats; exits non-zero when any target found a crash (or did not run).
# Environment: FUZZ_JOBS=N runs N targets at a time (default 1); FUZZ_FLAGS adds libFuzzer flags.
set -u
if [ $# -lt 2 ]; then
    echo "usage: $0 BUILD_DIR SECONDS [TARGET...]" >&2
    exit 2
fi
BUILD=$(cd "$1" && pwd) || exit 2
SECONDS_EACH=$2
shift 2
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN="$BUILD/tests/fuzz"
JOBS=${FUZZ_JOBS:-1}

if [ $# -gt 0 ]; then
    targets=("$@")
else
    targets=()
    for f in "$SRC"/tests/fuzz/fuzz_*.c; do
        t=$(basename "$f" .c)
        [ "$t" = fuzz_common ] && continue
        targets+=("${t#fuzz_}")
    done
fi

run_one() { # run_one TARGET: writes BUILD/fuzz-logs/TARGET.log, returns libFuzzer's status
    local t=$1 seeds="$SRC/tests/fuzz/corpus/$1" new="$BUILD/fuzz-corpus/$1"
    local art="$BUILD/fuzz-artifacts/$1"
    mkdir -p "$new" "$art" "$BUILD/fuzz-logs"
    if [ ! -x "$BIN/fuzz_$t" ]; then
        echo "no fuzz target $BIN/fuzz_$t" >"$BUILD/fuzz-logs/$t.log"
        return 2
    fi
    # -close_fd_mask=1: the targets' own stdout is noise; stderr keeps libFuzzer's report
    # shellcheck disable=SC2086
    ASAN_OPTIONS="detect_leaks=1:abort_on_error=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
        "$BIN/fuzz_$t" -max_total_time="$SECONDS_EACH" -timeout=10 -rss_limit_mb=2048 \
        -max_len=65536 -print_final_stats=1 -close_fd_mask=1 -artifact_prefix="$art/" \
        ${FUZZ_FLAGS:-} "$new" "$seeds" >"$BUILD/fuzz-logs/$t.log" 2>&1
}

report() { # report TARGET STATUS
    local t=$1 rc=$2 log="$BUILD/fuzz-logs/$1.log" execs cov ft last
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    printf '%-14s rc=%-3s execs=%-10s cov=%-6s ft=%-6s corpus=%s\n' "$t" "$rc" "${execs:-?}" \
        "${cov:-?}" "${ft:-?}" "$(ls "$BUILD/fuzz-corpus/$t" 2>/dev/null | wc -l)"
    if [ "$rc" -ne 0 ]; then
        echo "---- $t: FAILED (log $log)" >&2
        grep -E 'ERROR|SUMMARY|runtime error|invariant failed|Test unit written' "$log" | head -20 >&2
        ls "$BUILD/fuzz-artifacts/$t" >&2
    fi
}

fail=0
declare -A pid_of
i=0
while [ $i -lt ${#targets[@]} ]; do
    batch=("${targets[@]:$i:$JOBS}")
    for t in "${batch[@]}"; do
        run_one "$t" &
        pid_of[$t]=$!
    done
    for t in "${batch[@]}"; do
        wait "${pid_of[$t]}"
        rc=$?
        report "$t" "$rc"
        [ "$rc" -ne 0 ] && fail=1
    done
    i=$((i + JOBS))
done
exit $fail
