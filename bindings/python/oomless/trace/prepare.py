"""A built model made ready to train as the workload says: activation checkpointing, host
offload, its adapter, its optimizer, and the tracker and CUDA emulation around it."""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable

import torch

from . import heads, progress
from .build import DTYPES, apply_lora, make_optimizer
from .emulate import CudaEmulation
from .tracker import Tracker

if TYPE_CHECKING:
    from .workload import Workload


def checkpoint_every(checkpointing: str) -> tuple[int, bool, bool] | None:
    """(N, nth, offload) for a --checkpointing value: one layer in N checkpointed, the N-th of
    each N where nth (torchtitan) else the first (transformers), the checkpoints' saved inputs in
    host memory where offload ("+offload"); (0, False, False) for none; None if it is not one the
    tracer runs."""
    base, plus, rest = checkpointing.partition("+")
    offload = plus == "+" and rest == "offload"
    if plus and not offload:
        return None
    if base == "none":
        return None if offload else (0, False, False)
    if base == "full" or (base == "op-sac" and not offload):
        return 1, False, offload
    kind, _, n = base.partition(":")
    if kind in ("every", "nth") and n.isdigit() and int(n) >= 1:
        return int(n), kind == "nth", offload
    return None


def op_sac_policy() -> Callable[..., Any]:
    """torchtitan's op-level selective activation checkpointing policy for one transformer block
    (SelectiveAC._wrap_block, torchtitan/distributed/activation_checkpoint.py, pytorch/torchtitan
    b5bcd76, 2026-08-21): the outputs of the compute-intensive ops (functorch's default op list:
    mm, bmm, addmm, the fused SDPA kernels, ...), of the math SDPA, max (float8 scaling), topk
    and the reduce-scatter / all-to-all collectives are saved, except every second mm/linear of
    the block (counted separately in the forward and the recomputation), which is recomputed with
    everything else. torchtitan's force-recomputed router shapes (moe.router.gate) have no
    transformers counterpart and are left out. A fresh policy per checkpointed call, as
    torchtitan's context_fn makes one."""
    from torch._functorch.partitioners import get_default_op_list
    from torch.utils.checkpoint import CheckpointPolicy
    aten: Any = torch.ops.aten
    intensive: Any = get_default_op_list().compute_intensive_ops  # OpOverloadPackets
    save = {op.default for op in intensive}
    save.update((aten._scaled_dot_product_cudnn_attention.default,
                 aten._scaled_dot_product_attention_math.default,
                 aten._scaled_dot_product_fused_attention_overrideable.default,
                 aten.max.default, aten.linear.default, aten.topk.default,
                 torch.ops._c10d_functional.reduce_scatter_tensor.default,
                 torch.ops._c10d_functional.all_to_all_single.default))
    mm_ops = (aten.mm.default, aten.linear.default)
    count = {False: 0, True: 0}

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        if func in mm_ops:
            count[ctx.is_recompute] += 1
        if func in save and not (func in mm_ops and count[ctx.is_recompute] % 2 == 0):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE
    return policy


class _Both:
    """Two context managers entered as one (checkpoint's context_fn wants one per pass)."""

    def __init__(self, *cms: Any) -> None:
        self.cms = cms
        self.stack: contextlib.ExitStack | None = None

    def __enter__(self) -> _Both:
        stack = self.stack = contextlib.ExitStack()
        for cm in self.cms:
            stack.enter_context(cm)
        return self

    def __exit__(self, *exc: Any) -> bool | None:
        assert self.stack is not None  # entered
        return self.stack.__exit__(*exc)


class HostOffload(torch.autograd.graph.saved_tensors_hooks):
    """torch.autograd.graph.save_on_cpu as a GPU runs it, on the meta device (which has no data
    to copy): a saved tensor leaves the device when packed (its storage is freed once nothing
    else holds it) and comes back as a new device tensor of its shape when unpacked, as
    save_on_cpu's unpack copies it to the device (torch/autograd/graph.py)."""

    def __init__(self, pin_memory: bool = False, device_type: str = "cuda") -> None:
        def pack(t: torch.Tensor) -> Any:
            return t.device, t.size(), t.stride(), t.dtype

        def unpack(packed: Any) -> torch.Tensor:
            device, size, stride, dtype = packed
            return torch.empty_strided(size, stride, dtype=dtype, device=device)

        super().__init__(pack, unpack)


def enable_checkpointing(model: Any, checkpointing: str,
                         context_fn: Callable[[], tuple[Any, Any]] | None = None) -> None:
    """The model's own gradient checkpointing for a --checkpointing value: every layer (full,
    op-sac), every:N (transformers' every_n_layers: layers 1, N+1, ...), nth:N (layers N, 2N,
    ..., as torchtitan's layer-level selective checkpointing wraps them), +offload; nothing for
    none. `context_fn` is checkpoint's (op-sac's policy, the tracer's emulation); None: the
    default. The tracer and bench/accuracy/measure.py (on a GPU) enable it the same way."""
    shape = checkpoint_every(checkpointing)
    assert shape is not None  # Workload.check() refused the others
    every, nth, offload = shape
    if not every:
        return
    ckpt_kwargs: dict[str, Any] = {"use_reentrant": False}
    if context_fn is not None:
        ckpt_kwargs["context_fn"] = context_fn
    kwargs: dict[str, Any] = {"every_n_layers": every} if every > 1 and not nth else {}
    if offload:
        kwargs["offload"] = True
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=ckpt_kwargs, **kwargs)
    if nth:
        from transformers.modeling_layers import GradientCheckpointingLayer
        layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
        for i, layer in enumerate(layers):
            layer.gradient_checkpointing = (i + 1) % every == 0


def _for_training(model: Any, w: Workload,
                  emu: CudaEmulation) -> tuple[list[torch.Tensor], Any]:
    """The model in training mode, with its own gradient checkpointing as --checkpointing says
    (enable_checkpointing; op-sac under torchtitan's op-level policy, op_sac_policy), under the
    CUDA emulation; its trained parameters and their optimizer."""
    shape = checkpoint_every(w.checkpointing)
    assert shape is not None  # Workload.check() refused the others
    if shape[2]:  # +offload
        # transformers' activation_checkpointing_enable(offload=True) wraps each checkpoint in
        # save_on_cpu (modeling_utils.py, transformers 5.23), which the meta device cannot run:
        # the emulation takes its place for this process's traces
        import transformers.modeling_utils
        transformers.modeling_utils.save_on_cpu = HostOffload  # type: ignore[misc,assignment]
    # the recomputation in the backward re-enters the forward's emulation, as checkpoint
    # re-enters the forward's autocast state on a GPU
    def contexts() -> tuple[Any, Any]:
        if w.checkpointing == "op-sac":
            from torch.utils.checkpoint import create_selective_checkpoint_contexts
            fwd, rec = create_selective_checkpoint_contexts(op_sac_policy())
            return fwd, _Both(emu.recompute_context(), rec)
        return contextlib.nullcontext(), emu.recompute_context()
    enable_checkpointing(model, w.checkpointing, contexts)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    return trainable, make_optimizer(w.optimizer, trainable)


def _instrumented(model: Any, cfg: Any, w: Workload,
                  amp: str | None) -> tuple[Any, int, Tracker, CudaEmulation]:
    """A built model as the tracer runs it: its LoRA adapter when asked, the tracker with its
    weights registered and the CUDA emulation; returns (model, vocabulary, tracker, emulation)."""
    vocab = getattr(cfg, "vocab_size", None) or cfg.get_text_config().vocab_size
    w.experts = heads.experts_path(model)  # the experts implementation CUDA runs, if any
    if w.method == "lora":
        model = apply_lora(model, w.lora_rank, w.lora_targets, w.lora_dropout)
    tracker = Tracker()
    emu = CudaEmulation(DTYPES[amp] if amp else None, fused_sdpa=w.attention != "eager",
                        tracker=tracker)
    tracker.register(list(model.parameters()) + list(model.buffers()), "weights")
    _layer_progress(model)
    return model, vocab, tracker, emu


def _layer_progress(model: Any) -> None:
    """The decoder's layers (the model's longest ModuleList) say when the forward reaches them
    (progress.py; a pre-hook reads no tensor and allocates nothing)."""
    lists = [m for m in model.modules() if isinstance(m, torch.nn.ModuleList)]
    if not lists:
        return
    layers = max(lists, key=len)
    for i, layer in enumerate(layers):
        layer.register_forward_pre_hook(
            lambda _m, _args, i=i, n=len(layers): progress.layer(i + 1, n))
