"""oomless.hf.MemoryLogCallback: a transformers TrainerCallback around :class:`MemoryLog`."""
from typing import Any, Callable, Dict, List, Mapping, Optional

from transformers import TrainerCallback

from ._memory_log import MemoryFn, MemoryLog


class MemoryLogCallback(TrainerCallback):
    """Logs oomless's estimate next to the measured ``torch.cuda.max_memory_allocated`` /
    ``max_memory_reserved`` every `every` optimizer steps, and warns (:class:`MemoryWarning`)
    before the budget is crossed. `memory` is the measurement (a callable returning (allocated,
    reserved) peak bytes; default torch.cuda's). The records are in :attr:`records`, on the
    ``oomless`` logger, and passed to `log` when given."""

    def __init__(self, doc: Mapping[str, Any], every: int = 50,
                 memory: Optional[MemoryFn] = None, budget: Optional[int] = None,
                 warn_at: float = 0.9,
                 log: Optional[Callable[[Dict[str, Any]], None]] = None) -> None:
        self.memory_log = MemoryLog(doc, every=every, memory=memory, budget=budget, warn_at=warn_at,
                             log=log)

    @property
    def records(self) -> List[Dict[str, Any]]:
        return self.memory_log.records

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.memory_log.step(state.global_step)
