#!/bin/bash
# test_stalled_output.sh - oomless's stdout, stderr or events file is a pipe nobody reads: the
# supervision goes on regardless. A forwarded SIGTERM and --trial-timeout still act, oomless
# still exits after a stop signal, probe ends by itself (its trials' output and its report
# wait no longer than the kill grace), and an events FIFO that stalls (or has no reader at all)
# is an error, not a hang.
. "$OOMLESS_SRC/tests/cli/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE OOMLESS_BATCH_SIZE

fake_job_gpu # a GPU: no "no NVML" notice before the first trial (it is not a supervised one)
FIFO="$TMP/fifo"
mkfifo "$FIFO"
exec 7<>"$FIFO" # this shell holds the read end and never reads
# fill it: from now on a write to it blocks. First grow it to the 256 KiB that oomless grows a
# destination pipe to (lib/job/output.c), so that oomless finds it full, not with room made.
python3 -c '
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK)
fcntl.fcntl(fd, 1031, 256 * 1024)  # F_SETPIPE_SZ
try:
    while True:
        os.write(fd, b"x" * 4096)
except BlockingIOError:
    pass' "$FIFO"

N=0
marker() { N=$((N + 1)); MARK="oomless-stalled-test-$$-$N"; }
P=
left() { pgrep -f "$MARK" | grep -vxc "${P:-0}"; } # the job's processes: not oomless itself
none_left() { [ "$(left)" -eq 0 ]; }
ended() { # ended PID: gone, or a zombie waiting for this shell
    local st
    st=$(ps -o stat= -p "$1" 2>/dev/null)
    [ -z "$st" ] || [ "${st#Z}" != "$st" ]
}
has_job() { [ "$(left)" -gt 0 ]; }
started() { poll 30 has_job; }
# finished PID WHAT SECONDS: oomless must end within SECONDS; sets RC
finished() {
    if poll "$3" ended "$1"; then
        wait "$1"
        RC=$?
        ok
    else
        bad "$2: oomless still running after $3 s (blocked on its output)"
        kill -KILL "$1" 2>/dev/null
        wait "$1" 2>/dev/null
        RC=-1
    fi
}
JOB=("$FAKE_JOB" --steps 1000000 --step-time-ms 1)

# stdout stalled: SIGTERM is still forwarded and oomless exits with the job's status
marker
"$OOMLESS_BIN" run --batch-size 1 --kill-grace 2 -- "${JOB[@]}" --marker "$MARK" \
    >"$FIFO" 2>"$TMP/err1" &
P=$!
started || bad "stdout stalled: the job never started"
sleep 0.5
kill -TERM "$P"
finished "$P" "run, stdout stalled, SIGTERM" 15
expect_eq "$RC" 143 "run, stdout stalled, SIGTERM: the job's status"
poll 10 none_left
expect_eq "$(left)" 0 "run, stdout stalled: no process left behind"

# stdout stalled: --trial-timeout still stops the trial, and probe ends by itself: the report
# waits for the reader no longer than the kill grace (it waited until a signal came, 25 s and
# more; forever behind a stalled pager)
marker
"$OOMLESS_BIN" probe --calibration off --trial-timeout 1 --kill-grace 1 -- "${JOB[@]}" \
    --batch-size '{batch}' --marker "$MARK" >"$FIFO" 2>"$TMP/err2" &
P=$!
started || bad "probe, stdout stalled: the trial never started"
if poll 15 none_left; then ok; else bad "probe, stdout stalled: the trial outlived --trial-timeout"; fi
finished "$P" "probe, stdout stalled, after the timeout, no signal" 20
expect_eq "$RC" 1 "probe, stdout stalled, after the timeout: the timeout's status"
expect_contains "$(cat "$TMP/err2")" "ran past the trial timeout" "probe, stdout stalled: timeout said"
expect_contains "$(cat "$TMP/err2")" "oomless probe: the report was not written: standard output took nothing for 1 s" \
    "probe, stdout stalled: the report's fate said"

# stdout stalled, trials that end by themselves: each one's output waits no longer than the kill
# grace either (it waited for the reader before the next trial, forever), the search goes on
marker
"$OOMLESS_BIN" probe --calibration off --max-trials 2 --max-batch 2 --kill-grace 1 -- \
    "$FAKE_JOB" --steps 3 --step-time-ms 1 --batch-size '{batch}' --marker "$MARK" \
    >"$FIFO" 2>"$TMP/err2b" &
P=$!
finished "$P" "probe, stdout stalled, trials that end" 30
expect_eq "$RC" 3 "probe, stdout stalled, trials that end: exit 3 (the report not written)"
expect_eq "$(grep -c "^oomless probe: trial [0-9]*: batch [0-9]*: peak" "$TMP/err2b")" 2 \
    "probe, stdout stalled, trials that end: both trials ran"
expect_contains "$(cat "$TMP/err2b")" "oomless: the job's output was not all written: its reader took nothing for 1 s" \
    "probe, stdout stalled, trials that end: the dropped output said"

# stderr stalled (notices, the job's stderr): SIGTERM, and the final message, do not hang
marker
"$OOMLESS_BIN" run --batch-size 1 --kill-grace 2 -- "${JOB[@]}" --marker "$MARK" \
    >"$TMP/out3" 2>"$FIFO" &
P=$!
started || bad "stderr stalled: the job never started"
sleep 0.5
kill -TERM "$P"
finished "$P" "run, stderr stalled, SIGTERM" 15
expect_eq "$RC" 143 "run, stderr stalled, SIGTERM: the job's status"

# stderr stalled: --trial-timeout acts although the trial's notice cannot be written, and
# probe ends by itself, its messages cut off after about the kill grace each
marker
"$OOMLESS_BIN" probe --calibration off --trial-timeout 1 --kill-grace 1 -- "${JOB[@]}" \
    --batch-size '{batch}' --marker "$MARK" >"$TMP/out4" 2>"$FIFO" &
P=$!
started || bad "probe, stderr stalled: the trial never started"
if poll 15 none_left; then ok; else bad "probe, stderr stalled: the trial outlived --trial-timeout"; fi
finished "$P" "probe, stderr stalled, after the timeout, no signal" 20
expect_contains "$(cat "$TMP/out4")" "Recommended batch" "probe, stderr stalled: the report on stdout"

# a job that writes without pause to a destination that keeps up: the loop still sees SIGTERM
marker
"$OOMLESS_BIN" run --batch-size 1 -- yes "$MARK" >/dev/null 2>"$TMP/err5" &
P=$!
started || bad "yes: never started"
sleep 0.5
kill -TERM "$P"
finished "$P" "run, a job writing without pause, SIGTERM" 15
expect_eq "$RC" 143 "run, a job writing without pause: killed by the forwarded SIGTERM"

# the events file a FIFO that stalls: given up after 1 s, the job runs, the run says so
"$OOMLESS_BIN" run --batch-size 1 --events "$FIFO" -- "$FAKE_JOB" --steps 2 --step-time-ms 1 \
    >"$TMP/out" 2>"$TMP/err" &
P=$!
finished "$P" "run --events to a stalled FIFO" 20
expect_eq "$RC" 3 "run --events to a stalled FIFO: exit 3"
expect_contains "$(cat "$TMP/err")" "does not keep up" "run --events to a stalled FIFO: said"
expect_contains "$(cat "$TMP/out")" "step 2/2" "run --events to a stalled FIFO: the job ran"

# ... or a FIFO that nobody reads at all: refused at once, not waited for
mkfifo "$TMP/noreader"
"$OOMLESS_BIN" run --batch-size 1 --events "$TMP/noreader" -- true >"$TMP/out" 2>"$TMP/err" &
P=$!
finished "$P" "run --events to a FIFO without a reader" 10
expect_eq "$RC" 3 "run --events to a FIFO without a reader: exit 3"
expect_contains "$(cat "$TMP/err")" "a FIFO that nobody reads" "FIFO without a reader: said"
exec 7<&-
finish
