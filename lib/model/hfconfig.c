/*
 * hfconfig.c - reads Hugging Face config.json files (json-c) into the shapes the estimator needs
 * and counts their parameters. Families: Llama/Mistral/Qwen2/Gemma/Gemma2/Phi-3/Mixtral (RMSNorm,
 * gated MLP, GQA), GPT-2, GPT-NeoX, GPTBigCode, BLOOM, OPT, Falcon, BERT/RoBERTa, T5/mT5.
 * The keys read are those of transformers' configuration_<family>.py classes: the shape in
 * hfconfig_shape.c, the parameters in hfconfig_count.c; here the family, a pre-quantized
 * checkpoint's storage and the model's lifetime.
 */
#include "model/hfconfig.h"

#include <string.h>

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
    if (!json_object_is_type(q, json_type_object) || !(method = oomi_cfg_str(&c, "quant_method")))
        return oomi_fail(OOM_EPARSE,
                         "model config '%s': quantization_config needs a 'quant_method'", path);
    if (!strcmp(method, "gptq") || !strcmp(method, "awq")) {
        if ((err = oomi_cfg_num(&c, KEYS("bits", "w_bit"), &bits, true, 0)))
            return err;
        if (bits < 2 || bits > 8)
            return oomi_fail(OOM_EPARSE, "model config '%s': %s bits '%ld' is not 2 to 8", path,
                             method, bits);
        v = oomi_json_get(q, "group_size");
        if (v && oomi_json_is_number(v) && json_object_get_double(v) < 0)
            group = m->hidden; /* -1: one group per input row */
        else if ((err = oomi_cfg_num(&c, KEYS("group_size", "q_group_size"), &group, false, 128)))
            return err;
        if (group < 1)
            group = 128;
        m->quant_bytes = bits / 8.0 + (2 + bits / 8.0) / (double)group;
        oomi_snprintf(m->quant_desc, sizeof(m->quant_desc), "%s %ld-bit, groups of %ld", method,
                      bits, group);
    } else if (!strcmp(method, "bitsandbytes")) {
        if (oomi_cfg_bool(&c, "load_in_4bit", false)) {
            bool dq = oomi_cfg_bool(&c, "bnb_4bit_use_double_quant", false);
            m->quant_bytes = oomi_nf4_bytes(dq);
            oomi_snprintf(m->quant_desc, sizeof(m->quant_desc), "bitsandbytes 4-bit%s",
                          dq ? ", double quantization" : "");
        } else if (oomi_cfg_bool(&c, "load_in_8bit", false)) {
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
        if ((err = oomi_cfg_count_vision(&vision, &c, text)))
            return err;
        c.cfg = text; /* the language model, planned as a causal LM */
    }
    if (!(type = oomi_cfg_family(&c)))
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
    m->head = oomi_cfg_head(&c, m->block);
    if (!(err = oomi_cfg_shape(m, &c))) {
        switch (m->block) {
        case OOMI_BLOCK_LLAMA:
            err = oomi_cfg_count_llama(m, &c);
            break;
        case OOMI_BLOCK_GPT:
            err = oomi_cfg_count_gpt(m, &c);
            break;
        case OOMI_BLOCK_BERT:
            err = oomi_cfg_count_bert(m, &c);
            break;
        case OOMI_BLOCK_T5:
            err = oomi_cfg_count_t5(m, &c);
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
