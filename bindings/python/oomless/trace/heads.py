"""What a Hugging Face model is trained with and which kernels it runs, as on a GPU.

- the targets of its head's loss: a causal or masked language model predicts its tokens, a
  sequence classifier one label per sequence (a float per sequence for one label: regression),
  a token classifier one label per token, extractive question answering a start and an end
  position per sequence, an encoder-decoder model its target tokens; a model without a head
  (``BertModel``) is trained on its last hidden state;
- the mixture-of-experts path: transformers 5.x dispatches an experts block to the implementation
  in ``config._experts_implementation`` (integrations/moe.py, ``use_experts_implementation``),
  which ``from_pretrained`` and ``_from_config`` set to "grouped_mm" wherever the class allows it
  (modeling_utils.py, get_correct_experts_implementation). On CUDA ``grouped_mm_experts_forward``
  runs ``torch.nn.functional.grouped_mm`` on compute capability 8.0 and later
  (``_can_use_grouped_mm``) — the path traced; a model built directly (``Qwen3MoeForCausalLM(
  config)``) keeps the eager loop over the experts the router picked, whose shapes depend on the
  routing (``nonzero``, ``where``): no GPU runs it from a loaded checkpoint, and the meta device
  cannot run it.
"""
from __future__ import annotations

from typing import Any

import torch

# the heads' class name endings, as lib/model/model.c (head_of) reads `architectures`
_SEQ_CLS = "ForSequenceClassification"
_TOKEN_CLS = "ForTokenClassification"
_QA = "ForQuestionAnswering"


def needs_pad_token(cfg_dict: dict[str, Any]) -> bool:
    """A decoder's sequence classifier pools the last token that is not padding; transformers
    refuses a batch above 1 without a pad token (TRL's RewardTrainer sets one)."""
    archs = cfg_dict.get("architectures") or []
    return any(a.endswith(_SEQ_CLS) for a in archs) and cfg_dict.get("pad_token_id") is None


def targets(model: Any, ids: torch.Tensor) -> dict[str, torch.Tensor] | None:
    """The loss keywords of `model`'s head for the token batch `ids`; None where the model has no
    head (train on the last hidden state)."""
    base = getattr(model, "get_base_model", lambda: model)()
    name = type(base).__name__
    rows = ids.shape[0]
    labels = getattr(base.config, "num_labels", 2)
    if name.endswith(_SEQ_CLS):
        if labels == 1:  # problem_type regression: MSE on one float per sequence
            return {"labels": torch.empty(rows, device=ids.device, dtype=torch.float32)}
        return {"labels": torch.randint(0, labels, (rows,), device=ids.device)}
    if name.endswith(_TOKEN_CLS):
        return {"labels": torch.randint(0, labels, ids.shape, device=ids.device)}
    if name.endswith(_QA):
        pos = ids.shape[1]
        return {"start_positions": torch.randint(0, pos, (rows,), device=ids.device),
                "end_positions": torch.randint(0, pos, (rows,), device=ids.device)}
    if getattr(base, "get_output_embeddings", lambda: None)() is None and not hasattr(
            base, "lm_head"):
        return None
    return {"labels": ids}


def loss(model: Any, ids: torch.Tensor, **kw: Any) -> torch.Tensor:
    """One micro-batch's loss, as the Trainer computes it (outputs dropped before the backward)."""
    t = targets(model, ids)
    if t is None:
        return model(input_ids=ids, **kw).last_hidden_state.float().pow(2).mean()
    return model(input_ids=ids, **t, **kw).loss


def experts_path(model: Any) -> str | None:
    """The experts implementation a GPU runs, set on the model; None for a model without a
    dispatched experts block (dense, or transformers 4's per-expert loop)."""
    config = getattr(model, "config", None)
    setter = getattr(model, "set_experts_implementation", None)
    if config is None or setter is None or not hasattr(config, "_experts_implementation"):
        return None
    try:
        if not model._can_set_experts_implementation():
            return None
    except AttributeError:
        return None
    setter("grouped_mm")
    return "grouped_mm"
