#!/usr/bin/env bash
# tests/gpu/run.sh - every check that needs a real NVIDIA GPU, in one command. Never run by CI or
# `make check` (no GPU there); whoever has a GPU reruns it with:
#
#   make && tests/gpu/run.sh [OUTDIR]
#
# It runs: oomless gpus against nvidia-smi; oomless watch while a PyTorch process holds 10 GiB
# (pid and bytes against nvidia-smi --query-compute-apps); oomless probe on bench/e2e/train.py (a
# GPT-2 trained on synthetic tokens) as if the card had GPU_VRAM_GIB; the recommended batch run
# longer under `oomless watch --log` (no OOM, at least 85 % of the usable budget); oomless run
# from a too-large batch through a sequence-length spike (same effective batch, resumed from the
# checkpoint); Lightning's batch-size finder on the same model; in-loop recovery under real
# CUDA (bench/e2e/inloop_cuda.py: oomless.torch.TrainStep) and the Hugging Face Trainer under
# `oomless run` (bench/e2e/hf_cuda.py); and, beside all of those from the start (every counter
# is per process; their caps keep them apart), the accuracy cases (bench/accuracy/measure.py)
# with the experts path CUDA takes for the mixture-of-experts ones. Everything is written to
# OUTDIR (default build/gpu-results): transcript.log (each command and its output), the JSON/CSV
# each step made, and checks.txt, one PASS/FAIL line per check; the exit status is the number
# of failed checks (77: no GPU, skipped).
#
# Environment: OOMLESS_BIN (default build/oomless), OOMLESS_LIBRARY (default build/liboomless.so.1,
# for the Python package), PYTHON (python3), GPU_VRAM_GIB (24: the card
# size probe and run plan for; PyTorch is capped to it with set_per_process_memory_fraction so
# the OOMs are real ones), GPU_BUDGET_S (seconds for the whole script, default 560: steps that
# would start past it are skipped and said so), MEASURE_CAP_GIB (GiB the accuracy cases share:
# default the card less 44 GiB, what the capped checks beside them use), MEASURE_JOBS (10),
# GPU_STEPS (a comma-separated subset of gpus,watch,accuracy,probe,verify,run,lightning,inloop,
# hf to rerun; default all; verify and run need probe).
set -u
cd "$(dirname "$0")/../.." || exit 2
OUT=${1:-$PWD/build/gpu-results}
BIN=${OOMLESS_BIN:-$PWD/build/oomless}
PY=${PYTHON:-python3}
VR=${GPU_VRAM_GIB:-24}
BUDGET=${GPU_BUDGET_S:-560}
export OOMLESS_DATA_DIR=${OOMLESS_DATA_DIR:-$PWD/data} PYTHONUNBUFFERED=1
# the Python package (measure.py builds models through oomless.trace) loads liboomless
if [ -z "${OOMLESS_LIBRARY:-}" ] && [ -e "$PWD/build/liboomless.so.1" ]; then
    export OOMLESS_LIBRARY=$PWD/build/liboomless.so.1
fi
export XDG_CACHE_HOME=$OUT/cache XDG_CONFIG_HOME=$OUT/config

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "tests/gpu/run.sh: no NVIDIA GPU here (nvidia-smi -L failed): skipped"
    exit 77
fi
mkdir -p "$OUT" || exit 2
LOG=$OUT/transcript.log CHECKS=$OUT/checks.txt
: >"$CHECKS"
T0=$(date +%s)
elapsed() { echo $(($(date +%s) - T0)); }
left() { echo $((BUDGET - $(elapsed))); }
note() { printf '\n# %s  [%s s]\n' "$*" "$(elapsed)" | tee -a "$LOG"; }
# step TIMEOUT CMD...: the command and all it prints go to the transcript
step() {
    local t=$1
    shift
    printf '$ %s\n' "$*" >>"$LOG"
    timeout "$t" "$@" >>"$LOG" 2>&1
    local rc=$?
    printf '[exit %d, %d s]\n' "$rc" "$(elapsed)" >>"$LOG"
    return $rc
}
# stepto FILE TIMEOUT CMD...: stdout to FILE (and the transcript), stderr to the transcript
stepto() {
    local f=$1 t=$2
    shift 2
    printf '$ %s > %s\n' "$*" "$(basename "$f")" >>"$LOG"
    timeout "$t" "$@" >"$f" 2>>"$LOG"
    local rc=$?
    cat "$f" >>"$LOG"
    printf '[exit %d, %d s]\n' "$rc" "$(elapsed)" >>"$LOG"
    return $rc
}
check() { # check NAME CMD...: PASS/FAIL line with the command's one-line explanation
    local name=$1 out rc
    shift
    out=$("$@" 2>&1)
    rc=$?
    if [ $rc = 0 ]; then echo "PASS $name: ${out##*$'\n'}"; else echo "FAIL $name: ${out##*$'\n'}"; fi |
        tee -a "$CHECKS" | tee -a "$LOG"
}
want() { [ -z "${GPU_STEPS:-}" ] || [[ ",$GPU_STEPS," == *",$1,"* ]]; }
have_time() { # have_time SECONDS WHAT
    if [ "$(left)" -lt "$1" ]; then
        echo "SKIP $2: $(left) s left of the ${BUDGET} s budget, it needs about $1" |
            tee -a "$CHECKS" | tee -a "$LOG"
        return 1
    fi
}

note "environment"
step 20 date -u
step 20 nvidia-smi
step 20 nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv
step 60 "$PY" -c 'import torch, transformers, sys; import importlib
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", transformers.__version__)
for m in ("peft", "lightning", "accelerate", "pynvml"):
    try: print(m, getattr(importlib.import_module(m), "__version__", "?"))
    except Exception as e: print(m, "missing:", e)
print(torch.cuda.get_device_name(0), torch.cuda.get_device_properties(0).total_memory)'
step 10 "$BIN" --version

if want gpus; then
    note "oomless gpus against nvidia-smi"
    step 20 "$BIN" gpus
    stepto "$OUT/gpus.json" 20 "$BIN" gpus --json
    stepto "$OUT/smi_gpus.csv" 20 nvidia-smi --query-gpu=index,name,memory.total,memory.used \
        --format=csv,noheader,nounits
    check gpus "$PY" tests/gpu/check.py gpus "$OUT/gpus.json" "$OUT/smi_gpus.csv"
fi

if want watch; then
    note "oomless watch while a PyTorch process holds 10 GiB"
    "$PY" -c 'import torch, time
x = torch.empty(10 * 2**30, dtype=torch.uint8, device="cuda"); x.fill_(1); torch.cuda.synchronize()
print("holding", flush=True); time.sleep(40)' >"$OUT/holder.out" 2>&1 &
    HOLDER=$!
    for _ in $(seq 60); do grep -q holding "$OUT/holder.out" 2>/dev/null && break; sleep 0.5; done
    sleep 1
    stepto "$OUT/watch_once.json" 20 "$BIN" watch --once --json
    stepto "$OUT/smi_apps.csv" 20 nvidia-smi --query-compute-apps=pid,used_memory \
        --format=csv,noheader,nounits
    check watch_pid_bytes "$PY" tests/gpu/check.py watch "$OUT/watch_once.json" "$OUT/smi_apps.csv" "$HOLDER"
    step 20 "$BIN" watch --once
    step 20 "$BIN" gpus
    step 20 "$BIN" plan --model gpt2 --method full --seq 512
    kill "$HOLDER" 2>/dev/null
    wait "$HOLDER" 2>/dev/null
fi

# the accuracy cases run beside every check below, from now on (the checks above read the whole
# card's memory, those below only their own processes')
MEASURE=
if want accuracy && have_time 150 accuracy; then
    note "the accuracy cases (bench/accuracy/measure.py), in the background: measure.log"
    CAP=${MEASURE_CAP_GIB:-$("$PY" -c "import torch; print(int(torch.cuda.get_device_properties(0).total_memory / 2**30) - 44)" 2>>"$LOG")}
    # launches stop 150 s before the end: a case takes at most 120 s
    OMP_NUM_THREADS=4 timeout $(($(left) - 10)) "$PY" bench/accuracy/measure.py --bin "$BIN" \
        --out "$OUT" --jobs "${MEASURE_JOBS:-10}" --mem-cap "${CAP:-60}" --deadline $(($(left) - 150)) \
        --timeout 120 >"$OUT/measure.log" 2>&1 &
    MEASURE=$!
fi

FRAC=$("$PY" -c "import torch; print(round($VR * 2**30 / torch.cuda.get_device_properties(0).total_memory, 4))" 2>>"$LOG")
FRAC=${FRAC:-0.3}
note "oomless probe on bench/e2e/train.py as if the card had $VR GiB (PyTorch capped to $FRAC of it in the runs below)"
REC=0
if want probe && have_time 150 probe; then
    stepto "$OUT/probe.json" 240 "$BIN" probe --json --vram "$VR" --calibration "$OUT/calibration.jsonl" \
        --model gpt2 --set precision=amp-bf16 --set seq=512 --trial-timeout 120 -- \
        "$PY" bench/e2e/train.py --batch-size '{batch}' --steps 3 --seq 512
    REC=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["recommended_batch"] or 0)' \
        "$OUT/probe.json" 2>/dev/null || echo 0)
    check probe_found "$PY" tests/gpu/check.py probe "$OUT/probe.json"
fi

if want verify && [ "$REC" -gt 0 ] && have_time 120 verify; then
    note "the recommended batch $REC for 12 steps, memory logged by oomless watch"
    "$BIN" watch --interval 0.1 --count 3000 --log "$OUT/watch_train.csv" >/dev/null 2>>"$LOG" &
    WATCH=$!
    step 200 "$PY" bench/e2e/train.py --batch-size "$REC" --steps 12 --seq 512 --stats "$OUT/verify.json"
    VRC=$?
    kill "$WATCH" 2>/dev/null
    wait "$WATCH" 2>/dev/null
    check verify_no_oom test "$VRC" = 0
    check verify_uses_budget "$PY" tests/gpu/check.py verify "$OUT/watch_train.csv" "$OUT/probe.json"
    step 20 "$BIN" watch --count 20 --interval 0.1 --log "$OUT/watch_idle.csv"
fi

if want run && [ "$REC" -gt 0 ] && have_time 150 run; then
    note "oomless run from batch $((REC * 2)) (too large), a spike to 1024 tokens at step 4"
    rm -rf "$OUT/ck"
    stepto "$OUT/run.json" 300 "$BIN" run --json --vram "$VR" --batch-size $((REC * 2)) --grad-accum 1 \
        --events "$OUT/events.jsonl" -- "$PY" bench/e2e/train.py --batch-size '{batch}' \
        --grad-accum '{accum}' --steps 6 --seq 512 --spike-step 4 --spike-seq 1024 \
        --checkpoint "$OUT/ck" --memory-fraction "$FRAC"
    check run_recovers "$PY" tests/gpu/check.py run "$OUT/run.json" "$OUT/events.jsonl" "$LOG" $((REC * 2))
    rm -rf "$OUT/ck"
fi

if want lightning && have_time 80 lightning; then
    note "Lightning's BatchSizeFinder (binsearch) on the same model, PyTorch capped to $FRAC"
    stepto "$OUT/bsf.json" $(($(left) - 3)) "$PY" bench/e2e/lightning_bsf.py --seq 512 \
        --memory-fraction "$FRAC"
fi

if want inloop && have_time 100 inloop; then
    note "in-loop recovery under real CUDA (oomless.torch.TrainStep, a real OOM under a cap)"
    stepto "$OUT/inloop.txt" 100 "$PY" bench/e2e/inloop_cuda.py --out "$OUT/inloop.json"
    grep -E '^(PASS|FAIL)' "$OUT/inloop.txt" | tee -a "$CHECKS" >/dev/null
fi

if want hf && have_time 110 hf; then
    note "the Hugging Face Trainer under oomless run, a real OOM under a cap"
    rm -rf "$OUT/hf"
    stepto "$OUT/hf.txt" 110 "$PY" bench/e2e/hf_cuda.py --drive "$BIN" --out "$OUT/hf"
    grep -E '^(PASS|FAIL)' "$OUT/hf.txt" | tee -a "$CHECKS" >/dev/null
fi

if [ -n "$MEASURE" ]; then
    note "waiting for the accuracy cases"
    wait "$MEASURE"
    cat "$OUT/measure.log" >>"$LOG"
    check accuracy_cases "$PY" tests/gpu/check.py accuracy "$OUT"
    check experts_path "$PY" tests/gpu/check.py experts "$OUT"
fi

note "done"
cat "$CHECKS"
exit "$(grep -c '^FAIL' "$CHECKS")"
