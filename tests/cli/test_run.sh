# test_run.sh - `oomless run`: recovery from OOM, batch sources, signals, no process left behind.
. "$(dirname "$0")/lib.sh"
: "${FAKE_JOB:?run through ctest}"

fake_job_gpu
JOB=("$FAKE_JOB" --batch-size '{batch}' --grad-accum '{accum}' --procdir "$TMP/procs" --capacity 8G
    --step-time-ms 20)
N=0
marker() { N=$((N + 1)); MARK="oomless-run-test-$$-$N"; }
left() { pgrep -f "$MARK" | wc -l; } # processes still carrying this test's marker
# wait_for FILE TEXT: polls (up to 60 s) until FILE contains TEXT
wait_for() { poll 60 grep -q "$2" "$1" 2>/dev/null; }
none_left() { [ "$(left)" -eq 0 ]; }
# launches FILE: the batches of the launch events, space-separated
launches() { jq -r 'select(.event == "launch") | .batch' "$1" | tr '\n' ' '; }
# wait_gone: polls (up to 30 s) until no process carries the marker
wait_gone() { poll 30 none_left; }

# ---- recovery: 1 GiB + 150 MiB/sample; the last step needs 1.5x: 32 dies there, 16 fits ---------
# (the spike is the last step so that the final sample, taken while the job is a zombie, sees it
# whatever the machine's load)
marker
oom run --batch-size 32 --grad-accum 2 --events "$TMP/ev.jsonl" -- "${JOB[@]}" --steps 6 \
    --fixed 1G --per-sample 150M --spike-step 6 --spike-factor 1.5 --checkpoint "$TMP/ckpt" \
    --marker "$MARK"
expect_rc 0 "recovered run"
expect_contains "$ERR" "out of memory at step 5 (peak " "restart line: step and peak"
expect_contains "$ERR" "restarting with batch 32 -> 16, accumulation 2 -> 4 (effective 64)" "restart line"
expect_contains "$ERR" "torch.OutOfMemoryError: CUDA out of memory" "the job's stderr passes through"
expect_contains "$OUT" "resuming from step 5" "resumed from the checkpoint"
expect_contains "$OUT" "step 6/6 batch 16 accum 4" "relaunched smaller, same effective batch"
expect_not_contains "$OUT" "step 1/6 batch 16" "did not start over"
expect_eq "$(cat "$TMP/ckpt")" 6 "finished all steps"
expect_eq "$(jq -r .event "$TMP/ev.jsonl" | tr '\n' ' ')" "launch oom restart launch exit " "events"
expect_eq "$(jq -r 'select(.event == "restart") | "\(.batch) \(.grad_accum) \(.previous_batch) \(.previous_grad_accum) \(.attempt)"' "$TMP/ev.jsonl")" \
    "16 4 32 2 2" "restart event"
# the limit found is saved (keyed as probe's records) and the next run without a batch starts there
expect_contains "$ERR" "batch 16 saved as this command's limit" "limit saved"
expect_eq "$(jq -r 'select(.max_batch == 16) | .gpu' "$TMP/cache/oomless/calibration.jsonl")" \
    "NVIDIA A100-SXM4-80GB" "limit record: GPU and max_batch"
rm -f "$TMP/ckpt" # the same command (the record's key), from its start
oom run --target-effective-batch 64 -- "${JOB[@]}" --steps 6 \
    --fixed 1G --per-sample 150M --spike-step 6 --spike-factor 1.5 --checkpoint "$TMP/ckpt" \
    --marker "$MARK"
expect_rc 0 "run from the saved limit"
expect_contains "$ERR" "batch 16 from the calibration record" "the next run starts at the limit"
expect_eq "$(jq -r 'select(.event == "exit") | "\(.exit_code) \(.peak_bytes) \(.batch)"' "$TMP/ev.jsonl")" \
    "0 $(((1024 + 16 * 150) * 3 / 2 * 1048576)) 16" "exit event with the spike peak"
expect_eq "$(jq -r 'select(.event == "oom") | .exit_code' "$TMP/ev.jsonl")" 1 "oom event"
expect_eq "$(jq -s 'map(has("time") and has("pid") and has("attempt") and has("peak_bytes")) | all' "$TMP/ev.jsonl")" \
    true "event keys"
expect_eq "$(left)" 0 "recovered run: nothing left"

# a peak held for 0.5 s in the middle of the run (not at the end) is caught by the 50 ms sampling
oom run --batch-size 4 --events "$TMP/mid.jsonl" -- "$FAKE_JOB" --batch-size '{batch}' \
    --procdir "$TMP/procs" --steps 3 --step-time-ms 500 --fixed 1G --per-sample 100M \
    --spike-step 2 --spike-factor 2
expect_rc 0 "mid-run spike"
expect_eq "$(jq -r 'select(.event == "exit") | .peak_bytes' "$TMP/mid.jsonl")" \
    $(((1024 + 400) * 2 * 1048576)) "mid-run spike: the peak is the spike"

# {attempt} is replaced inside an argument: each attempt gets its own checkpoint file here
oom run --batch-size 32 -- "${JOB[@]}" --steps 2 --fixed 1G --per-sample 150M --spike-step 2 \
    --spike-factor 1.5 --checkpoint "$TMP/att{attempt}.ckpt"
expect_rc 0 "{attempt} run"
expect_eq "$(cat "$TMP/att1.ckpt")-$(cat "$TMP/att2.ckpt")" "1-2" "{attempt}: one checkpoint per attempt"

# ---- which error ended the job ---------------------------------------------------------------------
# the OOM traceback is followed by 40 KiB of teardown lines: still an OOM death, relaunched
oom run --batch-size 8 -- "${JOB[@]}" --steps 2 --fixed 1G --per-sample 1G --after-oom 40K
expect_rc 0 "OOM followed by 40 KiB of output: recovered"
expect_contains "$ERR" "restarting with batch 8 -> 4" "OOM followed by 40 KiB of output: relaunched"
# an OOM the job handled, then a different fatal error: the job's own failure, no relaunch
oom run --batch-size 4 -- sh -c 'echo "torch.OutOfMemoryError: CUDA out of memory (caught)" >&2
    printf "Traceback (most recent call last):\n  File \"t.py\", line 3\nValueError: bad\n" >&2
    exit 1'
expect_rc 1 "handled OOM, then another error: the job's status"
expect_not_contains "$ERR" "restarting" "handled OOM, then another error: not relaunched"
expect_contains "$ERR" "the job exited 1 after 1 attempt(s)" "handled OOM, then another error: one attempt"
# an OOM message in the job's stdout data (a generated text, a dataset sample), nothing on stderr:
# not an OOM, no relaunch (issue 31); the same words as an exception line on stdout are one
oom run --batch-size 4 -- sh -c 'echo "sample 3: why does training stop with CUDA out of memory?"
    exit 1'
expect_rc 1 "OOM words in stdout data: the job's status"
expect_not_contains "$ERR" "restarting" "OOM words in stdout data: not relaunched"
expect_contains "$ERR" "the job exited 1 after 1 attempt(s)" "OOM words in stdout data: one attempt"
oom run --batch-size 4 --max-restarts 1 -- sh -c 'echo "torch.OutOfMemoryError: CUDA out of memory."
    exit 1'
expect_contains "$ERR" "restarting with batch 4 -> 2" "an OOM exception line on stdout: relaunched"

# ---- --json: one document on stdout, the job's stdout on stderr -------------------------------
oom run --json --batch-size 4 -- "${JOB[@]}" --fixed 1G --per-sample 1M --exit 7
expect_rc 7 "the job's status is passed on"
expect_one_json "run --json"
expect_json .exit_code 7 "run --json: exit code"
expect_json .attempts 1 "run --json: attempts"
expect_contains "$ERR" "step 3/3 batch 4" "run --json: job output on stderr"

# ---- batch sources ------------------------------------------------------------------------------
OOMLESS_BATCH_SIZE=5 OOMLESS_GRAD_ACCUM=3 oom run -- "${JOB[@]}" --fixed 1G --per-sample 1M
expect_contains "$OUT" "step 1/3 batch 5 accum 3" "batch from OOMLESS_BATCH_SIZE"
printf '{"plan": {"batch_size": 8, "grad_accum": 2}}' >"$TMP/plan.json"
oom run --plan "$TMP/plan.json" -- "${JOB[@]}" --fixed 1G --per-sample 1M
expect_contains "$OUT" "step 1/3 batch 8 accum 2" "batch from a plan file"
run "$OOMLESS_BIN" run --plan - -- "${JOB[@]}" --fixed 1G --per-sample 1M <"$TMP/plan.json"
expect_contains "$OUT" "step 1/3 batch 8 accum 2" "plan from stdin"
printf '{"plan": {"grad_accum": 2}}' >"$TMP/bad.json"
oom run --plan "$TMP/bad.json" -- "${JOB[@]}"
expect_rc 2 "plan without batch_size"
expect_contains "$ERR" "batch_size" "plan without batch_size: key named"
# a plan with a UTF-8 byte order mark (a Windows editor saved it) is read as without it
printf '\357\273\277{"plan": {"batch_size": 7, "grad_accum": 2}}\r\n' >"$TMP/bom-plan.json"
oom run --plan "$TMP/bom-plan.json" -- "${JOB[@]}" --fixed 1G --per-sample 1M
expect_contains "$OUT" "step 1/3 batch 7 accum 2" "a plan with a byte order mark"
# a valid plan nesting 100,000 deep: too deep for json-c, said so (not "not a JSON object")
{
    printf '{"plan": {"batch_size": 7}, "x": '
    head -c 100000 /dev/zero | tr '\0' '['
    head -c 100000 /dev/zero | tr '\0' ']'
    printf '}'
} >"$TMP/deep-plan.json"
oom run --plan "$TMP/deep-plan.json" -- "${JOB[@]}"
expect_rc 2 "a plan nesting 100,000 deep"
expect_contains "$ERR" "plan '$TMP/deep-plan.json' nests deeper than 32 levels, the most json-c reads" \
    "a plan nesting 100,000 deep: file and limit named"
rm -f "$TMP/bom-plan.json" "$TMP/deep-plan.json"
# a plan of any size up to the cap (64 MiB): a real plan padded past 1 MiB (many alternatives, a
# curve and several GPUs make plans this large); a file past the cap is refused by name
oom plan --model gpt2 --seq 512 --gpu a100-80gb --target-effective-batch 32 --json
printf '%s\n' "$OUT" >"$TMP/real-plan.json"
PLAN_BATCH=$(jq -r .plan.batch_size "$TMP/real-plan.json")
PLAN_ACCUM=$(jq -r .plan.grad_accum "$TMP/real-plan.json")
{
    printf '{"padding": ["%s"],\n' "$(head -c 1100000 /dev/zero | tr '\0' x)"
    tail -c +2 "$TMP/real-plan.json"
} >"$TMP/big-plan.json"
expect_eq "$(jq -r .plan.batch_size "$TMP/big-plan.json")" "$PLAN_BATCH" "padded plan is still the plan"
[ "$(wc -c <"$TMP/big-plan.json")" -gt 1048576 ] && ok || bad "padded plan is not above 1 MiB"
oom run --plan "$TMP/big-plan.json" -- "${JOB[@]}" --fixed 1G --per-sample 1M
expect_rc 0 "run --plan with a 1 MiB plan"
expect_contains "$OUT" "step 1/3 batch $PLAN_BATCH accum $PLAN_ACCUM" "batch from a 1 MiB plan"
run "$OOMLESS_BIN" run --plan - -- "${JOB[@]}" --fixed 1G --per-sample 1M <"$TMP/big-plan.json"
expect_contains "$OUT" "step 1/3 batch $PLAN_BATCH accum $PLAN_ACCUM" "1 MiB plan from stdin"
truncate -s 73505997 "$TMP/huge-plan.json" # 70.1 MiB
oom run --plan "$TMP/huge-plan.json" -- "${JOB[@]}"
expect_rc 2 "a plan past the cap"
expect_contains "$ERR" "$TMP/huge-plan.json: 70.1 MiB is larger than the 64 MiB this reads" \
    "a plan past the cap: size and cap named"
oom run --plan - -- "${JOB[@]}" < <(head -c 68000000 /dev/zero)
expect_rc 2 "a plan from stdin past the cap"
expect_contains "$ERR" "standard input: more than the 64 MiB this reads" "stdin past the cap"
rm -f "$TMP/real-plan.json" "$TMP/big-plan.json" "$TMP/huge-plan.json"
oom run --calibration off -- "${JOB[@]}"
expect_rc 2 "no batch anywhere"
# a calibration record from probe: 1 GiB + 10 MiB/sample -> 614 under 7 GiB
oom probe --calibration "$TMP/cal.jsonl" -- "${JOB[@]}" --fixed 1G --per-sample 10M
expect_rc 0 "probe for calibration"
oom run --calibration "$TMP/cal.jsonl" -- "${JOB[@]}" --fixed 1G --per-sample 10M
expect_rc 0 "run from calibration"
expect_contains "$ERR" "batch 614 from the calibration record" "batch from calibration"
expect_contains "$OUT" "step 1/3 batch 614 accum 1" "calibration batch used"

# ---- the ladder follows the measured peaks: a prime effective batch is not cut to a divisor ----
# 1 GiB + 30 MiB/sample in 8 GiB: 307 needs 9.99 GiB; the peak and the failed allocation give the
# next batch (95 % of the capacity: no margin, so that the budget is the whole 8 GiB), and 307
# has no divisor near it: inexact accumulation
# ladder NAME FIXED PER_SAMPLE: runs the job at batch 307 with events in $TMP/NAME.jsonl
ladder() {
    oom run --batch-size 307 --vram-safety-margin 0 --events "$TMP/$1.jsonl" "${@:4}" -- \
        "${JOB[@]}" --steps 2 \
        --fixed "$2" --per-sample "$3" --marker "$MARK"
    expect_rc 0 "$1: recovered"
}
marker
ladder prime 1G 30M --json
# the document says what the last launch ran, and the target it kept apart
expect_eq "$(jq -c '[.batch, .grad_accum, .effective_batch, .target_effective_batch]' <<<"$OUT")" \
    "[233,1,233,307]" "prime: --json effective batch as run, target apart"
expect_eq "$(launches "$TMP/prime.jsonl")" "307 233 " \
    "prime: 307 -> 233, not 307 -> 1"
expect_contains "$(jq -r 'select(.event == "restart") | .reason' "$TMP/prime.jsonl")" \
    "inexact accumulation: effective batch 233 instead of 307 (-24.1%)" "prime: the event says inexact"
expect_contains "$ERR" "restarting with batch 307 -> 233, accumulation 1 -> 1 (effective 233); attempt 1 alone (out of memory before any step): batch 307 needed 9.99 GiB of 8.00 GiB (total capacity; 8.00 GiB usable budget)" \
    "prime: the restart line says why"
# 4 GiB + 20 MiB/sample: the proportional guess from one attempt (233) is short of the fixed
# part; the line through both attempts then finds 184 (4 GiB + 184 x 20 MiB = 7.6 GiB)
ladder fit 4G 20M
expect_eq "$(launches "$TMP/fit.jsonl")" "307 233 184 " \
    "fit: 307 -> 233 -> 184"
expect_contains "$(jq -r 'select(.event == "restart") | .reason' "$TMP/fit.jsonl" | tail -1)" \
    "fit of attempts 1, 2 (out of memory before any step): " "fit: the basis"
# 50 with 1 GiB + 350 MiB/sample in 8 GiB: one attempt predicts 21, where 10 is the divisor of 50
# below it; 10 keeps over a quarter of 21, so the restart is exact, 10 x 5 = 50, not 21 x 2 = 42
# (what the H200 of 2026-11-28 ran for one attempt under a rule of one half)
oom run --batch-size 50 --vram-safety-margin 0 --events "$TMP/share.jsonl" -- "${JOB[@]}" \
    --steps 2 --fixed 1G --per-sample 350M --marker "$MARK"
expect_rc 0 "share: recovered"
expect_eq "$(launches "$TMP/share.jsonl")" "50 10 " "share: 50 -> 10, the divisor, not 21"
expect_eq "$(jq -r 'select(.event == "restart") | "\(.batch) \(.grad_accum)"' "$TMP/share.jsonl")" \
    "10 5" "share: accumulation 5 keeps the effective 50"
expect_contains "$ERR" "batch 21 predicted to fit" "share: the prediction said"
expect_not_contains "$ERR" "inexact" "share: nothing inexact"
expect_eq "$(left)" 0 "ladder: nothing left"

# ---- a job that never fits stops, bounded ------------------------------------------------------
oom run --batch-size 8 --events "$TMP/nofit.jsonl" -- "${JOB[@]}" --fixed 9G --per-sample 1M
expect_rc 1 "never fits"
expect_contains "$ERR" "does not fit" "never fits: message"
# (8 -> 4 from the one measured peak; the line through two attempts says no batch fits: 1 is the
# last try)
expect_eq "$(launches "$TMP/nofit.jsonl")" "8 4 1 " \
    "never fits: 8 -> 4 -> 1"
oom run --batch-size 64 --max-restarts 2 -- "${JOB[@]}" --fixed 9G --per-sample 1M
expect_rc 1 "max restarts"
expect_contains "$ERR" "after 2 restart(s)" "max restarts: message"
oom run --batch-size 8 --min-batch-size 4 -- "${JOB[@]}" --fixed 9G --per-sample 1M
expect_rc 1 "floor"
expect_contains "$ERR" "no smaller batch >= 4" "floor: message"

# ---- exec failure, usage ------------------------------------------------------------------------
oom run --batch-size 2 -- /nonexistent/train.py
expect_rc 127 "exec failure"
expect_contains "$ERR" "cannot run '/nonexistent/train.py'" "exec failure: message"
oom run --batch-size 2 -- oomless-no-such-command-xyz
expect_rc 127 "command not in PATH"
expect_contains "$ERR" "not found" "command not in PATH: message"
oom run --batch-size 2 -- /etc/hostname
expect_rc 126 "not executable"
oom run --batch-size 0 -- "${JOB[@]}"
expect_rc 2 "bad batch"
expect_contains "$ERR" "'0'" "bad batch: value named"
oom run --batch-size 4 --grad-accum 3 --target-effective-batch 8 -- "${JOB[@]}"
expect_rc 2 "inconsistent effective batch"
# the kill grace is bounded (0 to 3600 s: a job that has not stopped after an hour is killed)
for cmd in "run --batch-size 1" probe; do
    # shellcheck disable=SC2086
    oom $cmd --kill-grace 1e308 -- "${JOB[@]}"
    expect_rc 2 "$cmd --kill-grace 1e308"
    expect_contains "$ERR" "--kill-grace '1e308' must be a number of seconds from 0 to 3600" \
        "$cmd --kill-grace 1e308: the range named"
    # shellcheck disable=SC2086
    oom $cmd --kill-grace 2,5 -- "${JOB[@]}"
    expect_rc 2 "$cmd --kill-grace 2,5"
    expect_contains "$ERR" "--kill-grace '2,5' has a comma: write the decimal separator as '.'" \
        "$cmd --kill-grace 2,5: the decimal comma named"
done

# ---- signals reach the job's group; exit 128+N; nothing left behind ----------------------------
for sig in TERM INT HUP; do
    marker
    "$OOMLESS_BIN" run --batch-size 2 --events "$TMP/sig$sig.jsonl" -- "${JOB[@]}" --steps 100000 \
        --fixed 1G --per-sample 1M --fork-child --marker "$MARK" >"$TMP/out$sig" 2>"$TMP/err" &
    P=$!
    wait_for "$TMP/out$sig" 'step 1/' || bad "SIG$sig: the job never started"
    kill -s "$sig" "$P"
    wait "$P"
    RC=$?
    expect_eq "$RC" $((128 + $(kill -l "$sig"))) "SIG$sig: exit 128+N"
    expect_eq "$(jq -r 'select(.event == "signal") | .signal' "$TMP/sig$sig.jsonl")" "$(kill -l "$sig")" \
        "SIG$sig: forwarded"
    wait_gone || true
    expect_eq "$(left)" 0 "SIG$sig: no process left behind"
done

# a job ignoring SIGTERM is SIGKILLed after the grace; its setsid child goes too
marker
"$OOMLESS_BIN" run --batch-size 2 --kill-grace 1 --events "$TMP/kill.jsonl" -- "${JOB[@]}" \
    --steps 100000 --fixed 1G --per-sample 1M --ignore-sigterm --fork-child-setsid \
    --marker "$MARK" >"$TMP/outkill" 2>"$TMP/err" &
P=$!
wait_for "$TMP/outkill" 'step 1/' || bad "ignore-sigterm: the job never started"
kill -TERM "$P"
wait "$P"
expect_eq "$?" 137 "ignore-sigterm: SIGKILLed after the grace"
expect_contains "$(cat "$TMP/err")" "SIGKILL" "ignore-sigterm: said"
wait_gone || true
expect_eq "$(left)" 0 "ignore-sigterm: no process left behind"

# children that outlive a job that ends by itself are killed with it
for how in --fork-child --fork-child-setsid; do
    marker
    oom run --batch-size 2 -- "${JOB[@]}" --fixed 1G --per-sample 1M "$how" --marker "$MARK"
    expect_rc 0 "$how: job ok"
    expect_eq "$(left)" 0 "$how: the outliving child is gone"
done

# torchrun: the rank that ran out of memory and the line that said so are in the events log
cat >"$TMP/rankjob.sh" <<'SH'
if [ "$1" -gt 2 ]; then
    echo "[rank1]: Traceback (most recent call last):" >&2
    echo "[rank1]:   File \"train.py\", line 9, in <module>" >&2
    echo "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" >&2
    echo "[rank0]: [W1125 torch/distributed] rank 0 exits: peer 1 failed" >&2
    exit 1
fi
SH
oom run --batch-size 4 --events "$TMP/rank.jsonl" -- sh "$TMP/rankjob.sh" '{batch}'
expect_rc 0 "torchrun-style OOM on rank 1 recovered"
expect_eq "$(jq -r 'select(.event == "oom") | .rank' "$TMP/rank.jsonl")" "1" "events: the failed rank"
expect_contains "$(jq -r 'select(.event == "oom") | .reason' "$TMP/rank.jsonl")" \
    "torch.OutOfMemoryError: CUDA out of memory" "events: why"

# oomless.torch / hf / lightning stopped every rank at an agreed micro-batch: exit 75 and an
# OOMLESS_RECOVERY line (no OOM text) relaunch at that micro-batch, not the next divisor
cat >"$TMP/agreed.sh" <<'SH'
echo "$OOMLESS_RECOVERY_EVENTS" >"$2"
if [ "$1" -gt 2 ]; then
    echo 'OOMLESS_RECOVERY {"failed_ranks": [1, 3], "micro_batch": 2, "step": 5}' >&2
    exit 75
fi
SH
oom run --batch-size 8 --events "$TMP/agreed.jsonl" -- sh "$TMP/agreed.sh" '{batch}' "$TMP/env.txt"
expect_rc 0 "agreed micro-batch"
expect_eq "$(jq -r 'select(.event == "restart") | .batch' "$TMP/agreed.jsonl")" "2" \
    "relaunched at the agreed 2 (not 4)"
expect_eq "$(jq -r 'select(.event == "restart") | .grad_accum' "$TMP/agreed.jsonl")" "4" \
    "effective batch kept"
expect_eq "$(jq -r 'select(.event == "oom") | .rank' "$TMP/agreed.jsonl")" "1,3" "failed ranks"
expect_eq "$(cat "$TMP/env.txt")" "$TMP/agreed.jsonl" "OOMLESS_RECOVERY_EVENTS exported"
# an agreed micro-batch that does not divide the effective batch falls back to the next divisor
sed 's/"micro_batch": 2/"micro_batch": 3/' "$TMP/agreed.sh" >"$TMP/agreed3.sh"
oom run --batch-size 8 --events "$TMP/agreed3.jsonl" -- sh "$TMP/agreed3.sh" '{batch}' "$TMP/env.txt"
expect_eq "$(jq -r 'select(.event == "restart") | .batch' "$TMP/agreed3.jsonl" | head -1)" "4" \
    "a non-divisor is not taken"

oom run --help
expect_rc 0 "help"
expect_contains "$OUT" "--target-effective-batch" "help text"

finish
