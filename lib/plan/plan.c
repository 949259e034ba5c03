/* plan.c - the planner's search over the estimator (docs/plan.md). */
#include "plan/plan.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_FAMILIES        1024
#define MAX_MICRO           4096
#define MAX_SEQS            24
#define INFERENCE_MAX_BATCH 4096
#define MAX_MICRO_BATCH     65536 /* no micro-batch above this is considered */
#define ALTERNATIVES        3     /* runners-up reported */

/* the knobs other than micro-batch, accumulation and seq: one "family" of configurations */
typedef struct family {
    oom_precision prec;
    oom_optimizer opt;
    oom_checkpointing ck;
    oom_sharding shard;
    oom_offload off;
    oom_loss loss;
    oom_attention attn;
    size_t var; /* under full checkpointing: which variant (search.vars) */
} family;

typedef struct search {
    const oom_plan_request *r;
    const struct oomi_plan_consts *k; /* the throughput model's constants */
    oom_workload *w;                  /* scratch clone; NULL for a measured line */
    oom_knobs base;
    long gpus, nodes, eff;
    uint64_t usable;
    double conf;     /* fit-confidence: a candidate fits when its bound at conf is within target */
    uint64_t target; /* per job */
    family fams[MAX_FAMILIES];
    size_t nfam;
    long micro[MAX_MICRO], accum[MAX_MICRO];
    size_t nmicro;
    long seqs[MAX_SEQS];
    size_t nseq;
    oom_plan_choice *all; /* per family: its best fit and the next larger micro-batch */
    size_t nall, cap;
    oom_plan_choice best, smallest, fixed_smallest; /* fixed_: before any downscaling */
    bool have_best, have_smallest;
    long candidates;
    oomi_rollout_engine ro;          /* GRPO's colocated vLLM engine (ro.on) */
    oomi_ckvar vars[OOMI_CKVAR_MAX]; /* variants of full checkpointing tried (plan_ckpt.c) */
    size_t nvar, own;                /* own: the workload's (0: plain full) */
} search;

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

/* The confidence class of a workload candidate at `level` (the workload's tensor parallelism and
 * whether its context size was given). */
static int conf_class(const search *s, const oom_knobs *k, double level, oomi_conf *out)
{
    return oomi_confidence_class(out, k, s->w->tp, s->w->overhead != OOM_UNKNOWN, level);
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
    if ((err = conf_class(s, &c->knobs, s->conf, &cf)))
        return err;
    c->fits = oomi_confidence_bound(&cf, c->estimate.device_peak, true) <= s->target;
    return OOM_OK;
}

/* Estimates one configuration. *valid = false when the estimator refuses the combination. */
static int evaluate(search *s, const oom_knobs *k, size_t var, oom_plan_choice *c, bool *valid)
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
static bool better(const search *s, const oom_plan_choice *a, const oom_plan_choice *b)
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

#define ADD_UNIQUE(arr, n, v)                                                                      \
    do {                                                                                           \
        size_t i_;                                                                                 \
        for (i_ = 0; i_ < (n) && (arr)[i_] != (v); i_++)                                           \
            ;                                                                                      \
        if (i_ == (n))                                                                             \
            (arr)[(n)++] = (v);                                                                    \
    } while (0)

static bool no_bf16(const oom_plan_request *r)
{
    return oomi_gpu_lacks_bf16(r->gpu);
}

static size_t precisions(const search *s, oom_precision *out)
{
    const oom_knobs *b = &s->base;
    oom_precision p16 = no_bf16(s->r) ? OOM_PRECISION_FP16 : OOM_PRECISION_BF16;
    oom_precision amp = no_bf16(s->r) ? OOM_PRECISION_AMP_FP16 : OOM_PRECISION_AMP_BF16;
    size_t n = 0;
    out[n++] = b->precision;
    if (!(s->r->allow & OOM_ALLOW_PRECISION) || !s->w)
        return n;
    if (b->method == OOM_METHOD_FULL) {
        ADD_UNIQUE(out, n, amp);
        ADD_UNIQUE(out, n, p16);
    } else if (b->method == OOM_METHOD_LORA) {
        ADD_UNIQUE(out, n, p16);
    } else if (b->method == OOM_METHOD_INFERENCE) {
        ADD_UNIQUE(out, n, p16);
        ADD_UNIQUE(out, n, OOM_PRECISION_INT8);
        ADD_UNIQUE(out, n, OOM_PRECISION_4BIT);
    }
    return n;
}

/* (sharding, offload) pairs */
static size_t layouts(const search *s, oom_sharding *sh, oom_offload *off)
{
    const oom_knobs *b = &s->base;
    size_t n = 0, i;
    sh[n] = b->sharding, off[n++] = b->offload;
    if (!s->w || b->method == OOM_METHOD_INFERENCE)
        return n;
    if (s->gpus > 1 && (s->r->allow & OOM_ALLOW_SHARDING))
        for (i = 0; i < 4; i++)
            if (!(i == b->sharding && b->offload == OOM_OFFLOAD_NONE))
                sh[n] = (oom_sharding)i, off[n++] = OOM_OFFLOAD_NONE;
    if (s->r->allow & OOM_ALLOW_OFFLOAD) {
        static const oom_sharding osh[] = {OOM_SHARDING_ZERO2, OOM_SHARDING_ZERO3,
                                           OOM_SHARDING_ZERO3};
        static const oom_offload oof[] = {OOM_OFFLOAD_OPTIMIZER, OOM_OFFLOAD_OPTIMIZER,
                                          OOM_OFFLOAD_OPTIMIZER_PARAMS};
        for (i = 0; i < 3; i++)
            if (!(osh[i] == b->sharding && oof[i] == b->offload))
                sh[n] = osh[i], off[n++] = oof[i];
    }
    return n;
}

/* the loss functions to try: the workload's, and a chunked one where allowed (training) */
static size_t losses(const search *s, oom_loss *out)
{
    size_t n = 0;
    out[n++] = s->base.loss;
    if (s->w && (s->r->allow & OOM_ALLOW_LOSS) && s->base.method != OOM_METHOD_INFERENCE &&
        s->base.loss != OOM_LOSS_CHUNKED)
        out[n++] = OOM_LOSS_CHUNKED;
    return n;
}

/* the attention kernels to try: the workload's, and those that keep less where allowed (eager
 * materialises the scores; SDPA may fall back to its math path; FlashAttention-2 never keeps
 * them) */
static size_t attentions(const search *s, oom_attention *out)
{
    size_t n = 0;
    int a;
    out[n++] = s->base.attention;
    if (s->w && (s->r->allow & OOM_ALLOW_ATTENTION))
        for (a = (int)s->base.attention + 1; a <= OOM_ATTENTION_FLASH; a++)
            out[n++] = (oom_attention)a;
    return n;
}

static void build_families(search *s, bool relax_ck)
{
    oom_precision prec[4];
    oom_optimizer opt[2];
    oom_checkpointing ck[3];
    oom_sharding sh[8];
    oom_offload off[8];
    oom_loss loss[2];
    oom_attention attn[3];
    size_t np = precisions(s, prec), no = 0, nc = 0, nl = layouts(s, sh, off), a, b, c, d, e, f, v;
    bool searched = false;
    size_t nlo = losses(s, loss), nat = attentions(s, attn);
    const oom_knobs *k = &s->base;

    opt[no++] = k->optimizer;
    if ((s->r->allow & OOM_ALLOW_OPTIMIZER) && k->method != OOM_METHOD_INFERENCE &&
        (k->optimizer == OOM_OPTIMIZER_ADAMW || k->optimizer == OOM_OPTIMIZER_ADAMW_FUSED))
        opt[no++] = OOM_OPTIMIZER_ADAMW_8BIT;
    if (!s->w || k->method == OOM_METHOD_INFERENCE)
        ck[nc++] = k->checkpointing;
    else if (s->r->fixed_checkpointing && !relax_ck)
        ck[nc++] = k->checkpointing;
    else if (s->r->fixed_checkpointing || (s->r->allow & OOM_ALLOW_CHECKPOINTING)) {
        for (a = s->r->fixed_checkpointing ? (size_t)k->checkpointing : 0; a < 3; a++)
            ck[nc++] = (oom_checkpointing)a;
        searched = !s->r->fixed_checkpointing;
    } else
        ck[nc++] = k->checkpointing;
    s->nfam = 0;
    for (a = 0; a < nc; a++)
        for (v = 0; v < s->nvar; v++) {
            /* full: the workload's own variant where checkpointing is given, else plain full
             * and, where checkpointing is searched, the variants --checkpointing-variants names */
            bool full = ck[a] == OOM_CHECKPOINTING_FULL;
            if (!full && v)
                break;
            if (v != (s->r->fixed_checkpointing ? s->own : 0) && !(full && searched))
                continue;
            for (b = 0; b < nl; b++)
                for (c = 0; c < no; c++)
                    for (d = 0; d < np; d++)
                        for (e = 0; e < nlo; e++)
                            for (f = 0; f < nat && s->nfam < MAX_FAMILIES; f++)
                                s->fams[s->nfam++] = (family){prec[d], opt[c],  ck[a],   sh[b],
                                                              off[b],  loss[e], attn[f], v};
        }
}

static void add_micro(search *s, long m, long acc)
{
    const oom_plan_request *r = s->r;
    if (s->nmicro >= MAX_MICRO || (r->max_batch > 0 && m > r->max_batch))
        return;
    if (!r->fixed_batch && r->max_auto_batch > 0 && m > r->max_auto_batch)
        return;
    s->micro[s->nmicro] = m, s->accum[s->nmicro++] = acc;
}

/* micro-batches in ascending order with their accumulation; below: those under the fixed batch */
static int build_micro(search *s, bool below)
{
    const oom_plan_request *r = s->r;
    long fb = r->fixed_batch, fa = r->fixed_grad_accum, per, m;
    bool inference = s->base.method == OOM_METHOD_INFERENCE;

    s->nmicro = 0;
    if (inference) {
        long cap = r->max_batch > 0 ? r->max_batch : INFERENCE_MAX_BATCH;
        if (!fb && r->max_auto_batch > 0 && r->max_auto_batch < cap)
            cap = r->max_auto_batch;
        if (fb && !below && (r->max_batch <= 0 || fb <= r->max_batch))
            add_micro(s, fb, 1);
        for (m = 1; !(fb && !below) && m <= cap && m <= INFERENCE_MAX_BATCH; m++)
            if (!fb || m < fb)
                add_micro(s, m, 1);
        goto check;
    }
    per = (s->eff + s->gpus - 1) / s->gpus; /* exact unless allow_inexact (checked in setup) */
    for (m = 1; m <= per && m <= MAX_MICRO_BATCH && s->nmicro < MAX_MICRO; m++) {
        long acc;
        if (fb && (below ? m >= fb : m != fb))
            continue;
        if (fa) {
            /* inexact: the micro-batches either side of per / fa */
            bool exact = m * fa == per, up = m * fa > per && (m - 1) * fa < per,
                 down = m * fa < per && (m + 1) * fa > per;
            if (!exact && !(r->allow_inexact && (up || down)) && !(below && m * fa < per))
                continue;
            acc = fa;
        } else if (per % m == 0) {
            acc = per / m;
        } else if (r->allow_inexact) {
            /* the accumulation whose effective batch is nearest per, rounding down or up (a tie
             * goes up: at least the samples asked for) */
            long lo = per / m, hi = lo + 1;
            acc = lo >= 1 && per - lo * m < hi * m - per ? lo : hi;
        } else {
            continue;
        }
        add_micro(s, m, acc);
    }
check:
    if (!fb && fa && !below && !s->nmicro)
        return oomi_fail(OOM_EINVAL,
                         "target effective batch %ld is no micro-batch x grad-accum %ld x %ld "
                         "GPUs; change --target-effective-batch or use --allow-inexact",
                         s->eff, fa, s->gpus);
    if (fb && !below && !s->nmicro) {
        if (r->max_batch > 0 && fb > r->max_batch)
            return oomi_fail(OOM_EINVAL, "batch size %ld is above --max-batch-size %ld", fb,
                             r->max_batch);
        return oomi_fail(OOM_EINVAL,
                         "target effective batch %ld is not batch size %ld x grad-accum %ld x %ld "
                         "GPUs; change --target-effective-batch or use --allow-inexact",
                         s->eff, fb, fa ? fa : s->eff / s->gpus / fb, s->gpus);
    }
    return OOM_OK;
}

/* sequence lengths to try, longest first */
static void build_seqs(search *s, bool relax_seq)
{
    const oom_plan_request *r = s->r;
    long v;
    s->nseq = 0;
    if (r->seq_max > 0) {
        long lo = r->seq_min > 0 ? r->seq_min : 1;
        s->seqs[s->nseq++] = r->seq_max;
        for (v = 1; v < r->seq_max; v *= 2)
            ;
        for (v /= 2; v > lo && s->nseq < MAX_SEQS - 1; v /= 2)
            if (v < r->seq_max)
                s->seqs[s->nseq++] = v;
        if (lo < r->seq_max)
            s->seqs[s->nseq++] = lo;
        return;
    }
    s->seqs[s->nseq++] = s->base.seq_len;
    if (relax_seq)
        for (v = s->base.seq_len / 2; v >= 16 && s->nseq < MAX_SEQS; v /= 2)
            s->seqs[s->nseq++] = v;
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
        if ((err = evaluate(s, &k, f->var, &c, &valid)))
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
    if (!s->have_best || better(s, &fit, &s->best))
        s->best = fit, s->have_best = true;
    return keep(s, &fit);
}

/* relax: OOM_DOWNSCALE_* bits in force */
static int search_all(search *s, unsigned relax)
{
    size_t i, j;
    int err;
    bool any = false;

    s->nall = 0, s->have_best = false;
    build_families(s, relax & OOM_DOWNSCALE_CHECKPOINTING);
    build_seqs(s, relax & OOM_DOWNSCALE_SEQ);
    if ((err = build_micro(s, false)))
        return err;
    for (j = 0; j < s->nseq && !any; j++) {
        for (i = 0; i < s->nfam; i++)
            if ((err = run_family(s, &s->fams[i], s->seqs[j], &any)))
                return err;
        if (!any && s->r->fixed_batch && (relax & OOM_DOWNSCALE_BATCH)) {
            if ((err = build_micro(s, true)))
                return err;
            for (i = 0; i < s->nfam; i++)
                if ((err = run_family(s, &s->fams[i], s->seqs[j], &any)))
                    return err;
            build_micro(s, false);
        }
    }
    return OOM_OK;
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
            if (pick == SIZE_MAX || better(s, c, &s->all[pick]))
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
static int describe_rollout(search *s, oom_plan_choice *c)
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
        return describe_rollout(s, c);
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
            if (!evaluate(s, &k, 0, &c, &valid) && valid)
                *dst = c.estimate.device_peak;
        }
        res->n_curve++;
    }
    oomi_clear_error();
    return OOM_OK;
}

/* The single changes the request does not allow that would make the fixed batch fit as given
 * (the workload's other knobs, its seq, full checkpointing where allowed): "batch size 8 fits with
 * --allow loss (chunked loss) or
 * --checkpointing full". *out is NULL when none does (or there is no fixed batch). */
static int fixed_batch_hint(search *s, char **out)
{
    const oom_plan_request *r = s->r;
    oomi_sb sb = OOMI_SB_INIT;
    oom_knobs k0 = s->base, k;
    oom_plan_choice c;
    long per = (s->eff + s->gpus - 1) / s->gpus;
    bool valid;
    int i, err = OOM_OK;

    *out = NULL;
    if (!r->fixed_batch || !s->w || k0.method == OOM_METHOD_INFERENCE)
        return OOM_OK;
    k0.batch = r->fixed_batch, k0.gpus = s->gpus;
    k0.grad_accum = r->fixed_grad_accum ? r->fixed_grad_accum
                                        : (per >= r->fixed_batch ? per / r->fixed_batch : 1);
    for (i = 0; i < 4 && !err; i++) {
        const char *flag;
        k = k0;
        if (i == 0 && k0.loss != OOM_LOSS_CHUNKED && !(r->allow & OOM_ALLOW_LOSS))
            k.loss = OOM_LOSS_CHUNKED, flag = "--allow loss (chunked loss)";
        else if (i == 1 && k0.attention != OOM_ATTENTION_FLASH && !(r->allow & OOM_ALLOW_ATTENTION))
            k.attention = OOM_ATTENTION_FLASH, flag = "--allow attention (flash attention)";
        else if (i == 2 && k0.checkpointing != OOM_CHECKPOINTING_FULL &&
                 (r->fixed_checkpointing || !(r->allow & OOM_ALLOW_CHECKPOINTING)))
            k.checkpointing = OOM_CHECKPOINTING_FULL,
            flag = r->fixed_checkpointing ? "--checkpointing full"
                                          : "--allow checkpointing (full checkpointing)";
        else if (i == 3 && !(r->allow & OOM_ALLOW_OPTIMIZER) &&
                 (k0.optimizer == OOM_OPTIMIZER_ADAMW || k0.optimizer == OOM_OPTIMIZER_ADAMW_FUSED))
            k.optimizer = OOM_OPTIMIZER_ADAMW_8BIT, flag = "--allow optimizer (8-bit AdamW)";
        else
            continue;
        if ((err = evaluate(s, &k, k.checkpointing == k0.checkpointing ? s->own : 0, &c, &valid)))
            continue;
        if ((!valid || !c.fits) && (r->allow & OOM_ALLOW_CHECKPOINTING) &&
            !r->fixed_checkpointing && k.checkpointing != OOM_CHECKPOINTING_FULL) {
            k.checkpointing = OOM_CHECKPOINTING_FULL; /* with what is allowed already */
            if ((err = evaluate(s, &k, 0, &c, &valid)))
                continue;
        }
        if (!valid || !c.fits)
            continue;
        oomi_sb_printf(&sb, "%s%s", sb.len ? " or " : "", flag);
    }
    oomi_clear_error();
    if (!err && sb.len)
        *out = oomi_asprintf("batch size %ld fits with %s", r->fixed_batch, sb.buf);
    if (!err && sb.len && !*out)
        err = oomi_nomem();
    err = err ? err : oomi_sb_ok(&sb);
    oomi_sb_free(&sb);
    return err;
}

/* family f's knobs on c's (seq, GPUs) */
static oom_knobs family_knobs(const family *f, const oom_plan_choice *c)
{
    oom_knobs k = c->knobs;
    k.precision = f->prec, k.optimizer = f->opt, k.checkpointing = f->ck;
    k.sharding = f->shard, k.offload = f->off, k.loss = f->loss, k.attention = f->attn;
    return k;
}

/* the largest micro-batch up to `cap` that fits with knobs k (0: none) */
static long largest_fit(search *s, oom_knobs k, size_t var, long cap)
{
    oom_plan_choice x;
    long m;
    bool valid;
    for (m = 1; m <= cap && m <= MAX_MICRO_BATCH; m++) {
        k.batch = m;
        if (evaluate(s, &k, var, &x, &valid) || !valid || !x.fits)
            break;
    }
    oomi_clear_error();
    return m - 1;
}

/* the largest divisor of n that is at most cap */
static long divisor_under(long n, long cap)
{
    long d;
    for (d = cap < n ? cap : n; d > 1 && n % d; d--)
        ;
    return d;
}

/* the fastest choice for `per` samples per GPU whose micro-batch divides it, above `above`, in
 * any family (fits: each family's largest micro-batch that fits); 0 when none beats `score` */
static long faster_divisor(search *s, const oom_plan_choice *b, const long *fits, long per,
                           double score, long above)
{
    long pick = 0;
    size_t i;
    for (i = 0; i < s->nfam; i++) {
        oom_knobs k = family_knobs(&s->fams[i], b);
        oom_plan_choice x;
        bool valid;
        if (fits[i] <= above)
            continue;
        k.batch = divisor_under(per, fits[i]), k.grad_accum = per / k.batch;
        if (k.batch <= above || evaluate(s, &k, s->fams[i].var, &x, &valid) || !valid || !x.fits)
            continue;
        if (x.score > score * 1.001)
            score = x.score, pick = k.batch;
    }
    oomi_clear_error();
    return pick;
}

/* An awkward target (a prime such as 97) leaves only small micro-batches that divide it: the
 * nearest effective batches (multiples of the GPUs, within a quarter) whose divisors allow a
 * faster plan with a larger micro-batch, as "96 = 12 x 8". Nothing when no such plan is faster,
 * or the effective batch is not the target's (inexact). */
static int awkward_hint(search *s, oom_plan_result *res)
{
    const oom_plan_request *r = s->r;
    const oom_plan_choice *b = &s->best;
    long per = s->eff / s->gpus, d, e, near[3], micro[3], fits[MAX_FAMILIES];
    size_t n = 0, i;
    oomi_sb sb = OOMI_SB_INIT;
    int err;

    if (res->inference || r->fixed_batch || r->fixed_grad_accum || b->effective_batch != s->eff ||
        s->eff % s->gpus || b->knobs.batch >= per || !b->has_throughput)
        return OOM_OK;
    for (i = 0; i < s->nfam; i++)
        fits[i] = largest_fit(s, family_knobs(&s->fams[i], b), s->fams[i].var, per + per / 4 + 1);
    for (d = 1; n < 3 && d <= per / 4 + 1; d++)
        for (e = per - d; n < 3 && e <= per + d; e += 2 * d) {
            long m = e >= 1 ? faster_divisor(s, b, fits, e, b->score, b->knobs.batch) : 0;
            if (m)
                near[n] = e * s->gpus, micro[n++] = m;
        }
    if (!n)
        return OOM_OK;
    for (i = 0; i < n; i++)
        oomi_sb_printf(&sb, "%s%ld = %ld x %ld%s", i ? ", " : "", near[i], micro[i],
                       near[i] / s->gpus / micro[i], s->gpus > 1 ? " x GPUs" : "");
    if (!(err = oomi_sb_ok(&sb)))
        err = oomi_plan_note(res,
                             "effective batch %ld allows only micro-batches that divide it (here "
                             "%ld); nearest with larger, faster micro-batches: %s "
                             "(--target-effective-batch N, or --allow-inexact)",
                             s->eff, b->knobs.batch, sb.buf);
    oomi_sb_free(&sb);
    return err;
}

/* The profile run of an inference plan: the tokens and sequences are the workload's
 * max-num-batched-tokens and max-num-seqs, else the plan's sequence (or batch if larger) and
 * batch. */
static int serve_profile(const search *s, oom_plan_result *res)
{
    oom_knobs k = s->best.knobs;
    long seqs = s->w->serve_seqs ? s->w->serve_seqs : k.batch;
    long tokens = s->w->serve_tokens    ? s->w->serve_tokens
                  : k.seq_len > k.batch ? k.seq_len
                                        : k.batch;
    double out, sampler, fwd;
    int err;

    if ((err = oomi_serve_forward(s->w, k, tokens, &fwd, &out)))
        return err;
    sampler = oomi_serve_sampler(s->w->model, seqs < tokens ? seqs : tokens);
    res->serve_batched_tokens = tokens;
    res->serve_max_num_seqs = seqs;
    res->serve_rope_bytes = oomi_serve_rope(s->w->model, k.precision);
    res->serve_profile_bytes = (uint64_t)llround(fwd > out + sampler ? fwd : out + sampler);
    return OOM_OK;
}

/* NCCL's part of the best plan's overhead (docs/estimate.md, "Memory outside PyTorch"), when
 * more than one GPU talks: its buffers, and which of NCCL's settings are defaults */
static int nccl_note(search *s, oom_plan_result *res)
{
    oom_workload *w = NULL;
    oomi_overhead o;
    char a[16], b[16], c[16];
    int err;
    if (!s->w || !res->found)
        return OOM_OK;
    if ((err = oom_workload_clone(&w, s->w)) || (err = oom_workload_set_knobs(w, &s->best.knobs)) ||
        (err = oomi_overhead_of(&o, w)) || o.ranks < 2) {
        oom_workload_free(w);
        return err;
    }
    err = oomi_plan_note(
        res,
        "overhead: CUDA context %s + NCCL buffers %s (%ld GPUs, %ld "
        "communicator%s, %ld channels x %s, NVLS %s)%s%s",
        OOMI_SZ(a, (uint64_t)o.part[0].bytes), OOMI_SZ(b, (uint64_t)o.part[1].bytes), o.ranks,
        o.comms, o.comms > 1 ? "s" : "", o.channels, OOMI_SZ(c, (uint64_t)o.buffsize),
        o.nvls ? "on" : "off", o.part[1].change ? "; NCCL's defaults assumed, set " : "",
        o.part[1].change ? o.part[1].change : "");
    oom_workload_free(w);
    return err;
}

/* With fit-confidence, the budget of the class of knobs k: a device peak fits when its bound,
 * peak x (1 + under) + context, is within the target, so usable = (target - context) / (1 +
 * under) and the margin is the rest of the target. */
static int conf_budget(search *s, oom_plan_result *res, const oom_knobs *k)
{
    oomi_conf cf;
    double u;
    int err;
    if (!(s->conf > 0) || !s->w)
        return OOM_OK;
    if ((err = conf_class(s, k, s->conf, &cf)))
        return err;
    u = floor(((double)s->target - cf.ctx) / (1 + cf.under));
    s->usable = u > 0 ? (uint64_t)u : 0;
    res->budget.usable_bytes = s->usable;
    res->budget.safety_margin_bytes = s->target - s->usable;
    return OOM_OK;
}

/* How sure the chosen plan is (plan.h: oom_plan_result version 3) */
static int fill_confidence(search *s, oom_plan_result *res)
{
    const oom_estimate *e = &s->best.estimate;
    oomi_conf cf;
    uint64_t target = res->budget.target_bytes;
    int err;
    if (!s->w)
        return OOM_OK;
    if ((err = conf_budget(s, res, &s->best.knobs)) ||
        (err = conf_class(s, &s->best.knobs, s->conf > 0 ? s->conf : 0.95, &cf)))
        return err;
    if (s->ro.on) {
        /* the trainer trains beside what the engine holds then (a fixed reservation) */
        oomi_rollout_split sp;
        if ((err = oomi_rollout_split_of(&sp, &s->ro, &s->best.knobs, e, s->usable)))
            return err;
        target -= sp.training_peak - e->device_peak;
    }
    res->device_peak_bound = oomi_confidence_bound(&cf, e->device_peak, true);
    res->fit_probability =
        oomi_confidence_probability(&cf, e->device_peak, target, &res->fit_probability_side);
    res->has_fit_probability = 1;
    if (cf.basis == OOMI_CONF_NONE)
        return oomi_plan_note(res,
                              "no measurement of this kind of workload (%s): its bound takes the "
                              "error of the widest class measured (%s)",
                              cf.key, cf.used);
    return OOM_OK;
}

/* What the batch counts under a TRL objective: per_device_train_batch_size is pairs for DPO,
 * IPO, SimPO, ORPO and reward modelling (each concatenated as chosen + rejected), examples for
 * KTO, completions for GRPO (generated per_device_train_batch_size x steps_per_generation at once,
 * num_generations per prompt: GRPOConfig) */
static int objective_note(search *s, oom_plan_result *res)
{
    const oom_workload *w = s->w;
    const oom_plan_choice *c = &s->best;
    const char *name;
    if (!w || w->objective == OOMI_OBJECTIVE_SFT)
        return OOM_OK;
    name = OOMI_VALUE_NAME(oomi_objective_values, w->objective);
    if (w->objective == OOMI_OBJECTIVE_GRPO)
        return oomi_plan_note(res,
                              "objective grpo: the effective batch %ld counts completions, %ld "
                              "prompts of %ld; each GPU generates batch x grad-accum = %ld "
                              "completions at once",
                              c->effective_batch, c->effective_batch / w->num_generations,
                              w->num_generations, c->knobs.batch * c->knobs.grad_accum);
    if (oomi_objective_sequences(w->objective) > 1)
        return oomi_plan_note(res,
                              "objective %s: the effective batch %ld counts %s, as TRL's "
                              "per_device_train_batch_size does (micro-batch %ld %s = %ld "
                              "sequences per forward)",
                              name, c->effective_batch, oomi_objective_unit(w->objective),
                              c->knobs.batch, oomi_objective_unit(w->objective),
                              c->knobs.batch * oomi_objective_sequences(w->objective));
    return oomi_plan_note(res, "objective %s: the effective batch %ld counts %s", name,
                          c->effective_batch, oomi_objective_unit(w->objective));
}

/* the split of the GPU between the trainer and its colocated engine, into res and a notice */
static int rollout_note(search *s, oom_plan_result *res)
{
    oomi_rollout_split sp;
    char a[16], b[16], c[16];
    int err;
    if (!s->ro.on)
        return OOM_OK;
    if ((err = oomi_rollout_split_of(&sp, &s->ro, &s->best.knobs, &s->best.estimate, s->usable)))
        return err;
    oomi_rollout_fill(res, &s->ro, &sp);
    res->max_workers = 1; /* the trainer and its engine: one job per GPU */
    return oomi_plan_note(res,
                          "rollout vllm-colocate, sleep mode %d: gpu_memory_utilization %.2f "
                          "(at least %.2f), KV cache %s = %ld tokens = %ld sequences of %ld at "
                          "once for a generation batch of %ld; peak training %s, generating %s",
                          s->ro.sleep, sp.utilisation, sp.min_utilisation, OOMI_SZ(a, sp.kv),
                          sp.kv_tokens, sp.kv_tokens / s->best.knobs.seq_len, s->best.knobs.seq_len,
                          sp.seqs, OOMI_SZ(b, sp.training_peak), OOMI_SZ(c, sp.rollout_peak));
}

static int fill_result(search *s, oom_plan_result *res)
{
    const oom_plan_request *r = s->r;
    size_t i;
    char a[16], b[16];
    int err = OOM_OK;

    res->found = 1;
    *res->best = s->best;
    if ((err = fill_confidence(s, res)) || (err = pick_alternatives(s, res)))
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
        if (s->w && (err = serve_profile(s, res)))
            return err;
    }
    if (!res->inference && s->best.effective_batch != s->eff)
        err = oomi_plan_note(res, "effective batch %ld instead of %ld (%+.1f%%, --allow-inexact)",
                             s->best.effective_batch, s->eff,
                             100.0 * (double)(s->best.effective_batch - s->eff) / (double)s->eff);
    err = err ? err : awkward_hint(s, res);
    err = err ? err : objective_note(s, res);
    err = err ? err : rollout_note(s, res);
    err = err ? err : nccl_note(s, res);
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
        err = err ? err : fixed_batch_hint(s, &hint);
        if (!err && hint)
            err = oomi_plan_note(res, "%s, without lowering it", hint);
        oomi_free(hint);
        if (!err && s->ro.on && s->fixed_smallest.estimate.device_peak <= s->usable) {
            /* it fits alone: the engine beside it is why */
            oom_plan_choice c = s->fixed_smallest;
            c.why = NULL;
            err = describe_rollout(s, &c);
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
    if (no_bf16(r) &&
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
                : 32;
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

static int fill_identity(const search *s, oom_plan_result *res)
{
    const oom_plan_request *r = s->r;
    oom_model_info mi = OOM_MODEL_INFO_INIT;
    res->model = oomi_strdup(s->w && !oom_workload_model(&mi, s->w) ? mi.name : "measured line");
    res->gpu_id = oomi_strdup(r->gpu && r->gpu->id ? r->gpu->id : "");
    res->gpu_name = oomi_strdup(r->gpu && r->gpu->name ? r->gpu->name : "");
    oomi_clear_error();
    return res->model && res->gpu_id && res->gpu_name ? OOM_OK : oomi_nomem();
}

/* nothing fits under the request: what would (more downscaling, more GPUs, QLoRA, ...) */
/* the trainer fits alone but not beside its colocated engine: what would */
static int rollout_no_fit(search *s, oom_plan_result *res)
{
    oom_plan_choice c = *res->smallest;
    oomi_rollout_split sp;
    char a[16], b[16], d[16];
    uint64_t engine, need;
    int err;

    if ((err = oomi_rollout_split_of(&sp, &s->ro, &c.knobs, &c.estimate, s->usable)))
        return err;
    oomi_rollout_fill(res, &s->ro, &sp);
    if (res->version >= 6) /* nothing planned: the least share the engine needs */
        res->rollout_gpu_memory_utilization = sp.min_utilisation;
    engine = (uint64_t)((double)s->ro.total * sp.min_utilisation);
    need = s->ro.sleep ? (sp.resident + engine > c.estimate.device_peak + sp.sleeping
                              ? sp.resident + engine
                              : c.estimate.device_peak + sp.sleeping)
                       : c.estimate.device_peak + engine;
    if (!s->ro.sleep &&
        (err = oomi_strv_add(&res->suggestions, &res->n_suggestions,
                             "--sleep-mode 1: the engine frees its memory while the trainer "
                             "trains")))
        return err;
    if ((err = oomi_strv_add(&res->suggestions, &res->n_suggestions,
                             "a smaller --target-effective-batch: the engine holds the %ld "
                             "completions each GPU generates at once (%s of KV cache at least)",
                             sp.seqs, OOMI_SZ(a, sp.kv_needed))) ||
        (err = oomi_strv_add(&res->suggestions, &res->n_suggestions,
                             "a GPU with at least %s usable (%s %s + engine %s)", OOMI_SZ(b, need),
                             s->ro.sleep ? "trainer while generating" : "trainer",
                             OOMI_SZ(d, s->ro.sleep ? sp.resident : c.estimate.device_peak),
                             OOMI_SZ(a, engine))))
        return err;
    c.why = NULL;
    if ((err = describe_rollout(s, &c)))
        return err;
    oomi_fail(OOM_ENOFIT, "nothing fits: the smallest configuration tried (batch %ld, seq %ld) %s",
              c.knobs.batch, c.knobs.seq_len, c.why);
    oomi_free(c.why);
    return OOM_ENOFIT;
}

static int no_fit(search *s, oom_plan_result *res, unsigned relax)
{
    const oom_plan_request *r = s->r;
    char a[16], b[16];
    int err;

    res->found = 0;
    *res->smallest = s->smallest;
    if ((err = conf_budget(s, res, &s->smallest.knobs)))
        return err;
    if (r->fixed_batch) {
        char *hint = NULL;
        if ((err = fixed_batch_hint(s, &hint)))
            return err;
        if (hint)
            err = oomi_strv_add(&res->suggestions, &res->n_suggestions, "%s", hint);
        oomi_free(hint);
        if (err)
            return err;
    }
    if (relax != OOM_DOWNSCALE_ALL && (r->fixed_batch || r->fixed_seq || r->fixed_checkpointing)) {
        if ((err = search_all(s, OOM_DOWNSCALE_ALL)))
            return err;
        if (s->have_best &&
            (err = oomi_strv_add(&res->suggestions, &res->n_suggestions,
                                 "--allow-downscale: batch size %ld, seq %ld, checkpointing %s "
                                 "would fit (device peak %s)",
                                 s->best.knobs.batch, s->best.knobs.seq_len, oomi_plan_ck(&s->best),
                                 OOMI_SZ(a, s->best.estimate.device_peak))))
            return err;
    }
    if (s->have_smallest && s->ro.on && res->smallest->estimate.device_peak <= s->usable)
        return rollout_no_fit(s, res);
    if ((err = oomi_plan_suggest(res, r, s->w, &res->smallest->knobs)))
        return err;
    if (!s->have_smallest)
        return oomi_fail(OOM_ENOFIT, "no configuration of %s could be estimated", res->model);
    return oomi_fail(OOM_ENOFIT,
                     "nothing fits: the smallest configuration tried (batch %ld, seq %ld%s%s) "
                     "needs %s, more than the usable %s",
                     res->smallest->knobs.batch, res->smallest->knobs.seq_len,
                     res->inference || res->measured ? "" : ", checkpointing ",
                     res->inference || res->measured ? "" : oomi_plan_ck(res->smallest),
                     OOMI_SZ(a, res->smallest->estimate.device_peak), OOMI_SZ(b, s->usable));
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
    res->tensor_parallel = r->workload ? r->workload->tp : 1;
    res->best = oomi_calloc(1, sizeof(*res->best));
    res->smallest = oomi_calloc(1, sizeof(*res->smallest));
    if (!res->best || !res->smallest) {
        err = oomi_nomem();
        goto done;
    }
    res->best->version = res->smallest->version = OOM_PLAN_CHOICE_VERSION;
    if ((err = setup(&s, res)) || (err = fill_identity(&s, res)))
        goto done;
    /* the request as given, then each fixed value the request lets the planner lower */
    if ((err = search_all(&s, 0)))
        goto done;
    s.fixed_smallest = s.smallest;
    if (!s.have_best && (r->downscale & OOM_DOWNSCALE_BATCH) && r->fixed_batch)
        if ((err = search_all(&s, relax = OOM_DOWNSCALE_BATCH)))
            goto done;
    if (!s.have_best && (r->downscale & ~relax) && (r->fixed_checkpointing || r->fixed_seq))
        if ((err = search_all(&s, relax = r->downscale)))
            goto done;
    res->candidates = s.candidates;
    if (s.have_best)
        err = fill_result(&s, res);
    else
        err = no_fit(&s, res, relax);
    res->candidates = s.candidates;
    res->stack = r->workload ? (int)r->workload->stack : 0;
    if (r->workload && r->workload->packing != OOMI_PACKING_NONE) {
        res->packing = (int)r->workload->packing;
        if (res->found)
            res->tokens_per_batch = res->best->knobs.batch * res->best->knobs.seq_len;
    }
done:
    oomi_free(s.all);
    oomi_rollout_free(&s.ro);
    oom_workload_free(s.w);
    if (err && err != OOM_ENOFIT) {
        oom_plan_free(res);
        return err;
    }
    *out = res;
    return err;
}
