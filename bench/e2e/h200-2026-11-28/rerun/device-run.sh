#!/bin/bash
# the rerun of probe, verify and run with the probe's fix, beside a neighbour that takes 60 GiB
set -u
cd "$(dirname "$0")/.." || exit 2
R=$PWD
export PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/whl/transformers-*.whl .gpu/whl/peft-*.whl 2>&1 | tail -3
export PYTHONPATH=/tmp/site OOMLESS_BIN=$R/.gpu/oomless OOMLESS_LIBRARY=$R/.gpu/lib/liboomless.so.1
export LD_LIBRARY_PATH=$R/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
mkdir -p /tmp/gpu2
python3 -c 'import torch, time
time.sleep(45)
x = torch.empty(60 * 2**30, dtype=torch.uint8, device="cuda"); x.fill_(1); torch.cuda.synchronize()
print("neighbour holds 60 GiB from", time.strftime("%H:%M:%S"), flush=True); time.sleep(100)
print("neighbour done", time.strftime("%H:%M:%S"), flush=True)' >/tmp/gpu2/neighbour.out 2>&1 &
GPU_STEPS=probe,verify,run GPU_BUDGET_S=${1:-300} tests/gpu/run.sh /tmp/gpu2
echo "run.sh exit $?"
cp /tmp/gpu2/checks.txt /tmp/gpu2/transcript.log "$OUT/" 2>/dev/null
tar -C /tmp -czf "$OUT/gpu2.tar.gz" --exclude='*.safetensors' --exclude='*.pt' --exclude='*.bin' \
    --exclude='*.pth' --exclude='gpu2/cache' gpu2
cat /tmp/gpu2/neighbour.out /tmp/gpu2/checks.txt
