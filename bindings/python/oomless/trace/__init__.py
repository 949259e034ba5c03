"""oomless.trace: the memory of the real model code, measured on PyTorch's meta device.

The model is built from its config with no weights (the meta device holds shapes, not data),
wrapped as users wrap it (PEFT LoRA, gradient checkpointing), and whole training steps are run:
forward, loss, backward, optimizer step. Every storage alive at every moment is counted
(:mod:`oomless.trace.tracker`), which gives the allocated peak that
``torch.cuda.max_memory_allocated`` would report for the same code, and its breakdown.

What the trace does not contain: the CUDA context, the caching allocator's reserve and
fragmentation (reserved - allocated), cuBLAS/cuDNN workspaces and kernel-internal buffers; the
estimator adds those (``oomless estimate``). Needs torch (and transformers, peft for Hugging Face
models); the rest of the ``oomless`` package does not.

    python -m oomless.trace --model llama-3.1-8b --method lora --precision bf16 --batch 2 --seq 2048

From Python, the package called is :func:`trace` (the same document as ``--json``)::

    oomless.trace(model="gpt2", method="lora", batch=2, seq=1024)["allocated_peak"]
"""
import sys
import types
from typing import Any, Dict, Optional

_EXPORTS = {"TraceError": "run", "document": "run", "Workload": "run", "trace_hf": "run", "trace_module": "run",
            "versions": "run", "CATEGORIES": "tracker", "Tracker": "tracker", "rounded": "tracker"}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    # torch is imported on first use, so that `python -m oomless.trace` can say what to install
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module("." + _EXPORTS[name], __name__), name)
    raise AttributeError(name)


def trace(model: Optional[str] = None, **options: Any) -> Dict[str, Any]:
    """Traces a workload on the meta device; returns what ``python -m oomless.trace --json``
    prints (``allocated_peak``, its breakdown, ``workload``, ``versions``, ``outside_trace``).

    `model` is a preset, a config.json or its folder (a hub id in the local cache); the options
    are the tracer's (``method``, ``precision``, ``optimizer``, ``batch``, ``seq``,
    ``grad_accum``, ``checkpointing``, ``attention``, ``loss``, ``lora_rank``, ``lora_targets``,
    ``lora_dropout``, ``steps``, ``stack``: transformers, transformers-4, torchtune or
    torchtitan, the one installed when not given; the document's ``stack`` names it with the
    versions that ran). Or ``module=build_fn`` (any nn.Module; with ``step``,
    ``input_shape``, ``steps``, ``optimizer``). A workload the tracer cannot express raises
    :class:`TraceError`. Needs torch (and transformers, peft for Hugging Face models).
    """
    from .run import document
    return document(model, **options)


class _CallableModule(types.ModuleType):
    """oomless.trace is this package and, called, :func:`trace`."""

    def __call__(self, model: Optional[str] = None, **options: Any) -> Dict[str, Any]:
        return trace(model, **options)


sys.modules[__name__].__class__ = _CallableModule
