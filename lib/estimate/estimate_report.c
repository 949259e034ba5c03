/* estimate_report.c - an estimate with everything `oomless estimate` says about it
 * (oom_estimate_report): the workload as estimated, its objective and packing, the 95 % bounds,
 * a quantised base's and LoRA's parts, the overhead part by part, the budget. The tool's text is
 * written from it, and estimate_json.c writes the same fields. */
#include "estimate/estimate.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

/* a copy of s into *dst (NULL stays NULL); false when out of memory */
static bool dup(char **dst, const char *s)
{
    *dst = s ? oomi_strdup(s) : NULL;
    return !s || *dst;
}

/* what the objective changes, as TRL counts it (docs/estimate.md, "Objectives") */
static bool fill_objective(oom_estimate_report *r, const oom_workload *w)
{
    oomi_reference ref = oomi_reference_of(w);
    if (w->objective.kind == OOMI_OBJECTIVE_SFT)
        return true;
    r->sequences_per_forward = w->k.batch * oomi_objective_sequences(w->objective.kind);
    r->precompute_ref = w->objective.precompute_ref;
    if (w->objective.kind == OOMI_OBJECTIVE_GRPO) {
        r->completion_len =
            w->objective.completion_len ? w->objective.completion_len : w->k.seq_len / 2;
        r->num_generations = w->objective.num_generations;
        r->prompt_len = w->k.seq_len - r->completion_len;
        r->generation_batch = w->k.batch * w->k.grad_accum;
        r->sleep_mode = w->objective.rollout != OOMI_ROLLOUT_NONE ? w->objective.sleep_level : 0;
        if (!dup(&r->rollout, OOMI_VALUE_NAME(oomi_rollout_values, w->objective.rollout)))
            return false;
    }
    return dup(&r->objective, OOMI_VALUE_NAME(oomi_objective_values, w->objective.kind)) &&
           dup(&r->batch_counts, oomi_objective_unit(w->objective.kind)) &&
           dup(&r->reference, OOMI_VALUE_NAME(oomi_reference_values, ref)) &&
           dup(&r->reference_precision,
               ref != OOMI_REFERENCE_COPY
                   ? NULL
                   : oom_precision_name(w->objective.ref_precision != OOM_PRECISION_AUTO
                                            ? w->objective.ref_precision
                                            : oomi_resolved_precision(w)));
}

/* the micro-batch as the model sees it under packing (docs/estimate.md, "Sequence packing") */
static bool fill_packing(oom_estimate_report *r, const oom_workload *w)
{
    if (w->packing.mode == OOMI_PACKING_NONE)
        return true;
    oomi_packed_shape(w, &r->pack_rows, &r->pack_row_tokens);
    r->tokens_per_batch = r->pack_rows * r->pack_row_tokens;
    r->longest_document = w->k.seq_len;
    return dup(&r->packing, OOMI_VALUE_NAME(oomi_packing_values, w->packing.mode)) &&
           dup(&r->attention_path, w->k.attention == OOM_ATTENTION_FLASH ? "varlen kernel, no mask"
                                   : w->k.attention == OOM_ATTENTION_SDPA
                                       ? "4D document mask, memory-efficient kernel"
                                       : "4D document mask, scores of the whole row");
}

/* the workload's own words: model, knobs, checkpointing and sharding as the options spell them */
static int fill_workload(oom_estimate_report *r, const oom_workload *w)
{
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    char ck[OOMI_CKPT_TEXT];
    int err;

    r->knobs = (oom_knobs)OOM_KNOBS_INIT;
    if ((err = oom_workload_get_knobs(&r->knobs, w)))
        return err;
    r->tensor_parallel = w->parallel.tp;
    r->stack_traced = oomi_stack_values[w->stack]->traced;
    if (w->k.method == OOM_METHOD_INFERENCE && w->objective.completion_len > 0)
        r->completion_len = w->objective.completion_len,
        r->prompt_len = w->k.seq_len - w->objective.completion_len;
    if (w->model && (err = oom_workload_model(&mi, w)))
        return err;
    if (!dup(&r->model, w->model ? mi.name : NULL) ||
        !dup(&r->family, w->model ? mi.family : NULL) ||
        !dup(&r->checkpointing, oomi_checkpointing_text(ck, sizeof ck, w)) ||
        !dup(&r->sharding, oomi_sharding_text(w)) ||
        !dup(&r->stack, oomi_stack_values[w->stack]->name) ||
        !dup(&r->stack_versions, oomi_stack_values[w->stack]->versions) || !fill_objective(r, w) ||
        !fill_packing(r, w))
        return oomi_nomem();
    if (oomi_fsdp2(w) &&
        ((err = oom_workload_get(&r->fsdp_param_dtype, w, "fsdp-param-dtype")) ||
         (err = oom_workload_get(&r->reshard_after_forward, w, "reshard-after-forward"))))
        return err;
    return OOM_OK;
}

/* The 95 % bounds and the class of measured errors behind them (estimate_confidence.c) */
static int fill_confidence(oom_estimate_report *r, const oom_workload *w, const oom_estimate *e)
{
    oomi_conf c;
    int err;
    if ((err = oomi_confidence_class(&c, &r->knobs, w->parallel.tp,
                                     w->runtime.overhead != OOM_UNKNOWN, w->stack, 0.95)))
        return err;
    r->allocated_peak_upper95 = oomi_confidence_bound(&c, e->allocated_peak, false);
    r->reserved_peak_upper95 = oomi_confidence_bound(&c, e->reserved_peak, false);
    r->device_peak_upper95 = oomi_confidence_bound(&c, e->device_peak, true);
    r->confidence_level = c.level;
    r->confidence_cases = c.cases;
    r->under_prediction = c.under;
    r->context_uncertainty_bytes = (uint64_t)c.ctx;
    if (!dup(&r->confidence_class, c.key) ||
        !dup(&r->confidence_basis, oomi_conf_basis_name(c.basis)) ||
        !dup(&r->confidence_errors_of, c.used))
        return oomi_nomem();
    if (r->version < 2) /* a caller built against version 1 has no room for the rest */
        return OOM_OK;
    r->confidence_spread_sources = c.spread_sources;
    r->confidence_stack_sources = c.stack_sources;
    r->confidence_spread_bias = c.spread_under;
    if (!dup(&r->confidence_spread, c.spread))
        return oomi_nomem();
    return OOM_OK;
}

/* whether a part of the report is left out: where the workload's part cannot be had (the
 * estimate has already said why) it is, and only running out of memory fails (*err) */
static bool part_left_out(int *err)
{
    if (*err && *err != OOM_ENOMEM) {
        oomi_clear_error();
        *err = OOM_OK;
        return true;
    }
    return *err != OOM_OK;
}

/* what a 4-bit base, its adapters and a paged optimizer hold; nothing where none of them is */
static int fill_qlora(oom_estimate_report *r, const oom_workload *w, const oom_estimate *e)
{
    oomi_qlora q;
    int err = oomi_qlora_of(&q, w, e);
    if (part_left_out(&err))
        return err;
    r->has_qlora = q.quantized || q.adapter_bytes > 0 || q.paged > 0;
    if (q.quantized) {
        r->quantized = 1;
        r->double_quant = q.double_quant;
        r->nf4_bytes = (uint64_t)llround(q.nf4);
        r->absmax_bytes = (uint64_t)llround(q.absmax);
        r->absmax2_bytes = (uint64_t)llround(q.absmax2);
        r->unquantized_bytes = (uint64_t)llround(q.unquantized);
        r->dequantized_bytes = (uint64_t)llround(q.dequant);
    }
    if (q.adapter_bytes > 0) {
        r->adapter_bytes = (uint64_t)llround(q.adapters);
        if (!dup(&r->adapter_dtype, q.adapter_bytes < 4 ? "bf16" : "fp32"))
            return oomi_nomem();
    }
    r->paged_optimizer_bytes = (uint64_t)llround(q.paged);
    if (r->version >= 3 && q.bnb) {
        r->kept_inputs_bytes = q.kept_inputs > 0 ? (uint64_t)llround(q.kept_inputs) : 0;
        if (!dup(&r->quantizer, oomi_quantizer_values[q.quantizer]->name) ||
            !dup(&r->bitsandbytes, oomi_bitsandbytes_values[q.release]->name))
            return oomi_nomem();
    }
    return OOM_OK;
}

/* loading the weights (estimate_load.c); version 3 */
static int fill_load(oom_estimate_report *r, const oom_workload *w, const oom_estimate *e)
{
    oomi_load l;
    int err = oomi_load_of(&l, w, e);
    if (part_left_out(&err))
        return err;
    r->load_peak = (uint64_t)llround(l.peak);
    r->load_transient = (uint64_t)llround(l.transient);
    return dup(&r->load_how, l.how) ? OOM_OK : oomi_nomem();
}

/* the overhead part by part and the cuBLAS workspace (estimate_overhead.c) */
static int fill_overhead(oom_estimate_report *r, const oom_workload *w)
{
    const oomi_coef *c;
    oomi_overhead o;
    bool dflt;
    size_t i;
    int err;

    if ((err = oomi_overhead_of(&o, w)) || (err = oomi_coef_get(&c)))
        return err;
    for (i = 0; i < o.n; i++) {
        uint64_t bytes = (uint64_t)(o.part[i].bytes + 0.5);
        if (!strcmp(o.part[i].name, "given"))
            r->overhead_given = 1;
        else if (!strcmp(o.part[i].name, "cuda_context"))
            r->cuda_context_bytes = bytes;
        else if (!strcmp(o.part[i].name, "nccl")) {
            r->nccl_bytes = bytes;
            if (!dup(&r->nccl_defaults, o.part[i].change))
                return oomi_nomem();
        }
    }
    if (o.ranks > 1) {
        r->nccl_gpus = o.ranks, r->nccl_communicators = o.comms, r->nccl_channels = o.channels;
        r->nccl_buffsize = (uint64_t)o.buffsize, r->nccl_nvls = o.nvls;
        r->nccl_ring_bytes = (uint64_t)(o.ring + 0.5);
        r->nccl_nvls_bytes = (uint64_t)(o.nvls_bytes + 0.5);
    }
    r->cublas_workspace_bytes = (uint64_t)oomi_cublas_workspace(w, c, &dflt);
    r->cublas_workspace_default = dflt;
    return OOM_OK;
}

int oomi_estimate_report_fill(oom_estimate_report *out, const oom_workload *w,
                              const oom_estimate *e, const oom_budget *budget)
{
    int err;

    if ((err = fill_workload(out, w)))
        return err;
    if (e)
        out->estimate = *e;
    if (e && w->model &&
        ((err = fill_confidence(out, w, e)) || (err = fill_qlora(out, w, e)) ||
         (err = fill_overhead(out, w)) || (out->version >= 3 && (err = fill_load(out, w, e))) ||
         (out->version >= 2 && w->k.method != OOM_METHOD_INFERENCE && oomi_layout_on(w) &&
          (err = oomi_layout_report(out, w)))))
        return err;
    if (e && budget) {
        out->has_budget = 1;
        out->budget = *budget;
        out->fits = e->device_peak <= budget->usable_bytes;
    }
    return OOM_OK;
}

int oom_estimate_report_run(oom_estimate_report *out, const oom_workload *w,
                            const oom_budget *budget)
{
    unsigned int version;
    int err;

    if (!out || !w)
        return oomi_fail(OOM_EINVAL, "estimate report: missing argument");
    if ((err = oomi_check_version(out->version, OOM_ESTIMATE_REPORT_VERSION,
                                  "oom_estimate_report")) ||
        (budget && (err = oomi_check_version(budget->version, OOM_BUDGET_VERSION, "oom_budget"))))
        return err;
    version = out->version;
    memset(out, 0,
           version < 2   ? offsetof(oom_estimate_report, confidence_spread)
           : version < 3 ? offsetof(oom_estimate_report, quantizer)
                         : sizeof(*out));
    out->version = version;
    out->estimate = (oom_estimate)OOM_ESTIMATE_INIT;
    if ((err = oom_estimate_run(&out->estimate, w)) ||
        (err = oomi_estimate_report_fill(out, w, &out->estimate, budget)))
        oom_estimate_report_dispose(out);
    return err;
}

void oom_estimate_report_dispose(oom_estimate_report *r)
{
    if (!r)
        return;
    {
        char **owned[] = {&r->model,
                          &r->family,
                          &r->checkpointing,
                          &r->sharding,
                          &r->stack,
                          &r->stack_versions,
                          &r->fsdp_param_dtype,
                          &r->reshard_after_forward,
                          &r->objective,
                          &r->batch_counts,
                          &r->reference,
                          &r->reference_precision,
                          &r->rollout,
                          &r->packing,
                          &r->attention_path,
                          &r->confidence_class,
                          &r->confidence_basis,
                          &r->confidence_errors_of,
                          &r->adapter_dtype,
                          &r->nccl_defaults};
        size_t i;
        for (i = 0; i < OOMI_ARRAY_LEN(owned); i++) {
            oomi_free(*owned[i]);
            *owned[i] = NULL;
        }
    }
    if (r->version >= 2) {
        oomi_free(r->confidence_spread);
        oomi_free(r->engine);
        oomi_free(r->ranks);
        r->confidence_spread = r->engine = NULL, r->ranks = NULL, r->n_ranks = 0;
    }
    if (r->version >= 3) {
        oomi_free(r->quantizer);
        oomi_free(r->bitsandbytes);
        oomi_free(r->load_how);
        r->quantizer = r->bitsandbytes = r->load_how = NULL;
    }
}
