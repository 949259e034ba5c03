"""The memory tracker: every storage alive at every moment of a program run on the meta device.

A ``TorchDispatchMode`` sees every ATen operation below autograd, so it sees every tensor the
real code creates, including those autograd keeps only in C++ (saved tensors) and those the
optimizer creates. Each new *storage* is one allocation (a view shares its base's storage and
costs nothing); it is rounded up as the CUDA caching allocator rounds a request (to a multiple of
512 bytes, at least 512) and freed when the storage dies (a weak reference on the storage, which
PyTorch keeps as one Python object while the storage lives).

Each allocation carries the phase it was made in ("forward", "backward", "optimizer", "inference")
and a tag set by the caller (``Tracker.tag``); after the run, ``Tracker.peak()`` finds the moment
of the largest total and attributes the storages alive then:

- weights: storages registered before the run (``register``), parameters and buffers;
- gradients: storages that were a parameter's ``.grad`` (``mark_gradients``);
- optimizer: storages made in the optimizer phase that outlive it (the optimizer's states);
- logits: storages made while the tag "logits" was set (the output head, the loss, and their
  backward up to the gradient of the head's input);
- activations: storages made in the forward that were still alive when it ended (what autograd
  saved for the backward, plus the outputs);
- temporaries: autocast's 16-bit copies of the parameters (tag "weight_cast"), and everything else (transient buffers of the forward, activation gradients and
  workspaces of the backward, the optimizer's transient buffers).
"""
from __future__ import annotations

import weakref
from typing import Any, Iterable

import torch
from torch.utils._python_dispatch import TorchDispatchMode, is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves

from . import progress

BLOCK = 512  # the CUDA caching allocator's rounding (c10/cuda/CUDACachingAllocator.cpp, kMinBlockSize)

CATEGORIES = ("weights", "gradients", "optimizer", "activations", "logits", "kv_cache",
              "temporaries")


def storages(t: torch.Tensor) -> Iterable[Any]:
    """The storages a tensor holds: its own, or for a tensor subclass that wraps others (torchao's
    NF4Tensor: packed codes, scalers, quantization factors) those of its inner tensors, whose
    bytes are what the device holds (the wrapper's nominal size is not)."""
    if is_traceable_wrapper_subclass(t):
        for name in t.__tensor_flatten__()[0]:
            inner = getattr(t, name)
            if isinstance(inner, torch.Tensor):
                yield from storages(inner)
    else:
        yield t.untyped_storage()


def rounded(nbytes: int) -> int:
    """Bytes the CUDA caching allocator hands out for a request of `nbytes`."""
    if nbytes <= 0:
        return 0
    return (nbytes + BLOCK - 1) // BLOCK * BLOCK


class _Alloc:
    __slots__ = ("nbytes", "t_alloc", "t_free", "phase", "tag", "kind", "op")

    def __init__(self, nbytes: int, t_alloc: int, phase: str, tag: str | None, kind: str | None,
                 op: str | None) -> None:
        self.nbytes = nbytes
        self.t_alloc = t_alloc
        self.t_free: int | None = None
        self.phase = phase
        self.tag = tag
        self.kind = kind  # "weights", "gradients" or None (decided at the peak)
        self.op = op


class Tracker(TorchDispatchMode):
    """Counts the storages of tensors on `device` (the meta device by default)."""

    def __init__(self, device: str | torch.device = "meta") -> None:
        super().__init__()
        self.device = torch.device(device)
        self.allocs: list[_Alloc] = []  # every allocation, in order
        self._live: dict[int, _Alloc] = {}  # id(storage) -> _Alloc
        self._refs: dict[int, Any] = {}  # id(storage) -> weakref keeping the finalizer
        self.clock = 0
        self.phase = "setup"
        self.tag: str | None = None
        self.phases: list[list[Any]] = []  # [start, end, phase, step]; end None while it runs

    # ---- bookkeeping ------------------------------------------------------------------------
    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    def _track(self, storage: Any, kind: str | None = None, op: str | None = None) -> _Alloc:
        key = id(storage)
        if key in self._live:
            return self._live[key]
        a = _Alloc(rounded(storage.nbytes()), self._tick(), self.phase, self.tag, kind, op)
        self._live[key] = a
        self.allocs.append(a)

        def freed(_ref: Any, key: int = key, a: _Alloc = a) -> None:
            if self._live.get(key) is a:
                del self._live[key]
                self._refs.pop(key, None)
                a.t_free = self._tick()

        self._refs[key] = weakref.ref(storage, freed)
        return a

    def register(self, tensors: Iterable[Any], kind: str = "weights") -> None:
        """Counts existing tensors (parameters, buffers, inputs) from now on as `kind`."""
        for t in tensors:
            if isinstance(t, torch.Tensor) and t.device == self.device:
                for st in storages(t):
                    self._track(st, kind).kind = kind

    def resized(self, storage: torch.UntypedStorage) -> None:
        """A storage resized in place (FSDP2 frees and re-allocates its unsharded parameters with
        ``untyped_storage().resize_``, which the dispatcher does not see): what it held is freed
        now, and its new size, if any, is a new allocation."""
        key = id(storage)
        a = self._live.pop(key, None)
        if a is not None:
            self._refs.pop(key, None)
            a.t_free = self._tick()
        if storage.nbytes() > 0:
            self._track(storage)

    def mark_gradients(self, params: Iterable[torch.Tensor]) -> None:
        """The storages of these parameters' .grad are gradients (called after each backward)."""
        for p in params:
            if p.grad is not None and p.grad.device == self.device:
                for st in storages(p.grad):
                    a = self._live.get(id(st))
                    if a is not None:
                        a.kind = "gradients"

    def set_phase(self, phase: str, step: int | None = None) -> None:
        """Starts a phase ("forward", "backward", "optimizer", "inference") of step `step`."""
        now = self._tick()
        if self.phases:
            self.phases[-1][1] = now
        self.phases.append([now, None, phase, step])
        self.phase = phase
        progress.phase(phase, step)

    def live_bytes(self) -> int:
        return sum(a.nbytes for a in self._live.values())

    # ---- the dispatch hook --------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        out = func(*args, **(kwargs or {}))
        seen: set[int] = set()
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device == self.device:
                for st in storages(t):
                    if id(st) not in seen:
                        seen.add(id(st))
                        self._track(st, op=str(func.overloadpacket.__name__))
        return out

    # ---- results --------------------------------------------------------------------------------
    def timeline(self) -> list[tuple[int, int]]:
        """(clock, total live bytes) after every allocation and free."""
        events: list[tuple[int, int]] = []
        for a in self.allocs:
            events.append((a.t_alloc, a.nbytes))
            if a.t_free is not None:
                events.append((a.t_free, -a.nbytes))
        events.sort()
        total, out = 0, []  # type: tuple[int, list[tuple[int, int]]]
        for t, d in events:
            total += d
            out.append((t, total))
        return out

    def _interval(self, clock: int) -> list[Any] | None:
        for iv in self.phases:
            if iv[0] <= clock and (iv[1] is None or clock < iv[1]):
                return iv
        return None

    def _phase_at(self, clock: int) -> tuple[str, int | None]:
        iv = self._interval(clock)
        return (iv[2], iv[3]) if iv else ("setup", None)

    def _phase_end(self, clock: int) -> int | None:
        iv = self._interval(clock)
        return iv[1] if iv else None

    def classify(self, a: _Alloc, at: int) -> str:
        """The category of allocation `a` when looked at, at clock `at`."""
        if a.kind in ("weights", "gradients", "kv_cache"):
            return a.kind
        if a.tag == "logits":
            return "logits"
        if a.tag == "weight_cast":  # autocast's 16-bit copies of the parameters
            return "temporaries"
        if a.tag == "optimizer":  # made by an optimizer stepping inside the backward (its states)
            return "optimizer"
        if a.phase in ("optimizer", "forward"):
            # made in this phase and still alive after it: the optimizer's states, or what the
            # forward left for the backward (saved tensors and outputs)
            end = self._phase_end(a.t_alloc)
            if end is None or a.t_free is None or a.t_free > end:
                return "optimizer" if a.phase == "optimizer" else "activations"
            return "temporaries"
        if a.phase == "inference":
            return "activations"
        if a.phase == "setup":
            return "weights"
        return "temporaries"

    def peak(self, from_clock: int = 0) -> dict[str, Any]:
        """The largest total at or after `from_clock`, with its breakdown and phase."""
        best_t, best = 0, -1
        for t, total in self.timeline():
            if t >= from_clock and total > best:
                best_t, best = t, total
        breakdown = dict.fromkeys(CATEGORIES, 0)
        for a in self.allocs:
            if a.t_alloc <= best_t and (a.t_free is None or a.t_free > best_t):
                breakdown[self.classify(a, best_t)] += a.nbytes
        phase, step = self._phase_at(best_t)
        return {"allocated_peak": max(best, 0), "breakdown": breakdown, "phase": phase,
                "step": step, "clock": best_t}
