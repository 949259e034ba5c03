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
import contextlib
import json
import math
import os
import sys
import time
import traceback
import warnings

import torch
import torch.distributed as dist

__all__ = ["TrainStep", "StepResult", "OomStop", "InexactAccumulationWarning", "CudaMemory",
           "RELAUNCH_EXIT_CODE", "is_oom", "micro_batch_sizes", "next_limit", "calibration_line",
           "append_calibration", "split_batch", "batch_size_of", "relaunch_message",
           "exit_for_relaunch", "rng_state", "set_rng_state", "record_oom", "summarize_snapshot",
           "set_snapshot_source", "tag_modules"]

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

    def __init__(self, record, checkpoint=None):
        self.record = record
        self.micro_batch = record["micro_batch"]
        self.checkpoint = checkpoint
        super().__init__("out of memory at step %s (rank(s) %s): stop for a relaunch at "
                         "micro-batch %d" % (record.get("step"), record.get("failed_ranks"),
                                             record["micro_batch"]))


def is_oom(exc):
    """Whether an exception is a device out-of-memory error."""
    if isinstance(exc, _OOM_TYPE):
        return True
    return isinstance(exc, RuntimeError) and any(t in str(exc) for t in _OOM_TEXTS)


# ---- splitting a batch --------------------------------------------------------------------

def batch_size_of(batch):
    """The number of samples in a batch: dim 0 of its tensors (nested in tuples, lists, dicts).

    Raises ValueError when the batch holds no tensor or tensors of different lengths.
    """
    sizes = set()

    def walk(x):
        if torch.is_tensor(x):
            if x.dim() == 0:
                raise ValueError("a 0-d tensor in the batch cannot be split into micro-batches")
            sizes.add(x.shape[0])
        elif isinstance(x, dict):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(batch)
    if len(sizes) != 1:
        raise ValueError("the batch must hold tensors with one common first dimension, found %s"
                         % (sorted(sizes) or "no tensor"))
    return sizes.pop()


def split_batch(batch, sizes):
    """The batch cut along dim 0 into chunks of `sizes` (views, nothing copied); non-tensor
    leaves are repeated in every chunk."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]

    def cut(x, start, n):
        if torch.is_tensor(x):
            return x.narrow(0, start, n)
        if isinstance(x, dict):
            return type(x)((k, cut(v, start, n)) for k, v in x.items())
        if isinstance(x, tuple) and hasattr(x, "_fields"):  # a namedtuple
            return type(x)(*(cut(v, start, n) for v in x))
        if isinstance(x, (list, tuple)):
            return type(x)(cut(v, start, n) for v in x)
        return x

    return [cut(batch, s, n) for s, n in zip(starts, sizes)]


def micro_batch_sizes(per_step_batch, limit, min_micro_batch=1):
    """How to cut a per-step batch when micro-batches may hold at most `limit` samples.

    Returns ``(sizes, exact)``: the largest divisor of `per_step_batch` that is at most `limit`
    and at least `min_micro_batch`, repeated (exact); when there is none, ``ceil(batch / limit)``
    micro-batches as equal as possible (sizes differ by one at most; exact is False).
    """
    if per_step_batch < 1 or limit < 1:
        raise ValueError("the per-step batch (%r) and the limit (%r) must be at least 1"
                         % (per_step_batch, limit))
    limit = min(limit, per_step_batch)
    for d in range(limit, max(min_micro_batch, 1) - 1, -1):
        if per_step_batch % d == 0:
            return [d] * (per_step_batch // d), True
    n = -(-per_step_batch // limit)
    base, extra = divmod(per_step_batch, n)
    return [base + 1] * extra + [base] * (n - extra), False


def _line(observations, fixed):
    """(fixed, per_sample) from {micro: peak}: fitted through the two largest sizes, or through
    `fixed` (the memory held before the micro-batch) when one size was seen."""
    sizes = sorted(observations, reverse=True)
    if len(sizes) >= 2:
        n1, n2 = sizes[0], sizes[1]
        slope = (observations[n1] - observations[n2]) / float(n1 - n2)
        if slope > 0:
            return observations[n1] - slope * n1, slope
    if fixed is None or not sizes:
        return None, None
    n = sizes[0]
    return fixed, max(observations[n] - fixed, 0) / float(n)


def next_limit(failed_micro, observations=None, fixed=None, capacity=None, headroom=0.1,
               halve=False):
    """The largest micro-batch to try after an OOM at `failed_micro`, and how it was chosen.

    `observations` maps micro-batch sizes that ran to their peak bytes; `fixed` is the memory held
    at the start of the step; `capacity` what the process could hold when it failed. Returns
    ``(limit, basis, fixed_bytes, per_sample_bytes)``; basis is "measured" or "halved". The limit
    is always below `failed_micro` and at least 1 (0 when `failed_micro` is 1: nothing smaller).
    """
    if failed_micro <= 1:
        return 0, "halved", None, None
    fit_fixed, slope = (None, None)
    if observations and capacity and not halve:
        fit_fixed, slope = _line(observations, fixed)
    if slope is not None and capacity > fit_fixed:
        # the failure itself: the failed micro-batch needed more than the capacity
        slope = max(slope, (capacity - fit_fixed) / float(failed_micro))
        room = capacity * (1.0 - headroom) - fit_fixed
        limit = int(math.floor(room / slope)) if slope > 0 else failed_micro - 1
        return max(1, min(limit, failed_micro - 1)), "measured", fit_fixed, slope
    return max(1, failed_micro // 2), "halved", fit_fixed, slope


# ---- memory measurement -------------------------------------------------------------------------

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

    def __init__(self, device=None):
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None \
            else torch.device(device)

    def reset(self):
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self):
        return torch.cuda.max_memory_allocated(self.device)

    def current(self):
        return torch.cuda.memory_allocated(self.device)

    def capacity(self):
        free, _total = torch.cuda.mem_get_info(self.device)
        held = free + torch.cuda.memory_reserved(self.device)
        fraction = getattr(torch.cuda, "get_per_process_memory_fraction", None)
        if fraction is not None:  # torch.cuda.get_per_process_memory_fraction: torch >= 2.8
            share = fraction(self.device)
            if 0 < share < 1:
                total = torch.cuda.get_device_properties(self.device).total_memory
                held = min(held, int(share * total))
        return held


def _sharded(model):
    """Whether the model is FSDP-sharded (its forward all-gathers parameters)."""
    try:
        from torch.distributed import fsdp
    except ImportError:
        return False
    kinds = tuple(k for k in (getattr(fsdp, "FullyShardedDataParallel", None),
                              getattr(fsdp, "FSDPModule", None)) if isinstance(k, type))
    return bool(kinds) and any(isinstance(m, kinds) for m in model.modules())


def _default_memory(model):
    try:
        p = next(model.parameters())
    except StopIteration:
        return None
    return CudaMemory(p.device) if p.device.type == "cuda" else None


# ---- state that a re-run restores -------------------------------------------------------------

class _Snapshot:
    """RNG states (CPU, the CUDA devices in use) and, optionally, the model's buffers."""

    def __init__(self, model, buffers):
        self.cpu = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        self.buffers = [(b, b.detach().clone()) for b in model.buffers()] if buffers else []

    def restore(self):
        torch.set_rng_state(self.cpu)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        with torch.no_grad():
            for live, saved in self.buffers:
                live.copy_(saved)


def _release(exc, step=None, rank=None):
    """Drops the tensors an exception's traceback keeps alive (the forward's locals), after
    recording what filled the memory while they are still there (:func:`record_oom`: an
    ``oom_snapshot`` event when ``oomless run --events`` started the job)."""
    record_oom(exc, step=step, rank=rank)
    traceback.clear_frames(exc.__traceback__)
    exc.__traceback__ = None


def _gave_up(message):
    """The out-of-memory error raised when no smaller micro-batch is left: the OOMs that led
    here were recorded when caught, so the exception hook does not record this one (taken after
    the step's tensors were freed, its snapshot would say little)."""
    exc = _OOM_TYPE(message)
    exc._oomless_recorded = True
    return exc


def _empty_cache():
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


# ---- agreement across ranks ---------------------------------------------------------------

def _is_ddp(model):
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


class _Agreement:
    """The per-micro-batch exchange of every rank's outcome (see the module documentation)."""

    def __init__(self, model=None, group=None):
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

    def exchange(self, failed, proposal, batch):
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
        v = v.cpu().tolist()
        if v[2] != -v[3]:
            raise ValueError("ranks have different per-step batches (%d to %d): every rank must "
                             "step on the same number of samples" % (-v[3], v[2]))
        return bool(v[0]), -v[1], [r for r in range(self.world) if v[4 + r]]

    def broadcast_buffers(self, model):
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

    def sync_gradients(self, model):
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


def _limit_record(agreement, step, per_step_batch, failed_micro, limit, sizes, exact,
                  failed_ranks, info, observations):
    """The record of one agreement on a new micro-batch (its shape: the module documentation)."""
    info = info or {}

    def whole(x):
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


# ---- the training step ------------------------------------------------------------------------

class StepResult:
    """What :meth:`TrainStep.step` did: the loss (a detached tensor: the per-step mean when the
    loss function returns per-sample means), the micro-batch, how many, the re-runs, exactness."""

    __slots__ = ("loss", "micro_batch", "micro_batches", "retries", "exact")

    def __init__(self, loss, micro_batch, micro_batches, retries, exact):
        self.loss, self.micro_batch, self.micro_batches = loss, micro_batch, micro_batches
        self.retries, self.exact = retries, exact

    def __repr__(self):
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

    def __init__(self, model, optimizer, micro_batch, *, min_micro_batch=1, memory=None,
                 headroom=0.1, max_retries=16, restore_buffers=True, scaler=None,
                 before_step=None, on_limit=None, on_event=None, group=None):
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
        self.observations = {}     # micro-batch size -> the largest peak seen (bytes)
        self.records = []          # every limit record, oldest first
        self._warned_inexact = False

    # -- helpers --
    def _emit(self, event):
        if self.on_event:
            self.on_event(event)

    def _run_micro(self, chunk, loss_fn, weight, n):
        """Forward + backward of one micro-batch; None, or the phase that ran out of memory."""
        ctx = contextlib.nullcontext()
        if _is_ddp(self.model):
            ctx = self.model.no_sync()
            # no buffer broadcast inside the forward (done once per attempt instead): a forward
            # that raised skipped DDP's post-forward and left this flag True on that rank only,
            # which would make its next forward broadcast alone
            self.model.require_forward_param_sync = False
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

    def _attempt(self, batch, per_step_batch, sizes, loss_fn):
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

    def plan(self, per_step_batch):
        """(sizes, exact) for a per-step batch at the current micro-batch."""
        return micro_batch_sizes(per_step_batch, self.micro_batch, self.min_micro_batch)

    # -- the step --
    def step(self, batch, loss_fn):
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


# ---- the calibration store --------------------------------------------------------------------

def calibration_line(record, gpu, command, workload="", extra_fixed_bytes=0):
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


def append_calibration(line, path=None):
    """Appends one calibration line (from :func:`calibration_line`) to the store; returns the
    path. Through the library (:mod:`oomless.calibration`), the store's one writer: the line
    whole or nothing, under its lock, on a fresh line, never through a symbolic link or into a
    FIFO; the default place private, a relative ``$XDG_CACHE_HOME`` ignored."""
    from . import calibration
    return calibration.save(line, path)


# ---- stopping for a relaunch ------------------------------------------------------------------

def relaunch_message(stop, grad_accum=None):
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


def exit_for_relaunch(stop, grad_accum=None, code=RELAUNCH_EXIT_CODE, events_path=None):
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


class _StopAgreement:
    """What the framework integrations share: catch OOM in a micro-batch, exchange outcomes
    every micro-batch, and agree on the micro-batch of the relaunch (a divisor of the per-step
    batch, since ``oomless run`` relaunches with equal micro-batches)."""

    def __init__(self, model=None, memory=None, headroom=0.1, group=None):
        self.agreement = _Agreement(model, group)
        self.memory, self.headroom = memory, headroom
        self.observations = {}
        self.fixed = None

    def start_micro(self, first):
        """Before a micro-batch; `first`: the first of an optimizer step."""
        if self.memory is not None:
            if first or self.fixed is None:
                self.fixed = self.memory.current()
            self.memory.reset()

    def ok_micro(self, micro):
        if self.memory is not None:
            peak = self.memory.peak()
            if peak is not None:
                self.observations[micro] = max(self.observations.get(micro, 0), int(peak))

    def decide(self, failed_phase, micro, per_step_batch, step):
        """Exchanges this rank's outcome; returns None (every rank went on) or the limit record
        of the relaunch (micro-batch agreed by every rank; 0 when nothing smaller is left)."""
        proposal, info = micro, {}
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


def rng_state():
    """Every RNG a training step may draw from: Python's, NumPy's (when installed), torch's CPU
    and CUDA generators."""
    import random
    state = {"python": random.getstate(), "cpu": torch.get_rng_state(),
             "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None}
    try:
        import numpy
        state["numpy"] = numpy.random.get_state()
    except ImportError:
        state["numpy"] = None
    return state


def set_rng_state(state):
    """Restores what :func:`rng_state` returned."""
    import random
    random.setstate(state["python"])
    torch.set_rng_state(state["cpu"])
    if state["cuda"] is not None:
        torch.cuda.set_rng_state_all(state["cuda"])
    if state["numpy"] is not None:
        import numpy
        numpy.random.set_state(state["numpy"])


# ---- what filled the memory (the oom_snapshot event) -------------------------------------------

from ._oom_snapshot import (install_from_env, record_oom, set_snapshot_source,  # noqa: E402
                            summarize_snapshot, tag_modules)

install_from_env(is_oom)
