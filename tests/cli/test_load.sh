#!/bin/bash
# test_load.sh - loading the weights as a phase: the weights and the largest copy beside them
# while one is put on the GPU, by the code that loads them (docs/estimate.md, "Loading"); the
# estimate's peak phase is "load" where that is the most.
. "$(dirname "$0")/lib.sh"
unset OOMLESS_GPU GPU_PROFILE CUDA_VISIBLE_DEVICES

# llama-3.1-8b's largest linear is 4096 x 14336; its head 128256 x 4096
BIG=$((4096 * 14336)) HEAD=$((128256 * 4096))
load() { oom estimate --model "$1" --seq 256 "${@:2}" --json; expect_rc 0 "$*"; }

# transformers: bitsandbytes quantizes each linear from its 16-bit copy on the GPU
load llama-3.1-8b --method qlora
expect_json .load.transient_bytes "$((2 * BIG))" "one linear in bf16 beside the weights"
expect_eq "$(jq '.load.allocated_peak - .memory.weights' <<<"$OUT")" "$((2 * BIG))" \
    "the loading peak is the weights and that copy"
expect_contains "$(jq -r .load.how <<<"$OUT")" "bitsandbytes" "says what makes it"
expect_json .peak_phase backward "the step holds more"

# Lightning Fabric: the head too, from an fp16 copy, its new codes beside the old
load llama-3.1-8b --method qlora --quantizer fabric
expect_json .load.transient_bytes "$((HEAD * 5 / 2))" "the head in fp16 and its new codes"

# a 16-bit base: each weight straight into its parameter
load llama-3.1-8b --method lora
expect_json .load.transient_bytes 0 "nothing beside the weights"
expect_eq "$(jq '.load.allocated_peak == .memory.weights' <<<"$OUT")" true "the weights alone"

# torchtune: torchao's copy_ brings the bf16 weight (2n) and NF4Tensor.from_tensor quantizes it
# (its most: the scaled blocks 2n, the codes n and a chunk's 64 MiB of differences, or 4n when
# it packs). Llama 3.2 1B's largest linear: 8192 x 2048
N=$((8192 * 2048)) CHUNK=$((64 * 1048576))
load llama-3.2-1b --method qlora --stack torchtune
expect_json .load.transient_bytes "$((2 * N + 3 * N + CHUNK))" "torchao's quantizer"
expect_contains "$(jq -r .load.how <<<"$OUT")" "torchao" "named"

# a QLoRA step small enough: loading is the peak, and the breakdown is loading's
oom estimate --model llama-3.2-1b --method qlora --stack torchtune --seq 16 --batch 1 \
    --checkpointing full --json
expect_rc 0 "16 tokens"
expect_json .peak_phase load "loading holds the most"
expect_eq "$(jq '.memory.activations + .memory.gradients + .memory.optimizer + .memory.logits' <<<"$OUT")" \
    0 "no step in the breakdown"
expect_eq "$(jq '.memory.allocated_peak - .load.allocated_peak' <<<"$OUT")" \
    "$(jq .cublas_workspace.bytes <<<"$OUT")" "the peak is loading's (and the cuBLAS workspace)"
oom estimate --model llama-3.2-1b --method qlora --stack torchtune --seq 16 --batch 1 \
    --checkpointing full
expect_contains "$OUT" "peak phase                    : load" "the text says so"
expect_contains "$OUT" "loading peak                  :" "and its line"

finish
