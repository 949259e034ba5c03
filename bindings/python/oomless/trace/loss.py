"""The model's output head and the loss over its logits, as the tracer marks and computes them."""
from __future__ import annotations

from typing import Any

import torch

from .tracker import Tracker


# ---- the head and the loss ---------------------------------------------------------------------
def output_head(model: Any) -> Any:
    getter = getattr(model, "get_output_embeddings", None)
    head = getter() if getter else None
    return head


class LossRegion:
    """Tags everything the output head and the loss allocate, forward and backward, as logits."""

    def __init__(self, tracker: Tracker, head: Any) -> None:
        self.tracker = tracker
        self.handles: list[Any] = []
        if head is not None:
            self.handles.append(head.register_forward_pre_hook(self._pre))

    def _pre(self, _module: Any, args: tuple[Any, ...]) -> None:
        self.tracker.tag = "logits"
        x = args[0] if args else None
        if isinstance(x, torch.Tensor) and x.requires_grad:
            x.register_hook(self._input_grad)

    def _input_grad(self, grad: torch.Tensor) -> torch.Tensor:
        self.tracker.tag = None
        return grad

    def close(self) -> None:
        for h in self.handles:
            h.remove()


def chunked_causal_loss(model: Any, ids: torch.Tensor, chunk_tokens: int) -> torch.Tensor:
    """Cross-entropy over the output head one chunk of tokens at a time, each chunk's logits
    recomputed in the backward (what chunked / fused linear-cross-entropy losses keep)."""
    import torch.utils.checkpoint as ckpt
    # base_model: the decoder by the class's base_model_prefix (GPT-2's `transformer`, which
    # 4.57's get_decoder does not know: it answers the model itself)
    base = model.get_decoder() if hasattr(model, "get_decoder") else model.base_model
    if base is model or base is getattr(model, "get_base_model", lambda: None)():
        # Llama4ForCausalLM's get_decoder answers the model itself (transformers 5.23), as
        # GPT2LMHeadModel's does in 4.57
        inner = model.get_base_model() if hasattr(model, "get_base_model") else model
        # Llama 4's decoder is its `model` (its base_model_prefix names none it has)
        base = inner.model if hasattr(inner, "model") else inner.base_model
    hidden = base(input_ids=ids).last_hidden_state[:, :-1, :]
    labels = ids[:, 1:]
    head = model.get_output_embeddings()
    h = hidden.reshape(-1, hidden.shape[-1])
    y = labels.reshape(-1)
    n = h.shape[0]

    def piece(hc: torch.Tensor, yc: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(head(hc).float(), yc, reduction="sum")

    total: Any = None
    for start in range(0, n, chunk_tokens):
        part = ckpt.checkpoint(piece, h[start:start + chunk_tokens], y[start:start + chunk_tokens],
                               use_reentrant=False)
        total = part if total is None else total + part
    return total / n


F = torch.nn.functional
