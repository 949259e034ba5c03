"""What a re-run of a step restores (RNG states, buffers) and what a failed attempt frees."""
from __future__ import annotations

import traceback
from typing import Any

import torch

from ._oom import _OOM_TYPE
from ._oom_snapshot import record_oom


class _Snapshot:
    """RNG states (CPU, the CUDA devices in use) and, optionally, the model's buffers."""

    def __init__(self, model: torch.nn.Module, buffers: bool) -> None:
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self.buffers = [(b, b.detach().clone()) for b in model.buffers()] if buffers else []

    def restore(self) -> None:
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        with torch.no_grad():
            for live, saved in self.buffers:
                live.copy_(saved)


def _release(exc: BaseException, step: int | None = None, rank: int | None = None) -> None:
    """Drops the tensors an exception's traceback keeps alive (the forward's locals), after
    recording what filled the memory while they are still there (:func:`record_oom`: an
    ``oom_snapshot`` event when ``oomless run --events`` started the job)."""
    record_oom(exc, step=step, rank=rank)
    traceback.clear_frames(exc.__traceback__)
    exc.__traceback__ = None


def _gave_up(message: str) -> BaseException:
    """The out-of-memory error raised when no smaller micro-batch is left: the OOMs that led
    here were recorded when caught, so the exception hook does not record this one (taken after
    the step's tensors were freed, its snapshot would say little)."""
    exc: Any = _OOM_TYPE(message)
    exc._oomless_recorded = True
    return exc


def _empty_cache() -> None:
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def rng_state() -> dict[str, Any]:
    """Every RNG a training step may draw from: Python's, NumPy's (when installed), torch's CPU
    and CUDA generators."""
    import random
    state: dict[str, Any] = {"python": random.getstate(), "cpu": torch.get_rng_state(),
             "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None}
    try:
        import numpy
        state["numpy"] = numpy.random.get_state()
    except ImportError:
        state["numpy"] = None
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restores what :func:`rng_state` returned."""
    import random
    random.setstate(state["python"])
    torch.set_rng_state(state["cpu"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state_all(state["cuda"])
    if state["numpy"] is not None:
        import numpy
        numpy.random.set_state(state["numpy"])
