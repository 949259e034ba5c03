#!/bin/bash
# test_job_control.sh - a job under a terminal and under job control (tests/fault/pty_session.py
# plays a shell and the user at a pseudo-terminal): the job reads the terminal (input()); Ctrl-Z
# stops the job and oomless together and fg continues both; started in the background, a job
# that reads the terminal stops with oomless until fg; without a terminal, SIGTSTP/SIGCONT sent
# to oomless stop and continue the pair, and a job stopped for terminal input it can never get
# is ended with a message instead of waited for.
. "$OOMLESS_SRC/tests/cli/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE OOMLESS_BATCH_SIZE
PTY="$OOMLESS_SRC/tests/fault/pty_session.py"

for scenario in input ctrl-z background-input relay; do
    expect_eq "$(timeout 300 python3 "$PTY" "$scenario" "$OOMLESS_BIN" 2>&1)" ok "$scenario"
done

# no terminal at all (a new session): a job stopped by SIGTTIN would wait forever
ended() {
    local st
    st=$(ps -o stat= -p "$1" 2>/dev/null)
    [ -z "$st" ] || [ "${st#Z}" != "$st" ]
}
setsid "$OOMLESS_BIN" run --batch-size 1 --kill-grace 2 -- sh -c 'kill -TTIN $$; echo resumed' \
    >"$TMP/out" 2>"$TMP/err" &
P=$!
if poll 20 ended "$P"; then
    wait "$P"
    expect_eq "$?" 1 "SIGTTIN without a terminal: exit 1"
else
    bad "SIGTTIN without a terminal: oomless waits for the stopped job"
    kill -KILL "$P"
fi
expect_contains "$(cat "$TMP/err")" "stopped waiting for terminal input (SIGTTIN)" \
    "SIGTTIN without a terminal: said"
expect_not_contains "$(cat "$TMP/out")" "resumed" "SIGTTIN without a terminal: the job was ended"
finish
