/*
 * probe.c - the batch-size search (a pure function of the trials so far, shared by `probe`, the
 * unit tests and bench/search) and the probe driver that launches the job once per trial.
 */
#include "job/job.h"

#include <json-c/json.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#define DEFAULT_MAX_TRIALS 8
#define DEFAULT_MAX_BATCH  1048576
#define DEFAULT_TOLERANCE  0.01

/* ---- fitting --------------------------------------------------------------------------------- */

struct pt {
    double b, peak;
};

static oom_probe_fit line_through(struct pt p, struct pt q)
{
    oom_probe_fit f = {.version = OOM_PROBE_FIT_VERSION};
    f.per_sample_bytes = (q.peak - p.peak) / (q.b - p.b);
    f.fixed_bytes = p.peak - f.per_sample_bytes * p.b;
    f.valid = 1;
    return f;
}

/* the parabola through three points (Lagrange, expanded) */
static oom_probe_fit parabola_through(struct pt p, struct pt q, struct pt r)
{
    oom_probe_fit f = {.version = OOM_PROBE_FIT_VERSION};
    double d1 = (q.peak - p.peak) / (q.b - p.b), d2 = (r.peak - q.peak) / (r.b - q.b);
    f.per_sample2_bytes = (d2 - d1) / (r.b - p.b);
    f.per_sample_bytes = d1 - f.per_sample2_bytes * (p.b + q.b);
    f.fixed_bytes = p.peak - f.per_sample_bytes * p.b - f.per_sample2_bytes * p.b * p.b;
    f.valid = f.quadratic = 1;
    return f;
}

static int close_enough(double predicted, double measured, double tol)
{
    return fabs(predicted - measured) <= tol * fabs(measured) + 1.0;
}

/* Points sorted by batch (the latest trial wins for a repeated batch). */
static size_t collect_points(struct pt *pts, const oom_probe_trial *const *t, size_t n, size_t skip)
{
    size_t i, j, k = 0;
    for (i = 0; i < n; i++) {
        if (i == skip || t[i]->exit_code || t[i]->oom || t[i]->timed_out ||
            t[i]->peak_bytes == OOM_UNKNOWN)
            continue;
        for (j = 0; j < k && pts[j].b != t[i]->batch; j++)
            ;
        pts[j] = (struct pt){t[i]->batch, (double)t[i]->peak_bytes};
        k += j == k;
    }
    for (i = 1; i < k; i++) /* insertion sort: a handful of points */
        for (j = i; j > 0 && pts[j - 1].b > pts[j].b; j--) {
            struct pt x = pts[j];
            pts[j] = pts[j - 1];
            pts[j - 1] = x;
        }
    return k;
}

/* A line through the two largest points, or a parabola through the three largest when the line
 * mispredicts another point by more than tol, or when the parabola differs from the line by more
 * than tol x usable at the batch the line would jump to (curvature that only shows far out). */
static oom_probe_fit fit_points(const struct pt *p, size_t k, double tol, uint64_t usable)
{
    oom_probe_fit line = {.version = OOM_PROBE_FIT_VERSION}, curve;
    size_t i;
    int jump;
    if (k < 2)
        return line;
    line = line_through(p[k - 2], p[k - 1]);
    if (k < 3)
        return line;
    curve = parabola_through(p[k - 3], p[k - 2], p[k - 1]);
    for (i = 0; i + 2 < k; i++)
        if (!close_enough(oom_probe_fit_peak(&line, (int)p[i].b), p[i].peak, tol))
            return curve;
    jump = line.per_sample_bytes > 0 ? oom_probe_fit_max_batch(&line, usable, 1 << 24) : 0;
    if (jump > 0 && fabs(oom_probe_fit_peak(&curve, jump) - oom_probe_fit_peak(&line, jump)) >
                        tol * (double)usable)
        return curve;
    return line;
}

static oom_probe_fit fit_trials(const oom_probe_trial *const *t, size_t n, size_t skip, double tol,
                                uint64_t usable)
{
    struct pt pts[64];
    size_t k = collect_points(pts, t, n > 64 ? 64 : n, skip);
    return fit_points(pts, k, tol, usable);
}

static int usable_fit(const oom_probe_fit *f)
{
    return f->valid && (f->per_sample_bytes > 0 || f->per_sample2_bytes > 0);
}

/* A fit that can describe memory: nothing is negative at batch 0 (the CUDA context alone) and the
 * need does not bend down (no allocator frees memory because the batch grew). */
static int sensible_fit(const oom_probe_fit *f)
{
    return usable_fit(f) && f->fixed_bytes >= 0 && f->per_sample2_bytes >= 0;
}

/* Whether a larger batch measured a lower peak than a smaller one (sorted points). The caching
 * allocator rounds its blocks (PyTorch's CUDACachingAllocator: 2 MiB segments for small blocks,
 * 20 MiB and larger for big ones), so real peaks step rather than climb smoothly. */
static int monotone(const struct pt *p, size_t k)
{
    size_t i;
    for (i = 1; i < k; i++)
        if (p[i].peak < p[i - 1].peak)
            return 0;
    return 1;
}

/* The fit a probe reports when its peaks are irregular: a line through zero and the trial with
 * the most memory per sample, never below any measured peak. */
static oom_probe_fit envelope_fit(const struct pt *p, size_t k)
{
    oom_probe_fit f = {.version = OOM_PROBE_FIT_VERSION};
    size_t i;
    for (i = 0; i < k; i++)
        if (p[i].peak / p[i].b > f.per_sample_bytes)
            f.per_sample_bytes = p[i].peak / p[i].b;
    f.valid = k > 0 && f.per_sample_bytes > 0;
    return f;
}

/* Peaks that do not fit a curve: not monotone in the batch, or a fit with negative fixed memory or
 * negative curvature. The search then bisects and the probe reports envelope_fit(). */
static int irregular(const oom_probe_trial *const *t, size_t n, const oom_probe_fit *f,
                     oom_probe_fit *envelope)
{
    struct pt pts[64];
    size_t k = collect_points(pts, t, n > 64 ? 64 : n, SIZE_MAX);
    if (k < 2 || (monotone(pts, k) && sensible_fit(f)))
        return 0;
    *envelope = envelope_fit(pts, k);
    return 1;
}

/* ---- the search step --------------------------------------------------------------------------
 */

static int trial_ok(const oom_probe_trial *t)
{
    return t->exit_code == 0 && !t->oom && !t->timed_out;
}

static int trial_fits(const oom_probe_trial *t, uint64_t usable)
{
    return trial_ok(t) && (t->peak_bytes == OOM_UNKNOWN || t->peak_bytes <= usable);
}

struct bounds {
    int lo;          /* largest batch known to fit (0: none) */
    int hi;          /* smallest batch known not to (INT_MAX: none) */
    int ran;         /* largest batch that ran */
    int last;        /* index of the last trial */
    int lo_measured; /* the trial at lo has a peak */
};

static struct bounds find_bounds(const oom_probe_search *s, const oom_probe_trial *const *t,
                                 size_t n)
{
    struct bounds b = {0, INT_MAX, 0, (int)n - 1, 0};
    size_t i;
    for (i = 0; i < n; i++) {
        if (!trial_fits(t[i], s->usable_bytes) && t[i]->batch < b.hi)
            b.hi = t[i]->batch;
        if (trial_ok(t[i]) && t[i]->batch > b.ran)
            b.ran = t[i]->batch;
    }
    for (i = 0; i < n; i++) /* a success above a failure is noise: the failure wins */
        if (trial_fits(t[i], s->usable_bytes) && t[i]->batch >= b.lo && t[i]->batch < b.hi) {
            b.lo = t[i]->batch;
            b.lo_measured = t[i]->peak_bytes != OOM_UNKNOWN;
        }
    return b;
}

/* The last trial verified the fit: it ran at lo, and the fit made without it predicted its peak. */
static int verified(const oom_probe_search *s, const oom_probe_trial *const *t, size_t n,
                    struct bounds b, double tol)
{
    const oom_probe_trial *last = t[b.last];
    oom_probe_fit before;
    if (b.last < 0 || last->batch != b.lo || last->peak_bytes == OOM_UNKNOWN)
        return 0;
    before = fit_trials(t, n, (size_t)b.last, tol, s->usable_bytes);
    return usable_fit(&before) &&
           close_enough(oom_probe_fit_peak(&before, last->batch), (double)last->peak_bytes, tol);
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

static int propose(const oom_probe_search *s, const oom_probe_fit *f, struct bounds b, int cap)
{
    int c;
    if (b.lo == 0) /* the first trial failed: start small, where a line can be fitted */
        return 1;
    if (usable_fit(f)) {
        c = oom_probe_fit_max_batch(f, s->usable_bytes, cap);
        if (b.hi != INT_MAX && c >= b.hi) /* the fit is contradicted by a failure: bisect */
            return bisect(b);
        return c <= b.lo ? b.lo + 1 : c;
    }
    if (b.hi == INT_MAX) /* nothing to extrapolate from yet: double */
        return b.lo ? (b.lo > cap / 2 ? cap : 2 * b.lo) : 1;
    return bisect(b); /* a failure above one point: a second point between (doubling would crawl
                         down from the failure one batch per launch) */
}

int oom_probe_search_step(oom_probe_step *out, const oom_probe_search *s,
                          const oom_probe_trial *const *t, size_t n)
{
    int max_trials, cap, next, upper, odd;
    double tol;
    struct bounds b;
    oom_probe_fit envelope;
    size_t i;

    int err;

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
    b = find_bounds(s, t, n);
    out->fit = fit_trials(t, n, SIZE_MAX, tol, s->usable_bytes);
    out->recommended_batch = b.lo;
    out->max_batch = b.ran;
    out->done = 1;
    if (n == 0) {
        out->done = 0;
        out->next_batch = first_batch(s, cap);
        return OOM_OK;
    }
    upper = b.hi == INT_MAX ? cap : (b.hi - 1 < cap ? b.hi - 1 : cap);
    if ((odd = irregular(t, n, &out->fit, &envelope)))
        out->fit = envelope; /* bisect: stop only when no batch between lo and hi is untried */
    if ((int)n >= max_trials || b.lo >= upper || (b.lo >= 1 && b.hi - b.lo <= (odd ? 1 : 2)))
        return OOM_OK;
    if (!odd && usable_fit(&out->fit) && verified(s, t, n, b, tol) &&
        oom_probe_fit_peak(&out->fit, b.lo + 1) > (double)s->usable_bytes)
        return OOM_OK;
    if (odd && b.lo >= 1) /* between the largest under the budget and the smallest over it */
        next = b.hi == INT_MAX ? (b.lo > cap / 2 ? cap : 2 * b.lo) : b.lo + (b.hi - b.lo) / 2;
    else
        next = propose(s, &out->fit, b, cap);
    next = next < b.lo + 1 ? b.lo + 1 : next > upper ? upper : next;
    out->done = 0;
    out->next_batch = next;
    return OOM_OK;
}

/* ---- the driver --------------------------------------------------------------------------------
 */

void oom_probe_result_free(oom_probe_result *r)
{
    size_t i;
    if (!r)
        return;
    for (i = 0; r->trials && i < r->trial_count; i++)
        oomi_free(r->trials[i]);
    oomi_free(r->trials);
    oomi_free(r->nvml_error);
    oomi_free(r);
}

struct probe_ctx {
    const oom_job *job;
    const oom_probe_options *o;
    const oom_patterns *patterns;
    oom_gpu_session *gpu;
    oom_probe_result *r;
    uint64_t start_used[16]; /* each GPU's used memory before the first trial (others') */
    size_t n_start;
    uint64_t others_growth; /* the most others added during a trial, taken off the budget */
};

static int open_gpu(struct probe_ctx *c)
{
    oom_gpu_list *list = NULL;
    if (c->o->no_gpu) {
        c->r->nvml_error = oomi_strdup("GPU sampling turned off");
        return c->r->nvml_error ? OOM_OK : oomi_nomem();
    }
    if (oom_gpu_open(&c->gpu) != OOM_OK) {
        c->r->nvml_error = oomi_strdup(oom_last_message());
        oomi_clear_error();
        return c->r->nvml_error ? OOM_OK : oomi_nomem();
    }
    c->r->peaks_measured = 1;
    if (oom_gpu_sample(&list, c->gpu, 0) == OOM_OK && list->count > 0) {
        oomi_snprintf(c->r->gpu_name, sizeof(c->r->gpu_name), "%s", list->gpus[0]->name);
        for (c->n_start = 0; c->n_start < list->count && c->n_start < OOMI_ARRAY_LEN(c->start_used);
             c->n_start++)
            c->start_used[c->n_start] =
                list->gpus[c->n_start]->lost ? OOM_UNKNOWN : list->gpus[c->n_start]->used_bytes;
    }
    oom_gpu_list_free(list);
    return OOM_OK;
}

/* Launches one trial at `batch` and appends it. */
static int run_trial(struct probe_ctx *c, int batch, oomi_launch *l)
{
    oom_probe_trial *t, **grown;
    int err;

    memset(l, 0, sizeof(*l));
    l->job = c->job;
    l->batch = batch;
    l->accum = c->o->grad_accum > 0 ? c->o->grad_accum : 1;
    l->seq = c->o->seq;
    l->attempt = (int)c->r->trial_count + 1;
    l->timeout_s = c->o->trial_timeout_s;
    l->sample_interval_s = c->r->sample_interval_s;
    l->kill_grace_s = c->o->kill_grace_s > 0 ? c->o->kill_grace_s : OOM_DEFAULT_KILL_GRACE;
    l->output_wait_s = l->kill_grace_s; /* a trial's output never holds the search longer */
    l->gpu = c->gpu;
    l->patterns = c->patterns;
    l->stop = c->o->stop;
    l->relay = c->o->relay;
    l->foreground = c->o->foreground;
    l->on_event = c->o->on_event;
    l->user = c->o->user;
    err = oomi_launch_run(l);
    c->r->launches++;
    if (err && !l->exec_failed)
        return err;
    if (!(t = oomi_malloc(sizeof(*t))))
        return oomi_nomem();
    if (!(grown = oomi_reallocarray(c->r->trials, c->r->trial_count + 1, sizeof(*grown)))) {
        oomi_free(t);
        return oomi_nomem();
    }
    c->r->trials = grown;
    grown[c->r->trial_count++] = t;
    *t = (oom_probe_trial){OOM_PROBE_TRIAL_VERSION,
                           batch,
                           l->peak_bytes,
                           l->exit_code,
                           l->oom,
                           l->timed_out,
                           l->duration_s};
    return err;
}

/* Why a trial ends the probe, or OOM_OK when the search goes on. */
static int judge_trial(const oomi_launch *l, int batch, const char *cmd)
{
    if (l->exec_failed)
        return oomi_fail(OOM_EJOB, "%s (exit %d)", l->message, l->exit_code);
    if (l->stop_signal && l->timed_out) /* the signal came while the timed-out trial ended */
        return oomi_fail(OOM_EINTERRUPTED,
                         "the trial at batch %d ran past the trial timeout (%g s); stopped by "
                         "signal %d as it ended",
                         batch, l->timeout_s, l->stop_signal);
    if (l->stop_signal)
        return oomi_fail(OOM_EINTERRUPTED, "stopped by signal %d during the trial at batch %d",
                         l->stop_signal, batch);
    if (l->tty_wait)
        return oomi_fail_tty_wait(l);
    if (l->timed_out)
        return oomi_fail(OOM_EJOB, "the trial at batch %d ran past the trial timeout (%g s)", batch,
                         l->timeout_s);
    if (l->exit_code != 0 && !l->oom)
        return oomi_fail(OOM_EJOB,
                         "'%s' failed at batch %d with exit %d, not by running out of memory "
                         "(its output is above)",
                         cmd, batch, l->exit_code);
    return OOM_OK;
}

static void fill_prediction(oom_probe_result *r, const oom_probe_options *o)
{
    size_t i;
    if (!o->search.prediction.valid || r->recommended_batch < 1)
        return;
    r->has_prediction = 1;
    r->predicted_peak_bytes = oom_probe_fit_peak(&o->search.prediction, r->recommended_batch);
    r->measured_peak_bytes = r->fit.valid ? oom_probe_fit_peak(&r->fit, r->recommended_batch) : 0;
    for (i = 0; i < r->trial_count; i++)
        if (r->trials[i]->batch == r->recommended_batch && r->trials[i]->peak_bytes != OOM_UNKNOWN)
            r->measured_peak_bytes = (double)r->trials[i]->peak_bytes;
    if (r->measured_peak_bytes > 0)
        r->prediction_error =
            (r->predicted_peak_bytes - r->measured_peak_bytes) / r->measured_peak_bytes;
    else
        r->has_prediction = 0;
}

/* The budget came with what others held before the first trial left out; memory they took
 * while a trial ran (beside the job and its children) comes off it too. */
static void others_grew(struct probe_ctx *c, const oomi_launch *l, oom_probe_search *search)
{
    uint64_t before, growth, given = c->o->search.usable_bytes;
    char a[16], b[16];

    if (!l->others_peak_bytes || l->others_gpu >= c->n_start ||
        (before = c->start_used[l->others_gpu]) == OOM_UNKNOWN || l->others_peak_bytes <= before)
        return;
    growth = l->others_peak_bytes - before;
    if (growth <= c->others_growth)
        return;
    c->others_growth = growth;
    search->usable_bytes = growth < given ? given - growth : 0;
    c->r->usable_bytes = search->usable_bytes;
    oomi_notice("other processes took %s more GPU memory during the trial at batch %d: the "
                "usable budget is now %s",
                oom_format_size(a, sizeof(a), growth), l->batch,
                oom_format_size(b, sizeof(b), search->usable_bytes));
}

static int search_loop(struct probe_ctx *c)
{
    oom_probe_step st = OOM_PROBE_STEP_INIT;
    oom_probe_search search = c->o->search; /* its layout is the options' version's */
    oomi_launch l;
    int err;

    search.version = OOM_PROBE_SEARCH_VERSION;
    for (;;) {
        if ((err = oom_probe_search_step(&st, &search, (const oom_probe_trial *const *)c->r->trials,
                                         c->r->trial_count)))
            return err;
        c->r->fit = st.fit;
        c->r->recommended_batch = st.recommended_batch;
        c->r->max_batch = st.max_batch;
        if (st.done)
            break;
        if (c->o->stop && *c->o->stop) { /* a signal between trials: launch nothing more */
            c->r->stop_signal = (int)*c->o->stop;
            return oomi_fail(OOM_EINTERRUPTED, "stopped by signal %d", c->r->stop_signal);
        }
        if ((err = run_trial(c, st.next_batch, &l)) ||
            (err = judge_trial(&l, st.next_batch, c->job->argv[0]))) {
            c->r->stop_signal = l.stop_signal;
            return err;
        }
        others_grew(c, &l, &search);
    }
    if (c->r->recommended_batch < 1) {
        int smallest = INT_MAX;
        size_t i;
        for (i = 0; i < c->r->trial_count; i++)
            smallest = c->r->trials[i]->batch < smallest ? c->r->trials[i]->batch : smallest;
        return oomi_fail(OOM_ENOFIT, "no batch size fits in %zu trial(s): batch %d %s",
                         c->r->trial_count, smallest,
                         c->r->max_batch ? "runs but its peak is over the budget"
                                         : "runs out of memory");
    }
    return OOM_OK;
}

int oom_probe(oom_probe_result **out, const oom_job *job, const oom_probe_options *o)
{
    struct probe_ctx c = {.job = job, .o = o};
    oom_patterns *own = NULL;
    int err;

    if (!out || !job || !o || !job->argv || !job->argv[0])
        return oomi_fail(OOM_EINVAL, "probe: no command given");
    *out = NULL;
    if ((err = oomi_check_version(job->version, OOM_JOB_VERSION, "oom_job")) ||
        (err = oomi_check_version(o->version, OOM_PROBE_OPTIONS_VERSION, "oom_probe_options")) ||
        (o->relay &&
         (err = oomi_check_version(o->relay->version, OOM_JOB_RELAY_VERSION, "oom_job_relay"))))
        return err;
    if (o->sample_interval_s < 0 || o->trial_timeout_s < 0 || o->kill_grace_s < 0)
        return oomi_fail(OOM_EINVAL, "probe: negative interval, timeout or grace");
    if (!(c.patterns = o->patterns) && (err = oom_patterns_load(&own, NULL)))
        return err;
    c.patterns = c.patterns ? c.patterns : own;
    if (!(c.r = oomi_calloc(1, sizeof(*c.r)))) {
        oom_patterns_free(own);
        return oomi_nomem();
    }
    c.r->version = OOM_PROBE_RESULT_VERSION;
    c.r->fit.version = OOM_PROBE_FIT_VERSION;
    c.r->sample_interval_s =
        o->sample_interval_s > 0 ? o->sample_interval_s : OOM_DEFAULT_SAMPLE_INTERVAL;
    c.r->usable_bytes = o->search.usable_bytes;
    c.r->seq = o->seq;
    if (!(err = open_gpu(&c)))
        err = search_loop(&c);
    fill_prediction(c.r, o);
    oom_gpu_close(c.gpu);
    oom_patterns_free(own);
    if (err && err != OOM_ENOFIT && err != OOM_EJOB && err != OOM_EINTERRUPTED) {
        oom_probe_result_free(c.r);
        return err;
    }
    *out = c.r;
    return err;
}

/* ---- JSON -------------------------------------------------------------------------------------
 */

static json_object *fit_json(const oom_probe_fit *f)
{
    json_object *o;
    if (!f->valid || !(o = json_object_new_object()))
        return NULL;
    oomi_json_put(o, "fixed_bytes", json_object_new_int64(llround(f->fixed_bytes)));
    oomi_json_put(o, "per_sample_bytes", json_object_new_int64(llround(f->per_sample_bytes)));
    if (f->quadratic)
        oomi_json_put(o, "per_sample2_bytes", json_object_new_int64(llround(f->per_sample2_bytes)));
    return o;
}

static json_object *trial_json(const oom_probe_trial *t)
{
    json_object *o = json_object_new_object();
    if (!o)
        return NULL;
    oomi_json_put(o, "batch", json_object_new_int(t->batch));
    oomi_json_put(o, "peak_bytes", oomi_json_bytes(t->peak_bytes));
    oomi_json_put(o, "exit", json_object_new_int(t->exit_code));
    oomi_json_put(o, "oom", json_object_new_boolean(t->oom));
    oomi_json_put(o, "timed_out", json_object_new_boolean(t->timed_out));
    oomi_json_put(o, "duration_s", oomi_json_number(t->duration_s, 3));
    return o;
}

static json_object *prediction_json(const oom_probe_result *r)
{
    json_object *o;
    if (!r->has_prediction || !(o = json_object_new_object()))
        return NULL;
    oomi_json_put(o, "batch", json_object_new_int(r->recommended_batch));
    oomi_json_put(o, "predicted_peak_bytes",
                  json_object_new_int64(llround(r->predicted_peak_bytes)));
    oomi_json_put(o, "measured_peak_bytes", json_object_new_int64(llround(r->measured_peak_bytes)));
    oomi_json_put(o, "error", oomi_json_number(r->prediction_error, 4));
    return o;
}

#define MAX_INVERSIONS 64

/* The pairs of measured trials where the smaller batch peaked above the larger one (indices into
 * the sorted points); returns how many (at most MAX_INVERSIONS). */
static size_t inversions(const struct pt *p, size_t k, size_t pairs[][2])
{
    size_t i, j, n = 0;
    for (i = 0; i < k; i++)
        for (j = i + 1; j < k && n < MAX_INVERSIONS; j++)
            if (p[i].peak > p[j].peak) {
                pairs[n][0] = i;
                pairs[n++][1] = j;
            }
    return n;
}

/* "peaks_monotone" (null with fewer than two measured peaks), "non_monotone" (the pairs),
 * "bisected" (the search bisected instead of following a fit). */
static void irregular_json(json_object *root, const oom_probe_result *r)
{
    const oom_probe_trial *const *t = (const oom_probe_trial *const *)r->trials;
    struct pt pts[64];
    size_t pairs[MAX_INVERSIONS][2], k, n, i;
    oom_probe_fit fit, envelope;
    json_object *arr = json_object_new_array();

    k = collect_points(pts, t, r->trial_count > 64 ? 64 : r->trial_count, SIZE_MAX);
    n = inversions(pts, k, pairs);
    for (i = 0; arr && i < n; i++) {
        json_object *o = json_object_new_object();
        oomi_json_put(o, "batch", json_object_new_int((int)pts[pairs[i][0]].b));
        oomi_json_put(o, "peak_bytes", json_object_new_int64(llround(pts[pairs[i][0]].peak)));
        oomi_json_put(o, "larger_batch", json_object_new_int((int)pts[pairs[i][1]].b));
        oomi_json_put(o, "larger_peak_bytes",
                      json_object_new_int64(llround(pts[pairs[i][1]].peak)));
        json_object_array_add(arr, o);
    }
    oomi_json_put(root, "peaks_monotone", k < 2 ? NULL : json_object_new_boolean(n == 0));
    oomi_json_put(root, "non_monotone", arr);
    /* the search's own fit at the end, made again from the trials (at the default tolerance: the
     * result keeps the envelope it reported instead) */
    fit = fit_trials(t, r->trial_count, SIZE_MAX, DEFAULT_TOLERANCE, r->usable_bytes);
    oomi_json_put(root, "bisected",
                  json_object_new_boolean(irregular(t, r->trial_count, &fit, &envelope)));
}

int oom_probe_describe_peaks(char **out, const oom_probe_result *r)
{
    const oom_probe_trial *const *t;
    struct pt pts[64];
    size_t pairs[MAX_INVERSIONS][2], k, n, i;
    oom_probe_fit fit, envelope;
    oomi_sb sb = OOMI_SB_INIT;
    char a[16], b[16], c[16];

    if (!out || !r)
        return oomi_fail(OOM_EINVAL, "probe peaks: missing argument");
    *out = NULL;
    t = (const oom_probe_trial *const *)r->trials;
    k = collect_points(pts, t, r->trial_count > 64 ? 64 : r->trial_count, SIZE_MAX);
    n = inversions(pts, k, pairs);
    fit = fit_trials(t, r->trial_count, SIZE_MAX, DEFAULT_TOLERANCE, r->usable_bytes);
    if (!irregular(t, r->trial_count, &fit, &envelope))
        return OOM_OK;
    if (n)
        oomi_sb_printf(&sb, "not monotone in the batch:");
    for (i = 0; i < n; i++)
        oomi_sb_printf(
            &sb, "%s batch %d (%s) above batch %d (%s)", i ? "," : "", (int)pts[pairs[i][0]].b,
            oom_format_size(a, sizeof(a), (uint64_t)pts[pairs[i][0]].peak), (int)pts[pairs[i][1]].b,
            oom_format_size(b, sizeof(b), (uint64_t)pts[pairs[i][1]].peak));
    if (!n)
        oomi_sb_printf(&sb,
                       "no sensible curve fits them (peak = %s%s %s %s x batch %s %s x batch^2)",
                       fit.fixed_bytes < 0 ? "-" : "",
                       oom_format_size(a, sizeof(a), (uint64_t)fabs(fit.fixed_bytes)),
                       fit.per_sample_bytes < 0 ? "-" : "+",
                       oom_format_size(b, sizeof(b), (uint64_t)fabs(fit.per_sample_bytes)),
                       fit.per_sample2_bytes < 0 ? "-" : "+",
                       oom_format_size(c, sizeof(c), (uint64_t)fabs(fit.per_sample2_bytes)));
    oomi_sb_printf(&sb, "; the search bisected between the largest batch under the budget and the "
                        "smallest over it");
    return oomi_sb_finish(&sb, out);
}

int oom_probe_to_json(char **out, const oom_probe_result *r)
{
    json_object *root, *trials;
    size_t i;
    int err;

    if (!out || !r)
        return oomi_fail(OOM_EINVAL, "probe json: missing argument");
    *out = NULL;
    if ((err = oomi_check_version(r->version, OOM_PROBE_RESULT_VERSION, "oom_probe_result")))
        return err;
    if (!(root = json_object_new_object()) || !(trials = json_object_new_array())) {
        json_object_put(root);
        return oomi_nomem();
    }
    oomi_json_put(root, "recommended_batch",
                  r->recommended_batch ? json_object_new_int(r->recommended_batch) : NULL);
    oomi_json_put(root, "max_batch", r->max_batch ? json_object_new_int(r->max_batch) : NULL);
    oomi_json_put(root, "launches", json_object_new_int(r->launches));
    oomi_json_put(root, "sample_interval_s", oomi_json_number(r->sample_interval_s, 3));
    oomi_json_put(root, "usable_bytes", oomi_json_bytes(r->usable_bytes));
    oomi_json_put(root, "peaks_measured", json_object_new_boolean(r->peaks_measured));
    oomi_json_put(root, "gpu", r->gpu_name[0] ? json_object_new_string(r->gpu_name) : NULL);
    oomi_json_put(root, "seq", r->seq ? json_object_new_int(r->seq) : NULL);
    for (i = 0; i < r->trial_count; i++)
        json_object_array_add(trials, trial_json(r->trials[i]));
    oomi_json_put(root, "trials", trials);
    oomi_json_put(root, "fit", fit_json(&r->fit));
    irregular_json(root, r);
    oomi_json_put(root, "prediction", prediction_json(r));
    return oomi_json_finish(out, root);
}
