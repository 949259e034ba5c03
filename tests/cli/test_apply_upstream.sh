#!/bin/bash
# test_apply_upstream.sh - the framework presets of `oomless apply` (axolotl, llama-factory,
# torchtune, trl, hf-trainer) on the frameworks' own example configs (tests/data/apply/upstream,
# byte-for-byte copies with their source): only the values' bytes change, every comment stays;
# the effective batch a file states is kept or the edit refused, and any change of it is said;
# a key the plan's memory needs that a file lacks is refused unless accepted.
. "$(dirname "$0")/lib.sh"

U="$OOMLESS_SRC/tests/data/apply/upstream"
W="$TMP/work"
mkdir -p "$W"
cd "$W" || exit 1

# plan MICRO ACCUM CHECKPOINTING [PRECISION]: a plan document as `oomless plan --json` writes
# one, on one GPU, at 2048 tokens
plan() {
    local p=${4:-bf16}
    printf '{"plan": {"batch_size": %d, "grad_accum": %d, "effective_batch": %d, "seq_len": 2048, "checkpointing": "%s", "precision": "%s", "exact_precision": "%s", "optimizer": "adamw", "sharding": "none", "offload": "none", "loss": "standard", "attention": "sdpa", "gpus": 1}}\n' \
        "$1" "$2" $(($1 * $2)) "$3" "${p%%:*}" "${p#*:}" >"$W/plan.json"
}
fresh() { # fresh FILE: a copy of the upstream file in the work folder
    cp "$U/$1" "$W/$(basename "$1")"
}
# values_only ORIG NEW description: every line is the same but for the value after its key
# (comments, spacing, quoting, key order kept); $2 lines changed
values_only() {
    local blank='s/^([^#:]*:[ ]*)[^ #]+(.*)$/\1V\2/'
    if diff <(sed -E "$blank" "$1") <(sed -E "$blank" "$2") >/dev/null; then ok; else
        bad "$4: more than the values changed:"
        diff -u "$1" "$2" >&2
    fi
    expect_eq "$(diff "$1" "$2" | grep -c '^>')" "$3" "$4: lines changed"
}
edit() { # edit KEY: "action old new" of the last --json report
    printf '%s' "$OUT" | jq -r --arg k "$1" \
        '.files[0].edits[] | select(.key == $k) | "\(.action) \(.old) \(.new)"'
}
notes() { printf '%s' "$OUT" | jq -r '[.files[0].notes[].message] | join("|")'; }

# ---- axolotl: micro_batch_size, gradient_accumulation_steps, sequence_len -----------------
# lora-1b.yml states micro-batch 2 x accumulation 2: an effective batch of 4 (one GPU). A plan
# made for 32 at micro-batch 4 keeps it: accumulation 1
fresh axolotl/lora-1b.yml
plan 4 8 full
oom apply --plan plan.json --preset axolotl --json --no-backup lora-1b.yml
expect_rc 0 "axolotl lora-1b"
values_only "$U/axolotl/lora-1b.yml" lora-1b.yml 2 "axolotl lora-1b"
expect_eq "$(edit micro_batch_size)" "set 2 4" "axolotl: the micro-batch"
expect_eq "$(edit gradient_accumulation_steps)" "set 2 1" "axolotl: the accumulation that keeps 4"
expect_eq "$(edit gradient_checkpointing)" "unchanged true true" "axolotl: checkpointing on"
expect_eq "$(edit bf16 | cut -d' ' -f1,2)" "skipped auto" "axolotl: bf16 auto left to axolotl"
expect_contains "$(notes)" "the file's effective batch 4 is kept: micro-batch 4 x accumulation 1" \
    "axolotl: the kept effective batch said"
# QLoRA: the 4-bit base computes in bf16; 2 x 4 = 8 kept at micro-batch 4
fresh axolotl/qlora-1b.yml
plan 4 8 full 4bit:4bit
oom apply --plan plan.json --preset axolotl --json --no-backup qlora-1b.yml
expect_rc 0 "axolotl qlora-1b"
values_only "$U/axolotl/qlora-1b.yml" qlora-1b.yml 2 "axolotl qlora-1b"
expect_eq "$(edit gradient_accumulation_steps)" "set 4 2" "axolotl qlora: 8 kept"
# without its gradient_checkpointing key, a plan that checkpoints is refused (axolotl's default
# is off), the file as it was; --create adds it; --allow-skipped writes the rest, and says so
grep -v '^gradient_checkpointing:' "$U/axolotl/lora-1b.yml" >nogc.yml
cp nogc.yml nogc.orig
plan 2 2 full
oom apply --plan plan.json --preset axolotl nogc.yml
expect_rc 1 "axolotl without gradient_checkpointing: refused"
expect_contains "$ERR" "'nogc.yml' has no 'gradient_checkpointing': the plan fits only with \
checkpointing full; without the key the framework uses false, so the run would not fit" \
    "axolotl: why"
cmp -s nogc.yml nogc.orig && ok || bad "refused: the file is unchanged"
oom apply --plan plan.json --preset axolotl --create --no-backup --json nogc.yml
expect_eq "$(edit gradient_checkpointing)" "create null true" "--create: the key added"
cp nogc.orig nogc.yml
oom apply --plan plan.json --preset axolotl --allow-skipped --no-backup --json nogc.yml
expect_rc 0 "--allow-skipped"
expect_contains "$(notes)" "no 'gradient_checkpointing' (--allow-skipped): the plan fits only with \
checkpointing full" "--allow-skipped: said"
# a plan without checkpointing needs no key
cp nogc.orig nogc.yml
plan 2 2 none
oom apply --plan plan.json --preset axolotl --no-backup nogc.yml
expect_rc 0 "axolotl: a plan without checkpointing, no key needed"

# ---- LLaMA-Factory: per_device_train_batch_size x gradient_accumulation_steps, cutoff_len ----
# qwen3_lora_sft.yaml: 1 x 8. The issue's case: a plan made for the default 32 changed the
# accumulation from 8 to 32; the file's 8 is the target
fresh llama-factory/qwen3_lora_sft.yaml
plan 4 8 full
oom apply --plan plan.json --preset llama-factory --json --no-backup qwen3_lora_sft.yaml
expect_rc 0 "llama-factory lora"
values_only "$U/llama-factory/qwen3_lora_sft.yaml" qwen3_lora_sft.yaml 2 "llama-factory lora"
expect_eq "$(edit gradient_accumulation_steps)" "set 8 2" "llama-factory: 4 x 2 keeps 8"
expect_eq "$(edit per_device_train_batch_size)" "set 1 4" "llama-factory: the micro-batch"
expect_eq "$(edit cutoff_len)" "unchanged 2048 2048" "llama-factory: cutoff_len"
expect_eq "$(edit bf16)" "unchanged true true" "llama-factory: bf16"
# LLaMA-Factory checkpoints by default: no disable_gradient_checkpointing key is needed
expect_eq "$(edit disable_gradient_checkpointing | cut -d' ' -f1)" "skipped" "no disable key"
expect_not_contains "$ERR" "has no" "llama-factory: checkpointing by default, not refused"
# a micro-batch that does not divide 8: refused, saying why and what to do
fresh llama-factory/qwen3_lora_sft.yaml
plan 3 11 full
oom apply --plan plan.json --preset llama-factory qwen3_lora_sft.yaml
expect_rc 1 "llama-factory: 8 cannot be kept at micro-batch 3"
expect_contains "$ERR" "'qwen3_lora_sft.yaml' states an effective batch of 8, and the plan was \
made for 33: its micro-batch 3 x 1 GPU does not divide 8, so no accumulation keeps it; plan with \
--target-effective-batch 8, or give --allow-effective-batch-change" "llama-factory: why"
cmp -s qwen3_lora_sft.yaml "$U/llama-factory/qwen3_lora_sft.yaml" && ok || bad "refused: unchanged"
oom apply --plan plan.json --preset llama-factory --allow-effective-batch-change --json \
    --no-backup qwen3_lora_sft.yaml
expect_eq "$(edit gradient_accumulation_steps)" "set 8 11" "--allow-effective-batch-change"
expect_contains "$(notes)" "the effective batch changes from 8 to 33, the plan's \
(--allow-effective-batch-change)" "the change said, in the JSON report"
fresh llama-factory/qwen3_lora_sft.yaml
oom apply --plan plan.json --preset llama-factory --allow-effective-batch-change --dry-run \
    qwen3_lora_sft.yaml
expect_contains "$ERR" "qwen3_lora_sft.yaml: the effective batch changes from 8 to 33" \
    "the change said, on the terminal"
# a real plan, made for the default effective batch of 32: kept at 8, or refused
oom plan --model qwen3-4b --method lora --seq 2048 --gpu a100-80gb --json
MICRO=$(jq -r .plan.batch_size <<<"$OUT")
printf '%s' "$OUT" >real.json
fresh llama-factory/qwen3_lora_sft.yaml
oom apply --plan real.json --preset llama-factory --json --no-backup qwen3_lora_sft.yaml
if [ $((8 % MICRO)) -eq 0 ]; then
    expect_rc 0 "a real plan: 8 kept"
    expect_eq "$(edit gradient_accumulation_steps | cut -d' ' -f3)" $((8 / MICRO)) "accumulation"
else
    expect_rc 1 "a real plan: 8 cannot be kept at micro-batch $MICRO"
fi
# the full fine-tune example (1 x 2, DeepSpeed ZeRO-3 from its deepspeed: file)
fresh llama-factory/qwen3_full_sft.yaml
plan 2 16 full
oom apply --plan plan.json --preset llama-factory --json --no-backup qwen3_full_sft.yaml
expect_rc 0 "llama-factory full"
values_only "$U/llama-factory/qwen3_full_sft.yaml" qwen3_full_sft.yaml 2 "llama-factory full"
expect_eq "$(edit gradient_accumulation_steps)" "set 2 1" "llama-factory full: 2 x 1 keeps 2"

# ---- torchtune: batch_size x gradient_accumulation_steps, tokenizer.max_seq_len ------------
# 1B_lora_single_device.yaml: 4 x 8 = 32, max_seq_len null, checkpointing off
fresh torchtune/1B_lora_single_device.yaml
plan 2 16 full
oom apply --plan plan.json --preset torchtune --json --no-backup 1B_lora_single_device.yaml
expect_rc 0 "torchtune lora"
values_only "$U/torchtune/1B_lora_single_device.yaml" 1B_lora_single_device.yaml 4 "torchtune lora"
expect_eq "$(edit batch_size)" "set 4 2" "torchtune: batch_size"
expect_eq "$(edit gradient_accumulation_steps)" "set 8 16" "torchtune: 32 kept"
expect_eq "$(edit tokenizer.max_seq_len)" "set null 2048" "torchtune: max_seq_len over null"
expect_eq "$(edit enable_activation_checkpointing)" "set false true" "torchtune: checkpointing"
expect_contains "$(cat 1B_lora_single_device.yaml)" \
    "enable_activation_checkpointing: True  # True reduces memory" \
    "torchtune: Python's spelling and the comment kept"
expect_eq "$(notes)" "" "torchtune: the plan's effective batch is the file's: nothing to say"

# ---- TRL: trl sft --config FILE ------------------------------------------------------------
# sft_config.yaml (TRL's own example): 8 x 2 = 16; no checkpointing key, which TRL turns on
fresh trl/sft_config.yaml
plan 4 8 full
oom apply --plan plan.json --preset trl --json --no-backup sft_config.yaml
expect_rc 0 "trl sft_config"
values_only "$U/trl/sft_config.yaml" sft_config.yaml 2 "trl sft_config"
expect_eq "$(edit gradient_accumulation_steps)" "set 2 4" "trl: 16 kept"
expect_eq "$(edit activation_checkpointing | cut -d' ' -f1)" "skipped" "trl: no switch in the file"
expect_not_contains "$ERR" "has no" "trl: TRL checkpoints by default, not refused"
# example_config.yaml has none of the keys: all skipped, the file unchanged
fresh trl/example_config.yaml
oom apply --plan plan.json --preset trl --no-backup example_config.yaml
expect_rc 0 "trl example_config: nothing to set"
cmp -s example_config.yaml "$U/trl/example_config.yaml" && ok || bad "example_config unchanged"
# the same file read as TrainingArguments (checkpointing off by default): refused; --create
# writes transformers 5.23's name, not the deprecated one
oom apply --plan plan.json --preset hf-trainer example_config.yaml
expect_rc 1 "hf-trainer: no checkpointing switch"
expect_contains "$ERR" "'example_config.yaml' has no 'activation_checkpointing'" "hf-trainer: why"
oom apply --plan plan.json --preset hf-trainer --create --json --no-backup example_config.yaml
expect_rc 0 "hf-trainer --create"
expect_eq "$(edit activation_checkpointing)" "create null true" "--create: the 5.23 name"
expect_eq "$(edit gradient_checkpointing | cut -d' ' -f1)" "skipped" "--create: one of the two"
expect_eq "$(grep -c 'gradient_checkpointing' example_config.yaml)" 0 "no deprecated key written"
# a file with the deprecated name keeps it (5.23 reads it as an alias)
printf 'per_device_train_batch_size: 4\ngradient_accumulation_steps: 8\ngradient_checkpointing: false  # off\n' >old.yaml
oom apply --plan plan.json --preset hf-trainer --json --no-backup old.yaml
expect_eq "$(edit gradient_checkpointing)" "set false true" "the name the file uses, set"
expect_contains "$(edit activation_checkpointing)" "skipped" "the other name, skipped"
expect_eq "$(sed -n 3p old.yaml)" "gradient_checkpointing: true  # off" "its comment kept"

finish
