#!/bin/bash
# test_generate.sh - inference with generation (--completion-len G of --seq S): the prompt's
# prefill (S - G tokens, with their KV cache), then the decode's end (the cache at S tokens, one
# token's working set, and under transformers' DynamicCache one layer's keys grown by torch.cat).
. "$(dirname "$0")/lib.sh"
unset OOMLESS_GPU GPU_PROFILE CUDA_VISIBLE_DEVICES

# qwen2.5-0.5b: 24 layers, 2 KV heads of 64: 24 x 2 x 2 x 64 x 2 = 12288 cache bytes a token
KV=12288
g() { oom estimate --model qwen2.5-0.5b --method inference --attention flash "$@" --json; }

# a prompt of one token and 2048 generated: the decode's end is the peak
g --seq 1 --kv-cache transformers
expect_rc 0 "one token's prefill"
ONE=$(jq .memory.activations <<<"$OUT")
g --seq 2049 --completion-len 2048 --kv-cache transformers
expect_rc 0 "generation"
expect_json .peak_phase decode "the decode's end"
expect_json .memory.kv_cache "$((KV * 2049))" "the cache at its full length"
expect_eq "$(jq .memory.activations <<<"$OUT")" "$((ONE + KV * 2049 / 48))" \
    "one token's working set and one layer's keys grown by torch.cat"
expect_json .workload.completion_len 2048 "the JSON says what is generated"

# a long prompt: its prefill is the peak, and is the prefill of the prompt alone
g --seq 30720 --kv-cache transformers
PROMPT=$(jq -c .memory <<<"$OUT")
g --seq 32768 --completion-len 2048 --kv-cache transformers
expect_json .peak_phase prefill "the prompt's prefill"
expect_eq "$(jq -c .memory <<<"$OUT")" "$PROMPT" "every part as a prefill of the 30720 prompt tokens"
g --seq 32768 --kv-cache transformers
expect_eq "$(jq '.memory.activations > '"$(jq .activations <<<"$PROMPT")" <<<"$OUT")" true \
    "without --completion-len all 32768 tokens are prefilled"

# a serving engine's pages hold all S tokens from the prefill on
g --seq 32768 --completion-len 2048
expect_json .memory.kv_cache "$((KV * 32768))" "vLLM's cache for every token"

# the text says it
oom estimate --model qwen2.5-0.5b --method inference --seq 2049 --completion-len 2048 \
    --kv-cache transformers
expect_rc 0 "text"
expect_contains "$OUT" "micro-batch x seq             : 1 x 2049 tokens: a prompt of 1, 2048 generated" \
    "the prompt and the generated tokens"
expect_contains "$OUT" "peak phase                    : decode" "the phase"

# refused where it means nothing
oom estimate --model qwen2.5-0.5b --method inference --seq 2048 --completion-len 2048
expect_rc 2 "nothing left for the prompt"
expect_contains "$ERR" "completion-len '2048' must be shorter than seq '2048'" "named"
oom estimate --model bert-base --method inference --seq 128 --completion-len 16
expect_rc 2 "an encoder does not generate"
expect_contains "$ERR" "causal language model" "said"
oom estimate --model qwen2.5-0.5b --method lora --seq 512 --completion-len 16
expect_rc 2 "training without grpo"
expect_contains "$ERR" "completion-len is for objective 'grpo' or method 'inference'" "said"
oom estimate --model qwen2.5-0.5b --method inference --seq 512 --num-generations 4
expect_rc 2 "num-generations is grpo's alone"
expect_contains "$ERR" "num-generations is for objective 'grpo'" "said"

finish
