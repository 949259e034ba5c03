"""torchtitan 0.3.0's own code on the meta device, on one rank, as its Trainer runs it.

What runs is torchtitan's (pinned in bindings/python/requirements-stack-torchtitan.txt): the
config function of the model's family (``llama3_8b()``, ``qwen3_0_6b()``, ``deepseek_v3_16b()``
in ``torchtitan/models/*/config_registry.py``: torchtitan's configuration has been Python
functions since February 2026) with the model spec of the flavour (``model_registry("1B")``),
the training's batch, sequence and activation checkpointing set on it, then what
``Trainer.__init__`` does with it: the model built on the meta device under ``training.dtype``
(fp32), ``model_spec.parallelize_fn`` (activation checkpointing, then ``apply_fsdp_to_decoder``:
FSDP2 with its MixedPrecisionPolicy, bf16 parameters and fp32 reduction, on a mesh of one
rank), the loss (``ChunkedLossWrapper`` over ``CrossEntropyLoss`` with the lm_head handed to
it), the optimizer container; and ``train_step``: ``forward_backward_step`` per micro-batch,
``clip_grad_norm_`` (foreach) and the optimizer step.

What the meta device cannot do is done here as a GPU does it:
- torch.distributed runs torchtitan's own fake backend (``comm.mode = "fake_backend"``, its dry
  run): FSDP2's all-gathers and reduce-scatters allocate their buffers as on a GPU and move no
  data;
- ``FlexAttention`` compiles ``flex_attention`` with Inductor on a GPU; here its forward keeps
  what the compiled kernels keep (torch/_higher_order_ops/flex_attention.py,
  FlexAttentionAutogradOp: query, key and value as given, the output and an fp32 log-sum-exp per
  query row; the backward's gradients of query, key and value and an fp32 row term), and the
  block mask is made with the shapes ``create_block_mask`` gives (its int32 block tables);
- ``F.rms_norm`` with input and weight of one dtype runs CUDA's fused kernel (which keeps the
  input and an fp32 reciprocal RMS per row), emulate.CudaEmulation;
- AdamW with ``implementation "fused"`` refuses meta parameters: run.ModelledAdam keeps its
  states.
"""
from __future__ import annotations

import contextlib
import importlib
import os
from typing import TYPE_CHECKING, Any, Callable, Iterator, Protocol

import torch

from .emulate import CudaEmulation
from .tracker import Tracker

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import AuxOutput, BlockMask

    from .limits import TraceError
    from .workload import Workload

# preset -> (torchtitan family, flavour, config function whose Trainer.Config is used)
FLAVOURS = {
    "llama-3.2-1b": ("llama3", "1B", "llama3_8b"), "llama-3.2-3b": ("llama3", "3B", "llama3_8b"),
    "llama-3.1-8b": ("llama3", "8B", "llama3_8b"), "llama-3.1-70b": ("llama3", "70B", "llama3_70b"),
    "qwen3-0.6b": ("qwen3", "0.6B", "qwen3_0_6b"), "qwen3-1.7b": ("qwen3", "1.7B", "qwen3_1_7b"),
    "qwen3-4b": ("qwen3", "4B", "qwen3_1_7b"), "qwen3-8b": ("qwen3", "8B", "qwen3_1_7b"),
    "qwen3-14b": ("qwen3", "14B", "qwen3_14b"), "qwen3-32b": ("qwen3", "32B", "qwen3_32b"),
    "qwen3-30b-a3b": ("qwen3", "30B-A3B", "qwen3_30b_a3b"),
    "deepseek-v2-lite": ("deepseek_v3", "16B", "deepseek_v3_16b"),
}
# --checkpointing: torchtitan's activation_checkpoint config class
# (torchtitan/distributed/activation_checkpoint.py), None: no checkpointing
AC_CONFIG = {
    "none": None,
    "full": "FullAC",
    "op-sac": "SelectiveAC",
}


def _error(message: str) -> TraceError:
    from .run import TraceError
    return TraceError(message)


def check(w: Workload) -> None:
    if w.model not in FLAVOURS:
        raise _error("model '%s' has no torchtitan 0.3.0 flavour here (%s)"
                     % (w.model, ", ".join(sorted(FLAVOURS))))
    if w.method != "full" or w.objective != "sft":
        raise _error("torchtitan is traced for full pre-training/fine-tuning (method full, sft)")
    if w.precision not in ("amp-bf16", "fp32"):
        raise _error("precision '%s': torchtitan keeps fp32 parameters and computes in bf16 "
                     "under FSDP2's MixedPrecisionPolicy (amp-bf16), or fp32" % w.precision)
    if w.checkpointing not in AC_CONFIG:
        raise _error("checkpointing '%s': torchtitan 0.3.0 has FullAC (full) and SelectiveAC "
                     "(op-sac; its layer-level selective mode is gone)" % w.checkpointing)
    if w.packing != "none" or w.attention not in ("sdpa", "flash"):
        raise _error("torchtitan is traced with its flex attention (attention sdpa or flash), "
                     "without packing")
    if w.optimizer not in ("adamw", "adamw-fused"):
        raise _error("optimizer '%s': torchtitan's default_adamw (adamw, adamw-fused)"
                     % w.optimizer)


def _fake_distributed() -> int:
    """One rank on torchtitan's fake backend (its dry-run mode), once per process."""
    import torch.distributed as dist
    from torchtitan.config import CommConfig
    from torchtitan.distributed import utils as du
    if not dist.is_initialized():
        os.environ.setdefault("NGPU", "1")
        du.init_distributed(CommConfig(mode="fake_backend"))
    return dist.get_world_size()


def config(w: Workload) -> Any:
    """The Trainer.Config of the model's family, with the workload's batch, sequence, precision,
    checkpointing and optimizer"""
    from torchtitan.distributed.activation_checkpoint import FullAC, SelectiveAC
    family, flavour, fn = FLAVOURS[w.model]
    registry = importlib.import_module("torchtitan.models." + family + ".config_registry")
    cfg = getattr(registry, fn)()
    cfg.model_spec = importlib.import_module("torchtitan.models." + family).model_registry(flavour)
    cfg.training.local_batch_size = w.batch
    cfg.training.global_batch_size = w.batch * w.grad_accum
    cfg.training.seq_len = w.seq
    cfg.training.dtype = "float32"
    cfg.training.mixed_precision_param = "bfloat16" if w.precision == "amp-bf16" else "float32"
    cfg.compile.enable = False
    if w.loss == "standard":  # the whole logits: the CrossEntropyLoss the wrapper chunks
        cfg.loss = getattr(cfg.loss, "loss_fn", cfg.loss)
    ac = AC_CONFIG[w.checkpointing]
    cfg.activation_checkpoint = None if ac is None else {"FullAC": FullAC,
                                                         "SelectiveAC": SelectiveAC}[ac].Config()
    cfg.parallelism.data_parallel_shard_degree = -1
    cfg.parallelism.pipeline_parallel_degree = 1
    cfg.parallelism.tensor_parallel_degree = 1
    cfg.parallelism.expert_parallel_degree = 1
    cfg.parallelism.context_parallel_degree = 1
    return cfg


class _FlexOnCuda(torch.autograd.Function):
    """flex_attention as its compiled kernels run on a GPU: what they allocate and keep."""

    @staticmethod
    def forward(ctx: Any, q: torch.Tensor, k: torch.Tensor,
                v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        out = q.new_empty(q.shape[:-1] + (v.shape[-1],))
        lse = torch.empty(q.shape[:-1], dtype=torch.float32, device=q.device)
        ctx.save_for_backward(q, k, v, out, lse)
        return out, lse

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor,
                 _grad_lse: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v, _out, lse = ctx.saved_tensors
        delta = torch.empty_like(lse)  # the backward's row term (out . grad_out), fp32
        gq, gk, gv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        del delta
        return gq, gk, gv


def _flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, score_mod: Any = None,
          block_mask: Any = None, scale: float | None = None, enable_gqa: bool = False,
          return_aux: Any = None, kernel_options: Any = None) -> tuple[torch.Tensor, AuxOutput]:
    from torch.nn.attention.flex_attention import AuxOutput
    out, lse = _FlexOnCuda.apply(q, k, v)
    return out, AuxOutput(lse=lse if return_aux is not None and return_aux.lse else None)


def _block_mask(mask_mod: Any, B: int | None, H: int | None, Q_LEN: int, KV_LEN: int, *args: Any,
                BLOCK_SIZE: int | tuple[int, int] = 128, **kwargs: Any) -> BlockMask:
    """create_block_mask's result with its shapes: int32 tables of (q blocks x kv blocks)."""
    from torch.nn.attention.flex_attention import BlockMask
    size = BLOCK_SIZE if isinstance(BLOCK_SIZE, int) else BLOCK_SIZE[0]
    nq, nk = -(-Q_LEN // size), -(-KV_LEN // size)
    b, h = B or 1, H or 1
    i32: dict[str, Any] = dict(dtype=torch.int32, device="meta")
    return BlockMask.from_kv_blocks(torch.empty(b, h, nq, **i32), torch.empty(b, h, nq, nk, **i32),
                                    torch.empty(b, h, nq, **i32),
                                    torch.empty(b, h, nq, nk, **i32), BLOCK_SIZE=BLOCK_SIZE,
                                    mask_mod=mask_mod, seq_lengths=(Q_LEN, KV_LEN))


class _StorageFn(Protocol):
    """alloc_storage / free_storage: FSDP2 calls them with the tensor, by name or position."""

    def __call__(self, tensor: torch.Tensor) -> None: ...


@contextlib.contextmanager
def _fsdp_storage(tracker: Tracker) -> Iterator[None]:
    """FSDP2's alloc_storage / free_storage (_fsdp_param.py) resize the unsharded parameters'
    storages in place: on a GPU that allocates and frees device memory; the tracker is told."""
    import torch.distributed.fsdp._fully_shard._fsdp_param as fp
    import torch.distributed.fsdp._fully_shard._fsdp_param_group as fg
    saved = (fp.alloc_storage, fp.free_storage, fg.alloc_storage)

    def told(fn: _StorageFn) -> _StorageFn:
        def wrapped(tensor: torch.Tensor) -> None:
            fn(tensor)
            tracker.resized(tensor.untyped_storage())
        return wrapped

    fp.alloc_storage, fp.free_storage = told(saved[0]), told(saved[1])
    fg.alloc_storage = fp.alloc_storage
    try:
        yield
    finally:
        fp.alloc_storage, fp.free_storage, fg.alloc_storage = saved


@contextlib.contextmanager
def _as_on_cuda(emu: CudaEmulation) -> Iterator[None]:
    """The compiled flex kernels, create_block_mask and the recomputation of checkpointed blocks
    re-entering the emulation, for the duration of one trace."""
    import torchtitan.distributed.activation_checkpoint as ac
    import torchtitan.models.common.attention as attn
    import torchtitan.models.common.decoder as dec
    from .prepare import _Both
    saved = (attn.FlexAttention.compiled_flex_attn, dec.create_attention_mask,
             ac.ptd_checkpoint_wrapper)
    wrap = ac.ptd_checkpoint_wrapper

    def wrapper(module: torch.nn.Module,
                context_fn: Callable[[], tuple[Any, Any]] | None = None, **kw: Any) -> Any:
        def contexts() -> tuple[Any, Any]:
            fwd, rec = context_fn() if context_fn else (contextlib.nullcontext(),
                                                        contextlib.nullcontext())
            return fwd, _Both(emu.recompute_context(), rec)
        return wrap(module, context_fn=contexts, **kw)

    import torch.distributed.fsdp._fully_shard._fully_shard as fsdp_init
    import torchtitan.distributed.parallel_dims as pdims
    saved_dev = (fsdp_init._get_device_from_mesh, pdims.device_type)
    import torch.distributed.fsdp._fully_shard._fsdp_param_group as fsdp_group
    group = fsdp_group.FSDPParamGroup
    saved_check = group._validate_no_meta_params
    # the meta device stands for the GPU: FSDP's buffers are made there, its parameters stay
    # (mypy refuses patching a method: its check is switched off for the trace, restored after)
    group._validate_no_meta_params = lambda self: None  # type: ignore[method-assign]
    fsdp_init._get_device_from_mesh = lambda mesh: torch.device("meta")
    pdims.device_type = "cpu"
    # FSDP2 takes the device module as getattr(torch, device.type) (device_mesh
    # _get_device_handle): torch has no `meta` module, mypy none to assign to
    torch.meta = torch.cpu  # type: ignore[attr-defined]
    attn.FlexAttention.compiled_flex_attn = staticmethod(_flex)
    dec.create_attention_mask = _block_mask
    ac.ptd_checkpoint_wrapper = wrapper
    try:
        yield
    finally:
        (attn.FlexAttention.compiled_flex_attn, dec.create_attention_mask,
         ac.ptd_checkpoint_wrapper) = (staticmethod(saved[0]), saved[1], saved[2])
        fsdp_init._get_device_from_mesh, pdims.device_type = saved_dev
        group._validate_no_meta_params = saved_check  # type: ignore[method-assign]
        del torch.meta  # type: ignore[attr-defined]


def trace_torchtitan(w: Workload) -> dict[str, Any]:
    """Traces workload `w` through torchtitan's Trainer steps; the run's report."""
    from torchtitan.components.loss import ChunkedLossWrapper
    from torchtitan.config import TORCH_DTYPE_MAP
    from torchtitan.distributed import ParallelDims
    from torchtitan.distributed import utils as du
    from torchtitan.tools import utils
    from .build import ModelledAdam
    from .run import LossRegion, _finish, _train
    check(w)
    world = _fake_distributed()
    cfg = config(w)
    spec = cfg.model_spec
    spec.model.update_from_config(config=cfg)
    tracker = Tracker()
    emu = CudaEmulation(None, tracker=tracker)
    with _as_on_cuda(emu):
        dims = ParallelDims.from_config(cfg.parallelism, world)
        with torch.device("meta"), utils.set_default_dtype(TORCH_DTYPE_MAP[cfg.training.dtype]):
            model = spec.model.build()
        model = spec.parallelize_fn(model, parallel_dims=dims, training=cfg.training,
                                    parallelism=cfg.parallelism, compile_config=cfg.compile,
                                    ac_config=cfg.activation_checkpoint, dump_folder="")
        # Trainer: model.to_empty(device) then init_weights, which also ties the embedding to
        # the lm_head again where the model ties them (Decoder.init_states); the meta device
        # stands for the GPU, so there is nothing to move
        with torch.no_grad():
            model.init_weights(buffer_device=None)
        model.train()
        loss_fn = cfg.loss.build(compile_config=cfg.compile)
        if isinstance(loss_fn, ChunkedLossWrapper):
            loss_fn.set_lm_head(model.lm_head)
            model._skip_lm_head = True
        tracker.register(list(model.parameters()) + list(model.buffers()), "weights")
        region = LossRegion(tracker, model.lm_head)
        params = list(model.parameters())
        # default_adamw's states as torch.optim.AdamW keeps them (fused refuses meta tensors)
        opt = ModelledAdam(params, "fused")
        vocab = spec.model.vocab_size
        tokens = w.batch * w.seq * w.grad_accum

        def forward() -> torch.Tensor:
            inputs = torch.randint(0, vocab, (w.batch, w.seq), device="meta")
            labels = torch.randint(0, vocab, (w.batch, w.seq), device="meta")
            positions = torch.arange(w.seq, device="meta").expand(w.batch, w.seq)
            masks = model.get_attention_masks(positions=positions)
            pred = model(inputs, positions=positions, attention_masks=masks)
            loss, _ = loss_fn(pred, labels, torch.tensor(tokens, device="meta"),
                              positions=positions)
            del pred
            emu.end_region()
            return loss

        class Step:
            """train_step's optimizer part: clip_grad_norm_ (foreach), then the step."""

            @staticmethod
            def step() -> None:
                # foreach=True on a GPU; the meta device refuses the foreach API (what the
                # foreach norms allocate is one scalar per gradient)
                du.clip_grad_norm_(params, cfg.training.max_norm, foreach=False)
                opt.step()

            @staticmethod
            def zero_grad(set_to_none: bool = True) -> None:
                opt.zero_grad(set_to_none)

        try:
            with tracker, emu, _fsdp_storage(tracker):
                starts = _train(tracker, forward, params, Step, w.steps, w.grad_accum,
                                loss_tag="logits")
        finally:
            region.close()
    return _finish(tracker, None, model, w, steady_from=starts[-1] if w.steps > 1 else 0)
