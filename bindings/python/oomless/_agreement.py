"""Every rank's outcome of a micro-batch exchanged, and the micro-batch they agree on (the
module documentation of oomless.torch says why and how)."""
from __future__ import annotations

import time
from typing import Any

import torch
import torch.distributed as dist

from ._batches import micro_batch_sizes, next_limit
from ._cuda_memory import Memory


def _is_ddp(model: Any) -> bool:
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


class _Agreement:
    """The per-micro-batch exchange of every rank's outcome (see the module documentation)."""

    def __init__(self, model: torch.nn.Module | None = None, group: Any = None) -> None:
        self.active = dist.is_available() and dist.is_initialized() and \
            dist.get_world_size() > 1
        self.grad_group = getattr(model, "process_group", None) if _is_ddp(model) else None
        if not self.active:
            self.group, self.world, self.rank, self.device = None, 1, 0, torch.device("cpu")
            return
        pg = group if group is not None else self.grad_group
        self.group = pg
        self.device = torch.device("cpu")
        if dist.get_backend(pg) != "gloo":
            if pg is None or pg == dist.group.WORLD:
                # a CPU group, so that the flag never waits behind the GPU stream; a collective
                # call: every rank builds its TrainStep (or integration) at the same point
                self.group = dist.new_group(backend="gloo")
            else:
                self.device = torch.device("cuda", torch.cuda.current_device())
        self.world = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)

    def exchange(self, failed: bool, proposal: int, batch: int) -> tuple[bool, int, list[int]]:
        """(any_failed, agreed_limit, failed_ranks) once every rank told its outcome."""
        if not self.active:
            return failed, proposal, [0] if failed else []
        v = torch.zeros(4 + self.world, dtype=torch.int64)
        v[0] = 1 if failed else 0
        v[1] = -int(proposal)
        v[2], v[3] = int(batch), -int(batch)
        if failed:
            v[4 + self.rank] = 1
        v = v.to(self.device)
        dist.all_reduce(v, op=dist.ReduceOp.MAX, group=self.group)
        flags = v.cpu().tolist()
        if flags[2] != -flags[3]:
            raise ValueError("ranks have different per-step batches (%d to %d): every rank must "
                             "step on the same number of samples" % (-flags[3], flags[2]))
        return bool(flags[0]), -flags[1], [r for r in range(self.world) if flags[4 + r]]

    def broadcast_buffers(self, model: Any) -> None:
        """Rank 0's buffers to every rank, as DDP does at the first forward of each step.

        DDP broadcasts in a forward only when the forward before it was synchronised; under the
        permanent ``no_sync()`` of :class:`TrainStep` it would never broadcast again, so the step
        does it itself, before its first micro-batch, where every rank is aligned.
        """
        if not self.active or not _is_ddp(model) or \
                not getattr(model, "forward_sync_buffers", model.broadcast_buffers):
            return
        ignore = getattr(model, "parameters_to_ignore", ())
        bufs = [b for name, b in model.module.named_buffers() if name not in ignore]
        if not bufs:
            return
        src = dist.get_global_rank(self.grad_group, 0) if self.grad_group is not None else 0
        with torch.no_grad():
            works = [dist.broadcast(b, src=src, group=self.grad_group, async_op=True)
                     for b in bufs]
            for w in works:
                w.wait()

    def sync_gradients(self, model: torch.nn.Module) -> None:
        """Averages the gradients over the model's group, in place (DDP's result)."""
        if not self.active or not _is_ddp(model):
            return
        group = self.grad_group
        world = dist.get_world_size(group)
        grads = []
        for p in model.parameters():
            if p.requires_grad:
                if p.grad is None:  # unused on this rank: DDP reduces zeros for it too
                    p.grad = torch.zeros_like(p)
                grads.append(p.grad)
        works = [dist.all_reduce(g, group=group, async_op=True) for g in grads]
        for w in works:
            w.wait()
        for g in grads:
            g.div_(world)


def _limit_record(agreement: _Agreement, step: int, per_step_batch: int, failed_micro: int,
                  limit: int, sizes: list[int], exact: bool, failed_ranks: list[int],
                  info: dict[str, Any] | None, observations: dict[int, int]) -> dict[str, Any]:
    """The record of one agreement on a new micro-batch (its shape: the module documentation)."""
    info = info or {}

    def whole(x: float | None) -> int | None:
        return None if x is None else int(round(x))

    return {"event": "oom-limit", "time": round(time.time(), 3), "rank": agreement.rank,
            "world_size": agreement.world, "step": step, "per_step_batch": per_step_batch,
            "failed_micro_batch": failed_micro, "micro_batch": max(sizes) if limit >= 1 else 0,
            "micro_batches": len(sizes), "exact": exact, "failed_ranks": failed_ranks,
            "phase": info.get("phase"), "basis": info.get("basis", "agreed"),
            "fixed_bytes": whole(info.get("fixed_bytes")),
            "per_sample_bytes": whole(info.get("per_sample_bytes")),
            "capacity_bytes": whole(info.get("capacity_bytes")),
            "peak_bytes": max(observations.values()) if observations else None,
            "largest_ok_micro_batch": max(observations) if observations else None,
            "limit": limit}


class _StopAgreement:
    """What the framework integrations share: catch OOM in a micro-batch, exchange outcomes
    every micro-batch, and agree on the micro-batch of the relaunch (a divisor of the per-step
    batch, since ``oomless run`` relaunches with equal micro-batches)."""

    def __init__(self, model: torch.nn.Module | None = None, memory: Memory | None = None,
                 headroom: float = 0.1, group: Any = None) -> None:
        self.agreement = _Agreement(model, group)
        self.memory, self.headroom = memory, headroom
        self.observations: dict[int, int] = {}
        self.fixed: int | None = None

    def start_micro(self, first: bool) -> None:
        """Before a micro-batch; `first`: the first of an optimizer step."""
        if self.memory is not None:
            if first or self.fixed is None:
                self.fixed = self.memory.current()
            self.memory.reset()

    def ok_micro(self, micro: int) -> None:
        if self.memory is not None:
            peak = self.memory.peak()
            if peak is not None:
                self.observations[micro] = max(self.observations.get(micro, 0), int(peak))

    def decide(self, failed_phase: str | None, micro: int, per_step_batch: int,
               step: int) -> dict[str, Any] | None:
        """Exchanges this rank's outcome; returns None (every rank went on) or the limit record
        of the relaunch (micro-batch agreed by every rank; 0 when nothing smaller is left)."""
        proposal, info = micro, {}  # type: tuple[int, dict[str, Any]]
        if failed_phase is not None:
            capacity = self.memory.capacity() if self.memory is not None else None
            proposal, basis, fit_fixed, slope = next_limit(
                micro, self.observations, self.fixed, capacity, self.headroom)
            info = {"phase": failed_phase, "basis": basis, "fixed_bytes": fit_fixed,
                    "per_sample_bytes": slope, "capacity_bytes": capacity}
        failed, limit, failed_ranks = self.agreement.exchange(failed_phase is not None,
                                                              proposal, per_step_batch)
        if not failed:
            return None
        sizes, exact = micro_batch_sizes(per_step_batch, max(limit, 1))
        return _limit_record(self.agreement, step, per_step_batch, micro, limit, sizes, exact,
                             failed_ranks, info, self.observations)
