#!/bin/bash
# test_parent_death.sh - a supervised job is never orphaned: when `oomless run` or `oomless probe`
# itself is killed with SIGKILL (it cannot forward anything then), the job dies too.
. "$OOMLESS_SRC/tests/cli/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE OOMLESS_BATCH_SIZE

fake_job_gpu
JOB=("$FAKE_JOB" --batch-size '{batch}' --procdir "$TMP/procs" --capacity 8G --step-time-ms 20
    --steps 100000 --fixed 1G --per-sample 1M)
# the job is oomless's only child
job_started() { JOBPID=$(pgrep -P "$PARENT" | head -1); [ -n "$JOBPID" ]; }
job_gone() { # no such process, or only a zombie waiting for init
    local st
    st=$(ps -o stat= -p "$JOBPID" 2>/dev/null)
    [ -z "$st" ] || [ "${st#Z}" != "$st" ]
}

# A job that prints would also die of SIGPIPE once oomless is gone; these stay silent (the
# fake job with no output, and `sleep` exec'd by sh), so only the parent-death signal kills them.
for cmd in run probe run-silent; do
    MARK="oomless-parent-death-$$-$cmd"
    case $cmd in
    run) "$OOMLESS_BIN" run --batch-size 4 -- "${JOB[@]}" --marker "$MARK" >/dev/null 2>&1 & ;;
    probe) "$OOMLESS_BIN" probe --calibration off -- "${JOB[@]}" --marker "$MARK" >/dev/null 2>&1 & ;;
    run-silent) "$OOMLESS_BIN" run --batch-size 4 -- sh -c 'exec sleep 1000' "$MARK" >/dev/null 2>&1 & ;;
    esac
    PARENT=$!
    if poll 30 job_started; then ok; else bad "$cmd: the job never started"; continue; fi
    sleep 0.3
    if job_gone; then bad "$cmd: the job is not running before the kill"; else ok; fi
    kill -KILL "$PARENT"
    wait "$PARENT" 2>/dev/null
    if poll 30 job_gone; then ok; else bad "$cmd: the job outlived oomless killed by SIGKILL"; kill -KILL "$JOBPID"; fi
done
finish
