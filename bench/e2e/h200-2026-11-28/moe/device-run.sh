#!/bin/bash
# the two mixture-of-experts LoRA cases the first run's deadline left out, alone
set -u
cd "$(dirname "$0")/.." || exit 2
R=$PWD
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/whl/transformers-*.whl .gpu/whl/peft-*.whl 2>&1 | tail -3
export PYTHONPATH=/tmp/site OOMLESS_LIBRARY=$R/.gpu/lib/liboomless.so.1
export LD_LIBRARY_PATH=$R/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p /tmp/gpu3
timeout 170 python3 bench/accuracy/measure.py --bin "$R/.gpu/oomless" --out /tmp/gpu3 --jobs 2 \
    --mem-cap 135 --timeout 120 --only g52,g53 2>&1 | tee /tmp/gpu3/measure.log
cp /tmp/gpu3/* "$OUT/"
