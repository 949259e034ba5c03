"""The Lightning side of OOM recovery (imported by :mod:`oomless.lightning` on first use).

See :class:`oomless.lightning.OomRecovery` for the approach and why it is a stop and a relaunch.
"""
from __future__ import annotations

import os
from typing import Any, Callable

from lightning.pytorch.callbacks import Callback

from ._agreement import _is_ddp, _StopAgreement
from ._cuda_memory import Memory
from ._step_state import _empty_cache, _gave_up, _release
# through oomless.torch, whose import installs the out-of-memory hook of `oomless run --events`
from .torch import (OomStop, batch_size_of, exit_for_relaunch, is_oom, rng_state,
                    set_rng_state)

CHECKPOINT_NAME = "oomless-recovery.ckpt"


def _progress_counters(checkpoint: Any) -> list[dict[str, Any]] | None:
    """The batch counters of the fit loop in a checkpoint (in micro-batches), or None."""
    try:
        progress = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]
    except (KeyError, TypeError):
        return None
    return [progress[k] for k in ("total", "current") if isinstance(progress.get(k), dict)]


class OomRecovery(Callback):
    """Stops every rank cleanly at the step that ran out of memory, for ``oomless run``.

    Approach: **a clean stop and a relaunch**. Lightning's loop cannot run a step again at
    another micro-batch: the micro-batch is the DataLoader's ``batch_size``, fixed for the epoch,
    and the loop counts micro-batches (``batch_idx``, ``accumulate_grad_batches``) in its
    progress, its schedulers and its checkpoints. What a callback can do, and this one does:

    - ``training_step`` and ``backward`` of the LightningModule are wrapped (on fit start) so an
      OOM in the forward or the backward is caught and its tensors released;
    - in DDP every micro-batch runs without gradient sync, and all ranks exchange their outcome
      after each micro-batch (after ``backward``, or after a ``training_step`` that failed or
      returned None), never inside a collective; the gradients are averaged in
      ``on_before_optimizer_step``, once every rank has said it did not run out of memory. A
      rank that failed in DDP's synchronised backward would otherwise leave the others waiting
      in the gradient all-reduce (the hazard described in :mod:`oomless.torch`);
    - if any rank failed, every rank raises :class:`oomless.torch.OomStop`; in
      ``on_exception`` the step's gradients are dropped, the RNGs put back to the step's start
      and ``<dirpath>/oomless-recovery.ckpt`` saved (``trainer.save_checkpoint``, every rank
      taking part): the weights and optimizer are those of the last completed step.

    The script then calls :func:`oomless.lightning.fit`, which exits with status 75 after
    printing the stop for ``oomless run``; the relaunch at the agreed micro-batch resumes from
    that checkpoint. Its counters are in micro-batches of the old size: :meth:`on_load_checkpoint`
    rescales them to the new micro-batch, so the epoch has the right number of steps.
    Where the data resumes is Lightning's rule for a checkpoint taken inside an epoch: a resumable
    DataLoader (with ``state_dict``/``load_state_dict``) continues, a plain one starts the epoch's
    data again (Lightning warns); a stop at an epoch's first step resumes exactly either way.

    micro_batch: the DataLoader's batch size (default ``$OOMLESS_BATCH_SIZE``, else the first
        batch's size). dirpath: where the checkpoint goes (default ``trainer.default_root_dir``).
    memory: a measurement object (:class:`oomless.torch.CudaMemory` protocol); None measures CUDA
        when the module is on it. save: whether to save the checkpoint.
    """

    def __init__(self, micro_batch: int | None = None, dirpath: str | None = None,
                 memory: Memory | None = None, headroom: float = 0.1, save: bool = True) -> None:
        env = os.environ.get("OOMLESS_BATCH_SIZE")
        self.micro_batch = int(micro_batch) if micro_batch else int(env) if env else None
        self.dirpath, self.memory, self.headroom, self.save = dirpath, memory, headroom, save
        self.records: list[dict[str, Any]] = []
        # made at the first batch, when every rank is there (its group may be created)
        self.stop_agreement: Any = None
        self._orig: tuple[Any, Any] | None = None
        self._rng: dict[str, Any] | None = None
        self._failed_phase: str | None = None
        self._accumulate: int | None = None
        self._stopping = False

    # -- setup --
    def checkpoint_path(self, trainer: Any) -> str:
        return os.path.join(self.dirpath or trainer.default_root_dir, CHECKPOINT_NAME)

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if not pl_module.automatic_optimization:
            raise ValueError("oomless.lightning.OomRecovery needs automatic optimization")
        if self.memory is None and pl_module.device.type == "cuda":
            from .torch import CudaMemory
            self.memory = CudaMemory(pl_module.device)
        self._orig = (pl_module.training_step, pl_module.backward)
        pl_module.training_step = self._wrap_training_step(trainer, pl_module.training_step)
        pl_module.backward = self._wrap_backward(trainer, pl_module.backward)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self._orig is not None:
            # the instance attributes shadowed the class's methods: remove them
            for name in ("training_step", "backward"):
                pl_module.__dict__.pop(name, None)
            self._orig = None

    def _ddp(self, trainer: Any) -> Any:
        model = getattr(trainer.strategy, "model", None)
        return model if _is_ddp(model) else None

    # -- per micro-batch --
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        ddp = self._ddp(trainer)
        if self.stop_agreement is None:
            # the first batch: every rank is here at the same moment (a gloo group may be made)
            self.stop_agreement = _StopAgreement(ddp, self.memory, self.headroom)
        if self.micro_batch is None:
            self.micro_batch = batch_size_of(batch)
        self._accumulate = max(int(trainer.accumulate_grad_batches), 1)
        first = batch_idx % max(int(trainer.accumulate_grad_batches), 1) == 0
        if first:
            self._rng = rng_state()
            if ddp is not None:
                self.stop_agreement.agreement.broadcast_buffers(ddp)
        if ddp is not None:
            # no gradient sync in any backward, no buffer broadcast in any forward (see
            # oomless.torch); Lightning's own no_sync for accumulation nests inside this
            ddp.require_backward_grad_sync = False
            ddp.require_forward_param_sync = False
        self._failed_phase = None
        self.stop_agreement.start_micro(first)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        ddp = self._ddp(trainer)
        if ddp is not None:
            ddp.require_backward_grad_sync = True

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        ddp = self._ddp(trainer)
        if ddp is not None:
            self.stop_agreement.agreement.sync_gradients(ddp)

    def _decide(self, trainer: Any, phase: str | None) -> None:
        micro = int(self.micro_batch or 0)  # set by on_train_batch_start
        per_step = micro * max(int(trainer.accumulate_grad_batches), 1)
        record = self.stop_agreement.decide(phase, micro, per_step, trainer.global_step + 1)
        if record is None:
            return
        self.records.append(record)
        if record["micro_batch"] < 1:
            raise _gave_up("oomless: out of memory at micro-batch 1 on rank(s) %s: nothing "
                            "smaller is left" % (record["failed_ranks"],))
        raise OomStop(record)

    def _wrap_training_step(self, trainer: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
        def training_step(*args: Any, **kwargs: Any) -> Any:
            try:
                out = fn(*args, **kwargs)
            except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled
                if not is_oom(exc):
                    raise
                _release(exc, trainer.global_step + 1, self.stop_agreement.agreement.rank)
                out = None
                self._failed_phase = "forward"
            if out is None:
                # no backward follows: the exchange of this micro-batch happens here
                self._decide(trainer, self._failed_phase)
            return out
        return training_step

    def _wrap_backward(self, trainer: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
        def backward(loss: Any, *args: Any, **kwargs: Any) -> None:
            phase = None
            try:
                fn(loss, *args, **kwargs)
                self.stop_agreement.ok_micro(self.micro_batch)
            except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled
                if not is_oom(exc):
                    raise
                _release(exc, trainer.global_step + 1, self.stop_agreement.agreement.rank)
                phase = "backward"
            self._decide(trainer, phase)
        return backward

    # -- the stop --
    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        if not isinstance(exception, OomStop):
            return
        pl_module.zero_grad(set_to_none=True)
        for opt in trainer.optimizers:
            opt.zero_grad(set_to_none=True)
        _empty_cache()
        if self._rng is not None:
            set_rng_state(self._rng)
        if self.save:
            path = self.checkpoint_path(trainer)
            self._stopping = True
            try:
                trainer.save_checkpoint(path)
            finally:
                self._stopping = False
            exception.checkpoint = path

    # -- checkpoints --
    def state_dict(self) -> dict[str, Any]:
        return {"micro_batch": self.micro_batch, "accumulate_grad_batches": self._accumulate,
                "oom_stop": self._stopping}

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """Puts the loop's micro-batch counters of a recovery checkpoint at the failed step's
        start and in micro-batches of the new size (called before the loops are restored from
        the same dict)."""
        state = checkpoint.get("callbacks", {}).get(self.state_key) or {}
        counters = _progress_counters(checkpoint)
        if not state.get("oom_stop") or not counters:
            return
        old, accum = state.get("micro_batch") or 0, state.get("accumulate_grad_batches") or 1
        new = self.micro_batch or old
        total, current = counters if len(counters) == 2 else (counters[0], None)
        # micro-batches of the failed step that completed before the failure do not count
        partial = current.get("completed", 0) % accum if current else 0
        for c in counters:
            done = (c.get("completed", 0) - partial) * old
            if done % new:
                raise ValueError("cannot resume: %d samples of micro-batch %d are not a whole "
                                 "number of micro-batches of %d" % (done, old, new))
            for k in ("ready", "started", "processed", "completed"):
                if k in c:
                    c[k] = done // new


def fit(trainer: Any, model: Any, exit: bool = True, ckpt_path: str | None = "auto",
        **fit_kwargs: Any) -> Any:
    """``trainer.fit(model, ...)``, resuming from the recovery checkpoint when there is one, and
    exiting for a relaunch when the ranks stopped on an OOM (see :func:`oomless.lightning.fit`)."""
    callback = next((c for c in trainer.callbacks if isinstance(c, OomRecovery)), None)
    if ckpt_path == "auto":
        path = callback.checkpoint_path(trainer) if callback else None
        ckpt_path = path if path and os.path.exists(path) else None
    try:
        return trainer.fit(model, ckpt_path=ckpt_path, **fit_kwargs)
    except OomStop as stop:
        if not exit:
            raise
        accum = stop.record["per_step_batch"] // max(stop.micro_batch, 1)
        exit_for_relaunch(stop, grad_accum=accum)


__all__ = ["OomRecovery", "fit", "CHECKPOINT_NAME"]
