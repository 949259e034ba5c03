#!/bin/bash
# test_plan.sh - `oomless plan`: the report, JSON, the formats, overrides, refusals, SVG.
. "$(dirname "$0")/lib.sh"
D="$OOMLESS_SRC/tests/data/plan"
no_nvml

# the demo: no GPU -> the default profile with a notice, and a plan that fits
oom plan --model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 32
expect_rc 0 "demo plan"
expect_contains "$ERR" "planning for profile 'rtx-4090'" "fallback notice on stderr"
for want in "Optimized Configuration" "batch_size" "gradient_accumulation_steps" \
    "effective_batch_size          : 32" "Memory per GPU" "total (device peak)" "Budget" \
    "of usable" "Estimated throughput" "tokens/s" "Faster, but they do not fit"; do
    expect_contains "$OUT" "$want" "report has '$want'"
done
# the report's configuration is the plan --json gives for the same request
TEXT=$OUT
oom plan --model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 32 --json
expect_rc 0 "demo plan --json"
field() { sed -n "s/^  $1 *: //p" <<<"$TEXT"; }
expect_eq "$(field batch_size)" "$(jq -r .plan.batch_size <<<"$OUT")" "report: batch_size"
expect_eq "$(field gradient_accumulation_steps)" "$(jq -r .plan.grad_accum <<<"$OUT")" \
    "report: gradient_accumulation_steps"
expect_eq "$(field max_seq_len)" 2048 "report: max_seq_len"
expect_eq "$(field precision)" "$(jq -r .plan.precision <<<"$OUT")" "report: precision"
expect_eq "$(field gradient_checkpointing)" "$(jq -r .plan.checkpointing <<<"$OUT")" \
    "report: gradient_checkpointing"
expect_eq "$(field optimizer)" "$(jq -r .plan.optimizer <<<"$OUT")" "report: optimizer"

# --json: one document, the plan keys `oomless apply` reads, memory keys as estimate
oom plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --json
expect_rc 0 "json plan"
expect_one_json "plan --json"
expect_json '.plan | keys | sort | join(",")' \
    "attention,batch_size,checkpointing,effective_batch,exact_precision,gpus,grad_accum,loss,offload,optimizer,precision,seq_len,sharding" \
    "plan keys"
expect_json '.memory | keys | sort | join(",")' \
    "activations,allocated_peak,device_peak,gradients,kv_cache,logits,optimizer,overhead,reserved_peak,temporaries,weights" \
    "memory keys"
expect_json '.plan.batch_size * .plan.grad_accum' "32" "exact effective batch"
expect_json '.plan.precision + " " + (.plan.gpus|tostring)' "bf16 1" "values as strings / ints"
expect_json '.memory.device_peak <= .budget.usable_bytes' "true" "fits the budget"
expect_json '.budget.target_bytes - .budget.safety_margin_bytes == .budget.usable_bytes' "true" "budget"
expect_json '.throughput.tokens_per_s > 0' "true" "throughput"
expect_json '.alternatives | length > 0' "true" "alternatives"
expect_json '[.alternatives[].why | length > 0] | all' "true" "every alternative says why"

# the library's one-call JSON is what the CLI prints (same search, same numbers)
oom plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --json
A=$(printf '%s' "$OUT" | jq -c .plan)
oom plan --model=llama-3.1-8b --method=lora --seq=2048 --gpu=rtx-4090 --json
expect_eq "$(printf '%s' "$OUT" | jq -c .plan)" "$A" "--key=value gives the same plan"

# env: evaluates in bash
oom plan --model gpt2 --seq 512 --gpu a100-80gb --format env
expect_rc 0 "env format"
(
    eval "$OUT"
    [ "$((OOMLESS_BATCH_SIZE * OOMLESS_GRAD_ACCUM))" = 32 ] && [ "$OOMLESS_SEQ_LEN" = 512 ]
) && ok || bad "env output evaluates in bash and multiplies to 32"

# args: Hugging Face Trainer arguments
oom plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --format args
expect_rc 0 "args format"
expect_contains "$OUT" "--per_device_train_batch_size 1 --gradient_accumulation_steps 32" "args"
expect_contains "$OUT" "--activation_checkpointing" "args checkpointing: transformers 5.23's name"
expect_not_contains "$OUT" "gradient_checkpointing" "args: not the name deprecated in 5.23"
expect_contains "$OUT" "--bf16" "args precision"
expect_contains "$ERR" "--format args: the keys of Hugging Face transformers 5.23" "args: the version said"
# --format-version: the newest version the format knows that is not newer than the one asked
oom plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --format args --format-version 4.57.1
expect_rc 0 "args for transformers 4.57.1"
expect_contains "$OUT" "--gradient_checkpointing" "args for 4.57.1: the switch 4.x reads"
expect_contains "$ERR" "the keys of Hugging Face transformers 4.56" "args for 4.57.1: 4.56's keys"
oom plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --format args --format-version 6.1
expect_rc 0 "args for transformers 6.1"
expect_contains "$ERR" "transformers 6.1 is newer than the versions the args format knows (4.56, 5.23)" \
    "a newer version: said, the latest keys written"
for v in 4.11 banana ""; do
    oom plan --model gpt2 --gpu rtx-4090 --format args --format-version "$v"
    expect_rc 2 "--format-version '$v' refused"
done
expect_contains "$ERR" "--format-version '' is not a version" "not a version: named"
oom plan --model gpt2 --gpu rtx-4090 --format args --format-version 4.11
expect_contains "$ERR" "writes Hugging Face transformers 4.56 and later" "too old: the oldest known"
oom plan --model gpt2 --gpu rtx-4090 --format env --format-version 1.0
expect_rc 2 "env follows no framework"
expect_contains "$ERR" "the env format follows no framework's version" "env: why"

# DeepSpeed: a valid ds_config.json fragment for 8 x A100 with ZeRO
oom plan --model llama-2-7b --seq 2048 --gpus 8 --gpu a100-80gb --target-effective-batch 64 --format deepspeed
expect_rc 0 "deepspeed format"
expect_one_json "deepspeed is one JSON document"
expect_json '.train_micro_batch_size_per_gpu * .gradient_accumulation_steps * 8 == .train_batch_size' "true" "ds batch sizes"
expect_json '.train_batch_size' "64" "ds train_batch_size"
expect_json '.zero_optimization.stage >= 1' "true" "ZeRO stage chosen for a 7B full fine-tune"
expect_json '.bf16.enabled' "true" "bf16 enabled"
expect_json '.fp16.enabled' "false" "fp16 disabled"

oom plan --model llama-2-7b --seq 2048 --gpus 8 --gpu a100-80gb --target-effective-batch 64 --json
expect_json '.plan.precision + " " + .estimate_precision' "bf16 amp-bf16" "framework precision name, exact one beside"
expect_json '.plan.exact_precision' "amp-bf16" "exact precision in the plan object"
expect_json '[.alternatives[].plan.exact_precision | length > 0] | all' "true" "exact precision in each alternative"
expect_json '.deepspeed.zero_optimization.stage == (.plan.sharding | ltrimstr("zero") | tonumber)' "true" "sharded plan carries its DeepSpeed config"
oom plan --model llama-2-7b --method lora --seq 2048 --gpu a100-80gb --json
expect_json '.plan.precision + " " + .plan.exact_precision + " " + (.deepspeed | tostring)' "bf16 bf16 null" "pure bf16 LoRA: exact precision bf16, no DeepSpeed config"

# offload appears in the DeepSpeed config when the planner needs it
oom plan --model llama-2-7b --seq 2048 --gpu rtx-4090 --allow checkpointing,offload,precision --format deepspeed
expect_rc 0 "7B full on 24 GiB with offload"
expect_json '.zero_optimization.offload_optimizer.device' "cpu" "optimizer offload"

# torchrun: single node and multi-node launch lines
oom plan --model llama-2-7b --seq 2048 --gpus 8 --gpu a100-80gb --target-effective-batch 64 --format torchrun
expect_contains "$OUT" "torchrun --standalone --nnodes=1 --nproc_per_node=8 train.py" "torchrun 1 node"
oom plan --model llama-2-7b --seq 2048 --nodes 2 --gpus-per-node 8 --gpu a100-80gb --target-effective-batch 64 --format torchrun
expect_contains "$OUT" "--nnodes=2 --nproc_per_node=8 --node_rank=\$NODE_RANK" "torchrun 2 nodes"
oom plan --model gpt2 --gpus 4 --nodes 3 --gpus-per-node 2
expect_rc 2 "--gpus contradicting nodes x per node"

# overrides: a fixed batch is kept when it fits, never raised
oom plan --model gpt2 --seq 256 --gpu a100-80gb --batch-size 2 --json
expect_json '.plan.batch_size' "2" "fixed batch kept"
expect_json '.plan.effective_batch' "2" "default target = batch x accum"
OOMLESS_BATCH_SIZE=4 oom plan --model gpt2 --seq 256 --gpu a100-80gb --json
expect_json '.plan.batch_size' "4" "OOMLESS_BATCH_SIZE fixes the batch"
oom plan --model gpt2 --seq 256 --gpu a100-80gb --grad-accum 4 --json
expect_json '.plan.grad_accum' "4" "fixed accumulation kept"

# downscale: loud on stderr and in JSON; refused with --no-allow-downscale
oom plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --batch-size 8 --json
expect_rc 0 "downscaled plan"
expect_contains "$ERR" "DOWNSCALED: batch size 8" "downscale on stderr"
expect_json '.downscaled | join(",")' "batch" "downscale in JSON"
expect_json '.requested.batch_size' "8" "requested batch in JSON"
expect_json '.plan.batch_size < 8' "true" "lowered"
oom plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --batch-size 8 --no-allow-downscale
expect_rc 1 "no downscale: refused"
expect_contains "$OUT" "--allow-downscale: batch size 1" "says what would fit"

# impossible budget: exit 1, the smallest configuration, its peak, what would fit
oom plan --model llama-2-13b --seq 2048 --gpu rtx-4090
expect_rc 1 "13B full on 24 GiB"
expect_contains "$ERR" "nothing fits" "refusal on stderr"
expect_contains "$OUT" "smallest configuration tried" "smallest config"
expect_contains "$OUT" "--method qlora" "QLoRA suggested"
expect_contains "$OUT" "ZeRO-3" "ZeRO-3 suggested"
oom plan --model llama-2-13b --seq 2048 --gpu rtx-4090 --json
expect_rc 1 "impossible, json"
expect_one_json "refusal is one JSON document"
expect_json '.found' "false" "found false"
expect_json '.plan' "null" "no plan"
expect_json '.smallest.device_peak > .budget.usable_bytes' "true" "smallest peak over budget"
oom plan --model llama-2-13b --seq 2048 --gpu rtx-4090 --format env
expect_rc 1 "impossible, env"
expect_eq "$OUT" "" "nothing on stdout to eval"

# inference: the largest batch and the KV-cache budget
oom plan --model llama-3.1-8b --method inference --seq 4096 --vram 16 --allow precision --json
expect_rc 0 "inference on 16 GiB"
expect_json '.inference.max_batch == .plan.batch_size' "true" "max batch"
expect_json '.inference.kv_cache_budget_bytes > 0' "true" "KV budget"
oom plan --model llama-3.1-8b --method inference --seq-range 1024:8192 --batch 1 --gpu rtx-4060-ti --allow precision --json
expect_json '.plan.seq_len' "8192" "longest context in the range"

# measured line (options and a workload file) and workers
oom plan --workload "$D/contrastive.yaml" --vram 24 --json
expect_rc 0 "measured line from a file"
expect_json '.plan.batch_size' "16" "2 GiB + 16 x 32 x 40 MiB = 22 GiB fits, 32 does not"
expect_json '.plan.grad_accum' "4" "accumulation to 64"
oom plan --fixed-bytes 3GiB --bytes-per-sample 200MiB --batch-size 4 --workers auto --vram 16 --json
expect_json '.workers.max' "3" "3 copies fit 15 GiB"
oom plan --fixed-bytes 3GiB --bytes-per-sample 200MiB --batch-size 4 --workers 4 --vram 16 --no-allow-downscale
expect_rc 1 "4 workers do not fit"

# SVG: valid XML with the budget line and the chosen point
oom plan --model llama-3.1-8b --method lora --seq 2048 --gpu rtx-4090 --svg "$TMP/plan.svg"
expect_rc 0 "plan --svg"
python3 -c "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); \
  assert r.tag.endswith('svg'); t = ''.join(r.itertext()); assert 'usable' in t and 'chosen' in t" \
    "$TMP/plan.svg" && ok || bad "plan SVG is valid XML with budget and choice"
oom estimate --model llama-2-7b --vram 24 --svg "$TMP/est.svg"
python3 -c "import sys, xml.etree.ElementTree as E; E.parse(sys.argv[1])" "$TMP/est.svg" && ok ||
    bad "estimate SVG is valid XML"

# usage errors
oom plan --model gpt2 --format yaml
expect_rc 2 "unknown format"
# --allow loss,attention: a chunked loss beats checkpointing where both fit; the outputs say so
oom plan --model qwen2.5-0.5b --seq 4096 --gpu rtx-4090 --target-effective-batch 32 --json
expect_json '.plan.checkpointing + " " + .plan.loss' "full standard" "default: checkpointing"
oom plan --model qwen2.5-0.5b --seq 4096 --gpu rtx-4090 --target-effective-batch 32 \
    --allow checkpointing,loss,attention --json
expect_json '.plan.checkpointing + " " + .plan.loss' "none chunked" "allowed: chunked loss"
oom plan --model qwen2.5-0.5b --seq 4096 --gpu rtx-4090 --target-effective-batch 32 \
    --allow checkpointing,loss --format args
expect_contains "$OUT" "--use_liger_kernel" "args: the Liger kernels"
oom plan --model qwen2.5-0.5b --seq 4096 --gpu rtx-4090 --target-effective-batch 32 \
    --attention eager --allow checkpointing,attention --format torchrun
expect_rc 0 "torchrun"
expect_contains "$OUT" "OOMLESS_ATTENTION=sdpa OOMLESS_LOSS=standard torchrun" \
    "torchrun: the attention in an env var"
oom plan --model qwen2.5-0.5b --seq 4096 --gpu rtx-4090 --batch-size 2 --grad-accum 16
expect_contains "$OUT" "batch size 2 fits with --allow loss (chunked loss)" "fixed batch: names the change"
# an awkward (prime) effective batch: the nearest better ones; --allow-inexact rounds down too
oom plan --model qwen2.5-0.5b --seq 2048 --gpu rtx-4090 --target-effective-batch 97 --allow checkpointing,loss
expect_contains "$OUT" "nearest with larger, faster micro-batches: 96 = 3 x 32" "awkward target: hint"
oom plan --model qwen2.5-0.5b --seq 2048 --gpu rtx-4090 --target-effective-batch 97 --allow checkpointing,loss \
    --allow-inexact --json
expect_json '.plan.effective_batch' 96 "inexact: rounded down"
expect_json '.notices[0]' "effective batch 96 instead of 97 (-1.0%, --allow-inexact)" "inexact: says by how much"
oom plan --model gpt2 --seq 512 --gpu a100-80gb --grad-accum 10 --target-effective-batch 97
expect_rc 2 "fixed accumulation that cannot make the target"
expect_contains "$ERR" "--allow-inexact" "names the way out"
# honest output: a measured line without --seq has no sequence length; --workers always shows
oom plan --fixed-bytes 12GiB --bytes-per-sample 1GiB --vram 24 --workers 1 --flops-per-sample 1e12
expect_rc 0 "measured line"
expect_contains "$OUT" "max_seq_len                   : not known (give --seq)" "seq not known"
expect_not_contains "$OUT" "tokens/s" "no tokens without a seq"
expect_contains "$OUT" "workers                       : 1 planned per GPU, 1 copy of this job fits" \
    "workers line for --workers 1"
oom plan --fixed-bytes 12GiB --bytes-per-sample 1GiB --vram 24 --json
expect_json '.plan.seq_len' null "json: seq not known"
expect_json '.plan.loss, .plan.attention' "null
null" "json: a measured line's kernels not known"
oom plan --fixed-bytes 12GiB --bytes-per-sample 1GiB --vram 24 --format env
expect_not_contains "$OUT" "OOMLESS_SEQ_LEN" "env: no seq line"
oom plan --fixed-bytes 12GiB --bytes-per-sample 1GiB --vram 24 --seq 1024 --json
expect_json '.plan.seq_len' 1024 "json: the seq given"
oom plan --fixed-bytes 1GiB --bytes-per-token 1KiB --vram 24
expect_rc 2 "bytes per token without a seq"
expect_contains "$ERR" "give --seq" "says what is missing"
oom plan --model gpt2 --allow bogus
expect_rc 2 "unknown --allow value"
expect_contains "$ERR" "bogus" "names the value"
oom plan --model gpt2 --seq-range 10
expect_rc 2 "bad seq range"
oom plan --gpu rtx-4090
expect_rc 2 "no workload"
oom plan --sample-multiplier 2 --vram 8
expect_rc 2 "an all-zero measured line"
oom plan --model gpt2 --fixed-bytes 1GiB --vram 8
expect_rc 2 "a model and a measured line"
oom plan --model gpt2 --frobnicate 1
expect_rc 2 "unknown option"
oom plan --help
expect_rc 0 "help"
for o in --target-effective-batch --seq-range --max-batch-size --max-auto-batch-size --allow \
    --workers --nodes --gpus-per-node --format --svg --fixed-bytes --workload; do
    expect_contains "$OUT" "$o" "help lists $o"
done

# --list-models, which --model's help points to: plan and table list the presets as estimate does
LIST=$("$OOMLESS_BIN" estimate --list-models)
for cmd in plan table; do
    oom $cmd --list-models
    expect_rc 0 "$cmd --list-models"
    expect_eq "$OUT" "$LIST" "$cmd --list-models: the presets, as estimate lists them"
    oom $cmd --list-models --json
    expect_one_json "$cmd --list-models --json"
    expect_json '.[0].name' "$(jq -r '.[0].name' <<<"$("$OOMLESS_BIN" estimate --list-models --json)")" \
        "$cmd --list-models --json: the first preset"
done
expect_contains "$("$OOMLESS_BIN" plan --help)" "--list-models" "plan --help: --list-models"

# alternatives that fit come first; the faster ones that do not fit follow, under their own heading
ALT="--model llama-3.1-8b --method lora --seq 1024 --gpu a100-80gb"
oom plan $ALT --json
expect_json '[.alternatives[].fits | tostring] | join(",")' 'true,false' \
    "alternatives: the one that fits first"
oom plan $ALT
expect_contains "$OUT" "$(printf 'Next best alternatives\n  1. batch 16 x 2, seq 1024, ckpt full')" \
    "text: the alternative that fits is 1."
expect_contains "$OUT" "$(printf 'Faster, but they do not fit\n  2. batch 16 x 2, seq 1024, ckpt none')" \
    "text: the one that does not fit, under its heading"

finish
