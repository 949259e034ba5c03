#!/bin/bash
# test_stack.sh - --stack (and stack: in a workload file): the training stack whose memory is
# modelled, named with the versions it models in every output (estimate text and JSON, plan text,
# JSON and the formats that have comments); the refusals.
. "$(dirname "$0")/lib.sh"

M="--model llama-3.2-1b --method lora --seq 256"

# the default: current transformers, traced
oom estimate --json $M
expect_rc 0 "estimate --json"
expect_one_json "estimate --json"
expect_json .stack.name transformers "default stack"
expect_json .stack.version "transformers 5.23.0, peft 0.21.2" "default stack's versions"
expect_json .stack.traced true "transformers is traced"
expect_json .workload.stack transformers "the workload names it too"

# each value with its versions and whether oomless trace runs its code
for s in "transformers-4|transformers 4.57.6, peft 0.17.1|true" \
    "liger|liger-kernel 0.8.2 on transformers 5.23.0|false" \
    "torchtune|torchtune 0.6.1, torchao 0.15.0|true" "torchtitan|torchtitan 0.3.0|true" \
    "unsloth|unsloth 2026.8.19|false"; do
    IFS='|' read -r name version traced <<<"$s"
    oom estimate --json $M --stack "$name"
    expect_json '.stack | "\(.name)|\(.version)|\(.traced)"' "$name|$version|$traced" "$name"
done

oom estimate $M --stack torchtune
expect_contains "$OUT" "stack                         : torchtune (torchtune 0.6.1, torchao 0.15.0; traced on the meta device)" \
    "estimate text names the stack"
oom estimate $M --stack unsloth
expect_contains "$OUT" "unsloth (unsloth 2026.8.19; from its source, not traced)" \
    "a stack modelled from its source says so"

# a stack changes the arithmetic where its code keeps other tensors (docs/stacks.md): torchtune's
# layer keeps more than transformers' (its norms' fp32 inputs, the keys and values expanded to
# every head); transformers 4 differs only for GPT-2, so a Llama's peak is 5.x's
peak() { "$OOMLESS_BIN" estimate --json $M "$@" | jq .memory.activations; }
expect_eq "$(peak --stack transformers-4)" "$(peak)" "transformers 4: a Llama as in 5.x"
if [ "$(peak --stack torchtune)" -gt "$(peak)" ]; then ok; else
    bad "torchtune's Llama layer keeps more: $(peak --stack torchtune) <= $(peak)"
fi

# refusals name the value and every stack
oom estimate $M --stack pytorch-lightning
expect_rc 2 "unknown stack"
expect_contains "$ERR" "stack 'pytorch-lightning' is not one of: transformers, transformers-4, liger, torchtune, torchtitan, unsloth" \
    "the message lists the stacks"

# plan: JSON, text, and the formats with comment lines
P="$M --gpu rtx-4090 --stack torchtitan"
oom plan --json $P
expect_rc 0 "plan --json"
expect_json '.stack | "\(.name)|\(.version)|\(.traced)"' "torchtitan|torchtitan 0.3.0|true" "plan JSON"
oom plan $P
expect_contains "$OUT" "stack                         : torchtitan (torchtitan 0.3.0; traced on the meta device)" \
    "plan text"
oom plan $P --format env
expect_eq "$(head -1 <<<"$OUT")" \
    "# memory modelled for the torchtitan stack (torchtitan 0.3.0; traced on the meta device)" \
    "the format's first line names the stack"
# (torchtune's overrides go onto `tune run`'s line by command substitution: no comment there)
oom plan $P --format torchtune
expect_eq "$(head -1 <<<"$OUT")" "batch_size=16" "torchtune's overrides: no comment line"
oom plan $P --format args
expect_not_contains "$OUT" "#" "a format without comments has none"

# stack: in a workload file
printf 'model: llama-3.2-1b\nmethod: lora\nseq: 256\nstack: liger\n' >"$TMP/w.yaml"
oom plan --workload "$TMP/w.yaml" --gpu rtx-4090 --json
expect_json .stack.name liger "stack: in a workload file"
expect_json .stack.traced false "liger is not traced"

finish
