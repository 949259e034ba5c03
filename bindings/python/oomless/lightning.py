"""PyTorch Lightning helpers: turn an oomless plan into Trainer and DataLoader keywords.

    plan = oomless.plan(model="gpt2", seq=1024, gpu="a100-80gb")
    trainer = lightning.Trainer(**oomless.lightning.trainer_kwargs(plan))
    loader = DataLoader(dataset, **oomless.lightning.dataloader_kwargs(plan))
"""
from typing import Any, Dict, Mapping, Optional, Tuple

from ._plans import check_backend, deepspeed_config, exact_precision, is_sharded, plan_of

# oomless exact precision -> Lightning 2.x `precision` (Lightning documentation, "N-Bit
# Precision": "-mixed" is autocast with fp32 weights, "-true" converts the weights).
# int8/4bit: the base weights are quantized when the model is loaded (bitsandbytes) and the
# compute is bf16 autocast, as in QLoRA (arXiv:2305.14314, section 3); "bf16-true" would convert
# the quantized modules. "auto" (a measured line) has no entry: the job keeps its own.
_PRECISION = {
    "fp32": "32-true",
    "amp-bf16": "bf16-mixed",
    "amp-fp16": "16-mixed",
    "bf16": "bf16-true",
    "fp16": "16-true",
    "int8": "bf16-mixed",
    "4bit": "bf16-mixed",
}

# ZeRO stage -> FSDP sharding strategy (PyTorch FSDP documentation, ShardingStrategy: FULL_SHARD
# shards parameters, gradients and optimizer states like ZeRO-3; SHARD_GRAD_OP gradients and
# optimizer states like ZeRO-2; FSDP has no optimizer-only ZeRO-1, and sharding more never needs
# more memory; NO_SHARD for an offload-only plan).
_FSDP_SHARDING = {"zero3": "FULL_SHARD", "zero2": "SHARD_GRAD_OP", "zero1": "SHARD_GRAD_OP",
                  "none": "NO_SHARD"}


def precision(doc: Mapping[str, Any]) -> Optional[str]:
    """The Lightning ``precision`` the plan means (``bf16-mixed`` for amp-bf16, ``bf16-true`` for
    pure bf16, ``16-mixed`` for amp-fp16, ``32-true`` for fp32...), or None for a measured line
    whose precision the plan leaves unchanged."""
    return _PRECISION.get(exact_precision(doc))


def strategy_settings(doc: Mapping[str, Any],
                      backend: str = "deepspeed") -> Optional[Tuple[str, Dict[str, Any]]]:
    """The strategy a sharded or offloaded plan needs, as ``(class name, keyword arguments)``:
    ``("DeepSpeedStrategy", {"stage", "offload_optimizer", "offload_parameters",
    "logging_batch_size_per_gpu"})`` from the plan's DeepSpeed config, or with
    ``backend="fsdp"`` ``("FSDPStrategy", {"sharding_strategy", "cpu_offload"})``. None for a
    plan that neither shards nor offloads."""
    check_backend(backend)
    if not is_sharded(doc):
        return None
    plan = plan_of(doc)
    if backend == "fsdp":
        return "FSDPStrategy", {"sharding_strategy": _FSDP_SHARDING[plan.get("sharding", "none")],
                                "cpu_offload": plan.get("offload", "none") != "none"}
    zero = deepspeed_config(doc)["zero_optimization"]
    return "DeepSpeedStrategy", {"stage": int(zero["stage"]),
                                 "offload_optimizer": "offload_optimizer" in zero,
                                 "offload_parameters": "offload_param" in zero,
                                 "logging_batch_size_per_gpu": int(plan["batch_size"])}


def strategy(doc: Mapping[str, Any], backend: str = "deepspeed") -> Any:
    """The Lightning strategy object of a sharded/offloaded plan (built from
    :func:`strategy_settings`; DeepSpeedStrategy needs the ``deepspeed`` package and FSDP a GPU
    when the Trainer is made), "ddp" for a plain multi-GPU plan, or None."""
    settings = strategy_settings(doc, backend)
    if settings is None:
        return "ddp" if int(plan_of(doc).get("gpus", 1)) > 1 else None
    from lightning.pytorch import strategies
    name, kwargs = settings
    return getattr(strategies, name)(**kwargs)


def trainer_kwargs(doc: Mapping[str, Any], backend: str = "deepspeed") -> Dict[str, Any]:
    """Keyword arguments for ``lightning.Trainer``: ``accumulate_grad_batches``, ``precision``,
    ``devices`` (and ``num_nodes``) and ``strategy`` (see :func:`strategy`).

    The micro-batch size belongs to the DataLoader: see :func:`dataloader_kwargs`. Gradient
    checkpointing is the model's own (``model.activation_checkpointing_enable()`` for a
    transformers model) when ``plan["checkpointing"]`` is not "none"; for ``every:N`` and
    ``+offload`` pass it ``**oomless.hf.checkpointing_kwargs(plan["checkpointing"])``.
    """
    plan = plan_of(doc)
    kwargs: Dict[str, Any] = {"accumulate_grad_batches": int(plan["grad_accum"])}
    value = precision(doc)
    if value:
        kwargs["precision"] = value
    gpus = int(plan.get("gpus", 1))
    search = doc.get("search") or {}
    nodes = int(search.get("nodes") or 1)
    if nodes > 1:
        kwargs["devices"] = int(search.get("gpus_per_node") or gpus // nodes)
        kwargs["num_nodes"] = nodes
    elif gpus > 1:
        kwargs["devices"] = gpus
    chosen = strategy(doc, backend)
    if chosen is not None:
        kwargs["strategy"] = chosen
    return kwargs


def dataloader_kwargs(doc: Mapping[str, Any]) -> Dict[str, Any]:
    """Keyword arguments for ``torch.utils.data.DataLoader``: the per-GPU micro-batch size."""
    return {"batch_size": int(plan_of(doc)["batch_size"])}


# ---- out-of-memory recovery -------------------------------------------------------------------

def __getattr__(name: str) -> Any:
    # lightning and torch are imported on first use: the plan helpers above need neither
    if name in ("OomRecovery", "CHECKPOINT_NAME"):
        from . import _lightning_recovery
        return getattr(_lightning_recovery, name)
    if name == "MemoryLogCallback":
        from ._lightning_memory import MemoryLogCallback
        return MemoryLogCallback
    raise AttributeError(name)


def fit(trainer: Any, model: Any, exit: bool = True, ckpt_path: Optional[str] = "auto",
        **fit_kwargs: Any) -> Any:
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
