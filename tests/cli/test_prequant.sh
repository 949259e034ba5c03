#!/bin/bash
# test_prequant.sh - pre-quantized checkpoints: a config.json's quantization_config sets the bytes
# of the linears' weights (GPTQ/AWQ groups, bitsandbytes 4/8-bit, fp8 blocks), the rest stays
# 16-bit; a full fine-tune is refused; what is not modelled is refused naming it.
. "$(dirname "$0")/lib.sh"
unset OOMLESS_GPU GPU_PROFILE CUDA_VISIBLE_DEVICES

# llama-3.1-8b with a quantization_config (the preset's shape)
quant() { jq --argjson q "$2" '. + {quantization_config: $q}' "$OOMLESS_SRC/data/models/llama-3.1-8b.json" >"$TMP/$1.json"; }
quant gptq '{"quant_method":"gptq","bits":4,"group_size":128,"desc_act":false}'
quant awq '{"quant_method":"awq","bits":4,"group_size":64,"zero_point":true}'
quant gptq8 '{"quant_method":"gptq","bits":8,"group_size":-1}'
quant bnb4 '{"quant_method":"bitsandbytes","load_in_4bit":true,"bnb_4bit_use_double_quant":true}'
quant bnb8 '{"quant_method":"bitsandbytes","load_in_8bit":true}'
quant fp8 '{"quant_method":"fp8","fmt":"e4m3","weight_block_size":[128,128]}'
quant hqq '{"quant_method":"hqq","nbits":4}'
quant nomethod '{"bits":4}'

# the preset's parameters: 6 979 321 856 in the blocks' linears, the rest (embeddings, head,
# norms) 1 050 939 392, kept in 16 bits
oom estimate --model llama-3.1-8b --method inference --json
expect_rc 0 "the preset"
LIN=6979321856 REST=1050939392
expect_eq "$(jq .params.total <<<"$OUT")" $((LIN + REST)) "preset parameters"
w() { # the weights the estimate gives for config $1, in bytes
    oom estimate --model "$TMP/$1.json" --method inference --json
    expect_rc 0 "$1 estimated"
    jq .memory.weights <<<"$OUT"
}
# bytes per weight: bits/8 + (fp16 scale + packed zero) per group
expect_eq "$(w gptq)" "$(python3 -c "print(round($LIN * (0.5 + 2.5 / 128) + $REST * 2))")" \
    "gptq 4-bit g128: 0.5195 B a weight"
oom estimate --model "$TMP/gptq.json" --method inference --json
expect_json .model.quantization "gptq 4-bit, groups of 128" "named in the JSON"
expect_eq "$(w awq)" "$(python3 -c "print(round($LIN * (0.5 + 2.5 / 64) + $REST * 2))")" "awq g64"
expect_eq "$(w gptq8)" "$(python3 -c "print(round($LIN * (1 + 3 / 4096) + $REST * 2))")" \
    "gptq 8-bit per input row (group_size -1: the hidden size, 4096)"
expect_eq "$(w bnb4)" "$(python3 -c "print(round($LIN * (0.5 + 1 / 64 + 4 / (64 * 256)) + $REST * 2))")" \
    "bitsandbytes nf4 with double quantization"
expect_eq "$(w bnb8)" $((LIN + REST * 2)) "bitsandbytes 8-bit"
expect_eq "$(w fp8)" "$(python3 -c "print(round($LIN * (1 + 4 / 16384) + $REST * 2))")" \
    "fp8 with an fp32 scale per 128 x 128 block"

# training: the quantized base is frozen
oom estimate --model "$TMP/gptq.json" --method full
expect_rc 2 "a full fine-tune of a GPTQ checkpoint"
expect_contains "$ERR" "is pre-quantized (gptq 4-bit, groups of 128)" "names the quantization"
expect_contains "$ERR" "--method lora" "and what to use"
oom estimate --model "$TMP/gptq.json" --method lora --seq 1024 --json
expect_rc 0 "LoRA on a GPTQ checkpoint"
expect_eq "$(jq '.memory.weights > 5000000000 and .memory.weights < 6000000000' <<<"$OUT")" true \
    "its weights quantized (5.3 GiB + adapters), not 16-bit"
oom plan --model "$TMP/awq.json" --method lora --seq 2048 --gpu rtx-4090 --json
expect_rc 0 "plan on an AWQ checkpoint"

# refused, naming what is wrong
oom estimate --model "$TMP/hqq.json"
expect_rc 2 "a quantization method not modelled"
expect_contains "$ERR" "quant_method 'hqq' is not modelled" "names it"
oom estimate --model "$TMP/nomethod.json"
expect_rc 2 "no quant_method"
expect_contains "$ERR" "quantization_config needs a 'quant_method'" "says what is missing"
finish
