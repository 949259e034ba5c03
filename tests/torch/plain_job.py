"""A plain DDP training script (no oomless.torch) for the two-node tests of `oomless run`.

    plain_job.py OUT [--oom-above N] [--steps S] [--from-step K]

Reads its micro-batch and accumulation from OOMLESS_BATCH_SIZE / OOMLESS_GRAD_ACCUM (as
`oomless run` exports them), trains a tiny linear model with DDP on gloo (CPU) for S optimizer
steps and prints "step N". With --oom-above N, and OOMLESS_TEST_OOM=1 in its environment (the
process of one "node" only), every micro-batch above N samples raises torch.OutOfMemoryError
from step K on, as the caching allocator would, and the process dies of it: nothing catches
it. Rank R appends one JSON line per launch to OUT/rank<R>.jsonl: {"batch", "grad_accum",
"attempt", "steps", "finished"}.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import end_distributed  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--oom-above", type=int, default=0)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--from-step", type=int, default=2)
    a = ap.parse_args()
    batch = int(os.environ["OOMLESS_BATCH_SIZE"])
    accum = int(os.environ["OOMLESS_GRAD_ACCUM"])
    fails = os.environ.get("OOMLESS_TEST_OOM") == "1" and a.oom_above > 0
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    record = {"batch": batch, "grad_accum": accum, "attempt": os.environ.get("OOMLESS_ATTEMPT"),
              "steps": 0, "finished": False}
    path = os.path.join(a.out, "rank%d.jsonl" % rank)
    for step in range(1, a.steps + 1):
        print("step %d" % step, flush=True)
        for _ in range(accum):
            x = torch.randn(batch, 8)
            if fails and step >= a.from_step and batch > a.oom_above:
                raise torch.OutOfMemoryError(
                    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
                    "of 23.55 GiB of which 1.00 GiB is free. Injected: micro-batch %d above %d"
                    % (batch, a.oom_above))
            model(x).pow(2).mean().div(accum).backward()
        opt.step()
        opt.zero_grad()
        record["steps"] = step
    record["finished"] = True
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")
    del model
    end_distributed()


if __name__ == "__main__":
    main()
