/* plan_result.c - the result of a search: its lifetime, the plan found with its alternatives and
 * why each is not the plan, the memory-vs-batch curve. */
#include "plan/plan_search.h"

#define ALTERNATIVES 3 /* runners-up reported */

void oom_plan_choice_dispose(oom_plan_choice *c)
{
    if (!c)
        return;
    oomi_free(c->why);
    c->why = NULL;
}

static void choice_free(oom_plan_choice *c)
{
    oom_plan_choice_dispose(c);
    oomi_free(c);
}

void oom_plan_result_dispose(oom_plan_result *r)
{
    size_t i;
    if (!r)
        return;
    choice_free(r->best);
    choice_free(r->smallest);
    r->best = r->smallest = NULL;
    for (i = 0; r->alternatives && i < r->n_alternatives; i++)
        choice_free(r->alternatives[i]);
    oomi_free(r->alternatives);
    r->alternatives = NULL;
    r->n_alternatives = 0;
    oomi_strv_free(&r->suggestions, &r->n_suggestions);
    oomi_strv_free(&r->notices, &r->n_notices);
    oomi_free(r->model);
    oomi_free(r->gpu_id);
    oomi_free(r->gpu_name);
    oomi_free(r->target_reason);
    r->model = r->gpu_id = r->gpu_name = r->target_reason = NULL;
    if (r->version >= 2) {
        oomi_free(r->others);
        r->others = NULL;
    }
    if (r->version >= 8) {
        oomi_free(r->stage_layers);
        r->stage_layers = NULL;
    }
    oomi_free(r->curve_batch);
    oomi_free(r->curve_peak_none);
    oomi_free(r->curve_peak_full);
    r->curve_batch = NULL;
    r->curve_peak_none = r->curve_peak_full = NULL;
    r->n_curve = 0;
}

void oom_plan_free(oom_plan_result *result)
{
    oom_plan_result_dispose(result);
    oomi_free(result);
}

/* a heap copy of an internal choice (whose why is NULL) */
static oom_plan_choice *choice_dup(const oom_plan_choice *c)
{
    oom_plan_choice *p = oomi_malloc(sizeof(*p));
    if (p)
        *p = *c;
    return p;
}

/* same peak and score as the choice or a listed alternative (e.g. selective checkpointing under
 * fused attention, which saves nothing): not worth another line */
static bool duplicate(const oom_plan_result *res, const oom_plan_choice *c)
{
    size_t i;
    for (i = 0; i <= res->n_alternatives; i++) {
        const oom_plan_choice *x = i ? res->alternatives[i - 1] : res->best;
        if (x->estimate.device_peak == c->estimate.device_peak &&
            x->knobs.batch == c->knobs.batch && x->knobs.sharding == c->knobs.sharding &&
            x->knobs.offload == c->knobs.offload && x->knobs.precision == c->knobs.precision &&
            x->knobs.optimizer == c->knobs.optimizer && x->knobs.loss == c->knobs.loss &&
            x->knobs.attention == c->knobs.attention)
            return true;
    }
    return false;
}

/* the 3 alternatives: the best others by score; at most 2 faster ones that do not fit */
static int pick_alternatives(search *s, oom_plan_result *res)
{
    bool used[MAX_FAMILIES * 2 * MAX_SEQS] = {false};
    size_t unfit = 0;

    if (!(res->alternatives = oomi_calloc(ALTERNATIVES, sizeof(*res->alternatives))))
        return oomi_nomem();
    while (res->n_alternatives < ALTERNATIVES) {
        size_t i, pick = SIZE_MAX;
        for (i = 0; i < s->nall && i < OOMI_ARRAY_LEN(used); i++) {
            const oom_plan_choice *c = &s->all[i];
            if (used[i] || duplicate(res, c))
                continue;
            if (!c->fits && (unfit >= 2 || c->score <= res->best->score))
                continue;
            if (pick == SIZE_MAX || oomi_search_better(s, c, &s->all[pick]))
                pick = i;
        }
        if (pick == SIZE_MAX)
            break;
        used[pick] = true;
        unfit += !s->all[pick].fits;
        if (!(res->alternatives[res->n_alternatives] = choice_dup(&s->all[pick])))
            return oomi_nomem();
        res->n_alternatives++;
    }
    return OOM_OK;
}

/* why a candidate that fits alone does not fit beside its colocated engine: the engine's least
 * reservation (every sequence of its generation batch at once) beside the trainer's peak, or,
 * asleep, beside the trainer's resident memory while it generates */
int oomi_search_why_engine(search *s, oom_plan_choice *c)
{
    oomi_rollout_split sp;
    char x[16], y[16], z[16];
    uint64_t engine;
    int err = oomi_rollout_split_of(&sp, &s->ro, &c->knobs, &c->estimate, s->usable);
    if (err)
        return err;
    engine = (uint64_t)((double)s->ro.total * sp.min_utilisation);
    c->why = oomi_asprintf("does not fit beside the engine: %s %s + engine %s (%.2f of the GPU "
                           "for %ld sequences at once) > usable %s",
                           s->ro.sleep ? "trainer while generating" : "device peak",
                           OOMI_SZ(x, s->ro.sleep ? sp.resident : c->estimate.device_peak),
                           OOMI_SZ(y, engine), sp.min_utilisation, sp.seqs, OOMI_SZ(z, s->usable));
    return c->why ? OOM_OK : oomi_nomem();
}

static int describe_loss(search *s, const oom_plan_result *res, oom_plan_choice *c)
{
    const oom_knobs *a = &c->knobs, *b = &res->best->knobs;
    char x[16], y[16];
    oomi_sb what = OOMI_SB_INIT;
    double slower = res->best->score > 0 ? 100.0 * (1.0 - c->score / res->best->score) : 0;
    int err;

    if (!c->fits && s->ro.on && c->estimate.device_peak <= s->usable)
        return oomi_search_why_engine(s, c);
    if (!c->fits) {
        c->why = oomi_asprintf("does not fit: device peak %s > usable %s",
                               OOMI_SZ(x, c->estimate.device_peak), OOMI_SZ(y, s->usable));
        return c->why ? OOM_OK : oomi_nomem();
    }
    if (a->batch < b->batch)
        oomi_sb_printf(&what, "%ssmaller micro-batch", what.len ? ", " : "");
    if (a->checkpointing > b->checkpointing || c->recompute > res->best->recompute + 0.005)
        oomi_sb_printf(&what, "%smore recomputation", what.len ? ", " : "");
    if (a->sharding > b->sharding || a->offload > b->offload)
        oomi_sb_printf(&what, "%smore communication", what.len ? ", " : "");
    if (a->precision != b->precision)
        oomi_sb_printf(&what, "%s%s compute", what.len ? ", " : "",
                       oom_precision_name(a->precision));
    if (a->loss != b->loss)
        oomi_sb_printf(&what, "%s%s loss", what.len ? ", " : "", oom_loss_name(a->loss));
    if (a->attention != b->attention)
        oomi_sb_printf(&what, "%s%s attention", what.len ? ", " : "",
                       oom_attention_name(a->attention));
    if ((err = oomi_sb_ok(&what))) {
        oomi_sb_free(&what);
        return err;
    }
    if (!res->best->has_throughput)
        c->why = oomi_asprintf("smaller micro-batch (%ld < %ld)", a->batch, b->batch);
    else if (slower > 0.1)
        c->why = oomi_asprintf("%.1f%% slower%s%s%s", slower, what.len ? " (" : "",
                               what.len ? what.buf : "", what.len ? ")" : "");
    else
        c->why = oomi_asprintf("as fast, but further from your configuration");
    oomi_sb_free(&what);
    return c->why ? OOM_OK : oomi_nomem();
}

static int fill_curve(search *s, oom_plan_result *res)
{
    static const long pts[] = {1,  2,   3,   4,   6,   8,   12,  16,   24,   32,   48,   64,
                               96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096};
    long top = res->best->knobs.batch * 2;
    size_t i;
    if (top < 16)
        top = 16;
    res->curve_batch = oomi_calloc(OOMI_ARRAY_LEN(pts), sizeof(*res->curve_batch));
    res->curve_peak_none = oomi_calloc(OOMI_ARRAY_LEN(pts), sizeof(*res->curve_peak_none));
    res->curve_peak_full = oomi_calloc(OOMI_ARRAY_LEN(pts), sizeof(*res->curve_peak_full));
    if (!res->curve_batch || !res->curve_peak_none || !res->curve_peak_full)
        return oomi_nomem();
    for (i = 0; i < OOMI_ARRAY_LEN(pts) && pts[i] <= top; i++) {
        oom_plan_choice c;
        oom_knobs k = res->best->knobs;
        bool valid;
        int pass;
        res->curve_batch[res->n_curve] = k.batch = pts[i];
        for (pass = 0; pass < 2; pass++) {
            uint64_t *dst =
                pass ? &res->curve_peak_full[res->n_curve] : &res->curve_peak_none[res->n_curve];
            k.checkpointing = pass ? OOM_CHECKPOINTING_FULL : OOM_CHECKPOINTING_NONE;
            *dst = UINT64_MAX;
            if (pass && (!s->w || k.method == OOM_METHOD_INFERENCE))
                continue;
            if (!oomi_search_eval(s, &k, 0, &c, &valid) && valid)
                *dst = c.estimate.device_peak;
        }
        res->n_curve++;
    }
    oomi_clear_error();
    return OOM_OK;
}

int oomi_search_found(search *s, oom_plan_result *res)
{
    const oom_plan_request *r = s->r;
    size_t i;
    char a[16], b[16];
    int err = OOM_OK;

    res->found = 1;
    *res->best = s->best;
    if ((err = oomi_search_confidence(s, res)) || (err = pick_alternatives(s, res)))
        return err;
    for (i = 0; i < res->n_alternatives; i++)
        if ((err = oomi_ckvar_recompute(res->alternatives[i], s->w)))
            return err;
    if ((err = oomi_ckvar_recompute(res->best, s->w)))
        return err;
    for (i = 0; i < res->n_alternatives; i++)
        if ((err = describe_loss(s, res, res->alternatives[i])))
            return err;
    res->peak_tflops = oomi_plan_tflops(r->gpu, s->best.knobs.precision, s->k);
    res->max_workers = s->best.estimate.device_peak
                           ? (long)(res->gpu_budget.usable_bytes / s->best.estimate.device_peak)
                           : 0;
    if (res->inference && s->best.estimate.kv_cache) {
        const oom_estimate *e = &s->best.estimate;
        res->kv_bytes_per_token =
            (double)e->kv_cache / ((double)s->best.knobs.batch * (double)s->best.knobs.seq_len);
        res->kv_budget_bytes = s->usable - (e->device_peak - e->kv_cache);
        if (s->w) {
            oomi_kv_layout kv;
            oomi_kv_layout_of(&kv, s->w);
            res->kv_full_layers = kv.full, res->kv_sliding_layers = kv.sliding;
            res->kv_window = kv.window, res->kv_elements = (long)kv.elems;
            res->kv_latent = kv.latent, res->kv_vllm = kv.vllm;
        }
        if (s->w && (err = oomi_search_serve_profile(s, res)))
            return err;
    }
    if (!res->inference && s->best.effective_batch != s->eff)
        err = oomi_plan_note(res, "effective batch %ld instead of %ld (%+.1f%%, --allow-inexact)",
                             s->best.effective_batch, s->eff,
                             100.0 * (double)(s->best.effective_batch - s->eff) / (double)s->eff);
    err = err ? err : oomi_search_awkward(s, res);
    err = err ? err : oomi_search_objective_note(s, res);
    err = err ? err : oomi_search_rollout_note(s, res);
    err = err ? err : oomi_search_nccl_note(s, res);
    if (r->seq_max > 0)
        err = err ? err
                  : oomi_plan_note(
                        res, "sequence length %ld chosen from %ld:%ld (the longest that fits)",
                        s->best.knobs.seq_len, r->seq_min, r->seq_max);
    if (r->fixed_batch && s->best.knobs.batch < r->fixed_batch && res->inference) {
        res->downscaled |= OOM_DOWNSCALE_BATCH;
        err = err ? err
                  : oomi_plan_note(
                        res,
                        "DOWNSCALED: batch size %ld does not fit (device peak %s > usable %s); "
                        "lowered to %ld",
                        r->fixed_batch, OOMI_SZ(a, s->fixed_smallest.estimate.device_peak),
                        OOMI_SZ(b, s->usable), s->best.knobs.batch);
    } else if (r->fixed_batch && s->best.knobs.batch < r->fixed_batch) {
        char *hint = NULL;
        res->downscaled |= OOM_DOWNSCALE_BATCH;
        err = err ? err : oomi_search_batch_hint(s, &hint);
        if (!err && hint)
            err = oomi_plan_note(res, "%s, without lowering it", hint);
        oomi_free(hint);
        if (!err && s->ro.on && s->fixed_smallest.estimate.device_peak <= s->usable) {
            /* it fits alone: the engine beside it is why */
            oom_plan_choice c = s->fixed_smallest;
            c.why = NULL;
            err = oomi_search_why_engine(s, &c);
            err = err ? err
                      : oomi_plan_note(res,
                                       "DOWNSCALED: batch size %ld %s; lowered to %ld x "
                                       "grad-accum %ld (effective batch %ld)",
                                       r->fixed_batch, c.why, s->best.knobs.batch,
                                       s->best.knobs.grad_accum, s->best.effective_batch);
            oomi_free(c.why);
        } else {
            err = err ? err
                      : oomi_plan_note(res,
                                       "DOWNSCALED: batch size %ld does not fit (smallest device "
                                       "peak %s > usable "
                                       "%s); lowered to %ld x grad-accum %ld (effective batch %ld)",
                                       r->fixed_batch,
                                       OOMI_SZ(a, s->fixed_smallest.estimate.device_peak),
                                       OOMI_SZ(b, s->usable), s->best.knobs.batch,
                                       s->best.knobs.grad_accum, s->best.effective_batch);
        }
    }
    if (r->fixed_seq && s->best.knobs.seq_len < r->fixed_seq) {
        res->downscaled |= OOM_DOWNSCALE_SEQ;
        err = err ? err
                  : oomi_plan_note(res,
                                   "DOWNSCALED: sequence length %ld does not fit; lowered to %ld",
                                   r->fixed_seq, s->best.knobs.seq_len);
    }
    if (r->fixed_checkpointing && s->best.knobs.checkpointing > s->base.checkpointing) {
        res->downscaled |= OOM_DOWNSCALE_CHECKPOINTING;
        err = err ? err
                  : oomi_plan_note(res, "DOWNSCALED: checkpointing %s does not fit; raised to %s",
                                   oom_checkpointing_name(s->base.checkpointing),
                                   oom_checkpointing_name(s->best.knobs.checkpointing));
    }
    return err ? err : fill_curve(s, res);
}

int oomi_search_identity(const search *s, oom_plan_result *res)
{
    const oom_plan_request *r = s->r;
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    res->model = oomi_strdup(s->w && !oom_workload_model(&mi, s->w) ? mi.name : "measured line");
    res->gpu_id = oomi_strdup(r->gpu && r->gpu->id ? r->gpu->id : "");
    res->gpu_name = oomi_strdup(r->gpu && r->gpu->name ? r->gpu->name : "");
    oomi_clear_error();
    return res->model && res->gpu_id && res->gpu_name ? OOM_OK : oomi_nomem();
}
