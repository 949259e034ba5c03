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
expect_contains "$ERR" "none, selective, full, every:N, nth:N (these three may end in +offload), op-sac" \
    "the spellings listed"

# plan and table name checkpointing none, selective or full: one layer in N is refused there
oom plan $M --checkpointing every:2 --gpu h100
expect_rc 2 "plan refuses every:2"
expect_contains "$ERR" "estimated but not planned" "plan: why"
oom plan $M --checkpointing full+offload --gpu h100
expect_rc 2 "plan refuses full+offload"
oom plan $M --checkpointing full --gpu h100
expect_rc 0 "plan takes full"

finish
