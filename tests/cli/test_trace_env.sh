#!/bin/bash
# test_trace_env.sh - `oomless trace` on a Python without torch: exit 2, and the message says how
# to install PyTorch's CPU build (plain `pip install torch` fetches gigabytes of CUDA packages);
# --help says the same. A torch.py that fails to import stands for a Python without torch.
. "$(dirname "$0")/lib.sh"
mkdir -p "$TMP/notorch"
echo 'raise ImportError("No module named torch")' >"$TMP/notorch/torch.py"
run env PYTHONPATH="$TMP/notorch" OOMLESS_PYTHON=python3 PYTHONDONTWRITEBYTECODE=1 \
    "$OOMLESS_BIN" trace --model gpt2 --batch 1 --seq 64
expect_rc 2 "trace without torch"
expect_contains "$ERR" "tracing needs the Python package 'torch', which is not installed" \
    "trace without torch: says what is missing"
expect_contains "$ERR" "-m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" \
    "trace without torch: the CPU build's command"
oom trace --help
expect_rc 0 "trace --help"
expect_contains "$(tr '\n' ' ' <<<"$OUT")" \
    "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" \
    "trace --help: how to get the CPU build"
finish
