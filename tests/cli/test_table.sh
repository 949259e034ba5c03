#!/bin/bash
# test_table.sh - `oomless table`: one row per GPU, workloads files, formats.
. "$(dirname "$0")/lib.sh"
D="$OOMLESS_SRC/tests/data/plan"
no_nvml
GPUS=rtx-3090,rtx-4090,a100-40gb,a100-80gb,h100-sxm

oom table --model llama-3.1-8b --method lora --seq 2048 --gpus $GPUS
expect_rc 0 "text table"
expect_eq "$(printf '%s\n' "$OUT" | grep '^GPU ' | tr -s ' ')" "GPU USABLE BATCH ACCUM SEQ CKPT PEAK UTIL TOKENS/S" "header"
expect_eq "$(printf '%s\n' "$OUT" | grep -cE '^(rtx-3090|rtx-4090|a100-40gb|a100-80gb|h100-sxm) ')" "5" "one row per GPU"
expect_eq "$(printf '%s\n' "$OUT" | grep '^a100-80gb ' | tr -s ' ' | cut -d' ' -f2-3)" "79.00 GiB" "a100-80gb usable"
expect_eq "$(printf '%s\n' "$OUT" | grep '^h100-sxm ' | tr -s ' ' | cut -d' ' -f2-3)" "78.65 GiB" "h100-sxm usable"

# a GPU where nothing fits gets a row that says so
oom table --model llama-3.1-8b --method lora --seq 2048 --gpus t4,rtx-4090
expect_rc 0 "table with a no-fit row"
expect_contains "$(printf '%s\n' "$OUT" | grep '^t4 ')" "no fit" "t4 row says no fit"

# the same plan as `oomless plan` for each GPU
oom plan --model llama-3.1-8b --method lora --seq 2048 --gpu a100-40gb --json
B=$(printf '%s' "$OUT" | jq -r '.plan.batch_size')
oom table --model llama-3.1-8b --method lora --seq 2048 --gpus a100-40gb --format csv
expect_eq "$(printf '%s\n' "$OUT" | awk -F, 'NR == 2 {print $5}')" "$B" "table batch = plan batch"
expect_eq "$(printf '%s\n' "$OUT" | head -1)" \
    "workload,gpu,usable_bytes,fits,batch_size,grad_accum,seq_len,checkpointing,device_peak_bytes,budget_used,tokens_per_s" \
    "csv header"

oom table --model gpt2 --seq 512 --gpu-list rtx-3090,h100-sxm --format markdown
expect_rc 0 "markdown"
expect_contains "$OUT" "| GPU | usable |" "markdown header"
expect_contains "$OUT" "| h100-sxm |" "markdown row"

# several named workloads from a YAML file: a table each
oom table --workloads "$D/workloads.yaml" --gpus rtx-4090,a100-80gb --json
expect_rc 0 "workloads json"
expect_one_json "table --json"
expect_json '[.tables[].workload] | join(",")' "finetune,serve,contrastive" "a table per workload"
expect_json '[.tables[].rows | length] | join(",")' "2,2,2" "a row per GPU"
expect_json '.tables[0].rows[1].plan.effective_batch' "32" "finetune plan"
expect_json '.tables[1].rows[0].inference.max_batch > 0' "true" "serve: inference rows"
expect_json '.tables[2].rows[0].plan.batch_size' "16" "contrastive measured line"
oom table --workloads "$D/workloads.yaml" --gpus rtx-4090
expect_contains "$OUT" "== finetune" "text: finetune table"
expect_contains "$OUT" "== serve" "text: serve table"

# errors
oom table --model gpt2 --gpus no-such-gpu
expect_rc 2 "unknown GPU"
expect_contains "$ERR" "no-such-gpu" "names the GPU"
oom table --model gpt2 --format xml
expect_rc 2 "unknown format"
oom table --model gpt2 --gpu rtx-4090
expect_rc 2 "--gpu in table"
oom table --workloads /nonexistent.yaml
expect_rc 3 "missing workloads file"
printf 'workloads: [1, 2]\n' >"$TMP/bad.yaml"
oom table --workloads "$TMP/bad.yaml"
expect_rc 2 "workloads not a mapping"
oom table --help
expect_rc 0 "help"
expect_contains "$OUT" "--gpu-list" "help names the alias"

finish
