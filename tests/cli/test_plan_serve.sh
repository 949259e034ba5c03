#!/bin/bash
# test_plan_serve.sh - tensor parallelism for inference, `plan --format vllm` (vLLM's KV-cache
# arithmetic on the worked case of docs/plan.md), `--format accelerate` and `--format torchtitan`.
. "$(dirname "$0")/lib.sh"
no_nvml

# ---- tensor parallelism: weights and KV cache split, KV heads replicated below one per GPU ----
est() { oom estimate --model llama-3.1-70b --method inference --seq 8192 --gpu h100 --json "$@"; }
est
expect_rc 1 "70B does not fit one H100 without tensor parallelism"
W1=$(jq .memory.weights <<<"$OUT") KV1=$(jq .memory.kv_cache <<<"$OUT")
est --tensor-parallel 4
expect_rc 0 "70B estimate, tensor-parallel 4"
expect_json .workload.tensor_parallel 4 "estimate JSON names the tensor-parallel size"
expect_json .memory.kv_cache "$((KV1 / 4))" "tp 4: 2 of the 8 KV heads per GPU"
# the norms (2 x 8192 per layer + the final one) stay whole on every GPU
NORMS=$(((80 * 2 + 1) * 8192 * 2))
expect_json .memory.weights "$(((W1 - NORMS) / 4 + NORMS))" "tp 4: weights split but the norms"
est --tensor-parallel 16
expect_json .memory.kv_cache "$((KV1 / 8))" "tp 16: one KV head per GPU (replicated), not half"
est --tensor-parallel 3
expect_rc 2 "tp 3 does not divide 64 heads"
expect_contains "$ERR" "does not divide the 64 attention heads" "tp 3 refused with the reason"
oom estimate --model llama-3.1-8b --seq 512 --tensor-parallel 2
expect_rc 2 "tensor parallelism is for inference"
# nothing fits one 16 GB card: the smallest tensor-parallel size that does is suggested
oom plan --model llama-3.1-8b --method inference --seq 4096 --gpu rtx-4080
expect_rc 1 "8B bf16 inference does not fit a 16 GB card"
expect_contains "$OUT$ERR" "tensor parallelism: --tensor-parallel 2 (device peak" "tp suggested"
oom plan --model llama-3.1-8b --method inference --seq 4096 --gpu rtx-4080 --tensor-parallel 2 --json
expect_rc 0 "and it fits at tensor-parallel 2"
oom estimate --model llama-3.1-70b --method inference --seq 8192 --tensor-parallel 4 --gpu h100
expect_contains "$OUT" "4 GPUs per model copy" "estimate report names the tensor parallelism"

# ---- vLLM: the worked case of docs/plan.md (Llama-3.1-8B bf16, H100 80GB, 0.9, 8192) ----------
serve() { oom plan --model llama-3.1-8b --method inference --seq 8192 --gpu h100 \
    --vram-safety-margin 10% "$@"; }
serve --json
expect_rc 0 "worked case plans"
V=$(jq -c .inference.vllm <<<"$OUT")
g() { jq -r ".$1" <<<"$V"; }
TOTAL=$(jq .budget.target_bytes <<<"$OUT")
expect_eq "$TOTAL" 85520809984 "H100 80GB: 81559 MiB"
expect_eq "$(g gpu_memory_utilization)" 0.9 "gpu_memory_utilization"
# requested = int(total x 0.9); weights = 8 030 261 248 parameters x 2 bytes + the rotary
# embedding's cos/sin cache of 131 072 positions x 128 x 2 bytes
expect_eq "$(g requested_bytes)" 76968728985 "requested memory"
expect_eq "$(g weights_bytes)" "$((8030261248 * 2 + 131072 * 128 * 2))" "weights + rotary cache"
expect_eq "$(g non_torch_bytes)" 139586437 "non-torch memory (0.13 GiB)"
# the profile run's peak: the larger of the forward's working set and its output (8192 x 4096 x 2)
# + the sampler's 38.3 bytes per logit over max_num_seqs x 128 256; here the forward's
expect_eq "$(g max_num_seqs)" 20 "max_num_seqs: the plan's batch"
SAMPLER=$(awk 'BEGIN { printf "%d", 8192 * 4096 * 2 + 20 * 128256 * 38.3 + 0.5 }')
expect_eq "$(( $(g peak_activation_bytes) > SAMPLER ))" 1 "the forward's peak is above the sampler's"
expect_eq "$(g peak_activation_bytes)" 975091794 "profile-run peak activation"
# a sampler-bound profile: Qwen3-0.6B, 1024 sequences of 151 936 logits after 8192 tokens of
# 1024 hidden: 8192 x 1024 x 2 + 1024 x 151 936 x 38.3, rounded
oom plan --model qwen3-0.6b --method inference --seq 16000 --gpu h100 --max-num-seqs 1024 \
    --max-num-batched-tokens 8192 --json
expect_eq "$(jq .inference.vllm.peak_activation_bytes <<<"$OUT")" 5975585587 "sampler-bound peak"
# vLLM's arithmetic redone here from the parts: available = requested - the three; a block of
# 16 tokens over 32 layers of 8 KV heads x 128 x 2 (K, V) x 2 bytes = 2 MiB
AVAIL=$(($(g requested_bytes) - $(g weights_bytes) - $(g peak_activation_bytes) - $(g non_torch_bytes)))
expect_eq "$(g kv_cache_bytes)" "$AVAIL" "available KV memory = requested - non-KV memory"
expect_eq "$AVAIL" 59759973826 "available KV memory, by hand"
expect_eq "$(g num_gpu_blocks)" "$((AVAIL / (16 * 32 * 2 * 8 * 128 * 2)))" "GPU blocks"
expect_eq "$(g num_gpu_blocks)" 28495 "GPU blocks, by hand"
expect_eq "$(g kv_tokens)" 455920 "KV capacity in tokens = blocks x 16"
expect_json .inference.tensor_parallel 1 "no tensor parallelism"
serve --format vllm
expect_rc 0 "vllm format"
expect_golden plan-vllm-8b.txt "vllm settings of the worked case"
expect_contains "$OUT" "# CUDA graphs: from the 7.96 GiB the utilisation leaves free" \
    "the CUDA graphs come from what the utilisation leaves free"
serve --json
expect_json '.inference.vllm.cuda_graphs.in_kv_budget' "false" "CUDA graphs outside the KV budget"
expect_json '.inference.vllm.cuda_graphs.left_free_bytes == .budget.target_bytes - .inference.vllm.requested_bytes' \
    "true" "left free = total - requested"
# tensor parallelism in the vLLM settings: per-GPU weights and KV heads
oom plan --model llama-3.1-70b --method inference --seq 8192 --gpu h100 --tensor-parallel 4 \
    --vram-safety-margin 10% --format vllm
expect_rc 0 "vllm format, 70B over 4 GPUs"
expect_golden plan-vllm-70b-tp4.txt "vllm settings of 70B at tensor-parallel 4"
oom plan --model llama-3.1-8b --method lora --seq 2048 --gpu h100 --format vllm
expect_rc 2 "vllm format of a training plan is refused"
expect_contains "$ERR" "inference plan" "vllm refusal names what it needs"

oom plan --model llama-3.1-70b --method inference --seq 8192 --gpu h100 --tensor-parallel 4
expect_contains "$OUT" "tensor_parallel (GPUs)        : 4" "the report names the tensor parallelism"

# ---- the KV cache per layer type: sliding-window layers keep the window, MLA one latent -------
# Gemma 3 12B at 32k: 8 full layers x 32768 tokens + 40 sliding x 1024, 8 KiB per token each
oom estimate --model gemma-3-12b --method inference --seq 32768 --gpu h100 --json
expect_json .memory.kv_cache "$(((8 * 32768 + 40 * 1024) * 8192))" "Gemma 3 12B at 32k: 2.31 GiB"
expect_json .kv_cache_layers.sliding 40 "estimate JSON: 40 sliding layers"
expect_json .kv_cache_layers.window 1024 "estimate JSON: their window"
expect_json .workload.kv_cache vllm "estimate JSON names the KV stack"
oom estimate --model gemma-3-12b --method inference --seq 32768 --gpu h100 --kv-cache transformers --json
expect_json .memory.kv_cache "$((48 * 32768 * 8192))" "transformers' prefill: every layer, 12 GiB"
expect_json .kv_cache_layers.stack transformers "and says so"
oom plan --model gemma-3-12b --method inference --seq 32768 --gpu h100 --json
expect_json .inference.kv_cache_layers.full 8 "plan JSON: 8 full layers"
expect_json .inference.kv_cache_layers.sliding 40 "plan JSON: 40 sliding layers"
oom plan --model gemma-3-12b --method inference --seq 32768 --gpu h100 --format vllm
expect_contains "$OUT" "# KV cache layers: 8 full, 40 sliding (the last 1024 tokens)" "vllm: split"
# DeepSeek-V3: 61 layers x (512 + 64) x 2 bytes per token, on every tensor-parallel GPU
oom plan --model deepseek-v3 --method inference --seq 8192 --gpu h200 --tensor-parallel 8 \
    --precision int8 --json
expect_json .inference.kv_bytes_per_token 70272 "DeepSeek-V3: 70,272 bytes per token per GPU"
expect_json .inference.kv_cache_layers.latent true "plan JSON: MLA's latent"

# ---- accelerate (FSDP2) and torchtitan ------------------------------------------------------
train() { oom plan --model llama-3.1-8b --seq 2048 --gpu a100-80gb "$@"; }
train --gpus 8 --target-effective-batch 64 --format accelerate
expect_rc 0 "accelerate, 8 GPUs"
expect_golden plan-accelerate-fsdp.txt "accelerate FSDP2 config"
train --gpus 8 --target-effective-batch 64 --format torchtitan --format-version 0.2
expect_rc 0 "torchtitan 0.2, 8 GPUs"
expect_golden plan-torchtitan-fsdp.txt "torchtitan 0.2 TOML"
train --gpus 8 --target-effective-batch 64 --format torchtitan
expect_rc 0 "torchtitan 0.3, 8 GPUs"
expect_golden plan-torchtitan-0.3-fsdp.txt "torchtitan 0.3 config function"
# a 7B full fine-tune on one 24 GB GPU needs ZeRO-3 with offload: offload and reshard on
oom plan --model llama-2-7b --seq 1024 --gpu rtx-4090 --gpus 2 --allow checkpointing,offload,sharding \
    --target-effective-batch 8 --format accelerate
expect_rc 0 "accelerate with offload"
expect_contains "$OUT" "fsdp_offload_params: true" "offload planned -> fsdp_offload_params"
expect_contains "$OUT" "fsdp_reshard_after_forward: true" "ZeRO-3 -> reshard after forward"
oom plan --model llama-2-7b --seq 1024 --gpu rtx-4090 --gpus 2 --allow checkpointing,offload,sharding \
    --target-effective-batch 8 --format torchtitan --format-version 0.2
expect_contains "$OUT" "enable_cpu_offload = true" "offload planned -> enable_cpu_offload"
expect_contains "$OUT" 'fsdp_reshard_after_forward = "always"' "ZeRO-3 -> always reshard"
oom plan --model llama-2-7b --seq 1024 --gpu rtx-4090 --gpus 2 --allow checkpointing,offload,sharding \
    --target-effective-batch 8 --format torchtitan
expect_contains "$OUT" "config.training.enable_cpu_offload = True" "0.3: offload planned"
expect_contains "$OUT" 'config.parallelism.fsdp_reshard_after_forward = "always"' "0.3: ZeRO-3"
# what torchtitan cannot run is refused, saying why
for v in 0.2 0.3; do
    oom plan --model llama-3.1-8b --method lora --seq 2048 --gpu a100-80gb --format torchtitan \
        --format-version $v
    expect_rc 2 "torchtitan $v: a LoRA plan refused"
    expect_contains "$ERR" "torchtitan $v" "torchtitan $v: LoRA, the version named"
    oom plan --model llama-3.1-8b --seq 2048 --gpu a100-80gb --gpus 8 --precision amp-fp16 \
        --format torchtitan --format-version $v
    expect_rc 2 "torchtitan $v: fp16 refused"
    expect_contains "$ERR" "torchtitan trains in bfloat16 or float32" "torchtitan $v: fp16, why"
done
oom plan --model llama-3.1-8b --seq 2048 --gpu a100-80gb --gpus 8 --optimizer adamw-8bit \
    --format torchtitan
expect_rc 2 "torchtitan: 8-bit AdamW refused"
# one GPU, no sharding: no FSDP section, and DDP-free torchtitan degrees
oom plan --model qwen2.5-0.5b --seq 512 --gpu a100-80gb --target-effective-batch 8 --format accelerate
expect_rc 0 "accelerate, one GPU"
expect_golden plan-accelerate-single.txt "accelerate without FSDP"
oom plan --model llama-3.1-8b --method inference --seq 8192 --gpu h100 --format accelerate
expect_rc 2 "accelerate format of an inference plan is refused"
oom plan --model llama-3.1-8b --seq 2048 --format yaml
expect_rc 2 "unknown format"
expect_contains "$ERR" "vllm, accelerate, torchtitan" "the formats are listed"

# --seq auto: the longest --max-model-len that one sequence of fits (vLLM's auto-fit, before launch)
oom plan --model qwen3-0.6b --method inference --gpu h100 --seq auto --format vllm
expect_rc 0 "--seq auto, a small model"
expect_contains "$OUT" "--max-model-len 40960 " "the model's positions when they all fit"
expect_contains "$ERR" "of the model's 40960 positions (the model's positions)" "says what bounds it"
oom plan --model qwen3-32b --method inference --gpu h100 --seq auto --vram 70 --json
expect_rc 0 "--seq auto, a large model"
expect_json '.plan.seq_len' "12210" "the longest length the plan fits"
expect_contains "$ERR" "(a longer prefill does not fit)" "the plan's own peak binds"
oom plan --model qwen3-32b --method inference --gpu h100 --seq 12211 --vram 70 --format vllm
expect_rc 1 "one token longer does not fit"
# a sampler profiled over 4096 sequences leaves vLLM's KV cache the bound: the blocks at the
# chosen length hold it, one token more they do not
oom plan --model qwen3-32b --method inference --gpu h100 --seq auto --max-num-seqs 4096 --format vllm
expect_rc 0 "--seq auto bound by the KV cache"
expect_contains "$OUT" "--max-model-len 2976 --max-num-seqs 4096" "the length in the vllm settings"
expect_contains "$ERR" "(the KV cache vLLM finds holds no longer sequence)" "the KV cache binds"
for n in 2976 2977; do
    oom plan --model qwen3-32b --method inference --gpu h100 --seq $n --max-num-seqs 4096 --json
    echo "$(jq '.inference.vllm.kv_tokens' <<<"$OUT") $n" >>"$TMP/auto.txt"
done
expect_eq "$(awk '{print ($1 >= $2)}' "$TMP/auto.txt" | tr -d '\n')" "10" \
    "2976 tokens held, 2977 not"
oom plan --model qwen3-0.6b --method lora --gpu h100 --seq auto
expect_rc 2 "--seq auto is for inference"
oom table --model qwen3-0.6b --method inference --gpus h100 --seq auto
expect_rc 2 "--seq auto is for plan"
oom plan --model qwen3-0.6b --method inference --gpu h100 --seq auto --seq-range 128:1024
expect_rc 2 "--seq auto with --seq-range"

finish
