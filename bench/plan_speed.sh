#!/bin/bash
# plan_speed.sh - CPU time of `oomless plan` (user + system, the whole process: exec, loading the
# preset, the catalog and data/coefficients.json, the search, printing), per run, averaged over N
# runs, with the number of configurations the search estimated.
# usage: bench/plan_speed.sh [OOMLESS_BINARY] [N]
set -eu
BIN=${1:-build/oomless}
N=${2:-50}
export OOMLESS_DATA_DIR=${OOMLESS_DATA_DIR:-$(cd "$(dirname "$0")/.." && pwd)/data}
export OOMLESS_NVML_LIBRARY=/nonexistent # plan for profiles: no driver time in the numbers
cases=(
    "--model llama-3.1-8b --method lora --seq 2048 --target-effective-batch 32 --json"
    "--model llama-2-7b --nodes 2 --gpus-per-node 8 --gpu a100-80gb --seq-range 512:8192 --target-effective-batch 1024 --allow all --json"
    "--model mixtral-8x7b --method qlora --gpus 8 --gpu h100-sxm --seq-range 256:32768 --target-effective-batch 512 --allow all --json"
    "--model gpt2 --method inference --seq-range 128:1024 --gpu a100-80gb --allow precision --json"
    "--model llama-2-70b --seq 4096 --gpu rtx-4090 --allow all --json"
    "--model llama-2-70b --gpus 8 --gpu rtx-4090 --seq-range 64:32768 --target-effective-batch 4096 --allow all --json"
)
for c in "${cases[@]}"; do
    # shellcheck disable=SC2086
    n=$("$BIN" plan $c 2>/dev/null | jq -r '.search.candidates')
    # shellcheck disable=SC2086
    t=$( { TIMEFORMAT='%U %S %R'; time for ((i = 0; i < N; i++)); do "$BIN" plan $c >/dev/null 2>&1 || true; done; } 2>&1 )
    read -r u s r <<<"$t"
    awk -v u="$u" -v s="$s" -v r="$r" -v n="$N" -v k="$n" -v c="$c" \
        'BEGIN { printf "%7.2f ms CPU (%.2f ms wall) per run, %5d configurations  oomless plan %s\n", (u+s)*1000/n, r*1000/n, k, c }'
done
