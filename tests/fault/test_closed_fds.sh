#!/bin/bash
# test_closed_fds.sh - oomless started with a standard descriptor closed (`2>&-`, `>&-`, `<&-`):
# its own files must not take fd 0-2 (the events JSONL would receive stderr text, the watch CSV
# the snapshots), and a job must still get working standard descriptors.
. "$OOMLESS_SRC/tests/cli/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE OOMLESS_BATCH_SIZE

# run with stderr closed: the events file opened first must not become fd 2
"$OOMLESS_BIN" run --batch-size 1 --events "$TMP/ev.jsonl" -- sh -c 'echo job-out' \
    >"$TMP/out" 2>&-
RC=$?
expect_eq "$RC" 0 "run 2>&-: the job's status"
expect_eq "$(jq -r .event "$TMP/ev.jsonl" 2>&1 | tr '\n' ' ')" "launch exit " \
    "run 2>&-: the events file holds only JSON events"
expect_eq "$(cat "$TMP/out")" "job-out" "run 2>&-: the job's stdout passes through"

# run with stdout closed: the job's stderr pipe must not be closed in the child (a Python job
# writing to stderr then dies); the job's stdout is dropped, its stderr still reaches oomless's
"$OOMLESS_BIN" run --batch-size 1 -- python3 -c \
    'import os, sys; os.fstat(1); print("to-stdout"); sys.stderr.write("to-stderr\n")' \
    >&- 2>"$TMP/err1"
RC=$?
expect_eq "$RC" 0 "run >&-: a Python job writing to both streams exits 0"
expect_contains "$(cat "$TMP/err1")" "to-stderr" "run >&-: the job's stderr reaches oomless's"

# probe with stdin and stdout closed: the job's descriptors are its own pipes, and its stdin
# is open (reading it gives EOF, not EBADF)
"$OOMLESS_BIN" run --batch-size 1 -- python3 -c \
    'import sys, os; os.fstat(0); sys.stderr.write("stdin-open\n")' <&- >&- 2>"$TMP/err2"
RC=$?
expect_eq "$RC" 0 "run <&- >&-: the job has a stdin"
expect_contains "$(cat "$TMP/err2")" "stdin-open" "run <&- >&-: the job ran to the end"

# watch with stdout closed: the CSV log must not become fd 1 and receive the text snapshots
fake_nvml 'gpu name="NVIDIA A100-SXM4-80GB" total=85899345920 used=1073741824'
"$OOMLESS_BIN" watch --count 1 --no-tui --log "$TMP/w.csv" >&- 2>"$TMP/werr"
RC=$?
expect_eq "$RC" 0 "watch >&-: exit 0"
expect_eq "$(grep -vc '^timestamp,\|^[0-9]' "$TMP/w.csv")" 0 "watch >&-: the CSV holds only CSV rows"
no_nvml

# every descriptor closed at once still runs (nothing to say, nowhere to say it)
"$OOMLESS_BIN" run --batch-size 1 --events "$TMP/ev2.jsonl" -- true <&- >&- 2>&-
RC=$?
expect_eq "$RC" 0 "run <&- >&- 2>&-: exit 0"
expect_eq "$(jq -r .event "$TMP/ev2.jsonl" 2>&1 | tr '\n' ' ')" "launch exit " \
    "run with 0-2 closed: the events file holds only JSON events"
finish
