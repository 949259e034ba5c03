/* estimate_inference.c - an inference prefill: the weights under tensor parallelism, the KV
 * cache as a serving engine or transformers lays it out, the working set (docs/estimate.md). */
#include "estimate/estimate_ctx.h"

#include <string.h>

double oomi_est_tp_kv_heads(const ctx *x)
{
    long kv = x->m->kv_heads > 0 ? x->m->kv_heads : x->m->heads;
    return kv >= x->w->parallel.tp ? (double)(kv / x->w->parallel.tp) : 1;
}

/* What a serving engine allocates per layer type (vLLM's KV-cache specs, vllm/v1/
 * kv_cache_interface.py): FullAttentionSpec, a page of block_size tokens x num_kv_heads x (head
 * size of K + of V) x dtype bytes per layer; SlidingWindowSpec, the same page but only the
 * blocks of the last sliding_window tokens of a sequence (the scheduler frees the ones before,
 * vllm/v1/core/single_type_kv_cache_manager.py, SlidingWindowManager); MLAAttentionSpec, one
 * head (num_kv_heads 1) of kv_lora_rank + qk_rope_head_dim, no separate V. MLA's latent is not
 * split over tensor-parallel GPUs: each holds all of it (vLLM's ModelConfig.get_num_kv_heads is
 * 1 for MLA). transformers' DynamicCache keeps every token of every layer during a prefill; for
 * MLA it too stores the latent and the RoPE key, before their expansion to the heads
 * (modeling_deepseek_v3.py, DeepseekV3Attention.forward: "Cache read / write is performed while
 * latent KV is still compressed"; the tracer's KV cache of a 3-layer DeepSeek-V3 at 2 x 1024
 * tokens is 3 x 2048 x 576 x 2 bytes). */
void oomi_kv_layout_of(oomi_kv_layout *out, const oom_workload *w)
{
    const oomi_model *m = w->model;
    long tp = w->parallel.tp > 1 ? w->parallel.tp : 1;
    long kv = m->kv_heads > 0 ? m->kv_heads : m->heads;

    memset(out, 0, sizeof(*out));
    if (w->k.method != OOM_METHOD_INFERENCE || m->block == OOMI_BLOCK_BERT)
        return;
    out->vllm = !w->serve.kv_transformers;
    out->latent = m->kv_lora > 0;
    out->full = m->layers;
    if (out->vllm && m->window > 0 && m->window_layers > 0) {
        out->sliding = m->window_layers;
        out->full = m->layers - m->window_layers;
        out->window = m->window;
    }
    if (out->latent)
        out->elems = (double)(m->kv_lora + m->qk_rope);
    else /* KV heads divided by tp but never below one per GPU (see tp_kv_heads) */
        out->elems = 2.0 * (kv >= tp ? (double)(kv / tp) : 1) * (double)m->head_dim;
}

double oomi_kv_bytes(const oomi_kv_layout *kv, double batch, double seq, double e)
{
    double win = kv->window > 0 && (double)kv->window < seq ? (double)kv->window : seq;
    return ((double)kv->full * seq + (double)kv->sliding * win) * kv->elems * batch * e;
}

/* The prefill's working set fitted on the trace (bench/trace/fit_inference.py): the largest of
 * the MLP moment (with experts: a dense layer's MLP, and a layer with experts, which keeps
 * moe_kh elements per top-k x hidden element), and the attention moment where attention weights
 * are kept (eager, SDPA's math path) or where multi-head latent attention's expanded heads (per
 * element of heads x (2 x query/key width + value width)) outgrow the MLP's */
static double fitted_prefill(const ctx *x, const oomi_infer_coef *c, double b, double s)
{
    const oomi_model *m = x->m;
    double tp = (double)x->w->parallel.tp, heads = (double)m->heads / tp, h = (double)m->hidden;
    double f = m->ffn_tok_max / tp, a = 0, per = 0, hc = 0, act, att, hd = 0;

    if (c->moe_kh > 0 && m->sparse_layers > 0) {
        double sparse = c->h * h + c->moe_kh * (double)m->routed * h;
        f = m->sparse_layers < m->layers ? (double)m->ffn_dense / tp : 0;
        act = b * s * (c->h * h + c->f * f > sparse ? c->h * h + c->f * f : sparse) * x->e;
    } else {
        act = b * s * (c->h * h + c->f * f) * x->e;
    }
    if (x->w->k.attention == OOM_ATTENTION_EAGER)
        a = c->eager_a, per = c->eager_score, hc = c->eager_heads;
    else /* SDPA, and flash attention for the expanded heads (no weights kept) */
        a = x->w->k.attention == OOM_ATTENTION_SDPA ? c->sdpa_a : 0,
        per = x->w->k.attention == OOM_ATTENTION_SDPA ? c->sdpa_score : 0, hc = c->sdpa_heads;
    if (m->kv_lora > 0)
        hd = heads * (2.0 * (double)(m->qk_nope + m->qk_rope) + (double)m->v_head);
    att = b * s * (a * h + hc * hd) * x->e + per * b * heads * s * s;
    return (per > 0 || hc * hd > 0) && att > act ? att : act;
}

/* the working set of a prefill of `s` tokens a sample: activations, kept attention scores and
 * logits; `every_expert` and `f` as the caller settled them for the engine */
static void prefill_set(const ctx *x, double b, double s, bool every_expert, double f, double *act,
                        double *sc, double *lg)
{
    const oomi_model *m = x->m;
    double tp = (double)x->w->parallel.tp, heads = (double)m->heads / tp;
    size_t i;

    *sc = 0, *lg = 0;
    for (i = 0; i < x->c->ninfer; i++)
        if (!strcmp(x->c->infer[i].model_type, m->family))
            break;
    if (i < x->c->ninfer) {
        *act = fitted_prefill(x, &x->c->infer[i], b, s);
    } else {
        *act = b * s * (x->c->infer_h * (double)m->hidden + x->c->infer_f * f) * x->e;
        if (every_expert) {
            /* experts run on every token (transformers' Llama4TextMoe): the input repeated for
             * each expert, its gate/up projection (2 x ffn), the gate's activation and its
             * product with up (ffn each) are alive together before down_proj, per expert and
             * token, beside the layer's hidden states (bench/trace/llama4-small.json) */
            double every = b * s *
                           (x->c->infer_h * (double)m->hidden +
                            (double)m->routed * ((double)m->hidden + 4.0 * (double)m->ffn / tp)) *
                           x->e;
            *act = every > *act ? every : *act;
        }
        if (x->w->k.attention == OOM_ATTENTION_EAGER ||
            (x->w->k.attention == OOM_ATTENTION_SDPA && oomi_est_act_coef(x)->sdpa_score > 0))
            *sc = b * heads * s * s * (x->e + 4); /* scores + fp32 softmax */
    }
    if (m->head == OOMI_HEAD_MASKED_LM) /* every position's logits, in the compute dtype */
        *lg = b * s * (double)m->vocab * x->e;
    else if (m->head != OOMI_HEAD_SEQ_CLS && m->head != OOMI_HEAD_BASE)
        *lg = b * (double)m->vocab * 4; /* last position's logits in fp32 */
    if (m->head == OOMI_HEAD_MASKED_LM) {
        /* the logits come after the layers are done: the larger of the two moments, the
         * head's transform output beside its logits */
        if (*lg > *act + *sc)
            *act = b * s * (double)m->hidden * x->e, *sc = 0;
        else
            *lg = 0;
    }
}

/* Generation after a prompt (--completion-len G of --seq S under method inference) is the
 * prompt's prefill, S - G tokens with the KV cache of those, then one token at a time until the
 * cache holds S: the decode's end keeps the cache at its full length beside one token's working
 * set (its scores against all S keys under eager attention). transformers' DynamicCache grows a
 * layer's keys and its values by torch.cat (cache_utils.py, DynamicLayer.update), so the old and
 * the new keys of one layer are alive together once a token; a serving engine's pages are
 * counted for all S tokens from the prefill on. */
static void decode_end(const ctx *x, const oomi_kv_layout *lay, double b, double S,
                       bool every_expert, double f, double t, phase_bytes *out)
{
    double act, sc, lg, kv = oomi_kv_bytes(lay, b, S, x->e);
    double grow = lay->vllm ? 0 : kv / (2.0 * (double)x->m->layers);
    prefill_set(x, b, 1, every_expert, f, &act, &sc, &lg);
    if (sc > 0) /* one query against every key, scores and fp32 softmax */
        sc = b * (double)x->m->heads / (double)x->w->parallel.tp * S * (x->e + 4);
    *out = (phase_bytes){.weights = oomi_est_tp_weights(x),
                         .activations = act + sc + grow,
                         .logits = lg,
                         .kv_cache = kv,
                         .temps = t};
}

oom_phase oomi_est_inference(const ctx *x, phase_bytes *peak)
{
    const oomi_model *m = x->m;
    double b = (double)x->w->k.batch, tp = (double)x->w->parallel.tp;
    double gen = x->w->objective.kind == OOMI_OBJECTIVE_SFT && m->block != OOMI_BLOCK_T5
                     ? (double)x->w->objective.completion_len
                     : 0;
    double S = (double)x->w->k.seq_len, s = S - gen; /* the prefill: the prompt */
    double ds = x->w->shape.decoder_seq ? (double)x->w->shape.decoder_seq : s;
    double kvd = oomi_est_tp_kv_heads(x) * (double)m->head_dim, f = m->ffn_tok_max / tp;
    double kv = 0, act, t = 0, sc, lg;
    bool every_expert = m->sparse_layers > 0 && m->routed > m->topk;
    oomi_kv_layout lay;

    if (every_expert && !x->w->serve.kv_transformers) {
        /* a serving engine dispatches each token to its top-k experts (vLLM's FusedMoE), where
         * transformers' Llama4TextMoe runs them all */
        double sparse = (double)m->topk * (double)m->ffn + (double)m->shared_ffn;
        f = (m->sparse_layers < m->layers && (double)m->ffn_dense > sparse ? (double)m->ffn_dense
                                                                           : sparse) /
            tp;
        every_expert = false;
    }

    memset(&lay, 0, sizeof(lay));
    if (m->block == OOMI_BLOCK_T5) {
        kv = (double)m->layers * 2 * kvd * b * (ds + s) * x->e; /* self + cross caches */
    } else {
        oomi_kv_layout_of(&lay, x->w);
        kv = oomi_kv_bytes(&lay, b, lay.vllm ? S : s, x->e);
    }
    prefill_set(x, b, s, every_expert, f, &act, &sc, &lg);
    if (amp(x) || x->quant) /* one 16-bit weight copy at a time (its tp-th part) */
        t = (x->quant ? oomi_est_dequant(x) : 2.0 * oomi_est_max_linear(m)) / tp;
    *peak = (phase_bytes){.weights = oomi_est_tp_weights(x),
                          .activations = act + sc,
                          .logits = lg,
                          .kv_cache = kv,
                          .temps = t};
    if (gen > 0) {
        phase_bytes d;
        decode_end(x, &lay, b, S, every_expert, f, t, &d);
        if (oomi_est_sum(&d) > oomi_est_sum(peak)) {
            *peak = d;
            return OOM_PHASE_DECODE;
        }
    }
    return OOM_PHASE_PREFILL;
}
