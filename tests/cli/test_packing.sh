#!/bin/bash
# test_packing.sh - --packing padding-free|block-mask and --tokens-per-batch in estimate: the packed
# micro-batch's shape, SDPA's document mask, flash attention's varlen path, the refusals.
. "$(dirname "$0")/lib.sh"

est() { # est FILTER ARGS...: one value of `estimate --json`
    local f=$1
    shift
    "$OOMLESS_BIN" estimate --json "$@" | jq -r "$f"
}
# llama-3.2-1b: 16 layers, 32 query heads and 8 key/value heads of 64 (q width 2048, k/v 512)
M="--model llama-3.2-1b --precision bf16"
A=.memory.activations

# the shape: padding-free one row of batch x seq, block-mask batch rows; --tokens-per-batch sets
# the packed tokens, --seq is then the longest document
OUT=$("$OOMLESS_BIN" estimate --json $M --batch 4 --seq 1024 --packing padding-free)
expect_json .workload.packing.rows 1 "padding-free: one row"
expect_json .workload.packing.row_tokens 4096 "padding-free: batch x seq tokens"
expect_json .workload.packing.longest_document 1024 "padding-free: documents up to seq"
OUT=$("$OOMLESS_BIN" estimate --json $M --batch 2 --seq 512 --packing block-mask \
    --tokens-per-batch 8192)
expect_json .workload.packing.rows 2 "block-mask: batch rows"
expect_json .workload.packing.row_tokens 4096 "block-mask: tokens-per-batch / batch each"
expect_json .compute.tokens_per_step 8192 "the packed tokens are the step's tokens"
oom estimate $M --batch 4 --seq 1024 --packing padding-free
expect_contains "$OUT" "packing                       : padding-free, 4096 tokens: 1 x 4096" \
    "human: the packed shape"
OUT=$("$OOMLESS_BIN" estimate --json $M --batch 4 --seq 1024)
expect_eq "$(jq -r '.workload.packing' <<<"$OUT")" null "no packing: no packing object"

# flash attention (varlen kernels) and eager attention: exactly one unpacked row of the tokens
for att in flash eager; do
    expect_eq "$(est .memory.allocated_peak $M --attention $att --batch 4 --seq 1024 \
        --packing padding-free)" "$(est .memory.allocated_peak $M --attention $att --batch 1 \
        --seq 4096)" "$att: padding-free 4 x 1024 = one row of 4096"
done
# eager: the scores of the whole packed row (len^2), more than the padded rows' 4 x 1024^2
[ "$(est $A $M --attention eager --batch 4 --seq 1024 --packing padding-free)" -gt \
    "$(est $A $M --attention eager --batch 4 --seq 1024)" ] && ok ||
    bad "eager: a packed row's scores outgrow the padded rows'"

# SDPA: per layer the additive mask (rows x len^2, bf16) and the repeated key/value heads
# (2 x (2048 - 512) per token, bf16), beside one unpacked row
N=4096
expect_eq $(($(est $A $M --batch 4 --seq 1024 --packing padding-free) - \
    $(est $A $M --batch 1 --seq $N))) $((16 * (N * N * 2 + N * 2 * 1536 * 2))) \
    "sdpa padding-free: the mask and the repeated heads"
expect_eq $(($(est $A $M --batch 2 --seq 1024 --packing block-mask --tokens-per-batch $N) - \
    $(est $A $M --batch 2 --seq 2048))) $((16 * (2 * 2048 * 2048 * 2 + N * 2 * 1536 * 2))) \
    "sdpa block-mask: two rows' masks"
# fp32 runs the memory-efficient kernel on repeated heads unpacked too: only the mask (4 bytes)
expect_eq $(($(est $A --model llama-3.2-1b --precision fp32 --batch 1 --seq 2048 \
    --packing padding-free) - $(est $A --model llama-3.2-1b --precision fp32 --batch 1 \
    --seq 2048))) $((16 * 2048 * 2048 * 4)) "fp32: the mask alone"
# full checkpointing keeps the boolean mask (an input of every checkpointed layer, 1 x 8192^2
# bytes) until the backward; +offload moves it to host memory with the other saved inputs
F="$M --batch 1 --seq 2048 --tokens-per-batch 8192 --packing padding-free"
d() { echo $(($(est $A $F --checkpointing "$1") - $(est $A $F --checkpointing "$1" --attention flash))); }
expect_eq $(($(d full) - $(d full+offload))) $((8192 * 8192)) "checkpointing keeps the boolean mask"
G=--model\ gpt2\ --precision\ bf16\ --batch\ 1\ --seq\ 1024
# GPT-2 keeps its training KV cache unpacked, not packed (use_cache=False): 12 layers x 2 x 768
expect_eq $(($(est $A $G --attention flash) - $(est $A $G --attention flash --packing padding-free))) \
    $((12 * 1024 * 2 * 768 * 2)) "gpt2: no training cache when packed"

# what is refused
oom estimate $M --tokens-per-batch 4096
expect_rc 2 "tokens-per-batch needs packing"
expect_contains "$ERR" "needs --packing" "tokens-per-batch without packing says why"
oom estimate $M --packing block-mask --batch 3 --tokens-per-batch 4096
expect_rc 2 "block-mask rows of equal length"
oom estimate $M --packing padding-free --tokens-per-batch 1024 --seq 2048
expect_rc 2 "a document longer than the row"
oom estimate $M --packing padding-free --method inference
expect_rc 2 "packing is for training"
oom estimate $M --packing padding-free --objective dpo
expect_rc 2 "packing is for sft"
oom estimate --model bert-base --packing padding-free
expect_rc 2 "packing needs a causal language model"
oom estimate $M --packing sometimes
expect_rc 2 "an unknown packing"
oom estimate --help
expect_contains "$OUT" "--packing" "help lists --packing"
expect_contains "$OUT" "--tokens-per-batch" "help lists --tokens-per-batch"

finish
