#!/bin/bash
# test_parallel.sh - training past one node: estimate per pipeline rank with tensor, pipeline,
# expert and context parallelism, the refusals naming the value, and the plan of issue 37's
# acceptance (Qwen3-235B-A22B and DeepSeek-V3 on 8 nodes of 8 H100) in the engines' formats.
# The per-rank figures against torch's own are tests/torch/test_parallel_memory.py's.
. "$(dirname "$0")/lib.sh"

est() { # est FILTER ARGS...: one value of `estimate --json`
    local f=$1
    shift
    "$OOMLESS_BIN" estimate --json "$@" | jq -c "$f"
}
M="--model llama-3.1-8b --gpu h100 --seq 4096 --batch 1 --grad-accum 8 --tensor-parallel 2"

# 1F1B over 4 stages, 8 micro-batches: stage r keeps P - r of them; the activations of a
# middle stage are in proportion; the embedding (its vocabulary over TP) sits on the first
# stage, the output layer on the last, which alone keeps the loss's logits
OUT=$("$OOMLESS_BIN" estimate --json $M --pipeline-parallel 4 --gpus 2 --sharding zero1)
expect_one_json "estimate --json with a layout"
expect_json '[.parallel.ranks[].microbatches_in_flight] | join(",")' "4,3,2,1" "1F1B: P - r in flight"
expect_json '.parallel.gpus' 16 "tp 2 x pp 4 x dp 2 GPUs"
expect_json '.parallel.limiting_rank' 0 "the first stage limits"
expect_json '.parallel.ranks[1].activations * 2 == .parallel.ranks[2].activations * 3' true \
    "middle stages: activations by micro-batches in flight"
expect_json '.parallel.ranks[0].weights - .parallel.ranks[1].weights' $((128256 / 2 * 4096 * 2)) \
    "the first stage: bf16 embedding, vocabulary over TP"
expect_json '.parallel.ranks[1].weights == .parallel.ranks[2].weights' true "same layers, same weights"
expect_json '[.parallel.ranks[] | .logits > 0] | join(",")' "false,false,false,true" \
    "only the last stage keeps logits"
# the distributed optimizer: fp32 master and two moments (12 bytes a parameter) over DP 2
expect_json '.parallel.ranks[1].optimizer == .parallel.ranks[1].weights / 2 * 12 / 2' true \
    "ZeRO-1 over the data-parallel copies"
expect_json '[.parallel.groups[].group] | join(",")' "tensor,data,pipeline" "the process groups"
expect_json '.parallel.groups[2].kind' point-to-point "the pipeline's group is point-to-point"

# interleaving (2 chunks): Megatron's warm-up (P - r - 1) x 2 + (V - 1) x P, plus one
expect_eq "$(est '[.parallel.ranks[].microbatches_in_flight] | join(",")' $M --pipeline-parallel 4 \
    --pp-schedule interleaved:2)" '"11,9,7,5"' "interleaved: chunks in flight"
expect_eq "$(est '.parallel.ranks[0].stages | join(",")' $M --pipeline-parallel 4 \
    --pp-schedule interleaved:2)" '"0,4"' "interleaved: rank 0 holds stages 0 and 4"
# an uneven split, as given
expect_eq "$(est '[.parallel.ranks[].layers] | join(",")' $M --pipeline-parallel 4 \
    --pp-layers 5,9,9,9)" '"5,9,9,9"' "pp-layers as given"
# full recomputation keeps each layer's input only
A=$(est '.parallel.ranks[2].activations' $M --pipeline-parallel 4)
R=$(est '.parallel.ranks[2].activations' $M --pipeline-parallel 4 --checkpointing full)
expect_eq "$((R * 4 < A))" 1 "full recomputation: under a quarter of the activations"

# experts: divided by EP x ETP, attention by TP
E="--model mixtral-8x7b --gpu h100 --seq 4096 --batch 1 --grad-accum 8 --tensor-parallel 2 --pipeline-parallel 4 --gpus 4"
W1=$(est '.parallel.ranks[1].weights' $E)
W4=$(est '.parallel.ranks[1].weights' $E --expert-parallel 4 --expert-tensor-parallel 1)
W8=$(est '.parallel.ranks[1].weights' $E --expert-parallel 8 --expert-tensor-parallel 1)
expect_eq "$((W1 > W4 && W4 > W8))" 1 "experts spread wider, fewer weights per GPU"
# EP 4 x ETP 1 and EP 2 x ETP 2 both split the experts four ways
W22=$(est '.parallel.ranks[1].weights' $E --expert-parallel 2 --expert-tensor-parallel 2)
expect_eq "$W22" "$W4" "experts over EP x ETP"
expect_eq "$(est '[.parallel.groups[].group] | index("expert")' $E --expert-parallel 4 \
    --expert-tensor-parallel 1 | jq -r 'type')" number "an expert group"

# the refusals name the value (exit 2)
for bad in "--pp-layers 8,8,8 --pipeline-parallel 4|pp-layers '8,8,8'" \
    "--pipeline-parallel 4 --pp-schedule interleaved:2 --grad-accum 6|grad-accum 6" \
    "--pp-schedule zigzag|pp-schedule 'zigzag'" \
    "--expert-parallel 2|expert-parallel '2'" \
    "--tensor-parallel 3|tensor-parallel '3'" \
    "--context-parallel 2 --seq 4097|seq '4097'"; do
    oom estimate --model llama-3.1-8b --gpu h100 --seq 4096 --batch 1 --grad-accum 8 ${bad%%|*}
    expect_rc 2 "refused: ${bad%%|*}"
    expect_contains "$ERR" "${bad#*|}" "refusal names the value: ${bad%%|*}"
done

# issue 37's acceptance: a layout of 64 H100 over 8 nodes that fits, in both engines' keys
P="plan --model qwen3-235b-a22b --nodes 8 --gpus-per-node 8 --gpu h100"
oom $P --json
expect_rc 0 "Qwen3-235B-A22B on 8 x 8 H100"
expect_one_json "plan --json with a layout"
expect_json '.layout | .tensor_parallel * .context_parallel * .pipeline_parallel * .data_parallel' 64 \
    "the layout covers the 64 GPUs"
expect_json '.layout.expert_parallel > 1 and .layout.pipeline_parallel > 1' true "experts and stages split"
expect_json '.found and .memory.device_peak <= .budget.usable_bytes' true "it fits"
oom $P --format megatron-bridge
expect_rc 0 "megatron-bridge format"
expect_contains "$OUT" "model.expert_model_parallel_size=" "bridge: expert parallel key"
expect_contains "$OUT" "CUDA_DEVICE_MAX_CONNECTIONS=1 torchrun --nnodes 8 --nproc-per-node 8" \
    "bridge: the launch on 8 nodes"
oom $P --format torchtitan-parallel
expect_rc 2 "torchtitan's keys for a Megatron estimate refused"
expect_contains "$ERR" "--engine torchtitan" "the refusal says how"
oom $P --engine torchtitan --format torchtitan-parallel
expect_rc 0 "torchtitan-parallel format"
expect_contains "$OUT" "config.parallelism.expert_parallel_degree = " "torchtitan: expert degree"
expect_contains "$OUT" "config.parallelism.pipeline_parallel_schedule = " "torchtitan: the schedule"

# one node: a data-parallel plan, even with ZeRO-3, stays one (the Trainer, accelerate and
# DeepSpeed run it); past one node a faster layout replaces ZeRO-3, and the data-parallel
# formats refuse it rather than write a data-parallel job of the layout's micro-batch
oom plan --model llama-3.1-8b --gpus 8 --gpu a100-40gb --seq 2048 --target-effective-batch 64 --json
expect_rc 0 "ZeRO-3 on one node"
expect_json '[.plan.sharding, .layout] | map(tostring) | join(",")' "zero3,null" "one node: data parallel"
L="plan --model llama-3.1-70b --nodes 4 --gpus-per-node 8 --gpu h100-sxm --seq 4096 --target-effective-batch 512"
oom $L --json
expect_json '.layout.pipeline_parallel > 1 and .deepspeed == null' true "4 nodes: a layout, no ds_config"
for f in args deepspeed torchrun accelerate env; do
    oom $L --format $f
    expect_rc 2 "--format $f of a layout"
    expect_contains "$ERR" "format '$f' writes a data-parallel job" "--format $f refused"
done

# DeepSeek-V3's states do not fit 64 H100 without the optimizer on the CPU
D="plan --model deepseek-v3 --nodes 8 --gpus-per-node 8 --gpu h100"
oom $D --json
expect_rc 1 "DeepSeek-V3 on 64 H100 without offload"
oom $D --allow checkpointing,sharding,layout,offload --json
expect_rc 0 "DeepSeek-V3 on 64 H100 with the optimizer on the CPU"
expect_json '.layout.optimizer_cpu_offload' true "the optimizer on the CPU"
expect_json '[.layout.tensor_parallel, .layout.pipeline_parallel, .layout.expert_parallel,
    .layout.data_parallel] | map(select(. > 1)) | length' 4 "a 4D layout"
oom $D --allow checkpointing,sharding,layout,offload --format megatron
expect_rc 0 "megatron format"
expect_contains "$OUT" "--optimizer-cpu-offload" "megatron: offload argument"
expect_contains "$OUT" "--pipeline-model-parallel-size " "megatron: pipeline argument"
finish
