/* plan_search.c - the planner's search over the estimator (docs/plan.md): one configuration
 * estimated and judged, the families tried at each sequence length. */
#include "plan/plan_search.h"

static void line_estimate(const oom_measured_line *l, const oom_knobs *k, oom_estimate *e)
{
    double m = l->sample_multiplier > 0 ? l->sample_multiplier : 1.0;
    double var = m * (double)k->batch *
                 ((double)l->bytes_per_sample + (double)l->bytes_per_token * (double)k->seq_len);
    *e = (oom_estimate){.version = OOM_ESTIMATE_VERSION};
    e->weights = l->fixed_bytes;
    e->activations = var >= 9.2e18 ? UINT64_MAX / 2 : (uint64_t)var;
    e->allocated_peak = e->reserved_peak = e->device_peak = e->weights + e->activations;
    e->peak_phase = OOM_PHASE_BACKWARD;
    e->flops_per_step = l->flops_per_sample * m * (double)k->batch * (double)k->grad_accum;
    e->tokens_per_step = (uint64_t)(k->batch * k->seq_len * k->grad_accum);
    e->flops_per_token = k->seq_len > 0 ? l->flops_per_sample * m / (double)k->seq_len : 0;
}

/* The confidence class of a workload candidate at `level` (the workload's tensor parallelism,
 * whether its context size was given, and its stack). */
int oomi_search_conf_class(const search *s, const oom_knobs *k, double level, oomi_conf *out)
{
    return oomi_confidence_class(out, k, s->w->parallel.tp, s->w->runtime.overhead != OOM_UNKNOWN,
                                 s->w->stack, level);
}

/* Whether a candidate fits: its device peak within the usable memory (target - margin), or with
 * fit-confidence its device peak's bound at that confidence within the target. */
static int fits(search *s, oom_plan_choice *c)
{
    oomi_conf cf;
    int err;
    if (!(s->conf > 0) || !s->w) {
        c->fits = c->estimate.device_peak <= s->usable;
        if (s->ro.on) {
            oomi_rollout_split sp;
            int e = oomi_rollout_split_of(&sp, &s->ro, &c->knobs, &c->estimate, s->usable);
            if (e)
                return e;
            c->fits = c->fits && sp.fits;
        }
        return OOM_OK;
    }
    if ((err = oomi_search_conf_class(s, &c->knobs, s->conf, &cf)))
        return err;
    c->fits = oomi_confidence_bound(&cf, c->estimate.device_peak, true) <= s->target;
    return OOM_OK;
}

/* Estimates one configuration. *valid = false when the estimator refuses the combination. */
int oomi_search_eval(search *s, const oom_knobs *k, size_t var, oom_plan_choice *c, bool *valid)
{
    static const oomi_ckvar plain;
    char ck[OOMI_CKPT_TEXT];
    int err;
    *c = (oom_plan_choice){.version = OOM_PLAN_CHOICE_VERSION,
                           .estimate = {.version = OOM_ESTIMATE_VERSION}};
    c->knobs = *k;
    oomi_snprintf(c->checkpointing, sizeof c->checkpointing, "%s",
                  oom_checkpointing_name(k->checkpointing));
    *valid = false;
    if (s->w) {
        oomi_ckvar_apply(s->w, k->checkpointing == OOM_CHECKPOINTING_FULL ? &s->vars[var] : &plain);
        err = oom_workload_set_knobs(s->w, k);
        oomi_snprintf(c->checkpointing, sizeof c->checkpointing, "%s",
                      oomi_checkpointing_text(ck, sizeof ck, s->w));
        if (!err)
            err = oom_estimate_run(&c->estimate, s->w);
        if (err == OOM_EINVAL) {
            oomi_clear_error();
            return OOM_OK;
        }
        if (err)
            return err;
    } else {
        line_estimate(s->r->line, k, &c->estimate);
    }
    *valid = true;
    s->candidates++;
    c->effective_batch = k->batch * k->grad_accum * k->gpus;
    if ((err = fits(s, c)))
        return err;
    oomi_plan_throughput(c, s->r, s->nodes, s->k);
    return OOM_OK;
}

/* how far a choice moved from the user's workload (lower is simpler) */
static long complexity(const search *s, const oom_plan_choice *c)
{
    const oom_knobs *k = &c->knobs;
    return (long)k->checkpointing * 10000 + (long)k->offload * 1000 + (long)k->sharding * 100 +
           (k->loss != s->base.loss) * 30 + (k->optimizer != s->base.optimizer) * 10 +
           (k->attention != s->base.attention) * 3 + (k->precision != s->base.precision);
}

/* a better than b: higher score (beyond 0.1 %), then simpler, then less accumulation */
bool oomi_search_better(const search *s, const oom_plan_choice *a, const oom_plan_choice *b)
{
    double tol = 1e-3 * (a->score > b->score ? a->score : b->score);
    long ca, cb;
    if (a->score > b->score + tol)
        return true;
    if (a->score < b->score - tol)
        return false;
    ca = complexity(s, a), cb = complexity(s, b);
    if (ca != cb)
        return ca < cb;
    if (a->knobs.grad_accum != b->knobs.grad_accum)
        return a->knobs.grad_accum < b->knobs.grad_accum;
    return a->knobs.batch > b->knobs.batch;
}

static int keep(search *s, const oom_plan_choice *c)
{
    if (s->nall == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        oom_plan_choice *p = oomi_reallocarray(s->all, cap, sizeof(*p));
        if (!p)
            return oomi_nomem();
        s->all = p, s->cap = cap;
    }
    s->all[s->nall++] = *c;
    return OOM_OK;
}

/* one family at one seq: micro-batches ascending until the first that does not fit */
static int run_family(search *s, const family *f, long seq, bool *any)
{
    oom_plan_choice c, fit;
    bool have_fit = false, valid;
    size_t i;
    int err;

    for (i = 0; i < s->nmicro; i++) {
        oom_knobs k = s->base;
        k.precision = f->prec, k.optimizer = f->opt, k.checkpointing = f->ck;
        k.sharding = f->shard, k.offload = f->off, k.gpus = s->gpus;
        k.loss = f->loss, k.attention = f->attn;
        k.batch = s->micro[i], k.grad_accum = s->accum[i], k.seq_len = seq;
        if ((err = oomi_search_eval(s, &k, f->var, &c, &valid)))
            return err;
        if (!valid)
            continue;
        if (!s->have_smallest || c.estimate.device_peak < s->smallest.estimate.device_peak)
            s->smallest = c, s->have_smallest = true;
        if (!c.fits) {
            if ((err = keep(s, &c)))
                return err;
            break;
        }
        fit = c, have_fit = true;
    }
    if (!have_fit)
        return OOM_OK;
    *any = true;
    if (!s->have_best || oomi_search_better(s, &fit, &s->best))
        s->best = fit, s->have_best = true;
    return keep(s, &fit);
}

/* relax: OOM_DOWNSCALE_* bits in force */
int oomi_search_all(search *s, unsigned relax)
{
    size_t i, j;
    int err;
    bool any = false;

    s->nall = 0, s->have_best = false;
    oomi_search_families(s, relax & OOM_DOWNSCALE_CHECKPOINTING);
    oomi_search_seqs(s, relax & OOM_DOWNSCALE_SEQ);
    if ((err = oomi_search_micro(s, false)))
        return err;
    for (j = 0; j < s->nseq && !any; j++) {
        for (i = 0; i < s->nfam; i++)
            if ((err = run_family(s, &s->fams[i], s->seqs[j], &any)))
                return err;
        if (!any && s->r->fixed_batch && (relax & OOM_DOWNSCALE_BATCH)) {
            if ((err = oomi_search_micro(s, true)))
                return err;
            for (i = 0; i < s->nfam; i++)
                if ((err = run_family(s, &s->fams[i], s->seqs[j], &any)))
                    return err;
            oomi_search_micro(s, false);
        }
    }
    return OOM_OK;
}
