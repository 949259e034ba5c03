/* hfconfig_shape.c - a config.json's keys read as numbers, booleans and strings, and the shape
 * they give: widths, heads, layers, the head, multi-head latent attention, sliding windows and
 * chunked attention, experts (the keys of transformers' configuration_<family>.py classes). */
#include "model/hfconfig.h"

#include <limits.h>
#include <string.h>

/* The largest number a config key may hold: 2^40, or what a long holds where that is less (32
 * bits in the WebAssembly build, web/) */
#define CFG_NUM_MAX ((int64_t)1 << 40 < LONG_MAX ? (int64_t)1 << 40 : (int64_t)LONG_MAX)

/* The first of `keys` (NULL-terminated) present; not a whole number in range: OOM_EPARSE */
int oomi_cfg_num(const cfg_ctx *c, const char *const *keys, long *out, bool required, long dflt)
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

bool oomi_cfg_bool(const cfg_ctx *c, const char *key, bool dflt)
{
    json_object *v = oomi_json_get(c->cfg, key);
    return v ? json_object_get_boolean(v) : dflt;
}

/* final_logit_softcapping: a positive number caps, null or 0 does not; absent: the family's
 * default (transformers' Gemma2Config caps at 30.0) */
bool oomi_cfg_softcap(const cfg_ctx *c, bool dflt)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(c->cfg, "final_logit_softcapping", &v))
        return dflt; /* absent; null (v NULL) does not cap */
    return oomi_json_is_number(v) && json_object_get_double(v) > 0;
}

const char *oomi_cfg_str(const cfg_ctx *c, const char *key)
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
    if ((q && (err = oomi_cfg_num(c, KEYS("q_lora_rank"), &m->q_lora, true, 0))) ||
        (err = oomi_cfg_num(c, KEYS("kv_lora_rank"), &m->kv_lora, true, 0)) ||
        (err = oomi_cfg_num(c, KEYS("qk_nope_head_dim"), &m->qk_nope, true, 0)) ||
        (err = oomi_cfg_num(c, KEYS("qk_rope_head_dim"), &m->qk_rope, true, 0)) ||
        (err = oomi_cfg_num(c, KEYS("v_head_dim"), &m->v_head, true, 0)))
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
    if ((err = oomi_cfg_num(c, KEYS("attention_chunk_size"), &m->window, false, 8192)))
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
    if ((err = oomi_cfg_num(c, KEYS("no_rope_layer_interval"), &every, false, 4)))
        return err;
    for (i = 0; i < m->layers; i++)
        m->window_layers += every <= 0 || (i + 1) % every != 0;
    return OOM_OK;
}

/* Sliding-window attention: which layers attend to the last `sliding_window` tokens only. The
 * config's layer_types where it lists them, else the family's rule as transformers' configs
 * make it: Gemma 2 every other layer from the first (configuration_gemma2.py), Gemma 3 all but
 * every sliding_window_pattern-th (default 6, configuration_gemma3.py), Qwen2/3 the layers from
 * max_window_layers on (default 28) when use_sliding_window is set (configuration_qwen2.py),
 * Mistral and Mixtral every layer. Defaults of the window: 4096 for Gemma 2, Gemma 3 and
 * Mistral, none for the others; null is none. */
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
    if ((err = oomi_cfg_num(c, KEYS("sliding_window"), &m->window, false, dflt)) ||
        m->window <= 0 || (qwen && !oomi_cfg_bool(c, "use_sliding_window", false))) {
        m->window = 0;
        return err;
    }
    if ((i = count_layers(m, types, "sliding_attention")) >= 0) {
        m->window_layers = i;
        return OOM_OK;
    }
    if ((err = oomi_cfg_num(c, KEYS(qwen ? "max_window_layers" : "sliding_window_pattern"), &every,
                            false,
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
        if ((err = oomi_cfg_num(c, KEYS("intermediate_size_mlp"), &m->ffn_dense, false, 16384)))
            return err;
        m->routed = m->experts;
        if (listed && !json_object_is_type(listed, json_type_array))
            return oomi_fail(OOM_EPARSE, "model config '%s': 'moe_layers' is not a list", c->path);
    }
    if (m->experts > 0) {
        /* DeepSeek's defaults are DeepseekV2Config's and DeepseekV3Config's (transformers'
         * configuration_deepseek_v2.py / _v3.py): moe_intermediate_size 1407 / 2048,
         * n_shared_experts 2 / 1, first_k_dense_replace 0 / 3 */
        if ((err = oomi_cfg_num(c, KEYS("decoder_sparse_step", "interleave_moe_layer_step"), &step,
                                false, 1)) ||
            (err = oomi_cfg_num(c, KEYS("moe_intermediate_size"), &moe_ffn, false,
                                ds ? (v3 ? 2048 : 1407) : 0)) ||
            (err = oomi_cfg_num(c, KEYS("shared_expert_intermediate_size"), &m->shared_ffn, false,
                                0)) ||
            (err = oomi_cfg_num(c, KEYS("n_shared_experts"), &shared, false,
                                ds ? (v3 ? 1 : 2) : 0)) ||
            (err =
                 oomi_cfg_num(c, KEYS("first_k_dense_replace"), &first_dense, false, v3 ? 3 : 0)) ||
            (err = oomi_cfg_num(c, KEYS("moe_layer_freq"), &freq, false, 1)))
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

static bool ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

oomi_head oomi_cfg_head(const cfg_ctx *c, oomi_block block)
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
const char *oomi_cfg_family(const cfg_ctx *c)
{
    const char *t = oomi_cfg_str(c, "model_type");
    if (t && (!strcmp(t, "RefinedWebModel") || !strcmp(t, "RefinedWeb")))
        return "falcon";
    return t;
}

int oomi_cfg_shape(oomi_model *m, const cfg_ctx *c)
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

    if ((err = oomi_cfg_num(c, KEYS("hidden_size", "n_embd", "d_model", "n_embed"), &m->hidden,
                            true, 0)) ||
        (err = oomi_cfg_num(c, KEYS("num_hidden_layers", "n_layer", "num_layers"), &m->layers, true,
                            0)) ||
        (err = oomi_cfg_num(c, KEYS("num_attention_heads", "n_head", "num_heads"), &m->heads,
                            !gemma3, 8)) ||
        (err = oomi_cfg_num(c, KEYS("vocab_size"), &m->vocab, !gemma3, 262208)))
        return err;
    if (m->hidden <= 0 || m->layers <= 0 || m->heads <= 0 || m->vocab <= 0)
        return oomi_fail(OOM_EPARSE,
                         "model config '%s': hidden size, layers, heads and vocab_size "
                         "must be positive",
                         c->path);
    if ((err = oomi_cfg_num(c, KEYS("num_key_value_heads", "num_kv_heads"), &m->kv_heads, false,
                            gemma3 ? 4 : m->heads)) ||
        (err = oomi_cfg_num(c, KEYS("head_dim", "d_kv"), &m->head_dim, false,
                            gemma3 ? 256 : m->hidden / m->heads)))
        return err;
    if (oomi_cfg_bool(c, "multi_query", false) &&
        !oomi_cfg_bool(c, "new_decoder_architecture", false))
        m->kv_heads = 1;
    dflt_ffn = 4 * m->hidden;
    if ((err = oomi_cfg_num(
             c, KEYS("intermediate_size", "n_inner", "d_ff", "ffn_dim", "ffn_hidden_size"), &m->ffn,
             m->block == OOMI_BLOCK_LLAMA || t5, dflt_ffn)) ||
        (err = oomi_cfg_num(
             c, KEYS("max_position_embeddings", "n_positions", "n_ctx", "seq_length"), &m->max_pos,
             m->block == OOMI_BLOCK_BERT || !strcmp(m->family, "gpt2"), gemma3 ? 131072 : 0)) ||
        (err = oomi_cfg_num(c, KEYS("num_local_experts", "num_experts", "n_routed_experts"),
                            &m->experts, false, llama4 ? 16 : 0)) ||
        (err = oomi_cfg_num(c, KEYS("num_experts_per_tok"), &m->topk, m->experts > 0 && !llama4,
                            llama4 ? 1 : 0)) ||
        (err = oomi_cfg_num(c, KEYS("num_labels"), &m->labels, false, 2)) ||
        (err = read_mla(m, c)) || (err = read_experts(m, c)) || (err = read_window(m, c)))
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
        const char *ff = oomi_cfg_str(c, "feed_forward_proj");
        m->enc_layers = m->layers;
        if ((err = oomi_cfg_num(c, KEYS("num_decoder_layers"), &m->layers, false, m->enc_layers)))
            return err;
        m->gated = ff && !strncmp(ff, "gated-", 6);
    } else {
        m->gated = m->block == OOMI_BLOCK_LLAMA;
    }
    /* transformers' PretrainedConfig default is tied; Llama/Mistral/Mixtral/Phi-3/NeoX set it;
     * Llama4TextConfig defaults to untied */
    m->tied =
        oomi_cfg_bool(c, "tie_word_embeddings", strcmp(m->family, "gpt_neox") != 0 && !llama4);
    return OOM_OK;
}
