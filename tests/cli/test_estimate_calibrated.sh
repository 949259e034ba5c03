#!/bin/bash
# test_estimate_calibrated.sh - `oomless estimate --batch N -- CMD...` reports the peak the line
# `oomless probe -- CMD...` measured on this GPU predicts.
. "$(dirname "$0")/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset OOMLESS_BATCH_SIZE OOMLESS_GPU GPU_PROFILE CUDA_VISIBLE_DEVICES

fake_job_gpu cc=8.0
JOB=("$FAKE_JOB" --batch-size '{batch}' --procdir "$TMP/procs" --capacity 8G --fixed 1G --per-sample 10M)

oom estimate --batch 100 -- "${JOB[@]}"
expect_rc 2 "no record yet"
expect_contains "$ERR" "no calibration record" "says so"

oom probe --json -- "${JOB[@]}"
expect_rc 0 "probe"

oom estimate --batch 100 --json -- "${JOB[@]}"
expect_rc 0 "calibrated estimate"
expect_one_json "calibrated estimate json"
expect_json .memory.device_peak $((1073741824 + 100 * 10485760)) "peak from the line at batch 100"
expect_json .calibration.gpu "NVIDIA A100-SXM4-80GB" "record's GPU"
expect_json .calibration.per_sample_bytes 10485760 "record's slope"
expect_json .budget.fits true "fits"
expect_json .extrapolated false "inside the probed range"

oom estimate --batch 100 -- "${JOB[@]}"
expect_rc 0 "text"
expect_contains "$OUT" "Calibrated estimate (measured by oomless probe on NVIDIA A100-SXM4-80GB)" "title"
expect_contains "$OUT" "device peak (nvidia-smi)      : 1.98 GiB" "peak line"

# beyond the budget: exit 1; beyond the probed range: flagged
oom estimate --batch 900 --json -- "${JOB[@]}"
expect_rc 1 "does not fit"
expect_json .budget.fits false "fits false"
expect_json .extrapolated true "extrapolated"
oom estimate --batch 900 -- "${JOB[@]}"
expect_rc 1 "text: does not fit"
expect_contains "$(sed -n 3p <<<"$OUT")" "fits                          : NO (" "the verdict first"
NEXT=$(grep -E '^  next +: ' <<<"$OUT" | sed -E 's/^  next +: //')
expect_eq "$NEXT" "oomless plan --target-effective-batch 900 -- ${JOB[0]} --batch-size '{batch}' --procdir $TMP/procs --capacity 8G --fixed 1G --per-sample 10M" \
    "then the plan of the probed command at that effective batch"
eval "run \"\$OOMLESS_BIN\" plan --json ${NEXT#oomless plan }"
expect_rc 0 "the next command plans on the measured line"
expect_json '.plan.effective_batch' "900" "keeping the effective batch"
oom estimate --batch 10 --calibration off -- "${JOB[@]}"
expect_rc 2 "calibration off"
finish
