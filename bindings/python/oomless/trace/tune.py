"""torchtune 0.6.1's own code on the meta device, as its single-device recipes run it.

What runs is torchtune's (pinned in bindings/python/requirements-stack-torchtune.txt; the recipe
files are recipes/lora_finetune_single_device.py and recipes/full_finetune_single_device.py of
the wheel): the model builders (``llama3_2_1b``, ``lora_llama3_2_1b``, ``qlora_llama3_2_1b``, ...:
LoRALinear with torchao's NF4Tensor for QLoRA), ``set_trainable_params``,
``training.set_activation_checkpointing`` on every ``TransformerSelfAttentionLayer``,
``CEWithChunkedOutputLoss`` with ``set_num_output_chunks``, the recipe's step (labels shifted by
``ignore_labels_cache``, the loss scaled by the token count, ``training.scale_grads`` before the
step, ``zero_grad(set_to_none=True)``), ``register_optim_in_bwd_hooks`` for the optimizer in the
backward, and ``get_act_offloading_ctx_manager`` for activation offloading.

What the meta device cannot do is done here as a GPU does it:
- the model is built on the device (``with training.set_default_dtype(dtype), device``), then
  the base weights are loaded (``load_state_dict`` from the CPU checkpoint): each weight comes to
  the device once and NF4 weights are quantized there from it (torchao's ``copy_`` into an
  NF4Tensor: ``NF4Tensor.from_tensor(copy_in.to(device))``). That is the "load" phase, traced;
- Llama 3.x's RoPE skips its cache on meta (``rope_init`` returns early): it is built with the
  shapes CUDA builds (``max_seq_len`` x dim/2 x 2, fp32);
- ``torch.optim.AdamW(fused=True)`` refuses meta parameters: its states are kept as it keeps
  them (run.ModelledAdam);
- ``OffloadActivations`` needs CUDA streams: its pack/unpack are kept (tensors of 1024 bytes or
  more leave the device, the last five stay stashed for the copy stream, each comes back as a new
  device tensor in the backward).
"""
from __future__ import annotations

import contextlib
import functools
import importlib
from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.autograd.graph import saved_tensors_hooks

from .emulate import CudaEmulation
from .tracker import Tracker

if TYPE_CHECKING:
    from .limits import TraceError
    from .workload import Workload

# the presets torchtune has a builder for: (module under torchtune.models, builder name). Qwen2.5
# 1.5B, 7B and 14B: the _instruct builders, which torchtune's own recipes use
# (recipes/configs/qwen2_5/1.5B_lora.yaml and the others: lora_qwen2_5_1_5b_instruct, ...) and
# whose max_seq_len (32768) is the presets' max_position_embeddings; the _base builders cache
# RoPE for 131072 positions, four times the bytes
BUILDERS = {
    "llama-3.2-1b": ("llama3_2", "llama3_2_1b"), "llama-3.2-3b": ("llama3_2", "llama3_2_3b"),
    "llama-3.1-8b": ("llama3_1", "llama3_1_8b"), "llama-3.1-70b": ("llama3_1", "llama3_1_70b"),
    "llama-2-7b": ("llama2", "llama2_7b"), "llama-2-13b": ("llama2", "llama2_13b"),
    "qwen2.5-0.5b": ("qwen2_5", "qwen2_5_0_5b"),
    "qwen2.5-1.5b": ("qwen2_5", "qwen2_5_1_5b_instruct"), "qwen2.5-3b": ("qwen2_5", "qwen2_5_3b"),
    "qwen2.5-7b": ("qwen2_5", "qwen2_5_7b_instruct"),
    "qwen2.5-14b": ("qwen2_5", "qwen2_5_14b_instruct"), "mistral-7b": ("mistral", "mistral_7b"),
    "gemma-2-2b": ("gemma2", "gemma2_2b"), "gemma-2-9b": ("gemma2", "gemma2_9b"),
    "phi-3-mini": ("phi3", "phi3_mini"),
}
# Hugging Face module names -> torchtune's LoRA arguments
ATTN = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "o_proj": "output_proj"}
MLP = ("gate_proj", "up_proj", "down_proj")
# torchtune's LoRA recipes: q, v and the output projection, and the MLP (llama3_2/1B_lora etc.)
DEFAULT_TARGETS = "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
CHUNKS = 8  # CEWithChunkedOutputLoss's num_output_chunks
# --method: the prefix of torchtune's model builder (lora_llama3_2_1b, qlora_llama3_2_1b)
BUILDER_PREFIX = {
    "full": "",
    "lora": "lora_",
    "qlora": "qlora_",
}
# --precision: the recipe's dtype (qlora's 4bit: an NF4 base under a bf16 recipe)
RECIPE_DTYPE = {
    "bf16": torch.bfloat16,
    "fp32": torch.float32,
    "4bit": torch.bfloat16,
}
# --checkpointing: the recipe's enable_activation_checkpointing, enable_activation_offloading
ACTIVATIONS = {
    "none": (False, False),
    "full": (True, False),
    "full+offload": (True, True),
}
# --optimizer: the recipe's optimizer component
OPTIMIZERS = {
    "adamw": "torch.optim.AdamW",
    "adamw-fused": "torch.optim.AdamW(fused=True)",
    "sgd": "torch.optim.SGD",
    "none": None,
}


def _error(message: str) -> TraceError:
    from .run import TraceError
    return TraceError(message)


def lora_arguments(targets: str | None) -> tuple[list[str], bool]:
    """(lora_attn_modules, apply_lora_to_mlp) for --lora-targets, in Hugging Face's names; torchtune
    adapts the MLP as a whole (w1, w2, w3)."""
    names = [t.strip() for t in (DEFAULT_TARGETS if targets in (None, "", "default")
                                 else targets).split(",") if t.strip()]
    if targets == "all-linear":
        names = list(ATTN) + list(MLP)
    unknown = [n for n in names if n not in ATTN and n not in MLP]
    if unknown:
        raise _error("lora-targets '%s': torchtune adapts %s and the MLP (%s) as a whole"
                     % (",".join(unknown), ", ".join(ATTN), ", ".join(MLP)))
    mlp = [n for n in names if n in MLP]
    if mlp and len(mlp) != len(MLP):
        raise _error("lora-targets: torchtune adapts the whole MLP (%s) or none of it"
                     % ", ".join(MLP))
    return [ATTN[n] for n in names if n in ATTN], bool(mlp)


def check(w: Workload) -> None:
    if w.model not in BUILDERS:
        raise _error("model '%s' has no torchtune builder here (torchtune 0.6.1: %s)"
                     % (w.model, ", ".join(sorted(BUILDERS))))
    if w.method not in BUILDER_PREFIX:
        raise _error("method '%s' is not a torchtune fine-tuning recipe (%s)"
                     % (w.method, ", ".join(BUILDER_PREFIX)))
    if w.precision not in RECIPE_DTYPE:
        raise _error("precision '%s': torchtune's recipes train in dtype bf16 or fp32 (qlora: "
                     "an NF4 base, bf16 compute)" % w.precision)
    if w.checkpointing not in ACTIVATIONS:
        raise _error("checkpointing '%s': torchtune's single-device recipes checkpoint every "
                     "layer or none (full, full+offload: enable_activation_offloading)"
                     % w.checkpointing)
    if w.packing != "none" or w.objective != "sft":
        raise _error("torchtune is traced for sft without packing")
    if w.optimizer not in OPTIMIZERS:
        raise _error("optimizer '%s' is not traced with torchtune (adamw, adamw-fused, sgd)"
                     % w.optimizer)
    if w.optimizer_in_backward == "yes" and (w.method != "full" or w.grad_accum > 1):
        raise _error("optimizer-in-backward: torchtune's full_finetune_single_device, without "
                     "gradient accumulation")


def build(w: Workload, tracker: Tracker) -> Any:
    """The recipe's _setup_model on the device: the model under the recipe's dtype, its RoPE
    cache, the trainable parameters; then the base weights loaded as from a CPU checkpoint. Runs
    inside the tracker (phase "load")."""
    from torchtune import training
    from torchtune.modules.peft import get_adapter_params, set_trainable_params
    mod, name = BUILDERS[w.model]
    kind = BUILDER_PREFIX[w.method]
    family = importlib.import_module("torchtune.models." + mod)
    fn = getattr(family, kind + name, None)
    kwargs: dict[str, Any] = {}
    if fn is None and w.method == "qlora":
        # a qlora_ builder is its lora_ builder with quantize_base=True (e.g. qlora_llama3_2_1b);
        # where torchtune names none (Qwen2.5), the lora_ builder is called so
        fn, kwargs = getattr(family, "lora_" + name, None), {"quantize_base": True}
    if fn is None:
        raise _error("torchtune 0.6.1 has no %s%s builder" % (kind, name))
    if w.method != "full":
        attn, mlp = lora_arguments(w.lora_targets)
        kwargs.update(lora_attn_modules=attn, apply_lora_to_mlp=mlp, lora_rank=w.lora_rank,
                      lora_alpha=2 * w.lora_rank, lora_dropout=w.lora_dropout)
    dtype = RECIPE_DTYPE[w.precision]
    with training.set_default_dtype(dtype), torch.device("meta"):
        model = fn(**kwargs)
        for rope in {id(m): m for m in model.modules() if hasattr(m, "rope_init")}.values():
            if getattr(rope, "cache", None) is None and hasattr(rope, "build_rope_cache"):
                # what rope_init builds on a GPU: theta (dim / 2, fp32) and the cache
                rope.register_buffer("theta", torch.empty(rope.dim // 2), persistent=False)
                rope.build_rope_cache(rope.max_seq_len)
                rope.is_cache_built = True
    if w.method != "full":
        set_trainable_params(model, get_adapter_params(model))
    _load_base(model, dtype)
    return model


def _load_base(model: Any, dtype: torch.dtype) -> None:
    """model.load_state_dict(base weights on the CPU): a plain parameter is copied in place from
    the host (no device buffer); an NF4 weight gets the checkpoint's tensor on the device, then
    quantizes it there (torchao's copy_ into an NF4Tensor) and frees it."""
    from torchao.dtypes.nf4tensor import NF4Tensor
    with torch.no_grad():
        for p in model.parameters():
            if isinstance(p, NF4Tensor) or isinstance(getattr(p, "data", None), NF4Tensor):
                src = torch.empty(p.shape, dtype=dtype, device=p.device)  # the host -> device copy
                p.copy_(src)
                del src


class OffloadOnMeta(saved_tensors_hooks):
    """torchtune's OffloadActivations as a GPU runs it (training/_activation_offloading.py): a
    saved tensor of at least 1024 bytes leaves the device, the last five offloaded stay stashed
    until the copy stream is done with them (max_fwd_stash_size 5), and each comes back as a new
    device tensor in the backward; smaller ones stay."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        stash: list[torch.Tensor] = []

        def pack(t: torch.Tensor) -> Any:
            if t.untyped_storage().nbytes() < 1024 or isinstance(t, torch.nn.Parameter):
                return t
            stash.append(t)
            if len(stash) > 5:
                stash.pop(0)
            return (t.size(), t.stride(), t.dtype, t.device)

        def unpack(packed: Any) -> torch.Tensor:
            if isinstance(packed, torch.Tensor):
                return packed
            stash.clear()
            size, stride, dtype, device = packed
            return torch.empty_strided(size, stride, dtype=dtype, device=device)

        super().__init__(pack, unpack)


def trace_torchtune(w: Workload) -> dict[str, Any]:
    """Traces workload `w` through torchtune's recipe; the run's report (run._finish's)."""
    from torchtune import modules, training
    from torchtune.modules.loss import CEWithChunkedOutputLoss
    from .run import LossRegion, _finish, _train, make_optimizer
    check(w)
    tracker = Tracker()
    with tracker:
        tracker.set_phase("load", 0)
        model = build(w, tracker)
    tracker.register(list(model.parameters()) + list(model.buffers()), "weights")
    emu = CudaEmulation(None, fused_sdpa=w.attention != "eager", tracker=tracker)
    checkpoint, offload_activations = ACTIVATIONS[w.checkpointing]
    if checkpoint:
        # torchtune's wrapping (checkpoint_wrapper, non-reentrant); the recomputation re-enters
        # the CUDA emulation, as it runs the kernels the forward ran on a GPU
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import \
            checkpoint_wrapper
        training.set_activation_checkpointing(
            model, auto_wrap_policy={modules.TransformerSelfAttentionLayer},
            checkpoint_wrapper_fn=functools.partial(
                checkpoint_wrapper,
                context_fn=lambda: (contextlib.nullcontext(), emu.recompute_context())))
    offload = contextlib.nullcontext()
    if offload_activations:
        import torchtune.training._activation_offloading as ao
        saved, ao.OffloadActivations = ao.OffloadActivations, OffloadOnMeta
        try:
            offload = training.get_act_offloading_ctx_manager(model, True)
        finally:
            ao.OffloadActivations = saved
    # TiedLinear (the head sharing the embedding's weight) calls its module `linear`
    head = model.output if isinstance(model.output, torch.nn.Module) else model.output.linear
    region = LossRegion(tracker, head)
    chunked = w.loss == "chunked"
    loss_fn = CEWithChunkedOutputLoss(num_output_chunks=CHUNKS) if chunked else \
        torch.nn.CrossEntropyLoss(ignore_index=-100)
    if chunked:
        model.set_num_output_chunks(CHUNKS)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    opt: Any = None
    if w.optimizer_in_backward == "yes":
        # training.register_optim_in_bwd_hooks: one optimizer per parameter, stepped and its
        # gradient freed in the parameter's post-accumulate-grad hook
        per = {p: _Tagged(make_optimizer(w.optimizer, [p]), tracker) for p in trainable}
        training.register_optim_in_bwd_hooks(model, per)
    else:
        opt = make_optimizer(w.optimizer, trainable)
    vocab = model.tok_embeddings.num_embeddings
    with torch.device("meta"):
        ignore = torch.full((w.batch, 1), -100, dtype=torch.long)  # recipe's ignore_labels_cache
    tracker.register([ignore], "weights")

    def forward() -> torch.Tensor:
        tokens = torch.randint(0, vocab, (w.batch, w.seq), device="meta")
        labels = torch.randint(0, vocab, (w.batch, w.seq), device="meta")
        with offload:
            logits = model(tokens)
        labels = torch.hstack((labels[..., 1:], ignore[: labels.shape[0]]))
        if not isinstance(logits, list):
            labels = labels.reshape(-1)
            logits = logits.reshape(-1, logits.size(-1))
        loss = loss_fn(logits, labels)
        del logits
        emu.end_region()
        # the recipe scales by the micro-batch's tokens, and the gradients by 1 / all tokens
        return loss * (labels != -100).sum()

    def step_hook() -> None:
        training.scale_grads(model, torch.tensor(1.0 / (w.batch * w.seq), device="meta"))

    try:
        with tracker, emu:
            starts = _train(tracker, forward, trainable,
                            _Scaled(opt, step_hook) if opt is not None else None, w.steps,
                            w.grad_accum, loss_tag="logits")
    finally:
        region.close()
    return _finish(tracker, None, model, w, steady_from=starts[-1] if w.steps > 1 else 0)


class _Tagged:
    """One parameter's optimizer stepping inside the backward: what it makes is tagged as the
    optimizer's (the tracker counts its states as optimizer states, not the backward's)."""

    def __init__(self, opt: Any, tracker: Tracker) -> None:
        self.opt, self.tracker = opt, tracker

    def step(self) -> None:
        saved, self.tracker.tag = self.tracker.tag, "optimizer"
        try:
            self.opt.step()
        finally:
            self.tracker.tag = saved

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)


class _Scaled:
    """The recipe's optimizer step: scale_grads first."""

    def __init__(self, opt: Any, before: Callable[[], None]) -> None:
        self.opt, self.before = opt, before

    def step(self) -> None:
        self.before()
        self.opt.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.opt.zero_grad(set_to_none=set_to_none)
