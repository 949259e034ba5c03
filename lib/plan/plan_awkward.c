/* plan_awkward.c - the hint for an awkward effective batch (docs/plan.md, "The search"): the
 * nearest effective batches whose divisors allow a larger, faster micro-batch. */
#include "plan/plan.h"

/* the largest micro-batch up to `cap` that fits family i with knobs k (0: none) */
static long largest_fit(const oomi_plan_families *f, size_t i, oom_knobs k, long cap)
{
    oom_plan_choice x;
    long m;
    bool valid;
    for (m = 1; m <= cap && m <= OOMI_PLAN_MAX_MICRO_BATCH; m++) {
        k.batch = m;
        if (f->eval(f->ctx, i, &k, &x, &valid) || !valid || !x.fits)
            break;
    }
    oomi_clear_error();
    return m - 1;
}

/* the largest divisor of n that is at most cap (cap >= 1): down from cap where cap is small, else
 * through the pairs of divisors up to the square root of n */
static long divisor_under(long n, long cap)
{
    long d, best = 1;
    if (cap >= n)
        return n;
    if (cap <= n / cap) {
        for (d = cap; d > 1 && n % d; d--)
            ;
        return d;
    }
    for (d = 2; d <= n / d; d++)
        if (n % d == 0) {
            if (d <= cap && d > best)
                best = d;
            if (n / d <= cap && n / d > best)
                best = n / d;
        }
    return best;
}

/* The most family i can score with a micro-batch above b's and up to m on an effective batch up
 * to e per GPU, with 1e-9 of room for rounding; lo: family i's estimate at the smallest of those
 * micro-batches. false where the estimator refuses a point it needs (no bound). A step's time per
 * sample (plan_cost.c) is FLOPs per token x seq / (peak x u(tokens of a micro-batch)), the costs
 * of an optimizer step over m x accumulation, those of a micro-step over m, and the offloaded
 * checkpoints' per sample: for given FLOPs per token it falls as the micro-batch and the effective
 * batch grow. The FLOPs per token do not fall as the micro-batch grows (they grow where a packed
 * row's attention spans the whole row), so the score at m, with the accumulation that reaches e
 * or just beyond and lo's FLOPs per token, is above every candidate's. */
static bool score_bound(const oomi_plan_families *f, size_t i, const oom_plan_choice *b,
                        const oom_plan_choice *lo, long m, long e, double *out)
{
    oom_knobs k = f->knobs(f->ctx, i, b);
    oom_plan_choice x;
    bool valid;
    k.batch = m, k.grad_accum = (e + m - 1) / m;
    if (f->eval(f->ctx, i, &k, &x, &valid) || !valid || !x.has_throughput) {
        oomi_clear_error();
        return false;
    }
    if (lo->estimate.flops_per_token < x.estimate.flops_per_token) {
        x.estimate.flops_per_token = lo->estimate.flops_per_token;
        x.estimate.flops_per_step =
            lo->estimate.flops_per_token * (double)x.estimate.tokens_per_step;
        f->rescore(f->ctx, &x);
    }
    *out = x.score * (1 + 1e-9);
    return true;
}

/* the fastest choice for `per` samples per GPU whose micro-batch divides it, above `above`, in
 * any family (fits: each family's largest micro-batch that fits); 0 when none beats `score` */
static long faster_divisor(const oomi_plan_families *f, const oom_plan_choice *b, const long *fits,
                           long per, double score, long above)
{
    long pick = 0;
    size_t i;
    for (i = 0; i < f->n; i++) {
        oom_knobs k;
        oom_plan_choice x;
        bool valid;
        if (fits[i] <= above)
            continue;
        k = f->knobs(f->ctx, i, b);
        k.batch = divisor_under(per, fits[i]), k.grad_accum = per / k.batch;
        if (k.batch <= above || f->eval(f->ctx, i, &k, &x, &valid) || !valid || !x.fits)
            continue;
        if (x.score > score * 1.001)
            score = x.score, pick = k.batch;
    }
    oomi_clear_error();
    return pick;
}

/* fits[i]: family i's largest micro-batch that fits up to cap, or 0 where the family cannot beat
 * b by more than 0.1 % (what faster_divisor asks) on any effective batch up to cap per GPU: first
 * at the largest micro-batch looked at, then at its own largest fit. Returns whether any can. */
static bool families_that_can_win(const oomi_plan_families *f, const oom_plan_choice *b, long cap,
                                  long *fits)
{
    double need = b->score * 1.001, most;
    bool any = false, valid;
    size_t i;
    for (i = 0; i < f->n; i++) {
        oom_knobs k = f->knobs(f->ctx, i, b);
        oom_plan_choice lo;
        fits[i] = 0;
        k.batch = b->knobs.batch + 1, k.grad_accum = 1;
        if (f->eval(f->ctx, i, &k, &lo, &valid) || !valid) {
            oomi_clear_error();
            valid = false;
        }
        if (valid && score_bound(f, i, b, &lo, cap, cap, &most) && most <= need)
            continue;
        fits[i] = largest_fit(f, i, f->knobs(f->ctx, i, b), cap);
        if (fits[i] <= b->knobs.batch ||
            (valid && score_bound(f, i, b, &lo, fits[i], cap, &most) && most <= need))
            fits[i] = 0;
        any = any || fits[i] > 0;
    }
    return any;
}

int oomi_plan_awkward(oom_plan_result *res, const oomi_plan_families *f, const oom_plan_choice *b,
                      long eff, long gpus)
{
    long per = eff / gpus, cap = per + per / 4 + 1, d, e, near[3], micro[3], *fits;
    size_t n = 0, i;
    oomi_sb sb = OOMI_SB_INIT;
    int err = OOM_OK;

    if (!(fits = oomi_calloc(f->n ? f->n : 1, sizeof(*fits))))
        return oomi_nomem();
    /* the effective batches within a quarter of the target, nearest first */
    if (families_that_can_win(f, b, cap, fits))
        for (d = 1; n < 3 && d <= per / 4 + 1; d++)
            for (e = per - d; n < 3 && e <= per + d; e += 2 * d) {
                long m = e >= 1 ? faster_divisor(f, b, fits, e, b->score, b->knobs.batch) : 0;
                if (m)
                    near[n] = e * gpus, micro[n++] = m;
            }
    oomi_free(fits);
    if (!n)
        return OOM_OK;
    for (i = 0; i < n; i++)
        oomi_sb_printf(&sb, "%s%ld = %ld x %ld%s", i ? ", " : "", near[i], micro[i],
                       near[i] / gpus / micro[i], gpus > 1 ? " x GPUs" : "");
    if (!(err = oomi_sb_ok(&sb)))
        err = oomi_plan_note(res,
                             "effective batch %ld allows only micro-batches that divide it (here "
                             "%ld); nearest with larger, faster micro-batches: %s "
                             "(--target-effective-batch N, or --allow-inexact)",
                             eff, b->knobs.batch, sb.buf);
    oomi_sb_free(&sb);
    return err;
}
