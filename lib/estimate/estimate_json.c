/* estimate_json.c - an estimate (and its workload) as one JSON document, built with json-c. */
#include "estimate/estimate.h"

#include <json-c/json.h>
#include <string.h>

static void put(json_object *o, const char *key, json_object *v)
{
    json_object_object_add(o, key, v);
}

static json_object *size(uint64_t v)
{
    return json_object_new_int64(v > INT64_MAX ? INT64_MAX : (int64_t)v);
}

static json_object *workload_json(const oom_workload *w)
{
    json_object *o = json_object_new_object();
    oom_knobs k = OOM_KNOBS_INIT;
    bool lora = w->k.method == OOM_METHOD_LORA || w->k.method == OOM_METHOD_QLORA;

    if (!o)
        return NULL;
    oom_workload_get_knobs(&k, w);
    put(o, "model", w->model_arg ? json_object_new_string(w->model_arg) : NULL);
    put(o, "method", json_object_new_string(oom_method_name(k.method)));
    put(o, "precision", json_object_new_string(oom_precision_name(k.precision)));
    put(o, "optimizer", json_object_new_string(oom_optimizer_name(k.optimizer)));
    put(o, "batch", json_object_new_int64(k.batch));
    put(o, "seq", json_object_new_int64(k.seq_len));
    put(o, "grad_accum", json_object_new_int64(k.grad_accum));
    put(o, "checkpointing", json_object_new_string(oom_checkpointing_name(k.checkpointing)));
    put(o, "attention", json_object_new_string(oom_attention_name(k.attention)));
    put(o, "loss", json_object_new_string(oom_loss_name(k.loss)));
    put(o, "gpus", json_object_new_int64(k.gpus));
    put(o, "sharding", json_object_new_string(oom_sharding_name(k.sharding)));
    put(o, "offload", json_object_new_string(oom_offload_name(k.offload)));
    if (lora) {
        put(o, "lora_rank", json_object_new_int64(w->lora_rank));
        put(o, "lora_targets",
            json_object_new_string(w->lora_targets ? w->lora_targets
                                   : w->model      ? w->model->default_targets
                                                   : "default"));
        put(o, "lora_dropout", json_object_new_double(w->lora_dropout));
    }
    if (w->keep_grads)
        put(o, "keep_grads", json_object_new_boolean(1));
    if (w->overhead != OOM_UNKNOWN)
        put(o, "overhead", size(w->overhead));
    if (w->decoder_seq)
        put(o, "decoder_seq", json_object_new_int64(w->decoder_seq));
    if (w->max_pos_override)
        put(o, "max_positions", json_object_new_int64(w->max_pos_override));
    put(o, "gpu", w->has_gpu ? json_object_new_string(w->gpu_id) : NULL);
    return o;
}

static json_object *model_json(const oom_workload *w)
{
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    json_object *o;
    if (oom_workload_model(&mi, w) || !(o = json_object_new_object()))
        return NULL;
    put(o, "name", json_object_new_string(mi.name));
    put(o, "family", json_object_new_string(mi.family));
    put(o, "head", json_object_new_string(mi.head));
    put(o, "layers", json_object_new_int64(mi.layers));
    if (mi.encoder_layers)
        put(o, "encoder_layers", json_object_new_int64(mi.encoder_layers));
    put(o, "hidden", json_object_new_int64(mi.hidden));
    put(o, "heads", json_object_new_int64(mi.heads));
    put(o, "kv_heads", json_object_new_int64(mi.kv_heads));
    put(o, "head_dim", json_object_new_int64(mi.head_dim));
    put(o, "ffn", json_object_new_int64(mi.ffn));
    put(o, "vocab", json_object_new_int64(mi.vocab));
    put(o, "max_positions", mi.max_positions ? json_object_new_int64(mi.max_positions) : NULL);
    if (mi.experts) {
        put(o, "experts", json_object_new_int64(mi.experts));
        put(o, "experts_per_token", json_object_new_int64(mi.experts_per_token));
    }
    return o;
}

json_object *oomi_estimate_memory_json(const oom_estimate *e)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    put(o, "weights", size(e->weights));
    put(o, "gradients", size(e->gradients));
    put(o, "optimizer", size(e->optimizer));
    put(o, "activations", size(e->activations));
    put(o, "logits", size(e->logits));
    put(o, "kv_cache", size(e->kv_cache));
    put(o, "temporaries", size(e->temporaries));
    put(o, "overhead", size(e->overhead));
    put(o, "allocated_peak", size(e->allocated_peak));
    put(o, "reserved_peak", size(e->reserved_peak));
    put(o, "device_peak", size(e->device_peak));
    return o;
}

static void estimate_json(json_object *root, const oom_estimate *e)
{
    json_object *params = json_object_new_object(), *comp = json_object_new_object();
    put(root, "memory", oomi_estimate_memory_json(e));
    put(root, "peak_phase", json_object_new_string(oom_phase_name(e->peak_phase)));
    if (params) {
        put(params, "total", size(e->params_total));
        put(params, "trainable", size(e->params_trainable));
    }
    put(root, "params", params);
    if (comp) {
        put(comp, "flops_per_token", json_object_new_double(e->flops_per_token));
        put(comp, "flops_per_step", json_object_new_double(e->flops_per_step));
        put(comp, "tokens_per_step", size(e->tokens_per_step));
    }
    put(root, "compute", comp);
}

static json_object *budget_json(const oom_estimate *e, const oom_budget *b)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    put(o, "target_bytes", size(b->target_bytes));
    put(o, "safety_margin_bytes", size(b->safety_margin_bytes));
    put(o, "usable_bytes", size(b->usable_bytes));
    put(o, "fits", json_object_new_boolean(e->device_peak <= b->usable_bytes));
    put(o, "headroom_bytes",
        json_object_new_int64((int64_t)b->usable_bytes - (int64_t)e->device_peak));
    return o;
}

int oom_estimate_to_json(char **out, const oom_workload *w, const oom_estimate *e)
{
    return oom_estimate_to_json_budget(out, w, e, NULL);
}

int oom_estimate_to_json_budget(char **out, const oom_workload *w, const oom_estimate *e,
                                const oom_budget *budget)
{
    json_object *root = json_object_new_object();
    const char *text;
    int err = OOM_OK;

    *out = NULL;
    if ((e && (err = oomi_check_version(e->version, OOM_ESTIMATE_VERSION, "oom_estimate"))) ||
        (budget && (err = oomi_check_version(budget->version, OOM_BUDGET_VERSION, "oom_budget")))) {
        json_object_put(root);
        return err;
    }
    if (!root)
        return oomi_nomem();
    put(root, "workload", workload_json(w));
    if (w->model)
        put(root, "model", model_json(w));
    if (e)
        estimate_json(root, e);
    if (e && budget)
        put(root, "budget", budget_json(e, budget));
    text = json_object_to_json_string_ext(root, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED |
                                                    JSON_C_TO_STRING_NOSLASHESCAPE);
    if (!text || !(*out = oomi_strdup(text)))
        err = oomi_nomem();
    json_object_put(root);
    return err;
}

int oom_model_presets_json(char **out)
{
    oom_preset **p = NULL;
    size_t n = 0, i;
    json_object *arr;
    const char *text;
    int err;

    *out = NULL;
    if ((err = oom_model_presets(&p, &n)))
        return err;
    if (!(arr = json_object_new_array())) {
        oom_model_presets_free(p, n);
        return oomi_nomem();
    }
    for (i = 0; i < n; i++) {
        json_object *o = json_object_new_object();
        if (!o)
            break;
        put(o, "name", json_object_new_string(p[i]->name));
        put(o, "family", json_object_new_string(p[i]->family));
        put(o, "params", size(p[i]->params));
        json_object_array_add(arr, o);
    }
    text =
        i == n
            ? json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED)
            : NULL;
    if (!text || !(*out = oomi_strdup(text)))
        err = oomi_nomem();
    json_object_put(arr);
    oom_model_presets_free(p, n);
    return err;
}
