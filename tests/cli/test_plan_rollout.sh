#!/bin/bash
# test_plan_rollout.sh - GRPO with a vLLM engine on the trainer's GPU (`--rollout vllm-colocate`,
# `--sleep-mode`): the split of the GPU (docs/plan.md, "RL with a colocated rollout engine"),
# checked by its arithmetic, and `--format trl` / `--format verl`.
. "$(dirname "$0")/lib.sh"
no_nvml

# ---- the estimator: with the engine, the trainer does not generate --------------------------
est() { oom estimate --model qwen2.5-1.5b --method lora --objective grpo --seq 4096 --batch 2 \
    --grad-accum 32 --checkpointing full --json "$@"; }
est
expect_json .peak_phase prefill "transformers' generate of 64 completions is the peak"
NOGEN=$(jq .memory.device_peak <<<"$OUT")
est --rollout vllm-colocate
expect_rc 0 "estimate with rollout vllm-colocate"
expect_json .peak_phase backward "with the engine the training step is the trainer's peak"
expect_json .memory.kv_cache 0 "no KV cache in the trainer"
expect_eq "$(($(jq .memory.device_peak <<<"$OUT") < NOGEN))" 1 "the trainer's peak is lower"
expect_json .workload.objective.rollout vllm-colocate "estimate JSON names the rollout"
expect_json .workload.objective.sleep_mode 0 "and its sleep mode"

# ---- refused combinations --------------------------------------------------------------------
oom plan --model qwen2.5-1.5b --rollout vllm-colocate --gpu a100-80gb
expect_rc 2 "rollout without objective grpo"
expect_contains "$ERR" "for objective 'grpo'" "rollout refused with the reason"
oom plan --model qwen2.5-1.5b --objective grpo --sleep-mode 1 --gpu a100-80gb
expect_rc 2 "sleep-mode without rollout"
oom plan --model qwen2.5-1.5b --objective grpo --rollout vllm-colocate --sleep-mode 3 --gpu a100-80gb
expect_rc 2 "sleep-mode 3"
oom plan --model qwen2.5-1.5b --objective grpo --rollout vllm-colocate --gpu a100-80gb --fit-confidence 0.9
expect_rc 2 "rollout with fit-confidence"
oom plan --model qwen2.5-1.5b --objective grpo --gpu a100-80gb --format trl
expect_rc 2 "--format trl without the engine"
expect_contains "$ERR" "rollout vllm-colocate" "--format trl refused with the reason"

# ---- the split, no sleep mode: trainer peak + engine reservation within usable ---------------
plan() { oom plan --model qwen2.5-1.5b --objective grpo --rollout vllm-colocate --seq 1024 \
    --gpu a100-80gb --target-effective-batch 64 "$@"; }
plan --json
expect_rc 0 "qwen2.5-1.5b GRPO on an A100 80GB plans"
expect_one_json "plan --json with rollout"
R=$(jq -c .rollout <<<"$OUT")
g() { jq -r ".$1" <<<"$R"; }
TOTAL=$(jq .budget.target_bytes <<<"$OUT")
USABLE=$(jq .budget.usable_bytes <<<"$OUT")
PEAK=$(jq .memory.device_peak <<<"$OUT")
B=$(jq .plan.batch_size <<<"$OUT") A=$(jq .plan.grad_accum <<<"$OUT")
U=$(g gpu_memory_utilization)
expect_eq "$(g engine)" vllm-colocate "rollout engine"
expect_eq "$(g max_num_seqs)" "$((B * A))" "max_num_seqs: micro-batch x accumulation (TRL)"
expect_eq "$(g max_num_batched_tokens)" 4096 "TRL's max_num_batched_tokens"
# gpu_memory_utilization: what the trainer's peak leaves, in hundredths, down
expect_eq "$U" "$(awk -v u="$USABLE" -v p="$PEAK" -v t="$TOTAL" \
    'BEGIN { printf "%g", int(100 * (u - p) / t + 1e-9) / 100 }')" "utilization left by the trainer"
REQ=$(awk -v t="$TOTAL" -v u="$U" 'BEGIN { printf "%.0f", int(t * u) }')
expect_eq "$(g requested_bytes)" "$REQ" "requested = total x utilization"
expect_eq "$(($(g training_peak_bytes)))" "$((PEAK + REQ))" "awake: the peaks add up"
expect_eq "$(($(g training_peak_bytes) <= USABLE))" 1 "and fit the usable memory"
# the engine's weights: 1 543 714 304 parameters x 2 bytes + the rotary cache 32 768 x 128 x 2
expect_eq "$(g weights_bytes)" "$((1543714304 * 2 + 32768 * 128 * 2))" "engine weights, bf16"
KV=$((REQ - $(g weights_bytes) - $(g peak_activation_bytes) - $(g non_torch_bytes)))
expect_eq "$(g kv_cache_bytes)" "$KV" "KV cache = requested - weights - activation - non-torch"
# a block: 16 tokens x 28 layers x 2 (K, V) x 2 KV heads x 128 x 2 bytes
BLOCK=$((16 * 28 * 2 * 2 * 128 * 2))
expect_eq "$(g kv_tokens)" "$((KV / BLOCK * 16))" "KV tokens in whole blocks"
expect_eq "$(g kv_sequences)" "$((KV / BLOCK * 16 / 1024))" "KV sequences of 1024"
expect_eq "$(($(g kv_sequences) >= B * A))" 1 "every completion of the generation batch at once"
# the next larger micro-batch fits alone but not beside the engine
ALT=$(jq -r '.alternatives[] | select(.plan.batch_size > '"$B"' and (.fits | not)) | .why' <<<"$OUT" |
    head -1)
expect_contains "$ALT" "does not fit beside the engine" "the larger micro-batch: why not"

expect_json .workers.max 1 "one trainer and its engine per GPU"
# the fit probability is the trainer's peak against the target less the engine's reservation:
# reported, a probability (how close to 0.99 depends on data/confidence.json's bands)
FP=$(jq .fit_probability <<<"$OUT")
expect_eq "$(awk -v f="$FP" 'BEGIN { print (f > 0 && f <= 0.99) }')" 1 "fit probability beside the engine ($FP)"
plan
expect_contains "$OUT" "colocated vLLM engine         : $U of the GPU" "text report: the engine's share"
expect_contains "$OUT" "peaks with the engine" "text report: both phases"

# a fixed micro-batch that fits alone is lowered because of the engine, and the notice says so
plan --batch-size 16 --grad-accum 4 --checkpointing none
expect_contains "$ERR" "DOWNSCALED: batch size 16 does not fit beside the engine: device peak" \
    "downscaled for the engine"
expect_not_contains "$ERR" "> usable 79.00 GiB); lowered" "no peak-over-usable claim"

# ---- sleep mode: the peaks alternate ----------------------------------------------------------
plan --sleep-mode 2 --json
expect_rc 0 "sleep mode 2 plans"
R=$(jq -c .rollout <<<"$OUT")
PEAK2=$(jq .memory.device_peak <<<"$OUT") B2=$(jq .plan.batch_size <<<"$OUT")
RES=$(g trainer_resident_bytes)
M=$(jq -c .memory <<<"$OUT")
expect_eq "$RES" "$(jq '.weights + .optimizer + .overhead' <<<"$M")" \
    "trainer while generating: weights, optimizer states, context"
expect_eq "$(($(g training_peak_bytes)))" "$((PEAK2 + $(g engine_asleep_bytes)))" \
    "training: the trainer's peak + the sleeping engine's non-torch memory"
expect_eq "$(g engine_asleep_bytes)" "$(g non_torch_bytes)" "asleep: only the non-torch memory"
U2=$(g gpu_memory_utilization)
expect_eq "$U2" "$(awk -v u="$USABLE" -v r="$RES" -v t="$TOTAL" \
    'BEGIN { printf "%g", int(100 * (u - r) / t + 1e-9) / 100 }')" "asleep: utilization left by the resident trainer"
expect_eq "$(($(g rollout_peak_bytes) <= USABLE && $(g training_peak_bytes) <= USABLE))" 1 \
    "both phases fit"
expect_eq "$((B2 > B))" 1 "sleep mode allows a larger micro-batch ($B2 > $B)"
expect_eq "$(g cpu_weights_bytes)" 0 "level 2 keeps no CPU copy of the weights"
plan --sleep-mode 1 --json
expect_eq "$(jq .rollout.cpu_weights_bytes <<<"$OUT")" "$(jq .rollout.weights_bytes <<<"$OUT")" \
    "level 1 keeps the weights in CPU memory"
expect_eq "$(jq .plan.batch_size <<<"$OUT")" "$B2" "levels 1 and 2 free the same GPU memory"

# ---- the engine's least share decides on a small card -----------------------------------------
oom plan --model qwen2.5-0.5b --objective grpo --rollout vllm-colocate --seq 2048 --gpu rtx-4090 \
    --target-effective-batch 256 --json
if [ "$RC" -eq 0 ]; then
    expect_eq "$(($(jq .rollout.kv_tokens <<<"$OUT") >= $(jq .rollout.max_num_seqs <<<"$OUT") * 2048))" 1 \
        "the KV cache holds the whole generation batch"
else
    expect_contains "$OUT$ERR" "beside the engine" "nothing fits: the engine's share named"
fi

# 7B LoRA on a 24 GB card: the trainer fits alone (15.5 GiB) but its engine needs the 7B weights
# and 64 sequences of 2048 tokens (57 344 bytes each) beside it
oom plan --model qwen2.5-7b --method lora --objective grpo --rollout vllm-colocate --seq 2048 \
    --gpu rtx-4090 --target-effective-batch 64
expect_rc 1 "7B GRPO with a colocated engine does not fit 24 GB"
expect_contains "$ERR" "does not fit beside the engine: device peak" "the engine is the reason"
expect_contains "$OUT" "but not beside the colocated engine, which needs 0.92 of the GPU" \
    "the report names the engine's least share"
expect_contains "$OUT" "--sleep-mode 1" "sleep mode suggested"
expect_not_contains "$OUT" "over)" "no negative excess"
KVMIN=$(awk 'BEGIN { printf "%.2f", 64 * 2048 * 57344 / 2^30 }')
expect_contains "$OUT" "($KVMIN GiB of KV cache at least)" "the least KV cache: 64 x 2048 tokens"

# ---- the frameworks' keys -------------------------------------------------------------------
plan --format trl
expect_rc 0 "--format trl"
expect_golden plan-trl-grpo.txt "TRL GRPOConfig keys"
expect_contains "$OUT" "vllm_gpu_memory_utilization: $U" "TRL: the planned utilization"
expect_contains "$OUT" "per_device_train_batch_size: $B" "TRL: the micro-batch"
expect_contains "$OUT" "max_completion_length: 512" "TRL: half the sequence by default"
plan --sleep-mode 1 --format verl --completion-len 768 --reference copy
expect_rc 0 "--format verl"
expect_golden plan-verl-grpo-sleep.txt "verl Hydra overrides"
expect_contains "$OUT" "actor_rollout_ref.rollout.free_cache_engine=True" "verl: sleep"
expect_contains "$OUT" "data.max_prompt_length=256" "verl: prompt = seq - completion"
expect_contains "$OUT" "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=" "verl: reference"

finish
