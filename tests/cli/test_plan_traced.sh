#!/bin/bash
# test_plan_traced.sh - a record `oomless trace --calibrate` wrote (allocated bytes, for any GPU)
# is planned on with the allocator's reserve and the CUDA context of the planned GPU added; a
# record probe measured on that GPU wins over it; `estimate -- CMD` refuses it.
. "$(dirname "$0")/lib.sh"
unset OOMLESS_GPU GPU_PROFILE CUDA_VISIBLE_DEVICES

CAL="$TMP/cal.jsonl"
KEY='["oomless","trace","--model","m","--method","lora"]'
# traced: 1 GiB + 100 MiB per sample, allocated
printf '%s\n' '{"time":1,"gpu":"","command":'"$KEY"',"workload":"","fixed_bytes":1073741824,"per_sample_bytes":104857600,"per_sample2_bytes":0,"recommended_batch":0,"max_batch":4,"usable_bytes":0,"traced":true}' > "$CAL"

# on an A100 (cc 8.0): context 512 MiB (data/coefficients.json context.by_compute_capability),
# fragmentation 0.22 on the per-sample part: device(b) = 1.5 GiB + 122 MiB * b (127926272 B)
oom plan --json --gpu a100-80gb --calibration "$CAL" --target-effective-batch 64 -- oomless trace --model m --method lora
expect_rc 0 "plan on a traced record"
expect_one_json "traced plan json"
expect_json .plan.batch_size 64 "64 samples fit in 79 GiB"
expect_json .memory.device_peak $((1073741824 + 536870912 + 64 * 127926272)) "reserve and context added"

# any GPU: the same record serves an RTX 4090 (cc 8.9)
oom plan --json --gpu rtx-4090 --calibration "$CAL" --target-effective-batch 64 -- oomless trace --model m --method lora
expect_rc 0 "traced record on another GPU"
# (22.99 GiB - 1 GiB - 512 MiB context) / 122 MiB = 180 -> the largest divisor of 64 is 64
expect_json .plan.batch_size 64 "4090 batch"

# a record probe measured on the A100 wins over the traced one, newer or older
printf '%s\n' '{"time":2,"gpu":"NVIDIA A100 80GB","command":'"$KEY"',"workload":"","fixed_bytes":2147483648,"per_sample_bytes":1073741824,"per_sample2_bytes":0,"recommended_batch":0,"max_batch":70,"usable_bytes":0}' >> "$CAL"
printf '%s\n' '{"time":3,"gpu":"","command":'"$KEY"',"workload":"","fixed_bytes":1,"per_sample_bytes":1,"per_sample2_bytes":0,"recommended_batch":0,"max_batch":4,"usable_bytes":0,"traced":true}' >> "$CAL"
oom plan --json --gpu a100-80gb --calibration "$CAL" --target-effective-batch 64 -- oomless trace --model m --method lora
expect_rc 0 "measured record"
expect_json .plan.batch_size 64 "(79 - 2) GiB / 1 GiB per sample = 77 -> divisor 64"
expect_json .memory.device_peak $((2147483648 + 64 * 1073741824)) "the measured line, unchanged"

# the sequence length the record was traced at: from the command's --seq, or its workload
SKEY='["oomless","trace","--model","m","--seq","2048"]'
printf '%s\n' '{"time":4,"gpu":"","command":'"$SKEY"',"workload":"","fixed_bytes":1073741824,"per_sample_bytes":104857600,"per_sample2_bytes":0,"recommended_batch":0,"max_batch":4,"usable_bytes":0,"traced":true}' >> "$CAL"
oom plan --json --gpu a100-80gb --calibration "$CAL" --target-effective-batch 8 -- oomless trace --model m --seq 2048
expect_json .plan.seq_len 2048 "seq from the traced command"
oom plan --gpu a100-80gb --calibration "$CAL" --target-effective-batch 8 -- oomless trace --model m --method lora
expect_not_contains "$OUT" "max_seq_len                   : 1" "no seq of 1"
WKEY='["python","train.py"]'
printf '%s\n' '{"time":5,"gpu":"","command":'"$WKEY"',"workload":"seq=4096","fixed_bytes":1073741824,"per_sample_bytes":104857600,"per_sample2_bytes":0,"recommended_batch":0,"max_batch":4,"usable_bytes":0,"traced":true}' >> "$CAL"
oom plan --json --gpu a100-80gb --calibration "$CAL" --calibration-workload seq=4096 --target-effective-batch 8 -- python train.py
expect_json .plan.seq_len 4096 "seq from the record's workload"

# a curved traced record (per sample^2) holds beyond the batches traced (1, 2, 4): the plan
# linearises it at the largest batch the curve puts under the budget, not at 4
QKEY='["oomless","trace","--model","q"]'
printf '%s\n' '{"time":6,"gpu":"","command":'"$QKEY"',"workload":"","fixed_bytes":1073741824,"per_sample_bytes":104857600,"per_sample2_bytes":1048576,"recommended_batch":0,"max_batch":4,"usable_bytes":0,"traced":true}' >> "$CAL"
oom plan --json --gpu a100-80gb --calibration "$CAL" --target-effective-batch 64 -- oomless trace --model q
expect_rc 0 "plan on a curved traced record"
expect_json .plan.batch_size 64 "1.5 GiB + 1.22 x (6.25 + 4) GiB fits 79 GiB at 64, beyond the traced 4"
USABLE=$(jq .budget.usable_bytes <<<"$OUT")
PEAK=$(jq .memory.device_peak <<<"$OUT")
expect_eq "$((PEAK <= USABLE))" 1 "and its peak is under the budget"

# estimate -- CMD refuses a traced record and says what to use
oom estimate --gpu rtx-4090 --calibration "$CAL" --batch 2 -- oomless trace --model m --method lora
expect_rc 2 "estimate on a traced record"
expect_contains "$ERR" "traced on the meta device" "says why"

# run takes its batch from a traced record as plan does: device bytes (context + reserve), for
# any batch (before: the allocated line, capped at the 4 the trace ran). An 8 GiB card of cc 8.0,
# 7 GiB usable: (7 GiB - 1.5 GiB) / 122 MiB -> 46
fake_nvml 'gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-11111111-2222-3333-4444-555555555555 total=8589934592 used=0 cc=8.0'
printf '%s\n' '{"time":7,"gpu":"","command":["true","{batch}"],"workload":"","fixed_bytes":1073741824,"per_sample_bytes":104857600,"per_sample2_bytes":0,"recommended_batch":0,"max_batch":4,"usable_bytes":0,"traced":true}' >> "$CAL"
oom run --json --calibration "$CAL" --events "$TMP/ev.jsonl" -- true '{batch}'
expect_rc 0 "run from a traced record"
expect_eq "$(jq -r 'select(.event == "launch") | .batch' "$TMP/ev.jsonl")" 46 "run: the traced line in device bytes"
expect_contains "$ERR" "batch 46 from the calibration record" "run says so"
finish
