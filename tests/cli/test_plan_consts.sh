#!/bin/bash
# test_plan_consts.sh - the planner's constants through the CLI: `gpus --catalog --json` shows
# them with their origin and source, a config's `cluster:` replaces them (a slow inter-node link
# slows a communication-bound multi-node plan by the expected ratio), bad values exit 2 naming
# file, line, key and value, and a broken data file is refused.
. "$(dirname "$0")/lib.sh"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE
no_nvml

oom gpus --catalog --json
expect_rc 0 "catalog json"
expect_one_json "catalog json"
expect_json '.planner | keys | length' 12 "twelve constants"
expect_json '.planner.inter_node_gbps.value' 200 "inter-node default: 200 Gb/s"
expect_json '.planner.inter_node_gbps.unit' "Gb/s" "inter-node unit"
expect_json '.planner.inter_node_gbps.origin' default "inter-node origin"
expect_json '.planner.intra_node_gbs.value' 100 "intra-node default"
expect_json '.planner.pcie_gbs.unit' "GB/s" "pcie unit"
expect_json '.planner.mfu_max.value' 0.5 "mfu default"
expect_json '[.planner[] | select(.origin == "default" and (.source | length) > 40)] | length' 12 \
    "every default has a source"
expect_contains "$(printf '%s' "$OUT" | jq -r .planner.mfu_max.source)" "arXiv:2204.02311" \
    "the MFU cites PaLM"
expect_json '[.gpus[] | select(.planner)] | length' 0 "no built-in GPU changes a constant"

cat >"$TMP/eth.yaml" <<'EOF'
# a cluster on 100 Gb/s Ethernet, PCIe 5.0 hosts
cluster:
  inter_node_gbps: 100
  pcie_gbs: 50
gpus:
  - id: lab-card
    memory: 24GiB
    bf16_tflops: 100
    intra_node_gbs: 25   # PCIe peer-to-peer only
EOF
oom gpus --catalog --json --config "$TMP/eth.yaml"
expect_rc 0 "catalog json with a cluster"
expect_json '.planner.inter_node_gbps.value' 100 "cluster inter-node"
expect_json '.planner.inter_node_gbps.origin' config "cluster origin"
expect_json '.planner.inter_node_gbps.source' "$TMP/eth.yaml:3: cluster" "cluster source: file:line"
expect_json '.planner.pcie_gbs.source' "$TMP/eth.yaml:4: cluster" "pcie source"
expect_json '.planner.intra_node_gbs.origin' default "untouched key stays default"
expect_json '.gpus[] | select(.id == "lab-card") | .planner | keys | join(",")' intra_node_gbs \
    "the user's GPU changes one constant"
expect_json '.gpus[] | select(.id == "lab-card") | .planner.intra_node_gbs.source' \
    "$TMP/eth.yaml:9: gpu 'lab-card'" "its source"

# A communication-bound plan: 7B full training on 2 nodes x 8 GPUs, one sample per GPU. The
# gradient all-reduce crosses the inter-node link; half the link doubles that part of the step.
args=(plan --model llama-2-7b --gpu h100-sxm --nodes 2 --gpus-per-node 8 --batch 1 --grad-accum 1
    --seq 512 --json)
oom "${args[@]}"
expect_rc 0 "plan on InfiniBand"
ib=$OUT
oom "${args[@]}" --config "$TMP/eth.yaml"
expect_rc 0 "plan on Ethernet"
expect_one_json "plan on Ethernet"
eth=$OUT
expect_eq "$(jq -c .plan <<<"$eth")" "$(jq -c .plan <<<"$ib")" "same configuration chosen"
# compute = flops per step / (peak x mfu); the rest is communication (JSON rounds to 3 digits)
check=$(jq -n --argjson a "$ib" --argjson b "$eth" '
  def compute(d): d.throughput.flops_per_token * d.plan.batch_size * d.plan.grad_accum
                  * d.plan.seq_len / (d.throughput.peak_tflops * 1e12 * d.throughput.mfu);
  ($a.throughput.step_seconds - compute($a)) as $ca
  | ($b.throughput.step_seconds - compute($b)) as $cb
  | [($ca > compute($a)), ($b.throughput.step_seconds > $a.throughput.step_seconds),
     ((($cb / $ca) - 2) | fabs < 0.01),
     ((($a.throughput.tokens_per_s / $b.throughput.tokens_per_s)
       - ($b.throughput.step_seconds / $a.throughput.step_seconds)) | fabs < 0.01)]
  | map(tostring) | join(" ")')
expect_eq "$check" '"true true true true"' \
    "communication-bound; slower; communication x2; tokens/s down by the step's ratio"

# one node: the inter-node link does not matter
oom plan --model llama-2-7b --gpu h100-sxm --gpus-per-node 8 --batch 1 --grad-accum 1 --seq 512 --json
one=$(jq -c .throughput <<<"$OUT")
oom plan --model llama-2-7b --gpu h100-sxm --gpus-per-node 8 --batch 1 --grad-accum 1 --seq 512 \
    --json --config "$TMP/eth.yaml"
expect_eq "$(jq -c .throughput <<<"$OUT")" "$one" "one node: unchanged"

# bad values: exit 2, file, line, key and value
printf 'cluster:\n  pcie_gbs: 64\n  inter_node_gbps: 400G\n' >"$TMP/bad.yaml"
oom plan --model gpt2 --gpu h100-sxm --config "$TMP/bad.yaml"
expect_rc 2 "a non-number"
expect_contains "$ERR" "$TMP/bad.yaml:3: cluster.inter_node_gbps: '400G' is not a number (Gb/s)" \
    "names file, line, key, value and unit"
printf 'cluster:\n  mfu_max: 0\n' >"$TMP/bad.yaml"
oom gpus --catalog --config "$TMP/bad.yaml"
expect_rc 2 "zero"
expect_contains "$ERR" "$TMP/bad.yaml:2: cluster.mfu_max: 0 is out of range" "zero: the message"
printf 'cluster:\n  infiniband: 400\n' >"$TMP/bad.yaml"
oom plan --model gpt2 --gpu h100-sxm --config "$TMP/bad.yaml"
expect_rc 2 "an unknown key"
expect_contains "$ERR" "unknown key 'cluster.infiniband'" "unknown key: the message"
printf 'gpus:\n  - id: lab\n    memory: 8GiB\n    pcie_gbs: fast\n' >"$TMP/bad.yaml"
oom plan --model gpt2 --gpu lab --config "$TMP/bad.yaml"
expect_rc 2 "a GPU entry's bad value"
expect_contains "$ERR" "$TMP/bad.yaml:4: gpu 'lab': pcie_gbs: 'fast' is not a number" \
    "GPU entry: the message"
expect_eq "$OUT" "" "nothing on stdout"

# the data file itself: a broken value is refused with its file and line
mkdir -p "$TMP/data"
cp -r "$OOMLESS_SRC/data/." "$TMP/data/"
sed -i 's/^    value: 0.5$/    value: half/' "$TMP/data/gpus/planner.yaml"
OOMLESS_DATA_DIR="$TMP/data" oom plan --model gpt2 --gpu h100-sxm --json
expect_rc 2 "broken planner.yaml"
expect_contains "$ERR" "$TMP/data/gpus/planner.yaml:13: planner.mfu_max: 'half' is not a number" \
    "broken planner.yaml: the message"
expect_eq "$OUT" "" "broken planner.yaml: no document"

finish
