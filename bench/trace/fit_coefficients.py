#!/usr/bin/env python3
"""Pins the estimator's activation coefficients on the tracer.

    build/venv/bin/python bench/trace/fit_coefficients.py [--family llama|gemma2|gemma3_text|gpt2|falcon|bert]
    build/venv/bin/python bench/trace/fit_coefficients.py --moe
    build/venv/bin/python bench/trace/fit_coefficients.py --mla

For one block family, small configs are traced that vary one dimension at a time (hidden size,
MLP width, query heads, key/value heads, head size) at 1 and 2 layers. The bytes the forward
leaves alive for the backward (allocated in the forward, alive at its end, the output head and
loss excluded), per layer (2 layers minus 1) and per token (two sequence lengths), are solved by
least squares for the estimator's per-element coefficients:

    bytes per token per layer = h*hidden + q*(heads*head_dim) + kv*(kv_heads*head_dim)
                                + f*ffn + lse*heads

for each regime (bf16 = "16bit", amp-bf16 = "amp", fp32), trainable (--method full) and with the
base frozen under PEFT LoRA with dropout 0 on the family's attention projections, whose difference
gives the "frozen" coefficients (after LoRA's own saved tensors, which the estimator adds
separately). A family whose projections are tied to the hidden size (GPT-2, Falcon: heads *
head_dim = hidden) cannot separate h from q, so q is folded into h there (and kv too where the
key/value heads follow the query heads).

Eager attention: the same per-layer bytes with eager attention at two sequence lengths S and 2S
separate what grows with the tokens (the linear term, which can differ from SDPA's by more than the
log-sum-exp) from what grows with their square (`score`, bytes per attention score per layer:
three lengths solve L(s) = C + a s + c s^2, with score = c / (B heads)). The difference of the eager linear term from the SDPA one
without its lse is `eager_q` (bytes per query element).

Batch 1 (`batch1`, families that set it: Falcon): torch.matmul broadcasts a single key/value head
to the query heads with expand + reshape, which at batch >= 2 copies the key and value into
contiguous tensors that the bmm saves, and at batch 1 is only a view. The per-token difference of
batch 1 from the fit's batch 2, for SDPA's path and for eager, is solved for bytes per element of
the q and k/v widths.

Once per model (`final_h`): what the 1-layer model keeps per token beyond its layer (final norm,
embedding dropout), per hidden element.

Prints the JSON fragment for data/coefficients.json and the worst residuals, so the fit can be
judged. The tracer's versions are printed with it.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(HERE)), "bindings", "python"))

import numpy as np  # noqa: E402  (comes with torch's venv)

from oomless.trace import run, steps  # noqa: E402

BATCH, SEQ, RANK = 2, 64, 16


def _llama_like(model_type, arch, extra):
    def make(h, f, heads, kv, d, layers):
        cfg = {"model_type": model_type, "architectures": [arch], "hidden_size": h,
               "intermediate_size": f, "num_attention_heads": heads, "num_key_value_heads": kv,
               "head_dim": d, "vocab_size": 512, "max_position_embeddings": 512,
               "tie_word_embeddings": False, "attention_dropout": 0.0, "num_hidden_layers": layers}
        cfg.update(extra)
        return cfg
    return make


def _gpt2(h, f, heads, kv, d, layers):
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_embd": h, "n_inner": f,
            "n_head": heads, "n_layer": layers, "vocab_size": 512, "n_positions": 512,
            "n_ctx": 512, "activation_function": "gelu_new", "resid_pdrop": 0.1,
            "attn_pdrop": 0.1, "embd_pdrop": 0.1, "bos_token_id": 0, "eos_token_id": 0}


def _falcon(h, f, heads, kv, d, layers):
    return {"model_type": "falcon", "architectures": ["FalconForCausalLM"], "hidden_size": h,
            "ffn_hidden_size": f, "num_attention_heads": heads, "num_hidden_layers": layers,
            "multi_query": True, "parallel_attn": True, "bias": False, "alibi": False,
            "new_decoder_architecture": False, "vocab_size": 512,
            "max_position_embeddings": 512, "bos_token_id": 0, "eos_token_id": 0}


def _bert(h, f, heads, kv, d, layers):
    return {"model_type": "bert", "architectures": ["BertForMaskedLM"], "hidden_size": h,
            "intermediate_size": f, "num_attention_heads": heads, "num_hidden_layers": layers,
            "vocab_size": 512, "max_position_embeddings": 512, "type_vocab_size": 2,
            "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
            "attention_probs_dropout_prob": 0.1}


# dims: (hidden, ffn, heads, kv_heads, head_dim); `tied`: head_dim = hidden / heads and the
# key/value heads are fixed by the architecture (None: as many as the query heads)
FAMILIES = {
    "llama": {"make": _llama_like("llama", "LlamaForCausalLM", {}),
              "base": (256, 512, 4, 2, 64), "targets": "q_proj,v_proj", "ntargets": 2,
              "tied": False, "attention": "sdpa"},
    "gemma2": {"make": _llama_like("gemma2", "Gemma2ForCausalLM",
                                   {"hidden_activation": "gelu_pytorch_tanh",
                                    "query_pre_attn_scalar": 64, "sliding_window": 4096,
                                    "attn_logit_softcapping": 50.0,
                                    "final_logit_softcapping": None}),
               "base": (256, 512, 4, 2, 64), "targets": "q_proj,v_proj", "ntargets": 2,
               "tied": False, "attention": "eager"},
    "gemma3_text": {"make": _llama_like("gemma3_text", "Gemma3ForCausalLM",
                                        {"hidden_activation": "gelu_pytorch_tanh",
                                         "query_pre_attn_scalar": 64, "sliding_window": 512,
                                         "attn_logit_softcapping": None,
                                         "final_logit_softcapping": None}),
                    "base": (256, 512, 4, 2, 64), "targets": "q_proj,v_proj", "ntargets": 2,
                    "tied": False, "attention": "sdpa", "qk_norm": True},
    "gpt2": {"make": _gpt2, "base": (256, 1024, 4, None, None), "targets": "c_attn",
             "ntargets": 1, "tied": True, "attention": "sdpa"},
    "bert": {"make": _bert, "base": (256, 1024, 4, None, None), "targets": "query,value",
             "ntargets": 2, "tied": True, "attention": "sdpa"},
    "falcon": {"make": _falcon, "base": (256, 1024, 4, 1, None), "targets": "query_key_value",
               "ntargets": 1, "tied": True, "attention": "sdpa", "batch1": True},
}
VARIATIONS = [{}, {"h": 2}, {"f": 2}, {"heads": 2}, {"kv": 2}, {"d": 2}, {"h": 2, "heads": 2}]
REGIMES = (("16bit", "bf16"), ("amp", "amp-bf16"), ("fp32", "fp32"))


def shapes(fam):
    """The configs of the fit as (hidden, ffn, heads, kv_heads, head_dim)."""
    spec = FAMILIES[fam]
    out = []
    for v in VARIATIONS:
        h, f, heads, kv, d = spec["base"]
        h, f, heads = h * v.get("h", 1), f * v.get("f", 1), heads * v.get("heads", 1)
        if spec["tied"]:
            if "kv" in v or "d" in v:
                continue
            d = h // heads
            kv = heads if kv is None else kv
        elif len(v) > 1:
            continue
        else:
            kv, d = kv * v.get("kv", 1), d * v.get("d", 1)
        out.append((h, f, heads, kv, d))
    return out


def forward_saved(cfg, method, precision, seq, attention, targets, batch=BATCH):
    """Bytes alive at the end of the forward that the forward made, head and loss excluded."""
    captured = {}
    orig = steps._finish

    def keep(tracker, *a, **k):
        captured["t"] = tracker
        return orig(tracker, *a, **k)

    steps._finish = keep
    try:
        run.trace_hf(run.Workload("fit", method=method, precision=precision, batch=batch, seq=seq,
                                  steps=1, lora_targets=targets, lora_dropout=0.0,
                                  attention=attention), cfg_dict=cfg)
    finally:
        steps._finish = orig
    t = captured["t"]
    fwd = next(iv for iv in t.phases if iv[2] == "forward")
    end = fwd[1] - 1
    return sum(a.nbytes for a in t.allocs
               if a.phase == "forward" and a.tag != "logits" and a.t_alloc <= end
               and (a.t_free is None or a.t_free > end))


class Fam:
    def __init__(self, name):
        self.name, self.spec = name, FAMILIES[name]
        self.cache = {}

    def saved(self, shape, layers, method, precision, seq, attention, batch=BATCH):
        key = (shape, layers, method, precision, seq, attention, batch)
        if key not in self.cache:
            cfg = self.spec["make"](*shape, layers)
            self.cache[key] = forward_saved(cfg, method, precision, seq, attention,
                                            self.spec["targets"], batch)
        return self.cache[key]

    def layer(self, shape, method, precision, seq, attention, batch=BATCH):
        """One layer's saved bytes at `seq` tokens per sample (2 layers minus 1)."""
        return (self.saved(shape, 2, method, precision, seq, attention, batch) -
                self.saved(shape, 1, method, precision, seq, attention, batch))

    def quad(self, shape, method, precision, attention, batch=BATCH):
        """(linear bytes per token, bytes per attention score) of one layer: L(s) = C + a s + c s^2
        over three sequence lengths (C: what does not grow with the tokens, such as autocast's
        weight copies; c: the attention weights of eager attention or of SDPA's math path)."""
        seqs = (SEQ, 2 * SEQ, 4 * SEQ)
        L = np.array([self.layer(shape, method, precision, s, attention, batch) for s in seqs],
                     dtype=float)
        M = np.array([[1.0, s, float(s) * s] for s in seqs])
        _c, a, c = np.linalg.solve(M, L)
        return a / batch, c / (batch * shape[2])

    def once(self, shape, precision, attention):
        """Per token and hidden element, what the 1-layer model keeps beyond its layer."""
        h = shape[0]
        d1 = (self.saved(shape, 1, "full", precision, 2 * SEQ, attention) -
              self.saved(shape, 1, "full", precision, SEQ, attention)) / (BATCH * SEQ)
        d2 = (self.layer(shape, "full", precision, 2 * SEQ, attention) -
              self.layer(shape, "full", precision, SEQ, attention)) / (BATCH * SEQ)
        return (d1 - d2) / h


def columns(fam, shape):
    h, f, heads, kv, d = shape
    if FAMILIES[fam]["tied"]:
        # q = heads * d = h; kv = kv * d: separate only when the key/value heads are fixed
        if fam == "falcon":
            return [h, kv * d, f, heads], ["h", "kv", "f", "lse"]
        return [h, f, heads], ["h", "f", "lse"]
    return [h, heads * d, kv * d, f, heads], ["h", "q", "kv", "f", "lse"]


def lora_own(fam, shape):
    """LoRA's own saved bytes per token per layer as the estimator counts them with dropout 0
    (4 bytes per adapted input element for the adapter-dtype copy + 8 * rank per adapted linear)."""
    n = FAMILIES[fam]["ntargets"]
    return 4 * n * shape[0] + 8 * RANK * n


def lstsq(A, y):
    coef, *_ = np.linalg.lstsq(A, y, rcond=None)
    return coef, float(np.abs(A @ coef - y).max())


def fit(fam):
    f = Fam(fam)
    spec = FAMILIES[fam]
    cfgs = shapes(fam)
    rows = [columns(fam, s) for s in cfgs]
    names = rows[0][1]
    A = np.array([r[0] for r in rows], dtype=float)
    lin = [i for i, n in enumerate(names) if n != "lse"]
    att = spec["attention"]  # the family's default path, on which the main terms are fitted
    r2 = lambda v: round(float(v), 2)  # noqa: E731
    out = {}
    for regime, precision in REGIMES:
        main = [f.quad(s, "full", precision, att) for s in cfgs]
        y = np.array([m[0] for m in main])
        if att == "sdpa":
            coef, resid = lstsq(A, y)
            coef_of = dict(zip(names, coef))
            sdpa_score = float(np.mean([m[1] for m in main]))
            eager = [f.quad(s, "full", precision, "eager") for s in cfgs]
            # what eager keeps beyond SDPA's linear terms (without the lse)
            delta = np.array([e[0] for e in eager]) - (y - A[:, names.index("lse")] *
                                                       coef_of["lse"])
            dcoef, dresid = lstsq(A[:, lin], delta)
            score = float(np.mean([e[1] for e in eager]))
        else:
            # the family has no SDPA (Gemma 2's soft-capping): everything on eager, no lse
            coef, resid = lstsq(A[:, lin], y)
            coef_of = dict(zip([names[i] for i in lin], coef))
            coef_of["lse"] = 0.0
            sdpa_score, dcoef, dresid = 0.0, np.zeros(len(lin)), 0.0
            score = float(np.mean([m[1] for m in main]))
        eager_of = dict(zip([names[i] for i in lin], dcoef))
        res = {k: r2(coef_of.get(k, 0.0)) for k in ("h", "q", "kv", "f", "lse")}
        res.update({"score": r2(score), "sdpa_score": r2(sdpa_score),
                    "eager": {k: r2(eager_of.get(k, 0.0)) for k in ("h", "q", "kv", "f")},
                    "final_h": r2(f.once(cfgs[0], precision, att)), "qk_norm": 0})
        # frozen: what full saves and LoRA does not, after LoRA's own tensors
        lora = np.array([f.quad(s, "lora", precision, att)[0] for s in cfgs])
        target = y - (lora - np.array([lora_own(fam, s) for s in cfgs]))
        # per-head q/k norms (Gemma 3) keep a kv-wide part for the frozen base too: it goes to
        # the estimator's frozen qk_norm (per element of q and kv widths), q keeps the rest
        qk = spec.get("qk_norm", False)
        fcols = [i for i, n in enumerate(names) if n in (("h", "q", "kv", "f") if qk else
                                                         ("h", "q", "f"))]
        fz, fresid = lstsq(A[:, fcols], target)
        fzd = dict(zip([names[i] for i in fcols], fz))
        fkv = fzd.get("kv", 0.0)
        res["frozen"] = {"h": r2(fzd.get("h", 0)), "q": r2(fzd.get("q", 0) - fkv),
                         "f": r2(fzd.get("f", 0)), "qk_norm": r2(fkv)}
        if spec.get("batch1"):
            # matmul broadcasts the single key/value head to the query heads: a copy for its
            # bmm at batch 2 (the fit), a view at batch 1; per element of q and k/v widths
            Q = np.array([[s[2] * s[4], s[3] * s[4]] for s in cfgs], dtype=float)
            b1 = {}
            for path, ys in (("sdpa", y), ("eager", np.array([e[0] for e in eager]))):
                d1 = np.array([f.quad(s, "full", precision, path, batch=1)[0] for s in cfgs]) - ys
                b1[path], b1res = lstsq(Q, d1)
                res.setdefault("max_residual_bytes_per_token", {})["batch1_" + path] = r2(b1res)
            res["batch1"] = {"q": r2(b1["sdpa"][0]), "kv": r2(b1["sdpa"][1]),
                             "eager": {"q": r2(b1["eager"][0]), "kv": r2(b1["eager"][1])}}
        res.setdefault("max_residual_bytes_per_token", {}).update(
            {"main": r2(resid), "eager": r2(dresid), "frozen": r2(fresid)})
        out[regime] = res
    return out


def _moe_pair(h, f, k, layers, sparse):
    """A Qwen3-MoE config of `k` experts per token of width f, or (sparse False) the dense Qwen3
    of MLP width k x f that the estimator's other terms stand for."""
    cfg = {"hidden_size": h, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
           "vocab_size": 512, "max_position_embeddings": 512, "tie_word_embeddings": False,
           "attention_dropout": 0.0, "num_hidden_layers": layers}
    if not sparse:
        return dict(cfg, model_type="qwen3", architectures=["Qwen3ForCausalLM"],
                    intermediate_size=f * k)
    return dict(cfg, model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"],
                intermediate_size=f * k, moe_intermediate_size=f, num_experts=8,
                num_experts_per_tok=k, decoder_sparse_step=1, mlp_only_layers=[],
                norm_topk_prob=True)


def fit_moe():
    """What a mixture-of-experts layer keeps beyond a dense layer of MLP width top-k x f: the
    routed copies of the hidden states (per top-k x hidden element, `kh`; `frozen_kh` of it not
    kept under LoRA) and the routing weights and indices (per expert slot, `k`). Transformers'
    grouped experts want bf16, so fp32 cannot be traced: its set repeats the 16-bit one with
    elements of 4 bytes (an assumption)."""
    shapes = [(256, 128, 2), (512, 128, 2), (256, 256, 2), (256, 128, 4), (512, 128, 4),
              (256, 128, 8)]
    A = np.array([[k * h, k, 1.0] for h, _f, k in shapes])
    r2 = lambda v: round(float(v), 2)  # noqa: E731
    out = {}
    for regime, precision in REGIMES[:2]:
        deltas = {}
        for method in ("full", "lora"):
            d = []
            for h, f, k in shapes:
                per = []
                for sparse in (True, False):
                    fam = Fam("llama")
                    fam.spec = dict(fam.spec, make=lambda H, F, He, KV, D, L, s=sparse, k=k:
                                    _moe_pair(H, F, k, L, s))
                    per.append(fam.quad((h, f, 4, 2, 64), method, precision, "sdpa")[0])
                d.append(per[0] - per[1])
            deltas[method] = lstsq(A, np.array(d))
        (full, fres), (lora, lres) = deltas["full"], deltas["lora"]
        out[regime] = {"kh": r2(full[0]), "k": r2(full[1]), "frozen_kh": r2(full[0] - lora[0]),
                       "max_residual_bytes_per_token": max(r2(fres), r2(lres))}
    out["fp32"] = {"kh": r2(out["16bit"]["kh"] * 2), "k": out["16bit"]["k"],
                   "frozen_kh": r2(out["16bit"]["frozen_kh"] * 2)}
    return out


def _mla(shape, layers):
    """A DeepSeek-V3 config of dense layers: (hidden, MLP, heads, key width without RoPE, RoPE
    width, value width, query latent, key/value latent)."""
    h, f, heads, nope, rope, v, ql, kl = shape
    return {"model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
            "hidden_size": h, "intermediate_size": f, "num_attention_heads": heads,
            "num_key_value_heads": heads, "qk_nope_head_dim": nope, "qk_rope_head_dim": rope,
            "v_head_dim": v, "q_lora_rank": ql, "kv_lora_rank": kl, "vocab_size": 512,
            "max_position_embeddings": 512, "tie_word_embeddings": False,
            "attention_dropout": 0.0, "num_hidden_layers": layers, "first_k_dense_replace": 8,
            "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 64,
            "n_group": 1, "topk_group": 1}


def fit_mla():
    """What a layer of multi-head latent attention (DeepSeek V2/V3) saves per token, SDPA, full and
    under LoRA on q_b_proj,kv_b_proj with dropout 0: per hidden element (h), per element of the
    heads' key widths without (nope) and with RoPE (rope) and of their value width (v), per
    element of the query and key/value latents; the MLP (f) and the log-sum-exp (per head) are
    the block's. frozen: what LoRA does not keep of the hidden states and of the latents after
    its own input copies. One dimension of a small config doubled at a time."""
    base = (256, 512, 4, 32, 16, 32, 64, 64)
    shapes = [base] + [tuple(d * 2 if j == i else d for j, d in enumerate(base))
                       for i in range(len(base))]
    fam = Fam("llama")
    fam.spec = dict(fam.spec, make=lambda *a: _mla(a[:-1], a[-1]), targets="q_b_proj,kv_b_proj")
    names = ["h", "f", "nope", "rope", "v", "q_lora", "kv_lora", "lse"]
    A = np.array([[h, f, H * n, H * r, H * v, ql, kl, H] for h, f, H, n, r, v, ql, kl in shapes],
                 dtype=float)
    r2 = lambda v: round(float(v), 2)  # noqa: E731
    out = {}
    for regime, precision in REGIMES:
        full = np.array([fam.quad(s, "full", precision, "sdpa")[0] for s in shapes])
        lora = np.array([fam.quad(s, "lora", precision, "sdpa")[0] for s in shapes])
        coef, resid = lstsq(A, full)
        c = dict(zip(names, coef))
        # LoRA's own: the fp32 copy of each adapted input (16-bit compute) and A's output
        own = np.array([(4 if precision != "fp32" else 0) * (s[6] + s[7]) + 8 * RANK * 2
                        for s in shapes])
        # frozen columns: hidden, MLP (the block's frozen f), both latents together
        F = np.column_stack([A[:, 0], A[:, 1], A[:, 5] + A[:, 6]])
        fz, fres = lstsq(F, full - (lora - own))
        out[regime] = {"h": r2(c["h"]), "nope": r2(c["nope"]), "rope": r2(c["rope"]),
                       "v": r2(c["v"]), "q_lora": r2(c["q_lora"]), "kv_lora": r2(c["kv_lora"]),
                       "frozen": {"h": r2(fz[0]), "lora": r2(fz[2])},
                       "max_residual_bytes_per_token": max(r2(resid), r2(fres)),
                       "block_terms": {"f": r2(c["f"]), "lse": r2(c["lse"]),
                                       "frozen_f": r2(fz[1])}}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="llama", choices=sorted(FAMILIES))
    ap.add_argument("--moe", action="store_true",
                    help="fit what a mixture-of-experts layer keeps beyond a dense one instead")
    ap.add_argument("--mla", action="store_true",
                    help="fit what a layer of multi-head latent attention keeps instead")
    args = ap.parse_args()
    if args.mla:
        print(json.dumps({"mla": fit_mla(), "versions": run.versions()}, indent=1))
        return
    if args.moe:
        print(json.dumps({"moe": fit_moe(), "versions": run.versions()}, indent=1))
        return
    print(json.dumps({args.family: fit(args.family), "versions": run.versions()}, indent=1))


if __name__ == "__main__":
    main()
