"""What a job stopped for a relaunch leaves: its calibration line, the message `oomless run`
reads, its exit status."""
from __future__ import annotations

import json
import os
import sys
import time
from typing import Any, NoReturn, Sequence

import torch.distributed as dist

from ._oom import RELAUNCH_EXIT_CODE, OomStop


def calibration_line(record: dict[str, Any], gpu: str, command: str | Sequence[str],
                     workload: str = "", extra_fixed_bytes: int = 0) -> dict[str, Any] | None:
    """A record of oomless's calibration store from a limit record with measured bytes.

    The store (``lib/calib/calibration.c``; default ``$XDG_CACHE_HOME/oomless/calibration.jsonl``)
    keys lines by GPU name (as NVML names it), command (the argv list ``oomless run`` was given,
    templates such as ``{batch}`` unexpanded) and workload text, and holds the line
    ``peak = fixed_bytes + per_sample_bytes x batch`` in device bytes, ``recommended_batch``,
    ``max_batch`` (never exceeded: the largest micro-batch seen to run) and ``usable_bytes``.
    The measurement here is the caching allocator's: add the CUDA context and anything else the
    process holds outside PyTorch as `extra_fixed_bytes` to make it device bytes as ``probe``
    measures them. Returns None when the record has no measured line.
    """
    if record.get("fixed_bytes") is None or record.get("per_sample_bytes") is None:
        return None
    if isinstance(command, str):
        command = json.loads(command)
    ok = record.get("largest_ok_micro_batch") or record["micro_batch"]
    return {"time": record.get("time", round(time.time(), 3)), "gpu": gpu,
            "command": list(command), "workload": workload,
            "fixed_bytes": int(record["fixed_bytes"]) + int(extra_fixed_bytes),
            "per_sample_bytes": int(record["per_sample_bytes"]), "per_sample2_bytes": 0.0,
            "recommended_batch": int(record["micro_batch"]),
            "max_batch": int(min(ok, record["micro_batch"])),
            "usable_bytes": int(record.get("capacity_bytes") or 0)}


def append_calibration(line: dict[str, Any], path: str | None = None) -> str:
    """Appends one calibration line (from :func:`calibration_line`) to the store; returns the
    path. Through the library (:mod:`oomless.calibration`), the store's one writer: the line
    whole or nothing, under its lock, on a fresh line, never through a symbolic link or into a
    FIFO; the default place private, a relative ``$XDG_CACHE_HOME`` ignored."""
    from . import calibration
    return calibration.save(line, path)


def relaunch_message(stop: OomStop, grad_accum: int | None = None) -> str:
    """The lines a stopped job prints for ``oomless run``: a sentence naming
    ``torch.OutOfMemoryError`` (one of oomless's OOM patterns) and the step, then
    ``OOMLESS_RECOVERY {json}`` with the record."""
    r = stop.record
    accum = "" if grad_accum is None else " x accumulation %d" % grad_accum
    text = ("oomless: torch.OutOfMemoryError on rank(s) %s at step %s: every rank stopped for a "
            "relaunch at micro-batch %d%s" % (r.get("failed_ranks"), r.get("step"),
                                              r["micro_batch"], accum))
    if stop.checkpoint:
        text += "; saved %s" % stop.checkpoint
    doc = dict(r, checkpoint=stop.checkpoint)
    if grad_accum is not None:
        doc["grad_accum"] = grad_accum
    return text + "\nOOMLESS_RECOVERY " + json.dumps(doc, sort_keys=True)


def exit_for_relaunch(stop: OomStop, grad_accum: int | None = None, code: int = RELAUNCH_EXIT_CODE,
                      events_path: str | None = None) -> NoReturn:
    """Reports an :class:`OomStop` and exits with `code`.

    The first rank of each node (``$LOCAL_RANK`` 0) prints :func:`relaunch_message` on stderr,
    since every node's ``oomless run`` must see it in its own job's output; every rank appends
    its record to
    `events_path` (default ``$OOMLESS_RECOVERY_EVENTS`` when set) as a JSON line. In a
    distributed job the process group is destroyed and the process ends with ``os._exit`` after
    flushing the logs and standard streams: the interpreter's teardown can destroy a DDP reducer
    after its process group and abort (``std::terminate``), which would lose the status.
    """
    # one report per node: each node's `oomless run` reads its own torchrun's output
    if int(os.environ.get("LOCAL_RANK", "0")) == 0:
        sys.stderr.write(relaunch_message(stop, grad_accum) + "\n")
        sys.stderr.flush()
    events_path = events_path or os.environ.get("OOMLESS_RECOVERY_EVENTS")
    if events_path:
        doc = dict(stop.record, event="oom-stop", checkpoint=stop.checkpoint)
        if grad_accum is not None:
            doc["grad_accum"] = grad_accum
        fd = os.open(events_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        try:
            os.write(fd, (json.dumps(doc, sort_keys=True) + "\n").encode("utf-8"))
        finally:
            os.close(fd)
    if dist.is_available() and dist.is_initialized():
        import gc
        import logging
        gc.collect()
        dist.destroy_process_group()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
