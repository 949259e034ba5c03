#!/bin/bash
# estimate_speed.sh - CPU time of `oomless estimate` (user + system), per run, averaged over N runs
# of a few workloads. usage: bench/estimate_speed.sh [OOMLESS_BINARY] [N]
set -eu
BIN=${1:-build/oomless}
N=${2:-200}
export OOMLESS_DATA_DIR=${OOMLESS_DATA_DIR:-$(cd "$(dirname "$0")/.." && pwd)/data}
cases=(
    "--model llama-3.1-8b --method lora --batch 4 --seq 2048 --json"
    "--model mixtral-8x7b --method qlora --seq 4096 --checkpointing full --json"
    "--model bench/accuracy/public/T0_3B.json --precision fp32 --batch 8 --seq 128 --json"
)
for c in "${cases[@]}"; do
    # shellcheck disable=SC2086
    t=$( { TIMEFORMAT='%U %S'; time for ((i = 0; i < N; i++)); do "$BIN" estimate $c >/dev/null; done; } 2>&1 )
    read -r u s <<<"$t"
    awk -v u="$u" -v s="$s" -v n="$N" -v c="$c" \
        'BEGIN { printf "%7.3f ms CPU per run  (user %.3f + sys %.3f ms)  oomless estimate %s\n", (u+s)*1000/n, u*1000/n, s*1000/n, c }'
done
