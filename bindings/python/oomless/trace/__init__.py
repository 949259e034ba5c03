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
"""
_EXPORTS = {"TraceError": "run", "Workload": "run", "trace_hf": "run", "trace_module": "run",
            "versions": "run", "CATEGORIES": "tracker", "Tracker": "tracker", "rounded": "tracker"}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    # torch is imported on first use, so that `python -m oomless.trace` can say what to install
    if name in _EXPORTS:
        import importlib
        return getattr(importlib.import_module("." + _EXPORTS[name], __name__), name)
    raise AttributeError(name)
