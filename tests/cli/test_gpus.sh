#!/bin/bash
# test_gpus.sh - `oomless gpus` against the fake NVML: listing, JSON, CUDA_VISIBLE_DEVICES,
# budgets, missing/failing NVML, bad values.
. "$(dirname "$0")/lib.sh"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE

SPEC='driver 550.54.15
cuda 12040
gpu name="NVIDIA GeForce RTX 4090" uuid=GPU-4090aaaa-1111-2222-3333-444444444444 total=25757220864 used=1073741824 cc=8.9
gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-a100bbbb-1111-2222-3333-444444444444 total=85899345920 used=0 cc=8.0'

fake_nvml "$SPEC"
oom gpus
expect_rc 0 "gpus"
expect_golden gpus-two.txt "gpus human output"

oom gpus --json
expect_rc 0 "gpus --json"
expect_one_json "gpus --json"
expect_json '.gpus | length' 2 "two GPUs"
expect_json '.gpus[0].name' "NVIDIA GeForce RTX 4090" "first name"
expect_json '.gpus[0].total_bytes' 25757220864 "4090 total bytes"
expect_json '.gpus[0].used_bytes' 1073741824 "4090 used bytes"
expect_json '.gpus[0].free_bytes' 24683479040 "4090 free bytes"
expect_json '.gpus[1].total_bytes' 85899345920 "A100 total bytes"
expect_json '.gpus[1].uuid' "GPU-a100bbbb-1111-2222-3333-444444444444" "A100 uuid"
expect_json '.gpus[1].compute_capability' "8.0" "A100 cc"
expect_json '.total_bytes' 111656566784 "total"
expect_json '.mixed' true "mixed"
expect_json '.driver_version' "550.54.15" "driver"
expect_json '.budget.target_bytes' 25757220864 "budget: the smallest GPU"
expect_json '.budget.safety_margin_bytes' 1073741824 "default margin 1 GiB"
# the 4090 has 1 GiB in use: usable = 23.99 GiB - 1 GiB in use - 1 GiB margin
expect_json '.budget.usable_bytes' $((25757220864 - 2 * 1073741824)) "usable leaves out what is in use"
expect_json '.budget.others_bytes' 1073741824 "others_bytes: the 1 GiB in use"
expect_json '.budget.others' null "others: NVML names no process"
expect_json '.target.profile' "rtx-4090" "matched profile"
expect_json '.target.detected' true "detected"
expect_eq "$ERR" "oomless: other processes hold 1.00 GiB of NVIDIA GeForce RTX 4090 (no process named): the usable budget is 21.99 GiB (lowered for them)" "the notice names what others hold"

CUDA_VISIBLE_DEVICES=1 oom gpus --json
expect_json '.gpus | length' 1 "CVD=1: one GPU"
expect_json '.gpus[0].name' "NVIDIA A100-SXM4-80GB" "CVD=1 picks the A100"
expect_json '.gpus[0].index' 0 "renumbered index"
expect_json '.gpus[0].nvml_index' 1 "NVML index kept"
expect_json '.budget.target_bytes' 85899345920 "budget of the A100"

CUDA_VISIBLE_DEVICES=GPU-4090aaaa-1111-2222-3333-444444444444 oom gpus --json
expect_json '.gpus | length' 1 "CVD=uuid: one GPU"
expect_json '.gpus[0].name' "NVIDIA GeForce RTX 4090" "CVD=uuid picks the 4090"
CUDA_VISIBLE_DEVICES=GPU-a100 oom gpus --json
expect_json '.gpus[0].name' "NVIDIA A100-SXM4-80GB" "CVD=uuid prefix"
CUDA_VISIBLE_DEVICES=1,0 oom gpus --json
expect_json '[.gpus[].nvml_index] | join(",")' "1,0" "CVD order"
CUDA_VISIBLE_DEVICES=1,7,0 oom gpus --json
expect_json '.gpus | length' 1 "invalid entry ends the list"
CUDA_VISIBLE_DEVICES= oom gpus --json
expect_json '.gpus | length' 0 "empty CVD hides all"
expect_json '.target.fallback' true "no visible GPU: fallback profile"
CUDA_VISIBLE_DEVICES= oom gpus --all --json
expect_json '.gpus | length' 2 "--all ignores CVD"

oom gpus --vram 20.5 --vram-safety-margin 512 --json
expect_rc 0 "vram + margin"
expect_json '.budget.usable_bytes' $((20 * 1024 * 1024 * 1024 + 512 * 1024 * 1024 - 512 * 1024 * 1024)) "usable = 20.5 GiB - 512 MiB"
expect_json '.budget.target_bytes' 22011707392 "target = 20.5 GiB"
oom gpus --vram 20 --vram-safety-margin 10% --json
expect_json '.budget.safety_margin_bytes' 2147483648 "10% margin"

oom gpus --vram banana
expect_rc 2 "--vram banana"
expect_contains "$ERR" "'banana'" "error quotes the value"
for bad in -3 1e999 "16 XB" ""; do
    oom gpus --vram "$bad"
    expect_rc 2 "--vram '$bad'"
    expect_contains "$ERR" "'$bad'" "error quotes '$bad'"
done
oom gpus --vram-safety-margin lots
expect_rc 2 "bad margin"
oom gpus --vram 1 --vram-safety-margin 2GiB
expect_rc 2 "margin larger than target"

oom gpus --gpu a100_80gb --json
expect_json '.budget.target_bytes' 85899345920 "profile a100_80gb"
expect_json '.target.detected' false "profile is not detected"
GPU_PROFILE=a100_40gb oom gpus --json
expect_json '.target.profile' "a100-40gb" "GPU_PROFILE env"
OOMLESS_GPU=h100 GPU_PROFILE=a100_40gb oom gpus --json
expect_json '.target.profile' "h100-sxm" "OOMLESS_GPU wins over GPU_PROFILE"
OOMLESS_GPU=h100 oom gpus --gpu l4 --json
expect_json '.target.profile' "l4" "--gpu wins over env"
oom gpus --gpu a100-81gb
expect_rc 2 "unknown profile"
expect_contains "$ERR" "a100-81gb" "names the unknown profile"
expect_contains "$ERR" "a100-80gb" "suggests the closest"
oom gpus --gpu 1 --json
expect_json '.target.name' "NVIDIA A100-SXM4-80GB" "--gpu INDEX"
oom gpus --gpu 9
expect_rc 2 "--gpu index not visible"

# a config file adds a GPU and changes the defaults
cat >"$TMP/config.yaml" <<'YAML'
defaults:
  safety_margin: 2GiB
  profile: lab-card
gpus:
  - {id: lab-card, name: Lab card, memory: 20GiB}
YAML
oom gpus --config "$TMP/config.yaml" --gpu lab-card --json
expect_json '.budget.target_bytes' 21474836480 "config GPU"
expect_json '.budget.safety_margin_bytes' 2147483648 "config margin"
oom gpus --catalog --config "$TMP/config.yaml"
expect_contains "$OUT" "lab-card" "catalog lists the config GPU"
# the default config: a relative $XDG_CONFIG_HOME is ignored (the XDG Base Directory spec), with
# one notice, and $HOME/.config is read instead
mkdir -p "$TMP/home/.config/oomless" "$TMP/cwd/rel/oomless"
cp "$TMP/config.yaml" "$TMP/home/.config/oomless/config.yaml"
printf 'defaults: [\n' >"$TMP/cwd/rel/oomless/config.yaml"   # would fail if it were read
cd "$TMP/cwd" || exit 1
XDG_CONFIG_HOME=rel HOME="$TMP/home" oom gpus --gpu lab-card --json
cd - >/dev/null || exit 1
expect_rc 0 "relative XDG_CONFIG_HOME: ignored"
expect_json '.budget.target_bytes' 21474836480 "relative XDG_CONFIG_HOME: \$HOME/.config read"
expect_eq "$ERR" "oomless: \$XDG_CONFIG_HOME 'rel' is not an absolute path: ignored, as the XDG Base Directory specification says; using $TMP/home/.config" \
    "relative XDG_CONFIG_HOME: one notice"
# a FIFO in the default config's place: refused at once (every command would wait on it); a named
# one (--config <(...)) is still read
mkdir -p "$TMP/fifohome/.config/oomless" && mkfifo "$TMP/fifohome/.config/oomless/config.yaml"
run env -u XDG_CONFIG_HOME HOME="$TMP/fifohome" timeout 30 "$OOMLESS_BIN" gpus --gpu a100-80gb
expect_rc 3 "default config a FIFO: refused, no hang"
expect_contains "$ERR" "config file '$TMP/fifohome/.config/oomless/config.yaml' is a FIFO, not a regular file" \
    "default config a FIFO: message"
run "$OOMLESS_BIN" gpus --config <(cat "$TMP/config.yaml") --gpu lab-card --json
expect_json '.budget.target_bytes' 21474836480 "--config <(...) still read"
printf 'defaults: [\n' >"$TMP/bad.yaml"
oom gpus --config "$TMP/bad.yaml"
expect_rc 2 "bad config"
expect_contains "$ERR" "bad.yaml:" "names the file"
# a second document would be ignored without a word: refused
{ cat "$TMP/config.yaml"; printf -- '---\ndefaults: {safety_margin: 3GiB}\n'; } >"$TMP/two.yaml"
oom gpus --config "$TMP/two.yaml"
expect_rc 2 "config of two documents"
expect_contains "$ERR" "two.yaml:6:1: a second YAML document" "config of two documents: message"

# no NVML: a notice, exit 0, the default profile
no_nvml
oom gpus
expect_rc 0 "no NVML: exit 0"
expect_contains "$ERR" "no GPU found" "notice"
expect_contains "$ERR" "rtx-4090" "names the default profile"
expect_eq "$(printf '%s\n' "$ERR" | wc -l)" 1 "one-line notice"
expect_contains "$OUT" "Usable VRAM:   22.99 GiB (23540 MiB)" "budget of the default profile"
oom gpus --json
expect_one_json "no NVML json"
expect_json '.gpus | length' 0 "no GPUs"
expect_json '.target.fallback' true "fallback"

# NVML init failing
fake_nvml "init_error 9"
oom gpus --json
expect_rc 0 "init failure: exit 0"
expect_json '.target.reason' "NVML init failed: Driver Not Loaded (error 9)" "reason"

# catalog
oom gpus --catalog --json
expect_one_json "catalog json"
expect_json '[.gpus[] | select(.id == "h200")][0].memory_bytes' 150754820096 "h200 in the catalog"
oom gpus --catalog
expect_contains "$OUT" "rtx-4090" "catalog text"

# usage
oom gpus --frobnicate
expect_rc 2 "unknown option"
oom gpus --help
expect_rc 0 "help"
expect_contains "$OUT" "--vram-safety-margin" "help lists options"
oom --version
expect_contains "$OUT" "oomless 1.0.0 (library 1.0.0)" "version"
oom frobnicate
expect_rc 2 "unknown command"
# the driver's reserve (the idle H100 of 2026-11-25: 81559 MiB total, 0 used, 81079 MiB free): in
# neither used nor free, left out of the budget; read from nvmlDeviceGetMemoryInfo_v2 and, with
# the fake that lacks it, inferred from v1 as total - used - free
H100='gpu name="NVIDIA H100 80GB HBM3" uuid=GPU-6144c1d5-a225-3598-49b2-cf706f5a74ec total=85520809984 used=0 reserved=503316480 cc=9.0'
for lib in "$FAKE_NVML_LIB" "$(dirname "$FAKE_NVML_LIB")/mem_v1/libnvidia-ml.so.1"; do
    fake_nvml "$H100"
    export OOMLESS_NVML_LIBRARY="$lib"
    oom gpus --json
    expect_rc 0 "gpus --json, H100 ($lib)"
    expect_json '.gpus[0].reserved_bytes' 503316480 "reserved_bytes: 480 MiB ($lib)"
    expect_json '.gpus[0].free_bytes' 85017493504 "free: 81079 MiB ($lib)"
    expect_json '.budget.target_bytes' 85017493504 "the target is the capacity, total - reserved ($lib)"
    expect_json '.budget.usable_bytes' $((85017493504 - 1073741824)) "usable: capacity - margin ($lib)"
    expect_json '.budget.others_bytes' 0 "the reserve is nobody's memory ($lib)"
    oom gpus
    expect_contains "$OUT" "81559 MiB total        0 MiB used    81079 MiB free    480 MiB reserved" "gpus shows the reserve ($lib)"
    expect_contains "$OUT" "Target VRAM:   79.18 GiB (81079 MiB) per GPU, detected NVIDIA H100 80GB HBM3 (its total less what the driver reserves)" "the target line ($lib)"
    expect_contains "$OUT" "Usable VRAM:   78.18 GiB (80055 MiB)" "usable ($lib)"
    oom watch --once --json
    expect_json '.gpus[0].reserved_bytes' 503316480 "watch: reserved_bytes ($lib)"
    expect_json '.gpus[0].budget.target_bytes' 85017493504 "watch: the budget starts from the capacity ($lib)"
    oom watch --once
    expect_contains "$OUT" "budget 78.18 GiB usable (480.0 MiB reserved by the driver left out)" "watch text names the reserve ($lib)"
done

finish
