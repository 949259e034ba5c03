#!/bin/bash
# test_estimate.sh - `oomless estimate`: output, JSON, options, errors and exit codes.
. "$(dirname "$0")/lib.sh"
D="$OOMLESS_SRC/tests/data"

# human output: the breakdown, three peaks, the phase
oom estimate --model llama-3.1-8b --method lora --batch 2 --seq 1024
expect_rc 0 "human estimate"
for want in "weights" "gradients" "optimizer states" "activations" "logits / loss" "KV cache" \
    "CUDA context / overhead" "total (device peak)" "allocated peak" "reserved peak" \
    "device peak (nvidia-smi)" "peak phase"; do
    expect_contains "$OUT" "$want" "human output has '$want'"
done
expect_contains "$OUT" "6.82 M of 8.03 B" "trainable LoRA parameters"
oom estimate --model llama-2-70b --seq 512
expect_contains "$OUT" "trainable parameters          : 68.98 B of 68.98 B" "billions, not 6.898e+04 M"
expect_not_contains "$OUT" "e+0" "no scientific notation"

# --json: one document with the keys, integers in bytes
oom estimate --model llama-3.1-8b --method lora --batch 2 --seq 1024 --json
expect_rc 0 "json estimate"
expect_one_json "estimate --json"
expect_json '.memory | keys | sort | join(",")' \
    "activations,allocated_peak,allocated_peak_upper95,device_peak,device_peak_upper95,gradients,kv_cache,logits,optimizer,overhead,reserved_peak,reserved_peak_upper95,temporaries,weights" \
    "memory keys"
expect_json '.memory | [.[] | type] | unique | join(",")' "number" "sizes are numbers"
expect_json '.memory.device_peak == .memory.reserved_peak + .memory.overhead' "true" "device = reserved + overhead"
expect_json '.memory.reserved_peak >= .memory.allocated_peak' "true" "reserved >= allocated"
expect_json '.params.trainable' "6815744" "trainable count"
expect_json '.workload.method + " " + .workload.precision' "lora bf16" "workload echoed"
expect_json '.peak_phase' "backward" "peak phase"
expect_json '.budget' "null" "no budget unless asked"

# inference: KV cache of Llama-2-7B is 512 KiB per token in 16-bit
oom estimate --model llama-2-7b --method inference --seq 4096 --batch 1 --json
expect_json '.memory.kv_cache' "$((512 * 1024 * 4096))" "llama-2-7b KV cache"
expect_json '.peak_phase' "prefill" "inference phase"

# option spellings: --key=value and python-style underscores through the library
oom estimate --model=gpt2 --seq=256 --grad-accum=2 --json
expect_rc 0 "--key=value"
expect_json '.workload.grad_accum' "2" "grad accum set"

# a budget with --vram: fits (exit 0) / does not fit (exit 1)
oom estimate --model gpt2 --seq 256 --vram 24 --json
expect_rc 0 "fits 24 GiB"
expect_json '.budget.usable_bytes' "$((23 * 1024 * 1024 * 1024))" "usable = 24 GiB - 1 GiB"
expect_json '.budget.fits' "true" "fits"
oom estimate --model llama-3.2-1b --method lora --seq 2048 --vram 16 --vram-safety-margin 512 \
    --batch 16 --grad-accum 2 --svg "$TMP/e.svg"
expect_rc 1 "1B LoRA at 16 x 2048 does not fit 16 GiB"
# the verdict first (under the title), and the command that plans what fits
expect_eq "$(sed -n 3p <<<"$OUT" | sed -E 's/[0-9.]+ GiB over/N GiB over/')" \
    "  fits                          : NO (N GiB over the usable 15.50 GiB)" \
    "says first that it does not fit, and by how much"
NEXT=$(sed -n 4p <<<"$OUT" | sed -E 's/^  next +: //')
expect_eq "$NEXT" "oomless plan --model llama-3.2-1b --method lora --seq 2048 --vram 16 --vram-safety-margin 512 --target-effective-batch 32" \
    "then the plan of the same workload, keeping its effective batch (batch x accumulation)"
expect_not_contains "$(tail -n 3 <<<"$OUT")" "fits" "the verdict is not at the end"
expect_contains "$(tail -n 2 <<<"$OUT")" "usable VRAM                   : 15.50 GiB" "the budget ends it"
eval "run \"\$OOMLESS_BIN\" ${NEXT#oomless } --json"
expect_rc 0 "the next command plans it"
expect_json '.plan.effective_batch' "32" "keeping the effective batch"
oom estimate --model gpt2 --vram 16
expect_rc 0 "gpt2 fits 16 GiB"
expect_eq "$(sed -n 3p <<<"$OUT" | sed -E 's/[0-9.]+ GiB of/N GiB of/')" \
    "  fits                          : yes (N GiB of the usable 15.00 GiB to spare)" \
    "says first that it fits, and the room left"
expect_not_contains "$OUT" "  next " "no next command when it fits"
# an inference batch is left to the planner; a value with a space is quoted for the shell
oom estimate --model llama-3.1-8b --method inference --seq 8192 --batch 64 --vram 20 \
    --gpu "NVIDIA GeForce RTX 4090"
expect_rc 1 "inference at batch 64 does not fit 20 GiB"
NEXT=$(grep -E '^  next +: ' <<<"$OUT" | sed -E 's/^  next +: //')
expect_eq "$NEXT" "oomless plan --model llama-3.1-8b --method inference --seq 8192 --vram 20 --gpu 'NVIDIA GeForce RTX 4090'" \
    "inference: no batch, the GPU's name quoted"
eval "run \"\$OOMLESS_BIN\" ${NEXT#oomless } --json"
expect_rc 0 "that command plans the largest batch that fits"
# a workload plan cannot take (sharding fsdp2 is estimated, not planned): no next command
oom estimate --model llama-3.1-8b --gpus 2 --sharding fsdp2 --vram 16
expect_rc 1 "fsdp2 does not fit 16 GiB"
expect_contains "$(sed -n 3p <<<"$OUT")" "fits                          : NO" "the verdict"
expect_not_contains "$OUT" "  next " "no plan command for fsdp2"
oom estimate --model gpt2 --vram-safety-margin 512
expect_rc 2 "margin without a target"

# --list-models and --help
oom estimate --list-models
expect_rc 0 "list models"
expect_contains "$OUT" "llama-3.1-8b" "preset listed"
expect_contains "$OUT" "mixtral-8x7b" "MoE preset listed"
oom estimate --list-models --json
expect_one_json "list-models --json"
expect_json '[.[] | select(.name == "llama-2-7b") | .params][0]' "6738415616" "preset params in JSON"
oom estimate --help
expect_rc 0 "help"
for opt in --model --method --lora-rank --lora-targets --precision --optimizer --batch --seq \
    --grad-accum --checkpointing --attention --loss --gpus --sharding --offload --overhead \
    --gpu --vram --vram-safety-margin --json --list-models; do
    expect_contains "$OUT" "$opt" "help lists $opt"
done

# errors name the value, exit 2
oom estimate --model gpt2 --gpus 0
expect_rc 2 "--gpus 0"
expect_contains "$ERR" "'0'" "names the value"
oom estimate --model llama-2-7b --method qlora --precision fp32
expect_rc 2 "qlora fp32"
expect_contains "$ERR" "fp32" "names the precision"
oom estimate --model gpt2 --lora-rank 8
expect_rc 2 "lora-rank without lora"
expect_contains "$ERR" "lora-rank" "names the option"
oom estimate --model gpt2 --seq 4096
expect_rc 2 "seq beyond positions"
expect_contains "$ERR" "4096" "names the length"
oom estimate --model gpt2 --seq 4096 --max-positions 4096 --json
expect_rc 0 "explicit override"
oom estimate --model gpt2 --precision fp12
expect_rc 2 "bad precision"
expect_contains "$ERR" "fp12" "names the bad precision"
oom estimate --model nosuchmodel
expect_rc 2 "unknown preset"
expect_contains "$ERR" "nosuchmodel" "names the model"
oom estimate --model gpt2 --frobnicate 3
expect_rc 2 "unknown option"
expect_contains "$ERR" "--frobnicate" "names the option"
oom estimate --model gpt2 --batch
expect_rc 2 "missing value"
oom estimate
expect_rc 2 "no model"
expect_contains "$ERR" "no model is set (use --model NAME|PATH)" "asks for a model"

# malformed and unsupported configs name the file and the key
oom estimate --model "$D/estimate_missing_key.json"
expect_rc 2 "missing key"
expect_contains "$ERR" "estimate_missing_key.json" "names the file"
expect_contains "$ERR" "hidden_size" "names the key"
oom estimate --model "$D/estimate_unsupported.json"
expect_rc 2 "unsupported family"
expect_contains "$ERR" "mamba" "names the model type"
oom estimate --model "$D/estimate_truncated.json"
expect_rc 2 "truncated JSON"
expect_contains "$ERR" "estimate_truncated.json" "names the truncated file"
oom estimate --model "$D/estimate_fractional.json"
expect_rc 2 "a fractional width"
expect_contains "$ERR" "model config '$D/estimate_fractional.json': hidden_size 2048.5 is not a whole number" \
    "names the file, the key and the value"
# a decimal comma, as a de_DE locale writes numbers: said to write '.', not "unknown unit"
for opt in "--vram 20,5" "--vram 20,5GiB" "--vram 24 --vram-safety-margin 1,5GiB" \
    "--lora-dropout 0,05 --method lora"; do
    # shellcheck disable=SC2086
    run env LC_ALL=de_DE.UTF-8 "$OOMLESS_BIN" estimate --model gpt2 $opt
    expect_rc 2 "decimal comma: $opt"
    expect_contains "$ERR" "has a comma: write the decimal separator as '.' (20.5, not 20,5)" \
        "decimal comma: $opt"
    expect_not_contains "$ERR" "unknown unit" "decimal comma: $opt"
done
oom estimate --model "$D/no-such-dir/config.json"
expect_rc 2 "missing config file"
expect_contains "$ERR" "no-such-dir/config.json" "names the path"
oom estimate --model meta-llama/Llama-3.1-8B --json
expect_rc 0 "a Hub id whose name is a preset"
expect_json '.model.vocab' "128256" "preset found case-insensitively"
oom estimate --model "$D/estimate_tiny_llama.json" --seq 64 --json
expect_rc 0 "a config path"
expect_json '.model.head' "seq-cls" "head from architectures"
expect_json '.memory.logits' "0" "classification has no vocabulary logits"

# the same workload gives the same bytes on every run, and the breakdown adds up
oom estimate --model mixtral-8x7b --method qlora --seq 2048 --batch 1 --checkpointing full --json
expect_json '([.memory.weights,.memory.gradients,.memory.optimizer,.memory.activations,.memory.logits,.memory.kv_cache,.memory.temporaries] | add) == .memory.allocated_peak' "true" "breakdown sums to allocated"
A=$OUT
oom estimate --model mixtral-8x7b --method qlora --seq 2048 --batch 1 --checkpointing full --json
expect_eq "$OUT" "$A" "deterministic"

# the coefficients are data: a changed value changes the estimate, a broken file is refused
mkdir -p "$TMP/data/models"
cp "$OOMLESS_SRC/data/models/gpt2.json" "$TMP/data/models/"
cp "$OOMLESS_SRC/data/confidence.json" "$TMP/data/"
jq '.context.generic = 1073741824' "$OOMLESS_SRC/data/coefficients.json" >"$TMP/data/coefficients.json"
OOMLESS_DATA_DIR="$TMP/data" oom estimate --model gpt2 --json
expect_rc 0 "estimate with edited coefficients"
expect_json '.memory.overhead' "1073741824" "context size read from the data file"
jq 'del(.logits.backward_16bit)' "$OOMLESS_SRC/data/coefficients.json" >"$TMP/data/coefficients.json"
OOMLESS_DATA_DIR="$TMP/data" oom estimate --model gpt2
expect_rc 2 "broken coefficients"
expect_contains "$ERR" "backward_16bit" "names the missing coefficient"
expect_contains "$ERR" "coefficients.json" "names the file"

# --gpu takes a device name as nvidia-smi prints it: the profile detection would pick
oom estimate --model gpt2 --gpu "NVIDIA H100 80GB HBM3"
expect_rc 0 "--gpu with an nvidia-smi name"
expect_contains "$OUT" "target VRAM                   : 79.65 GiB (NVIDIA H100 SXM5 80GB)" "the H100 profile"
expect_contains "$OUT" "755.0 MiB" "and its measured context"
oom estimate --model gpt2 --gpu "NVIDIA Nonesuch 7"
expect_rc 2 "a device name no profile matches"
expect_contains "$ERR" "unknown GPU profile 'NVIDIA Nonesuch 7'" "is refused naming it"

# memory outside PyTorch's allocator, part by part: one GPU has no communicator
oom estimate --model llama-3.1-8b --method lora --gpu h100 --json
expect_rc 0 "overhead parts, one GPU"
expect_json '[.overhead.parts[].name] | join(",")' "cuda_context" "one GPU: the context alone"
expect_json '.overhead.total == .memory.overhead' "true" "the parts add up to the overhead"
expect_json '.overhead.nccl' "null" "no NCCL on one GPU"
# 8 H100s: 32 channels x (4 MiB + 512 KiB + 4.6875 MiB) and NVLS as NCCL logs it (nvlsTotalSize
# 2415919104 for 8 GPUs of 4 MiB buffers)
oom estimate --model llama-3.1-8b --gpu h100 --gpus 8 --sharding zero3 --json
expect_rc 0 "overhead parts, 8 GPUs"
expect_json '.overhead.nccl.ring_bytes' "308281344" "ring buffers of 32 channels"
expect_json '.overhead.nccl.nvls_bytes' "2415919104" "NVLS buffers as NCCL's log line"
expect_json '.overhead.parts[1].default' "true" "NCCL's defaults are flagged"
expect_json '.overhead.total == .memory.overhead' "true" "NCCL counted in the overhead"
ALL=$(jq '.memory.device_peak' <<<"$OUT")
NCCL_NVLS_ENABLE=0 NCCL_BUFFSIZE=1048576 oom estimate --model llama-3.1-8b --gpu h100 --gpus 8 \
    --sharding zero3 --json
expect_rc 0 "NCCL's environment variables"
expect_json '.overhead.nccl.nvls' "false" "NCCL_NVLS_ENABLE=0 turns NVLS off"
expect_json '.overhead.nccl.ring_bytes' "207618048" "NCCL_BUFFSIZE shrinks the ring's buffers"
expect_json ".memory.device_peak == $ALL - 2415919104 - 308281344 + 207618048" "true" \
    "the device peak follows the NCCL buffers"
NCCL_NVLS_ENABLE=0 oom estimate --model llama-3.1-8b --gpu h100 --gpus 8 --sharding zero3 \
    --nccl-nvls yes --nccl-channels 16 --nccl-buffsize 4MiB --nccl-communicators 1 --json
expect_json '.overhead.nccl.nvls' "true" "the command line overrides the environment"
expect_json '.overhead.nccl.ring_bytes' "154140672" "--nccl-channels"
expect_json '.overhead.parts[1].default' "false" "every NCCL setting given: no notice"
# vLLM's tensor parallelism keeps two communicators (its own and torch.distributed's)
oom estimate --model llama-3.1-70b --method inference --seq 8192 --gpu h100 --tensor-parallel 8 --json
expect_json '.overhead.nccl.communicators' "2" "two communicators under a serving engine"
expect_json '.overhead.parts[1].bytes' "$((2 * (308281344 + 2415919104)))" "each with its buffers"
oom estimate --model llama-3.1-70b --method inference --seq 8192 --gpu h100 --tensor-parallel 8 \
    --kv-cache transformers --json
expect_json '.overhead.nccl.communicators' "1" "one for transformers"
oom estimate --model llama-3.1-8b --method lora --gpu a100 --gpus 4
expect_rc 0 "NCCL in the text breakdown"
expect_contains "$OUT" "NCCL buffers                :    294.0 MiB" "an A100 has no NVLS"
expect_contains "$OUT" "notice                        : NCCL's defaults assumed" "the defaults' notice"
NCCL_MAX_NCHANNELS=many oom estimate --model llama-3.1-8b --gpus 2
expect_rc 2 "a bad NCCL environment variable"
expect_contains "$ERR" "NCCL_MAX_NCHANNELS=many" "is named"
# the plan says the NCCL part of its overhead in a note (text and JSON)
NCCL_MAX_NCHANNELS=8 oom plan --model llama-3.1-8b --seq 2048 --gpus 8 --gpu h100 \
    --target-effective-batch 64 --nccl-nvls no --nccl-buffsize 1MiB --nccl-communicators 1 --json
expect_rc 0 "a plan over 8 GPUs"
expect_json '[.notices[] | select(startswith("overhead: CUDA context 755.0 MiB + NCCL buffers 49.50 MiB (8 GPUs, 1 communicator, 8 channels x 1.00 MiB, NVLS off)"))] | length' \
    "1" "the plan's NCCL note, every setting given"
oom plan --model qwen2.5-0.5b --seq 512 --gpu h100 --target-effective-batch 8 --json
expect_json '[.notices[] | select(startswith("overhead:"))] | length' "0" "one GPU: no NCCL note"
oom estimate --model llama-3.1-8b --gpus 2 --nccl-nvls sometimes
expect_rc 2 "a bad --nccl-nvls"

# the cuBLAS workspace: from PyTorch's caching allocator, in the temporaries; 32 MiB on Hopper
oom estimate --model llama-3.1-8b --method lora --gpu h100 --json
expect_json '.cublas_workspace.bytes' "33554432" "32 MiB on compute capability 9.0"
T32=$(jq '.memory.temporaries' <<<"$OUT")
CUBLAS_WORKSPACE_CONFIG=:4096:2:16:8 oom estimate --model llama-3.1-8b --method lora --gpu h100 --json
expect_json '.cublas_workspace.bytes' "8519680" "CUBLAS_WORKSPACE_CONFIG read (2 x 4 MiB + 8 x 16 KiB)"
expect_json ".memory.temporaries == $T32 - 33554432 + 8519680" "true" "counted in the temporaries"
expect_json '.cublas_workspace.default' "false" "a given workspace is no default"
oom estimate --model llama-3.1-8b --method lora --gpu a100 --cublas-workspace :1024:1
expect_rc 0 "--cublas-workspace"
expect_contains "$OUT" "cuBLAS workspace              : 1.00 MiB in the temporaries" "in the text"
oom estimate --model llama-3.1-8b --method lora --cublas-workspace 4096
expect_rc 2 "a workspace that is not :SIZE:COUNT pairs"

finish
