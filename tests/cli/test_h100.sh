#!/bin/bash
# test_h100.sh - what a real H100 80GB HBM3 showed (bench/e2e/h100-2026-11-25/), replayed with the
# fake NVML (480 MiB reserved by the driver) and the fake job: `run` plans restarts under PyTorch's
# "allowed" cap and the run's budget, and fits only the attempts that died on the same data.
. "$(dirname "$0")/lib.sh"
: "${FAKE_JOB:?run through ctest}"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE

mkdir -p "$TMP/procs"
fake_nvml "driver 580.159.04
cuda 13000
gpu name=\"NVIDIA H100 80GB HBM3\" uuid=GPU-6144c1d5-a225-3598-49b2-cf706f5a74ec total=85520809984 used=0 reserved=503316480 cc=9.0
procdir $TMP/procs"
export XDG_CACHE_HOME="$TMP/cache"
MARK="oomless-h100-test-$$"
launches() { jq -r 'select(.event == "launch") | .batch' "$1" | tr '\n' ' '; }
reasons() { jq -r 'select(.event == "restart") | .reason' "$1"; }

# ---- watch: the driver's reserve in the CSV log (GPU rows), none for a process ---------------
oom watch --once --log "$TMP/h100.csv"
expect_rc 0 "watch --log on the H100"
expect_eq "$(awk -F, '$2 == "gpu" { print $16 }' "$TMP/h100.csv")" 503316480 "csv: reserved_bytes"

# ---- run: PyTorch capped at 24 GiB (set_per_process_memory_fraction), run --vram 24 -------------
# The job: 10 GiB + 0.4 GiB per sample, all of it twice from step 4 on (its sequences double).
# 48 dies at once needing 29.2 GiB; the limit is the smallest of 24.00 GiB allowed, the 79.18 GiB
# capacity and the 23.00 GiB usable budget: 95 % of 23 GiB / 29.2 GiB x 48 -> 35 (divisor 24).
# 24 runs steps 1-3 and dies at step 4 needing 39.2 GiB: the only attempt on the doubled data, so
# it is scaled alone -> 13 (divisor 12). 12 dies at step 4 too (29.6 GiB): the line through
# attempts 2 and 3 (20 GiB + 0.8 GiB per sample; attempt 1 ran other data) -> 2, which runs.
JOB=("$FAKE_JOB" --batch-size '{batch}' --grad-accum '{accum}' --procdir "$TMP/procs"
    --capacity 81079M --allowed 24G --fixed 10G --per-sample 0.4G --steps 6 --spike-step 4
    --spike-factor 2 --checkpoint "$TMP/ckpt" --step-time-ms 20 --marker "$MARK")
oom run --json --vram 24 --batch-size 48 --grad-accum 1 --calibration off \
    --events "$TMP/ev.jsonl" -- "${JOB[@]}"
expect_rc 0 "run recovers"
expect_eq "$(launches "$TMP/ev.jsonl")" "48 24 12 2 " "the ladder 48 -> 24 -> 12 -> 2"
expect_eq "$(jq -c '[.batch, .grad_accum, .effective_batch]' <<<"$OUT")" "[2,24,48]" \
    "the effective batch kept"
expect_eq "$(reasons "$TMP/ev.jsonl" | sed -n 1p)" \
    "attempt 1 alone (out of memory before any step): batch 48 needed 29.20 GiB of 23.00 GiB (usable budget; 24.00 GiB allowed by PyTorch; 79.18 GiB total capacity): batch 35 predicted to fit" \
    "restart 1: the smallest limit, each named"
expect_eq "$(reasons "$TMP/ev.jsonl" | sed -n 2p)" \
    "attempt 2 alone (out of memory at step 3): batch 24 needed 39.20 GiB of 23.00 GiB (usable budget; 24.00 GiB allowed by PyTorch; 79.18 GiB total capacity): batch 13 predicted to fit" \
    "restart 2: the first attempt on the new data is scaled alone"
expect_eq "$(reasons "$TMP/ev.jsonl" | sed -n 3p)" \
    "fit of attempts 2, 3 (out of memory at step 3): 20.00 GiB + 819.2 MiB per sample, of 23.00 GiB (usable budget; 24.00 GiB allowed by PyTorch; 79.18 GiB total capacity): batch 2 predicted to fit" \
    "restart 3: the line through the attempts on the same data only"
expect_contains "$ERR" "restarting with batch 12 -> 2, accumulation 4 -> 24 (effective 48); fit of attempts 2, 3" \
    "the restart line names the attempts"

# without --vram the budget is the card's: 79.18 GiB capacity - 1 GiB margin; PyTorch's 24 GiB
# is then the smallest
rm -f "$TMP/ckpt"
oom run --batch-size 48 --grad-accum 1 --calibration off --events "$TMP/ev2.jsonl" -- "${JOB[@]}"
expect_rc 0 "run recovers without --vram"
expect_eq "$(reasons "$TMP/ev2.jsonl" | sed -n 1p)" \
    "attempt 1 alone (out of memory before any step): batch 48 needed 29.20 GiB of 24.00 GiB (allowed by PyTorch; 79.18 GiB total capacity; 78.18 GiB usable budget): batch 37 predicted to fit" \
    "PyTorch's allowed is the limit"
expect_eq "$(pgrep -f "$MARK" | wc -l)" 0 "nothing left"

# PyTorch's own line, as the H100 printed it at batch 48 (before: "batch 48 needed 27.71 GiB of
# 79.18 GiB: batch 47 predicted to fit")
cat >"$TMP/torch48.sh" <<'SH'
#!/bin/sh
[ "$1" -lt 48 ] && exit 0
echo 'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 4.60 GiB. GPU 0 has a total capacity of 79.18 GiB of which 56.06 GiB is free. Including non-PyTorch memory, this process has 23.11 GiB memory in use. 24.00 GiB allowed; Of the allocated memory 22.24 GiB is allocated by PyTorch, and 207.74 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://docs.pytorch.org/docs/stable/notes/cuda.html#optimizing-memory-usage-with-pytorch-cuda-alloc-conf)' >&2
exit 1
SH
chmod +x "$TMP/torch48.sh"
oom run --vram 24 --batch-size 48 --grad-accum 1 --calibration off --events "$TMP/ev3.jsonl" -- \
    "$TMP/torch48.sh" '{batch}'
expect_rc 0 "run: PyTorch's message"
expect_eq "$(reasons "$TMP/ev3.jsonl")" \
    "attempt 1 alone (out of memory before any step): batch 48 needed 27.71 GiB of 23.00 GiB (usable budget; 24.00 GiB allowed by PyTorch; 79.18 GiB total capacity): batch 37 predicted to fit" \
    "PyTorch's allowed and the budget read from the real message"

# ---- probe: peaks that are not monotone in the batch (the caching allocator's rounding) ---------
# The H100's trials (batch, peak): (12, 11.61 GiB), (24, 19.24), (29, 23.05), (28, 24.94),
# (26, 23.25) under 22.99 GiB usable: a curve through 12, 24 and 29 plus the bumps the allocator
# gave 28 and 26. Before, the quadratic through them (fixed -707 GB) stopped the search at 24 with
# 25 untried; now it bisects to 25, which fits.
rm -f "$TMP"/procs/*
PROBE=("$FAKE_JOB" --batch-size '{batch}' --procdir "$TMP/procs" --capacity 81079M
    --step-time-ms 20 --fixed 6586833691 --per-sample 393168711.3 --per-sample2 8045250.76
    --bump 28:2871305381 --bump 26:2720882013 --marker "$MARK")
oom probe --json --calibration "$TMP/h100.jsonl" --vram 24 --vram-safety-margin 1082982400B \
    --start-batch 12 -- "${PROBE[@]}"
expect_rc 0 "probe: non-monotone peaks"
expect_json '.usable_bytes' 24686821376 "probe: 22.99 GiB usable"
expect_json '[.trials[] | [.batch, .peak_bytes]] | map(.[0]) | join(" ")' "12 24 29 28 26 25" \
    "probe: the real trials, then 25"
expect_json '[.trials[] | .peak_bytes][0:5] | join(" ")' \
    "12463374336 20656947200 24754782208 26774339584 24968691712" "probe: the real peaks"
expect_json '.recommended_batch' 25 "probe: 25 recommended (not 24, nor 29 which ran under)"
expect_json '.peaks_monotone' false "probe: peaks_monotone false"
expect_json '[.non_monotone[] | "\(.batch)>\(.larger_batch)"] | join(" ")' "26>29 28>29" \
    "probe: the trials that peaked above a larger batch"
expect_json '.bisected' true "probe: bisected"
expect_json '.peaks' stepped "probe: read as the allocator's steps (28 peaked 8 % above 29)"
expect_json '.fit.fixed_bytes' 0 "probe: the fit is the bound through zero"
expect_json '.fit.per_sample2_bytes' null "probe: no curvature"
# run from that record starts at the 25 that ran under this budget, not at the 23 the bound
# through zero (1.04 GB per sample, batch 12's) puts under it; under a smaller budget the
# recommended batch is not vouched for, and the bound gives 22
oom run --calibration "$TMP/h100.jsonl" --vram 24 --vram-safety-margin 1082982400B \
    --events "$TMP/ev4.jsonl" -- "${PROBE[@]}"
expect_rc 0 "run from the bisected probe's record"
expect_eq "$(launches "$TMP/ev4.jsonl")" "25 " "run starts at the probe's 25"
expect_contains "$ERR" "batch 25 from the calibration record" "run says where 25 came from"
oom run --calibration "$TMP/h100.jsonl" --vram 23 --vram-safety-margin 1082982400B \
    --events "$TMP/ev5.jsonl" -- "${PROBE[@]}"
expect_rc 0 "run from the record under a smaller budget"
expect_eq "$(launches "$TMP/ev5.jsonl")" "22 " "a smaller budget: the bound's 22"
oom probe --calibration off --vram 24 --vram-safety-margin 1082982400B --start-batch 12 \
    -- "${PROBE[@]}"
expect_contains "$OUT" "Peaks:     not monotone in the batch: batch 26 (23.25 GiB) above batch 29 (23.05 GiB), batch 28 (24.94 GiB) above batch 29 (23.05 GiB); the search bisected between the largest batch under the budget and the smallest over it" \
    "probe text: the trials named"
expect_contains "$OUT" "Recommended batch: 25 (largest that ran: 29) after 6 launches" "probe text: 25"
# a regular job says nothing of the kind
oom probe --json --calibration off --vram 24 -- "$FAKE_JOB" --batch-size '{batch}' \
    --procdir "$TMP/procs" --step-time-ms 20 --fixed 2G --per-sample 100M --marker "$MARK"
expect_json '.peaks_monotone' true "regular probe: monotone"
expect_json '.bisected' false "regular probe: not bisected"
expect_json '.non_monotone | length' 0 "regular probe: no pairs"

finish
