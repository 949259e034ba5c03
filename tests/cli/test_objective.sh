# test_objective.sh - --objective (preference fine-tuning as TRL runs it) in estimate, plan, table.
. "$(dirname "$0")/lib.sh"

# est FILTER ARGS...: one number of `estimate --json`
est() {
    local f=$1
    shift
    "$OOMLESS_BIN" estimate --json "$@" | jq -r "$f"
}

# SimPO has no reference and TRL's CPOTrainer runs chosen and rejected concatenated: the layers of
# its micro-batch of N pairs are SFT's of 2N sequences, byte for byte; its loss path keeps the
# logits in the compute dtype (log-probs by TRL's kernel), fewer bytes than SFT's fp32 loss
expect_eq "$(est .memory.activations --model gpt2 --objective simpo --batch 2)" \
    "$(est .memory.activations --model gpt2 --batch 4)" "simpo: 2 pairs = 4 sequences of sft"
expect_eq "$(est .memory.activations --model gpt2 --objective orpo --batch 3 --seq 256)" \
    "$(est .memory.activations --model gpt2 --batch 6 --seq 256)" "orpo: 3 pairs = 6 sequences"
# bf16 (gpt2's auto precision): SimPO's backward holds the logits and their gradient, 4 bytes per
# logit; ORPO adds the chosen half's copy and log-softmax, 2 more per logit
LOGITS=$((4 * 1024 * 50257))
expect_eq "$(est .memory.logits --model gpt2 --objective simpo --batch 2 --seq 1024 --precision bf16)" \
    "$((4 * LOGITS))" "simpo: logits and their gradient"
expect_eq "$(est .memory.logits --model gpt2 --objective orpo --batch 2 --seq 1024 --precision bf16)" \
    "$((6 * LOGITS))" "orpo: and the chosen half's copy and log-softmax"

# DPO, full fine-tune: a frozen copy of the model beside the policy, at the policy's precision
SFT_W=$(est .memory.weights --model qwen2.5-0.5b --method full --precision bf16 --batch 2)
expect_eq "$(est .memory.weights --model qwen2.5-0.5b --method full --precision bf16 --objective dpo --batch 2)" \
    $((2 * SFT_W)) "dpo full: weights of the policy and of its reference copy"
expect_eq "$(est .memory.weights --model qwen2.5-0.5b --method full --precision bf16 --objective dpo --batch 2 --precompute-ref yes)" \
    "$SFT_W" "dpo precomputed: no reference in memory"
Q=$(est .memory.weights --model qwen2.5-0.5b --method full --precision bf16 --objective dpo --batch 2 --reference-precision 4bit)
[ "$Q" -gt "$SFT_W" ] && [ "$Q" -lt $((2 * SFT_W)) ] && ok || bad "dpo 4-bit reference: $Q not between $SFT_W and $((2 * SFT_W))"
# under LoRA the reference is the policy with its adapter disabled: no extra weights, but a
# no-grad forward after the policy's, so the forward end grows
expect_eq "$(est .memory.weights --model qwen2.5-0.5b --method lora --objective dpo --batch 2)" \
    "$(est .memory.weights --model qwen2.5-0.5b --method lora --batch 2)" "dpo lora: adapter reference, no copy"
expect_json_in() { OUT=$("$OOMLESS_BIN" estimate --json "${@:3}"); expect_json "$1" "$2" "${*:3}"; }
expect_json_in .workload.objective.reference adapter --model qwen2.5-0.5b --method lora --objective dpo --batch 2
expect_json_in .workload.objective.reference copy --model qwen2.5-0.5b --method full --objective kto --batch 2
expect_json_in .workload.objective.sequences_per_forward 8 --model qwen2.5-0.5b --method lora --objective ipo --batch 4
expect_json_in .workload.objective.batch_counts pairs --model qwen2.5-0.5b --method lora --objective dpo --batch 4
expect_json_in .workload.objective.reference none --model qwen2.5-0.5b --method lora --objective grpo --batch 8
expect_json_in '.workload | has("objective")' false --model qwen2.5-0.5b --method lora
A=$(est .memory.allocated_peak --model llama-3.1-8b --method lora --objective dpo --batch 4 --seq 1024 --checkpointing full)
P=$(est .memory.allocated_peak --model llama-3.1-8b --method lora --objective dpo --batch 4 --seq 1024 --checkpointing full --precompute-ref yes)
[ "$A" -gt "$P" ] && ok || bad "dpo lora: the reference forward costs memory ($A <= $P)"
expect_eq "$(est .peak_phase --model llama-3.1-8b --method lora --objective dpo --batch 4 --seq 1024 --checkpointing full)" \
    forward "dpo lora: the reference forward, after the policy's, makes the peak"

# reward modelling: a score head, no logits
expect_eq "$(est .memory.logits --model qwen2.5-0.5b --method lora --objective reward --batch 2)" 0 "reward: no LM logits"

# KTO and DPO through TRL's fused LM head: no logits tensor (a hidden-size gradient and a tile)
L=$(est .memory.logits --model qwen2.5-0.5b --method lora --objective kto --batch 2)
S=$(est .memory.logits --model qwen2.5-0.5b --method lora --batch 2)
[ "$L" -lt $((S / 10)) ] && ok || bad "kto: fused head, logits $L not under 10% of sft's $S"

# GRPO: the generation batch (batch x grad-accum completions) with its KV cache to the full --seq
OUT=$("$OOMLESS_BIN" estimate --json --model qwen2.5-0.5b --method lora --objective grpo --seq 2048 \
    --batch 2 --grad-accum 64 --checkpointing full)
expect_json .peak_phase prefill "grpo: the generation makes the peak"
expect_json '.memory.kv_cache == (.model.layers * 2 * .model.kv_heads * .model.head_dim * 128 * 2048 * 2)' \
    true "grpo: KV cache of 128 completions of 2048 tokens"
expect_json .workload.objective.prompt_len 1024 "grpo: prompt half of --seq by default"
OUT=$("$OOMLESS_BIN" estimate --json --model qwen2.5-0.5b --method lora --objective grpo --seq 2048 \
    --completion-len 1536 --batch 8)
expect_json .workload.objective.prompt_len 512 "grpo: --completion-len"

# refused as TRL refuses them
oom estimate --model gpt2 --objective simpo --reference copy
expect_rc 2 "simpo has no reference"
expect_contains "$ERR" "has no reference model" "simpo: said"
oom estimate --model gpt2 --objective kto
expect_rc 2 "kto at batch 1"
expect_contains "$ERR" "at least 2" "kto batch: said"
oom estimate --model gpt2 --method full --objective dpo --reference adapter
expect_rc 2 "adapter reference without lora"
oom estimate --model gpt2 --method lora --objective dpo --reference-precision 4bit
expect_rc 2 "reference-precision without a copy"
oom estimate --model gpt2 --method lora --objective grpo --batch 4
expect_rc 2 "grpo: 4 completions are no multiple of 8 generations"
oom estimate --model gpt2 --method lora --objective grpo --batch 8 --seq 256 --completion-len 256
expect_rc 2 "grpo: completion as long as seq"
oom estimate --model gpt2 --method lora --objective dpo --batch 2 --num-generations 4
expect_rc 2 "num-generations without grpo"
expect_contains "$ERR" "for objective 'grpo'" "num-generations: said"
oom estimate --model gpt2 --method inference --objective dpo
expect_rc 2 "dpo: inference"
oom estimate --model gpt2 --objective nope
expect_rc 2 "unknown objective"
expect_contains "$ERR" "sft, dpo, ipo, simpo, orpo, kto, reward, grpo" "objectives listed"

# text output and help
oom estimate --model qwen2.5-0.5b --method lora --objective dpo --batch 4
expect_contains "$OUT" "objective                     : dpo (batch counts pairs: 8 sequences per forward; reference adapter)" "estimate text: objective line"
oom estimate --help
expect_contains "$OUT" "--objective" "estimate --help: --objective"
expect_contains "$OUT" "--reference-precision" "estimate --help: --reference-precision"

# plan: the effective batch counts pairs
oom plan --model qwen2.5-0.5b --method lora --objective dpo --gpu rtx-3090 --target-effective-batch 16 --seq 1024 --json
expect_rc 0 "plan dpo"
expect_json '.notices | map(select(test("counts pairs"))) | length' 1 "plan: the batch counts pairs"

# the KTO table of a 24 GB card (4-bit base, LoRA rank 64, 2048 tokens, effective batch 32):
# every row is batch x accumulation = 32 with a micro-batch of at least 2
for m in llama-3.2-3b mistral-7b llama-2-13b; do
    oom table --model $m --method qlora --objective kto --gpus rtx-3090 --target-effective-batch 32 \
        --seq 2048 --lora-rank 64 --format json
    expect_rc 0 "table kto $m"
    expect_json '.tables[0].rows[0].plan | (.batch_size * .grad_accum)' 32 "table kto $m: 32 examples"
    expect_json '.tables[0].rows[0].plan.batch_size >= 2' true "table kto $m: KL needs 2"
    expect_json '.tables[0].rows[0].plan.seq_len' 2048 "table kto $m: seq"
done

finish
