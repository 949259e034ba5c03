/* estimate_json.c - an estimate (and its workload) as one JSON document, built with json-c. */
#include "estimate/estimate.h"

#include <json-c/json.h>
#include <string.h>

/* what the objective changes, as TRL counts it (docs/estimate.md, "Objectives") */
static json_object *objective_json(const oom_estimate_report *r)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    oomi_json_put(o, "name", json_object_new_string(r->objective));
    oomi_json_put(o, "batch_counts", json_object_new_string(r->batch_counts));
    oomi_json_put(o, "sequences_per_forward", json_object_new_int64(r->sequences_per_forward));
    oomi_json_put(o, "reference", json_object_new_string(r->reference));
    if (r->reference_precision)
        oomi_json_put(o, "reference_precision", json_object_new_string(r->reference_precision));
    if (strcmp(r->reference, "none"))
        oomi_json_put(o, "precompute_ref", json_object_new_boolean(r->precompute_ref));
    if (r->rollout) { /* grpo */
        oomi_json_put(o, "num_generations", json_object_new_int64(r->num_generations));
        oomi_json_put(o, "prompt_len", json_object_new_int64(r->prompt_len));
        oomi_json_put(o, "completion_len", json_object_new_int64(r->completion_len));
        oomi_json_put(o, "generation_batch", json_object_new_int64(r->generation_batch));
        oomi_json_put(o, "rollout", json_object_new_string(r->rollout));
        if (strcmp(r->rollout, "none"))
            oomi_json_put(o, "sleep_mode", json_object_new_int(r->sleep_mode));
    }
    return o;
}

/* the micro-batch as the model sees it under packing (docs/estimate.md, "Sequence packing") */
static json_object *packing_json(const oom_estimate_report *r)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    oomi_json_put(o, "mode", json_object_new_string(r->packing));
    oomi_json_put(o, "tokens_per_batch", json_object_new_int64(r->tokens_per_batch));
    oomi_json_put(o, "rows", json_object_new_int64(r->pack_rows));
    oomi_json_put(o, "row_tokens", json_object_new_int64(r->pack_row_tokens));
    oomi_json_put(o, "longest_document", json_object_new_int64(r->longest_document));
    oomi_json_put(o, "attention_path", json_object_new_string(r->attention_path));
    return o;
}

static json_object *workload_json(const oom_workload *w, const oom_estimate_report *r)
{
    json_object *o = json_object_new_object();
    oom_knobs k = OOM_KNOBS_INIT;
    bool lora = w->k.method == OOM_METHOD_LORA || w->k.method == OOM_METHOD_QLORA;
    char ck[OOMI_CKPT_TEXT];

    if (!o)
        return NULL;
    oom_workload_get_knobs(&k, w);
    oomi_json_put(o, "model", w->model_arg ? json_object_new_string(w->model_arg) : NULL);
    oomi_json_put(o, "method", json_object_new_string(oom_method_name(k.method)));
    oomi_json_put(o, "precision", json_object_new_string(oom_precision_name(k.precision)));
    oomi_json_put(o, "optimizer", json_object_new_string(oom_optimizer_name(k.optimizer)));
    oomi_json_put(o, "batch", json_object_new_int64(k.batch));
    oomi_json_put(o, "seq", json_object_new_int64(k.seq_len));
    oomi_json_put(o, "grad_accum", json_object_new_int64(k.grad_accum));
    oomi_json_put(o, "checkpointing",
                  json_object_new_string(oomi_checkpointing_text(ck, sizeof ck, w)));
    oomi_json_put(o, "attention", json_object_new_string(oom_attention_name(k.attention)));
    oomi_json_put(o, "loss", json_object_new_string(oom_loss_name(k.loss)));
    oomi_json_put(o, "stack", json_object_new_string(oomi_stack_values[w->stack]->name));
    oomi_json_put(o, "gpus", json_object_new_int64(k.gpus));
    oomi_json_put(o, "sharding", json_object_new_string(oomi_sharding_text(w)));
    if (oomi_fsdp2(w)) {
        oomi_json_put(o, "fsdp_param_dtype",
                      json_object_new_string(w->fsdp2.bf16 ? "bf16" : "fp32"));
        oomi_json_put(o, "reshard_after_forward",
                      w->fsdp2.reshard > 1 ? json_object_new_int64(w->fsdp2.reshard)
                                           : json_object_new_boolean(w->fsdp2.reshard == 0));
    }
    oomi_json_put(o, "offload", json_object_new_string(oom_offload_name(k.offload)));
    if (lora) {
        oomi_json_put(o, "lora_rank", json_object_new_int64(w->lora.rank));
        oomi_json_put(o, "lora_targets",
                      json_object_new_string(w->lora.targets ? w->lora.targets
                                             : w->model      ? w->model->default_targets
                                                             : "default"));
        oomi_json_put(o, "lora_dropout", json_object_new_double(w->lora.dropout));
    }
    if (r->objective)
        oomi_json_put(o, "objective", objective_json(r));
    if (r->packing)
        oomi_json_put(o, "packing", packing_json(r));
    if (w->parallel.tp > 1)
        oomi_json_put(o, "tensor_parallel", json_object_new_int64(w->parallel.tp));
    if (k.method == OOM_METHOD_INFERENCE && r->completion_len > 0)
        oomi_json_put(o, "completion_len", json_object_new_int64(r->completion_len));
    if (k.method == OOM_METHOD_INFERENCE)
        oomi_json_put(o, "kv_cache",
                      json_object_new_string(
                          OOMI_VALUE_NAME(oomi_kv_cache_values, w->serve.kv_transformers)));
    if (w->runtime.keep_grads)
        oomi_json_put(o, "keep_grads", json_object_new_boolean(1));
    if (w->runtime.optim_in_bwd)
        oomi_json_put(o, "optimizer_in_backward", json_object_new_boolean(1));
    if (w->runtime.compile)
        oomi_json_put(o, "compile", json_object_new_boolean(1));
    if (w->runtime.overhead != OOM_UNKNOWN)
        oomi_json_put(o, "overhead", oomi_json_size(w->runtime.overhead));
    if (w->shape.decoder_seq)
        oomi_json_put(o, "decoder_seq", json_object_new_int64(w->shape.decoder_seq));
    if (w->shape.max_positions)
        oomi_json_put(o, "max_positions", json_object_new_int64(w->shape.max_positions));
    oomi_json_put(o, "gpu", w->gpu.known ? json_object_new_string(w->gpu.id) : NULL);
    return o;
}

static json_object *model_json(const oom_workload *w)
{
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    json_object *o;
    if (oom_workload_model(&mi, w) || !(o = json_object_new_object()))
        return NULL;
    oomi_json_put(o, "name", json_object_new_string(mi.name));
    oomi_json_put(o, "family", json_object_new_string(mi.family));
    oomi_json_put(o, "head", json_object_new_string(mi.head));
    oomi_json_put(o, "layers", json_object_new_int64(mi.layers));
    if (mi.encoder_layers)
        oomi_json_put(o, "encoder_layers", json_object_new_int64(mi.encoder_layers));
    oomi_json_put(o, "hidden", json_object_new_int64(mi.hidden));
    oomi_json_put(o, "heads", json_object_new_int64(mi.heads));
    oomi_json_put(o, "kv_heads", json_object_new_int64(mi.kv_heads));
    oomi_json_put(o, "head_dim", json_object_new_int64(mi.head_dim));
    oomi_json_put(o, "ffn", json_object_new_int64(mi.ffn));
    oomi_json_put(o, "vocab", json_object_new_int64(mi.vocab));
    oomi_json_put(o, "max_positions",
                  mi.max_positions ? json_object_new_int64(mi.max_positions) : NULL);
    if (w->model && w->model->quant_bytes > 0) {
        oomi_json_put(o, "quantization", json_object_new_string(w->model->quant_desc));
        oomi_json_put(o, "quantized_bytes_per_weight",
                      json_object_new_double(w->model->quant_bytes));
    }
    if (mi.experts) {
        oomi_json_put(o, "experts", json_object_new_int64(mi.experts));
        oomi_json_put(o, "experts_per_token", json_object_new_int64(mi.experts_per_token));
    }
    return o;
}

json_object *oomi_estimate_memory_json(const oom_estimate *e)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    oomi_json_put(o, "weights", oomi_json_size(e->weights));
    oomi_json_put(o, "gradients", oomi_json_size(e->gradients));
    oomi_json_put(o, "optimizer", oomi_json_size(e->optimizer));
    oomi_json_put(o, "activations", oomi_json_size(e->activations));
    oomi_json_put(o, "logits", oomi_json_size(e->logits));
    oomi_json_put(o, "kv_cache", oomi_json_size(e->kv_cache));
    oomi_json_put(o, "temporaries", oomi_json_size(e->temporaries));
    oomi_json_put(o, "overhead", oomi_json_size(e->overhead));
    oomi_json_put(o, "allocated_peak", oomi_json_size(e->allocated_peak));
    oomi_json_put(o, "reserved_peak", oomi_json_size(e->reserved_peak));
    oomi_json_put(o, "device_peak", oomi_json_size(e->device_peak));
    return o;
}

json_object *oomi_kv_layout_json(const oomi_kv_layout *kv)
{
    json_object *o;
    if (kv->elems <= 0 || !(o = json_object_new_object()))
        return NULL;
    oomi_json_put(o, "stack",
                  json_object_new_string(OOMI_VALUE_NAME(oomi_kv_cache_values, !kv->vllm)));
    oomi_json_put(o, "full", json_object_new_int64(kv->full));
    oomi_json_put(o, "sliding", json_object_new_int64(kv->sliding));
    oomi_json_put(o, "window", kv->window ? json_object_new_int64(kv->window) : NULL);
    oomi_json_put(o, "latent", json_object_new_boolean(kv->latent));
    oomi_json_put(o, "elements_per_token", json_object_new_int64((int64_t)kv->elems));
    return o;
}

/* what a 4-bit base, its adapters and a paged optimizer hold; NULL where none of them is */
static json_object *qlora_json(const oom_estimate_report *r)
{
    json_object *o;
    if (!r->has_qlora || !(o = json_object_new_object()))
        return NULL;
    if (r->quantized) {
        oomi_json_put(o, "double_quant", json_object_new_boolean(r->double_quant));
        oomi_json_put(o, "nf4_bytes", oomi_json_size(r->nf4_bytes));
        oomi_json_put(o, "absmax_bytes", oomi_json_size(r->absmax_bytes));
        oomi_json_put(o, "absmax2_bytes", oomi_json_size(r->absmax2_bytes));
        oomi_json_put(o, "unquantized_bytes", oomi_json_size(r->unquantized_bytes));
        oomi_json_put(o, "dequantized_transient_bytes", oomi_json_size(r->dequantized_bytes));
    }
    if (r->version >= 3 && r->quantizer) {
        oomi_json_put(o, "quantizer", json_object_new_string(r->quantizer));
        oomi_json_put(o, "bitsandbytes", json_object_new_string(r->bitsandbytes));
        oomi_json_put(o, "kept_inputs_bytes", oomi_json_size(r->kept_inputs_bytes));
    }
    if (r->adapter_dtype) {
        oomi_json_put(o, "adapter_dtype", json_object_new_string(r->adapter_dtype));
        oomi_json_put(o, "adapter_bytes", oomi_json_size(r->adapter_bytes));
    }
    oomi_json_put(o, "paged_optimizer_bytes", oomi_json_size(r->paged_optimizer_bytes));
    return o;
}

static void estimate_json(json_object *root, const oom_estimate *e)
{
    json_object *params = json_object_new_object(), *comp = json_object_new_object();
    oomi_json_put(root, "memory", oomi_estimate_memory_json(e));
    oomi_json_put(root, "peak_phase", json_object_new_string(oom_phase_name(e->peak_phase)));
    if (params) {
        oomi_json_put(params, "total", oomi_json_size(e->params_total));
        oomi_json_put(params, "trainable", oomi_json_size(e->params_trainable));
    }
    oomi_json_put(root, "params", params);
    if (comp) {
        oomi_json_put(comp, "flops_per_token", json_object_new_double(e->flops_per_token));
        oomi_json_put(comp, "flops_per_step", json_object_new_double(e->flops_per_step));
        oomi_json_put(comp, "tokens_per_step", oomi_json_size(e->tokens_per_step));
    }
    oomi_json_put(root, "compute", comp);
}

/* The 95 % bounds in "memory" and how they were found in "confidence" (estimate_confidence.c) */
static int confidence_json(json_object *root, const oom_estimate_report *r)
{
    json_object *mem = oomi_json_get(root, "memory"), *o, *sp;

    oomi_json_put(mem, "allocated_peak_upper95", oomi_json_size(r->allocated_peak_upper95));
    oomi_json_put(mem, "reserved_peak_upper95", oomi_json_size(r->reserved_peak_upper95));
    oomi_json_put(mem, "device_peak_upper95", oomi_json_size(r->device_peak_upper95));
    if (!(o = json_object_new_object()))
        return oomi_nomem();
    oomi_json_put(o, "level", json_object_new_double(r->confidence_level));
    oomi_json_put(o, "class", json_object_new_string(r->confidence_class));
    oomi_json_put(o, "basis", json_object_new_string(r->confidence_basis));
    oomi_json_put(o, "errors_of", json_object_new_string(r->confidence_errors_of));
    oomi_json_put(o, "cases", json_object_new_int64(r->confidence_cases));
    if (!(sp = json_object_new_object())) {
        json_object_put(o);
        return oomi_nomem();
    }
    oomi_json_put(sp, "basis", json_object_new_string(r->confidence_spread));
    oomi_json_put(sp, "stack", json_object_new_string(r->stack));
    oomi_json_put(sp, "sources", json_object_new_int64(r->confidence_spread_sources));
    oomi_json_put(sp, "stack_sources", json_object_new_int64(r->confidence_stack_sources));
    oomi_json_put(sp, "bias", oomi_json_number(r->confidence_spread_bias, 4));
    oomi_json_put(o, "spread", sp);
    oomi_json_put(o, "under_prediction", oomi_json_number(r->under_prediction, 4));
    oomi_json_put(o, "context_uncertainty_bytes", oomi_json_size(r->context_uncertainty_bytes));
    return oomi_json_put(root, "confidence", o);
}

static json_object *budget_json(const oom_estimate *e, const oom_budget *b)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    oomi_json_put(o, "target_bytes", oomi_json_size(b->target_bytes));
    oomi_json_put(o, "safety_margin_bytes", oomi_json_size(b->safety_margin_bytes));
    oomi_json_put(o, "usable_bytes", oomi_json_size(b->usable_bytes));
    oomi_json_put(o, "fits", json_object_new_boolean(e->device_peak <= b->usable_bytes));
    oomi_json_put(o, "headroom_bytes",
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
    oom_estimate_report r = OOM_ESTIMATE_REPORT_INIT;
    json_object *root = NULL;
    int err;

    *out = NULL;
    if ((e && (err = oomi_check_version(e->version, OOM_ESTIMATE_VERSION, "oom_estimate"))) ||
        (budget && (err = oomi_check_version(budget->version, OOM_BUDGET_VERSION, "oom_budget"))))
        return err;
    if ((err = oomi_estimate_report_fill(&r, w, e, budget)))
        goto done;
    if (!(root = json_object_new_object())) {
        err = oomi_nomem();
        goto done;
    }
    oomi_json_put(root, "workload", workload_json(w, &r));
    oomi_json_put(root, "stack", oomi_stack_json(w->stack));
    if (w->model)
        oomi_json_put(root, "model", model_json(w));
    if (e)
        estimate_json(root, e);
    if (e && e->kv_cache && w->model && w->model->block != OOMI_BLOCK_T5) {
        oomi_kv_layout kv;
        oomi_kv_layout_of(&kv, w);
        oomi_json_put(root, "kv_cache_layers", oomi_kv_layout_json(&kv));
    }
    if (e && w->model) {
        oomi_json_put(root, "qlora", qlora_json(&r));
        if (r.load_how) {
            json_object *l = json_object_new_object();
            oomi_json_put(l, "allocated_peak", oomi_json_size(r.load_peak));
            oomi_json_put(l, "transient_bytes", oomi_json_size(r.load_transient));
            oomi_json_put(l, "how", json_object_new_string(r.load_how));
            oomi_json_put(root, "load", l);
        }
        oomi_json_put(root, "overhead", oomi_overhead_json(w));
        oomi_json_put(root, "cublas_workspace", oomi_cublas_json(w));
    }
    if (e && w->model && w->k.sharding == OOM_SHARDING_ZERO3 &&
        w->k.method != OOM_METHOD_INFERENCE) {
        json_object *z;
        if ((err = oomi_zero3_json(&z, w, (double)e->activations)))
            goto done;
        oomi_json_put(root, "zero3", z);
    }
    if (e && w->model && oomi_layout_on(w)) /* every pipeline rank's peak, the groups */
        oomi_json_put(root, "parallel", oomi_layout_json(w));
    if (e && w->model && (err = confidence_json(root, &r)))
        goto done;
    if (e && budget)
        oomi_json_put(root, "budget", budget_json(e, budget));
    err = oomi_json_finish(out, root);
    root = NULL;
done:
    json_object_put(root);
    oom_estimate_report_dispose(&r);
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
        oomi_json_put(o, "name", json_object_new_string(p[i]->name));
        oomi_json_put(o, "family", json_object_new_string(p[i]->family));
        oomi_json_put(o, "params", oomi_json_size(p[i]->params));
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
