/*
 * probe_search.c - the batch-size search of `probe`, a pure function of the trials so far
 * (shared by `probe`, the unit tests and bench/search).
 *
 * The measured peaks are read one of three ways (oomi_probe_read_peaks):
 *  - regular: on the line through the two largest points, or the parabola through the three
 *    largest. The search jumps to where the curve meets the budget and stops when a launch
 *    confirms it exactly: a linear job takes 3 launches.
 *  - noisy: scattered around a curve (a real GPU measures a little more or less from one launch
 *    to the next). No pair of points is trusted: a weighted least-squares fit through all of
 *    them, jumps bounded by the uncertainty of its prediction, and an allowance kept under the
 *    budget (the tolerance, or twice the measured scatter when that is larger).
 *  - stepped: a batch peaked well above a larger one (the caching allocator's rounding makes
 *    steps): bisection between the largest batch under the budget and the smallest over it.
 */
#include "job/job.h"

#include <limits.h>
#include <math.h>
#include <string.h>

#define DEFAULT_MAX_TRIALS 8
#define DEFAULT_MAX_BATCH  1048576
#define DEFAULT_TOLERANCE  0.01
/* A measured peak is a whole number of bytes: exact peaks lie on their curve to within the
 * rounding of each point, carried through the curve (its Lagrange weights). */
#define ROUNDING 2.0
/* Noisy peaks (bench/search/README.md has the figures behind these): a jump's peak predicted
 * SAFE_SIGMA standard errors high still fits; near the limit (lo within ENDGAME allowances of
 * it) the jumps are bolder; the search stops when at most STOP allowances of lo are left open. */
#define SAFE_SIGMA 1.5
#define ENDGAME    4
#define STOP       3

/* ---- reading the peaks ------------------------------------------------------------------- */

size_t oomi_probe_points(oomi_pt *pts, const oom_probe_trial *const *t, size_t n, size_t skip)
{
    size_t i, j, k = 0;
    n = n > OOMI_PROBE_POINTS ? OOMI_PROBE_POINTS : n;
    for (i = 0; i < n; i++) {
        if (i == skip || t[i]->exit_code || t[i]->oom || t[i]->timed_out ||
            t[i]->peak_bytes == OOM_UNKNOWN)
            continue;
        for (j = 0; j < k && pts[j].b != t[i]->batch; j++)
            ;
        pts[j] = (oomi_pt){t[i]->batch, (double)t[i]->peak_bytes};
        k += j == k;
    }
    for (i = 1; i < k; i++) /* insertion sort: a handful of points */
        for (j = i; j > 0 && pts[j - 1].b > pts[j].b; j--) {
            oomi_pt x = pts[j];
            pts[j] = pts[j - 1];
            pts[j - 1] = x;
        }
    return k;
}

static int close_enough(double predicted, double measured, double tol)
{
    return fabs(predicted - measured) <= tol * fabs(measured) + 1.0;
}

/* A line through the two largest points, or a parabola through the three largest when the line
 * mispredicts another point by more than tol, or when the parabola differs from the line by more
 * than tol x usable at the batch the line would jump to (curvature that only shows far out). */
static oom_probe_fit fit_points(const oomi_pt *p, size_t k, double tol, uint64_t usable)
{
    oom_probe_fit line = {.version = OOM_PROBE_FIT_VERSION}, curve;
    size_t i;
    int jump;
    if (k < 2)
        return line;
    line = oomi_line_through(p[k - 2], p[k - 1]);
    if (k < 3)
        return line;
    curve = oomi_parabola_through(p[k - 3], p[k - 2], p[k - 1]);
    for (i = 0; i + 2 < k; i++)
        if (!close_enough(oom_probe_fit_peak(&line, (int)p[i].b), p[i].peak, tol))
            return curve;
    jump = line.per_sample_bytes > 0 ? oom_probe_fit_max_batch(&line, usable, 1 << 24) : 0;
    if (jump > 0 && fabs(oom_probe_fit_peak(&curve, jump) - oom_probe_fit_peak(&line, jump)) >
                        tol * (double)usable)
        return curve;
    return line;
}

static int usable_fit(const oom_probe_fit *f)
{
    return f->valid && (f->per_sample_bytes > 0 || f->per_sample2_bytes > 0);
}

/* A fit that can describe memory: nothing is negative at batch 0 (the CUDA context alone) nor
 * at any batch (the lowest point of the curve), and the need does not bend down (no allocator
 * frees memory because the batch grew). The calibration store skips any other line as damaged. */
static int sensible_fit(const oom_probe_fit *f)
{
    double low = f->per_sample2_bytes > 0 ? -f->per_sample_bytes / (2 * f->per_sample2_bytes) : 1;
    low = low < 1 ? 1 : low;
    return usable_fit(f) && f->fixed_bytes >= 0 && f->per_sample2_bytes >= 0 &&
           (f->per_sample2_bytes > 0 || f->per_sample_bytes >= 0) &&
           f->fixed_bytes + f->per_sample_bytes * low + f->per_sample2_bytes * low * low >= 0;
}

/* Whether a smaller batch peaked more than `frac` above a larger one (sorted points). */
static int inverted(const oomi_pt *p, size_t k, double frac)
{
    size_t i, j;
    for (i = 0; i < k; i++)
        for (j = i + 1; j < k; j++)
            if (p[i].peak > p[j].peak * (1 + frac))
                return 1;
    return 0;
}

/* Whether every point lies on the curve through the m (2 or 3) largest, to within the rounding
 * of the points carried through the curve. */
static int all_on(const oomi_pt *p, size_t k, size_t m)
{
    const oomi_pt *node = p + k - m;
    size_t i, j, l;
    for (i = 0; i + m < k; i++) {
        double y = 0, weights = 0;
        for (j = 0; j < m; j++) {
            double w = 1;
            for (l = 0; l < m; l++)
                if (l != j)
                    w *= (p[i].b - node[l].b) / (node[j].b - node[l].b);
            y += w * node[j].peak;
            weights += fabs(w);
        }
        if (!(fabs(y - p[i].peak) <= (weights + 1) * ROUNDING + 1e-12 * p[i].peak))
            return 0;
    }
    return 1;
}

/* Whether the points show that they are exact: one point more than a line or parabola needs,
 * and all of them on it. */
static int shown_exact(const oomi_pt *p, size_t k)
{
    oom_probe_fit curve;
    if (k < 3)
        return 0;
    if (all_on(p, k, 2))
        return 1;
    curve = oomi_parabola_through(p[k - 3], p[k - 2], p[k - 1]);
    return k >= 4 && sensible_fit(&curve) && all_on(p, k, 3);
}

/* The fit reported when no curve is followed: a line through zero and the trial with the most
 * memory per sample, never below any measured peak. */
static oom_probe_fit envelope_fit(const oomi_pt *p, size_t k)
{
    oom_probe_fit f = {.version = OOM_PROBE_FIT_VERSION};
    size_t i;
    for (i = 0; i < k; i++)
        if (p[i].peak / p[i].b > f.per_sample_bytes)
            f.per_sample_bytes = p[i].peak / p[i].b;
    f.valid = k > 0 && f.per_sample_bytes > 0;
    return f;
}

/* The noisy reading: a weighted least-squares line, or a parabola when the line leaves a point
 * further off than twice the tolerance and the parabola bends up. */
static void noisy_fit(oomi_peaks *v, const oomi_pt *p, size_t k, double tol)
{
    oomi_lsq quad;
    oomi_lsq_fit(&v->lsq, p, k, 2);
    if (k >= 3 && v->lsq.worst > 2 * tol && oomi_lsq_fit(&quad, p, k, 3) && quad.c[2] > 0)
        v->lsq = quad;
    v->scatter = 2 * v->lsq.rms;
    v->allowance = v->scatter > tol ? v->scatter : tol;
    v->fit = oomi_lsq_to_fit(&v->lsq);
    if (!sensible_fit(&v->fit))
        v->fit = envelope_fit(p, k);
}

void oomi_probe_read_peaks(oomi_peaks *v, const oomi_pt *p, size_t k, double tol, uint64_t usable)
{
    memset(v, 0, sizeof(*v));
    tol = tol > 0 ? tol : DEFAULT_TOLERANCE;
    v->fit = fit_points(p, k, tol, usable);
    if (inverted(p, k, 2 * tol)) { /* more than noise of the size of tol explains */
        v->kind = OOMI_PEAKS_STEPPED;
        v->allowance = tol;
        v->fit = envelope_fit(p, k);
    } else if (k >= 2 &&
               (inverted(p, k, 0) || !sensible_fit(&v->fit) || (k > 3 && !shown_exact(p, k)))) {
        v->kind = OOMI_PEAKS_NOISY;
        noisy_fit(v, p, k, tol);
    } else {
        v->kind = OOMI_PEAKS_REGULAR;
        v->allowance = shown_exact(p, k) ? 0 : tol;
    }
}

/* ---- the search step --------------------------------------------------------------------- */

static int trial_ok(const oom_probe_trial *t)
{
    return t->exit_code == 0 && !t->oom && !t->timed_out;
}

/* Ran, and its peak (when measured) was at most `limit`. */
static int trial_fits(const oom_probe_trial *t, double limit)
{
    return trial_ok(t) && (t->peak_bytes == OOM_UNKNOWN || (double)t->peak_bytes <= limit);
}

struct bounds {
    int lo;  /* largest batch known to fit (0: none) */
    int hi;  /* smallest batch known not to (INT_MAX: none) */
    int ran; /* largest batch that ran */
};

static struct bounds find_bounds(const oom_probe_trial *const *t, size_t n, double limit)
{
    struct bounds b = {0, INT_MAX, 0};
    size_t i;
    for (i = 0; i < n; i++) {
        if (!trial_fits(t[i], limit) && t[i]->batch < b.hi)
            b.hi = t[i]->batch;
        if (trial_ok(t[i]) && t[i]->batch > b.ran)
            b.ran = t[i]->batch;
    }
    for (i = 0; i < n; i++) /* a success above a failure is noise: the failure wins */
        if (trial_fits(t[i], limit) && t[i]->batch >= b.lo && t[i]->batch < b.hi)
            b.lo = t[i]->batch;
    return b;
}

static int first_batch(const oom_probe_search *s, int cap)
{
    int b;
    if (s->start_batch > 0)
        return s->start_batch < cap ? s->start_batch : cap;
    if (!s->prediction.valid)
        return 1;
    b = oom_probe_fit_max_batch(&s->prediction, s->usable_bytes, cap) / 2;
    return b < 1 ? 1 : b;
}

/* Between lo and hi: geometric over a wide range (a fresh point far from both), else midway. */
static int bisect(struct bounds b)
{
    if (b.lo >= 1 && b.hi / b.lo > 4)
        return (int)sqrt((double)b.lo * (double)b.hi);
    return b.lo + (b.hi - b.lo) / 2;
}

/* No slope to follow and no failure above: scale the largest measured batch up by what is left
 * of `aim` (as if all of its memory grew with the batch: never more than a line with fixed
 * memory >= 0 allows), at least doubling it. */
static int grow(const oomi_pt *p, size_t k, double aim, struct bounds b, int cap)
{
    double j = k && p[k - 1].peak > 0 ? p[k - 1].b * aim / p[k - 1].peak : 0;
    if (j >= (double)cap)
        return cap;
    if ((int)j > b.lo)
        return (int)j;
    return b.lo > cap / 2 ? cap : 2 * b.lo;
}

/* Regular peaks: the largest batch the fit allows, bisecting when a failure contradicts it. */
static int propose(const oom_probe_search *s, const oom_probe_fit *f, struct bounds b, int cap)
{
    int c;
    if (usable_fit(f)) {
        c = oom_probe_fit_max_batch(f, s->usable_bytes, cap);
        if (b.hi != INT_MAX && c >= b.hi) /* the fit is contradicted by a failure: bisect */
            return bisect(b);
        return c <= b.lo ? b.lo + 1 : c;
    }
    if (b.hi == INT_MAX) /* nothing to extrapolate from yet: double */
        return b.lo > cap / 2 ? cap : 2 * b.lo;
    return bisect(b); /* a failure above one point: a second point between (doubling would crawl
                         down from the failure one batch per launch) */
}

/* The measured peak at batch b; 0 when b has none. */
static double peak_at(const oomi_pt *p, size_t k, int b)
{
    size_t i;
    for (i = 0; i < k; i++)
        if (p[i].b == b)
            return p[i].peak;
    return 0;
}

/* Noisy peaks. The next batch is the largest whose peak, predicted SAFE_SIGMA standard errors
 * high, still measures under the limit with the allowance on top; after a failure above the
 * points (a line extrapolated too far), also under the parabola's bound. Once lo measured within
 * ENDGAME allowances of the limit (the fit is pinned there), at least halfway up the range a fit
 * one standard error low leaves open; when the bound is no higher than lo, that range bisected.
 * 0: what is left above lo is within STOP allowances (the noise alone would decide it). */
static int propose_noisy(const oomi_peaks *v, const oomi_pt *p, size_t k, struct bounds b, int cap,
                         double limit)
{
    const oomi_lsq *f = &v->lsq;
    double aim = limit / (1 + v->allowance), x = b.lo / f->scale;
    oomi_lsq quad;
    int open, safe, q;
    if (!f->ok || f->c[1] + (f->terms == 3 ? 2 * f->c[2] * x : 0) <= 0)
        return b.hi == INT_MAX ? grow(p, k, aim, b, cap) : bisect(b);
    safe = oomi_lsq_max_batch(f, v->allowance, SAFE_SIGMA, aim, b.lo + 1, cap);
    if (b.hi != INT_MAX && safe >= b.hi) /* the fit is contradicted by a failure: bisect */
        return bisect(b);
    if (b.hi != INT_MAX && f->terms == 2 && oomi_lsq_fit(&quad, p, k, 3) && quad.c[2] > 0 &&
        (q = oomi_lsq_max_batch(&quad, v->allowance, SAFE_SIGMA, aim, b.lo + 1, cap)) < safe)
        safe = q;
    open =
        oomi_lsq_max_batch(f, v->allowance, -1, limit, b.lo + 1, b.hi == INT_MAX ? cap : b.hi - 1);
    if (open - b.lo <= STOP * v->allowance * b.lo)
        return 0;
    if (peak_at(p, k, b.lo) >= (1 - ENDGAME * v->allowance) * limit &&
        safe < b.lo + (open - b.lo) / 2)
        safe = b.lo + (open - b.lo) / 2;
    return safe > b.lo ? safe : bisect((struct bounds){b.lo, open + 1, 0});
}

int oom_probe_search_step(oom_probe_step *out, const oom_probe_search *s,
                          const oom_probe_trial *const *t, size_t n)
{
    int max_trials, cap, next, upper, err;
    double tol, limit;
    struct bounds b;
    oomi_pt pts[OOMI_PROBE_POINTS];
    oomi_peaks v;
    size_t i, k;

    if (!out || !s || (n && !t))
        return oomi_fail(OOM_EINVAL, "probe search: missing argument");
    if ((err = oomi_check_version(out->version, OOM_PROBE_STEP_VERSION, "oom_probe_step")) ||
        (err = oomi_check_version(s->version, OOM_PROBE_SEARCH_VERSION, "oom_probe_search")))
        return err;
    for (i = 0; i < n; i++) {
        if (!t[i])
            return oomi_fail(OOM_EINVAL, "probe search: trial %zu is missing", i + 1);
        if ((err = oomi_check_version(t[i]->version, OOM_PROBE_TRIAL_VERSION, "oom_probe_trial")))
            return err;
        if (t[i]->batch < 1)
            return oomi_fail(OOM_EINVAL, "probe search: trial %zu has batch %d", i + 1,
                             t[i]->batch);
    }
    *out = (oom_probe_step){.version = out->version};
    max_trials = s->max_trials > 0 ? s->max_trials : DEFAULT_MAX_TRIALS;
    cap = s->max_batch > 0 ? s->max_batch : DEFAULT_MAX_BATCH;
    tol = s->tolerance > 0 ? s->tolerance : DEFAULT_TOLERANCE;
    k = oomi_probe_points(pts, t, n, SIZE_MAX);
    oomi_probe_read_peaks(&v, pts, k, tol, s->usable_bytes);
    limit = (double)s->usable_bytes * (1 - v.allowance);
    b = find_bounds(t, n, limit);
    out->fit = v.fit;
    out->recommended_batch = b.lo;
    out->max_batch = b.ran;
    out->done = 1;
    if (n == 0) {
        out->done = 0;
        out->next_batch = first_batch(s, cap);
        return OOM_OK;
    }
    upper = b.hi == INT_MAX ? cap : (b.hi - 1 < cap ? b.hi - 1 : cap);
    /* adjacent; or, by exit status alone, within one (the batch between is not worth a launch) */
    if ((int)n >= max_trials || b.lo >= upper || (b.lo >= 1 && b.hi - b.lo <= (k ? 1 : 2)))
        return OOM_OK;

    if (b.lo == 0) /* the first trial failed: start small, where a line can be fitted */
        next = 1;
    else if (v.kind == OOMI_PEAKS_STEPPED) /* between the largest under and the smallest over */
        next = b.hi == INT_MAX ? grow(pts, k, limit / (1 + v.allowance), b, cap)
                               : b.lo + (b.hi - b.lo) / 2;
    else if (v.kind == OOMI_PEAKS_NOISY) {
        if (!(next = propose_noisy(&v, pts, k, b, cap, limit)))
            return OOM_OK;
    } else {
        /* the points lie exactly on the fit: it says whether lo + 1 fits */
        if (v.allowance == 0 && usable_fit(&v.fit) && oom_probe_fit_peak(&v.fit, b.lo + 1) > limit)
            return OOM_OK;
        next = propose(s, &v.fit, b, cap);
    }
    next = next < b.lo + 1 ? b.lo + 1 : next > upper ? upper : next;
    out->done = 0;
    out->next_batch = next;
    return OOM_OK;
}
