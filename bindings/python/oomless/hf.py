"""Hugging Face Transformers helpers: turn an oomless plan into TrainingArguments keywords.

    plan = oomless.plan(model="llama-3.1-8b", method="lora", seq=2048)
    args = transformers.TrainingArguments(output_dir="out", **oomless.hf.training_arguments(plan))
"""

# oomless optimizer names -> TrainingArguments.optim values (transformers' OptimizerNames).
_OPTIM = {
    "adamw": "adamw_torch",
    "adamw-fused": "adamw_torch_fused",
    "adamw-8bit": "adamw_bnb_8bit",
    "adafactor": "adafactor",
    "sgd": "sgd",
    "sgd-momentum": "sgd",
    "lion": "lion_32bit",
}


def _plan(doc):
    """Accepts the whole plan document or its "plan" object."""
    plan = doc.get("plan", doc)
    for key in ("batch_size", "grad_accum"):
        if key not in plan:
            raise KeyError("plan has no %r: pass the document oomless.plan() returns" % key)
    return plan


def training_arguments(doc):
    """Keyword arguments for ``transformers.TrainingArguments`` from a plan.

    Sets the per-device batch size, gradient accumulation, mixed precision (bf16/fp16),
    gradient checkpointing, the optimizer and, for a chunked loss, ``use_liger_kernel`` (the
    Trainer's switch for Liger-Kernel's fused linear + cross-entropy; the attention kernel is a
    ``from_pretrained(attn_implementation=...)`` argument, ``plan["plan"]["attention"]``).
    `max_seq_length` is not a TrainingArguments
    field: pass ``plan["plan"]["seq_len"]`` to your tokenizer or SFT config.
    """
    plan = _plan(doc)
    precision = plan.get("precision", "fp32")
    kwargs = {
        "per_device_train_batch_size": int(plan["batch_size"]),
        "gradient_accumulation_steps": int(plan["grad_accum"]),
        "bf16": precision in ("bf16", "amp-bf16"),
        "fp16": precision in ("fp16", "amp-fp16"),
        "gradient_checkpointing": plan.get("checkpointing", "none") != "none",
    }
    optim = _OPTIM.get(plan.get("optimizer", ""))
    if optim:
        kwargs["optim"] = optim
    if plan.get("loss") == "chunked":
        kwargs["use_liger_kernel"] = True
    return kwargs


# ---- out-of-memory recovery -------------------------------------------------------------------

def recover_oom(trainer, memory=None, headroom=0.1, save=True):
    """Makes a ``transformers.Trainer`` stop every rank cleanly on an OOM, for a relaunch.

    Approach: **a clean stop and a relaunch**, not an in-place re-run. The Trainer owns the loop
    and cannot run a step again at another micro-batch: the micro-batch is the DataLoader's
    ``per_device_train_batch_size``, fixed when the loader is built, the number of micro-batches
    per step is ``gradient_accumulation_steps``, which also sizes the LR schedule and the
    resume arithmetic, and the micro-batches of a step are fetched before the first one runs.
    What can be done from outside the loop, and is done here:

    - ``trainer.training_step`` is wrapped: an OOM inside it (forward or backward) is caught
      and its tensors released;
    - in DDP every micro-batch runs under ``no_sync()`` and all ranks exchange their outcome
      after each one (the hazard and the exchange are those of :mod:`oomless.torch`: a rank that
      fails in the synchronised backward of the last micro-batch would leave the others waiting
      in DDP's gradient all-reduce); the last micro-batch's gradients are averaged after the
      exchange, so that every rank learns of an OOM anywhere before any collective can block;
    - if any rank failed, every rank drops the step's gradients, puts its RNGs back to the
      step's start, saves a checkpoint ``checkpoint-<last completed step>`` (the model and
      optimizer are those of the last completed step: this step's optimizer has not run) and
      raises :class:`oomless.torch.OomStop`, with the micro-batch every rank agreed on (from
      measured peaks on CUDA, else half).

    :func:`train` then prints the stop (``torch.OutOfMemoryError`` and the step, which
    ``oomless run`` recognises, and an ``OOMLESS_RECOVERY {json}`` line with the agreed
    micro-batch) and exits with status 75. ``oomless run`` relaunches the command at a smaller
    ``{batch}`` with the matching ``{accum}`` (same effective batch), and :func:`train` resumes
    from the newest checkpoint: the Trainer skips the samples of the completed steps, so the
    resumed run sees the samples the stopped step would have seen. Returns the callback (also
    added to the trainer). `memory`: a measurement object (:class:`oomless.torch.CudaMemory`
    protocol); None measures CUDA when the Trainer runs on it.
    """
    from ._hf_recovery import OomRecoveryCallback
    if memory is None and getattr(trainer.args.device, "type", "cpu") == "cuda":
        from .torch import CudaMemory
        memory = CudaMemory(trainer.args.device)
    callback = OomRecoveryCallback(trainer, memory=memory, headroom=headroom, save=save)
    trainer.add_callback(callback)
    return callback


def train(trainer, exit=True, resume="auto", **train_kwargs):
    """Runs ``trainer.train(**train_kwargs)`` for a job under ``oomless run``.

    Resumes from the newest ``checkpoint-N`` in ``args.output_dir`` when there is one (unless
    `resume` is not "auto" or ``resume_from_checkpoint`` is given). When the ranks stopped on an
    OOM (:func:`recover_oom`), reports it and exits with status 75
    (:data:`oomless.torch.RELAUNCH_EXIT_CODE`), or re-raises the
    :class:`oomless.torch.OomStop` when `exit` is False.
    """
    from ._hf_recovery import train as _train
    return _train(trainer, exit=exit, resume=resume, **train_kwargs)
