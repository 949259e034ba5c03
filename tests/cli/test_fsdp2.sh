#!/bin/bash
# test_fsdp2.sh - --sharding fsdp2 with --fsdp-param-dtype and --reshard-after-forward in estimate.
. "$(dirname "$0")/lib.sh"

# est FILTER ARGS...: one value of `estimate --json`
est() {
    local f=$1
    shift
    "$OOMLESS_BIN" estimate --json "$@" | jq -r "$f"
}
M="--model llama-3.2-1b --batch 2 --seq 1024 --gpus 8 --sharding fsdp2"
P=$(est .params.total $M)

# the spelling and the FSDP2 settings are echoed in both outputs
OUT=$("$OOMLESS_BIN" estimate --json $M --reshard-after-forward 4)
expect_one_json "fsdp2 json"
expect_json .workload.sharding fsdp2 "json: fsdp2 echoed"
expect_json .workload.fsdp_param_dtype fp32 "json: fp32 parameters by default"
expect_json .workload.reshard_after_forward 4 "json: reshard to 4"
expect_json '.workload.reshard_after_forward | type' number "json: a number"
expect_eq "$(est .workload.reshard_after_forward $M)" true "json: resharded by default"
oom estimate $M --fsdp-param-dtype bf16 --reshard-after-forward no
expect_rc 0 "human estimate"
expect_contains "$OUT" "(sharding fsdp2, offload none)" "human: fsdp2 echoed"
expect_contains "$OUT" "parameters sharded in bf16, reshard after forward no" "human: FSDP2 line"

# sharded states in the parameters' dtype over 8 GPUs: fp32 weights, AdamW's two fp32 moments,
# no master copy; bf16 halves each
expect_eq "$(est .memory.weights $M)" "$((P * 4 / 8))" "fp32 sharded weights"
expect_eq "$(est .memory.optimizer $M)" "$((P * 8 / 8))" "fp32 AdamW states, no master"
expect_eq "$(est .memory.weights $M --fsdp-param-dtype bf16)" "$((P * 2 / 8))" "bf16 weights"
expect_eq "$(est .memory.optimizer $M --fsdp-param-dtype bf16)" "$((P * 4 / 8))" "bf16 states"
# amp-bf16 (the default for full) is MixedPrecisionPolicy's bf16 compute, as bf16 is
expect_eq "$(est .memory.allocated_peak $M)" "$(est .memory.allocated_peak $M --precision bf16)" \
    "amp-bf16 = bf16 compute"

# keeping the blocks unsharded costs more than keeping a quarter, which costs more than resharding
Y=$(est .memory.allocated_peak $M)
Q=$(est .memory.allocated_peak $M --reshard-after-forward 4)
N=$(est .memory.allocated_peak $M --reshard-after-forward no)
[ "$N" -gt "$Q" ] && [ "$Q" -gt "$Y" ] && ok || bad "allocated peaks no $N > 4 $Q > yes $Y"
# without resharding the whole model in bf16 is kept to the backward: at least P x 2 bytes more
# than the states
S=$(($(est .memory.weights $M) + $(est .memory.optimizer $M)))
[ "$N" -gt "$((S + P * 2))" ] && ok || bad "reshard no: $N not above states $S + bf16 model"
# zero3 is not changed by the fsdp2 options' existence
Z=$(est .memory.allocated_peak --model llama-3.2-1b --batch 2 --seq 1024 --gpus 8 --sharding zero3)
expect_eq "$(est .workload.sharding --model llama-3.2-1b --gpus 8 --sharding zero3)" zero3 "zero3"
[ "$Z" -ne "$Y" ] && ok || bad "zero3 ($Z) and fsdp2 ($Y) are different models"

# what is refused, with status 2
for args in "--sharding zero3 --gpus 8 --fsdp-param-dtype bf16" \
    "--sharding zero2 --gpus 8 --reshard-after-forward no" \
    "$M --method lora" "$M --offload optimizer" "$M --reshard-after-forward 3" \
    "$M --reshard-after-forward 8" "$M --reshard-after-forward 1" "$M --reshard-after-forward maybe" \
    "$M --precision fp32 --fsdp-param-dtype bf16" "$M --fsdp-param-dtype fp16"; do
    oom estimate --model llama-3.2-1b $args
    expect_rc 2 "refused: $args"
done
oom estimate $M --precision fp32
expect_rc 0 "fp32 compute with fp32 parameters"
oom plan $M --gpu a100-80gb
expect_rc 2 "plan does not search fsdp2"
expect_contains "$ERR" "estimated but not planned" "plan says why"

finish
