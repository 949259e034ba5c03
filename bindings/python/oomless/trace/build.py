"""The model, its LoRA adapter and its optimizer, built on the meta device as users build them."""
from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Iterable

import torch

from .._vocab import option
from . import heads
from .limits import TraceError


def _values(name: str, command: str | None = None) -> list[str]:
    """The values of an option in the library's table (those `command` takes)."""
    return [v["name"] for v in option(name, command)["values"]]


DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# what --precision means: (dtype of the weights, autocast dtype or None)
PRECISIONS = {
    "fp32": ("fp32", None), "bf16": ("bf16", None), "fp16": ("fp16", None),
    "amp-bf16": ("fp32", "bf16"), "amp-fp16": ("fp32", "fp16"),
}


# ---- finding a model's config ------------------------------------------------------------------
def find_config(model: str) -> tuple[dict[str, Any], str]:
    """The config.json dict and path a model argument names: a file, a folder holding one, a
    preset, or a hub id in the local Hugging Face cache, by the library's rules
    (oom_model_resolve, as ``oomless estimate --model`` finds it)."""
    from .. import OomlessError, _model_config_path
    from .config_check import read_config
    try:
        path = _model_config_path(model)
    except OomlessError as exc:
        raise TraceError(str(exc)) from exc
    return read_config(path), path


def build_hf(cfg_dict: dict[str, Any], dtype: torch.dtype, attention: str,
             device: str = "meta") -> tuple[Any, Any]:
    """The transformers model the config names, with no weights (meta device), or with random
    ones on `device` (bench/accuracy/measure.py builds the same model on a GPU)."""
    import transformers
    from .config_check import model_class_of, refused_by_transformers
    cfg_dict = dict(cfg_dict, **({"pad_token_id": 0} if heads.needs_pad_token(cfg_dict) else {}))
    if "model_type" not in cfg_dict:
        raise TraceError("model config has no 'model_type'")
    cls = model_class_of(cfg_dict)
    for key in ("torch_dtype", "dtype", "quantization_config"):
        cfg_dict.pop(key, None)
    impl = {"eager": "eager", "sdpa": "sdpa", "flash": "sdpa"}[attention]
    with refused_by_transformers(cls):
        cfg = transformers.AutoConfig.for_model(**cfg_dict)
        with torch.device(device):
            if cls is not None:
                model = cls._from_config(cfg, dtype=dtype, attn_implementation=impl)
            else:
                model = transformers.AutoModelForCausalLM.from_config(
                    cfg, dtype=dtype, attn_implementation=impl)
    return model, cfg


def default_lora_targets(model: Any) -> Any:
    """The modules ``--lora-targets default`` adapts: PEFT's default for the model's type
    (TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING), given by name: left to get_peft_model,
    a LoraConfig without target_modules reaches PEFT 0.21.2 empty for Mixtral under transformers
    5.23 ("No `target_modules` passed") though the mapping names q_proj and v_proj. Where PEFT
    has none (Phi-3, Qwen-MoE, DeepSeek V2/V3: get_peft_model refuses a LoraConfig without
    target_modules) the ones `oomless estimate` plans for the default, asked of the library for
    the model's own config, so that the trace adapts what the estimate counts."""
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING
    mapped = TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING.get(model.config.model_type)
    if mapped is not None:
        return mapped if isinstance(mapped, str) else list(mapped)
    from .. import OomlessError, estimate
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(model.config.to_dict(), f)
    try:
        doc = estimate(model=f.name, method="lora", seq=1)
    except OomlessError as exc:
        raise TraceError("LoRA: PEFT has no default target modules for model_type '%s' and the "
                         "estimator's cannot be found (%s)" % (model.config.model_type, exc)) from exc
    finally:
        os.unlink(f.name)
    return doc["workload"]["lora_targets"].split(",")


def apply_lora(model: Any, rank: int, targets: str | None, dropout: float) -> Any:
    import peft
    if targets in (None, "", "default"):
        target_modules = default_lora_targets(model)
    elif targets == "all-linear":
        target_modules = "all-linear"
    else:
        target_modules = [t.strip() for t in targets.split(",") if t.strip()]
    conf = peft.LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=dropout,
                           target_modules=target_modules)
    try:
        return peft.get_peft_model(model, conf)
    except ValueError as exc:
        raise TraceError("LoRA: %s" % exc) from exc


class ModelledAdam:
    """The states of an optimizer that cannot run on the meta device, kept as it keeps them.

    - "fused": torch.optim.AdamW(fused=True) refuses meta tensors; its state is exp_avg and
      exp_avg_sq like the parameter, updated by one CUDA kernel in place (no temporaries).
    - "8bit": bitsandbytes' AdamW8bit (CUDA only): two uint8 states per element plus an fp32
      absmax per block of 2048 elements for each (block-wise quantisation), and 32-bit states for
      parameters under 4096 elements (its min_8bit_size) — bitsandbytes' documentation of 8-bit
      optimizers. The updates are done in place, as the kernels do.
    """

    BLOCK, MIN_8BIT = 2048, 4096

    def __init__(self, params: Iterable[torch.Tensor], kind: str) -> None:
        self.params, self.kind = list(params), kind
        self.state: dict[torch.Tensor, list[torch.Tensor]] = {}

    def _init(self, p: torch.Tensor) -> list[torch.Tensor]:
        if self.kind == "8bit" and p.numel() >= self.MIN_8BIT:
            blocks = (p.numel() + self.BLOCK - 1) // self.BLOCK
            return [torch.empty_like(p, dtype=torch.uint8), torch.empty_like(p, dtype=torch.uint8),
                    torch.empty(blocks, dtype=torch.float32, device=p.device),
                    torch.empty(blocks, dtype=torch.float32, device=p.device)]
        dtype = torch.float32 if self.kind == "8bit" else p.dtype
        return [torch.zeros_like(p, dtype=dtype), torch.zeros_like(p, dtype=dtype)]

    def step(self) -> None:
        for p in self.params:
            if p.grad is None:
                continue
            st = self.state.get(p)
            if st is None:
                st = self.state[p] = self._init(p)
            if st[0].dtype == p.grad.dtype:
                st[0].lerp_(p.grad, 0.1)
                st[1].mul_(0.999).addcmul_(p.grad, p.grad, value=0.001)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None


def make_optimizer(name: str, params: Iterable[torch.Tensor]) -> Any:
    params = list(params)
    if name == "none" or not params:
        return None
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-4, foreach=True)
    if name == "adamw-fused":
        return ModelledAdam(params, "fused")
    if name == "adamw-8bit":
        return ModelledAdam(params, "8bit")
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=True)
    if name == "sgd-momentum":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9, foreach=True)
    if name == "adafactor":
        raise TraceError("optimizer 'adafactor' cannot be traced: torch.optim.Adafactor reads a "
                         "tensor's value (.item()) in its step, which the meta device does not "
                         "have")
    if name.startswith("paged-"):
        raise TraceError("optimizer '%s' cannot be traced: bitsandbytes pages its states in CUDA "
                         "unified memory, outside the allocator the tracer follows" % name)
    raise TraceError("optimizer '%s' cannot be traced (lion is not in torch.optim; the "
                     "traced ones: %s)" % (name, ", ".join(_values("optimizer", "trace"))))
