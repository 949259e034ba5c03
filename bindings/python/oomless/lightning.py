"""PyTorch Lightning helpers: turn an oomless plan into Trainer and DataLoader keywords.

    plan = oomless.plan(model="gpt2", seq=1024, gpu="a100-80gb")
    trainer = lightning.Trainer(**oomless.lightning.trainer_kwargs(plan))
    loader = DataLoader(dataset, **oomless.lightning.dataloader_kwargs(plan))
"""
from .hf import _plan

# oomless precision -> Lightning 2.x `precision` strings.
_PRECISION = {
    "fp32": "32-true",
    "amp-bf16": "bf16-mixed",
    "amp-fp16": "16-mixed",
    "bf16": "bf16-true",
    "fp16": "16-true",
}

# oomless sharding -> Lightning strategy names (registered strategies of Lightning 2.x).
_STRATEGY = {
    "zero1": "deepspeed_stage_1",
    "zero2": "deepspeed_stage_2",
    "zero3": "deepspeed_stage_3",
}


def trainer_kwargs(doc):
    """Keyword arguments for ``lightning.Trainer``: accumulation, precision, devices, strategy.

    The micro-batch size belongs to the DataLoader: see :func:`dataloader_kwargs`.
    """
    plan = _plan(doc)
    kwargs = {"accumulate_grad_batches": int(plan["grad_accum"])}
    precision = _PRECISION.get(plan.get("precision"))
    if precision:
        kwargs["precision"] = precision
    gpus = int(plan.get("gpus", 1))
    if gpus > 1:
        kwargs["devices"] = gpus
        sharding = plan.get("sharding", "none")
        strategy = _STRATEGY.get(sharding)
        if plan.get("offload", "none") != "none" and sharding in ("zero2", "zero3"):
            strategy += "_offload"
        kwargs["strategy"] = strategy or "ddp"
    return kwargs


def dataloader_kwargs(doc):
    """Keyword arguments for ``torch.utils.data.DataLoader``: the per-GPU micro-batch size."""
    return {"batch_size": int(_plan(doc)["batch_size"])}


# ---- out-of-memory recovery -------------------------------------------------------------------

def __getattr__(name):
    # lightning and torch are imported on first use: the plan helpers above need neither
    if name in ("OomRecovery", "CHECKPOINT_NAME"):
        from . import _lightning_recovery
        return getattr(_lightning_recovery, name)
    raise AttributeError(name)


def fit(trainer, model, exit=True, ckpt_path="auto", **fit_kwargs):
    """Runs ``trainer.fit(model, **fit_kwargs)`` for a job under ``oomless run``.

    With an :class:`OomRecovery` callback in the trainer: resumes from its checkpoint when one
    exists (unless `ckpt_path` is given), and when the ranks stopped on an OOM, reports it
    (``torch.OutOfMemoryError``, the step, an ``OOMLESS_RECOVERY {json}`` line) and exits with
    status 75 (:data:`oomless.torch.RELAUNCH_EXIT_CODE`) so that ``oomless run`` relaunches
    every rank at a smaller ``{batch}``; with `exit` False the
    :class:`oomless.torch.OomStop` is re-raised instead.
    """
    from ._lightning_recovery import fit as _fit
    return _fit(trainer, model, exit=exit, ckpt_path=ckpt_path, **fit_kwargs)
