#!/bin/bash
# test_parent_death.sh - a supervised job is never orphaned: when `oomless run` or `oomless probe`
# itself is killed with SIGKILL (it cannot forward anything then), the job's whole tree dies too:
# its leader, a grandchild in its process group, one that left the group (setpgid) or the
# session (setsid), and one re-parented by a double fork. The guardian between oomless and the
# job (lib/job/guard.c) does it; killed itself, the job still dies (oomless, the subreaper,
# kills the rest). A job that ends normally leaves nothing behind.
. "$OOMLESS_SRC/tests/cli/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE OOMLESS_BATCH_SIZE

fake_job_gpu
JOB=("$FAKE_JOB" --batch-size '{batch}' --procdir "$TMP/procs" --capacity 8G --step-time-ms 20
    --steps 100000 --fixed 1G --per-sample 1M)
# A process that sleeps without a word (a job that prints would also die of SIGPIPE once
# oomless is gone; these must die of the kill alone), after leaving its group or session
cat >"$TMP/sleeper.py" <<'EOF'
import os, sys, time
if os.environ.get("SLEEPER_LOG"):
    with open(os.environ["SLEEPER_LOG"], "a") as f:
        f.write("%d\n" % os.getpid())
if sys.argv[1] == "setsid":
    os.setsid()
elif sys.argv[1] == "setpgid":
    os.setpgid(0, 0)
time.sleep(1000)
EOF
# the job's tree: a shell with five sleepers (its $1: sleeper.py, $2: the marker)
TREE='python3 "$1" none "$2" &
python3 "$1" setsid "$2" &
python3 "$1" setpgid "$2" &
(python3 "$1" none "$2" &)
(python3 "$1" setsid "$2" &)
wait'

# whatever a failing check leaves is killed at the end (each marker starts with this prefix)
PREFIX="oomless-parent-death-$$-"
trap 'kill -KILL $(pgrep -f -- "sleeper.py [a-z]* $PREFIX") 2>/dev/null; rm -rf "$TMP"' EXIT

# live PIDS...: those of the PIDs that are alive (not zombies)
live() {
    local p st
    for p in "$@"; do
        st=$(ps -o stat= -p "$p" 2>/dev/null)
        if [ -n "$st" ] && [ "${st#Z}" = "$st" ]; then echo "$p"; fi
    done
}
# marked: the live processes whose command line holds $MARK, oomless itself aside
marked() { live $(pgrep -f -- "$MARK" | grep -vx "$PARENT"); }
sleepers() { live $(pgrep -f -- "sleeper.py [a-z]* $MARK"); }
all_started() { [ "$(sleepers | wc -l)" -ge "$WANT" ]; }
none_left() { [ -z "$(marked)" ]; }

# start WANT CMD...: oomless in the background, until WANT sleepers run (or the fake job, for 0)
start() {
    WANT=$1
    shift
    "$@" >/dev/null 2>&1 &
    PARENT=$!
    if [ "$WANT" -eq 0 ]; then
        WANT=1
        sleepers() { live $(pgrep -f -- "fakejob.*$MARK"); }
    else
        sleepers() { live $(pgrep -f -- "sleeper.py [a-z]* $MARK"); }
    fi
    poll 30 all_started
}
# gone WHAT: after the kill, nothing of the job is left
gone() {
    if poll 10 none_left; then ok; else
        bad "$1: outlived oomless killed by SIGKILL: $(ps -o pid=,ppid=,pgid=,sid=,args= -p "$(marked | paste -sd,)")"
        kill -KILL $(marked) 2>/dev/null
    fi
}

N=0
for cmd in run probe run-tree probe-tree; do
    N=$((N + 1))
    MARK="$PREFIX$N"
    case $cmd in
    run) start 0 "$OOMLESS_BIN" run --batch-size 4 -- "${JOB[@]}" --marker "$MARK" ;;
    probe) start 0 "$OOMLESS_BIN" probe --calibration off -- "${JOB[@]}" --marker "$MARK" ;;
    run-tree) start 5 "$OOMLESS_BIN" run --batch-size 4 -- sh -c "$TREE" sh "$TMP/sleeper.py" "$MARK" ;;
    probe-tree) start 5 "$OOMLESS_BIN" probe --calibration off --max-trials 1 -- sh -c "$TREE" sh \
        "$TMP/sleeper.py" "$MARK" ;;
    esac
    if [ $? -eq 0 ]; then ok; else bad "$cmd: the job never started ($(sleepers | wc -l) of $WANT)"; fi
    sleep 0.3
    kill -KILL "$PARENT"
    wait "$PARENT" 2>/dev/null
    gone "$cmd"
done

# the guardian itself SIGKILLed: the leader dies with it (its parent-death signal), the rest
# comes to oomless, the subreaper, which kills it; oomless goes on and reports the job's end
MARK="${PREFIX}guard"
start 5 "$OOMLESS_BIN" run --batch-size 4 --max-restarts 0 -- sh -c "$TREE" sh "$TMP/sleeper.py" "$MARK" ||
    bad "guardian killed: the job never started"
GUARD=$(pgrep -P "$PARENT")
expect_eq "$(cat "/proc/$GUARD/comm" 2>/dev/null)" "oomless-guard" "the guardian is oomless's child"
kill -KILL "$GUARD"
if poll 10 none_left; then ok; else bad "guardian killed: the job outlived it: $(marked)"; fi
wait "$PARENT"
expect_eq "$?" 137 "guardian killed: oomless reports the job killed (SIGKILL)"

# a job that ends by itself: what it started in the background (in its group, out of it, out of
# its session) does not outlive it
MARK="${PREFIX}normal"
PARENT=0
export SLEEPER_LOG="$TMP/started"
run "$OOMLESS_BIN" run --batch-size 1 -- sh -c "${TREE%wait}"'until [ -f "$SLEEPER_LOG" ] && [ "$(wc -l <"$SLEEPER_LOG")" -ge 5 ]; do sleep 0.1; done; exit 3' \
    sh "$TMP/sleeper.py" "$MARK"
unset SLEEPER_LOG
expect_rc 3 "a job that ends by itself: its status"
expect_eq "$(wc -l <"$TMP/started")" 5 "a job that ends by itself: its five sleepers started"
expect_eq "$(live $(cat "$TMP/started"))" "" "a job that ends by itself: nothing of it left"
finish
