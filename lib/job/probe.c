/*
 * probe.c - the probe driver, which launches the job once per trial the search
 * (probe_search.c) asks for, and its result as JSON and text.
 */
#include "job/job.h"

#include <json-c/json.h>

#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

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
    uint64_t start_room[16]; /* total - driver's reserve - start_used; UNKNOWN: not read */
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
             c->n_start++) {
            const oom_gpu_info *g = list->gpus[c->n_start];
            uint64_t held = g->lost ? 0 : g->used_bytes + oom_gpu_reserved_bytes(g);
            c->start_used[c->n_start] = g->lost ? OOM_UNKNOWN : g->used_bytes;
            c->start_room[c->n_start] =
                g->lost || held > g->total_bytes ? OOM_UNKNOWN : g->total_bytes - held;
        }
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
 * while a trial ran (beside the job and its children) lowers it as far as the GPU's room left
 * beside them (total - reserve - others - margin) falls under it. A budget smaller than the card
 * (--vram) keeps what still fits: the H200 of 2026-11-28 probed for a 24 GiB card beside 56 GiB
 * of other jobs, with 80 GiB still free, and version 1's rule left a budget of 0. */
static void others_grew(struct probe_ctx *c, const oomi_launch *l, oom_probe_search *search)
{
    uint64_t before, growth, room, left, given = c->o->search.usable_bytes;
    char a[16], b[16];

    if (!l->others_peak_bytes || l->others_gpu >= c->n_start ||
        (before = c->start_used[l->others_gpu]) == OOM_UNKNOWN || l->others_peak_bytes <= before)
        return;
    growth = l->others_peak_bytes - before;
    if (growth <= c->others_growth)
        return;
    c->others_growth = growth;
    room = c->start_room[l->others_gpu];
    if (c->o->version < 2 || room == OOM_UNKNOWN)
        left = growth < given ? given - growth : 0;
    else
        left = room > growth + c->o->safety_margin_bytes ? room - growth - c->o->safety_margin_bytes
                                                         : 0;
    if (left >= given) {
        oomi_notice("other processes took %s more GPU memory during the trial at batch %d; the "
                    "usable budget (%s) still fits beside them",
                    oom_format_size(a, sizeof(a), growth), l->batch,
                    oom_format_size(b, sizeof(b), given));
        return;
    }
    search->usable_bytes = left;
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
    if (o->sample_interval_s < 0 || o->trial_timeout_s < 0)
        return oomi_fail(OOM_EINVAL, "probe: negative interval or timeout");
    if ((err = oomi_check_kill_grace(o->kill_grace_s, "probe")))
        return err;
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
static size_t inversions(const oomi_pt *p, size_t k, size_t pairs[][2])
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

/* The measured points and how the search read them (at the default tolerance: the result keeps
 * the fit it reported, made at the search's) */
struct peaks_view {
    oomi_pt pts[OOMI_PROBE_POINTS];
    size_t k, pairs[MAX_INVERSIONS][2], n;
    oomi_peaks v;
};

static void read_result_peaks(struct peaks_view *w, const oom_probe_result *r)
{
    w->k = oomi_probe_points(w->pts, (const oom_probe_trial *const *)r->trials, r->trial_count,
                             SIZE_MAX);
    w->n = inversions(w->pts, w->k, w->pairs);
    oomi_probe_read_peaks(&w->v, w->pts, w->k, 0, r->usable_bytes);
}

static const char *const peaks_kind[] = {"regular", "noisy", "stepped"};

/* "peaks_monotone" (null with fewer than two measured peaks), "non_monotone" (the pairs),
 * "peaks" (how the search read them), "allowance" (the fraction of the budget it kept free),
 * "bisected" (it bisected instead of following a fit). */
static void irregular_json(json_object *root, const oom_probe_result *r)
{
    struct peaks_view w;
    json_object *arr = json_object_new_array();
    size_t i;

    read_result_peaks(&w, r);
    for (i = 0; arr && i < w.n; i++) {
        json_object *o = json_object_new_object();
        const oomi_pt *a = &w.pts[w.pairs[i][0]], *b = &w.pts[w.pairs[i][1]];
        oomi_json_put(o, "batch", json_object_new_int((int)a->b));
        oomi_json_put(o, "peak_bytes", json_object_new_int64(llround(a->peak)));
        oomi_json_put(o, "larger_batch", json_object_new_int((int)b->b));
        oomi_json_put(o, "larger_peak_bytes", json_object_new_int64(llround(b->peak)));
        json_object_array_add(arr, o);
    }
    oomi_json_put(root, "peaks_monotone", w.k < 2 ? NULL : json_object_new_boolean(w.n == 0));
    oomi_json_put(root, "non_monotone", arr);
    oomi_json_put(root, "peaks", w.k ? json_object_new_string(peaks_kind[w.v.kind]) : NULL);
    oomi_json_put(root, "allowance", w.k ? oomi_json_number(w.v.allowance, 4) : NULL);
    oomi_json_put(root, "bisected", json_object_new_boolean(w.v.kind == OOMI_PEAKS_STEPPED));
}

int oom_probe_describe_peaks(char **out, const oom_probe_result *r)
{
    struct peaks_view w;
    const oom_probe_fit *fit = &r->fit;
    oomi_sb sb = OOMI_SB_INIT;
    char a[16], b[16], c[16];
    size_t i;

    if (!out || !r)
        return oomi_fail(OOM_EINVAL, "probe peaks: missing argument");
    *out = NULL;
    read_result_peaks(&w, r);
    if (w.v.kind == OOMI_PEAKS_REGULAR)
        return OOM_OK;
    if (w.n)
        oomi_sb_printf(&sb, "not monotone in the batch:");
    for (i = 0; i < w.n; i++)
        oomi_sb_printf(&sb, "%s batch %d (%s) above batch %d (%s)", i ? "," : "",
                       (int)w.pts[w.pairs[i][0]].b,
                       oom_format_size(a, sizeof(a), (uint64_t)w.pts[w.pairs[i][0]].peak),
                       (int)w.pts[w.pairs[i][1]].b,
                       oom_format_size(b, sizeof(b), (uint64_t)w.pts[w.pairs[i][1]].peak));
    if (w.v.kind == OOMI_PEAKS_STEPPED) {
        oomi_sb_printf(&sb, "; the search bisected between the largest batch under the budget "
                            "and the smallest over it");
        return oomi_sb_finish(&sb, out);
    }
    if (w.n)
        oomi_sb_printf(&sb, "; ");
    else if (fit->valid && fit->fixed_bytes == 0 && !fit->quadratic)
        oomi_sb_printf(
            &sb, "no sensible curve fits them (peak = %s%s %s %s x batch %s %s x batch^2); ",
            w.v.lsq.c[0] < 0 ? "-" : "",
            oom_format_size(a, sizeof(a), (uint64_t)fabs(w.v.lsq.c[0])),
            w.v.lsq.c[1] < 0 ? "-" : "+",
            oom_format_size(b, sizeof(b), (uint64_t)fabs(w.v.lsq.c[1] / w.v.lsq.scale)),
            w.v.lsq.terms == 3 && w.v.lsq.c[2] < 0 ? "-" : "+",
            oom_format_size(c, sizeof(c),
                            w.v.lsq.terms == 3
                                ? (uint64_t)fabs(w.v.lsq.c[2] / (w.v.lsq.scale * w.v.lsq.scale))
                                : 0));
    oomi_sb_printf(&sb,
                   "the peaks vary from launch to launch: the search fitted a %s through "
                   "all %zu measured trials",
                   w.v.lsq.terms == 3 ? "parabola" : "line", w.k);
    if (w.v.scatter > 0)
        oomi_sb_printf(&sb, " (they scatter by %.2f %% around it)", 100 * w.v.scatter / 2);
    oomi_sb_printf(&sb, " and kept %.1f %% of the budget free", 100 * w.v.allowance);
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
