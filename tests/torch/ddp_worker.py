"""One rank of the DDP recovery tests (started by torchrun; gloo on CPU).

Runs the named scenarios one after the other in the same process group and writes, per scenario
and rank, the final parameters and what each step did to OUT/<scenario>.rank<R>.pt.

The device memory is simulated: every micro-batch of n samples needs FIXED + PER * n / 2 in its
forward and FIXED + PER * n in its backward (a tensor hook), and a rank whose capacity is below
that raises torch.OutOfMemoryError there, as the caching allocator would. The same object is the
measurement TrainStep reads (peaks, the memory held, the capacity).

    torchrun --nproc-per-node 2 ddp_worker.py OUT forward backward halving ref2 ref3 ref4
"""
import gc
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "bindings", "python"))
from oomless.torch import TrainStep  # noqa: E402

MIB = 1 << 20
FIXED, PER = 100 * MIB, 10 * MIB
BATCH, STEPS = 12, 4
BIG = 10 ** 6 * MIB

# name -> (first micro-batch, who fails, from which step, capacity there)
# who: a rank number, or "node": the process started with OOMLESS_TEST_FAIL=1
SCENARIOS = {
    # forward needs 130 MiB at 6 > 125: OOM in the forward; the measured line gives 2 at once
    # (halving would try 3, whose backward needs 130 MiB)
    "forward": (6, 1, 2, 125 * MIB),
    # the forward fits (130 MiB), the backward needs 160 > 145: the line gives 4 (halving: 3)
    "backward": (6, 1, 2, 145 * MIB),
    # nothing measured before the first step fails at 12 (rank 0): halve to 6, which fails again
    # in its backward, then 3
    "halving": (12, 0, 1, 145 * MIB),
    "node": (6, "node", 2, 145 * MIB),
    "ref2": (2, None, 0, BIG),
    "ref3": (3, None, 0, BIG),
    "ref4": (4, None, 0, BIG),
}


class SimMemory:
    """The simulated allocator of one rank (see the module documentation)."""

    def __init__(self):
        self.cap = BIG
        self.top = FIXED

    def need(self, nbytes):
        if nbytes > self.cap:
            raise torch.OutOfMemoryError("simulated: tried to hold %d MiB of %d MiB"
                                         % (nbytes // MIB, self.cap // MIB))
        self.top = max(self.top, nbytes)

    def reset(self):
        self.top = FIXED

    def peak(self):
        return self.top

    def current(self):
        return FIXED

    def capacity(self):
        return self.cap


class Gate(torch.nn.Module):
    """Asks the simulated allocator for the micro-batch's memory in forward and in backward."""

    def __init__(self, mem):
        super().__init__()
        self.mem = mem

    def forward(self, x):
        n = x.shape[0]
        self.mem.need(FIXED + PER * n // 2)
        if x.requires_grad:
            def backward_hook(grad):
                self.mem.need(FIXED + PER * n)
            x.register_hook(backward_hook)
        return x


class Net(torch.nn.Module):
    def __init__(self, mem):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.gate = Gate(mem)
        self.b = torch.nn.Linear(16, 1)
        self.register_buffer("shift", torch.full((16,), 0.25))

    def forward(self, x):
        return self.b(torch.tanh(self.gate(self.a(x)) + self.shift))


def data():
    g = torch.Generator().manual_seed(1234 + dist.get_rank())
    return [(torch.randn(BATCH, 8, generator=g), torch.randn(BATCH, 1, generator=g))
            for _ in range(STEPS)]


def run(name, out):
    micro, who, from_step, cap = SCENARIOS[name]
    rank = dist.get_rank()
    fails = who == rank or (who == "node" and os.environ.get("OOMLESS_TEST_FAIL") == "1")
    mem = SimMemory()
    torch.manual_seed(0)
    net = Net(mem)
    model = torch.nn.parallel.DistributedDataParallel(net)
    # buffers that drifted apart after DDP's initial broadcast (as local statistics do): DDP's
    # semantics are rank 0's values at every step
    with torch.no_grad():
        net.shift.fill_(0.25 + rank)
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    events, records = [], []
    step = TrainStep(model, opt, micro, memory=mem, headroom=0.0, on_event=events.append,
                     on_limit=records.append)

    def loss_fn(m, mb):
        return torch.nn.functional.mse_loss(m(mb[0]), mb[1])

    steps = []
    for i, batch in enumerate(data(), 1):
        mem.cap = cap if fails and i >= from_step else BIG
        r = step.step(batch, loss_fn)
        steps.append({"micro_batch": r.micro_batch, "micro_batches": r.micro_batches,
                      "retries": r.retries, "exact": r.exact, "loss": float(r.loss)})
    torch.save({"params": {k: v.detach().clone() for k, v in net.state_dict().items()},
                "steps": steps, "records": records, "events": events, "rank": rank,
                "fails": fails},
               os.path.join(out, "%s.rank%d.pt" % (name, rank)))


def main():
    out, names = sys.argv[1], sys.argv[2:]
    dist.init_process_group("gloo")
    try:
        for name in names:
            run(name, out)
            gc.collect()  # the scenario's DDP reducer goes before the process group
        dist.barrier()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
