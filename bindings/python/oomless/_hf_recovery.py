"""The Hugging Face Trainer side of OOM recovery (imported by :mod:`oomless.hf` on first use).

See :func:`oomless.hf.recover_oom` for the approach and why it is a stop and a relaunch.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any, NoReturn

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ._agreement import _is_ddp, _StopAgreement
from ._cuda_memory import Memory
from ._step_state import _empty_cache, _gave_up, _release
# through oomless.torch, whose import installs the out-of-memory hook of `oomless run --events`
from .torch import OomStop, exit_for_relaunch, is_oom, rng_state, set_rng_state


class OomRecoveryCallback(TrainerCallback):
    """Catches OOM in ``Trainer.training_step``, agrees across ranks, stops every rank cleanly.

    Built by :func:`oomless.hf.recover_oom`, which also wraps the trainer's ``training_step``.
    """

    def __init__(self, trainer: Any, memory: Memory | None = None, headroom: float = 0.1,
                 save: bool = True) -> None:
        self.trainer, self.memory, self.headroom, self.save = trainer, memory, headroom, save
        self.stop_agreement: _StopAgreement | None = None
        self.records: list[dict[str, Any]] = []
        self._rng: dict[str, Any] | None = None
        self._first_micro = True
        self._orig = trainer.training_step
        trainer.training_step = self._training_step

    # -- TrainerCallback --
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        # the first micro-batch of an optimizer step: what a relaunch must find again
        self._rng = rng_state()
        self._first_micro = True

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._first_micro = True

    # -- the wrapped training_step --
    def _micro_and_step(self) -> tuple[int, int]:
        args = self.trainer.args
        micro = int(args.per_device_train_batch_size)
        return micro, micro * int(args.gradient_accumulation_steps)

    def _training_step(self, model: Any, inputs: Any, *rest: Any, **kwargs: Any) -> Any:
        ddp = model if _is_ddp(model) else None
        if self.stop_agreement is None:
            # first call: every rank is here at the same moment (a gloo group may be created)
            self.stop_agreement = _StopAgreement(ddp, self.memory, self.headroom)
        agree = self.stop_agreement
        micro, per_step = self._micro_and_step()
        first, self._first_micro = self._first_micro, False
        ctx = contextlib.nullcontext()
        if ddp is not None:
            if first:
                agree.agreement.broadcast_buffers(ddp)
            # every backward local (see oomless.torch): the last micro-batch's gradients are
            # averaged below, once every rank said it did not run out of memory
            ctx = ddp.no_sync()
            ddp.require_forward_param_sync = False
        phase, loss = None, None
        agree.start_micro(first)
        try:
            with ctx:
                loss = self._orig(model, inputs, *rest, **kwargs)
            agree.ok_micro(micro)
        except Exception as exc:  # noqa: BLE001 - only out-of-memory is handled
            if not is_oom(exc):
                raise
            _release(exc, self.trainer.state.global_step + 1, agree.agreement.rank)
            phase = "training_step"
        record = agree.decide(phase, micro, per_step, self.trainer.state.global_step + 1)
        if record is not None:
            loss = None
            self._stop(model, record)
        if ddp is not None and self.trainer.accelerator.sync_gradients:
            agree.agreement.sync_gradients(ddp)
        return loss

    def _stop(self, model: Any, record: dict[str, Any]) -> NoReturn:
        """Every rank: drop the step, put the RNGs back to its start, save, raise OomStop."""
        trainer = self.trainer
        self.records.append(record)
        if record["micro_batch"] < 1:
            raise _gave_up("oomless: out of memory at micro-batch 1 on rank(s) %s: nothing "
                            "smaller is left" % (record["failed_ranks"],))
        model.zero_grad(set_to_none=True)
        if trainer.optimizer is not None:
            trainer.optimizer.zero_grad(set_to_none=True)
        _empty_cache()
        if self._rng is not None:
            set_rng_state(self._rng)
        checkpoint = None
        if self.save:
            # the model and optimizer are still those after the last completed step (the
            # optimizer of this step has not run); the saved RNG state is that of the step's
            # start, so a resumed run draws what this one would have drawn
            trainer._save_checkpoint(trainer.model_wrapped, trial=None)
            checkpoint = os.path.join(trainer.args.output_dir,
                                      "%s-%d" % (PREFIX_CHECKPOINT_DIR, trainer.state.global_step))
        raise OomStop(record, checkpoint)


def train(trainer: Any, exit: bool = True, resume: str | None = "auto",
          **train_kwargs: Any) -> Any:
    """``trainer.train()``, resuming from the newest checkpoint when there is one, and exiting
    for a relaunch when the ranks stopped on an OOM (see :func:`oomless.hf.train`)."""
    if resume == "auto" and "resume_from_checkpoint" not in train_kwargs:
        out = trainer.args.output_dir
        last = get_last_checkpoint(out) if out and os.path.isdir(out) else None
        if last:
            train_kwargs["resume_from_checkpoint"] = last
    try:
        return trainer.train(**train_kwargs)
    except OomStop as stop:
        if not exit:
            raise
        accum = stop.record["per_step_batch"] // max(stop.micro_batch, 1)
        exit_for_relaunch(stop, grad_accum=accum)
