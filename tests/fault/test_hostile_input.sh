#!/bin/bash
# test_hostile_input.sh - files built to exhaust the stack or memory are refused with a message,
# never a crash: nesting 300,000 deep (apply YAML and JSON, the user config, a model config.json,
# a plan options file), a YAML alias bomb (10^8 values from 300 bytes), a NUL byte in a config.
. "$OOMLESS_SRC/tests/cli/lib.sh"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE
cd "$TMP" || exit 1
P="$OOMLESS_SRC/tests/data/apply/plan.json"
deep() { # deep OPEN CLOSE N: OPEN x N then CLOSE x N
    python3 -c "import sys; o, c, n = sys.argv[1], sys.argv[2], int(sys.argv[3]); print(o * n + c * n)" "$@"
}

{ printf 'a:\n  batch: '; deep '[' ']' 300000; } >deep.yaml
oom apply --plan "$P" --set a.batch=batch_size --dry-run deep.yaml
expect_rc 2 "apply: YAML nested 300,000 deep"
expect_contains "$ERR" "nested too deeply" "apply YAML: message"
{ printf '{"a": {"batch": 1}, "b": '; deep '[' ']' 300000; printf '}\n'; } >deep.json
oom apply --plan "$P" --set a.batch=batch_size --dry-run deep.json
expect_rc 2 "apply: JSON nested 300,000 deep"
expect_contains "$ERR" "too deep" "apply JSON: message"

{ printf 'defaults: '; deep '[' ']' 300000; } >deep-config.yaml
oom gpus --config deep-config.yaml
expect_rc 2 "config nested 300,000 deep"
expect_contains "$ERR" "deep-config.yaml" "config: names the file"

python3 -c "
lines = ['a0: &a0 [x,x,x,x,x,x,x,x,x,x]']
for i in range(1, 9):
    lines.append('a%d: &a%d [' % (i, i) + ','.join(['*a%d' % (i - 1)] * 10) + ']')
print('\n'.join(lines))" >bomb.yaml
oom gpus --config bomb.yaml
expect_rc 2 "config alias bomb"
expect_contains "$ERR" "aliases" "alias bomb: message"
oom plan --gpu t4 --workload bomb.yaml
expect_rc 2 "plan --workload alias bomb"
expect_contains "$ERR" "aliases" "plan --workload alias bomb: message"
{ printf 'workloads:\n  w: '; deep '{a: ' '}' 100000; } >deep-workloads.yaml
oom table --workloads deep-workloads.yaml --gpus t4
expect_rc 2 "table --workloads nested 100,000 deep"
expect_contains "$ERR" "deep-workloads.yaml" "table: names the file"

{ printf '{"model_type": "llama", "x": '; deep '[' ']' 300000; printf '}\n'; } >config.json
oom estimate --model "$TMP/config.json"
expect_rc 2 "model config.json nested 300,000 deep"
expect_contains "$ERR" "config.json" "model config: names the file"

printf 'defaults:\n  profile: a\0b\n' >nul.yaml
oom gpus --config nul.yaml
expect_rc 2 "config with a NUL byte"
expect_contains "$ERR" "control characters" "NUL byte: libyaml's message"
finish
