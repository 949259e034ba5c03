#!/bin/bash
# test_nvml.sh - `oomless gpus` when NVML is broken: the library file missing, not a library,
# truncated, a directory; a required symbol missing; only the v1 symbols; init failing with
# known and unknown codes; no GPU; a GPU lost before or during the session. Each time: no crash,
# exit 0 with the default profile and the reason (or the GPUs that still answer), one JSON
# document with --json.
. "$OOMLESS_SRC/tests/cli/lib.sh"
unset CUDA_VISIBLE_DEVICES OOMLESS_GPU GPU_PROFILE
FAKE_DIR=$(dirname "$FAKE_NVML_LIB")

TWO='driver 550.54.15
gpu name="NVIDIA GeForce RTX 4090" uuid=GPU-4090aaaa-1111 total=25757220864 used=1073741824 cc=8.9
gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-a100bbbb-2222 total=85899345920 used=0 cc=8.0'

# expect_fallback WHAT REASON: the last `oom gpus --json` fell back to the default profile
expect_fallback() {
    expect_rc 0 "$1: exit 0"
    expect_one_json "$1"
    expect_json '.gpus | length' 0 "$1: no GPUs"
    expect_json '.target.fallback' true "$1: fallback"
    expect_json '.target.profile' rtx-4090 "$1: default profile"
    expect_json '.budget.usable_bytes' 24683479040 "$1: budget of the default profile"
    expect_contains "$(printf '%s' "$OUT" | jq -r .target.reason)" "$2" "$1: reason"
}

# ---- the library file -------------------------------------------------------------------
head -c 200 "$FAKE_NVML_LIB" >"$TMP/truncated.so"
printf 'not a library\n' >"$TMP/text.so"
: >"$TMP/empty.so"
mkdir "$TMP/dir.so"
for lib in /nonexistent/libnvidia-ml.so.1 "$TMP/truncated.so" "$TMP/text.so" "$TMP/empty.so" \
    "$TMP/dir.so"; do
    export OOMLESS_NVML_LIBRARY=$lib
    oom gpus --json
    expect_fallback "library $lib" "NVML not available: $lib"
    oom gpus
    expect_rc 0 "library $lib: human output"
    expect_contains "$ERR" "no GPU found (NVML not available" "library $lib: notice"
    expect_contains "$OUT" "Usable VRAM:   22.99 GiB" "library $lib: budget"
done

# ---- symbols ------------------------------------------------------------------------------
fake_nvml "$TWO"
export OOMLESS_NVML_LIBRARY="$FAKE_DIR/no_name/libnvidia-ml.so.1"
oom gpus --json
expect_fallback "required symbol missing" "NVML symbol nvmlDeviceGetName missing"
# a profile asked for by name does not need NVML at all
oom gpus --gpu a100-80gb --json
expect_rc 0 "missing symbol, --gpu profile"
expect_json '.target.profile' a100-80gb "missing symbol, --gpu profile"
# a GPU index does: refused, with the reason
oom gpus --gpu 0
expect_rc 3 "missing symbol, --gpu 0: an environment error"
expect_contains "$ERR" "nvmlDeviceGetName" "missing symbol, --gpu 0: reason"

export OOMLESS_NVML_LIBRARY="$FAKE_DIR/minimal/libnvidia-ml.so.1"
oom gpus --json
expect_rc 0 "v1 symbols only"
expect_json '.gpus | length' 2 "v1 only: both GPUs"
expect_json '.gpus[1].total_bytes' 85899345920 "v1 only: memory from nvmlDeviceGetMemoryInfo"
expect_json '.gpus[0].uuid' null "v1 only: no UUID call, null"
expect_json '.gpus[0].compute_capability' null "v1 only: cc unknown, null"
expect_json '.driver_version' null "v1 only: driver unknown"
expect_json '.target.profile' rtx-4090 "v1 only: matched by name"
# CUDA_VISIBLE_DEVICES by UUID needs the UUIDs: unknown ones match nothing
CUDA_VISIBLE_DEVICES=GPU-a100 oom gpus --json
expect_json '.gpus | length' 0 "v1 only: CVD by UUID selects none"
CUDA_VISIBLE_DEVICES=1 oom gpus --json
expect_json '.gpus[0].name' "NVIDIA A100-SXM4-80GB" "v1 only: CVD by index"

# ---- init ----------------------------------------------------------------------------------
for code in 1 9 12 999; do
    fake_nvml "init_error $code"
    oom gpus --json
    expect_fallback "init error $code" "NVML init failed:"
    expect_contains "$(printf '%s' "$OUT" | jq -r .target.reason)" "(error $code)" "init $code: code"
done
fake_nvml "init_error 9"
oom gpus --gpu 1
expect_rc 3 "init failed, --gpu 1: an environment error"
expect_contains "$ERR" "Driver Not Loaded" "init failed, --gpu 1: reason"

# no GPU at all
fake_nvml "driver 550.54.15"
oom gpus --json
expect_fallback "no GPU" "no GPU visible"

# ---- a GPU lost ---------------------------------------------------------------------------
# lost from the start: listed as lost, sizes null, not counted; the other one is planned for
fake_nvml 'gpu name="NVIDIA GeForce RTX 4090" uuid=GPU-a total=25757220864 used=0 lost_after=0
gpu name="NVIDIA A100-SXM4-80GB" uuid=GPU-b total=85899345920 used=0'
oom gpus --json
expect_rc 0 "lost GPU: exit 0"
expect_one_json "lost GPU"
expect_json '.gpus | length' 2 "lost GPU still listed"
expect_json '.gpus[0].lost' true "lost flag"
expect_json '.gpus[0].total_bytes' null "lost GPU: total unknown"
expect_json '.gpus[0].free_bytes' null "lost GPU: free unknown"
expect_json '.total_bytes' 85899345920 "lost GPU not in the total"
expect_json '.mixed' false "one GPU answering: not mixed"
expect_json '.budget.target_bytes' 85899345920 "budget of the GPU that answers"
expect_json '.target.gpu_count' 1 "one GPU counted"
oom gpus
expect_rc 0 "lost GPU: human"
expect_contains "$OUT" "GPU 0: (lost" "lost GPU shown"
oom gpus --gpu 0
expect_rc 2 "--gpu of a lost GPU"
expect_contains "$ERR" "'0'" "names the index"
oom gpus --gpu 1 --json
expect_rc 0 "--gpu of the other GPU"
expect_json '.budget.target_bytes' 85899345920 "--gpu 1 budget"

# every GPU lost: both listed as lost, the default profile planned for
fake_nvml 'gpu name=X uuid=GPU-a total=25757220864 used=0 lost_after=0
gpu name=Y uuid=GPU-b total=85899345920 used=0 lost_after=0'
oom gpus --json
expect_rc 0 "all GPUs lost: exit 0"
expect_one_json "all GPUs lost"
expect_json '[.gpus[].lost] | join(",")' "true,true" "all GPUs lost: listed as lost"
expect_json '.total_bytes' 0 "all GPUs lost: nothing counted"
expect_json '.target.fallback' true "all GPUs lost: fallback"
expect_json '.target.profile' rtx-4090 "all GPUs lost: default profile"
expect_contains "$(printf '%s' "$OUT" | jq -r .target.reason)" "no GPU visible" "all lost: reason"
oom gpus --gpu 0
expect_rc 3 "all GPUs lost: --gpu 0: no GPU, an environment error"
# (a GPU lost between two samples of one session: tests/unit/test_gpu.c, test_nvml_variants;
# lost mid-run under `watch`: tests/cli/test_watch.sh)

# ---- watch needs NVML: a broken one is an environment error naming the cause, stdout empty ----
fake_nvml "$TWO"
for lib in "$FAKE_DIR/no_name/libnvidia-ml.so.1" "$TMP/truncated.so" "$TMP/dir.so"; do
    export OOMLESS_NVML_LIBRARY=$lib
    oom watch --once --json
    expect_rc 3 "watch with $lib"
    expect_eq "$OUT" "" "watch with $lib: nothing on stdout"
    expect_contains "$ERR" "$lib" "watch with $lib: names the library"
done
fake_nvml "init_error 9"
oom watch --once
expect_rc 3 "watch, init failing"
expect_contains "$ERR" "Driver Not Loaded (error 9)" "watch, init failing: NVML's reason"
fake_nvml "$TWO"
export OOMLESS_NVML_LIBRARY="$FAKE_DIR/minimal/libnvidia-ml.so.1"
oom watch --once --json
expect_rc 0 "watch with v1 symbols only"
expect_json '[.gpus[].lost] | join(",")' "false,false" "watch, v1 only: both GPUs answer"
finish
