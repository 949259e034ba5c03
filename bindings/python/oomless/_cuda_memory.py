"""The memory a step's micro-batches use on a CUDA device (oomless.torch.CudaMemory)."""
from __future__ import annotations

from typing import Any, Protocol

import torch


class Memory(Protocol):
    """What :class:`TrainStep` and the integrations call on their ``memory`` (see CudaMemory)."""

    def reset(self) -> None: ...

    def peak(self) -> int | None: ...

    def current(self) -> int: ...

    def capacity(self) -> int: ...


class CudaMemory:
    """The memory measurement of :class:`TrainStep` on a CUDA device.

    The protocol (any object with these methods can be passed as ``memory=``): ``reset()`` before
    each micro-batch; ``peak()`` the bytes at the peak since then; ``current()`` the bytes held now;
    ``capacity()`` the most the process could hold (called right after an OOM). Here: the caching
    allocator's allocated bytes (``torch.cuda.max_memory_allocated``), and as capacity what it has
    reserved plus what the device still has free, at most what
    ``torch.cuda.set_per_process_memory_fraction`` allows it (the fraction of the device's
    ``total_memory``, as PyTorch's out-of-memory message says: "24.00 GiB allowed").
    """

    def __init__(self, device: Any = None) -> None:
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None \
            else torch.device(device)

    def reset(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def current(self) -> int:
        return torch.cuda.memory_allocated(self.device)

    def capacity(self) -> int:
        free, _total = torch.cuda.mem_get_info(self.device)
        held = free + torch.cuda.memory_reserved(self.device)
        fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
        if fraction is not None:  # torch.cuda.get_per_process_memory_fraction: torch >= 2.8
            share = fraction(self.device)
            if 0 < share < 1:
                total = torch.cuda.get_device_properties(self.device).total_memory
                held = min(held, int(share * total))
        return held


def _sharded(model: torch.nn.Module) -> bool:
    """Whether the model is FSDP-sharded (its forward all-gathers parameters)."""
    try:
        from torch.distributed import fsdp
    except ImportError:
        return False
    kinds = tuple(k for k in (getattr(fsdp, "FullyShardedDataParallel", None),
                              getattr(fsdp, "FSDPModule", None)) if isinstance(k, type))
    return bool(kinds) and any(isinstance(m, kinds) for m in model.modules())


def _default_memory(model: torch.nn.Module) -> CudaMemory | None:
    try:
        p = next(model.parameters())
    except StopIteration:
        return None
    return CudaMemory(p.device) if p.device.type == "cuda" else None
