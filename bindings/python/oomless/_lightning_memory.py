"""oomless.lightning.MemoryLogCallback: a Lightning callback around :class:`MemoryLog`."""
from typing import Any, Callable, Dict, List, Mapping, Optional

from lightning.pytorch.callbacks import Callback

from ._memory_log import MemoryFn, MemoryLog


class MemoryLogCallback(Callback):
    """Logs oomless's estimate next to the measured ``torch.cuda.max_memory_allocated`` /
    ``max_memory_reserved`` every `every` optimizer steps, and warns (:class:`MemoryWarning`)
    before the budget is crossed. `memory` is the measurement (a callable returning (allocated,
    reserved) peak bytes; default torch.cuda's). The records are in :attr:`records` and are
    logged to the Trainer's loggers as ``oomless/<key>`` metrics."""

    def __init__(self, doc: Mapping[str, Any], every: int = 50,
                 memory: Optional[MemoryFn] = None, budget: Optional[int] = None,
                 warn_at: float = 0.9,
                 log: Optional[Callable[[Dict[str, Any]], None]] = None) -> None:
        super().__init__()
        self.memory_log = MemoryLog(doc, every=every, memory=memory, budget=budget, warn_at=warn_at,
                             log=log)

    @property
    def records(self) -> List[Dict[str, Any]]:
        return self.memory_log.records

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        # global_step counts optimizer steps; with accumulation it stays put across the
        # micro-batches of a step, and MemoryLog records a step once
        if trainer.global_step == 0:
            return
        record = self.memory_log.step(trainer.global_step)
        if record is not None and trainer.loggers:
            metrics: Dict[str, float] = {"oomless/" + k: float(v) for k, v in record.items()
                                         if k != "step" and v is not None}
            for logger in trainer.loggers:
                logger.log_metrics(metrics, step=trainer.global_step)
