#!/bin/bash
# test_checkpointing.sh - --checkpointing every:N / nth:N (one layer in N checkpointed) in estimate.
. "$(dirname "$0")/lib.sh"

# est FILTER ARGS...: one value of `estimate --json`
est() {
    local f=$1
    shift
    "$OOMLESS_BIN" estimate --json "$@" | jq -r "$f"
}
M="--model llama-3.2-1b --batch 4 --seq 1024" # 16 layers

# the spelling is echoed in both outputs
OUT=$("$OOMLESS_BIN" estimate --json $M --checkpointing every:2)
expect_json .workload.checkpointing every:2 "json: every:2 echoed"
oom estimate $M --checkpointing nth:3
expect_rc 0 "nth:3 estimate"
expect_contains "$OUT" "checkpointing                 : nth:3," "human: nth:3 echoed"

# one layer in one is full checkpointing; no layer wrapped (nth:17 of 16) is none
expect_eq "$(est .memory.allocated_peak $M --checkpointing every:1)" \
    "$(est .memory.allocated_peak $M --checkpointing full)" "every:1 = full"
expect_eq "$(est .workload.checkpointing $M --checkpointing nth:1)" full "nth:1 is spelt full"
expect_eq "$(est .memory.allocated_peak $M --checkpointing nth:17)" \
    "$(est .memory.allocated_peak $M --checkpointing none)" "nth:17 of 16 layers = none"
expect_eq "$(est .memory.allocated_peak $M --checkpointing every:17)" \
    "$(est .memory.allocated_peak $M --checkpointing every:16)" "every:N past the layers: layer 1 only"

# fewer layers wrapped, more kept: none > every:4 > every:2 > full at the peak
N=$(est .memory.allocated_peak $M --checkpointing none)
E4=$(est .memory.allocated_peak $M --checkpointing every:4)
E2=$(est .memory.allocated_peak $M --checkpointing every:2)
F=$(est .memory.allocated_peak $M --checkpointing full)
[ "$N" -gt "$E4" ] && [ "$E4" -gt "$E2" ] && [ "$E2" -gt "$F" ] && ok ||
    bad "allocated peaks none $N > every:4 $E4 > every:2 $E2 > full $F"
# every:3 wraps layers 1, 4, .., 16 (6 of 16), nth:3 layers 3, 6, .., 15 (5): every:3 keeps less
E3=$(est .memory.activations $M --checkpointing every:3)
T3=$(est .memory.activations $M --checkpointing nth:3)
[ "$E3" -lt "$T3" ] && ok || bad "every:3 ($E3) keeps less than nth:3 ($T3)"

# recompute: the wrapped layers' forward again, half of full's extra forward at every:2
expect_eq "$(jq -n --argjson n "$(est .compute.flops_per_token $M --checkpointing none)" \
    --argjson f "$(est .compute.flops_per_token $M --checkpointing full)" \
    --argjson e "$(est .compute.flops_per_token $M --checkpointing every:2)" \
    '(($n + $f) / 2 - $e) | fabs < 1')" true "every:2 recomputes half the layers"

# GPT-2 keeps no training KV cache once checkpointing is on: every:2 saves more than half of full's
G="--model gpt2 --batch 4 --seq 1024 --precision bf16"
GN=$(est .memory.activations $G --checkpointing none)
GE=$(est .memory.activations $G --checkpointing every:12) # layer 1 wrapped, 11 not
GL=$(est .memory.activations $G --checkpointing every:1)
[ $((GN - GE)) -gt $(((GN - GL) / 12 + 11 * 4 * 1024 * 768 * 4 * 9 / 10)) ] && ok ||
    bad "gpt2 every:12: the 11 unwrapped layers drop their key/value cache copies ($GN - $GE)"

# +offload: the wrapped layers' inputs (16 x 4 x 1024 x 2048, bf16) in host memory
B="$M --precision bf16"
expect_eq "$(est .workload.checkpointing $B --checkpointing every:2+offload)" every:2+offload \
    "every:2+offload echoed"
expect_eq $(($(est .memory.activations $B --checkpointing full) - \
    $(est .memory.activations $B --checkpointing full+offload))) $((16 * 4 * 1024 * 2048 * 2)) \
    "full+offload: no layer input on the device"

# op-sac: every layer's input plus, per token, the q, v, gate and down outputs and flash
# attention's output (16-bit) and log-sum-exp (fp32, 32 heads); k, o and up recomputed
expect_eq "$(est .workload.checkpointing $B --checkpointing op-sac)" op-sac "op-sac echoed"
expect_eq $(($(est .memory.activations $B --checkpointing op-sac) - \
    $(est .memory.activations $B --checkpointing full))) \
    $((16 * 4 * 1024 * ((2048 + 512 + 8192 + 2048 + 2048) * 2 + 32 * 4))) "op-sac: the ops kept"
# LoRA (q_proj, v_proj) shifts the count: the adapters' B outputs (fp32) kept as well
expect_eq $(($(est .memory.activations $B --method lora --checkpointing op-sac) - \
    $(est .memory.activations $B --method lora --checkpointing full))) \
    $((16 * 4 * 1024 * ((2048 + 512 + 8192 + 2048 + 2048) * 2 + 32 * 4 + (2048 + 512) * 4))) \
    "op-sac LoRA: the adapters' B outputs too"
# its recomputation: the k, o and up projections, 2 x 16 x (2048 x 512 + 2048^2 + 2048 x 8192)
expect_eq $(($(est .compute.flops_per_token $B --checkpointing op-sac) - \
    $(est .compute.flops_per_token $B --checkpointing none))) \
    $((2 * 16 * (2048 * 512 + 2048 * 2048 + 2048 * 8192))) "op-sac recomputes three mms a layer"
oom estimate --model gpt2 --checkpointing op-sac
expect_rc 2 "op-sac on GPT-2 refused"
expect_contains "$ERR" "dense Llama-style decoders" "op-sac: why"

# bad values: exit 2, the spellings named
for v in every:0 every:x nth: sometimes none+offload selective+offload full+offloadx \
    op-sac+offload op-sac:2; do
    oom estimate $M --checkpointing "$v"
    expect_rc 2 "checkpointing $v refused"
done
expect_contains "$ERR" "none, selective, full, full+offload, every:N, every:N+offload, nth:N, nth:N+offload, op-sac" \
    "the spellings listed (the option's values)"

# plan keeps a variant it is given, names it in its outputs and says what it recomputes
OUT=$("$OOMLESS_BIN" plan $M --checkpointing every:2 --gpu h100 --json)
expect_json .plan.checkpointing every:2 "plan every:2: named"
expect_json .throughput.recompute_forwards 0.5 "plan every:2: half a forward recomputed"
expect_contains "$("$OOMLESS_BIN" plan $M --checkpointing every:2 --gpu h100 --format args)" \
    "--activation_checkpointing --activation_checkpointing_kwargs '{\"every_n_layers\": 2}' --optim adamw_torch --bf16" \
    "args: every:2 as transformers' activation_checkpointing_kwargs"
# before transformers 5.23: the old switch, and no every_n_layers to run every:2 with
expect_contains "$("$OOMLESS_BIN" plan $M --checkpointing full --gpu h100 --format args --format-version 4.57.1)" \
    "--gradient_checkpointing --optim" "args for transformers 4.57: gradient_checkpointing"
oom plan $M --checkpointing every:2 --gpu h100 --format args --format-version 5.22
expect_rc 2 "args for transformers 5.22: every:2 refused"
expect_contains "$ERR" "checkpointing 'every:2' needs transformers 5.23 or later" "args 5.22: why"
expect_contains "$("$OOMLESS_BIN" plan $M --checkpointing full+offload --gpu h100 --format args)" \
    "'{\"every_n_layers\": 1, \"offload\": true}'" "args: full+offload"
T02="--format torchtitan --format-version 0.2"
expect_contains "$("$OOMLESS_BIN" plan $M --checkpointing nth:3 --gpu h100 $T02)" \
    "$(printf 'mode = "selective"\nselective_ac_option = "3"')" "torchtitan 0.2: nth:3"
expect_contains "$("$OOMLESS_BIN" plan $M --checkpointing op-sac --gpu h100 $T02)" \
    "$(printf 'mode = "selective"\nselective_ac_option = "op"')" "torchtitan 0.2: op-sac"
# Megatron's selective (attention core) has no torchtitan mode: its "selective" is SAC
OUT=$("$OOMLESS_BIN" plan $M --checkpointing selective --gpu h100 $T02)
expect_contains "$OUT" "$(printf '[activation_checkpoint]\nmode = "full"')" "torchtitan: selective as full"
expect_not_contains "$OUT" 'mode = "selective"' "torchtitan: selective not written as its SAC"
# torchtitan 0.3: SelectiveAC is op-level, FullAC whole layers; no layer-level selective mode
expect_contains "$("$OOMLESS_BIN" plan $M --checkpointing op-sac --gpu h100 --format torchtitan)" \
    "config.activation_checkpoint = SelectiveAC.Config()" "torchtitan 0.3: op-sac"
expect_contains "$("$OOMLESS_BIN" plan $M --checkpointing selective --gpu h100 --format torchtitan)" \
    "config.activation_checkpoint = FullAC.Config()" "torchtitan 0.3: selective as full"
oom plan $M --checkpointing nth:3 --gpu h100 --format torchtitan
expect_rc 2 "torchtitan 0.3 cannot run nth:3"
expect_contains "$ERR" "--checkpointing-variants op-sac, or --format-version 0.2" "torchtitan 0.3: nth:3, why"
oom plan $M --checkpointing nth:2+offload --gpu h100 $T02
expect_rc 2 "torchtitan does not offload the checkpoints' inputs"
expect_contains "$("$OOMLESS_BIN" plan $M --checkpointing op-sac --gpu h100 --format env)" \
    "export OOMLESS_CHECKPOINTING=op-sac" "env: op-sac"
# a stack that cannot run the variant is refused, naming those that can
oom plan $M --checkpointing op-sac --gpu h100 --format args
expect_rc 2 "args cannot run op-sac"
expect_contains "$ERR" "torchtitan nth:N and op-sac" "args: why"
oom plan $M --checkpointing every:2 --gpu h100 --format torchtitan
expect_rc 2 "torchtitan cannot run every:2"
# none, selective and full: outputs as before (no kwargs, no recompute figure)
OUT=$("$OOMLESS_BIN" plan $M --checkpointing full --gpu h100 --json)
expect_json .plan.checkpointing full "plan takes full"
expect_json .throughput.recompute_forwards null "full: no recompute figure"
expect_eq "$("$OOMLESS_BIN" plan $M --checkpointing full --gpu h100 $T02 | tail -1)" \
    'mode = "full"' "torchtitan 0.2: full"

# the search: Qwen3-8B LoRA at 4096 tokens needs checkpointing on a 40 GB A100. Plain full fits
# micro-batch 2; op-sac fits micro-batch 1 and recomputes a third of a forward, so it is faster
Q="--model qwen3-8b --gpu a100-40gb --method lora --precision bf16 --seq 4096 --target-effective-batch 32"
OUT=$("$OOMLESS_BIN" plan $Q --json)
expect_json '.plan.checkpointing + " " + (.plan.batch_size | tostring)' "full 2" "default: full"
FULL_TPS=$(jq -r .throughput.tokens_per_s <<<"$OUT")
OUT=$("$OOMLESS_BIN" plan $Q --checkpointing-variants torchtitan --json)
expect_json '.plan.checkpointing + " " + (.plan.batch_size | tostring)' "op-sac 1" "torchtitan: op-sac"
expect_json '.throughput.recompute_forwards' 0.315 "op-sac: 0.315 of a forward"
expect_eq "$(jq -r --argjson f "$FULL_TPS" '.throughput.tokens_per_s > $f' <<<"$OUT")" true \
    "op-sac: faster than full"
expect_json '[.alternatives[].why] | any(contains("more recomputation"))' true "full: more recomputation"
expect_contains "$("$OOMLESS_BIN" plan $Q --checkpointing-variants op-sac)" \
    "recomputed                    : 0.31 of a forward" "text: the recompute figure"
# transformers' variants: every:2 does not fit at micro-batch 1, full+offload pays its transfers
OUT=$("$OOMLESS_BIN" plan $Q --checkpointing-variants transformers --json)
expect_json .plan.checkpointing full "transformers: full"
expect_json '[.alternatives[] | .plan.checkpointing + ": " + .why] | join("; ")' \
    "full+offload: 6.8% slower; none: does not fit: device peak 51.79 GiB > usable 39.00 GiB; every:2: does not fit: device peak 39.50 GiB > usable 39.00 GiB" \
    "transformers: every:2 and full+offload tried"
oom plan $Q --checkpointing-variants every:3
expect_rc 2 "checkpointing-variants: unknown value"
expect_contains "$ERR" "op-sac, nth:2, every:2, full+offload" "checkpointing-variants: the values"

finish
