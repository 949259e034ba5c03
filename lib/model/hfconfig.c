/*
 * model.c - reads Hugging Face config.json files (json-c) into the shapes the estimator needs and
 * counts their parameters. Families: Llama/Mistral/Qwen2/Gemma/Gemma2/Phi-3/Mixtral (RMSNorm,
 * gated MLP, GQA), GPT-2, GPT-NeoX, GPTBigCode, BLOOM, OPT, Falcon, BERT/RoBERTa, T5/mT5.
 * The keys read are those of transformers' configuration_<family>.py classes.
 */
#include "model/model.h"

#include <json-c/json.h>
#include <limits.h>
#include <string.h>

/* ---- reading keys ---------------------------------------------------------------------------- */

typedef struct cfg_ctx {
    json_object *cfg;
    const char *path;
} cfg_ctx;

/* The largest number a config key may hold: 2^40, or what a long holds where that is less (32
 * bits in the WebAssembly build, web/) */
#define CFG_NUM_MAX ((int64_t)1 << 40 < LONG_MAX ? (int64_t)1 << 40 : (int64_t)LONG_MAX)

/* The first of `keys` (NULL-terminated) present; not a whole number in range: OOM_EPARSE */
static int get_num(const cfg_ctx *c, const char *const *keys, long *out, bool required, long dflt)
{
    char where[PATH_MAX + 32];
    size_t i;
    double v;
    bool found;
    int err;

    oomi_snprintf(where, sizeof(where), "model config '%s': ", c->path);
    for (i = 0; keys[i]; i++) {
        if ((err = oomi_json_double(&v, &found, c->cfg, keys[i], 0, (double)CFG_NUM_MAX, where)))
            return oomi_fail_prefix(OOM_EPARSE, "%s", "");
        if (!found)
            continue;
        if (v != (double)(long)v)
            return oomi_fail(OOM_EPARSE, "%s%s %.15g is not a whole number", where, keys[i], v);
        *out = (long)v;
        return OOM_OK;
    }
    if (required)
        return oomi_fail(OOM_EPARSE, "model config '%s': missing key '%s'", c->path, keys[0]);
    *out = dflt;
    return OOM_OK;
}

#define KEYS(...) ((const char *const[]){__VA_ARGS__, NULL})

static bool get_bool(const cfg_ctx *c, const char *key, bool dflt)
{
    json_object *v = oomi_json_get(c->cfg, key);
    return v ? json_object_get_boolean(v) : dflt;
}

/* final_logit_softcapping: a positive number caps, null or 0 does not; absent: the family's
 * default (transformers' Gemma2Config caps at 30.0) */
static bool softcap(const cfg_ctx *c, bool dflt)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(c->cfg, "final_logit_softcapping", &v))
        return dflt; /* absent; null (v NULL) does not cap */
    return oomi_json_is_number(v) && json_object_get_double(v) > 0;
}

static const char *get_str(const cfg_ctx *c, const char *key)
{
    json_object *v = oomi_json_get(c->cfg, key);
    return json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

/* DeepSeek V2/V3's multi-head latent attention. Its widths are required (a config without
 * them would plan another model); q_lora_rank too, null where the queries have no low-rank
 * projection (DeepSeek-V2-Lite). The attention then works as multi-head attention of
 * qk_nope + qk_rope wide queries and keys, one key/value head per query head. */
static int read_mla(oomi_model *m, const cfg_ctx *c)
{
    json_object *q = NULL;
    int err;

    if (strncmp(m->family, "deepseek_v", 10))
        return OOM_OK;
    if (!json_object_object_get_ex(c->cfg, "q_lora_rank", &q))
        return oomi_fail(OOM_EPARSE,
                         "model config '%s': missing key 'q_lora_rank' (null where the queries "
                         "have no low-rank projection)",
                         c->path);
    if ((q && (err = get_num(c, KEYS("q_lora_rank"), &m->q_lora, true, 0))) ||
        (err = get_num(c, KEYS("kv_lora_rank"), &m->kv_lora, true, 0)) ||
        (err = get_num(c, KEYS("qk_nope_head_dim"), &m->qk_nope, true, 0)) ||
        (err = get_num(c, KEYS("qk_rope_head_dim"), &m->qk_rope, true, 0)) ||
        (err = get_num(c, KEYS("v_head_dim"), &m->v_head, true, 0)))
        return err;
    if (m->q_lora < 0 || m->kv_lora <= 0 || m->qk_nope < 0 || m->qk_rope <= 0 || m->v_head <= 0)
        return oomi_fail(OOM_EPARSE,
                         "model config '%s': kv_lora_rank, qk_rope_head_dim and v_head_dim must "
                         "be positive",
                         c->path);
    m->head_dim = m->qk_nope + m->qk_rope;
    m->kv_heads = m->heads;
    return OOM_OK;
}

/* Sliding-window attention: which layers attend to the last `sliding_window` tokens only. The
 * config's layer_types where it lists them, else the family's rule as transformers' configs
 * make it: Gemma 2 every other layer from the first (configuration_gemma2.py), Gemma 3 all but
 * every sliding_window_pattern-th (default 6, configuration_gemma3.py), Qwen2/3 the layers from
 * max_window_layers on (default 28) when use_sliding_window is set (configuration_qwen2.py),
 * Mistral and Mixtral every layer. Defaults of the window: 4096 for Gemma 2, Gemma 3 and
 * Mistral, none for the others; null is none. */
static long count_layers(const oomi_model *m, json_object *list, const char *type);
static int read_chunks(oomi_model *m, const cfg_ctx *c);

static int read_window(oomi_model *m, const cfg_ctx *c)
{
    json_object *types = oomi_json_get(c->cfg, "layer_types"), *v = NULL;
    const char *f = m->family;
    bool qwen = !strncmp(f, "qwen", 4), gemma3 = !strcmp(f, "gemma3_text");
    bool mistral = !strcmp(f, "mistral") || !strcmp(f, "mixtral");
    long dflt = !strcmp(f, "gemma2") || gemma3 || !strcmp(f, "mistral") ? 4096 : 0, i, every;
    int err;

    m->window = m->window_layers = 0;
    if (!strcmp(f, "llama4_text"))
        return read_chunks(m, c);
    /* the families above only: another family's window (Phi-3's configs name 2047) is not
     * modelled, its layers are planned as full ones */
    if ((json_object_object_get_ex(c->cfg, "sliding_window", &v) && !v) ||
        !(qwen || mistral || gemma3 || !strcmp(f, "gemma2")))
        return OOM_OK;
    if ((err = get_num(c, KEYS("sliding_window"), &m->window, false, dflt)) || m->window <= 0 ||
        (qwen && !get_bool(c, "use_sliding_window", false))) {
        m->window = 0;
        return err;
    }
    if ((i = count_layers(m, types, "sliding_attention")) >= 0) {
        m->window_layers = i;
        return OOM_OK;
    }
    if ((err =
             get_num(c, KEYS(qwen ? "max_window_layers" : "sliding_window_pattern"), &every, false,
                     qwen     ? 28
                     : gemma3 ? 6
                              : 2)))
        return err;
    for (i = 0; i < m->layers; i++) {
        if (qwen)
            m->window_layers += i >= every;
        else if (gemma3 || !strcmp(f, "gemma2"))
            m->window_layers += every <= 0 || (i + 1) % every != 0;
        else
            m->window_layers++;
    }
    return OOM_OK;
}

/* The layers of a list (layer_types, no_rope_layers) whose entry is `type` (a string), or is a
 * non-zero number (type NULL); -1 where the list is not one entry per layer */
static long count_layers(const oomi_model *m, json_object *list, const char *type)
{
    long i, n = 0;
    if (!json_object_is_type(list, json_type_array) ||
        (long)json_object_array_length(list) != m->layers)
        return -1;
    for (i = 0; i < m->layers; i++) {
        json_object *v = json_object_array_get_idx(list, i);
        if (type) {
            const char *t = json_object_get_string(v);
            n += t && !strcmp(t, type);
        } else {
            n += json_object_get_int64(v) != 0;
        }
    }
    return n;
}

/* Llama 4's chunked attention (transformers' Llama4TextConfig): a token of a chunked layer
 * attends to the tokens of its own chunk of attention_chunk_size (default 8192; null: no chunks)
 * only, so a serving engine keeps at most a chunk of them (vLLM's ChunkedLocalAttentionSpec):
 * planned as a sliding window of that size. The chunked layers: those layer_types names
 * "chunked_attention", else the RoPE layers of no_rope_layers (1: RoPE), else all but every
 * no_rope_layer_interval-th (default 4), as Llama4TextConfig derives them. */
static int read_chunks(oomi_model *m, const cfg_ctx *c)
{
    json_object *v = NULL;
    long n, every, i;
    int err;

    if (json_object_object_get_ex(c->cfg, "attention_chunk_size", &v) && !v)
        return OOM_OK; /* null: no chunks */
    if ((err = get_num(c, KEYS("attention_chunk_size"), &m->window, false, 8192)))
        return err;
    if (m->window <= 0) {
        m->window = 0;
        return OOM_OK;
    }
    if ((n = count_layers(m, oomi_json_get(c->cfg, "layer_types"), "chunked_attention")) >= 0 ||
        (n = count_layers(m, oomi_json_get(c->cfg, "no_rope_layers"), NULL)) >= 0) {
        m->window_layers = n;
        return OOM_OK;
    }
    if ((err = get_num(c, KEYS("no_rope_layer_interval"), &every, false, 4)))
        return err;
    for (i = 0; i < m->layers; i++)
        m->window_layers += every <= 0 || (i + 1) % every != 0;
    return OOM_OK;
}

/* Which layers have the experts (Qwen-MoE: every decoder_sparse_step-th layer not listed in
 * mlp_only_layers), one expert's width (moe_intermediate_size where given: intermediate_size is
 * then the dense layers'), the shared expert's width; and the MLP width per token. */
static int read_experts(oomi_model *m, const cfg_ctx *c)
{
    json_object *only = oomi_json_get(c->cfg, "mlp_only_layers");
    long step = 1, moe_ffn = 0, i, first_dense = 0, freq = 1, shared = 0;
    bool ds = m->kv_lora > 0, v3 = !strcmp(m->family, "deepseek_v3");
    bool l4 = !strcmp(m->family, "llama4_text");
    /* Llama 4: moe_layers lists the layers with the experts where given */
    json_object *listed = l4 ? oomi_json_get(c->cfg, "moe_layers") : NULL;
    int err;

    m->sparse_layers = m->experts > 0 ? m->layers : 0;
    m->ffn_dense = m->ffn;
    m->routed = m->topk;
    if (m->experts > 0 && l4) {
        /* Llama 4 (Llama4TextConfig): experts and a shared expert of intermediate_size, dense
         * layers of intermediate_size_mlp (default 16384), every interleave_moe_layer_step-th
         * layer with the experts; Llama4TextMoe runs every expert on every token, its input
         * scaled by the router's sigmoid score (0 outside the top-k) */
        if ((err = get_num(c, KEYS("intermediate_size_mlp"), &m->ffn_dense, false, 16384)))
            return err;
        m->routed = m->experts;
        if (listed && !json_object_is_type(listed, json_type_array))
            return oomi_fail(OOM_EPARSE, "model config '%s': 'moe_layers' is not a list", c->path);
    }
    if (m->experts > 0) {
        /* DeepSeek's defaults are DeepseekV2Config's and DeepseekV3Config's (transformers'
         * configuration_deepseek_v2.py / _v3.py): moe_intermediate_size 1407 / 2048,
         * n_shared_experts 2 / 1, first_k_dense_replace 0 / 3 */
        if ((err = get_num(c, KEYS("decoder_sparse_step", "interleave_moe_layer_step"), &step,
                           false, 1)) ||
            (err = get_num(c, KEYS("moe_intermediate_size"), &moe_ffn, false,
                           ds ? (v3 ? 2048 : 1407) : 0)) ||
            (err = get_num(c, KEYS("shared_expert_intermediate_size"), &m->shared_ffn, false, 0)) ||
            (err = get_num(c, KEYS("n_shared_experts"), &shared, false, ds ? (v3 ? 1 : 2) : 0)) ||
            (err = get_num(c, KEYS("first_k_dense_replace"), &first_dense, false, v3 ? 3 : 0)) ||
            (err = get_num(c, KEYS("moe_layer_freq"), &freq, false, 1)))
            return err;
        if (moe_ffn > 0)
            m->ffn = moe_ffn;
        if (ds) /* DeepSeek: n_shared_experts ungated experts of the routed width, side by side */
            m->shared_ffn = shared * m->ffn;
        else if (l4) /* Llama 4: one shared expert of the routed width */
            m->shared_ffn = m->ffn;
        if (step <= 0 || freq <= 0)
            return oomi_fail(OOM_EPARSE, "model config '%s': a layer step of %ld is not positive",
                             c->path, step <= 0 ? step : freq);
        if (only && !json_object_is_type(only, json_type_array))
            return oomi_fail(OOM_EPARSE, "model config '%s': 'mlp_only_layers' is not a list",
                             c->path);
        memset(m->sparse_map, 0, sizeof(m->sparse_map));
        for (i = 0, m->sparse_layers = 0; i < m->layers; i++) {
            /* Qwen-MoE: every decoder_sparse_step-th layer; DeepSeek: the layers from
             * first_k_dense_replace on, every moe_layer_freq-th (DeepSeek's modeling_deepseek.py
             * and vLLM's deepseek_v2.py; transformers' port ignores moe_layer_freq, 1 in every
             * published config) */
            bool dense = ds ? i < first_dense || i % freq != 0 : (i + 1) % step != 0;
            size_t j;
            for (j = 0; only && j < json_object_array_length(only); j++)
                if (json_object_get_int64(json_object_array_get_idx(only, j)) == i)
                    dense = true;
            for (j = 0, dense = listed ? true : dense;
                 listed && j < json_object_array_length(listed); j++)
                if (json_object_get_int64(json_object_array_get_idx(listed, j)) == i)
                    dense = false;
            m->sparse_layers += !dense;
            if (!dense && i < OOMI_SPARSE_MAP_LAYERS)
                m->sparse_map[i / 8] |= (unsigned char)(1u << (i % 8));
        }
    }
    if (m->experts > 0 && m->topk > m->experts)
        return oomi_fail(OOM_EPARSE, "model config '%s': %ld experts per token of %ld experts",
                         c->path, m->topk, m->experts);
    if (m->sparse_layers > 0) {
        double sparse = (double)m->routed * (double)m->ffn + (double)m->shared_ffn;
        long dense = m->layers - m->sparse_layers;
        m->ffn_tok_mean =
            ((double)m->sparse_layers * sparse + (double)dense * (double)m->ffn_dense) /
            (double)m->layers;
        m->ffn_tok_max = dense > 0 && (double)m->ffn_dense > sparse ? (double)m->ffn_dense : sparse;
    } else { /* dense, or experts that no layer has: every layer's MLP is the dense width */
        m->ffn_tok_mean = m->ffn_tok_max = (double)m->ffn_dense;
    }
    return OOM_OK;
}

/* ---- counting -------------------------------------------------------------------------------- */

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
    bool bias = get_bool(c, "attention_bias", false);
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

static int count_llama(oomi_model *m, const cfg_ctx *c)
{
    long h = m->hidden, L = m->layers, qd = m->heads * m->head_dim, kvd = m->kv_heads * m->head_dim;
    bool qkv_bias = !strcmp(m->family, "qwen2") || !strcmp(m->family, "qwen2_moe") ||
                    get_bool(c, "attention_bias", false);
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
    m->logit_softcap = softcap(c, !strcmp(m->family, "gemma2"));
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
static int count_gpt(oomi_model *m, const cfg_ctx *c)
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
        bias = get_bool(c, "bias", false);
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
    nnorm = falcon && !get_bool(c, "new_decoder_architecture", false) ? 1 : 2;
    norms = (uint64_t)nnorm * vec(m, 2 * h, L * nnorm);
    if (!strcmp(fam, "opt") && get_num(c, KEYS("word_embed_proj_dim"), &pdim, false, h) == OOM_OK &&
        pdim != h) {
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

static int count_bert(oomi_model *m, const cfg_ctx *c)
{
    long h = m->hidden, L = m->layers, f = m->ffn, types;
    uint64_t layer, embed, head = 0, pooler = 0;
    int err;

    if ((err = get_num(c, KEYS("type_vocab_size"), &types, false, 2)))
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

static int count_t5(oomi_model *m, const cfg_ctx *c)
{
    long d = m->hidden, in = m->heads * m->head_dim, f = m->ffn, buckets;
    long E = m->enc_layers, D = m->layers;
    uint64_t ff, enc, dec, embed;
    int err;

    if ((err = get_num(c, KEYS("relative_attention_num_buckets"), &buckets, false, 32)))
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

/* ---- families -------------------------------------------------------------------------------- */

static const struct family {
    const char *type;
    oomi_block block;
} families[] = {
    {"llama", OOMI_BLOCK_LLAMA},
    {"mistral", OOMI_BLOCK_LLAMA},
    {"qwen2", OOMI_BLOCK_LLAMA},
    {"gemma", OOMI_BLOCK_LLAMA},
    {"gemma2", OOMI_BLOCK_LLAMA},
    {"phi3", OOMI_BLOCK_LLAMA},
    {"gemma3_text", OOMI_BLOCK_LLAMA},
    {"mixtral", OOMI_BLOCK_LLAMA},
    {"qwen3", OOMI_BLOCK_LLAMA},
    {"qwen2_moe", OOMI_BLOCK_LLAMA},
    {"qwen3_moe", OOMI_BLOCK_LLAMA},
    {"gpt2", OOMI_BLOCK_GPT},
    {"gpt_neox", OOMI_BLOCK_GPT},
    {"gpt_bigcode", OOMI_BLOCK_GPT},
    {"bloom", OOMI_BLOCK_GPT},
    {"opt", OOMI_BLOCK_GPT},
    {"falcon", OOMI_BLOCK_GPT},
    {"bert", OOMI_BLOCK_BERT},
    {"roberta", OOMI_BLOCK_BERT},
    {"t5", OOMI_BLOCK_T5},
    {"mt5", OOMI_BLOCK_T5},
    {"deepseek_v2", OOMI_BLOCK_LLAMA},
    {"deepseek_v3", OOMI_BLOCK_LLAMA},
    {"llama4_text", OOMI_BLOCK_LLAMA},
};

const char *oomi_head_name(oomi_head h)
{
    static const char *const names[] = {"causal-lm", "seq-cls", "masked-lm", "seq2seq-lm", "base"};
    return (unsigned)h < OOMI_ARRAY_LEN(names) ? names[h] : "?";
}

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

static oomi_head head_of(const cfg_ctx *c, oomi_block block)
{
    json_object *a, *first;
    const char *name;
    if (json_object_object_get_ex(c->cfg, "architectures", &a) &&
        json_object_is_type(a, json_type_array) && json_object_array_length(a) > 0 &&
        (first = json_object_array_get_idx(a, 0)) && json_object_is_type(first, json_type_string)) {
        name = json_object_get_string(first);
        if (ends_with(name, "ForCausalLM") || ends_with(name, "LMHeadModel"))
            return OOMI_HEAD_CAUSAL_LM;
        if (ends_with(name, "ForSequenceClassification"))
            return OOMI_HEAD_SEQ_CLS;
        if (ends_with(name, "ForMaskedLM") || ends_with(name, "ForPreTraining"))
            return OOMI_HEAD_MASKED_LM;
        if (ends_with(name, "ForConditionalGeneration"))
            return OOMI_HEAD_SEQ2SEQ_LM;
        return OOMI_HEAD_BASE;
    }
    if (block == OOMI_BLOCK_T5)
        return OOMI_HEAD_SEQ2SEQ_LM;
    return block == OOMI_BLOCK_BERT ? OOMI_HEAD_BASE : OOMI_HEAD_CAUSAL_LM;
}

/* Falcon's own early configs ("RefinedWebModel") use other keys; normalise the type name */
static const char *family_of(const cfg_ctx *c)
{
    const char *t = get_str(c, "model_type");
    if (t && (!strcmp(t, "RefinedWebModel") || !strcmp(t, "RefinedWeb")))
        return "falcon";
    return t;
}

static int read_shape(oomi_model *m, const cfg_ctx *c)
{
    int err;
    bool t5 = m->block == OOMI_BLOCK_T5;
    /* Gemma 3's published text configs leave out what Gemma3TextConfig defaults (transformers'
     * configuration_gemma3.py: head_dim 256, vocab_size 262208, max_position_embeddings 131072,
     * 8 attention heads and 4 key/value heads, which gemma-3-4b-it's config relies on) */
    bool gemma3 = !strcmp(m->family, "gemma3_text");
    /* Llama 4's text configs rely on Llama4TextConfig's defaults: 16 experts, 1 per token */
    bool llama4 = !strcmp(m->family, "llama4_text");
    long dflt_ffn;

    if ((err = get_num(c, KEYS("hidden_size", "n_embd", "d_model", "n_embed"), &m->hidden, true,
                       0)) ||
        (err =
             get_num(c, KEYS("num_hidden_layers", "n_layer", "num_layers"), &m->layers, true, 0)) ||
        (err = get_num(c, KEYS("num_attention_heads", "n_head", "num_heads"), &m->heads, !gemma3,
                       8)) ||
        (err = get_num(c, KEYS("vocab_size"), &m->vocab, !gemma3, 262208)))
        return err;
    if (m->hidden <= 0 || m->layers <= 0 || m->heads <= 0 || m->vocab <= 0)
        return oomi_fail(OOM_EPARSE,
                         "model config '%s': hidden size, layers, heads and vocab_size "
                         "must be positive",
                         c->path);
    if ((err = get_num(c, KEYS("num_key_value_heads", "num_kv_heads"), &m->kv_heads, false,
                       gemma3 ? 4 : m->heads)) ||
        (err = get_num(c, KEYS("head_dim", "d_kv"), &m->head_dim, false,
                       gemma3 ? 256 : m->hidden / m->heads)))
        return err;
    if (get_bool(c, "multi_query", false) && !get_bool(c, "new_decoder_architecture", false))
        m->kv_heads = 1;
    dflt_ffn = 4 * m->hidden;
    if ((err =
             get_num(c, KEYS("intermediate_size", "n_inner", "d_ff", "ffn_dim", "ffn_hidden_size"),
                     &m->ffn, m->block == OOMI_BLOCK_LLAMA || t5, dflt_ffn)) ||
        (err = get_num(c, KEYS("max_position_embeddings", "n_positions", "n_ctx", "seq_length"),
                       &m->max_pos, m->block == OOMI_BLOCK_BERT || !strcmp(m->family, "gpt2"),
                       gemma3 ? 131072 : 0)) ||
        (err = get_num(c, KEYS("num_local_experts", "num_experts", "n_routed_experts"), &m->experts,
                       false, llama4 ? 16 : 0)) ||
        (err = get_num(c, KEYS("num_experts_per_tok"), &m->topk, m->experts > 0 && !llama4,
                       llama4 ? 1 : 0)) ||
        (err = get_num(c, KEYS("num_labels"), &m->labels, false, 2)) || (err = read_mla(m, c)) ||
        (err = read_experts(m, c)) || (err = read_window(m, c)))
        return err;
    if (m->kv_heads <= 0 || m->head_dim <= 0 || m->ffn <= 0 || m->heads % m->kv_heads)
        return oomi_fail(OOM_EPARSE,
                         "model config '%s': %ld key/value heads do not divide %ld heads", c->path,
                         m->kv_heads, m->heads);
    /* each number is at most 2^40; their products must stay far from a long's range */
    if (m->heads > CFG_NUM_MAX / m->head_dim)
        return oomi_fail(OOM_EPARSE,
                         "model config '%s': %ld heads of %ld dimensions are out of range", c->path,
                         m->heads, m->head_dim);
    if (t5) {
        const char *ff = get_str(c, "feed_forward_proj");
        m->enc_layers = m->layers;
        if ((err = get_num(c, KEYS("num_decoder_layers"), &m->layers, false, m->enc_layers)))
            return err;
        m->gated = ff && !strncmp(ff, "gated-", 6);
    } else {
        m->gated = m->block == OOMI_BLOCK_LLAMA;
    }
    /* transformers' PretrainedConfig default is tied; Llama/Mistral/Mixtral/Phi-3/NeoX set it;
     * Llama4TextConfig defaults to untied */
    m->tied = get_bool(c, "tie_word_embeddings", strcmp(m->family, "gpt_neox") != 0 && !llama4);
    return OOM_OK;
}

/* A multimodal checkpoint (a `text_config` beside a `vision_config`): the language model is
 * planned, the vision tower and its projector counted as extra weights. Gemma 3 only: a SigLIP
 * encoder (transformers' modeling_siglip.py: patch embedding, learned positions, pre-norm layers
 * of q/k/v/out projections and a 2-matrix MLP with biases, a final LayerNorm) and Gemma 3's
 * projector (a vision x text matrix after an RMSNorm of the vision width). */
static int count_llama4_vision(uint64_t *out, const cfg_ctx *v, long th);

static int count_vision(uint64_t *out, const cfg_ctx *c, json_object *text)
{
    cfg_ctx v = {oomi_json_get(c->cfg, "vision_config"), c->path};
    const char *type = get_str(c, "model_type"), *vtype = get_str(&v, "model_type");
    long h, f, layers, image, patch, channels, th;
    uint64_t per, n;
    int err;

    if (type && !strcmp(type, "llama4") && vtype && !strcmp(vtype, "llama4_vision_model")) {
        if ((err = get_num(&(cfg_ctx){text, c->path}, KEYS("hidden_size"), &th, true, 0)))
            return err;
        return count_llama4_vision(out, &v, th);
    }
    if (!type || strcmp(type, "gemma3") || !vtype || strcmp(vtype, "siglip_vision_model"))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "model config '%s': a multimodal checkpoint of model_type '%s' (vision "
                         "'%s'): only Gemma 3's (gemma3 with a siglip_vision_model tower) and "
                         "Llama 4's (llama4 with a llama4_vision_model tower) are read",
                         c->path, type ? type : "?", vtype ? vtype : "?");
    if ((err = get_num(&v, KEYS("hidden_size"), &h, true, 0)) ||
        (err = get_num(&v, KEYS("intermediate_size"), &f, true, 0)) ||
        (err = get_num(&v, KEYS("num_hidden_layers"), &layers, true, 0)) ||
        (err = get_num(&v, KEYS("image_size"), &image, true, 0)) ||
        (err = get_num(&v, KEYS("patch_size"), &patch, true, 0)) ||
        (err = get_num(&v, KEYS("num_channels"), &channels, false, 3)) ||
        (err = get_num(&(cfg_ctx){text, c->path}, KEYS("hidden_size"), &th, true, 0)))
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

/* Bytes per weight of bitsandbytes' NF4 (quantize_4bit, bitsandbytes/functional.py; QLoRA,
 * Dettmers et al. 2023, section 3): two 4-bit codes a byte and one absmax per block of 64 weights,
 * fp32; with double quantization (bnb_4bit_use_double_quant) the absmaxes are themselves
 * quantised to 8 bits in blocks of 256 with one fp32 absmax per block (QuantState.state2); the
 * per-tensor constants (the 16-entry code, state2's 256-entry code, the offset: about 1 KiB a
 * linear) are left out. torchao's NF4Tensor, torchtune's QLoRA, stores the same: 4 bits, an
 * int8 scaler per block of 64, a quantization factor per 256 scalers. */
double oomi_nf4_bytes(bool double_quant)
{
    return double_quant ? 0.5 + 1.0 / 64 + 4.0 / (64 * 256) : 0.5 + 4.0 / 64;
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

    if ((err = get_num(v, KEYS("hidden_size"), &h, false, 768)) ||
        (err = get_num(v, KEYS("intermediate_size"), &f, false, 5632)) ||
        (err = get_num(v, KEYS("num_hidden_layers"), &layers, false, 34)) ||
        (err = get_num(v, KEYS("image_size"), &image, false, 448)) ||
        (err = get_num(v, KEYS("patch_size"), &patch, false, 14)) ||
        (err = get_num(v, KEYS("num_channels"), &channels, false, 3)) ||
        (err = get_num(v, KEYS("projector_input_dim"), &pin, false, 4096)) ||
        (err = get_num(v, KEYS("projector_output_dim"), &pout, false, 4096)) ||
        (err = get_num(v, KEYS("vision_output_dim"), &vout, false, 7680)))
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

/* A pre-quantized checkpoint: its config's quantization_config says how the linears inside the
 * blocks are stored (embeddings, the head and the norms stay 16-bit). Per weight, as the loaders
 * keep it:
 * - gptq, awq: `bits`/8, plus per group of `group_size` inputs one fp16 scale and one packed
 *   zero point (AutoGPTQ / AutoAWQ QuantLinear buffers qweight, qzeros, scales; g_idx's int32 per
 *   input row is left out: 4 / out_features B); group_size -1 is one group per input row, taken
 *   as the hidden size;
 * - bitsandbytes: load_in_4bit 4 bits + an fp32 absmax per block of 64 (as --precision 4bit), with
 *   bnb_4bit_use_double_quant an 8-bit absmax per 64 + an fp32 constant per 256 blocks (QLoRA,
 *   Dettmers et al. 2023); load_in_8bit 1 byte (+ an fp32 scale per row, left out);
 * - fp8 (transformers' FineGrainedFP8, DeepSeek-V3's checkpoint): 1 byte + one fp32 scale per
 *   weight_block_size block (per tensor without one). */
static int read_quant(oomi_model *m, json_object *cfg, const char *path)
{
    json_object *q = oomi_json_get(cfg, "quantization_config"), *v;
    const char *method;
    cfg_ctx c = {q, path};
    long bits, group;
    int err;

    if (!q || json_object_is_type(q, json_type_null))
        return OOM_OK;
    if (!json_object_is_type(q, json_type_object) || !(method = get_str(&c, "quant_method")))
        return oomi_fail(OOM_EPARSE,
                         "model config '%s': quantization_config needs a 'quant_method'", path);
    if (!strcmp(method, "gptq") || !strcmp(method, "awq")) {
        if ((err = get_num(&c, KEYS("bits", "w_bit"), &bits, true, 0)))
            return err;
        if (bits < 2 || bits > 8)
            return oomi_fail(OOM_EPARSE, "model config '%s': %s bits '%ld' is not 2 to 8", path,
                             method, bits);
        v = oomi_json_get(q, "group_size");
        if (v && oomi_json_is_number(v) && json_object_get_double(v) < 0)
            group = m->hidden; /* -1: one group per input row */
        else if ((err = get_num(&c, KEYS("group_size", "q_group_size"), &group, false, 128)))
            return err;
        if (group < 1)
            group = 128;
        m->quant_bytes = bits / 8.0 + (2 + bits / 8.0) / (double)group;
        oomi_snprintf(m->quant_desc, sizeof(m->quant_desc), "%s %ld-bit, groups of %ld", method,
                      bits, group);
    } else if (!strcmp(method, "bitsandbytes")) {
        if (get_bool(&c, "load_in_4bit", false)) {
            bool dq = get_bool(&c, "bnb_4bit_use_double_quant", false);
            m->quant_bytes = oomi_nf4_bytes(dq);
            oomi_snprintf(m->quant_desc, sizeof(m->quant_desc), "bitsandbytes 4-bit%s",
                          dq ? ", double quantization" : "");
        } else if (get_bool(&c, "load_in_8bit", false)) {
            m->quant_bytes = 1;
            oomi_snprintf(m->quant_desc, sizeof(m->quant_desc), "bitsandbytes 8-bit");
        } else {
            return oomi_fail(OOM_EPARSE,
                             "model config '%s': bitsandbytes quantization_config sets neither "
                             "load_in_4bit nor load_in_8bit",
                             path);
        }
    } else if (!strcmp(method, "fp8")) {
        json_object *bs = oomi_json_get(q, "weight_block_size");
        double block = 0;
        if (bs && json_object_is_type(bs, json_type_array) && json_object_array_length(bs) == 2)
            block = json_object_get_double(json_object_array_get_idx(bs, 0)) *
                    json_object_get_double(json_object_array_get_idx(bs, 1));
        m->quant_bytes = 1 + (block >= 1 ? 4 / block : 0);
        if (block >= 1)
            oomi_snprintf(m->quant_desc, sizeof(m->quant_desc), "fp8, blocks of %.0f", block);
        else
            oomi_snprintf(m->quant_desc, sizeof(m->quant_desc), "fp8");
    } else {
        return oomi_fail(OOM_EUNSUPPORTED,
                         "model config '%s': quantization_config quant_method '%s' is not "
                         "modelled (modelled: gptq, awq, bitsandbytes, fp8)",
                         path, method);
    }
    return OOM_OK;
}

int oomi_model_parse(oomi_model **out, json_object *cfg, const char *name, const char *path)
{
    cfg_ctx c = {cfg, path};
    oomi_model *m = NULL;
    json_object *text;
    uint64_t vision = 0;
    const char *type;
    size_t i;
    int err;

    *out = NULL;
    if (!json_object_is_type(cfg, json_type_object))
        return oomi_fail(OOM_EPARSE, "model config '%s' is not a JSON object", path);
    if ((text = oomi_json_get(cfg, "text_config")) && json_object_is_type(text, json_type_object) &&
        json_object_is_type(oomi_json_get(cfg, "vision_config"), json_type_object)) {
        if ((err = count_vision(&vision, &c, text)))
            return err;
        c.cfg = text; /* the language model, planned as a causal LM */
    }
    if (!(type = family_of(&c)))
        return oomi_fail(OOM_EPARSE, "model config '%s': missing key 'model_type'", path);
    for (i = 0; i < OOMI_ARRAY_LEN(families) && strcmp(families[i].type, type); i++)
        ;
    if (i == OOMI_ARRAY_LEN(families))
        return oomi_fail(OOM_EUNSUPPORTED,
                         "model config '%s': model_type '%s' is not supported (supported: llama, "
                         "mistral, qwen2, qwen3, qwen2_moe, qwen3_moe, gemma, gemma2, "
                         "gemma3_text, phi3, mixtral, deepseek_v2, deepseek_v3, llama4_text, gpt2, "
                         "gpt_neox, gpt_bigcode, "
                         "bloom, opt, falcon, bert, roberta, t5, mt5)",
                         path, type);
    if (!(m = oomi_calloc(1, sizeof(*m))) || !(m->name = oomi_strdup(name)) ||
        !(m->family = oomi_strdup(!strcmp(type, "mt5") ? "t5" : families[i].type))) {
        oomi_model_free(m);
        return oomi_nomem();
    }
    m->block = families[i].block;
    m->head = head_of(&c, m->block);
    if (!(err = read_shape(m, &c))) {
        switch (m->block) {
        case OOMI_BLOCK_LLAMA:
            err = count_llama(m, &c);
            break;
        case OOMI_BLOCK_GPT:
            err = count_gpt(m, &c);
            break;
        case OOMI_BLOCK_BERT:
            err = count_bert(m, &c);
            break;
        case OOMI_BLOCK_T5:
            err = count_t5(m, &c);
            break;
        }
    }
    if (err) {
        oomi_model_free(m);
        return err;
    }
    m->params += vision, m->params_active += vision, m->params_vision = vision;
    if ((err = read_quant(m, cfg, path))) {
        oomi_model_free(m);
        return err;
    }
    *out = m;
    return OOM_OK;
}

void oomi_model_free(oomi_model *m)
{
    if (!m)
        return;
    oomi_free(m->name);
    oomi_free(m->family);
    oomi_free(m);
}

int oomi_model_clone(oomi_model **out, const oomi_model *m)
{
    oomi_model *c = oomi_malloc(sizeof(*c));
    *out = NULL;
    if (!c)
        return oomi_nomem();
    *c = *m;
    c->name = oomi_strdup(m->name);
    c->family = oomi_strdup(m->family);
    if (!c->name || !c->family) {
        oomi_model_free(c);
        return oomi_nomem();
    }
    *out = c;
    return OOM_OK;
}

/* Reads one config.json file and parses it. */
int oomi_model_load_file(oomi_model **out, const char *path, const char *name)
{
    json_object *cfg;
    int err;

    *out = NULL;
    if ((err = oomi_json_load_file(&cfg, path, "model config")))
        return err;
    err = oomi_model_parse(out, cfg, name, path);
    json_object_put(cfg);
    return err;
}
