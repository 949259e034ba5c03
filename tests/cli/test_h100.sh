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

finish
