#!/bin/bash
# the whole device run: packages the GPU machine lacks, then tests/gpu/run.sh; results in $OUT
set -u
cd "$(dirname "$0")/.." || exit 2
R=$PWD
T0=$(date +%s)
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/whl/*.whl 2>&1 | tail -3
cp -r .gpu/bnb/. /tmp/site/
export PYTHONPATH=/tmp/site
export OOMLESS_BIN=$R/.gpu/oomless OOMLESS_LIBRARY=$R/.gpu/lib/liboomless.so.1
export LD_LIBRARY_PATH=$R/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export MEASURE_CKPT_DIR=/tmp/measure-ckpt
echo "set-up: $(($(date +%s) - T0)) s"
python3 -c 'import transformers, peft, trl, bitsandbytes, torch; print("transformers", transformers.__version__, "peft", peft.__version__, "trl", trl.__version__, "bitsandbytes", bitsandbytes.__version__, "torch", torch.__version__)' 2>&1 | tail -2
GPU_BUDGET_S=${1:-500} tests/gpu/run.sh /tmp/gpu
rc=$?
echo "run.sh exit $rc after $(($(date +%s) - T0)) s"
cp /tmp/gpu/checks.txt /tmp/gpu/transcript.log "$OUT/" 2>/dev/null
tar -C /tmp -czf "$OUT/gpu.tar.gz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' \
    --exclude='*.pth' --exclude='gpu/cache' gpu
ls -la "$OUT"
cat /tmp/gpu/checks.txt
