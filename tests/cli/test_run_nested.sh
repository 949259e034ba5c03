#!/bin/bash
# test_run_nested.sh - one supervisor per job: `oomless run -- ... oomless run -- job` (a wrapper
# script that runs oomless itself, a probe around a run) relaunches at one level only.
. "$(dirname "$0")/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset OOMLESS_SUPERVISOR OOMLESS_BATCH_SIZE OOMLESS_GRAD_ACCUM

no_nvml
export XDG_CACHE_HOME="$TMP/cache"
# the job: counts its launches (one line each, with its batch), then the fake job, which dies of
# out-of-memory above `--capacity`
cat >"$TMP/job.sh" <<SH
#!/bin/sh
echo "\$OOMLESS_BATCH_SIZE \$OOMLESS_SUPERVISOR" >>"$TMP/launches"
exec "$FAKE_JOB" "\$@"
SH
chmod +x "$TMP/job.sh"
JOB=("$TMP/job.sh" --batch-size '{batch}' --step-time-ms 1)
count() { wc -l <"$TMP/launches" | tr -d ' '; }

# ---- a job that never fits: launched as often as the outer run allows, not that times the inner
# one's (before: 26 launches, each inner run walking its own ladder down to 1)
rm -f "$TMP/launches"
oom run --batch-size 64 --calibration off --events "$TMP/ev.jsonl" -- \
    "$OOMLESS_BIN" run --calibration off -- "${JOB[@]}" --capacity 1G --fixed 2G --per-sample 1M
expect_rc 1 "nested, never fits: does not fit"
expect_eq "$(count)" 6 "nested, never fits: 6 launches (--max-restarts 5, + 1)"
expect_eq "$(jq -r 'select(.event == "launch") | .batch' "$TMP/ev.jsonl" | tr '\n' ' ')" \
    "64 32 16 8 4 2 " "nested: the outer run's ladder"
expect_eq "$(cut -d' ' -f1 "$TMP/launches" | tr '\n' ' ')" "64 32 16 8 4 2 " \
    "nested: each batch launched once"
expect_contains "$ERR" "this run was launched by oomless (pid " "nested: the inner run says so"
expect_contains "$ERR" "the job ran out of memory at batch 64; the oomless (pid " \
    "nested: the inner run leaves the relaunch to the outer one"
expect_contains "$ERR" "ran out of memory at batch 2 after 5 restart(s)" "nested: the outer's limit"
# the job's environment names its supervisor: the inner run, two levels down
expect_eq "$(sed -n 1p "$TMP/launches" | cut -d' ' -f2 | sed 's/pid=[0-9]*,//')" "depth=2" \
    "the job sees its supervisor's depth"

# an inner --max-restarts does not bring back relaunches at both levels
rm -f "$TMP/launches"
oom run --batch-size 8 --calibration off -- "$OOMLESS_BIN" run --max-restarts 3 \
    --calibration off -- "${JOB[@]}" --capacity 1G --fixed 2G --per-sample 1M
expect_rc 1 "nested with an inner --max-restarts"
expect_eq "$(cut -d' ' -f1 "$TMP/launches" | tr '\n' ' ')" "8 4 2 1 " \
    "inner --max-restarts: the outer's ladder only"

# ---- a probe around a run: a trial that runs out of memory is one, not the smaller batch the
# inner run would have relaunched (before: batch 2 "fitted" after the inner run's relaunch at 1)
rm -f "$TMP/launches"
oom probe --json --calibration off --vram 8 --max-trials 4 -- "$OOMLESS_BIN" run \
    --calibration off -- "${JOB[@]}" --capacity 1G --fixed 700M --per-sample 200M
expect_rc 0 "probe around a run"
expect_json .recommended_batch 1 "probe around a run: batch 1 (2 runs out of memory)"
expect_eq "$(count)" "$(printf '%s' "$OUT" | jq '.trials | length')" \
    "probe around a run: one job launch per trial"

# ---- a value that names no ancestor (left from an oomless that ended) or is not ours: ignored,
# with a notice, and the run relaunches as usual
sleep 30 &
OTHER=$!
rm -f "$TMP/launches"
OOMLESS_SUPERVISOR="pid=$OTHER,depth=1" oom run --batch-size 4 --calibration off -- "${JOB[@]}" \
    --capacity 1G --fixed 700M --per-sample 200M
expect_rc 0 "a stale supervisor: relaunched itself"
expect_contains "$ERR" "names pid $OTHER, which did not start this process" "stale: said"
expect_eq "$(cut -d' ' -f1 "$TMP/launches" | tr '\n' ' ')" "4 2 1 " "stale: its own ladder"
kill "$OTHER"
wait "$OTHER" 2>/dev/null
OOMLESS_SUPERVISOR="run 12" oom run --batch-size 1 --calibration off -- "${JOB[@]}" \
    --capacity 1G --fixed 700M --per-sample 200M
expect_rc 0 "a malformed supervisor"
expect_contains "$ERR" "\$OOMLESS_SUPERVISOR 'run 12' is not pid=PID,depth=N: ignored" \
    "malformed: said"

finish
