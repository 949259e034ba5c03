#!/bin/bash
# test_plan_calibrated.sh - `oomless plan -- CMD...` plans on the line `oomless probe -- CMD...`
# measured for the same command on the same GPU.
. "$(dirname "$0")/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset OOMLESS_BATCH_SIZE OOMLESS_GPU GPU_PROFILE CUDA_VISIBLE_DEVICES

fake_job_gpu cc=8.0
JOB=("$FAKE_JOB" --batch-size '{batch}' --procdir "$TMP/procs" --capacity 8G --fixed 1G --per-sample 10M)

# before any probe: a clear refusal naming the GPU
oom plan --json --target-effective-batch 64 -- "${JOB[@]}"
expect_rc 2 "no record yet"
expect_contains "$ERR" "no calibration record" "says there is no record"
expect_contains "$ERR" "NVIDIA A100-SXM4-80GB" "names the GPU"

oom probe --json -- "${JOB[@]}"
expect_rc 0 "probe"
expect_json .recommended_batch 614 "probe's answer"

# the effective batch 1024: the largest divisor under the line's limit (614) is 512
oom plan --json --target-effective-batch 1024 -- "${JOB[@]}"
expect_rc 0 "calibrated plan"
expect_one_json "calibrated plan json"
expect_json .plan.batch_size 512 "micro-batch from the measured line"
expect_json .plan.grad_accum 2 "accumulation keeps the effective batch"
expect_json .memory.device_peak $((1073741824 + 512 * 10485760)) "peak from the measured line"

# a newer record for the same command with a value no probe writes (NaN: a hand edit, another
# tool): skipped as damaged, with a notice naming the line and the field, and the plan made from
# the record before it. Before, its NaN line was taken: batch 1 "needs 8.00 EiB".
CAL="$TMP/cache/oomless/calibration.jsonl"
for bad in '"fixed_bytes":NaN' '"per_sample_bytes":-Infinity' '"fixed_bytes":-5000000000' \
    '"per_sample2_bytes":1e30'; do
    cp "$CAL" "$TMP/good.jsonl"
    key=${bad%%:*}
    sed -n 1p "$CAL" | sed -E "s/$key:[^,}]*/$bad/; s/\"time\":[0-9.]*/\"time\":9999999999/" >>"$CAL"
    oom plan --json --target-effective-batch 1024 -- "${JOB[@]}"
    expect_rc 0 "a damaged newer record ($bad): the good one used"
    expect_json .plan.batch_size 512 "a damaged newer record ($bad): the measured line's batch"
    expect_contains "$ERR" "skipped 1 damaged line (the first is line 2: " "($bad): the line named"
    expect_contains "$ERR" "'${key//\"/}' is " "($bad): the field named"
    expect_not_contains "$ERR$OUT" "EiB" "($bad): no absurd size"
    cp "$TMP/good.jsonl" "$CAL"
done

# a different command has no record; --calibration off ignores records
oom plan --json --target-effective-batch 64 -- "${JOB[@]}" --steps 9
expect_rc 2 "another command: no record"
oom plan --json --calibration off --target-effective-batch 64 -- "${JOB[@]}"
expect_rc 2 "--calibration off: no workload"
expect_contains "$ERR" "no workload" "off means no measured line"
# a model and a probed command together are refused
oom plan --json --model gpt2 -- "${JOB[@]}"
expect_rc 2 "model + command"
expect_contains "$ERR" "not both" "model + command refused"
finish
