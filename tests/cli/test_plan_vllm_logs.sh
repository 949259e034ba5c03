#!/bin/bash
# test_plan_vllm_logs.sh - `plan --format vllm` against vLLM's own start-up logs: every pinned row
# of bench/accuracy/vllm-logs.csv is planned with the settings vLLM ran with, and the KV-cache
# capacity oomless finds must be within 1 % of the tokens vLLM's logged KV-cache memory holds.
#
# The tolerance: the logs give GiB in two decimals (+-0.005 GiB, 0.11 % of the smallest cache
# here, Qwen3-32B's 4.45 GiB), and vLLM's non-torch memory moves by 0.01 GiB between runs of the
# same GPU (0.13 and 0.14 GiB: 0.22 % of that cache); the rest is what oomless's model leaves
# out. The terms of the subtraction are also checked on their own, within 0.02 GiB (four steps
# of the logs' rounding), and the KV-cache memory within 1 %.
. "$(dirname "$0")/lib.sh"
no_nvml

CSV="$OOMLESS_SRC/bench/accuracy/vllm-logs.csv"
GIB=1073741824
# one line per pinned row: id model cuda_total util max_model_len seqs tokens weights act nt kv
ROWS=$(python3 -c '
import csv, sys
for r in csv.DictReader(open(sys.argv[1])):
    if r["pinned"] == "yes":
        print(" ".join(r[k] for k in ("id", "model", "cuda_total_GiB", "gpu_memory_utilization",
              "max_model_len", "max_num_seqs", "max_num_batched_tokens", "weights_GiB",
              "peak_activation_GiB", "non_torch_GiB", "kv_cache_GiB")))' "$CSV")
expect_eq "$(wc -l <<<"$ROWS")" 4 "four pinned vLLM logs"

# within ACTUAL EXPECTED TOLERANCE description: |actual - expected| <= tolerance (any numbers)
within() {
    if awk -v a="$1" -v e="$2" -v t="$3" 'BEGIN { d = a - e; exit !(d <= t && -d <= t) }'; then
        ok
    else
        bad "$4: $1, expected $2 +- $3"
    fi
}

while read -r id model total util len seqs tokens w act nt kv; do
    margin=$(awk -v u="$util" 'BEGIN { printf "%d%%", (1 - u) * 100 + 0.5 }')
    oom plan --model "$model" --method inference --seq "$len" --gpu h100 --vram "$total" \
        --vram-safety-margin "$margin" --max-num-seqs "$seqs" --max-num-batched-tokens "$tokens" --json
    expect_rc 0 "$id: $model plans"
    V=$(jq -c .inference.vllm <<<"$OUT")
    g() { jq -r ".$1" <<<"$V"; }
    expect_eq "$(g gpu_memory_utilization)" "$util" "$id: gpu_memory_utilization"
    expect_eq "$(g max_num_seqs)" "$seqs" "$id: max_num_seqs"
    expect_eq "$(g max_num_batched_tokens)" "$tokens" "$id: max_num_batched_tokens"
    for t in "weights_bytes $w" "peak_activation_bytes $act" "non_torch_bytes $nt"; do
        set -- $t
        within "$(awk -v b="$(g "$1")" -v g=$GIB 'BEGIN { print b / g }')" "$2" 0.02 "$id: $1 (GiB)"
    done
    within "$(awk -v b="$(g kv_cache_bytes)" -v g=$GIB 'BEGIN { print b / g }')" "$kv" \
        "$(awk -v k="$kv" 'BEGIN { print k * 0.01 }')" "$id: KV-cache memory within 1 % of vLLM's"
    # the tokens vLLM's logged KV memory holds: whole blocks of 16 tokens of this model's page
    page=$(jq -r ".inference.kv_bytes_per_token * 16" <<<"$OUT")
    logged=$(awk -v kv="$kv" -v g=$GIB -v p="$page" 'BEGIN { printf "%d", int(kv * g / p) * 16 }')
    within "$(g kv_tokens)" "$logged" "$(awk -v l="$logged" 'BEGIN { print l * 0.01 }')" \
        "$id: KV tokens within 1 % of vLLM's"
done <<<"$ROWS"

# the two settings reach the printed vLLM command line and are refused outside inference
oom plan --model llama-3.1-8b --method inference --seq 4096 --gpu h100 --max-num-seqs 64 \
    --max-num-batched-tokens 2048 --format vllm
expect_rc 0 "settings given"
expect_contains "$OUT" "--max-num-seqs 64 --max-num-batched-tokens 2048" "printed as given"
oom plan --model llama-3.1-8b --seq 512 --gpu h100 --max-num-seqs 64
expect_rc 2 "max-num-seqs is for inference"
expect_contains "$ERR" "max-num-seqs is for method 'inference'" "refusal names the option"

finish
