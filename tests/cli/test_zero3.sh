#!/bin/bash
# DeepSpeed ZeRO-3's own memory (lib/estimate/estimate_zero3.c): each part of the "zero3" object of
# estimate --json, the options that change them, and that the estimate follows them.
. "$(dirname "$0")/lib.sh"
T0="$OOMLESS_SRC/bench/accuracy/public/T0_3B.json"
# T0_3B (24 + 24 T5 blocks, d_model 2048, vocabulary 32128, untied head), fp32 LoRA, as PEFT-03
A=(--model "$T0" --method lora --lora-rank 8 --lora-dropout 0.1 --precision fp32 --batch 8
    --seq 128 --decoder-seq 4 --attention eager --sharding zero3)

# no prefetch (max live 0) and no reuse (distance 0): one tensor at a time, the largest one with
# the activations all alive is the output head, 32128 x 2048 fp32 elements, gathered through a
# device copy of its offloaded partition; 122 norms of 2048 elements persist; the bucket is
# reduce_bucket_size fp32 elements
oom estimate "${A[@]}" --offload optimizer+params --zero3-max-live-params 0 \
    --zero3-max-reuse-distance 0 --json
expect_rc 0 "one tensor at a time"
expect_json '.zero3.gathered' "263192576" "the head alone is gathered"
expect_json '.zero3.host_copies' "263192576" "its partition's device copy"
expect_json '.zero3.prefetched' "0" "nothing prefetched"
expect_json '.zero3.gradient' "0" "no weight gradient under LoRA"
expect_json '.zero3.persistent' "999424" "122 norms x 2048 x 4 bytes"
expect_json '.zero3.reduce_bucket' "2000000000" "5e8 fp32 elements"
expect_json '.zero3.fewer_activations' "0" "at the turn, all activations alive"
expect_json '.zero3.turn_total' "2527384576" "the parts add up"

# DeepSpeed's defaults: the prefetcher keeps about max_live_parameters gathered
oom estimate "${A[@]}" --offload optimizer+params --json
expect_rc 0 "defaults"
expect_json '.zero3.gathered' "4250635150" "about 1e9 elements gathered, and the head"
expect_json '.zero3.prefetched' "263192576" "the head prefetched"
expect_json '.zero3.host_copies' "263192576" "its device copy"
expect_json '.zero3.fewer_activations' "99001250" "before the last blocks' activations"
expect_json '(.zero3.turn_total - (.zero3.gathered + .zero3.host_copies + .zero3.gradient +
    .zero3.persistent + .zero3.reduce_bucket - .zero3.fewer_activations)) | fabs < 2' "true" \
    "the sum (each part rounded to bytes)"
expect_json '[.zero3.max_live_params, .zero3.prefetch_bucket, .zero3.persistence_threshold,
    .zero3.max_reuse_distance, .zero3.reduce_bucket_size] | map(tostring) | join(",")' \
    "1000000000,50000000,100000,1000000000,500000000" "DeepSpeed's defaults"
PEAK=$(jq '.memory.allocated_peak' <<<"$OUT")

# a smaller bucket: the peak shrinks by exactly the bytes taken off it
oom estimate "${A[@]}" --offload optimizer+params --zero3-reduce-bucket 1e6 --json
expect_json '.zero3.reduce_bucket' "4000000" "1e6 fp32 elements"
expect_json ".memory.allocated_peak == $PEAK - 1996000000" "true" "the peak follows the bucket"

# parameters on the GPU: no device copies of host partitions
oom estimate "${A[@]}" --offload optimizer --json
expect_json '.zero3.host_copies' "0" "no parameter offload, no copies"
expect_json '.zero3.gathered' "4250635150" "the same gathering"

# no prefetch: what stays for reuse within 1e9 elements (the last blocks and the head)
oom estimate "${A[@]}" --offload optimizer+params --zero3-prefetch-bucket 0 --json
expect_json '.zero3.gathered' "2025757771" "kept for the backward"
expect_json '.zero3.prefetched' "0" "nothing prefetched"

# norms of 2048 elements are partitioned under a threshold of 1000
oom estimate "${A[@]}" --offload optimizer+params --zero3-persistence-threshold 1000 --json
expect_json '.zero3.persistent' "0" "nothing persists"

# 16-bit parameters: a bucket of 2-byte elements; a full fine-tune: a module's weight gradient
oom estimate "${A[@]/fp32/bf16}" --json
expect_json '.zero3.reduce_bucket' "1000000000" "5e8 bf16 elements"
oom estimate --model "$T0" --method full --precision fp32 --batch 1 --seq 128 --sharding zero3 --json
expect_json '.zero3.gradient > 0' "true" "a trained module's gradient"

# values DeepSpeed would refuse
oom estimate "${A[@]}" --zero3-prefetch-bucket 1.5
expect_rc 2 "a fraction of an element"
expect_contains "$ERR" "zero3-prefetch-bucket '1.5'" "names the option and the value"
oom estimate "${A[@]}" --zero3-reduce-bucket 0
expect_rc 2 "an empty bucket"
oom estimate --model "$T0" --method lora --zero3-max-live-params 1e9 --json
expect_json '.zero3' "null" "no zero3 object without --sharding zero3"

# deeper than the replay follows (1024 blocks): plan leaves ZeRO-3 out of its search and says so,
# where it refused every multi-GPU plan (exit 2); ZeRO-3 asked for is still refused, by name
DEEP="$TMP/deep"
mkdir -p "$DEEP"
printf '{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
 "num_hidden_layers": 1100, "num_attention_heads": 4, "num_key_value_heads": 4,
 "intermediate_size": 688, "vocab_size": 32000, "max_position_embeddings": 4096}\n' \
    >"$DEEP/config.json"
oom plan --model "$DEEP" --gpus 8 --gpu a100-80gb --seq 1024 --target-effective-batch 64 --json
expect_rc 0 "1100 layers on 8 GPUs: planned"
expect_json '.plan.sharding != "zero3"' "true" "without ZeRO-3"
expect_json '[.notices[] | select(startswith("ZeRO-3 left out of the search"))] | length' "1" \
    "said once"
expect_contains "$OUT" "at most 1024 blocks, and the model has 1100" "the limit and the depth"
oom plan --model "$DEEP" --gpu a100-80gb --seq 1024 --allow offload --json
expect_rc 0 "1100 layers, one GPU, offload allowed: planned"
expect_json '.plan.offload != "optimizer+params"' "true" "ZeRO-3's offload of parameters left out"
oom plan --model "$DEEP" --gpus 8 --gpu a100-80gb --seq 1024 --json
expect_json '[.notices[] | select(startswith("ZeRO-3"))] | length' "1" "the default allow: said"
oom plan --model "$DEEP" --gpus 8 --gpu a100-80gb --seq 1024 --allow checkpointing --json
expect_json '[.notices[] | select(startswith("ZeRO-3"))] | length' "0" "no sharding searched: nothing said"
oom plan --model "$DEEP" --gpus 8 --gpu a100-80gb --seq 1024 --sharding zero3
expect_rc 2 "ZeRO-3 asked for: refused"
expect_contains "$ERR" "follows at most 1024 blocks (the model has 1100)" "refused by name"
rm -rf "$DEEP"

finish
