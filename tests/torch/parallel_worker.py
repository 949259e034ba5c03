"""One rank of the parallel memory reference (started by torchrun; gloo on the CPU).

    torchrun --nproc-per-node N parallel_worker.py OUT RUN [RUN ...]

Each RUN lays the model of parallel_model.py out over the N ranks and trains two steps (AdamW,
foreach, bf16 weights); the second is measured with torch's MemTracker
(torch.distributed._tools.mem_tracker), a dispatch mode that follows every tensor storage an
operator makes, by category (parameters, gradients, optimizer states, activations, temporaries).
On the CPU, whose allocator keeps no cache, the bytes of the live storages are the bytes
allocated. The runs:

    tp:T[:sp][:ac]             a dense model, tensor parallel over T ranks, SequenceParallel or not
    pp:P:1f1b:M[:ac]           a dense model in P stages, Schedule1F1B over M micro-batches
    pp:P:interleaved:V:M       ... V stages per rank, ScheduleInterleaved1F1B
    ep:E                       the mixture-of-experts model, its experts over E ranks (all-to-all)

ac: every block checkpointed as torchtitan's full activation checkpointing wraps it
(checkpoint_wrapper, non-reentrant, no RNG state kept).

Rank 0 writes OUT (JSON): per run and rank the bytes of the parameters, of the gradients before
the step and of the optimizer states after it, the MemTracker snapshots at the end of the forward
(tp, ep), before the step and at the peak, and the run's shapes."""
import functools
import json
import os
import sys
import weakref

import torch
import torch.distributed as dist
import torch.utils._pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from parallel_model import Decoder, apply_tp, loss_fn, stage_model  # noqa: E402

DTYPE = torch.bfloat16
DENSE = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 256,
         "intermediate_size": 704, "num_hidden_layers": 4, "num_attention_heads": 8,
         "num_key_value_heads": 4, "vocab_size": 2048, "max_position_embeddings": 1024,
         "tie_word_embeddings": False, "rms_norm_eps": 1e-6, "hidden_act": "silu"}
MOE = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 256,
       "intermediate_size": 352, "num_hidden_layers": 2, "num_attention_heads": 8,
       "num_key_value_heads": 4, "vocab_size": 2048, "max_position_embeddings": 1024,
       "num_local_experts": 4, "num_experts_per_tok": 2, "tie_word_embeddings": False,
       "rms_norm_eps": 1e-6, "hidden_act": "silu"}
BATCH, SEQ = 2, 256  # the micro-batch of every run


def flat(snapshot):
    """{category: bytes} summed over devices (all on the CPU here)"""
    out = {}
    for per_dev in snapshot.values():
        for k, v in per_dev.items():
            out[str(k).split(".")[-1]] = out.get(str(k).split(".")[-1], 0) + v
    return out


def local(t):
    return t.to_local() if hasattr(t, "to_local") else t


def nbytes(tensors):
    seen, total = set(), 0
    for t in tensors:
        st = local(t).untyped_storage()
        if st.data_ptr() not in seen:
            seen.add(st.data_ptr())
            total += st.nbytes()
    return total


def states(opt):
    return nbytes(v for s in opt.state.values() for v in s.values() if torch.is_tensor(v))


def build(cfg, ep_group=None):
    torch.manual_seed(0)
    return Decoder(cfg, ep_group).to(DTYPE)


def checkpoint_blocks(model):
    """torchtitan's full activation checkpointing: each block in checkpoint_wrapper
    (torch.utils.checkpoint, non-reentrant, preserve_rng_state False)"""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    for name in list(model.layers.keys()):
        model.layers[name] = checkpoint_wrapper(model.layers[name], preserve_rng_state=False)
    return model


def tokens(cfg, batch, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg["vocab_size"], (batch, SEQ + 1), generator=g)


class LiveBytes(TorchDispatchMode):
    """The bytes of the tensor storages alive, from those given (`track`) and every storage an
    operator makes while the mode is on, each counted until it is freed; with the peak. On the
    CPU, whose allocator keeps no cache, that is what is allocated. (torch's MemTracker does the
    same by category but refuses a module run twice in a step, as a pipeline stage is once per
    micro-batch.) DTensor operations are left to DTensor, which runs them on local tensors that
    the mode then sees."""

    def __init__(self):
        super().__init__()
        self.live = WeakIdKeyDictionary()
        self.current = self.peak = 0

    def _freed(self, size, _ref):
        self.current -= size

    def track(self, t):
        t = local(t)
        if not torch.is_tensor(t):
            return
        st = t.untyped_storage()
        if st in self.live:
            return
        size = st.nbytes()
        self.live[st] = weakref.ref(st, functools.partial(self._freed, size))
        self.current += size
        self.peak = max(self.peak, self.current)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any(t.__name__ == "DTensor" for t in types):
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        for t in pytree.tree_leaves(out):
            if torch.is_tensor(t):
                self.track(t)
        return out


def measure(step, tensors):
    """the second of two steps under LiveBytes, starting from `tensors()` (parameters, optimizer
    states, buffers kept between steps); `step(snap)` runs one and calls snap(name) to record the
    bytes alive at a moment"""
    step(None)
    snaps = {}
    with LiveBytes() as live:
        for t in tensors():
            live.track(t)
        snaps["start"] = live.current
        step(lambda name: snaps.__setitem__(name, live.current))
        snaps["peak"] = live.peak
    return snaps


def kept(modules, opt, extra=()):
    """what lives between steps: parameters, optimizer states, `extra` buffers"""
    def tensors():
        out = [q for m in modules for q in m.parameters()]
        out += [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
        return out + [t for t in extra() if t is not None]
    return tensors


def run_tp(spec, rank):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import loss_parallel
    tp, sp = int(spec[1]), "sp" in spec[2:]
    mesh = init_device_mesh("cpu", (tp,))
    model = apply_tp(build(DENSE), mesh, sp)
    if "ac" in spec[2:]:
        checkpoint_blocks(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    data = tokens(DENSE, BATCH, 1)  # the same batch on every rank of a tensor-parallel group
    out = {}

    def step(snap):
        with loss_parallel():
            pred = model(data[:, :-1])
            loss = loss_fn(pred, data[:, 1:])
            del pred  # torchtitan frees the logits before the backward
            if snap:
                snap("forward_end")
            loss.backward()
        if snap:
            snap("before_step")
            out["grads"] = nbytes(p.grad for p in model.parameters())
        opt.step()
        opt.zero_grad(set_to_none=True)

    out["snapshots"] = measure(step, kept([model], opt, lambda: []))
    out["params"] = nbytes(model.parameters())
    out["tensors"] = len(list(model.parameters()))
    out["optimizer"] = states(opt)
    return out


def recv_buffers(stages):
    """the receive buffers a PipelineStage allocates once per micro-batch, activations and
    gradients, kept between steps"""
    for st in stages:
        for infos in list(st.args_recv_info.values()) + list(st.grad_recv_info.values()):
            for info in infos:
                yield getattr(info, "buffer", None)


def run_pp(spec, rank):
    from torch.distributed.pipelining import (PipelineStage, Schedule1F1B,
                                              ScheduleInterleaved1F1B)
    p = int(spec[1])
    v = int(spec[3]) if spec[2] == "interleaved" else 1
    m = int(spec[4] if v > 1 else spec[3])
    n_stages, per = p * v, DENSE["num_hidden_layers"] // (p * v)
    chunks, stages = [], []
    for c in range(v):
        idx = rank + c * p  # looping placement: rank r holds stages r, r + P, ...
        model = stage_model(build(DENSE), range(idx * per, (idx + 1) * per), idx == 0,
                            idx == n_stages - 1)
        if spec[-1] == "ac":
            checkpoint_blocks(model)
        chunks.append(model)
        stages.append(PipelineStage(model, idx, n_stages, torch.device("cpu")))
    if v == 1:
        sched = Schedule1F1B(stages[0], m, loss_fn=loss_fn)
    else:
        sched = ScheduleInterleaved1F1B(stages, m, loss_fn=loss_fn)
    opt = torch.optim.AdamW([q for c in chunks for q in c.parameters()], lr=1e-4, foreach=True)
    data = tokens(DENSE, BATCH * m, 1)
    out = {}

    def step(snap):
        kw = {}
        if any(s.is_last for s in stages):
            kw = {"target": data[:, 1:], "losses": []}
        args = (data[:, :-1],) if any(s.is_first for s in stages) else ()
        sched.step(*args, return_outputs=False, **kw)
        if snap:
            snap("before_step")
            out["grads"] = nbytes(q.grad for c in chunks for q in c.parameters())
        opt.step()
        opt.zero_grad(set_to_none=True)

    out["snapshots"] = measure(step, kept(chunks, opt, lambda: list(recv_buffers(stages))))
    out["params"] = nbytes(q for c in chunks for q in c.parameters())
    out["tensors"] = sum(len(list(c.parameters())) for c in chunks)
    out["optimizer"] = states(opt)
    out["stages"] = [s.stage_index for s in stages]
    return out


def run_ep(spec, rank):
    ep = int(spec[1])
    group = dist.new_group(list(range(ep)))
    model = build(MOE, group)
    expert = {id(q) for layer in model.layers.values() for q in
              (layer.feed_forward.w1, layer.feed_forward.w2, layer.feed_forward.w3)}
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
    data = tokens(MOE, BATCH, 1 + rank)  # data parallel: each rank its own batch
    out = {}

    def step(snap):
        pred = model(data[:, :-1])
        loss = loss_fn(pred, data[:, 1:])
        del pred
        if snap:
            snap("forward_end")
        loss.backward()
        for q in model.parameters():  # the replicated (non-expert) weights: averaged in place
            if id(q) not in expert and q.grad is not None:
                dist.all_reduce(q.grad, group=group)
        if snap:
            snap("before_step")
            out["grads"] = nbytes(q.grad for q in model.parameters())
        opt.step()
        opt.zero_grad(set_to_none=True)

    out["snapshots"] = measure(step, kept([model], opt, lambda: []))
    out["params"] = nbytes(model.parameters())
    out["tensors"] = len(list(model.parameters()))
    out["optimizer"] = states(opt)
    return out


def main():
    path, runs = sys.argv[1], sys.argv[2:]
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    result = {}
    for run in runs:
        spec = run.split(":")
        fn = {"tp": run_tp, "pp": run_pp, "ep": run_ep}[spec[0]]
        mine = fn(spec, rank)
        mine["batch"], mine["seq"] = BATCH, SEQ
        gathered = [None] * world
        dist.all_gather_object(gathered, mine)
        result[run] = {str(r): g for r, g in enumerate(gathered)}
    if rank == 0:
        result["versions"] = {"torch": torch.__version__}
        result["configs"] = {"dense": DENSE, "moe": MOE}
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1, sort_keys=True)
        os.replace(path + ".tmp", path)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
