#!/bin/bash
# How sure the estimate is: the 95 % bounds of estimate --json, plan --fit-confidence, and the
# coverage check of bench/accuracy/fit_confidence.py (data/confidence.json).
. "$(dirname "$0")/lib.sh"
DATA="$OOMLESS_SRC/data/confidence.json"
Q95='(.levels | index(0.95))'

# the bound is the estimate x (1 + the class's 95 % under-prediction), + the context uncertainty
oom estimate --model llama-3.2-1b --method lora --json
expect_rc 0 "estimate"
expect_json '.confidence.class' "lora/sdpa/none/none/none" "the workload's class"
expect_json '.confidence.basis' "measured" "a class with its own cases"
expect_json '.confidence.errors_of' "$(jq -r '.classes["lora/sdpa/none/none/none"].errors_of' "$DATA")" \
    "the classes whose errors it takes"
expect_contains "$OUT" "trace: lora/sdpa/none/none/none" "its own trace cases"
U=$(jq -r "$Q95 as \$i | .classes[\"lora/sdpa/none/none/none\"].under[\$i]" "$DATA")
C=$(jq -r '.context_uncertainty_bytes' "$DATA")
expect_json ".confidence.context_uncertainty_bytes" "$C" "context uncertainty from the data"
expect_json "(.memory.device_peak * (1 + $U) + $C | ceil) - .memory.device_peak_upper95 | fabs <= 1" \
    "true" "device bound = peak x (1 + q95) + context"
expect_json "(.memory.allocated_peak * (1 + $U) | ceil) - .memory.allocated_peak_upper95 | fabs <= 1" \
    "true" "allocated bound = peak x (1 + q95)"
expect_json ".memory.reserved_peak_upper95 > .memory.reserved_peak" "true" "reserved bound above"
E=$OUT

# the text report has the device peak's bound and its class
oom estimate --model llama-3.2-1b --method lora
N=$(jq -r '.classes["lora/sdpa/none/none/none"].cases' "$DATA")
expect_contains "$OUT" "device peak, 95% bound" "text: the bound"
expect_contains "$OUT" "class lora/sdpa/none/none/none, measured, $N cases)" "text: its class"

# a context size given by the user has no context uncertainty
oom estimate --model llama-3.2-1b --method lora --overhead 1GiB --json
expect_json '.confidence.context_uncertainty_bytes' "0" "--overhead: no context term"
expect_json "(.memory.device_peak * (1 + $U) | ceil) - .memory.device_peak_upper95 | fabs <= 1" \
    "true" "--overhead: device bound without the context term"

# too few cases: the quantiles of a broader class; no case at all: the widest class
oom estimate --model llama-3.2-1b --method lora --sharding zero3 --offload optimizer+params --json
expect_json '.confidence.basis' "fallback" "ZeRO-3 offload has 3 cases"
expect_json '.confidence.class' "lora/sdpa/none/none/zero3+offload" "its class"
expect_json '.confidence.errors_of' "$(jq -r '.classes["lora/*/none/none/zero3+offload"].errors_of' "$DATA")" \
    "the errors of the first class of its chain in the data"
expect_json '.confidence.cases' "0" "none of its own"
W=$(jq -r '.widest' "$DATA")
oom estimate --model llama-3.2-1b --method lora --sharding zero2 --gpus 2 --json
expect_json '.confidence.basis' "none" "ZeRO-2 was never measured"
expect_json '.confidence.errors_of' "$(jq -r ".classes[\"$W\"].errors_of" "$DATA")" "the widest class"
expect_json '.confidence.cases' "0" "no cases"

# the bounds are data: another file gives other bounds; a broken one is refused by name
mkdir -p "$TMP/data"
for f in "$OOMLESS_SRC"/data/*; do
    [ "$(basename "$f")" = confidence.json ] || ln -s "$f" "$TMP/data/"
done
jq '.classes |= map_values(if .under then (.under |= map(0.5) | del(.gpu_within, .trace)) else . end)' \
    "$DATA" >"$TMP/data/confidence.json"
OOMLESS_DATA_DIR="$TMP/data" oom estimate --model llama-3.2-1b --method lora --json
expect_json "(.memory.allocated_peak * 1.5 | ceil) - .memory.allocated_peak_upper95 | fabs <= 1" \
    "true" "edited quantiles change the bound (a class without its parts: its under)"
jq 'del(.levels)' "$DATA" >"$TMP/data/confidence.json"
OOMLESS_DATA_DIR="$TMP/data" oom estimate --model llama-3.2-1b --method lora --json
expect_rc 2 "broken confidence data"
expect_contains "$ERR" "confidence.json" "names the file"
expect_contains "$ERR" "levels" "names the key"

# the bias across setups in the bound: the stack's own sources' when it has enough (transformers
# 4), else the cross-stack spread over every source (Liger: none of its own); the bound is the
# larger of the class's GPU part (its spread within a setup + that bias) and its trace part
K='"lora/sdpa/none/none/none"'
oom estimate --model llama-3.2-1b --method lora --stack transformers-4 --json
expect_json '.confidence.spread.basis' "stack" "transformers 4: its own sources"
expect_json '.confidence.spread.sources' "$(jq '.spread.stacks["transformers-4"].sources' "$DATA")" \
    "as many as the data has"
expect_json "$(jq "$Q95 as \$i | [(.classes[$K].gpu_within[\$i] + .spread.stacks[\"transformers-4\"].under[\$i]), .classes[$K].trace[\$i]] | max" "$DATA") - .confidence.under_prediction | fabs < 0.0002" \
    "true" "the larger of within + the stack's bias and the trace part"
oom estimate --model llama-3.2-1b --method lora --stack transformers-4
expect_contains "$OUT" "over the transformers-4 stack's own" "text: the stack's own sources"
oom estimate --model llama-3.2-1b --method lora --stack liger --json
expect_json '.confidence.spread.basis' "cross-stack" "Liger: no source of its own"
expect_json '.confidence.spread.stack_sources' "0" "none of its own"
expect_json '.confidence.spread.sources' "$(jq '.spread.cross_stack.sources' "$DATA")" "every source"
expect_json "$(jq "$Q95 as \$i | [(.classes[$K].gpu_within[\$i] + .spread.cross_stack.under[\$i]), .classes[$K].trace[\$i]] | max" "$DATA") - .confidence.under_prediction | fabs < 0.0002" \
    "true" "the larger of within + the cross-stack bias and the trace part"
oom estimate --model llama-3.2-1b --method lora --stack liger
expect_contains "$OUT" "the cross-stack spread over" "text: the cross-stack spread"
# the default stack takes its own sources' bias once the data has enough of them
oom estimate --model llama-3.2-1b --method lora --json
expect_json '.confidence.spread.stack_sources' "$(jq '.spread.stacks.transformers.sources' "$DATA")" \
    "the default stack's sources in the data"
jq '.spread.stacks.transformers = {"basis": "stack", "sources": 4, "under": [0, 0, 0, 0, 0]}' \
    "$DATA" >"$TMP/data/confidence.json"
OOMLESS_DATA_DIR="$TMP/data" oom estimate --model llama-3.2-1b --method lora --json
expect_json '.confidence.spread.basis' "stack" "the default stack with sources of its own"
expect_json "$(jq "$Q95 as \$i | [.classes[$K].gpu_within[\$i], .classes[$K].trace[\$i], 0] | max" "$DATA") - .confidence.under_prediction | fabs < 0.0002" \
    "true" "its bias (0) added"
D=$(printf '%s' "$OUT" | jq '.confidence.under_prediction')
OOMLESS_DATA_DIR="$TMP/data" oom estimate --model llama-3.2-1b --method lora --stack liger --json
expect_json ".confidence.under_prediction > $D" "true" "narrower than a stack without sources"
OOMLESS_DATA_DIR="$TMP/data" oom estimate --model llama-3.2-1b --method lora
expect_contains "$OUT" "+0.0%, over the transformers stack's own 4 sources" "text names it"

# the coverage check fails when the bounds are too narrow (all quantiles 0): it can fail
jq '.classes |= map_values(if .under then (.under |= map(0) | del(.gpu_within, .trace)) else . end)' \
    "$DATA" >"$TMP/data/confidence.json"
run env OOMLESS_DATA_DIR="$TMP/data" python3 "$OOMLESS_SRC/bench/accuracy/fit_confidence.py" \
    --bin "$OOMLESS_BIN" --check
expect_rc 1 "coverage check with zero-width bounds"
expect_contains "$OUT" "coverage" "reports the coverage"

# GPU measurements as CSV: one column per estimate flag and measured counters, or the generic
# predicted,measured,kind form (a kind that leaves a dimension out joins only the broader classes)
printf 'id,model,method,batch,seq,max_memory_allocated_gib,max_memory_reserved_gib,nvml_peak_gib\nr1,llama-3.2-1b,lora,2,1024,5.1,5.6,6.2\n' >"$TMP/h100.csv"
printf 'predicted,measured,kind\n1000,1100,method=lora sharding=none\n' >"$TMP/generic.csv"
run python3 "$OOMLESS_SRC/bench/accuracy/fit_confidence.py" --bin "$OOMLESS_BIN" --only csv \
    --csv "$TMP/h100.csv" --csv "$TMP/generic.csv" --min-gpu-cases 1 --out "$TMP/fit.json"
expect_rc 0 "fit on CSV inputs"
OUT=$(cat "$TMP/fit.json")
expect_json '.classes["lora/sdpa/none/none/none"].cases' "3" "three counters of the flag row"
expect_json '.classes["lora/sdpa/none/none/none"].tiers.gpu.sources["h100.csv"]' "3" "named by file"
expect_json '.classes["lora/*/*/*/none"].cases' "4" "the generic row joins the broader class"
expect_json '.sources["generic.csv"]' "1" "the generic file as a source"
# two sources: the class's bound is its errors less their source's bias (each source's median
# error), plus the largest bias (fewer than 19 sources): here the generic row's 0.1 and the
# spread of the flag row's three counters around their median
expect_json '[.classes["lora/*/*/*/none"].under[-1], .classes["lora/sdpa/none/none/none"].under[-1]] | .[0] >= 0.1 and .[1] >= 0.1' \
    "true" "every class of the flag row widened by the other source's bias"
run python3 "$OOMLESS_SRC/bench/accuracy/fit_confidence.py" --bin "$OOMLESS_BIN" --only csv \
    --csv "$TMP/generic.csv" --min-gpu-cases 1 --out "$TMP/fit.json"
OUT=$(cat "$TMP/fit.json")
expect_json '.classes["lora/*/*/*/none"].under[-1]' "0.1" "one source: its error 1100/1000 - 1"
# each source's stack (published/cases.csv's stack column): a stack with --min-stack-sources
# sources of its own (default 4) takes the largest of their biases, any other the largest of all
printf 'predicted,measured,kind,source_key,stack,stack_version\n' >"$TMP/stacks.csv"
for i in 0 1 2 3; do
    printf '1000,10%d0,method=lora,tt%d,torchtune,torchtune 0.4\n' "$i" "$i" >>"$TMP/stacks.csv"
done
printf '1000,1500,method=lora,lit,lit-gpt (Lightning Fabric),lit-gpt 8641822\n' >>"$TMP/stacks.csv"
printf '1000,1000,method=lora,hf,transformers Trainer,not stated (2023)\n' >>"$TMP/stacks.csv"
run python3 "$OOMLESS_SRC/bench/accuracy/fit_confidence.py" --bin "$OOMLESS_BIN" --only csv \
    --csv "$TMP/stacks.csv" --min-gpu-cases 1 --out "$TMP/fit.json"
expect_rc 0 "fit on sources of several stacks"
OUT=$(cat "$TMP/fit.json")
expect_json '.spread.stacks.torchtune | [.basis, .sources, .under[-1]] | tojson' '["stack",4,0.03]' \
    "torchtune's own four sources: the largest of their biases"
expect_json '.spread.cross_stack | [.sources, .under[-1]] | tojson' '[6,0.5]' "every source: lit-gpt's"
expect_json '.spread.stacks["transformers-4"] | [.basis, .sources] | tojson' '["cross-stack",1]' \
    "a 2023 transformers source is transformers 4's; one is too few"
expect_json '.classes["*/*/*/*/*"].under[-1]' "0.5" "under: with the cross-stack spread"
run python3 "$OOMLESS_SRC/bench/accuracy/fit_confidence.py" --bin "$OOMLESS_BIN" --only csv \
    --csv "$TMP/stacks.csv" --min-gpu-cases 1 --min-stack-sources 5 --out "$TMP/fit.json"
OUT=$(cat "$TMP/fit.json")
expect_json '.spread.stacks.torchtune.basis' "cross-stack" "fewer than --min-stack-sources"
run python3 "$OOMLESS_SRC/bench/accuracy/fit_confidence.py" --bin "$OOMLESS_BIN" --only csv \
    --csv "$TMP/stacks.csv" --min-gpu-cases 1 --holdout-sources
expect_contains "$OUT" "(torchtune: cross-stack)" "held out, a stack left with 3 sources: the spread"
expect_contains "$OUT" "torchtune (4 sources)" "coverage per stack"

# the columns bench/accuracy/measure.py writes: args, status, split, allocated/reserved/nvml peaks
printf 'id,split,args,status,allocated_peak,reserved_peak,nvml_peak,gpu,note\ng01,fit,--model gpt2 --batch 8 --seq 1024,ok,9000000000,9500000000,10000000000,h100-sxm,\ng04,held,--model gpt2 --batch 4 --seq 1024,ok,5000000000,5500000000,6000000000,h100-sxm,\ng05,fit,--model gpt2 --batch 64 --seq 1024,oom,,,,h100-sxm,out of memory\n' >"$TMP/measured.csv"
run python3 "$OOMLESS_SRC/bench/accuracy/fit_confidence.py" --bin "$OOMLESS_BIN" --only csv \
    --csv "$TMP/measured.csv" --min-gpu-cases 1 --out "$TMP/fit.json"
expect_rc 0 "fit on measure.py's columns"
expect_contains "$ERR" "skipped: status 'oom'" "a row that ran out of memory is skipped, said"
expect_contains "$OUT" "split=held rows of measured.csv: 3/3" "held rows checked, not fitted"
expect_contains "$OUT" "fitted on 3 cases (3 held out)" "held rows not fitted"
OUT=$(cat "$TMP/fit.json")
expect_json '.sources["measured.csv"]' "3" "three counters of the one fitted row"
expect_json '.held_out["measured.csv"]' "3" "three counters held out"
expect_json '.classes["full/sdpa/none/none/none"].cases' "3" "only the fitted row in the classes"

# plan --fit-confidence: a target between the 95 % bound and peak + the 1 GiB margin fits to the
# bound and not to the margin (the estimate's own numbers, so this holds as the estimator changes;
# a model small enough for its bound to be under the margin: the same class)
oom estimate --model gpt2 --method lora --batch 1 --gpu a100-80gb --json
expect_json '.confidence.class' "lora/sdpa/none/none/none" "gpt2 LoRA: the same class"
E=$OUT
P=$(printf '%s' "$E" | jq '.memory.device_peak')
B=$(printf '%s' "$E" | jq '.memory.device_peak_upper95')
expect_eq "$(( B < P + 1073741824 ))" "1" "this class needs less than the 1 GiB margin"
V="$(( (B + P + 1073741824) / 2 / 1048576 ))MiB"
PLAN=(plan --model gpt2 --method lora --batch 1 --allow none --allow-downscale=no --vram "$V" --gpu a100-80gb)
oom "${PLAN[@]}" --json
expect_rc 1 "with the margin it does not fit"
oom "${PLAN[@]}" --fit-confidence 0.95 --json
expect_rc 0 "to the 95 % bound it fits"
expect_json '.confidence.level' "0.95" "the level asked"
expect_json '.confidence.device_peak_bound' "$B" "the same bound as estimate"
expect_json '.fit_probability >= 0.95' "true" "fit probability at least the level"
expect_json '.confidence.margin_bytes' "1073741824" "the margin asked for"
expect_json "(((.budget.target_bytes - $C) / (1 + $U)) | floor) - .budget.usable_bytes | fabs <= 1" \
    "true" "usable: the largest peak whose bound is within the target"
expect_json '.budget.usable_bytes + .budget.safety_margin_bytes == .budget.target_bytes' "true" \
    "the margin the bound needs"
expect_json '.memory.device_peak <= .budget.usable_bytes' "true" "the chosen peak within it"
expect_json '.confidence.margin_excess_bytes == (.confidence.margin_bytes - .confidence.needed_margin_bytes)' \
    "true" "margin larger than needed, by how much"
oom "${PLAN[@]}" --fit-confidence 95%
expect_rc 0 "text"
expect_contains "$OUT" "fits with" "text says the confidence"
expect_contains "$OUT" "more than the 95% bound needs" "text says the margin is larger than needed"

# as a default of the user config
printf 'defaults:\n  fit_confidence: 0.95\n' >"$TMP/config.yaml"
oom "${PLAN[@]}" --config "$TMP/config.yaml" --json
expect_rc 0 "config default"
expect_json '.confidence.level' "0.95" "level from the config"
printf 'defaults:\n  fit_confidence: 2\n' >"$TMP/bad.yaml"
oom "${PLAN[@]}" --config "$TMP/bad.yaml"
expect_rc 2 "a confidence above 1 in the config"
expect_contains "$ERR" "fit_confidence" "names the key"

# refused: outside the measured levels, and a measured line (no error data)
oom "${PLAN[@]}" --fit-confidence 0.3
expect_rc 2 "below the lowest level"
expect_contains "$ERR" "outside" "says the range"
oom "${PLAN[@]}" --fit-confidence 1.5
expect_rc 2 "above 1"
oom plan --fixed-bytes 2GiB --bytes-per-sample 1GiB --vram 24 --fit-confidence 0.95
expect_rc 2 "a measured line"
expect_contains "$ERR" "model workload" "says why"

finish
