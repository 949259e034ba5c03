#!/usr/bin/env bash
# test_run_snapshot.sh - `oomless run` and the job's oom_snapshot event (what filled the memory,
# written by oomless.torch into the --events file): the summary after the restart line, in
# --json, in `watch --events`; --memory-history reaches the job. The job here is a shell script
# that appends the event itself (tests/data/run/snapshot_job.sh; the Python side:
# tests/torch/test_oom_snapshot.py).
. "$(dirname "$0")/lib.sh"

fake_job_gpu
cp "$OOMLESS_SRC/tests/data/run/snapshot_job.sh" "$TMP/job.sh" # the snapshot unless SNAP is empty
LINE="oomless run: at the out of memory, largest: 3.10 GiB model.py:88 forward \`logits = self.lm_head(h)\`, 2.20 GiB model.py:40 forward (4 tensors); allocated 6.00 GiB of 7.00 GiB reserved, 512.0 MiB inactive split; tried 2.00 GiB; rank 0; step 2"

# ---- the job wrote a snapshot: one line after the restart line, the event in --json ----------
SNAP=1 oom run --batch-size 8 --events "$TMP/ev.jsonl" --memory-history 5000 --json -- "$TMP/job.sh"
expect_rc 0 "run with a snapshot"
expect_eq "$(grep -A1 'restarting with batch 8 -> 4' <<<"$ERR" | tail -1)" "$LINE" "summary after the restart line"
expect_eq "$(grep -c 'at the out of memory' <<<"$ERR")" 1 "the summary once"
expect_contains "$ERR" "history=5000" "--memory-history exported as OOMLESS_MEMORY_HISTORY"
expect_eq "$(jq -c '.oom_snapshot | [.event, .step, .rank, .origins[1].count]' <<<"$OUT")" \
    '["oom_snapshot",2,0,4]' "--json: the last snapshot event"
# the job may write before run writes its launch event: the snapshot comes before the oom
expect_eq "$(jq -r 'select(.event != "oom_snapshot") | .event' "$TMP/ev.jsonl" | tr '\n' ' ')" \
    "launch oom restart launch exit " "run's events"
expect_eq "$(jq -r .event "$TMP/ev.jsonl" | grep -m1 -n -e oom_snapshot -e '^oom$' | cut -d: -f2)" \
    "oom_snapshot" "the snapshot before the oom"

# ---- watch lists it with its summary ----------------------------------------------------------
grep oom_snapshot "$TMP/ev.jsonl" >"$TMP/snap.jsonl" # the text view lists the last 5 events
oom watch --once --events "$TMP/snap.jsonl"
expect_rc 0 "watch --events"
expect_contains "$OUT" "oom_snapshot pid 7  largest: 3.10 GiB model.py:88 forward" "watch: the summary"

# ---- no snapshot: no summary line, null in --json; no --memory-history: nothing exported -------
SNAP= oom run --batch-size 8 --events "$TMP/ev2.jsonl" --json -- "$TMP/job.sh"
expect_rc 0 "run without a snapshot"
expect_not_contains "$ERR" "at the out of memory" "no summary"
expect_contains "$ERR" "history=none" "no history asked"
expect_eq "$(jq -c .oom_snapshot <<<"$OUT")" "null" "--json: null"

# ---- a snapshot of an earlier run in the same file is not this run's ----------------------------
SNAP= oom run --batch-size 8 --events "$TMP/ev.jsonl" --json -- "$TMP/job.sh"
expect_not_contains "$ERR" "at the out of memory" "an older snapshot is not shown"
expect_eq "$(jq -c .oom_snapshot <<<"$OUT")" "null" "--json: null for an older snapshot"

# ---- the last attempt's snapshot is shown when no restart follows -------------------------------
SNAP=1 oom run --batch-size 8 --max-restarts 0 --events "$TMP/ev3.jsonl" -- "$TMP/job.sh"
expect_rc 1 "out of restarts"
expect_contains "$ERR" "$LINE" "summary without a restart"

oom run --batch-size 8 --memory-history 0 -- "$TMP/job.sh"
expect_rc 2 "--memory-history 0 refused"
finish
