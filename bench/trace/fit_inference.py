#!/usr/bin/env python3
"""Pins the estimator's inference (prefill) working set on the tracer, per model type.

    build/venv/bin/python bench/trace/fit_inference.py [--models gpt2,falcon-7b,...]

A prefill keeps, besides the weights and the KV cache, the working set of the layer being run.
Its peak is the larger of two moments:

  - the MLP: bytes per token = (h * hidden + f * MLP width) x the compute dtype's size, the MLP
    width being the experts' width x top-k for a mixture of experts;
  - attention, where the attention weights are materialised (eager attention, SDPA's math
    path): bytes per token = a * hidden x the dtype's size, plus `score` bytes per attention score
    (batch x heads x seq^2 of them).

For each model type, a preset's config cut to two layers is traced in bf16 at batch 2 (the real
widths, so no fit across shapes is needed): at 32 and 64 tokens (where no attention weights
matter) with the MLP width doubled and tripled (so that the MLP moment is the larger), which gives
f and then h; and, for SDPA and for
eager attention, at 1024 and 2048 tokens, which gives a and `score` where the attention moment
is the larger (score 0 means no attention weights are kept: a fused kernel).

Prints the JSON fragment for data/coefficients.json ("inference"."by_model_type") with the
tracer's versions.
"""
import argparse
import copy
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))

from oomless.trace import run  # noqa: E402

BATCH = 2
# decoders: an encoder's masked-LM logits over every position are a moment of their own
MODELS = ("llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "qwen3-8b", "gemma-2-2b", "gemma-3-1b",
          "phi-3-mini", "mixtral-8x7b", "gpt2", "falcon-7b")
LAYER_KEYS = ("num_hidden_layers", "n_layer")


def hidden(cfg):
    return cfg.get("hidden_size") or cfg["n_embd"]


def ffn(cfg):
    for key in ("intermediate_size", "n_inner", "ffn_hidden_size"):
        if cfg.get(key):
            return key, cfg[key]
    # GPT-2 (n_inner null) and Falcon (ffn_hidden_size absent) use 4 x hidden
    return ("n_inner" if "n_embd" in cfg else "ffn_hidden_size"), 4 * hidden(cfg)


def two_layers(cfg, mlp_scale=1):
    """The config cut to two layers (from the second on, the embedding's output that the model's
    forward still holds is a tensor of its own beside the residual stream)."""
    c = copy.deepcopy(cfg)
    for key in LAYER_KEYS:
        if key in c:
            c[key] = 2
    if "layer_types" in c:
        c["layer_types"] = c["layer_types"][:2]
    key, width = ffn(cfg)
    c[key] = width * mlp_scale
    return c


def acts(cfg, seq, attention):
    """Activations at the prefill's peak; a model that has no SDPA path (Gemma 2's soft-capping:
    transformers refuses it) runs eager, as it would for a user who asked for SDPA."""
    w = run.Workload("fit", method="inference", precision="bf16", batch=BATCH, seq=seq,
                     attention=attention)
    try:
        return run.trace_hf(w, cfg_dict=cfg)["memory"]["activations"]
    except ValueError as exc:
        if attention != "sdpa" or "scaled_dot_product_attention" not in str(exc):
            raise
        return acts(cfg, seq, "eager")


def fit(cfg):
    h = hidden(cfg)
    _key, f = ffn(cfg)
    topk = cfg.get("num_experts_per_tok") if cfg.get("num_local_experts") else None
    if cfg.get("first_k_dense_replace", 0) < 2:  # DeepSeek: both layers kept must be dense
        cfg = dict(cfg, first_k_dense_replace=2)
    fk = f * (topk or 1)
    e = 2.0  # bf16
    per_tok = {}
    # MLP widths where the MLP moment is the peak; multi-head latent attention (DeepSeek) expands
    # every head's queries, keys and values, a moment above 3 x the MLP width, so wider there
    scales = (6, 8) if cfg.get("kv_lora_rank") else (2, 3)
    for scale in scales:
        c = two_layers(cfg, scale)
        a32, a64 = acts(c, 32, "sdpa"), acts(c, 64, "sdpa")
        per_tok[scale] = (a64 - a32) / (BATCH * 32) / e  # elements per token
    lo, hi = scales
    fcoef = (per_tok[hi] - per_tok[lo]) / ((hi - lo) * fk)
    hcoef = (per_tok[lo] - fcoef * lo * fk) / h
    out = {"h": round(hcoef, 2), "f": round(fcoef, 2)}
    c = two_layers(cfg)
    heads = cfg.get("num_attention_heads") or cfg.get("n_head")
    for attention in ("sdpa", "eager"):
        s1, s2 = 1024, 2048
        A1, A2 = acts(c, s1, attention), acts(c, s2, attention)
        # A = B s a h e + B heads s^2 score  (the attention moment), if it is the peak
        score = (A2 / s2 - A1 / s1) / (BATCH * heads * (s2 - s1))
        a = (A1 / (BATCH * s1) - score * heads * s1) / (h * e)
        mlp = BATCH * s2 * (hcoef * h + fcoef * fk) * e
        if score > 0.01 and A2 > 1.05 * mlp:
            out[attention] = {"a": round(a, 2), "score": round(score, 2)}
        elif A2 > 1.05 * mlp:
            # a fused kernel (no attention weights) whose moment still tops the MLP's: the
            # expanded per-head tensors of multi-head latent attention, linear in the tokens
            out[attention] = {"a": round(A2 / (BATCH * s2) / (h * e), 2), "score": 0}
        else:
            out[attention] = {"a": 0, "score": 0}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    args = ap.parse_args()
    res = {}
    for name in args.models.split(","):
        with open(os.path.join(ROOT, "data", "models", name + ".json"), encoding="utf-8") as fh:
            cfg = json.load(fh)
        mt = cfg["model_type"]
        if mt in res:
            continue
        res[mt] = dict(fit(cfg), preset=name)
        print(mt, json.dumps(res[mt]), file=sys.stderr, flush=True)
    print(json.dumps({"by_model_type": res, "versions": run.versions()}, indent=1))


if __name__ == "__main__":
    main()
