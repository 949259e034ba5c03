"""Building a model on the meta device as users build it, and tracing its training steps."""
from __future__ import annotations

import contextlib  # noqa: F401  (in __all__)
import importlib
import platform
from typing import Any, Callable, Sequence

import torch

from . import heads, progress
from .build import DTYPES, PRECISIONS, build_hf, find_config, make_optimizer
from .emulate import CudaEmulation
from .limits import TraceError, check_layers
from .loss import LossRegion, chunked_causal_loss, output_head
from .preference import _trace_cpo, _trace_preference, _trace_reward
from .prepare import _for_training, _instrumented
from .steps import _finish, _inference, _train, _train_traced
from .tracker import CATEGORIES, Tracker
from .workload import Workload, _sample


def versions() -> dict[str, str | None]:
    """The versions a trace depends on: recorded with every result."""
    from importlib import metadata  # torchtune and torchtitan have no __version__
    from .stacks import NEEDS  # each stack's distributions
    out: dict[str, str | None] = {"python": platform.python_version(), "torch": torch.__version__}
    for dist in dict.fromkeys(d for needs in NEEDS.values() for d in needs):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


# the stacks whose own code a tracer of its own runs (tune.py, titan.py): module, function
STACK_TRACERS = {"torchtune": (".tune", "trace_torchtune"),
                 "torchtitan": (".titan", "trace_torchtitan")}


def _stack_of(name: str) -> dict[str, Any]:
    from .stacks import describe
    return describe(name)


def trace_hf(w: Workload, cfg_dict: dict[str, Any] | None = None) -> dict[str, Any]:
    """Traces workload `w`; returns the result dict (memory breakdown in bytes, phase, ...)."""
    from .config_check import reads_values
    from .emulate import autocast_regions
    try:
        with autocast_regions():
            return _trace_hf(w, cfg_dict)
    except (RuntimeError, NotImplementedError) as exc:
        if reads_values(exc):
            raise TraceError("the model's code reads tensor values (%s), which the meta device "
                             "does not have: this model cannot be traced"
                             % str(exc).splitlines()[0]) from exc
        raise


def _trace_hf(w: Workload, cfg_dict: dict[str, Any] | None = None) -> dict[str, Any]:
    w.check()
    if w.stack in STACK_TRACERS:
        module, fn = STACK_TRACERS[w.stack]
        result: dict[str, Any] = getattr(importlib.import_module(module, __package__), fn)(w)
        return result
    cfg_dict, path = find_config(w.model) if cfg_dict is None else (cfg_dict, w.model)
    check_layers(cfg_dict, path)
    quant = cfg_dict.get("quantization_config")
    if isinstance(quant, dict):
        raise TraceError("model '%s' is pre-quantized (quant_method %s): its quantized layers run "
                         "only on a GPU, not on the meta device; `oomless estimate` plans it, or "
                         "trace the unquantized model (its config without quantization_config)"
                         % (w.model, quant.get("quant_method")))
    if w.objective == "reward":
        return _trace_reward(w, cfg_dict)
    if w.objective in ("simpo", "orpo"):
        return _trace_cpo(w, cfg_dict)
    if w.objective != "sft":
        return _trace_preference(w, cfg_dict)
    wdtype, amp = PRECISIONS[w.precision]
    progress.say("building %s on the meta device" % w.model)
    model, cfg = build_hf(cfg_dict, DTYPES[wdtype], w.attention)
    model, vocab, tracker, emu = _instrumented(model, cfg, w, amp)
    if w.method == "inference":
        return _finish(tracker, _inference(model, w, vocab, tracker, emu), model, w)
    trainable, opt = _for_training(model, w, emu)
    rows, tokens = w.rows()
    # flash attention takes packed documents as they are (varlen kernels, cu_seqlens from the
    # position ids): no mask, as for unpacked rows
    masked = w.packing != "none" and w.attention != "flash"

    def loss(ids: torch.Tensor) -> torch.Tensor:
        if w.loss == "chunked":
            return chunked_causal_loss(model, ids, w.chunk_tokens)
        if w.packing != "none":
            # position ids restart per document (their values: the meta device has none; the
            # packed-sequence check answers for them), and no KV cache, whose presence turns
            # that check off: TRL's SFTTrainer.compute_loss sets use_cache=False
            # (trl/trainer/sft_trainer.py, trl 1.16)
            pos = torch.zeros((rows, tokens), dtype=torch.long, device="meta")
            return heads.loss(model, ids, position_ids=pos, use_cache=False)
        return heads.loss(model, ids)  # the head's targets (heads.targets)

    return _train_traced(w, model, tracker, emu, trainable, opt, amp, loss,
                         sample=lambda: _sample(vocab, rows, tokens),
                         region=LossRegion(tracker, output_head(model)), loss_tag="logits",
                         packed=(rows, tokens) if masked else None)


def trace_module(build: Callable[[], Any],
                 step: Callable[[Any, Any], torch.Tensor] | None = None,
                 input_shape: Sequence[int] | None = None, steps: int = 2,
                 optimizer: str = "adamw") -> dict[str, Any]:
    """Traces any nn.Module: `build()` returns it (built on the meta device here); `step(model,
    batch)` runs one training step's forward and backward (default: sum of the output)."""
    with torch.device("meta"):
        model = build()
    if not isinstance(model, torch.nn.Module):
        raise TraceError("the build function returned %s, not a torch.nn.Module" % type(model).__name__)
    model = model.to("meta")
    tracker = Tracker()
    tracker.register(list(model.parameters()) + list(model.buffers()), "weights")
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = make_optimizer(optimizer, trainable)
    emu = CudaEmulation(None)
    if step is None and not input_shape:
        raise TraceError("--input-shape is needed without --step (e.g. 8,3,224,224)")

    def forward() -> torch.Tensor:
        if step is not None:
            return step(model, input_shape)
        assert input_shape  # refused above without a step
        return model(torch.randn(*input_shape, device="meta")).float().sum()

    with tracker, emu:
        step_start = _train(tracker, forward, trainable, opt, steps, 1)
    w = Workload("module")
    return _finish(tracker, None, model, w, steady_from=step_start[-1] if steps > 1 else 0)


__all__ = ["CATEGORIES", "TraceError", "Workload", "trace_hf", "trace_module", "versions",
           "find_config", "contextlib"]


# what a trace leaves out (the estimator adds them): listed in every document
OUTSIDE_TRACE = ["cuda_context", "allocator_reserve", "kernel_workspaces"]


def document(model: str | None = None, module: Callable[[], Any] | None = None,
             step: Callable[[Any, Any], torch.Tensor] | None = None,
             input_shape: Sequence[int] | None = None, label: str | None = None,
             **options: Any) -> dict[str, Any]:
    """The document ``python -m oomless.trace --json`` prints: a Hugging Face `model` traced with
    the workload `options` (:class:`Workload`'s keywords), or any `module` (a function building
    the nn.Module; `step`, `input_shape`, ``steps`` and ``optimizer`` as for
    :func:`trace_module`; `label` names it in ``workload.model``)."""
    if module is not None:
        optimizer = options.pop("optimizer", "adamw")
        steps = options.pop("steps", 2)
        if options:
            raise TraceError("with a module only steps and optimizer apply, not %s"
                             % ", ".join(sorted(options)))
        res = trace_module(module, step, input_shape, steps=steps, optimizer=optimizer)
        res["workload"] = {"model": label or getattr(module, "__qualname__", repr(module)),
                           "optimizer": optimizer}
    else:
        if not model:
            raise TraceError("a model (a preset, a config.json or its folder) or a module is "
                             "needed")
        w = Workload(model, **options)
        res = trace_hf(w)
        assert w.stack is not None  # resolved by w.check(), trace_hf's first step
        res["stack"] = _stack_of(w.stack)
        res["workload"] = {"model": model, "method": w.method, "precision": w.precision,
                           "optimizer": w.optimizer, "batch": w.batch, "seq": w.seq,
                           "grad_accum": w.grad_accum, "checkpointing": w.checkpointing,
                           "attention": w.attention, "loss": w.loss}
        if w.objective != "sft":
            res["workload"].update(objective=w.objective, reference=w.reference)
        if w.packing != "none":
            rows, tokens = w.rows()
            res["workload"].update(packing="%s, %d x %d tokens" % (w.packing, rows, tokens))
        if getattr(w, "experts", None):
            res["moe_experts"] = w.experts
        if w.optimizer_in_backward != "no":
            res["workload"].update(optimizer_in_backward=w.optimizer_in_backward)
    res["versions"] = versions()
    res["outside_trace"] = list(OUTSIDE_TRACE)
    return res
