/* hfconfig_count.c - a model's parameters counted from its shape, per block family (Llama-style,
 * GPT-style, BERT, T5), with each linear's widths for LoRA and the estimator, and a multimodal
 * checkpoint's vision tower. */
#include "model/hfconfig.h"

#include <string.h>

static void add_linear(oomi_model *m, const char *name, long din, long dout, long count, bool bias)
{
    size_t i;
    for (i = 0; i < m->nlinears; i++) {
        oomi_linear *l = &m->linears[i];
        if (!strcmp(l->name, name) && l->din == din && l->dout == dout) {
            l->count += count;
            return;
        }
    }
    if (m->nlinears < OOMI_MAX_LINEARS)
        m->linears[m->nlinears++] = (oomi_linear){name, din, dout, count, bias};
}

/* a matrix of a block: counted for params, Adafactor and tensors; `name` NULL when not a Linear */
static uint64_t mat(oomi_model *m, const char *name, long din, long dout, long per_model, bool bias)
{
    uint64_t n = (uint64_t)din * (uint64_t)dout + (bias ? (uint64_t)dout : 0);
    m->factored += (uint64_t)per_model * ((uint64_t)din + (uint64_t)dout + (bias ? dout : 0));
    m->tensors += (uint64_t)per_model * (bias ? 2 : 1);
    if (name) {
        add_linear(m, name, din, dout, per_model, bias);
        m->params_linear += (uint64_t)per_model * (uint64_t)din * (uint64_t)dout;
    }
    return n;
}

/* a vector (norm weight, bias) */
static uint64_t vec(oomi_model *m, long n, long per_model)
{
    m->factored += (uint64_t)per_model * (uint64_t)n;
    m->tensors += (uint64_t)per_model;
    return (uint64_t)n;
}

/* embeddings: V x h, not a Linear (never quantised nor adapted) */
static uint64_t emb(oomi_model *m, long rows, long cols)
{
    m->factored += (uint64_t)rows + (uint64_t)cols;
    m->tensors++;
    return (uint64_t)rows * (uint64_t)cols;
}

static void finish_decoder(oomi_model *m, uint64_t per_layer, uint64_t per_layer_active,
                           uint64_t embed, uint64_t final_norm)
{
    long h = m->hidden;
    m->params_embed = embed;
    if (m->head == OOMI_HEAD_SEQ_CLS) /* "score": hidden -> labels, no bias */
        m->params_lm_head = mat(m, NULL, h, m->labels, 1, false);
    else if (m->head == OOMI_HEAD_BASE || m->tied)
        m->params_lm_head = 0;
    else
        m->params_lm_head = emb(m, m->vocab, h);
    m->params_layer_max = per_layer;
    m->params = embed + (uint64_t)m->layers * per_layer + final_norm + m->params_lm_head;
    m->params_active =
        embed + (uint64_t)m->layers * per_layer_active + final_norm + m->params_lm_head;
}

/* Multi-head latent attention (transformers' DeepseekV2Attention / DeepseekV3Attention): the
 * queries through q_proj, or through q_a_proj, its RMSNorm and q_b_proj; one shared projection to
 * the key/value latent and the RoPE key (kv_a_proj_with_mqa), the latent's RMSNorm, its
 * up-projection to every head's key (no RoPE part) and value (kv_b_proj), o_proj */
static uint64_t count_mla(oomi_model *m, const cfg_ctx *c)
{
    long h = m->hidden, L = m->layers, H = m->heads, qk = m->qk_nope + m->qk_rope;
    bool bias = oomi_cfg_bool(c, "attention_bias", false);
    uint64_t n;

    if (m->q_lora > 0)
        n = mat(m, "q_a_proj", h, m->q_lora, L, bias) + vec(m, m->q_lora, L) +
            mat(m, "q_b_proj", m->q_lora, H * qk, L, false);
    else
        n = mat(m, "q_proj", h, H * qk, L, false);
    return n + mat(m, "kv_a_proj_with_mqa", h, m->kv_lora + m->qk_rope, L, bias) +
           vec(m, m->kv_lora, L) +
           mat(m, "kv_b_proj", m->kv_lora, H * (m->qk_nope + m->v_head), L, false) +
           mat(m, "o_proj", H * m->v_head, h, L, bias);
}

int oomi_cfg_count_llama(oomi_model *m, const cfg_ctx *c)
{
    long h = m->hidden, L = m->layers, qd = m->heads * m->head_dim, kvd = m->kv_heads * m->head_dim;
    bool qkv_bias = !strcmp(m->family, "qwen2") || !strcmp(m->family, "qwen2_moe") ||
                    oomi_cfg_bool(c, "attention_bias", false);
    bool phi3 = !strcmp(m->family, "phi3"), l4 = !strcmp(m->family, "llama4_text");
    /* Gemma 2 and 3: a norm before and after attention and MLP */
    long norms = !strcmp(m->family, "gemma2") || !strcmp(m->family, "gemma3_text") ? 4 : 2;
    uint64_t attn, mlp = 0, router = 0, shared = 0, dense = 0, n;

    if (m->kv_lora > 0) {
        attn = count_mla(m, c);
    } else if (phi3) {
        attn = mat(m, "qkv_proj", h, qd + 2 * kvd, L, false) + mat(m, "o_proj", qd, h, L, false);
    } else {
        attn = mat(m, "q_proj", h, qd, L, qkv_bias) + mat(m, "k_proj", h, kvd, L, qkv_bias) +
               mat(m, "v_proj", h, kvd, L, qkv_bias) + mat(m, "o_proj", qd, h, L, false);
    }
    if (m->experts > 0 && l4) {
        /* Llama 4: the router is a Linear named "router"; the experts are two 3-D parameters
         * (gate_up_proj, down_proj: no Linear, so never adapted nor quantized); a shared expert
         * without a gate of its own */
        long e = m->experts, Ls = m->sparse_layers, Ld = L - Ls, sf = m->shared_ffn;
        router = mat(m, "router", h, e, Ls, false);
        mlp = mat(m, NULL, h, 2 * m->ffn, Ls * e, false) + mat(m, NULL, m->ffn, h, Ls * e, false);
        m->params_bmm = (uint64_t)(Ls * e) * mlp;
        shared = mat(m, "shared_expert.gate_proj", h, sf, Ls, false) +
                 mat(m, "shared_expert.up_proj", h, sf, Ls, false) +
                 mat(m, "shared_expert.down_proj", sf, h, Ls, false);
        if (Ld > 0)
            dense = mat(m, "gate_proj", h, m->ffn_dense, Ld, false) +
                    mat(m, "up_proj", h, m->ffn_dense, Ld, false) +
                    mat(m, "down_proj", m->ffn_dense, h, Ld, false);
    } else if (m->experts > 0) {
        long e = m->experts, Ls = m->sparse_layers, Ld = L - Ls, sf = m->shared_ffn;
        router = mat(m, "gate", h, e, Ls, false);
        mlp = mat(m, "w1", h, m->ffn, Ls * e, false) + mat(m, "w3", h, m->ffn, Ls * e, false) +
              mat(m, "w2", m->ffn, h, Ls * e, false);
        if (sf > 0 && m->kv_lora > 0) /* DeepSeek: the shared experts as one ungated MLP */
            shared = mat(m, "shared_experts.gate_proj", h, sf, Ls, false) +
                     mat(m, "shared_experts.up_proj", h, sf, Ls, false) +
                     mat(m, "shared_experts.down_proj", sf, h, Ls, false);
        else if (sf > 0) /* Qwen2-MoE: a gated shared expert beside the routed ones */
            shared = mat(m, "shared_expert.gate_proj", h, sf, Ls, false) +
                     mat(m, "shared_expert.up_proj", h, sf, Ls, false) +
                     mat(m, "shared_expert.down_proj", sf, h, Ls, false) +
                     mat(m, "shared_expert_gate", h, 1, Ls, false);
        if (Ld > 0)
            dense = mat(m, "gate_proj", h, m->ffn_dense, Ld, false) +
                    mat(m, "up_proj", h, m->ffn_dense, Ld, false) +
                    mat(m, "down_proj", m->ffn_dense, h, Ld, false);
    } else if (phi3) {
        mlp = mat(m, "gate_up_proj", h, 2 * m->ffn, L, false) +
              mat(m, "down_proj", m->ffn, h, L, false);
    } else {
        mlp = mat(m, "gate_proj", h, m->ffn, L, false) + mat(m, "up_proj", h, m->ffn, L, false) +
              mat(m, "down_proj", m->ffn, h, L, false);
    }
    n = (uint64_t)norms * vec(m, h, L * norms);
    if (!strcmp(m->family, "qwen3") || !strcmp(m->family, "qwen3_moe") ||
        !strcmp(m->family, "gemma3_text")) {
        /* q_norm and k_norm: one weight of head_dim each */
        m->qk_norm = true;
        n += 2 * vec(m, m->head_dim, L * 2);
    }
    m->logit_softcap = oomi_cfg_softcap(c, !strcmp(m->family, "gemma2"));
    m->eager_softmax_compute = l4;
    m->moe_repeat_input = l4 && m->experts > 0;
    /* PEFT has no default for DeepSeek: its attention's projections, the queries' and the
     * latent's up-projections (which make the per-head queries, keys and values) */
    m->default_targets = phi3              ? "qkv_proj"
                         : m->kv_lora <= 0 ? "q_proj,v_proj"
                         : m->q_lora > 0   ? "q_b_proj,kv_b_proj"
                                           : "q_proj,kv_b_proj";
    if (m->experts > 0) {
        /* per layer with the experts; the dense layers swap them for their own MLP */
        uint64_t all = router + mlp * (uint64_t)m->experts + shared,
                 act = router + mlp * (uint64_t)m->topk + shared,
                 Ld = (uint64_t)(L - m->sparse_layers);
        finish_decoder(m, attn + all + n, attn + act + n, emb(m, m->vocab, h), vec(m, h, 1));
        m->cast_layer_sparse = attn + all, m->cast_layer_dense = attn + dense;
        m->params = m->params - Ld * all + Ld * dense;
        m->params_active = m->params_active - Ld * act + Ld * dense;
        if (m->sparse_layers == 0 || dense > all)
            m->params_layer_max = attn + dense + n;
    } else {
        finish_decoder(m, attn + mlp + n, attn + mlp + n, emb(m, m->vocab, h), vec(m, h, 1));
    }
    return OOM_OK;
}

/* GPT-2, GPTBigCode, GPT-NeoX, BLOOM, Falcon, OPT: LayerNorm blocks with a 2-matrix MLP */
int oomi_cfg_count_gpt(oomi_model *m, const cfg_ctx *c)
{
    long h = m->hidden, L = m->layers, f = m->ffn, kvd = m->kv_heads * m->head_dim;
    const char *fam = m->family;
    bool bias = true, falcon = !strcmp(fam, "falcon");
    uint64_t attn, mlp, norms, embed = 0, final = vec(m, 2 * h, 1);
    long nnorm, pdim = h;
    const char *qkv = "query_key_value", *proj = "dense", *up = "dense_h_to_4h",
               *down = "dense_4h_to_h";

    if (!strcmp(fam, "gpt2") || !strcmp(fam, "gpt_bigcode")) {
        qkv = "c_attn", proj = "c_proj", up = "c_fc", down = "c_proj";
    } else if (falcon) {
        bias = oomi_cfg_bool(c, "bias", false);
    }
    if (!strcmp(fam, "opt")) {
        attn = mat(m, "q_proj", h, h, L, true) + mat(m, "k_proj", h, h, L, true) +
               mat(m, "v_proj", h, h, L, true) + mat(m, "out_proj", h, h, L, true);
        mlp = mat(m, "fc1", h, f, L, true) + mat(m, "fc2", f, h, L, true);
        m->default_targets = "q_proj,v_proj";
    } else {
        attn = mat(m, qkv, h, h + 2 * kvd, L, bias) + mat(m, proj, h, h, L, bias);
        mlp = mat(m, up, h, f, L, bias) + mat(m, down, f, h, L, bias);
        m->default_targets = !strcmp(fam, "gpt2") || !strcmp(fam, "gpt_bigcode") ? "c_attn" : qkv;
    }
    /* Falcon-7B's parallel attention shares one LayerNorm; the others have two per block */
    nnorm = falcon && !oomi_cfg_bool(c, "new_decoder_architecture", false) ? 1 : 2;
    norms = (uint64_t)nnorm * vec(m, 2 * h, L * nnorm);
    if (!strcmp(fam, "opt") &&
        oomi_cfg_num(c, KEYS("word_embed_proj_dim"), &pdim, false, h) == OOM_OK && pdim != h) {
        /* OPT-350m: embeddings (and the tied head) of width word_embed_proj_dim, projected */
        embed = emb(m, m->vocab, pdim) + mat(m, NULL, pdim, h, 1, false) +
                mat(m, NULL, h, pdim, 1, false);
    } else {
        embed = emb(m, m->vocab, h);
    }
    if (!strcmp(fam, "gpt2") || !strcmp(fam, "gpt_bigcode"))
        embed += emb(m, m->max_pos, h);
    else if (!strcmp(fam, "opt"))
        embed += emb(m, m->max_pos + 2, h); /* OPTLearnedPositionalEmbedding offset of 2 */
    else if (!strcmp(fam, "bloom"))
        embed += vec(m, 2 * h, 1); /* word_embeddings_layernorm */
    finish_decoder(m, attn + mlp + norms, attn + mlp + norms, embed, final);
    return OOM_OK;
}

int oomi_cfg_count_bert(oomi_model *m, const cfg_ctx *c)
{
    long h = m->hidden, L = m->layers, f = m->ffn, types;
    uint64_t layer, embed, head = 0, pooler = 0;
    int err;

    if ((err = oomi_cfg_num(c, KEYS("type_vocab_size"), &types, false, 2)))
        return err;
    layer = mat(m, "query", h, h, L, true) + mat(m, "key", h, h, L, true) +
            mat(m, "value", h, h, L, true) + mat(m, "dense", h, h, L, true) +
            mat(m, "dense", h, f, L, true) + mat(m, "dense", f, h, L, true) +
            2 * vec(m, 2 * h, 2 * L);
    embed = emb(m, m->vocab, h) + emb(m, m->max_pos, h) + emb(m, types, h) + vec(m, 2 * h, 1);
    if (m->head == OOMI_HEAD_MASKED_LM) {
        head = mat(m, NULL, h, h, 1, true) + vec(m, 2 * h, 1) + vec(m, m->vocab, 1);
    } else {
        /* BertModel and BertForSequenceClassification have a pooler; RoBERTa's classifier a dense
         */
        pooler = mat(m, NULL, h, h, 1, true);
        if (m->head == OOMI_HEAD_SEQ_CLS)
            head = mat(m, NULL, h, m->labels, 1, true);
    }
    m->default_targets = "query,value";
    m->params_embed = embed;
    m->params_layer_max = layer;
    m->params = m->params_active = embed + (uint64_t)L * layer + pooler + head;
    return OOM_OK;
}

int oomi_cfg_count_t5(oomi_model *m, const cfg_ctx *c)
{
    long d = m->hidden, in = m->heads * m->head_dim, f = m->ffn, buckets;
    long E = m->enc_layers, D = m->layers;
    uint64_t ff, enc, dec, embed;
    int err;

    if ((err = oomi_cfg_num(c, KEYS("relative_attention_num_buckets"), &buckets, false, 32)))
        return err;
    if (m->gated)
        ff = mat(m, "wi_0", d, f, E + D, false) + mat(m, "wi_1", d, f, E + D, false);
    else
        ff = mat(m, "wi", d, f, E + D, false);
    ff += mat(m, "wo", f, d, E + D, false);
    /* self-attention in both stacks, cross-attention in the decoder */
    enc = mat(m, "q", d, in, E + 2 * D, false) + mat(m, "k", d, in, E + 2 * D, false) +
          mat(m, "v", d, in, E + 2 * D, false) + mat(m, "o", in, d, E + 2 * D, false);
    enc = enc + ff + 2 * vec(m, d, 2 * E);
    dec = enc + (uint64_t)4 * d * in + vec(m, d, 3 * D);
    embed = emb(m, m->vocab, d);
    m->params_embed = embed;
    m->params_lm_head = m->tied ? 0 : emb(m, m->vocab, d);
    m->params_layer_max = dec;
    /* relative position biases live in the first layer of each stack */
    m->params = embed + (uint64_t)E * enc + (uint64_t)D * dec + 2 * (uint64_t)buckets * m->heads +
                vec(m, d, 2) + m->params_lm_head;
    m->params_active = m->params;
    m->default_targets = "q,v";
    return OOM_OK;
}

/* Llama 4's vision tower (transformers' modeling_llama4.py, Llama4VisionModel): a patch
 * embedding (an unbiased Linear of channels x patch^2 inputs), a class embedding, learned
 * positions for (image / patch)^2 + 1 tokens, LayerNorms before and after the encoder, encoder
 * layers of biased q/k/v/o projections, a biased 2-matrix MLP and two LayerNorms, then the
 * pixel-shuffle adapter (fc1: intermediate_size x projector_input_dim, fc2: projector_output_dim
 * squared, unbiased) and the projector to the text width (vision_output_dim x hidden, unbiased).
 * Defaults are Llama4VisionConfig's. */
static int count_llama4_vision(uint64_t *out, const cfg_ctx *v, long th)
{
    long h, f, layers, image, patch, channels, pin, pout, vout;
    uint64_t per, n, uh;
    int err;

    if ((err = oomi_cfg_num(v, KEYS("hidden_size"), &h, false, 768)) ||
        (err = oomi_cfg_num(v, KEYS("intermediate_size"), &f, false, 5632)) ||
        (err = oomi_cfg_num(v, KEYS("num_hidden_layers"), &layers, false, 34)) ||
        (err = oomi_cfg_num(v, KEYS("image_size"), &image, false, 448)) ||
        (err = oomi_cfg_num(v, KEYS("patch_size"), &patch, false, 14)) ||
        (err = oomi_cfg_num(v, KEYS("num_channels"), &channels, false, 3)) ||
        (err = oomi_cfg_num(v, KEYS("projector_input_dim"), &pin, false, 4096)) ||
        (err = oomi_cfg_num(v, KEYS("projector_output_dim"), &pout, false, 4096)) ||
        (err = oomi_cfg_num(v, KEYS("vision_output_dim"), &vout, false, 7680)))
        return err;
    if (h <= 0 || f <= 0 || layers < 0 || patch <= 0 || image < patch || channels <= 0 ||
        pin <= 0 || pout <= 0 || vout <= 0)
        return oomi_fail(OOM_EPARSE, "model config '%s': vision_config sizes out of range",
                         v->path);
    uh = (uint64_t)h;
    per = 4 * (uh * uh + uh) + 2 * uh * (uint64_t)f + (uint64_t)f + uh + 2 * 2 * uh;
    n = (uint64_t)channels * (uint64_t)patch * (uint64_t)patch * uh + uh +
        ((uint64_t)(image / patch) * (uint64_t)(image / patch) + 1) * uh + 2 * 2 * uh +
        (uint64_t)layers * per + (uint64_t)f * (uint64_t)pin + (uint64_t)pout * (uint64_t)pout;
    *out = n + (uint64_t)vout * (uint64_t)th;
    return OOM_OK;
}

/* A multimodal checkpoint (a `text_config` beside a `vision_config`): the language model is
 * planned, the vision tower and its projector counted as extra weights. Gemma 3 only: a SigLIP
 * encoder (transformers' modeling_siglip.py: patch embedding, learned positions, pre-norm layers
 * of q/k/v/out projections and a 2-matrix MLP with biases, a final LayerNorm) and Gemma 3's
 * projector (a vision x text matrix after an RMSNorm of the vision width). */
int oomi_cfg_count_vision(uint64_t *out, const cfg_ctx *c, json_object *text)
{
    cfg_ctx v = {oomi_json_get(c->cfg, "vision_config"), c->path};
    const char *type = oomi_cfg_str(c, "model_type"), *vtype = oomi_cfg_str(&v, "model_type");
    long h, f, layers, image, patch, channels, th;
    uint64_t per, n;
    int err;

    if (type && !strcmp(type, "llama4") && vtype && !strcmp(vtype, "llama4_vision_model")) {
        if ((err = oomi_cfg_num(&(cfg_ctx){text, c->path}, KEYS("hidden_size"), &th, true, 0)))
            return err;
        return count_llama4_vision(out, &v, th);
    }
    if (!type || strcmp(type, "gemma3") || !vtype || strcmp(vtype, "siglip_vision_model"))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "model config '%s': a multimodal checkpoint of model_type '%s' (vision "
                         "'%s'): only Gemma 3's (gemma3 with a siglip_vision_model tower) and "
                         "Llama 4's (llama4 with a llama4_vision_model tower) are read",
                         c->path, type ? type : "?", vtype ? vtype : "?");
    if ((err = oomi_cfg_num(&v, KEYS("hidden_size"), &h, true, 0)) ||
        (err = oomi_cfg_num(&v, KEYS("intermediate_size"), &f, true, 0)) ||
        (err = oomi_cfg_num(&v, KEYS("num_hidden_layers"), &layers, true, 0)) ||
        (err = oomi_cfg_num(&v, KEYS("image_size"), &image, true, 0)) ||
        (err = oomi_cfg_num(&v, KEYS("patch_size"), &patch, true, 0)) ||
        (err = oomi_cfg_num(&v, KEYS("num_channels"), &channels, false, 3)) ||
        (err = oomi_cfg_num(&(cfg_ctx){text, c->path}, KEYS("hidden_size"), &th, true, 0)))
        return err;
    if (h <= 0 || f <= 0 || layers <= 0 || patch <= 0 || image < patch || channels <= 0)
        return oomi_fail(OOM_EPARSE, "model config '%s': vision_config sizes out of range",
                         c->path);
    per = 4 * ((uint64_t)h * (uint64_t)h + (uint64_t)h) + 2 * (uint64_t)h * (uint64_t)f +
          (uint64_t)f + (uint64_t)h + 4 * (uint64_t)h;
    n = (uint64_t)channels * (uint64_t)patch * (uint64_t)patch * (uint64_t)h + (uint64_t)h +
        (uint64_t)(image / patch) * (uint64_t)(image / patch) * (uint64_t)h +
        (uint64_t)layers * per + 2 * (uint64_t)h;
    *out = n + (uint64_t)h * (uint64_t)th + (uint64_t)h;
    return OOM_OK;
}
