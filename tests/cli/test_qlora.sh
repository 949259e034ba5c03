#!/bin/bash
# test_qlora.sh - QLoRA's parts, each pinned through the estimate's JSON: the NF4 codes, the
# absmaxes (fp32, or 8-bit with fp32 second-level constants under double quantization), what is
# left unquantised (16-bit, fp32 after prepare_model_for_kbit_training), the dequantised weight of
# one linear, the adapters in fp32 or bf16, and bitsandbytes' paged optimizers, whose large states
# live in unified memory outside the peaks.
. "$(dirname "$0")/lib.sh"
unset OOMLESS_GPU GPU_PROFILE CUDA_VISIBLE_DEVICES

# llama-3.1-8b: 6 979 321 856 parameters in the blocks' linears, 1 050 939 392 elsewhere; the
# largest linear 4096 x 14336; PEFT's default targets q_proj (4096 -> 4096) and v_proj
# (4096 -> 1024) in 32 layers
LIN=6979321856 REST=1050939392 BIG=$((4096 * 14336))
py() { python3 -c "print(round($1))"; }
q() { oom estimate --model llama-3.1-8b --method qlora --seq 256 "$@" --json; expect_rc 0 "qlora $*"; }

q
expect_json .qlora.double_quant true "double quantization by default under qlora"
expect_json .qlora.nf4_bytes "$((LIN / 2))" "two 4-bit codes a byte"
expect_json .qlora.absmax_bytes "$((LIN / 64))" "an 8-bit absmax per block of 64"
expect_json .qlora.absmax2_bytes "$(py "$LIN * 4 / (64 * 256)")" "an fp32 constant per 256 blocks"
expect_json .qlora.unquantized_bytes "$((REST * 2))" "embeddings, head and norms in bf16"
expect_json .qlora.dequantized_transient_bytes "$(py "$BIG * (2 + 4 / 64)")" \
    "one linear dequantised to bf16 beside its rebuilt fp32 absmaxes"
R16=$((32 * 16 * (4096 + 4096 + 4096 + 1024)))
expect_json .qlora.adapter_dtype fp32 "PEFT's fp32 adapters by default"
expect_json .qlora.adapter_bytes "$((R16 * 4))" "rank-16 adapters in fp32"
expect_json .memory.weights "$(py "$LIN * (0.5 + 1 / 64 + 4 / 16384) + $REST * 2 + $R16 * 4")" \
    "the weights are the sum of the parts"
expect_json .memory.optimizer "$((R16 * 8))" "AdamW: two fp32 states per adapter parameter"
DQ_TEMP=$(jq .memory.temporaries <<<"$OUT")

q --double-quant no
expect_json .qlora.absmax_bytes "$((LIN * 4 / 64))" "without double quantization: fp32 absmaxes"
expect_json .qlora.absmax2_bytes 0 "and no second level"
expect_json .memory.weights "$(py "$LIN * 0.5625 + $REST * 2 + $R16 * 4")" "0.5625 B a weight"
expect_eq "$(jq .memory.temporaries <<<"$OUT")" "$((DQ_TEMP - BIG / 16))" \
    "no absmaxes to rebuild: the transient is the bf16 weight alone"

q --kbit-prepare yes
expect_json .qlora.unquantized_bytes "$((REST * 4))" "prepare_model_for_kbit_training: fp32"
expect_json .memory.weights "$(py "$LIN * (0.5 + 1 / 64 + 4 / 16384) + $REST * 4 + $R16 * 4")" \
    "2 more bytes per unquantised parameter"

# auto: TRL's CPO and ORPO trainers call prepare_model_for_kbit_training, its SFT/DPO/KTO do not
q
expect_json .qlora.unquantized_bytes "$((REST * 2))" "auto under sft: bf16 as loaded"
q --objective orpo
expect_json .qlora.unquantized_bytes "$((REST * 4))" "auto under orpo: fp32, as ORPOTrainer prepares"
q --objective simpo --kbit-prepare no
expect_json .qlora.unquantized_bytes "$((REST * 2))" "simpo with --kbit-prepare no: bf16"
q --objective dpo
expect_json .qlora.unquantized_bytes "$((REST * 2))" "auto under dpo: bf16"
oom estimate --model llama-3.1-8b --method lora --objective orpo --seq 256 --json
expect_rc 0 "auto on a bf16 base: nothing to prepare, not refused"
expect_eq "$(jq .qlora.unquantized_bytes <<<"$OUT")" null "a bf16 base has no unquantised part"

q --adapter-dtype bf16 --grad-accum 2
expect_json .qlora.adapter_dtype bf16 "bf16 adapters"
expect_json .qlora.adapter_bytes "$((R16 * 2))" "2 bytes per adapter parameter"
expect_json .memory.gradients "$((R16 * 2))" "bf16 gradients"
expect_json .memory.optimizer "$((R16 * 4))" "torch's AdamW keeps bf16 states for bf16 params"

# paged optimizers: a state of 100 000 elements or more is paged. At rank 16 no adapter matrix is
# that large (16 x 4096 = 65 536): nothing is paged
q --optimizer paged-adamw
expect_json .qlora.paged_optimizer_bytes 0 "rank 16: every state below 1e5 elements"
expect_json .memory.optimizer "$((R16 * 8))" "rank 16: all states in device memory"
R64=$((R16 * 4)) SMALL=$((32 * 1024 * 64)) # v_proj's B (1024 x 64) stays below 1e5
q --optimizer paged-adamw --lora-rank 64
expect_json .qlora.paged_optimizer_bytes "$(((R64 - SMALL) * 8))" "rank 64: paged fp32 states"
expect_json .memory.optimizer "$((SMALL * 8))" "only v_proj's B keeps its states on the device"
q --optimizer paged-adamw --lora-rank 64 --adapter-dtype bf16
expect_json .memory.optimizer "$((SMALL * 8))" "bitsandbytes' 32-bit states stay fp32 for bf16"
q --optimizer paged-adamw-8bit --lora-rank 64
expect_json .qlora.paged_optimizer_bytes "$(((R64 - SMALL) * 2))" "8-bit paged states"
expect_json .memory.optimizer "$((SMALL * 2))" "8-bit states of the small matrices"
oom estimate --model llama-3.1-8b --method qlora --seq 256 --lora-rank 64 --optimizer adamw-8bit --json
expect_json .memory.optimizer "$((R64 * 2))" "adamw-8bit pages nothing"
# a full fine-tune: the linears', embeddings' and head's states are paged, the norms' are not
oom estimate --model llama-3.2-1b --optimizer paged-adamw --json
expect_rc 0 "full paged-adamw"
NORMS=$(jq '.params.trainable' <<<"$OUT")
expect_eq "$(jq '.memory.optimizer < 1000000' <<<"$OUT")" true "full: only the norms' states stay"
expect_eq "$(jq '.qlora.paged_optimizer_bytes > 7000000000' <<<"$OUT")" true \
    "full: 8 B a parameter of the 1.2 B paged ($NORMS trained)"

# --precision 4bit (inference): BitsAndBytesConfig's default, no double quantization
oom estimate --model llama-3.1-8b --method inference --precision 4bit --json
expect_json .memory.weights "$(py "$LIN * 0.5625 + $REST * 2")" "4bit inference: 0.5625 B"
oom estimate --model llama-3.1-8b --method inference --precision 4bit --double-quant yes --json
expect_json .memory.weights "$(py "$LIN * (0.5 + 1 / 64 + 4 / 16384) + $REST * 2")" \
    "4bit inference with double quantization"

# --bitsandbytes 0.43: MatMul4Bit keeps each 4-bit linear's 16-bit input for the backward. At
# 256 tokens over 32 layers, beside what 0.44 keeps: the attention's input (4096), o_proj's (4096,
# a copy of SDPA's output), the MLP's input (4096) and down_proj's (14336), 2 bytes each
q
ACT=$(jq .memory.activations <<<"$OUT")
expect_json .qlora.quantizer transformers "the quantizer named"
expect_json .qlora.bitsandbytes 0.44 "and the bitsandbytes release modelled"
expect_json .qlora.kept_inputs_bytes 0 "0.44 keeps no input"
q --bitsandbytes 0.43
expect_eq "$(jq .memory.activations <<<"$OUT")" "$((ACT + 256 * 32 * 2 * (4096 + 4096 + 4096 + 14336)))" \
    "0.43 keeps the four inputs of each layer"
expect_json .qlora.kept_inputs_bytes "$((256 * 32 * 2 * (4096 + 4096 + 4096 + 14336)))" \
    "the report says how much"
expect_json .qlora.bitsandbytes 0.43 "0.43 named"
oom estimate --model llama-3.1-8b --method qlora --seq 256 --stack torchtune --json
expect_eq "$(jq .qlora.quantizer <<<"$OUT")" null "torchtune's NF4 is torchao's: no bitsandbytes"
oom estimate --model llama-3.1-8b --method qlora --seq 256 --bitsandbytes 0.43 --quantizer fabric
expect_contains "$OUT" \
    "4-bit code                    : quantizer fabric, bitsandbytes 0.43 or earlier; its 4-bit linears keep their inputs: 416.0 MiB" \
    "the text names the code and what it keeps"
q --attention flash
ACT_FLASH=$(jq .memory.activations <<<"$OUT")
q --attention flash --bitsandbytes 0.43
expect_eq "$(jq .memory.activations <<<"$OUT")" "$((ACT_FLASH + 256 * 32 * 2 * (4096 + 4096 + 14336)))" \
    "under flash-attention o_proj's input is the kernel's own output, kept already"
q --lora-targets all-linear --lora-dropout 0
ACT_ALL=$(jq .memory.activations <<<"$OUT")
q --lora-targets all-linear --lora-dropout 0 --bitsandbytes 0.43
expect_eq "$(jq .memory.activations <<<"$OUT")" "$ACT_ALL" \
    "LoRA without dropout on every linear: lora_A keeps each input already"
q --lora-targets q_proj,down_proj --lora-dropout 0 --bitsandbytes 0.43
Q_DOWN=$(jq .memory.activations <<<"$OUT")
q --lora-targets q_proj,down_proj --lora-dropout 0
expect_eq "$Q_DOWN" "$(($(jq .memory.activations <<<"$OUT") + 256 * 32 * 2 * (4096 + 4096)))" \
    "q_proj and down_proj adapted without dropout: o_proj's and the MLP's inputs left"

# --quantizer fabric: Lightning Fabric's BitsandbytesPrecision (LitGPT) quantizes the output head
# too (128256 x 4096, untied), from an fp16 copy: dequantize_4bit returns fp16, cast to bf16
HEAD=$((128256 * 4096))
q --quantizer fabric
expect_json .qlora.nf4_bytes "$(((LIN + HEAD) / 2))" "the head's codes with the linears'"
expect_json .qlora.unquantized_bytes "$(((REST - HEAD) * 2))" "embeddings and norms left in bf16"
expect_json .qlora.dequantized_transient_bytes "$(py "$HEAD * (4 + 4 / 64)")" \
    "the head, the largest linear, dequantized to fp16 and cast to bf16"
jq '. + {tie_word_embeddings: true}' "$OOMLESS_SRC/data/models/llama-3.1-8b.json" >"$TMP/tied.json"
oom estimate --model "$TMP/tied.json" --method qlora --seq 256 --quantizer fabric --json
expect_json .qlora.unquantized_bytes "$(((REST - HEAD) * 2))" \
    "a tied checkpoint: LitGPT's head is its own nn.Linear, the embedding stays bf16"
expect_json .qlora.nf4_bytes "$(((LIN + HEAD) / 2))" "and its head is quantized"

# refused where they mean nothing
oom estimate --model llama-3.1-8b --method lora --double-quant yes
expect_rc 2 "double-quant on a bf16 base"
expect_contains "$ERR" "double-quant" "named"
oom estimate --model llama-3.1-8b --method full --adapter-dtype bf16
expect_rc 2 "adapter-dtype without adapters"
oom estimate --model llama-3.1-8b --method lora --kbit-prepare yes
expect_rc 2 "kbit-prepare on a bf16 base"
jq '. + {quantization_config: {quant_method: "bitsandbytes", load_in_4bit: true}}' \
    "$OOMLESS_SRC/data/models/llama-3.1-8b.json" >"$TMP/bnb4.json"
oom estimate --model llama-3.1-8b --method lora --bitsandbytes 0.43
expect_rc 2 "bitsandbytes 0.43 on a bf16 base"
expect_contains "$ERR" "bitsandbytes 0.43" "named"
oom estimate --model llama-3.1-8b --method qlora --stack torchtune --bitsandbytes 0.43
expect_rc 2 "bitsandbytes 0.43 under torchtune, whose NF4 is torchao's"
expect_contains "$ERR" "torchtune" "the stack named"
oom estimate --model llama-3.1-8b --method lora --quantizer fabric
expect_rc 2 "quantizer fabric on a bf16 base"
expect_contains "$ERR" "quantizer fabric" "named"
oom estimate --model "$TMP/bnb4.json" --method lora --double-quant yes
expect_rc 2 "double-quant on a pre-quantized checkpoint"
expect_contains "$ERR" "quantization_config" "its config says"
oom estimate --model "$TMP/bnb4.json" --method lora --kbit-prepare yes --json
expect_rc 0 "kbit-prepare on a bitsandbytes checkpoint"
expect_json .memory.weights "$(py "$LIN * 0.5625 + $REST * 4 + $R16 * 4")" "its rest in fp32"

# the text names the parts
oom estimate --model llama-3.1-8b --method qlora --seq 256 --lora-rank 64 --optimizer paged-adamw
expect_rc 0 "qlora text"
expect_contains "$OUT" "NF4 3.25 GiB + absmax 105.6 MiB (double quant), unquantized 1.96 GiB" \
    "the 4-bit base's line"
expect_contains "$OUT" "LoRA adapters                 : fp32, 104.0 MiB" "the adapters' line"
expect_contains "$OUT" "paged optimizer states        : 192.0 MiB in CUDA unified memory" \
    "the paged states' line"
oom estimate --model llama-3.1-8b --seq 256
expect_not_contains "$OUT" "4-bit base" "none of it for a full fine-tune"

# a plan's TrainingArguments name the paged optimizer as transformers does
oom plan --model llama-3.1-8b --method qlora --optimizer paged-adamw-8bit --vram 24 --seq 1024 \
    --format args
expect_rc 0 "plan with a paged optimizer"
expect_contains "$OUT" "--optim paged_adamw_8bit" "transformers' paged_adamw_8bit"

finish
