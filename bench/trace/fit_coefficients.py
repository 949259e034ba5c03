#!/usr/bin/env python3
"""Pins the estimator's activation coefficients on the tracer.

    build/venv/bin/python bench/trace/fit_coefficients.py [--family llama]

For one block family, small configs are traced that vary one dimension at a time (hidden size,
MLP width, query heads, key/value heads, head size) at 1 and 2 layers. The bytes the forward
leaves alive for the backward (allocated in the forward, alive at its end, the output head and
loss excluded), per layer (2 layers minus 1) and per token (two sequence lengths), are solved by least squares for
the estimator's per-element coefficients:

    bytes per token per layer = h*hidden + q*(heads*head_dim) + kv*(kv_heads*head_dim)
                                + f*ffn + lse*heads

for each regime (bf16 = "16bit", amp-bf16 = "amp", fp32), trainable (--method full) and with the
base frozen under PEFT LoRA with dropout 0 on q_proj,v_proj, whose difference gives the "frozen"
coefficients (after LoRA's own saved tensors, which the estimator adds separately). Prints the
JSON fragment for data/coefficients.json and the worst residual, so the fit can be judged.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bindings", "python"))

import numpy as np  # noqa: E402  (comes with torch's venv)

from oomless.trace import run  # noqa: E402

BASE = {"llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                  "hidden_size": 256, "intermediate_size": 512, "num_attention_heads": 4,
                  "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 512,
                  "max_position_embeddings": 512, "tie_word_embeddings": False,
                  "attention_dropout": 0.0}}
VARIATIONS = [{}, {"hidden_size": 512}, {"intermediate_size": 1024},
              {"num_attention_heads": 8}, {"num_key_value_heads": 4}, {"head_dim": 128}]
BATCH, SEQ = 2, 64


def forward_saved(cfg, method, precision, seq):
    """Bytes alive at the end of the forward that the forward made, head and loss excluded."""
    captured = {}
    orig = run._finish

    def keep(tracker, *a, **k):
        captured["t"] = tracker
        return orig(tracker, *a, **k)

    run._finish = keep
    try:
        run.trace_hf(run.Workload("fit", method=method, precision=precision, batch=BATCH, seq=seq,
                                  steps=1, lora_targets="q_proj,v_proj", lora_dropout=0.0),
                     cfg_dict=cfg)
    finally:
        run._finish = orig
    t = captured["t"]
    fwd = next(iv for iv in t.phases if iv[2] == "forward")
    end = fwd[1] - 1
    return sum(a.nbytes for a in t.allocs
               if a.phase == "forward" and a.tag != "logits" and a.t_alloc <= end
               and (a.t_free is None or a.t_free > end))


def per_layer_token(cfg, method, precision):
    """Per layer (2 layers minus 1) and per token (SEQ tokens more per sample): what does not grow
    with the tokens, such as autocast's cached bf16 copies of the weights, drops out."""
    def layer(seq):
        one = dict(cfg, num_hidden_layers=1)
        two = dict(cfg, num_hidden_layers=2)
        return forward_saved(two, method, precision, seq) - forward_saved(one, method, precision,
                                                                          seq)
    return (layer(2 * SEQ) - layer(SEQ)) / (BATCH * SEQ)


def dims(cfg):
    return [cfg["hidden_size"], cfg["num_attention_heads"] * cfg["head_dim"],
            cfg["num_key_value_heads"] * cfg["head_dim"], cfg["intermediate_size"],
            cfg["num_attention_heads"]]


def lora_own(cfg, rank=16):
    """LoRA's own saved bytes per token per layer as the estimator counts them with dropout 0
    (lora_in_fp32 bytes per adapted input element + 8 * rank per adapted linear; q and v)."""
    return 4 * 2 * cfg["hidden_size"] + 8 * rank * 2


def fit(family):
    base = BASE[family]
    cfgs = [dict(base, **v) for v in VARIATIONS]
    A = np.array([dims(c) for c in cfgs], dtype=float)
    out = {}
    for regime, precision in (("16bit", "bf16"), ("amp", "amp-bf16"), ("fp32", "fp32")):
        full = np.array([per_layer_token(c, "full", precision) for c in cfgs])
        lora = np.array([per_layer_token(c, "lora", precision) for c in cfgs])
        coef, *_ = np.linalg.lstsq(A, full, rcond=None)
        resid = np.abs(A @ coef - full).max()
        # frozen: what full saves and LoRA does not, over h, q, f (the estimator's three)
        frozen_target = full - (lora - np.array([lora_own(c) for c in cfgs]))
        Af = A[:, [0, 1, 3]]
        fz, *_ = np.linalg.lstsq(Af, frozen_target, rcond=None)
        fresid = np.abs(Af @ fz - frozen_target).max()
        r = lambda v: round(float(v), 2)  # noqa: E731
        out[regime] = {"h": r(coef[0]), "q": r(coef[1]), "kv": r(coef[2]), "f": r(coef[3]),
                       "lse": r(coef[4]),
                       "frozen": {"h": r(fz[0]), "q": r(fz[1]), "f": r(fz[2])},
                       "max_residual_bytes_per_token": [r(resid), r(fresid)]}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="llama", choices=sorted(BASE))
    args = ap.parse_args()
    print(json.dumps({args.family: fit(args.family), "versions": run.versions()}, indent=1))


if __name__ == "__main__":
    main()
