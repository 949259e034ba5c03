"""The measured-against-estimated memory log the framework callbacks share (no framework here)."""
import logging
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

# memory() -> (allocated peak bytes, reserved peak bytes) since the start of the job
MemoryFn = Callable[[], Tuple[int, int]]

LOG = logging.getLogger("oomless")


class MemoryWarning(UserWarning):
    """The job's GPU memory is close to (or past) the budget."""


def cuda_memory(device: Any = None) -> MemoryFn:
    """The default measurement: ``torch.cuda.max_memory_allocated`` and
    ``torch.cuda.max_memory_reserved`` of `device` (the current CUDA device)."""
    import torch

    def measure() -> Tuple[int, int]:
        return (int(torch.cuda.max_memory_allocated(device)),
                int(torch.cuda.max_memory_reserved(device)))
    return measure


class MemoryLog:
    """Compares the measured peaks with oomless's estimate every `every` optimizer steps.

    `doc` is the document of :func:`oomless.plan` or :func:`oomless.estimate` (its ``memory``:
    ``allocated_peak``, ``reserved_peak``, ``device_peak``; its ``budget.usable_bytes`` unless
    `budget` (bytes) is given). The device use of the process is taken as the measured reserved
    peak plus what the estimate puts outside PyTorch's allocator (``device_peak -
    reserved_peak``: the CUDA context and library workspaces, which torch does not count). A
    :class:`MemoryWarning` is issued once when that crosses `warn_at` (a fraction) of the budget,
    and once more when it crosses the budget itself. Each record (a dict) is kept in
    :attr:`records`, logged on the ``oomless`` logger and passed to `log` when given.
    """

    def __init__(self, doc: Mapping[str, Any], every: int = 50, memory: Optional[MemoryFn] = None,
                 budget: Optional[int] = None, warn_at: float = 0.9,
                 log: Optional[Callable[[Dict[str, Any]], None]] = None) -> None:
        if every < 1:
            raise ValueError("every must be at least 1 step")
        if not 0 < warn_at <= 1:
            raise ValueError("warn_at is a fraction of the budget in (0, 1]")
        mem = doc.get("memory") or {}
        try:
            self.estimate = {k: int(mem[k]) for k in ("allocated_peak", "reserved_peak",
                                                       "device_peak")}
        except (KeyError, TypeError):
            raise KeyError("the document has no memory estimate: pass what oomless.plan() or "
                           "oomless.estimate() returns") from None
        if budget is None:
            budget = (doc.get("budget") or {}).get("usable_bytes")
        self.budget = int(budget) if budget else None
        self.every, self.warn_at, self.log = every, warn_at, log
        self.memory = memory if memory is not None else cuda_memory()
        self.records: List[Dict[str, Any]] = []
        self._warned = 0  # 1: past warn_at, 2: past the budget
        self._last_step = -1

    def step(self, step: int) -> Optional[Dict[str, Any]]:
        """Called after optimizer step `step` (counted from 1); measures and records every
        `every` steps (once per step however often it is called), else returns None."""
        if step % self.every or step == self._last_step:
            return None
        self._last_step = step
        allocated, reserved = self.memory()
        device = reserved + max(self.estimate["device_peak"] - self.estimate["reserved_peak"], 0)
        record: Dict[str, Any] = {
            "step": step, "allocated_peak": allocated, "reserved_peak": reserved,
            "device_peak": device,
            "estimate_allocated_peak": self.estimate["allocated_peak"],
            "estimate_reserved_peak": self.estimate["reserved_peak"],
            "estimate_device_peak": self.estimate["device_peak"],
            "allocated_vs_estimate": allocated / self.estimate["allocated_peak"]
            if self.estimate["allocated_peak"] else None,
            "budget": self.budget,
            "budget_used": device / self.budget if self.budget else None,
        }
        self.records.append(record)
        LOG.info("oomless step %d: allocated peak %.2f GiB (estimate %.2f), reserved %.2f GiB "
                 "(estimate %.2f)%s", step, allocated / 2**30,
                 self.estimate["allocated_peak"] / 2**30, reserved / 2**30,
                 self.estimate["reserved_peak"] / 2**30,
                 ", %.0f%% of the budget" % (100 * record["budget_used"])
                 if self.budget else "")
        if self.log is not None:
            self.log(record)
        self._check_budget(step, device)
        return record

    def _check_budget(self, step: int, device: int) -> None:
        if not self.budget:
            return
        level = 2 if device > self.budget else 1 if device >= self.warn_at * self.budget else 0
        if level > self._warned:
            self._warned = level
            warnings.warn("oomless: at step %d the job holds %.2f GiB on the GPU, %.0f%% of its "
                          "budget of %.2f GiB%s" % (
                              step, device / 2**30, 100 * device / self.budget,
                              self.budget / 2**30,
                              ": past it, the next peak may run out of memory" if level == 2
                              else ": close to it"), MemoryWarning, stacklevel=3)
