/* plan_run.c - oom_plan_run: the request checked and set up, the searches it allows (as given,
 * then each fixed value lowered) and the result. */
#include "plan/plan_search.h"

#include <string.h>

static int setup(search *s, oom_plan_result *res)
{
    const oom_plan_request *r = s->r;
    int err;

    if (!r->workload && !r->line)
        return oomi_fail(OOM_EINVAL, "plan: no workload (a model or a measured line)");
    if (!r->workload && !r->line->fixed_bytes && !r->line->bytes_per_sample &&
        !r->line->bytes_per_token)
        return oomi_fail(OOM_EINVAL, "measured line: fixed, per-sample and per-token bytes are all "
                                     "0; give --fixed-bytes or --bytes-per-sample");
    s->nodes = r->nodes > 0 ? r->nodes : 1;
    s->gpus = s->nodes * (r->gpus_per_node > 0 ? r->gpus_per_node : 1);
    if (r->workload) {
        s->base.version = OOM_KNOBS_VERSION;
        if ((err = oom_workload_clone(&s->w, r->workload)) ||
            (err = oom_workload_get_knobs(&s->base, r->workload)))
            return err;
        /* the candidates share a few ZeRO-3 replays */
        if ((err = oomi_zero3_cache_new(&s->w->zero3.cache)))
            return err;
        if (s->gpus == 1 && s->base.gpus > 1)
            s->gpus = s->base.gpus;
    } else {
        s->base = (oom_knobs){.version = OOM_KNOBS_VERSION};
        s->base.batch = s->base.grad_accum = s->base.gpus = 1;
        s->base.seq_len = r->fixed_seq > 0 ? r->fixed_seq : 1; /* 1: not known (plan.h) */
        if (!r->fixed_seq && !r->seq_max && r->line->bytes_per_token)
            return oomi_fail(OOM_EINVAL, "measured line: bytes per token need the sequence "
                                         "length; give --seq");
        s->base.precision = OOM_PRECISION_AUTO; /* not the planner's to say */
    }
    /* the plan's candidates and outputs (DeepSpeed, accelerate, torchtitan configs) name the
     * sharding by its knob, a ZeRO stage; fsdp2's dtype and resharding options are estimated,
     * not searched */
    if (s->w && oomi_fsdp2(s->w))
        return oomi_fail(OOM_EINVAL, "sharding 'fsdp2' is estimated but not planned: plan searches "
                                     "none, zero1, zero2 and zero3 (oomless estimate takes fsdp2)");
    /* the variants of full checkpointing: the workload's own, those the request names */
    s->nvar = 1, s->own = 0;
    if (s->w)
        s->nvar = oomi_ckvar_list(s->vars, &s->own, s->w);
    if (r->fixed_seq > 0)
        s->base.seq_len = r->fixed_seq;
    if (oomi_gpu_lacks_bf16(r->gpu) &&
        (s->base.precision == OOM_PRECISION_BF16 || s->base.precision == OOM_PRECISION_AMP_BF16)) {
        s->base.precision = oomi_precision_without_bf16(s->base.precision);
        if ((err = oomi_plan_note(res, "%s has no bf16 tensor cores: planning with %s", r->gpu->id,
                                  oom_precision_name(s->base.precision))))
            return err;
    }
    if (s->w &&
        ((err = oom_workload_set_knobs(s->w, &s->base)) || (err = oom_workload_validate(s->w)) ||
         (err = oomi_rollout_setup(&s->ro, s->w, r->budget.target_bytes))))
        return err;
    if (oomi_search_zero3_too_deep(s) &&
        (err =
             oomi_plan_note(res,
                            "ZeRO-3 left out of the search: its estimate replays DeepSpeed's "
                            "coordinator over at most %d blocks, and the model has %ld",
                            OOMI_ZERO3_MAX_BLOCKS, s->w->model->layers + s->w->model->enc_layers)))
        return err;
    if (s->ro.on && (s->conf > 0 || r->workers > 1))
        return oomi_fail(OOM_EINVAL, "rollout vllm-colocate is planned to the safety margin, one "
                                     "trainer per GPU (no fit-confidence, no workers)");
    res->inference = s->base.method == OOM_METHOD_INFERENCE && s->w;
    res->measured = !s->w;
    s->eff = r->target_effective_batch;
    if (s->eff <= 0)
        s->eff =
            r->fixed_batch > 0
                ? r->fixed_batch * (r->fixed_grad_accum > 0 ? r->fixed_grad_accum : 1) * s->gpus
                : (s->gpus > 32 ? s->gpus : 32); /* a sample per GPU past 32 GPUs */
    if (!res->inference && s->eff % s->gpus && !r->allow_inexact)
        return oomi_fail(OOM_EINVAL,
                         "target effective batch %ld is not a multiple of %ld GPUs; use "
                         "--allow-inexact",
                         s->eff, s->gpus);
    if (!res->inference && s->eff < s->gpus)
        s->eff = s->gpus;
    res->target_effective_batch = res->inference ? 0 : s->eff;
    res->gpu_budget = r->budget;
    res->workers = r->workers > 1 ? r->workers : 1;
    res->workers_requested = r->workers != 0;
    res->budget = r->budget;
    if (res->workers > 1) {
        res->budget.target_bytes /= (uint64_t)res->workers;
        res->budget.safety_margin_bytes /= (uint64_t)res->workers;
        res->budget.usable_bytes /= (uint64_t)res->workers;
    }
    s->usable = res->budget.usable_bytes;
    s->target = res->budget.target_bytes;
    res->fit_confidence = s->conf;
    if (s->conf > 0 && !s->w)
        return oomi_fail(OOM_EINVAL, "fit-confidence needs a model workload: a measured line has "
                                     "no measured error to take a bound from");
    if (s->conf > 0) {
        double lo, hi;
        if ((err = oomi_confidence_range(&lo, &hi)))
            return err;
        if (!(s->conf >= lo && s->conf <= hi))
            return oomi_fail(OOM_EINVAL,
                             "fit-confidence %g is outside %g to %g (the levels the "
                             "estimator's error was measured at)",
                             s->conf, lo, hi);
    }
    res->nodes = s->nodes;
    res->gpus_per_node = s->gpus / s->nodes;
    res->requested_batch = r->fixed_batch, res->requested_seq = r->fixed_seq;
    return OOM_OK;
}

int oom_plan_run(oom_plan_result **out, const oom_plan_request *r)
{
    return oomi_plan_run(out, r, NULL, 0);
}

int oomi_plan_run(oom_plan_result **out, const oom_plan_request *r,
                  const struct oomi_plan_consts *k, double confidence)
{
    search s;
    oom_plan_result *res = NULL;
    unsigned relax = 0;
    int err;

    if (!out || !r)
        return oomi_fail(OOM_EINVAL, "plan: missing argument");
    *out = NULL;
    if ((err = oomi_check_version(r->version, OOM_PLAN_REQUEST_VERSION, "oom_plan_request")) ||
        (r->line && (err = oomi_check_version(r->line->version, OOM_MEASURED_LINE_VERSION,
                                              "oom_measured_line"))))
        return err;
    memset(&s, 0, sizeof(s));
    s.r = r;
    s.conf = confidence;
    if (!k && (err = oomi_plan_defaults(&k, NULL)))
        return err;
    s.k = k;
    if (!(res = oomi_calloc(1, sizeof(*res))))
        return oomi_nomem();
    res->version = OOM_PLAN_RESULT_VERSION;
    res->tensor_parallel = r->workload ? r->workload->parallel.tp : 1;
    res->best = oomi_calloc(1, sizeof(*res->best));
    res->smallest = oomi_calloc(1, sizeof(*res->smallest));
    if (!res->best || !res->smallest) {
        err = oomi_nomem();
        goto done;
    }
    res->best->version = res->smallest->version = OOM_PLAN_CHOICE_VERSION;
    if ((err = setup(&s, res)) || (err = oomi_search_identity(&s, res)))
        goto done;
    /* the request as given, then each fixed value the request lets the planner lower */
    if ((err = oomi_search_all(&s, 0)))
        goto done;
    s.fixed_smallest = s.smallest;
    if (!s.have_best && (r->downscale & OOM_DOWNSCALE_BATCH) && r->fixed_batch)
        if ((err = oomi_search_all(&s, relax = OOM_DOWNSCALE_BATCH)))
            goto done;
    if (!s.have_best && (r->downscale & ~relax) && (r->fixed_checkpointing || r->fixed_seq))
        if ((err = oomi_search_all(&s, relax = r->downscale)))
            goto done;
    res->candidates = s.candidates;
    if (s.have_best)
        err = oomi_search_found(&s, res);
    else
        err = oomi_search_no_fit(&s, res, relax);
    res->candidates = s.candidates;
    err = oomi_plan_layout(res, r, s.k, err); /* past one node (plan_layout.c) */
    res->stack = r->workload ? (int)r->workload->stack : 0;
    if (r->workload && r->workload->packing.mode != OOMI_PACKING_NONE) {
        res->packing = (int)r->workload->packing.mode;
        if (res->found)
            res->tokens_per_batch = res->best->knobs.batch * res->best->knobs.seq_len;
    }
done:
    oomi_free(s.all);
    oomi_rollout_free(&s.ro);
    if (s.w)
        oomi_zero3_cache_free(s.w->zero3.cache);
    oom_workload_free(s.w);
    if (err && err != OOM_ENOFIT) {
        oom_plan_free(res);
        return err;
    }
    *out = res;
    return err;
}
