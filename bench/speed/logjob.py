#!/usr/bin/env python3
"""logjob.py - a job that only logs: BYTES bytes of a training run's output, as a trainer writes
it (step lines, Hugging Face's metric dicts, tqdm bars redrawn with \\r, warnings, rank-tagged
lines, JSON records, a generated sample with 'CUDA out of memory' in its text), in 1 MiB writes,
to stdout, stderr or both (half each). Then exits with EXIT. Used by bench/speed/speed.py to
measure what relaying and scanning a job's output costs oomless run and probe.

    logjob.py BYTES [stdout|stderr|both] [EXIT]
"""

import os
import sys

LINES = [
    "step 1234/100000 | loss 2.3456 | lr 1.00e-04 | grad_norm 0.812 | tokens/s 12345.6\n",
    "{'loss': 2.3456, 'grad_norm': 0.8123, 'learning_rate': 9.87e-05, 'epoch': 0.12}\n",
    " 12%|\u2588\u258f        | 1234/10000 [01:23<09:45, 14.98it/s]\r",
    " 12%|\u2588\u258f        | 1235/10000 [01:23<09:45, 14.99it/s]\r",
    "/usr/lib/python3/dist-packages/torch/utils/checkpoint.py:91: UserWarning: None of the "
    "inputs have requires_grad=True. Gradients will be None\n",
    "[rank0]: step 1234 micro-batch 3/8 loss 2.3456 (avg 2.4012) mem 61.23 GiB\n",
    "[rank1]: step 1234 micro-batch 3/8 loss 2.3511 (avg 2.4090) mem 61.19 GiB\n",
    '{"time": 1700000000.123, "step": 1234, "loss": 2.3456, "throughput": 12345.6, '
    '"gpu_mem_gib": 61.2, "note": "ok"}\n',
    "INFO:trainer:Saving checkpoint to out/checkpoint-1234 (model, optimizer, scheduler)\n",
    "sample 17: Q: Why does my training stop with 'CUDA out of memory'? A: Lower the batch "
    "size, enable gradient checkpointing, or shard the optimizer states across GPUs; the "
    "activations of one micro-batch grow with the sequence length, so halving it helps too. "
    + "The quick brown fox jumps over the lazy dog. " * 8 + "\n",
    "Epoch 1:  37%|\u2588\u2588\u2588\u258b      | 3700/10000 [12:01<20:29, v_num=0, "
    "train_loss=2.35]\n",
]


def block():
    text, i = [], 0
    size = 0
    while size < 1 << 20:
        line = LINES[i % len(LINES)]
        text.append(line)
        size += len(line.encode())
        i += 1
    return "".join(text).encode()[: 1 << 20]


def main():
    total = int(sys.argv[1])
    where = sys.argv[2] if len(sys.argv) > 2 else "stdout"
    code = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    b = memoryview(block())
    fds = {"stdout": [1], "stderr": [2], "both": [1, 2]}[where]
    written, k = 0, 0
    while written < total:
        chunk = b[: min(len(b), total - written)]
        fd = fds[k % len(fds)]
        k += 1
        while chunk:
            n = os.write(fd, chunk)
            chunk = chunk[n:]
            written += n
    return code


if __name__ == "__main__":
    sys.exit(main())
