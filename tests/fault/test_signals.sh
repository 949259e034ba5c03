#!/bin/bash
# test_signals.sh - signals while `probe` runs a trial (run's own: tests/cli/test_run.sh, which
# covers SIGTERM/SIGINT/SIGHUP -> 128+N, a job ignoring SIGTERM escalated to SIGKILL, children
# that outlive the job): the trial's whole process group gets the signal, probe exits 128+N,
# no process is left behind, nothing half-written in the calibration file. Also a second signal
# during the kill grace (it kills the job at once), and a job ignoring SIGTERM under probe. SIGUSR1/SIGUSR2 are passed on
# without stopping anything, SIGQUIT is forwarded like SIGTERM (job control: test_job_control.sh).
. "$OOMLESS_SRC/tests/cli/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE OOMLESS_BATCH_SIZE

fake_job_gpu
JOB=("$FAKE_JOB" --batch-size '{batch}' --procdir "$TMP/procs" --capacity 8G --step-time-ms 20
    --steps 100000 --fixed 1G --per-sample 1M)
N=0
marker() { N=$((N + 1)); MARK="oomless-signals-test-$$-$N"; }
left() { pgrep -f "$MARK" | wc -l; }
# started FILE...: polls (up to 60 s) until the job printed its first step in one
started() { poll 60 grep -q 'step 1/' "$@" 2>/dev/null; }
none_left() { [ "$(left)" -eq 0 ]; }
wait_gone() { poll 30 none_left; }

for sig in TERM INT HUP; do
    marker
    "$OOMLESS_BIN" probe --calibration "$TMP/cal$sig.jsonl" -- "${JOB[@]}" --fork-child \
        --marker "$MARK" >"$TMP/out$sig" 2>"$TMP/err$sig" &
    P=$!
    started "$TMP/out$sig" "$TMP/err$sig" || bad "probe SIG$sig: the trial never started"
    kill -s "$sig" "$P"
    wait "$P"
    expect_eq "$?" $((128 + $(kill -l "$sig"))) "probe SIG$sig: exit 128+N"
    wait_gone || true
    expect_eq "$(left)" 0 "probe SIG$sig: no process left behind"
    # an interrupted probe saves no line (not even half of one)
    expect_eq "$(cat "$TMP/cal$sig.jsonl" 2>/dev/null)" "" "probe SIG$sig: no calibration line saved"
done

# a trial ignoring SIGTERM: SIGKILLed after the grace (a second SIGTERM meanwhile ends it sooner)
marker
"$OOMLESS_BIN" probe --kill-grace 1 --calibration off -- "${JOB[@]}" --ignore-sigterm \
    --fork-child-setsid --marker "$MARK" >"$TMP/outk" 2>"$TMP/errk" &
P=$!
started "$TMP/outk" "$TMP/errk" || bad "ignore: never started"
kill -TERM "$P"
sleep 0.2
kill -TERM "$P" 2>/dev/null
wait "$P"
RC=$?
expect_eq "$RC" 143 "probe, job ignoring SIGTERM: probe exits 128+15 (the trial was SIGKILLed)"
expect_contains "$(cat "$TMP/errk")" "SIGKILL" "probe, job ignoring SIGTERM: escalation said"
wait_gone || true
expect_eq "$(left)" 0 "probe, job ignoring SIGTERM: no process left behind"

# run: a second signal right after the first does not leave the group behind either
marker
"$OOMLESS_BIN" run --batch-size 2 --kill-grace 1 -- "${JOB[@]}" --ignore-sigterm --fork-child \
    --marker "$MARK" >"$TMP/outr" 2>"$TMP/errr" &
P=$!
started "$TMP/outr" "$TMP/errr" || bad "run: never started"
kill -INT "$P"
sleep 0.2
kill -TERM "$P" 2>/dev/null
wait "$P"
RC=$?
expect_eq "$RC" 130 "run, SIGINT then SIGTERM: the job's status (killed by SIGINT)"
wait_gone || true
expect_eq "$(left)" 0 "run, two signals: no process left behind"
# a second Ctrl-C during the kill grace kills the job at once: the grace here is an hour, the job
# ignores SIGINT. The first SIGINT is forwarded and oomless waits; the second ends the wait.
IGNJOB='import signal, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
print("ready", flush=True)
time.sleep(3600)'
gone() { ! kill -0 "$1" 2>/dev/null; }
for cmd in run probe; do
    marker
    OUTG="$TMP/outg-$cmd" ERRG="$TMP/errg-$cmd"
    case $cmd in
    run) "$OOMLESS_BIN" run --batch-size 1 --kill-grace 3600 -- python3 -c "$IGNJOB" "$MARK" \
        >"$OUTG" 2>"$ERRG" & ;;
    probe) "$OOMLESS_BIN" probe --kill-grace 3600 --calibration off -- python3 -c "$IGNJOB" \
        '{batch}' "$MARK" >"$OUTG" 2>"$ERRG" & ;;
    esac
    P=$!
    poll 30 grep -q ready "$OUTG" "$ERRG" 2>/dev/null || bad "$cmd second SIGINT: never started"
    kill -INT "$P"
    poll 10 grep -q "passing SIGINT" "$ERRG" || bad "$cmd: the first SIGINT was not forwarded"
    expect_contains "$(cat "$ERRG")" "(a second one kills it at once)" "$cmd: the first SIGINT says so"
    if gone "$P"; then bad "$cmd: the first SIGINT did not wait for the grace"; fi
    kill -INT "$P"
    if poll 30 gone "$P"; then ok; else
        bad "$cmd: a second SIGINT did not cut the hour's grace short"
        kill -KILL "$P"
        pkill -KILL -f "$MARK"
    fi
    wait "$P"
    RC=$?
    expect_eq "$RC" "$([ $cmd = run ] && echo 137 || echo 130)" "$cmd: exit after a second SIGINT"
    expect_contains "$(cat "$ERRG")" "a second stop signal: SIGKILL" "$cmd: the SIGKILL said"
    wait_gone || true
    expect_eq "$(left)" 0 "$cmd second SIGINT: no process left behind"
done

# SIGUSR1 and SIGUSR2 reach the job, which goes on: SLURM's --signal=USR1@T and Lightning's
# requeue (checkpoint, then exit) rely on it. (They used to kill oomless, and the job with it.)
USRJOB='import signal, sys, time
signal.signal(signal.SIGUSR1, lambda *a: print("checkpoint on SIGUSR1", flush=True))
signal.signal(signal.SIGUSR2, lambda *a: sys.exit(7))
print("ready", flush=True)
while True:
    time.sleep(0.05)'
for cmd in run probe; do
    marker
    # files of this command's own: the previous one's "ready" must not be taken for its
    # (the shell may poll before the started command has truncated a shared file)
    OUTU="$TMP/outu-$cmd" ERRU="$TMP/erru-$cmd"
    case $cmd in
    run) "$OOMLESS_BIN" run --batch-size 1 -- python3 -c "$USRJOB" "$MARK" >"$OUTU" 2>"$ERRU" & ;;
    probe) "$OOMLESS_BIN" probe --calibration off -- python3 -c "$USRJOB" '{batch}' "$MARK" \
        >"$OUTU" 2>"$ERRU" & ;;
    esac
    P=$!
    poll 30 grep -q ready "$OUTU" "$ERRU" 2>/dev/null || bad "$cmd SIGUSR1: the job never started"
    kill -USR1 "$P"
    if poll 10 grep -q "checkpoint on SIGUSR1" "$OUTU" "$ERRU"; then ok; else
        bad "$cmd: SIGUSR1 did not reach the job"
    fi
    if kill -0 "$P" 2>/dev/null; then ok; else bad "$cmd: SIGUSR1 ended oomless"; fi
    kill -USR2 "$P"
    wait "$P"
    RC=$?
    if [ "$cmd" = run ]; then
        expect_eq "$RC" 7 "run: SIGUSR2 reached the job, which exited 7 (oomless passes it on)"
        expect_contains "$(cat "$ERRU")" "passing SIGUSR1 to the job" "run: SIGUSR1 said"
    else
        expect_contains "$(cat "$ERRU")" "failed at batch 1 with exit 7" \
            "probe: SIGUSR2 reached the trial, which exited 7"
    fi
    wait_gone || true
    expect_eq "$(left)" 0 "$cmd SIGUSR1/SIGUSR2: no process left behind"
done

# SIGQUIT is forwarded like SIGTERM (it used to end oomless with a core dump, the job dying by
# the parent-death signal before it could clean up; or, in a script's background job, be ignored)
marker
"$OOMLESS_BIN" run --batch-size 1 -- python3 -c 'import signal, sys, time
signal.signal(signal.SIGQUIT, lambda *a: sys.exit(5))
print("ready", flush=True)
time.sleep(60)' "$MARK" >"$TMP/outq" 2>"$TMP/errq" &
P=$!
poll 30 grep -q ready "$TMP/outq" 2>/dev/null || bad "SIGQUIT: the job never started"
kill -QUIT "$P"
wait "$P"
expect_eq "$?" 5 "run SIGQUIT: the job's own exit after handling it"
finish
