"""What an out-of-memory error is to oomless.torch and its integrations, and how a job stopped
for a relaunch exits."""
from __future__ import annotations

from typing import Any

import torch


#: The exit status of a job stopped for a relaunch at a smaller micro-batch (sysexits'
#: EX_TEMPFAIL: "a temporary failure; retrying later may succeed").
RELAUNCH_EXIT_CODE = 75


_OOM_TYPE = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError


# out-of-memory errors that reach Python as a plain RuntimeError (library workspaces)
_OOM_TEXTS = ("CUDA out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED",
              "HIP out of memory")


class InexactAccumulationWarning(UserWarning):
    """The per-step batch was split into unequal micro-batches (no divisor fitted)."""


class OomStop(RuntimeError):
    """Every rank agreed to stop at this step for a relaunch at ``micro_batch``.

    ``record`` is the limit record (see the module documentation); ``checkpoint`` the path of
    what was saved, when something was.
    """

    def __init__(self, record: dict[str, Any], checkpoint: str | None = None) -> None:
        self.record = record
        self.micro_batch = record["micro_batch"]
        self.checkpoint = checkpoint
        super().__init__("out of memory at step %s (rank(s) %s): stop for a relaunch at "
                         "micro-batch %d" % (record.get("step"), record.get("failed_ranks"),
                                             record["micro_batch"]))


def is_oom(exc: BaseException) -> bool:
    """Whether an exception is a device out-of-memory error."""
    if isinstance(exc, _OOM_TYPE):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc) for t in _OOM_TEXTS)
