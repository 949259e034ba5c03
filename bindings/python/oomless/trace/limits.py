"""What the tracer refuses: :class:`TraceError`, and the bounds of what it builds.

It makes every layer a config names (modules, meta tensors, hooks) and runs each of them, so its
time and memory grow with the count, where the estimator's formulas do not (``oomless estimate``
takes up to 2^40 layers). A config past the bound is refused before anything is built, naming
the field, as an input error (exit 2).

The bound is the estimator's own for following layers one by one: 1024, the layers its per-layer
map of expert and dense layers covers (OOMI_SPARSE_MAP_LAYERS, lib/model/model.h) and the blocks
its replay of DeepSpeed ZeRO-3 follows (OOMI_ZERO3_MAX_BLOCKS, lib/estimate/estimate_zero3.c);
8 times the deepest published model the presets hold (Llama 3.1 405B: 126 layers). A 1024-layer
model traces in about 45 s on 2 cores (a 256-wide Llama, batch 1 x 16, two steps).
"""
from __future__ import annotations

from typing import Any


class TraceError(Exception):
    """A workload the tracer cannot express, with the reason (exit 2)."""


MAX_LAYERS = 1024

# the keys transformers' configuration classes give a count of layers (blocks) under:
# num_hidden_layers (most), n_layer (GPT-2, BLOOM), num_layers / num_decoder_layers (T5),
# n_layers, encoder_layers / decoder_layers (BART, Whisper), num_encoder_layers
LAYER_KEYS = ("num_hidden_layers", "n_layer", "n_layers", "num_layers", "num_decoder_layers",
              "num_encoder_layers", "encoder_layers", "decoder_layers")

# nested configs followed (text_config, vision_config, encoder, decoder ...): this deep at most
_MAX_DEPTH = 8


def too_many_layers(cfg_dict: Any) -> tuple[str, int | float] | None:
    """The first layer count past MAX_LAYERS in a config dict and its nested configs, as
    (dotted key, value), or None."""
    pending: list[tuple[str, dict[str, Any], int]] = (
        [("", cfg_dict, 0)] if isinstance(cfg_dict, dict) else [])
    while pending:
        prefix, d, depth = pending.pop()
        for key, value in d.items():
            if isinstance(value, dict) and depth < _MAX_DEPTH:
                pending.append((prefix + str(key) + ".", value, depth + 1))
            elif (key in LAYER_KEYS and isinstance(value, (int, float))
                  and not isinstance(value, bool) and value > MAX_LAYERS):
                return prefix + key, value
    return None


def check_layers(cfg_dict: Any, where: str | None) -> None:
    """Raises :class:`TraceError` for a config of more than MAX_LAYERS layers (where: its name)."""
    found = too_many_layers(cfg_dict)
    if found:
        key, value = found
        raise TraceError("model config '%s': %s %s: the tracer builds and runs every layer and "
                         "traces at most %d (the layers the estimator follows one by one); "
                         "`oomless estimate` plans it"
                         % (where, key, value if isinstance(value, int) else "%g" % value,
                            MAX_LAYERS))
