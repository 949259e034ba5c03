r"""A plain PyTorch DDP loop that survives OOM in the loop (oomless.torch.TrainStep).

One GPU per rank with NCCL when CUDA is there, else gloo on the CPU (then nothing runs out of
memory: set OOM_ABOVE=N to inject an OOM above micro-batch N on the last rank, from step 3):

    PYTHONPATH=bindings/python torchrun --nproc-per-node 2 examples/python/ddp_recovery.py
    PYTHONPATH=bindings/python OOM_ABOVE=4 torchrun --nproc-per-node 2 \
        examples/python/ddp_recovery.py

Under `oomless run` (which relaunches it for what the loop cannot recover, such as an OOM in
optimizer.step) it takes the micro-batch from $OOMLESS_BATCH_SIZE and resumes from its checkpoint:

    oomless run --batch-size 16 --grad-accum 2 -- torchrun --nproc-per-node 8 ddp_recovery.py
"""
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

import oomless.torch

PER_STEP = 32            # samples per optimizer step and rank (the effective batch per rank)
STEPS = 20
CKPT = os.environ.get("CKPT", "ddp_recovery.pt")


def main():
    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, local = dist.get_rank(), int(os.environ.get("LOCAL_RANK", 0))
    device = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                              torch.nn.Linear(256, 10)).to(device)
    model = torch.nn.parallel.DistributedDataParallel(net, device_ids=[local] if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    start = 0
    if os.path.exists(CKPT):  # a relaunch resumes
        state = torch.load(CKPT, map_location=device, weights_only=False)
        net.load_state_dict(state["model"])
        opt.load_state_dict(state["optim"])
        start = state["step"]

    records = []
    step = oomless.torch.TrainStep(
        model, opt, micro_batch=int(os.environ.get("OOMLESS_BATCH_SIZE", PER_STEP // 2)),
        before_step=lambda m, o: torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0),
        on_limit=records.append)

    oom_above = int(os.environ.get("OOM_ABOVE", 0))
    world = dist.get_world_size()

    def loss_fn(m, mb):
        x, y = mb
        if oom_above and rank == world - 1 and x.shape[0] > oom_above and step.steps >= 3:
            raise torch.OutOfMemoryError("injected above micro-batch %d" % oom_above)
        return F.cross_entropy(m(x), y)

    g = torch.Generator().manual_seed(100 + rank)
    for i in range(start, STEPS):
        x = torch.randn(PER_STEP, 64, generator=g).to(device)
        y = torch.randint(0, 10, (PER_STEP,), generator=g).to(device)
        r = step.step((x, y), loss_fn)
        if rank == 0:
            print("step %d loss %.4f micro-batch %d x %d%s"
                  % (i + 1, float(r.loss), r.micro_batch, r.micro_batches,
                     " (re-run %d time(s) after an OOM)" % r.retries if r.retries else ""))
            torch.save({"model": net.state_dict(), "optim": opt.state_dict(), "step": i + 1},
                       CKPT + ".tmp")
            os.replace(CKPT + ".tmp", CKPT)
    if rank == 0 and records:
        print("limit found:", records[-1])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
