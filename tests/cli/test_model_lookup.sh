#!/bin/bash
# test_model_lookup.sh - what `--model` names: a config.json, a folder holding one, a preset, a
# Hugging Face Hub id in the local Hub cache (a fake one made here), a preset by the Hub id's
# name; a missing file said as such; the closest presets by family, then size.
. "$(dirname "$0")/lib.sh"
D="$OOMLESS_SRC/tests/data"
no_nvml
unset HF_HUB_CACHE HF_HOME XDG_CACHE_HOME
export HOME="$TMP/home"
mkdir -p "$HOME"

# tiny VOCAB: the test config with another vocabulary, to tell the snapshots apart
tiny() { jq ".vocab_size = $1" "$D/estimate_tiny_llama.json"; }
# snapshot REPO_DIR REV VOCAB [TOUCH_DATE]: a snapshot folder holding a config.json
snapshot() {
    mkdir -p "$1/snapshots/$2"
    tiny "$3" >"$1/snapshots/$2/config.json"
    [ -z "${4:-}" ] || touch -d "$4" "$1/snapshots/$2"
}
vocab() { oom estimate --model "$1" --seq 64 --json; }

# files and folders
vocab "$D/estimate_tiny_llama.json"
expect_rc 0 "a config.json"
expect_json '.model.vocab' "1000" "the file's vocabulary"
mkdir -p "$TMP/folder"
tiny 1234 >"$TMP/folder/config.json"
vocab "$TMP/folder"
expect_json '.model.vocab' "1234" "a folder holding a config.json"
mkdir -p "$HOME/models/tiny"
tiny 4321 >"$HOME/models/tiny/config.json"
vocab "~/models/tiny"
expect_json '.model.vocab' "4321" "'~/' is the home folder"
mkdir -p "$TMP/empty"
vocab "$TMP/empty"
expect_rc 2 "a folder without config.json"
expect_contains "$ERR" "holds no config.json" "says the folder has no config.json"
# a config.json that is a FIFO (never opened: it would wait for a writer) or a link to a device:
# said what it is, exit 2
mkdir -p "$TMP/fifo" "$TMP/dev"
mkfifo "$TMP/fifo/config.json" "$TMP/fifo.json"
ln -s /dev/zero "$TMP/dev/config.json"
ln -s /dev/zero "$TMP/zero.json"
for m in fifo dev fifo.json zero.json; do
    run timeout 20 "$OOMLESS_BIN" estimate --model "$TMP/$m" --seq 64
    expect_rc 2 "config $m"
done
run timeout 20 "$OOMLESS_BIN" estimate --model "$TMP/fifo"
expect_contains "$ERR" "model folder '$TMP/fifo': '$TMP/fifo/config.json' is a FIFO, not a regular file" \
    "a FIFO config.json in a folder"
run timeout 20 "$OOMLESS_BIN" estimate --model "$TMP/dev"
expect_contains "$ERR" "'$TMP/dev/config.json' is a character device, not a regular file" \
    "a config.json linked to /dev/zero"
run timeout 20 "$OOMLESS_BIN" estimate --model "$TMP/fifo.json"
expect_contains "$ERR" "model '$TMP/fifo.json' is a FIFO, not a regular file" "a FIFO named"
run timeout 20 "$OOMLESS_BIN" estimate --model "$TMP/zero.json"
expect_contains "$ERR" "model '$TMP/zero.json' is a character device" "a device named"
# a UTF-8 byte order mark (what Windows editors write) before the JSON: read as without it
mkdir -p "$TMP/bom"
{ printf '\357\273\277'; tiny 2222; } >"$TMP/bom/config.json"
vocab "$TMP/bom"
expect_rc 0 "a config.json with a byte order mark"
expect_json '.model.vocab' "2222" "read past the byte order mark"

# something meant as a file that does not exist: said so, no preset suggested
for m in /no/such/file ./no-such.json ../no/such/config.json no-such.json "~/no/such" \
    "$TMP/no-such-dir/config.json"; do
    vocab "$m"
    expect_rc 2 "missing file $m"
    expect_contains "$ERR" "model file '$m' does not exist" "says $m does not exist"
    expect_not_contains "$ERR" "closest preset" "suggests no preset for $m"
done

# presets, case-insensitively and with '_' for '-'
vocab LLAMA_3.1-8B
expect_rc 0 "a preset in capitals"
expect_json '.model.vocab' "128256" "llama-3.1-8b"
expect_eq "$ERR" "" "an exact preset needs no notice"

# a Hub id in the cache: refs/main names the snapshot, even when another one is newer
HUB="$TMP/hub"
REPO="$HUB/models--TinyOrg--Tiny-LM"
snapshot "$REPO" aaaa 2000 "2024-01-01"
snapshot "$REPO" bbbb 3000 "2025-01-01"
snapshot "$REPO" cccc 5000 "2023-01-01"
mkdir -p "$REPO/refs" "$REPO/snapshots/dddd"
printf 'cccc\n' >"$REPO/refs/main"
touch -d "2026-01-01" "$REPO/snapshots/dddd" # newest, but without a config.json
export HF_HUB_CACHE="$HUB"
vocab TinyOrg/Tiny-LM
expect_rc 0 "a Hub id in the cache"
expect_json '.model.vocab' "5000" "the snapshot refs/main names"
expect_eq "$ERR" "" "a cached Hub id needs no notice"
vocab tinyorg/TINY-lm
expect_json '.model.vocab' "5000" "the Hub id matched case-insensitively"
oom plan --model tinyorg/tiny-lm --seq 64 --vram 8 --json
expect_rc 0 "plan takes the Hub id"
A=$(printf '%s' "$OUT" | jq -c .memory)
oom plan --model "$REPO/snapshots/cccc/config.json" --seq 64 --vram 8 --json
expect_eq "$(printf '%s' "$OUT" | jq -c .memory)" "$A" "plan reads the snapshot refs/main names"
oom plan --model "$REPO/snapshots/bbbb" --seq 64 --vram 8 --json
expect_not_contains "$(printf '%s' "$OUT" | jq -c .memory)" "$A" "(another snapshot plans otherwise)"
printf 'eeee\n' >"$REPO/refs/main"
vocab TinyOrg/Tiny-LM
expect_json '.model.vocab' "3000" "refs/main naming no snapshot: the newest with a config.json"
rm "$REPO/refs/main"
vocab TinyOrg/Tiny-LM
expect_json '.model.vocab' "3000" "no refs/main: the newest snapshot"
touch -d "2025-06-01" "$REPO/snapshots/aaaa"
vocab TinyOrg/Tiny-LM
expect_json '.model.vocab' "2000" "the newest is by the snapshot's time, not its name"

# the cache wins over a preset of the same name
snapshot "$HUB/models--meta-llama--Llama-3.1-8B" 0123 6000
vocab meta-llama/Llama-3.1-8B
expect_json '.model.vocab' "6000" "the cached config, not the preset"

# where the cache is: $HF_HUB_CACHE, else $HF_HOME/hub, else $XDG_CACHE_HOME or ~/.cache
unset HF_HUB_CACHE
snapshot "$TMP/hfhome/hub/models--TinyOrg--Tiny-LM" ffff 7000
HF_HOME="$TMP/hfhome" vocab TinyOrg/Tiny-LM
expect_json '.model.vocab' "7000" "\$HF_HOME/hub"
HF_HOME="$TMP/hfhome" HF_HUB_CACHE="$HUB" vocab TinyOrg/Tiny-LM
expect_json '.model.vocab' "2000" "\$HF_HUB_CACHE before \$HF_HOME"
snapshot "$HOME/.cache/huggingface/hub/models--TinyOrg--Tiny-LM" 9999 8000
vocab TinyOrg/Tiny-LM
expect_json '.model.vocab' "8000" "~/.cache/huggingface/hub"
snapshot "$TMP/xdg/huggingface/hub/models--TinyOrg--Tiny-LM" 8888 9000
XDG_CACHE_HOME="$TMP/xdg" vocab TinyOrg/Tiny-LM
expect_json '.model.vocab' "9000" "\$XDG_CACHE_HOME/huggingface/hub"

# not in the cache: the preset of the Hub id's name, variants too, with a notice
export HF_HUB_CACHE="$HUB"
vocab Qwen/Qwen2.5-7B-Instruct
expect_rc 0 "an instruct variant not in the cache"
expect_json '.model.vocab' "152064" "planned as qwen2.5-7b"
expect_contains "$ERR" "not in the Hugging Face cache ($HUB) and could not be fetched (\$HF_HUB_OFFLINE is set): using the preset qwen2.5-7b (instruct, chat and base variants share the architecture)" "a notice says so, and why the Hub was not asked (ctest sets HF_HUB_OFFLINE)"
expect_one_json "the notice stays off stdout"
vocab meta-llama/Llama-2-7b-chat-hf
expect_json '.model.vocab' "32000" "-chat-hf: llama-2-7b"
expect_contains "$ERR" "using the preset llama-2-7b" "names the preset"
vocab meta-llama/Meta-Llama-3.1-70B-Instruct
expect_json '.model.hidden' "8192" "Meta-Llama-3.1-70B-Instruct: llama-3.1-70b"
vocab google/gemma-2-9b-it
expect_json '.model.hidden' "3584" "-it: gemma-2-9b"
vocab google/gemma-3-4b-it
expect_json '[.model.hidden, .model.heads, .model.kv_heads] | @csv' "2560,8,4" "-it: gemma-3-4b, Gemma3TextConfig's heads"
vocab deepseek-ai/DeepSeek-R1-Distill-Llama-8B
expect_json '.model.vocab' "128256" "a Hub id that is a preset's name exactly"
expect_not_contains "$ERR" "variants share" "an exact name needs no word on variants"
vocab Qwen2.5-7B-Instruct
expect_rc 0 "a variant without the organisation"
expect_contains "$ERR" "using the preset qwen2.5-7b" "with a notice"

# nothing matches: the closest presets, of the same family first, then of the nearest size
vocab llama-3-8b
expect_rc 2 "an unknown preset"
expect_contains "$ERR" "closest presets: llama-3.1-8b," "llama-3-8b suggests llama-3.1-8b"
vocab meta-llama/Llama-3-70B
expect_rc 2 "a Hub id neither cached nor a preset"
expect_contains "$ERR" "is not in the Hugging Face cache ($HUB)" "says where it looked"
expect_contains "$ERR" "closest presets: llama-3.1-70b," "the same family and size first"
vocab qwen2.5-8b
expect_contains "$ERR" "closest presets: qwen2.5-7b, qwen2.5-14b," "nearest sizes in the family"
vocab nosuchmodel
expect_rc 2 "no family at all"
expect_contains "$ERR" "closest presets:" "still suggests"

finish
