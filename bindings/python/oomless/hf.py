"""Hugging Face Transformers helpers: turn an oomless plan into TrainingArguments keywords.

    plan = oomless.plan(model="llama-3.1-8b", method="lora", seq=2048)
    args = transformers.TrainingArguments(output_dir="out", **oomless.hf.training_arguments(plan))
"""

from typing import Any, Dict, Mapping, Optional, cast

from ._plans import check_backend, deepspeed_config, exact_precision, is_sharded, plan_of
from ._vocab import format_version, installed_version, trainer_optimizer

# TrainingArguments' checkpointing switch by the transformers version whose keys the library
# writes (``oomless plan --format args``; its versions: ``plan_formats()``): 5.23 renamed
# gradient_checkpointing(_kwargs) to activation_checkpointing(_kwargs), the old names deprecated
# aliases to be removed in v6 (transformers/training_args.py)
CHECKPOINTING_KEY = {"4.56": "gradient_checkpointing", "5.23": "activation_checkpointing"}

# TrainingArguments has one switch per 16-bit type, autocast ("mixed precision"): `bf16=True` /
# `fp16=True`. A plan in pure bf16/fp16 (16-bit weights, LoRA) sets the same switch, the model
# being loaded with `torch_dtype` bfloat16/float16; int8/4bit (bitsandbytes base weights) compute
# in bf16, as QLoRA does (Dettmers et al. 2023, arXiv:2305.14314, section 3).
_SWITCH = {
    "amp-bf16": "bf16",
    "bf16": "bf16",
    "int8": "bf16",
    "4bit": "bf16",
    "amp-fp16": "fp16",
    "fp16": "fp16",
    "fp32": None,
}


def _plan(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """Accepts the whole plan document or its "plan" object (kept for older callers)."""
    return plan_of(doc)


def fsdp_config(doc: Mapping[str, Any]) -> Dict[str, Any]:
    """``TrainingArguments.fsdp_config`` for a ZeRO/offload plan run with FSDP2 instead.

    ZeRO-3 is FSDP's full sharding (parameters resharded after the forward,
    ``reshard_after_forward=True``); ZeRO-1/2 become ``reshard_after_forward=False`` (FSDP's
    SHARD_GRAD_OP, which shards gradients and optimizer states as ZeRO-2 does; FSDP has no
    optimizer-only sharding, and sharding more never needs more memory); any offload is FSDP's
    ``cpu_offload`` (parameters, gradients and the optimizer step on the CPU, which covers an
    optimizer-only offload). Activation checkpointing is FSDP's own ``activation_checkpointing``,
    which transformers prefers over ``activation_checkpointing`` under FSDP (TrainingArguments
    documentation, "fsdp_config").
    """
    plan = plan_of(doc)
    return {
        "version": 2,
        "reshard_after_forward": plan.get("sharding", "none") == "zero3",
        "cpu_offload": plan.get("offload", "none") != "none",
        "activation_checkpointing": plan.get("checkpointing", "none") != "none",
    }


def checkpointing_kwargs(checkpointing: str) -> Dict[str, Any]:
    """transformers' ``activation_checkpointing_kwargs`` for a plan's ``every:N`` and ``+offload``
    (``every_n_layers``, ``offload``: ``Trainer`` pops both for ``activation_checkpointing_enable``,
    transformers 5.23); empty for none, selective and full. ``nth:N`` and ``op-sac`` are
    torchtitan's: ValueError."""
    base, _, offload = checkpointing.partition("+")
    if base.startswith("nth:") or base == "op-sac":
        raise ValueError("checkpointing '%s' is torchtitan's; transformers runs every:N and "
                         "+offload (plan with --checkpointing-variants transformers)" % checkpointing)
    out: Dict[str, Any] = {}
    if base.startswith("every:"):
        out["every_n_layers"] = int(base[len("every:"):])
    if offload == "offload":
        out.setdefault("every_n_layers", 1)
        out["offload"] = True
    return out


def checkpointing_key(transformers_version: Optional[str] = None) -> str:
    """TrainingArguments' checkpointing switch in `transformers_version` (default: the
    installed transformers, else the latest the library knows): ``activation_checkpointing``
    from 5.23, ``gradient_checkpointing`` before; ``"_kwargs"`` after it names its kwargs."""
    if transformers_version is None:
        transformers_version = installed_version("transformers")
    # "args" follows transformers: a version, never None
    return CHECKPOINTING_KEY[cast(str, format_version("args", transformers_version))]


def training_arguments(doc: Mapping[str, Any], backend: str = "deepspeed",
                       transformers_version: Optional[str] = None) -> Dict[str, Any]:
    """Keyword arguments for ``transformers.TrainingArguments`` from a plan.

    Sets ``per_device_train_batch_size``, ``gradient_accumulation_steps``, ``bf16``/``fp16``
    (from the plan's exact precision: see the table in the package's README), the optimizer,
    the checkpointing switch of the installed transformers (`transformers_version` names
    another: :func:`checkpointing_key`, ``activation_checkpointing`` from 5.23,
    ``gradient_checkpointing`` before) and, for a chunked loss, ``use_liger_kernel`` (the Trainer's switch
    for Liger-Kernel's fused linear + cross-entropy; the attention kernel is a
    ``from_pretrained(attn_implementation=...)`` argument, ``plan["plan"]["attention"]``). A plan that shards (ZeRO) or offloads also gets ``deepspeed``, the
    config dict of ``oomless plan --format deepspeed`` (pass the whole document: the config is its
    ``deepspeed`` key), or, with ``backend="fsdp"``, ``fsdp=True`` and :func:`fsdp_config`. An
    inference plan sets ``per_device_eval_batch_size`` too. `max_seq_length` is not a
    TrainingArguments field: pass ``plan["plan"]["seq_len"]`` to your tokenizer or SFT config.
    """
    check_backend(backend)
    plan = plan_of(doc)
    precision = exact_precision(doc)
    ck = checkpointing_key(transformers_version)
    kwargs: Dict[str, Any] = {
        "per_device_train_batch_size": int(plan["batch_size"]),
        "gradient_accumulation_steps": int(plan["grad_accum"]),
        ck: plan.get("checkpointing", "none") != "none",
    }
    if precision != "auto":  # a measured line: the precision is the job's own
        kwargs["bf16"] = _SWITCH.get(precision) == "bf16"
        kwargs["fp16"] = _SWITCH.get(precision) == "fp16"
    if doc.get("inference"):
        kwargs["per_device_eval_batch_size"] = int(plan["batch_size"])
    # TrainingArguments.optim (and optim_args) from the library's optimizer table, as
    # `oomless plan --format args` writes them
    optim, optim_args = trainer_optimizer(plan.get("optimizer", ""))
    if optim:
        kwargs["optim"] = optim
    if optim_args:
        kwargs["optim_args"] = optim_args
    if plan.get("loss") == "chunked":
        kwargs["use_liger_kernel"] = True
    ck_kwargs = checkpointing_kwargs(plan.get("checkpointing", "none"))
    if ck_kwargs:
        if ck == "gradient_checkpointing":  # before 5.23 these go to torch.utils.checkpoint
            raise ValueError("checkpointing '%s' needs transformers 5.23 or later (every_n_layers, "
                             "offload); plan with --checkpointing-variants none"
                             % plan.get("checkpointing"))
        kwargs[ck + "_kwargs"] = ck_kwargs
    if is_sharded(doc):
        if backend == "fsdp":
            kwargs["fsdp"] = True
            kwargs["fsdp_config"] = fsdp_config(doc)
            kwargs[ck] = False  # FSDP's own activation_checkpointing does it
        else:
            kwargs["deepspeed"] = deepspeed_config(doc)
    return kwargs


def __getattr__(name: str) -> Any:
    # transformers is imported on first use: the plan helpers above need none of it
    if name == "MemoryLogCallback":
        from ._hf_memory import MemoryLogCallback
        return MemoryLogCallback
    raise AttributeError(name)


# ---- out-of-memory recovery -------------------------------------------------------------------

def recover_oom(trainer: Any, memory: Any = None, headroom: float = 0.1, save: bool = True) -> Any:
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


def train(trainer: Any, exit: bool = True, resume: str = "auto", **train_kwargs: Any) -> Any:
    """Runs ``trainer.train(**train_kwargs)`` for a job under ``oomless run``.

    Resumes from the newest ``checkpoint-N`` in ``args.output_dir`` when there is one (unless
    `resume` is not "auto" or ``resume_from_checkpoint`` is given). When the ranks stopped on an
    OOM (:func:`recover_oom`), reports it and exits with status 75
    (:data:`oomless.torch.RELAUNCH_EXIT_CODE`), or re-raises the
    :class:`oomless.torch.OomStop` when `exit` is False.
    """
    from ._hf_recovery import train as _train
    return _train(trainer, exit=exit, resume=resume, **train_kwargs)
