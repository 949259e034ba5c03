"""What CUDA would do that the meta device cannot: autocast, and the fused attention kernels.

Both are done in a ``TorchFunctionMode``, which runs *above* autograd, so autograd records the
casts and the fused kernels exactly as it does on a GPU:

- ``--precision amp-bf16|amp-fp16``: ``torch.autocast`` is a no-op off CUDA/CPU, so its rules are
  applied here (the op lists of PyTorch's "Automatic Mixed Precision" documentation, CUDA column):
  matmul-like ops run in the lower precision, with the casts of parameters cached until the end of
  the autocast region (the forward), as autocast's weight-cast cache does; the ops of the fp32
  list run in fp32 when given lower-precision inputs.
- SDPA: on CUDA, ``F.scaled_dot_product_attention`` picks flash attention for fp16/bf16 inputs
  without a mask (it saves the output and a log-sum-exp per row), else the memory-efficient kernel
  (same saved tensors, fp32 allowed, masks allowed); the meta device would pick the math path,
  which saves the whole attention matrix. Flash attention takes fewer key/value heads than query
  heads as they are when ``enable_gqa`` is set (transformers sets it when there is no mask); heads
  that differ without it (Falcon's multi-query attention) fit no fused kernel, so CUDA runs the
  math path there and so does this.
- Dropout: on CUDA ``F.dropout`` is the fused ``native_dropout`` (a 1-byte bool mask kept for the
  backward); elsewhere it is ``x * mask`` with a mask of x's dtype, so it is routed to
  ``native_dropout`` here. Here the fused aten op is called directly; autograd's
  formula for it (derivatives.yaml) then saves what CUDA saves.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Literal

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack

from .tracker import Tracker

F = torch.nn.functional

LOWER = {"linear", "matmul", "__matmul__", "__rmatmul__", "mm", "bmm", "baddbmm", "addmm",
         "addbmm", "addmv", "addr", "mv", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
         "conv_transpose2d", "conv_transpose3d", "prelu", "chain_matmul", "multi_dot",
         "scaled_dot_product_attention", "_grouped_mm", "grouped_mm"}
FP32 = {"softmax", "log_softmax", "softmin", "cross_entropy", "nll_loss", "layer_norm",
        "group_norm", "pow", "__pow__", "__rpow__", "rsqrt", "exp", "expm1", "log", "log1p",
        "log2", "log10", "sum", "cumsum", "cumprod", "prod", "norm", "normalize", "mse_loss",
        "l1_loss", "smooth_l1_loss", "kl_div", "softplus", "reciprocal", "__rdiv__",
        "__rtruediv__", "acos", "asin", "cosh", "sinh", "tan", "erfinv", "dist", "cdist", "pdist",
        "renorm", "cosine_similarity", "binary_cross_entropy_with_logits", "poisson_nll_loss",
        "margin_ranking_loss", "hinge_embedding_loss", "soft_margin_loss", "triplet_margin_loss",
        "cosine_embedding_loss", "multilabel_margin_loss", "multi_margin_loss"}
LOW_DTYPES = (torch.float16, torch.bfloat16)


def _is_float(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.is_floating_point()


class CudaEmulation(TorchFunctionMode):
    """Autocast (when `amp_dtype` is set) and CUDA's choice of SDPA kernel."""

    def __init__(self, amp_dtype: torch.dtype | None = None, fused_sdpa: bool = True,
                 tracker: Tracker | None = None) -> None:
        super().__init__()
        self.tracker = tracker  # tags autocast's copies of parameters ("weight_cast")
        self.amp_dtype = amp_dtype
        self.fused_sdpa = fused_sdpa
        self.autocast = amp_dtype is not None  # on during the forward, off in the backward
        self.cache_casts = True
        self._cache: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def recompute_context(self) -> CudaEmulation:
        """A fresh emulation for a checkpointed segment's recomputation in the backward: autocast
        as it was in the forward, its own cast cache (dropped when the segment ends)."""
        return CudaEmulation(self.amp_dtype if self.autocast or self.amp_dtype else None,
                             self.fused_sdpa, self.tracker)

    def end_region(self) -> None:
        """The end of the autocast region: cached parameter casts are dropped."""
        self._cache.clear()

    def _to(self, t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        # a parameter, or a view of one (Falcon's `x @ self.weight.T`): a weight copy
        weight = isinstance(t, torch.nn.Parameter) or isinstance(getattr(t, "_base", None),
                                                                  torch.nn.Parameter)
        if self.tracker is None or not weight:
            return t.to(dtype)
        saved, self.tracker.tag = self.tracker.tag, "weight_cast"
        try:
            return t.to(dtype)
        finally:
            self.tracker.tag = saved

    def _cast(self, t: Any, dtype: Any) -> Any:
        if not _is_float(t) or t.dtype == dtype:
            return t
        if self.cache_casts and t.is_leaf and t.requires_grad:
            hit = self._cache.get(id(t))
            if hit is not None and hit[0] is t:
                return hit[1]
            c = self._to(t, dtype)
            self._cache[id(t)] = (t, c)
            return c
        return self._to(t, dtype)

    def _cast_all(self, args: Any, kwargs: dict[str, Any], dtype: torch.dtype | None,
                  only_low: bool = False) -> tuple[tuple[Any, ...], dict[str, Any]]:
        def conv(x: Any) -> Any:
            if only_low and not (_is_float(x) and x.dtype in LOW_DTYPES):
                return x
            if isinstance(x, (list, tuple)):
                return type(x)(conv(y) for y in x)
            return self._cast(x, dtype) if _is_float(x) else x
        return tuple(conv(a) for a in args), {k: conv(v) for k, v in kwargs.items()}

    def _sdpa(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
              attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
              is_causal: bool = False, scale: float | None = None,
              enable_gqa: bool = False) -> torch.Tensor:
        grouped = k.shape[-3] != q.shape[-3]
        # flash attention wants one head size for q, k and v (PyTorch's sdp_utils.cpp,
        # check_head_dim_size_flash); the memory-efficient kernel lets v's differ, as multi-head
        # latent attention's does (DeepSeek: 192-wide q/k heads, 128-wide v heads)
        if (q.dtype in LOW_DTYPES and attn_mask is None and q.shape[-1] <= 256 and
                v.shape[-1] == q.shape[-1] and (enable_gqa or not grouped)):
            # flash attention takes fewer key/value heads as they are (no repeated copies)
            return torch.ops.aten._scaled_dot_product_flash_attention(
                q, k, v, dropout_p, is_causal, False, scale=scale)[0]
        if grouped and not enable_gqa:
            # heads broadcast without enable_gqa (Falcon's multi-query): no fused kernel takes
            # it, CUDA runs the math path, which keeps the attention weights
            return torch.ops.aten._scaled_dot_product_attention_math(
                q, k, v, attn_mask, dropout_p, is_causal, scale=scale)[0]
        if grouped:
            # the memory-efficient kernel wants equal heads: repeated copies (an assumption to
            # check on a GPU, bench/trace/README.md)
            rep = q.shape[-3] // k.shape[-3]
            k = k.repeat_interleave(rep, dim=-3)
            v = v.repeat_interleave(rep, dim=-3)
        need_lse = q.requires_grad or k.requires_grad or v.requires_grad
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            attn_mask = torch.zeros_like(attn_mask, dtype=q.dtype).masked_fill(
                ~attn_mask, float("-inf"))
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            q, k, v, attn_mask, need_lse, dropout_p, is_causal, scale=scale)[0]

    @staticmethod
    def _dropout(x: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        # CUDA's F.dropout is the fused native_dropout, whose backward keeps a 1-byte bool mask;
        # off CUDA it becomes x * mask with a mask of x's dtype (2 or 4 bytes)
        if not training or p == 0 or not _is_float(x) or x.numel() == 0:
            return x
        if p == 1:
            return F.dropout(x, p, training, inplace)
        return torch.ops.aten.native_dropout(x, p, True)[0]

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if self.autocast:
            if name in LOWER:
                args, kwargs = self._cast_all(args, kwargs, self.amp_dtype)
            elif name in FP32:
                args, kwargs = self._cast_all(args, kwargs, torch.float32, only_low=True)
        if func is F.scaled_dot_product_attention and self.fused_sdpa:
            return self._sdpa(*args, **kwargs)
        if func is F.dropout:
            return self._dropout(*args, **kwargs)
        return func(*args, **kwargs)


class _AutocastRegion:
    """``torch.autocast(device_type=..., enabled=...)`` for the device the meta device stands
    for: the emulation's autocast switched on or off for the region, as CUDA's is."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.saved: list[tuple[CudaEmulation, bool]] = []

    def __enter__(self) -> _AutocastRegion:
        for mode in _get_current_function_mode_stack():
            if isinstance(mode, CudaEmulation):
                self.saved.append((mode, mode.autocast))
                mode.autocast = bool(self.enabled and mode.amp_dtype is not None)
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        for mode, state in self.saved:
            mode.autocast = state
        self.saved = []
        return False


@contextlib.contextmanager
def autocast_regions() -> Iterator[None]:
    """Model code that opens an autocast region on its tensors' device (transformers 4.57's
    rotary embeddings: ``torch.autocast(device_type=x.device.type, enabled=False)``, which torch
    refuses for "meta"): the region is the emulation's, as on a GPU it is CUDA's."""
    real = torch.autocast

    def autocast(device_type: str, dtype: torch.dtype | None = None, enabled: bool = True,
                 cache_enabled: bool | None = None) -> _AutocastRegion | torch.autocast:
        if str(device_type) == "meta":
            return _AutocastRegion(enabled)
        return real(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)

    # torch.autocast is a class, patched with a function for the region and restored after:
    # mypy refuses assigning to a class name (misc) and a function of another type (assignment)
    torch.autocast = autocast  # type: ignore[misc,assignment]
    try:
        yield
    finally:
        torch.autocast = real  # type: ignore[misc]  # the class itself, restored
