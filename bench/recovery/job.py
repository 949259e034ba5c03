"""The small training job of the recovery bench (bench/recovery/README.md).

A 2-layer Transformer encoder (d_model 256, 4 heads, sequences of 64) regressing a target, AdamW,
a per-step batch of 32 per rank, `--steps` steps, a checkpoint (model + optimizer + step) after
every step. The micro-batch and accumulation come from $OOMLESS_BATCH_SIZE / $OOMLESS_GRAD_ACCUM
(as `oomless run` sets them). From step `--oom-step` on, the last rank raises
torch.OutOfMemoryError in the backward of any micro-batch above `--oom-above` (an injected OOM:
there is no GPU on the bench machine).

--mode inloop: the step runs through oomless.torch.TrainStep, which recovers in the loop.
--mode relaunch: a plain accumulation loop; the OOM kills the job, `oomless run` relaunches it at
a smaller micro-batch and the new process rebuilds the model and resumes from the checkpoint.

Rank 0 appends one JSON line per completed step to `--timeline`: {"step", "t" (unix time), "micro",
"pid"}, and {"event": "start", "t"} when the process starts (before importing torch).
"""
import time

T_START = time.time()

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
from oomless.torch import TrainStep  # noqa: E402

BATCH, SEQ, DIM = 32, 64, 256


def log(path, doc):
    with open(path, "a") as f:
        f.write(json.dumps(doc) + "\n")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("inloop", "relaunch"), required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--oom-step", type=int, default=6)
    p.add_argument("--oom-above", type=int, default=8)
    p.add_argument("--ckpt", required=True)
    p.add_argument("--timeline", required=True)
    a = p.parse_args()
    micro = int(os.environ.get("OOMLESS_BATCH_SIZE", "16"))
    torch.set_num_threads(1)

    distributed = "RANK" in os.environ
    if distributed:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if distributed else 0
    world = dist.get_world_size() if distributed else 1
    if rank == 0:
        log(a.timeline, {"event": "start", "t": T_START, "pid": os.getpid(), "micro": micro})

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(DIM, 4, dim_feedforward=4 * DIM, dropout=0.0,
                                             batch_first=True)
    net = torch.nn.Sequential(torch.nn.TransformerEncoder(layer, 2), torch.nn.Linear(DIM, 1))
    model = torch.nn.parallel.DistributedDataParallel(net) if distributed else net
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    start = 1
    if os.path.exists(a.ckpt):
        state = torch.load(a.ckpt, weights_only=False)
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = state["step"] + 1

    g = torch.Generator().manual_seed(rank)
    data = [(torch.randn(BATCH, SEQ, DIM, generator=g), torch.randn(BATCH, SEQ, 1, generator=g))
            for _ in range(a.steps)]
    step_no = [start]

    def loss_fn(m, mb):
        x, y = mb
        out = m(x)
        if rank == world - 1 and step_no[0] >= a.oom_step and x.shape[0] > a.oom_above:
            def hook(grad):
                raise torch.OutOfMemoryError("injected: micro-batch %d above %d"
                                             % (x.shape[0], a.oom_above))
            out.register_hook(hook)
        return torch.nn.functional.mse_loss(out, y)

    stepper = TrainStep(model, opt, micro) if a.mode == "inloop" else None
    for i in range(start, a.steps + 1):
        step_no[0] = i
        batch = data[i - 1]
        if stepper is not None:
            r = stepper.step(batch, loss_fn)
            used = r.micro_batch
        else:
            opt.zero_grad(set_to_none=True)
            n = BATCH // micro
            for k in range(n):
                mb = (batch[0][k * micro:(k + 1) * micro], batch[1][k * micro:(k + 1) * micro])
                ctx = model.no_sync() if distributed and k < n - 1 else contextlib.nullcontext()
                with ctx:
                    (loss_fn(model, mb) / n).backward()
            opt.step()
            used = micro
        if rank == 0:
            tmp = a.ckpt + ".tmp"
            torch.save({"model": net.state_dict(), "optim": opt.state_dict(), "step": i}, tmp)
            os.replace(tmp, a.ckpt)
            log(a.timeline, {"step": i, "t": time.time(), "micro": used, "pid": os.getpid()})
        if distributed:
            dist.barrier()  # the checkpoint is on disk before any rank goes on
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
