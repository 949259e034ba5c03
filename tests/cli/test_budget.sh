#!/bin/bash
# test_budget.sh - the budget against what the fake GPU really has: memory other processes hold,
# --vram free/auto and over the card, GPU_PROFILE naming another card, bare numbers, the
# underscore spellings, table's parser, estimate on a GPU without bf16, probe beside others.
. "$(dirname "$0")/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE
export XDG_CONFIG_HOME="$TMP/config" XDG_CACHE_HOME="$TMP/cache"
GiB=1073741824
A100=85899345920

# an 80 GiB A100: 1 GiB in use by no named process, pid 4242 holds 10 GiB
fake_nvml "gpu name=\"NVIDIA A100-SXM4-80GB\" uuid=GPU-1 total=$A100 used=$GiB cc=8.0
proc gpu=0 pid=4242 used=$((10 * GiB))"

oom plan --model gpt2 --json
expect_rc 0 "plan beside others"
expect_one_json "plan --json"
expect_json .budget.target_bytes $A100 "target: the card"
expect_json .budget.others_bytes $((11 * GiB)) "others_bytes: 11 GiB in use"
expect_json .budget.others "pid 4242 (10.00 GiB)" "others: the PIDs"
expect_json .budget.usable_bytes $((A100 - 12 * GiB)) "usable = total - others - margin"
expect_contains "$ERR" "other processes hold 11.00 GiB of NVIDIA A100-SXM4-80GB (pid 4242 (10.00 GiB))" "notice names what others hold"

oom estimate --model gpt2 --gpu auto --json
expect_rc 0 "estimate beside others"
expect_json .budget.usable_bytes $((A100 - 12 * GiB)) "estimate: usable leaves others out"
expect_contains "$ERR" "other processes hold 11.00 GiB" "estimate: notice"

oom table --model gpt2 --gpus 0 --json
expect_rc 0 "table on the detected GPU"
expect_json '.tables[0].rows[0].budget.usable_bytes' $((A100 - 12 * GiB)) "table: usable leaves others out"

# watch compares all the memory in use with the budget: others are not also taken off it
oom watch --once --json --vram 80
expect_rc 0 "watch --vram 80 beside others"
expect_json '.gpus[0].budget.usable_bytes' $((A100 - GiB)) "watch: usable = target - margin"
expect_not_contains "$ERR" "other processes hold" "watch: no planning notice"

# --vram smaller than what is left: others do not lower it
oom plan --model gpt2 --vram 24 --json
expect_json .budget.usable_bytes $((23 * GiB)) "--vram 24: 24 - 1"
# --vram free: the free memory is the target
oom plan --model gpt2 --vram free --json
expect_rc 0 "--vram free"
expect_json .budget.target_bytes $((A100 - 11 * GiB)) "--vram free: target = free now"
expect_json .budget.usable_bytes $((A100 - 12 * GiB)) "--vram free: usable"
# --vram auto, --vram_auto, --vram-auto: the card
for v in "--vram auto" --vram_auto --vram-auto; do
    oom plan --model gpt2 $v --json
    expect_rc 0 "$v"
    expect_json .budget.target_bytes $A100 "$v: the card's memory"
done
oom estimate --model gpt2 --vram_auto --json
expect_rc 0 "estimate --vram_auto"
expect_json .budget.target_bytes $A100 "estimate --vram_auto: the detected card"

# --vram over the detected card: refused with its size, unless a profile that large is named
oom plan --model gpt2 --vram 96
expect_rc 2 "--vram over the card"
expect_contains "$ERR" "NVIDIA A100-SXM4-80GB has 80.00 GiB" "--vram over the card: its size"
oom estimate --model gpt2 --gpu auto --vram 96
expect_rc 2 "estimate --vram over the card"
oom probe --vram 96 --calibration off -- "$FAKE_JOB" --batch-size '{batch}'
expect_rc 2 "probe --vram over the card"
oom plan --model gpt2 --vram 96 --gpu h200 --json
expect_rc 0 "--vram 96 --gpu h200"
expect_json .budget.target_bytes $((96 * GiB)) "named profile: --vram kept"
expect_json .budget.others_bytes 0 "named profile: no others"
expect_not_contains "$ERR" "is more than" "--vram under the named card: no notice"
# --vram above the named card's memory: planned for as asked, with a notice naming both sizes
oom plan --model gpt2 --vram 48 --gpu rtx-3090 --json
expect_rc 0 "--vram 48 --gpu rtx-3090"
expect_one_json "--vram over a named card: one document"
expect_json .budget.target_bytes $((48 * GiB)) "--vram over a named card: kept"
expect_contains "$ERR" "--vram '48' (48.00 GiB) is more than NVIDIA GeForce RTX 3090 has (24.00 GiB)" \
    "--vram over a named card: a notice"

# GPU_PROFILE / OOMLESS_GPU naming another card: both named, and which one is planned for
GPU_PROFILE=rtx-4090 oom plan --model gpt2 --json
expect_rc 0 "GPU_PROFILE other card"
expect_contains "$ERR" "GPU_PROFILE names 'rtx-4090'" "mismatch: the variable and its profile"
expect_contains "$ERR" "the GPU detected is NVIDIA A100-SXM4-80GB" "mismatch: the detected card"
expect_contains "$ERR" "planning for 'rtx-4090'" "mismatch: which one is planned for"
expect_json .budget.gpu rtx-4090 "mismatch: the profile is planned for"
OOMLESS_GPU=rtx-4090 oom plan --model gpt2 --json
expect_contains "$ERR" "OOMLESS_GPU names 'rtx-4090'" "OOMLESS_GPU mismatch"
GPU_PROFILE=a100-80gb oom plan --model gpt2 --json
expect_not_contains "$ERR" "names 'a100-80gb'" "the same card: no mismatch notice"

# a bare number: a GPU index when a GPU is detected...
GPU_PROFILE=0 oom plan --model gpt2 --json
expect_rc 0 "GPU_PROFILE=0 with a GPU"
expect_contains "$ERR" "GPU_PROFILE '0' read as a GPU index" "index reading said"
oom plan --model gpt2 --gpu 3
expect_rc 2 "--gpu 3: no such index"
expect_contains "$ERR" "read as a GPU index (a GPU is detected), but index 3 is not visible" "index reading in the error"
# ... and a profile id when none is
no_nvml
oom plan --model gpt2 --gpu 0
expect_rc 3 "--gpu 0 without a GPU: no such profile either, an environment error"
expect_contains "$ERR" "--gpu '0' read as a profile, as no GPU is detected (NVML" "profile reading said, with why"
expect_contains "$ERR" "no profile has that id (unknown GPU profile '0'" "and that no profile has it"
mkdir -p "$TMP/config/oomless"
printf 'gpus:\n  - id: "42"\n    name: Lab card\n    memory: 24GiB\n' >"$TMP/config/oomless/config.yaml"
GPU_PROFILE=42 oom plan --model gpt2 --json
expect_rc 0 "GPU_PROFILE=42 without a GPU: the config's profile"
expect_contains "$ERR" "GPU_PROFILE '42' read as a profile" "profile reading notice"
expect_json .budget.target_bytes $((24 * GiB)) "the profile's memory"
rm -r "$TMP/config/oomless"
oom plan --model gpt2 --vram free
expect_rc 2 "--vram free without a GPU"
expect_contains "$ERR" "--vram free needs a detected GPU" "--vram free: why"

# underscore spellings, as argparse-based training scripts write them
oom plan --model gpt2 --vram 24 --vram_safety_margin 2048 --target_effective_batch 64 --json
expect_rc 0 "plan underscores"
expect_json .budget.safety_margin_bytes $((2 * GiB)) "--vram_safety_margin"
expect_json .plan.effective_batch 64 "--target_effective_batch"
oom estimate --model gpt2 --vram 24 --vram_safety_margin=2048 --json
expect_json .budget.safety_margin_bytes $((2 * GiB)) "estimate --vram_safety_margin="
oom table --model gpt2 --gpus a100-80gb --vram_safety_margin 2048 --format csv
expect_rc 0 "table underscores"
oom gpus --vram 24 --vram_safety_margin 2048 --json
expect_json .budget.safety_margin_bytes $((2 * GiB)) "gpus --vram_safety_margin"
oom run --help
expect_rc 0 "run --help"
oom run --target_effective_batch 0 -- "$FAKE_JOB"
expect_rc 2 "run --target_effective_batch is --target-effective-batch"
expect_contains "$ERR" "--target-effective-batch '0'" "run --target_effective_batch checked"

# table parses as plan does: unknown options refused, -- takes the probed command
oom table --model gpt2 --no-such-option 1
expect_rc 2 "table: unknown option"
expect_contains "$ERR" "unknown option '--no-such-option'" "table: unknown option named"
oom plan --model gpt2 --no-such-option 1
expect_rc 2 "plan: the same refusal"
oom table --gpus a100-80gb --calibration "$TMP/none.jsonl" -- "$FAKE_JOB" --batch-size '{batch}'
TABLE_RC=$RC TABLE_ERR=$ERR
oom plan --gpu a100-80gb --calibration "$TMP/none.jsonl" -- "$FAKE_JOB" --batch-size '{batch}'
expect_eq "$TABLE_RC" "$RC" "table -- CMD: as plan"
expect_not_contains "$TABLE_ERR" "unexpected argument" "table accepts --"
expect_contains "$TABLE_ERR" "$(printf '%s' "$ERR" | sed 's/^oomless plan: //')" "table -- CMD: plan's message"
oom table --model gpt2 --gpu a100-80gb
expect_rc 2 "table --gpu"
expect_contains "$ERR" "use --gpus LIST" "table --gpu: what to use"

# estimate on a GPU without bf16 (a T4, compute capability 7.5): amp-fp16, as plan picks
fake_nvml 'gpu name="Tesla T4" uuid=GPU-T4 total=16106127360 used=0 cc=7.5'
oom estimate --model gpt2 --gpu auto --json
expect_rc 0 "estimate on a T4"
expect_contains "$ERR" "has no bf16 tensor cores: estimating with amp-fp16" "T4: notice"
expect_json .workload.precision amp-fp16 "T4: amp-fp16"
oom estimate --model gpt2 --gpu auto --method lora --json
expect_json .workload.precision fp16 "T4 lora: fp16"
oom estimate --model gpt2 --gpu v100-16gb --json
expect_rc 0 "estimate on a V100 profile"
expect_json .workload.precision amp-fp16 "V100 profile: amp-fp16"
oom plan --model gpt2 --gpu auto --json
expect_json .estimate_precision amp-fp16 "plan on the T4: amp-fp16 too"

# probe beside others: the job's peak plus what others hold stays under target - margin
fake_job_gpu
echo "proc gpu=0 pid=999999 used=$GiB" >>"$TMP/nvml.spec"
JOB=("$FAKE_JOB" --batch-size '{batch}' --procdir "$TMP/procs" --capacity 8G --step-time-ms 20)
oom probe --json --calibration off -- "${JOB[@]}" --fixed 1G --per-sample 10M
expect_rc 0 "probe beside 1 GiB"
expect_json .usable_bytes $((6 * GiB)) "probe: usable = 8 - 1 in use - 1"
expect_json .recommended_batch 512 "probe: (6144 - 1024) / 10"
LIMIT=$(awk 'BEGIN { b = 0; while (1024 + (b + 1) + (b + 1) * (b + 1) / 16 <= 6144) b++; print b }')
oom probe --json --calibration off -- "${JOB[@]}" --fixed 1G --per-sample 1M --per-sample2 64K
REC=$(printf '%s' "$OUT" | jq .recommended_batch)
PEAK=$((1024 + REC + REC * REC / 16))
if [ "$((PEAK + 1024))" -le 7168 ] && [ "$REC" -ge $((LIMIT - 1)) ]; then ok; else
    bad "quadratic beside others: batch $REC peaks at $PEAK MiB + 1024 MiB others (limit $LIMIT)"; fi

# others that start while a trial runs (not the job's children) come off the budget too
fake_job_gpu
sleep 300 &
OTHER=$!
cat >"$TMP/job.sh" <<EOS
#!/bin/bash
echo "0 $GiB" >"$TMP/procs/$OTHER"
exec "\$@"
EOS
chmod +x "$TMP/job.sh"
oom probe --json --calibration off -- "$TMP/job.sh" "${JOB[@]}" --fixed 1G --per-sample 10M
kill "$OTHER"
wait "$OTHER" 2>/dev/null
expect_rc 0 "probe with others arriving"
expect_contains "$ERR" "other processes took 1.00 GiB more GPU memory during the trial at batch 1" "arrival said"
expect_json .usable_bytes $((6 * GiB)) "arrival: usable lowered by 1 GiB"
expect_json .recommended_batch 512 "arrival: batch under the lowered budget"

# a budget smaller than the card (--vram 4 on 8 GiB: 3 GiB usable) keeps what still fits beside
# others that arrive: 1 GiB of them leaves 8 - 1 - 1 = 6 GiB of room, the budget stays 3 GiB
# (the H200 of 2026-11-28: 56 GiB of other jobs beside a 24 GiB probe took its budget to 0);
# 5 GiB of them leave 8 - 5 - 1 = 2 GiB, and the budget comes down to it
for ARRIVE in 1 5; do
    fake_job_gpu
    sleep 300 &
    OTHER=$!
    cat >"$TMP/job.sh" <<EOS
#!/bin/bash
echo "0 $((ARRIVE * GiB))" >"$TMP/procs/$OTHER"
exec "\$@"
EOS
    chmod +x "$TMP/job.sh"
    oom probe --json --calibration off --vram 4 -- "$TMP/job.sh" "${JOB[@]}" --fixed 1G --per-sample 10M
    kill "$OTHER"
    wait "$OTHER" 2>/dev/null
    expect_rc 0 "probe --vram 4 with $ARRIVE GiB of others arriving"
    if [ "$ARRIVE" = 1 ]; then
        expect_contains "$ERR" "other processes took 1.00 GiB more GPU memory during the trial at batch 1; the usable budget (3.00 GiB) still fits beside them" "room said"
        expect_json .usable_bytes $((3 * GiB)) "--vram 4 beside 1 GiB arriving: the budget stays"
        expect_json .recommended_batch 204 "--vram 4: (3072 - 1024) / 10"
    else
        expect_contains "$ERR" "the usable budget is now 2.00 GiB" "room lowered said"
        expect_json .usable_bytes $((2 * GiB)) "--vram 4 beside 5 GiB arriving: 8 - 5 - 1"
        expect_json .recommended_batch 102 "--vram 4 beside 5 GiB: (2048 - 1024) / 10"
    fi
done

# table -- CMD: the line probe measured for the command, one row per GPU (here the detected one)
fake_job_gpu
oom probe --calibration "$TMP/cal.jsonl" -- "${JOB[@]}" --fixed 1G --per-sample 10M
expect_rc 0 "probe for table"
oom table --gpus 0 --calibration "$TMP/cal.jsonl" --json -- "${JOB[@]}" --fixed 1G --per-sample 10M
expect_rc 0 "table -- CMD"
expect_json '.tables[0].rows[0].budget.usable_bytes' $((7 * GiB)) "table -- CMD: the GPU's budget"
expect_json '.tables[0].rows[0].model' "measured line" "table -- CMD: planned on the measured line"

finish
