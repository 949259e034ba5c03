"""oomless.torch: survive out-of-memory inside a plain PyTorch training loop, on one GPU or many.

:class:`TrainStep` runs one optimizer step over a per-step batch (the effective batch of this
rank) as micro-batches with gradient accumulation. When a micro-batch raises
``torch.OutOfMemoryError``, the step's tensors are freed, every rank agrees on a smaller
micro-batch, and the *same* step is run again from its start, on the same samples, with the same
optimizer state, RNG state and buffers: the result is the step a run started at the smaller
micro-batch would have taken. ::

    step = oomless.torch.TrainStep(ddp_model, optimizer, micro_batch=16)
    for inputs, labels in loader:                    # loader batches are the per-step batch
        result = step.step((inputs, labels),
                           lambda m, mb: F.cross_entropy(m(mb[0]), mb[1]))

The idea of catching the OOM in the loop and retrying at a smaller micro-batch comes from MosaicML
Composer's automatic microbatching (``device_train_microbatch_size="auto"``) and from
accelerate's ``find_executable_batch_size`` (which halves and re-runs a whole function); what is
added here is the choice of the next micro-batch from measured peaks instead of halving, the exact
effective batch, the re-run of the step with identical state, and the agreement across ranks
without a hang.

**Why a rank cannot simply catch its own OOM in DDP.** DistributedDataParallel all-reduces the
gradients *inside* ``loss.backward()`` of the last micro-batch (bucket by bucket, as the backward
produces them). If rank 1 runs out of memory in that backward while rank 0 finishes its own,
rank 0 waits in the bucket all-reduce for a peer that will never join: the job hangs until the
process-group timeout (NCCL: 10 minutes by default; gloo: 30), and nothing is recovered. The same
holds for any collective a rank enters while a peer is handling an exception.

**What this module does instead.**

1. Every micro-batch, the last included, runs its forward and backward under ``model.no_sync()``,
   so no backward enters a collective, and with DDP's buffer broadcast moved out of the forward
   (point 4) no forward does either. An OOM is caught locally, on the rank where it happens.
2. After each micro-batch every rank enters the *same* small all-reduce (MAX) of a flag vector
   ``[failed, -proposed_limit, batch, -batch, one bit per rank]``. No rank can be inside
   another collective at that point, since the micro-batch contained none. The exchange runs on
   a CPU (gloo) group, created once in the constructor when the model's group is NCCL, so it
   never waits on the GPU stream (an OOM is raised on the CPU when the allocation is attempted,
   so by the time a rank reaches the exchange it knows).
3. If any rank failed, every rank discards the step (``zero_grad(set_to_none=True)``, references
   dropped, ``torch.cuda.empty_cache()``), restores the step's RNG state and buffers, adopts the
   smallest proposed micro-batch and re-runs the step from its first micro-batch.
4. DDP broadcasts rank 0's buffers at the start of a forward only when the forward before it
   was synchronised, that is once per step in an ordinary accumulation loop. Here no forward
   broadcasts (``require_forward_param_sync`` is cleared before each one: a forward that raised
   skips DDP's post-forward and would leave that flag set on the failed rank alone, which would
   then broadcast by itself); the step broadcasts the buffers before its first micro-batch.
5. Otherwise the gradients are averaged with one in-place all-reduce per parameter (launched
   asynchronously, then awaited) on the model's process group, exactly what DDP would have
   computed, and the optimizer steps. Nothing extra is allocated for the sync.

The price is that the last micro-batch's gradient communication no longer overlaps its backward,
and DDP communication hooks (compression, ...) are not used. Models whose *forward* contains
collectives in the middle of the computation (FSDP/ZeRO-3 all-gathers, SyncBatchNorm, tensor
parallelism) cannot be recovered this way, since a rank can fail between two of them: use
``oomless run`` (a relaunch of every rank) for those. An OOM inside ``optimizer.step()`` is not
caught either: the optimizer may have updated some parameters already, so the step cannot be
re-run; the exception propagates and a relaunch is the way out.

**The next micro-batch.** With a memory measurement (``torch.cuda.max_memory_allocated`` around
each micro-batch on CUDA, or the ``memory`` object given), the peaks of the micro-batches that ran
give a line ``peak = fixed + per_sample x micro`` (two sizes: fitted; one size: through the memory
held at the start of the step). The failure itself bounds the per-sample cost from below
(``(capacity - fixed) / failed_micro``). The next micro-batch is the largest that the line puts
under ``capacity x (1 - headroom)``. Without a measurement (CPU, or an OOM before anything ran),
and after a measured guess failed again in the same step, it halves. The micro-batch is then the
largest divisor of the per-step batch not above that limit, so the effective batch and the
equal-sized micro-batches are exact; only when no divisor is at least ``min_micro_batch`` are the
micro-batches unequal (as even as possible), each loss weighted by its share of the samples,
which an :class:`InexactAccumulationWarning` and an ``"inexact"`` event announce.

**The limit found** is passed to ``on_limit(record)`` on every rank, one dict per agreement::

    {"event": "oom-limit", "time": 1767225600.1, "rank": 1, "world_size": 2, "step": 3,
     "per_step_batch": 12, "failed_micro_batch": 6, "micro_batch": 4, "micro_batches": 3,
     "exact": true, "failed_ranks": [1],
     "phase": "backward",    # where this rank ran out of memory; null on the ranks that did not
     "basis": "measured",    # how this rank chose: "measured" or "halved"; "agreed" if it did not
     "fixed_bytes": 104857600, "per_sample_bytes": 10485760, "capacity_bytes": 152043520,
     "peak_bytes": 167772160, "largest_ok_micro_batch": 6,
     "limit": 4}             # the largest micro-batch agreed on, before rounding to a divisor

(byte fields are null without a measurement, and the fit is this rank's own). :func:`calibration_line` turns a record into a line
of oomless's calibration store (the JSONL file ``oomless probe`` writes and ``oomless run`` reads)
and :func:`append_calibration` appends it.

Frameworks that own the training loop (Hugging Face Trainer, Lightning) cannot re-run a step in
place; :mod:`oomless.hf` and :mod:`oomless.lightning` use the same agreement to stop every rank
cleanly at the failed step (:class:`OomStop`), save a checkpoint and exit with
:data:`RELAUNCH_EXIT_CODE`, so that ``oomless run`` relaunches the job at the new micro-batch.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Any, Callable, cast

import torch

from ._agreement import _Agreement, _is_ddp, _limit_record
from ._batches import batch_size_of, micro_batch_sizes, next_limit, split_batch
from ._cuda_memory import CudaMemory, Memory, _default_memory, _sharded
from ._oom import RELAUNCH_EXIT_CODE, InexactAccumulationWarning, OomStop, is_oom
from ._relaunch import append_calibration, calibration_line, exit_for_relaunch, relaunch_message
from ._step_state import _empty_cache, _gave_up, _release, _Snapshot, rng_state, set_rng_state

__all__ = ["TrainStep", "StepResult", "OomStop", "InexactAccumulationWarning", "CudaMemory",
           "RELAUNCH_EXIT_CODE", "is_oom", "micro_batch_sizes", "next_limit", "calibration_line",
           "append_calibration", "split_batch", "batch_size_of", "relaunch_message",
           "exit_for_relaunch", "rng_state", "set_rng_state", "record_oom", "summarize_snapshot",
           "set_snapshot_source", "tag_modules"]


#: ``loss_fn(model, micro_batch)``: the loss of one micro-batch, the mean over its samples
LossFn = Callable[[torch.nn.Module, Any], torch.Tensor]


# ---- the training step ------------------------------------------------------------------------

class StepResult:
    """What :meth:`TrainStep.step` did: the loss (a detached tensor: the per-step mean when the
    loss function returns per-sample means), the micro-batch, how many, the re-runs, exactness."""

    __slots__ = ("loss", "micro_batch", "micro_batches", "retries", "exact")

    def __init__(self, loss: torch.Tensor, micro_batch: int, micro_batches: int, retries: int,
                 exact: bool) -> None:
        self.loss, self.micro_batch, self.micro_batches = loss, micro_batch, micro_batches
        self.retries, self.exact = retries, exact

    def __repr__(self) -> str:
        return ("StepResult(loss=%s, micro_batch=%d, micro_batches=%d, retries=%d, exact=%s)"
                % (float(self.loss), self.micro_batch, self.micro_batches, self.retries,
                   self.exact))


class TrainStep:
    """One optimizer step per call, as micro-batches, re-run at a smaller micro-batch on OOM.

    model: the module to train (a ``DistributedDataParallel`` wrapper in a DDP job; its forward
        and backward then always run under ``no_sync()`` and the gradients are averaged here).
        Any other module in a multi-rank job: the ranks still agree on the micro-batch, and
        the gradients are left as the module made them.
    optimizer: stepped once per :meth:`step`; its state is untouched by a failed attempt.
    micro_batch: the largest micro-batch to start with; never raised afterwards.
    min_micro_batch: the smallest micro-batch an exact (divisor) split may use; below it the
        micro-batches become unequal (see the module documentation). Default 1.
    memory: a measurement object (:class:`CudaMemory` protocol), None for the default
        (:class:`CudaMemory` when the model's parameters are on CUDA, else none: halving).
    headroom: the share of the capacity kept free when choosing from measurements (fragmentation).
    max_retries: re-runs of one step before the OOM is re-raised.
    restore_buffers: copy the model's buffers at each step start and restore them on a re-run
        (BatchNorm statistics); costs one copy of the buffers.
    scaler: a ``torch.amp.GradScaler`` (the losses are scaled, the scaler steps and updates).
    before_step: ``fn(model, optimizer)`` after the gradients are final, before the optimizer
        step (gradient clipping; with a scaler, after ``unscale_``).
    on_limit: ``fn(record)`` on every rank each time the ranks agree on a new micro-batch.
    on_event: ``fn(event_dict)`` for "oom" (this rank failed), "limit" (the record) and
        "inexact" (unequal micro-batches in use).
    group: the process group of the exchange (default: the DDP model's, or a gloo group over
        the world when that one is not gloo). In a distributed job the constructor must be
        called on every rank at the same point.
    """

    # the sum of the micro-batches' weighted losses while a step runs
    _loss_sum: Any
    # whether a measured guess failed in this step (the next failure halves)
    _guessed_this_step: bool

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, micro_batch: int,
                 *, min_micro_batch: int = 1, memory: Memory | None = None,
                 headroom: float = 0.1, max_retries: int = 16, restore_buffers: bool = True,
                 scaler: Any = None,
                 before_step: Callable[[torch.nn.Module, torch.optim.Optimizer], None]
                 | None = None,
                 on_limit: Callable[[dict[str, Any]], None] | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None,
                 group: Any = None) -> None:
        if int(micro_batch) < 1:
            raise ValueError("micro_batch must be at least 1")
        if _sharded(model):
            raise ValueError("oomless.torch.TrainStep cannot recover an FSDP model in the loop: "
                             "its forward all-gathers parameters, so a rank can fail between "
                             "two collectives; run it under `oomless run` (a relaunch)")
        self.model, self.optimizer = model, optimizer
        self.micro_batch = int(micro_batch)
        self.min_micro_batch = max(1, int(min_micro_batch))
        self.memory = _default_memory(model) if memory is None else memory
        self.headroom, self.max_retries = float(headroom), int(max_retries)
        self.restore_buffers, self.scaler, self.before_step = restore_buffers, scaler, before_step
        self.on_limit, self.on_event = on_limit, on_event
        self.agreement = _Agreement(model, group)
        self.steps = 0
        self.observations: dict[int, int] = {}  # micro-batch size -> the largest peak (bytes)
        self.records: list[dict[str, Any]] = []  # every limit record, oldest first
        self._warned_inexact = False

    # -- helpers --
    def _emit(self, event: dict[str, Any]) -> None:
        if self.on_event:
            self.on_event(event)

    def _run_micro(self, chunk: Any, loss_fn: LossFn, weight: float, n: int) -> str | None:
        """Forward + backward of one micro-batch; None, or the phase that ran out of memory."""
        ctx: Any = contextlib.nullcontext()
        if _is_ddp(self.model):
            ddp = cast(torch.nn.parallel.DistributedDataParallel, self.model)
            ctx = ddp.no_sync()
            # no buffer broadcast inside the forward (done once per attempt instead): a forward
            # that raised skipped DDP's post-forward and left this flag True on that rank only,
            # which would make its next forward broadcast alone
            ddp.require_forward_param_sync = False
        phase = "forward"
        if self.memory is not None:
            self.memory.reset()
        try:
            with ctx:
                loss = loss_fn(self.model, chunk)
                phase = "backward"
                scaled = loss * weight
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            self._loss_sum = self._loss_sum + loss.detach() * weight
        except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled
            if not is_oom(exc):
                raise
            _release(exc, self.steps, self.agreement.rank)
            return phase
        if self.memory is not None:
            peak = self.memory.peak()
            if peak is not None:
                self.observations[n] = max(self.observations.get(n, 0), int(peak))
        return None

    def _attempt(self, batch: Any, per_step_batch: int, sizes: list[int],
                 loss_fn: LossFn) -> tuple[list[int], int, dict[str, Any] | None] | None:
        """Runs every micro-batch; None when the step's gradients are complete on every rank,
        else (failed_ranks, agreed_limit, this rank's failure info or None)."""
        self.optimizer.zero_grad(set_to_none=True)
        self.model.zero_grad(set_to_none=True)
        self._loss_sum = torch.zeros(())
        self.agreement.broadcast_buffers(self.model)
        fixed = self.memory.current() if self.memory is not None else None
        chunks = split_batch(batch, sizes)
        micro = max(sizes)
        for i, chunk in enumerate(chunks):
            phase = self._run_micro(chunk, loss_fn, sizes[i] / float(per_step_batch), sizes[i])
            proposal, info = micro, None
            if phase is not None:
                self.optimizer.zero_grad(set_to_none=True)
                self.model.zero_grad(set_to_none=True)
                capacity = self.memory.capacity() if self.memory is not None else None
                _empty_cache()
                halve = self._guessed_this_step
                proposal, basis, fit_fixed, slope = next_limit(
                    micro, self.observations, fixed, capacity, self.headroom, halve)
                info = {"phase": phase, "basis": basis, "fixed_bytes": fit_fixed,
                        "per_sample_bytes": slope, "capacity_bytes": capacity}
                self._emit({"event": "oom", "rank": self.agreement.rank, "step": self.steps,
                            "phase": phase, "micro_batch": micro, "micro_batch_index": i})
            failed, limit, failed_ranks = self.agreement.exchange(phase is not None, proposal,
                                                                  per_step_batch)
            if failed:
                return failed_ranks, limit, info
        return None

    def plan(self, per_step_batch: int) -> tuple[list[int], bool]:
        """(sizes, exact) for a per-step batch at the current micro-batch."""
        return micro_batch_sizes(per_step_batch, self.micro_batch, self.min_micro_batch)

    # -- the step --
    def step(self, batch: Any, loss_fn: LossFn) -> StepResult:
        """One optimizer step over `batch` (the per-step batch of this rank).

        `loss_fn(model, micro_batch)` returns the loss of one micro-batch as the mean over its
        samples; it is weighted by the micro-batch's share of the samples, so the gradients are
        those of the mean over the whole per-step batch. Returns a :class:`StepResult`.
        """
        per_step_batch = batch_size_of(batch)
        self.steps += 1
        snapshot = _Snapshot(self.model, self.restore_buffers)
        self._guessed_this_step = False
        retries = 0
        while True:
            sizes, exact = self.plan(per_step_batch)
            if not exact and not self._warned_inexact:
                self._warned_inexact = True
                msg = ("no divisor of the per-step batch %d between %d and %d: micro-batches of "
                       "%s, each loss weighted by its share of the samples (exact for per-sample "
                       "mean losses, not for batch statistics)"
                       % (per_step_batch, self.min_micro_batch, self.micro_batch, sizes))
                warnings.warn(msg, InexactAccumulationWarning, stacklevel=2)
                self._emit({"event": "inexact", "step": self.steps, "sizes": sizes,
                            "message": msg})
            outcome = self._attempt(batch, per_step_batch, sizes, loss_fn)
            if outcome is None:
                break
            failed_ranks, limit, info = outcome
            failed_micro = max(sizes)
            self._loss_sum = None
            self.optimizer.zero_grad(set_to_none=True)
            self.model.zero_grad(set_to_none=True)
            _empty_cache()
            if limit < 1 or retries >= self.max_retries:
                raise _gave_up(
                    "oomless: out of memory at micro-batch %d on rank(s) %s, step %d, and %s"
                    % (failed_micro, failed_ranks, self.steps,
                       "no smaller micro-batch is left" if limit < 1
                       else "%d re-runs did not fit" % retries))
            snapshot.restore()
            self.micro_batch = limit
            new_sizes, new_exact = self.plan(per_step_batch)
            record = _limit_record(self.agreement, self.steps, per_step_batch, failed_micro,
                                   limit, new_sizes, new_exact, failed_ranks, info,
                                   self.observations)
            self.records.append(record)
            self._emit(dict(record, event="limit"))
            if self.on_limit:
                self.on_limit(record)
            # a measured guess that fails again in the same step is not trusted twice
            if (info or {}).get("basis") == "measured":
                self._guessed_this_step = True
            retries += 1
        self.agreement.sync_gradients(self.model)
        loss = self._loss_sum
        self._loss_sum = None
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)
        if self.before_step:
            self.before_step(self.model, self.optimizer)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return StepResult(loss, max(sizes), len(sizes), retries, exact)


# ---- what filled the memory (the oom_snapshot event) -------------------------------------------

from ._oom_snapshot import (install_from_env, record_oom, set_snapshot_source,  # noqa: E402
                            summarize_snapshot, tag_modules)

install_from_env(is_oom)
