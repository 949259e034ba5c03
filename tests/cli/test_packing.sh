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

# FLOPs: flash's varlen kernels attend within documents (as the padded rows); the masked SDPA
# kernel computes the whole packed row's scores (4096 keys instead of 1024: 16 layers x 2 x 2048
# per key, x 3 for the forward and backward)
F="--model llama-3.2-1b --batch 4 --seq 1024 --json"
expect_eq "$(est .compute.flops_per_token $F --attention flash --packing padding-free)" \
    "$(est .compute.flops_per_token $F --attention flash)" "flash varlen: the documents' FLOPs"
expect_eq $(($(est .compute.flops_per_token $F --packing padding-free) - \
    $(est .compute.flops_per_token $F))) $((3 * 16 * 2 * 2048 * 3072)) "sdpa: the row's FLOPs"

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

# ---- plan: the micro-batch in packs of --seq, searched; tokens per optimizer step kept ----------
P="--model llama-3.2-1b --gpu h100 --seq 4096"
OUT=$("$OOMLESS_BIN" plan --json $P --packing padding-free --target-effective-batch 32)
B=$(jq -r .plan.batch_size <<<"$OUT")
expect_json .packing.mode padding-free "plan json: the packing mode"
expect_json .packing.tokens_per_batch $((B * 4096)) "plan json: packs x seq tokens per micro-batch"
expect_json .packing.tokens_per_step $((32 * 4096)) "plan json: effective packs x seq per step"
# the planner's micro-batch fits as the estimate sees it, and SDPA's document mask (quadratic in
# the packed row) leaves no larger micro-batch than flash attention's varlen path
PEAK=$(est .memory.device_peak --model llama-3.2-1b --gpu h100 --seq 4096 --batch "$B" \
    --packing padding-free --grad-accum $((32 / B)))
expect_eq "$(jq -r .memory.device_peak <<<"$OUT")" "$PEAK" "plan's peak is the estimate's"
BF=$("$OOMLESS_BIN" plan --json $P --packing padding-free --attention flash \
    --target-effective-batch 32 | jq -r .plan.batch_size)
[ "$BF" -ge "$B" ] && ok || bad "flash varlen ($BF packs) fits at least what sdpa's mask does ($B)"
# --tokens-per-batch fixes the micro-batch at N / seq packs
OUT=$("$OOMLESS_BIN" plan --json $P --packing padding-free --tokens-per-batch 8192)
expect_json .plan.batch_size 2 "plan --tokens-per-batch: 8192 / 4096 packs"
expect_json .packing.tokens_per_batch 8192 "plan --tokens-per-batch: the tokens kept"
oom plan $P --packing padding-free --tokens-per-batch 5000
expect_rc 2 "plan --tokens-per-batch not a whole number of packs"
oom plan $P --tokens-per-batch 8192
expect_rc 2 "plan --tokens-per-batch needs packing"
oom plan $P --packing padding-free --tokens-per-batch 8192 --batch 2
expect_rc 2 "plan: --tokens-per-batch or --batch"
# the formats' own keys: TRL's SFTConfig (padding-free), torchtune's recipe (block-mask)
oom plan $P --packing padding-free --tokens-per-batch 8192 --format trl
expect_rc 0 "plan --format trl for sft packing"
for l in "per_device_train_batch_size: 2" "max_length: 4096" "packing: true" "padding_free: true"; do
    expect_contains "$OUT" "$l" "trl: $l"
done
oom plan $P --packing padding-free --tokens-per-batch 8192 --format args
expect_contains "$OUT" "--per_device_train_batch_size 2 " "args: the packs"
expect_contains "$OUT" "--packing --padding_free --max_length 4096" "args: TRL's packing flags"
oom plan $P --packing block-mask --tokens-per-batch 8192 --format torchtune
expect_rc 0 "plan --format torchtune"
for l in "batch_size=2" "dataset.packed=True" "tokenizer.max_seq_len=4096"; do
    expect_contains "$OUT" "$l" "torchtune: $l"
done
oom plan $P --packing block-mask --format trl
expect_rc 2 "trl packs padding-free, not block-mask"
oom plan $P --packing padding-free --format torchtune
expect_rc 2 "torchtune packs block-mask, not padding-free"
oom plan $P --format torchtune
expect_contains "$OUT" "dataset.packed=False" "torchtune unpacked"
oom plan $P --packing padding-free
expect_contains "$OUT" "packing                       : padding-free," "plan text: the packing line"

finish
