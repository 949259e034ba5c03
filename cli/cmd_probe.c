/* cmd_probe.c - `oomless probe -- CMD...`: run the job at a few batch sizes, measure its peak. */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage_text[] =
    "usage: oomless probe [OPTIONS] -- CMD [ARG...]\n\n"
    "Runs your own training command at a few batch sizes, measures its real peak GPU memory\n"
    "(NVML, the whole process tree) and finds the largest batch that fits under the budget:\n"
    "two small trials fit peak = fixed + per_sample x batch, the largest batch the line allows\n"
    "is verified, and the search refines only when the line is off (quadratic, bisection).\n"
    "The command is run directly (no shell). In its arguments {batch}, {accum}, {seq},\n"
    "{effective} and {attempt} are replaced; OOMLESS_BATCH_SIZE, OOMLESS_GRAD_ACCUM,\n"
    "OOMLESS_SEQ_LEN, OOMLESS_ATTEMPT are set. Without NVML the search goes on by exit status\n"
    "alone (peaks N/A). The measured line is saved as a calibration record. Signals and the\n"
    "terminal are handled as by 'oomless run' (see its --help).\n\n"
    "Options:\n"
    "  --json                        print one JSON document (the job's stdout goes to stderr)\n"
    "  --start-batch N               first trial (default 1, then 2)\n"
    "  --max-trials N                launches at most (default 8)\n"
    "  --max-batch N                 never try a batch above N\n"
    "  --grad-accum N                value of {accum} / OOMLESS_GRAD_ACCUM (default 1)\n"
    "  --seq-max N                   value of {seq}: probe at the longest sequence (worst case)\n"
    "  --trial-timeout SECONDS       stop a trial after this long (default: no limit)\n"
    "  --sample-interval SECONDS     NVML sampling period (default 0.05)\n"
    "  --kill-grace SECONDS          SIGTERM -> SIGKILL grace on timeout or signal (default 10,\n"
    "                                at most 3600); a second signal (Ctrl-C) kills at once\n"
    "  --calibration FILE|off        where to save the measured line (default\n"
    "                                $XDG_CACHE_HOME/oomless/calibration.jsonl)\n"
    "  --workload TEXT               workload part of the calibration key (default seq=N or "
    "\"\")\n"
    "  --patterns FILE               OOM message patterns (default data/oom-patterns.txt)\n"
    "  --model NAME|PATH             the estimator's model: its prediction picks the first trial\n"
    "                                and is compared with the measurement\n"
    "  --set KEY=VALUE               another estimator option (method=lora, precision=bf16...;\n"
    "                                see 'oomless estimate --help'); --seq-max sets "
    "seq\n" CLI_BUDGET_HELP "  -h, --help                    this help\n\n"
    "Exit codes: 0 found, 1 nothing fits or a trial failed (not by OOM), 2 usage,\n"
    "3 environment, 126/127 the command cannot be run, 128+N stopped by signal N.\n";

enum {
    OPT_START = OPT_FIRST_FREE,
    OPT_TRIALS,
    OPT_MAXB,
    OPT_ACCUM,
    OPT_SEQ,
    OPT_TIMEOUT,
    OPT_INTERVAL,
    OPT_GRACE,
    OPT_CALIB,
    OPT_WORKLOAD,
    OPT_PATTERNS,
    OPT_JSON,
    OPT_MODEL,
    OPT_SET
};

struct probe_args {
    oom_probe_options o;
    struct cli_budget budget;
    const char *calibration, *workload, *patterns, *model;
    const char *sets[32]; /* --set KEY=VALUE for the estimator's workload */
    int nsets, json;
    oom_workload *w; /* with --model: the estimator's workload */
};

static int take_option(struct probe_args *a, int opt, const char *arg)
{
    long v = 0;
    int rc = EXIT_OK;
    switch (opt) {
    case OPT_START:
        rc = cli_whole_number(&v, "probe", arg, 1, "--start-batch");
        a->o.search.start_batch = (int)v;
        break;
    case OPT_TRIALS:
        rc = cli_whole_number(&v, "probe", arg, 1, "--max-trials");
        a->o.search.max_trials = (int)v;
        break;
    case OPT_MAXB:
        rc = cli_whole_number(&v, "probe", arg, 1, "--max-batch");
        a->o.search.max_batch = (int)v;
        break;
    case OPT_ACCUM:
        rc = cli_whole_number(&v, "probe", arg, 1, "--grad-accum");
        a->o.grad_accum = (int)v;
        break;
    case OPT_SEQ:
        rc = cli_whole_number(&v, "probe", arg, 1, "--seq-max");
        a->o.seq = (int)v;
        break;
    case OPT_TIMEOUT:
        return cli_seconds(&a->o.trial_timeout_s, "probe", arg, "--trial-timeout", 0,
                           CLI_MAX_TIMEOUT);
    case OPT_INTERVAL:
        return cli_seconds(&a->o.sample_interval_s, "probe", arg, "--sample-interval", 0.001,
                           CLI_MAX_TIMEOUT);
    case OPT_GRACE:
        return cli_seconds(&a->o.kill_grace_s, "probe", arg, "--kill-grace", 0, OOM_MAX_KILL_GRACE);
    case OPT_CALIB:
        a->calibration = arg;
        break;
    case OPT_WORKLOAD:
        a->workload = arg;
        break;
    case OPT_PATTERNS:
        a->patterns = arg;
        break;
    case OPT_JSON:
        a->json = 1;
        break;
    case OPT_MODEL:
        a->model = arg;
        break;
    case OPT_SET:
        if (!strchr(arg, '=') || a->nsets == (int)(sizeof(a->sets) / sizeof(a->sets[0])))
            return cli_usage_error("probe", "--set '%s' must be KEY=VALUE (at most 32)", arg);
        a->sets[a->nsets++] = arg;
        break;
    default:
        return cli_usage_error("probe", "unknown option");
    }
    return rc;
}

static int take(void *ctx, int opt, const char *arg)
{
    return take_option(ctx, opt, arg);
}

static int parse_args(struct probe_args *a, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"model", required_argument, NULL, OPT_MODEL},
        {"set", required_argument, NULL, OPT_SET},
        {"start-batch", required_argument, NULL, OPT_START},
        {"max-trials", required_argument, NULL, OPT_TRIALS},
        {"max-batch", required_argument, NULL, OPT_MAXB},
        {"grad-accum", required_argument, NULL, OPT_ACCUM},
        {"seq-max", required_argument, NULL, OPT_SEQ},
        {"trial-timeout", required_argument, NULL, OPT_TIMEOUT},
        {"sample-interval", required_argument, NULL, OPT_INTERVAL},
        {"kill-grace", required_argument, NULL, OPT_GRACE},
        {"calibration", required_argument, NULL, OPT_CALIB},
        {"workload", required_argument, NULL, OPT_WORKLOAD},
        {"patterns", required_argument, NULL, OPT_PATTERNS},
        {"help", no_argument, NULL, 'h'},
        CLI_BUDGET_LONGOPTS,
        {NULL, 0, NULL, 0}};
    return cli_parse_job_options("probe", argc, argv, longopts, usage_text, &a->budget, take, a);
}

static double mib(uint64_t b)
{
    return (double)b / (double)OOM_MiB;
}

static void on_event(const oom_job_event *ev, void *user)
{
    char peak[16] = "N/A";
    (void)user;
    if (ev->peak_bytes != OOM_UNKNOWN)
        oom_format_size(peak, sizeof(peak), ev->peak_bytes);
    if (ev->kind == OOM_EVENT_LAUNCH)
        cli_say("oomless probe: trial %d: batch %d (pid %ld)\n", ev->attempt, ev->batch, ev->pid);
    else if (ev->kind == OOM_EVENT_OOM || ev->kind == OOM_EVENT_EXIT)
        cli_say("oomless probe: trial %d: batch %d: peak %s, exit %d%s (%.1f s)\n", ev->attempt,
                ev->batch, peak, ev->exit_code, ev->kind == OOM_EVENT_OOM ? ", out of memory" : "",
                ev->duration_s);
    else if (ev->kind == OOM_EVENT_SIGNAL)
        cli_say("oomless probe: passing %s to the trial%s\n", cli_signal_name(ev->signal),
                cli_again_hint(ev->signal));
    else if (ev->kind == OOM_EVENT_STOP) {
        cli_say("oomless probe: the trial stopped (%s)%s\n", cli_signal_name(ev->signal),
                ev->signal == SIGSTOP ? "" : "; oomless stops with it");
        cli_supervise_stopped(ev);
    } else if (ev->kind == OOM_EVENT_CONTINUE)
        cli_say("oomless probe: the trial continues\n");
    else if (ev->kind == OOM_EVENT_KILL)
        cli_say("oomless probe: %s: SIGKILL\n", cli_kill_reason("the trial is still running"));
}

static void print_command(FILE *f, char **cmd)
{
    int i;
    for (i = 0; cmd[i]; i++)
        fprintf(f, i ? " %s" : "%s", cmd[i]);
}

static void print_text(FILE *f, const oom_probe_result *r, char **cmd)
{
    char a[16], b[16], *irregular = NULL;
    size_t i, seen, ran;

    fprintf(f, "Command:   ");
    print_command(f, cmd);
    fprintf(f, "\nGPU:       %s; usable %s; NVML sampled every %.0f ms\n",
            r->gpu_name[0] ? r->gpu_name : "N/A", oom_format_size(a, sizeof(a), r->usable_bytes),
            r->sample_interval_s * 1000.0);
    if (!r->peaks_measured)
        fprintf(f,
                "Peaks:     N/A (%s): the batch limit comes from exit status alone and the "
                "safety margin cannot be checked\n",
                r->nvml_error ? r->nvml_error : "not sampled");
    for (i = 0, seen = 0, ran = 0; i < r->trial_count; i++) {
        seen += r->trials[i]->peak_bytes != OOM_UNKNOWN;
        ran += r->trials[i]->exit_code == 0;
    }
    if (r->peaks_measured && ran && !seen)
        fprintf(f,
                "Peaks:     N/A: NVML never listed the job's processes (a container with its own "
                "pid namespace?); the limit comes from exit status alone\n");
    fprintf(f, "\n%5s %7s %12s %5s %4s %9s\n", "TRIAL", "BATCH", "PEAK", "EXIT", "OOM", "TIME");
    for (i = 0; i < r->trial_count; i++) {
        const oom_probe_trial *t = r->trials[i];
        strcpy(a, "N/A");
        if (t->peak_bytes != OOM_UNKNOWN)
            snprintf(a, sizeof(a), "%.0f MiB", mib(t->peak_bytes));
        fprintf(f, "%5zu %7d %12s %5d %4s %7.1f s%s\n", i + 1, t->batch, a, t->exit_code,
                t->oom ? "yes" : "-", t->duration_s, t->timed_out ? " (timed out)" : "");
    }
    if (oom_probe_describe_peaks(&irregular, r) == OOM_OK && irregular)
        fprintf(f, "\nPeaks:     %s\n", irregular);
    if (r->fit.valid && r->fit.quadratic)
        fprintf(f, "\nFit:       peak = %.1f MiB + %.3f MiB x batch + %.5f MiB x batch^2\n",
                r->fit.fixed_bytes / OOM_MiB, r->fit.per_sample_bytes / OOM_MiB,
                r->fit.per_sample2_bytes / OOM_MiB);
    else if (r->fit.valid)
        fprintf(f, "\nFit:       peak = %.1f MiB + %.3f MiB x batch%s\n",
                r->fit.fixed_bytes / OOM_MiB, r->fit.per_sample_bytes / OOM_MiB,
                irregular && r->fit.fixed_bytes == 0
                    ? " (a bound: no trial measured more per sample)"
                    : "");
    fprintf(f, "%sRecommended batch: %d (largest that ran: %d) after %d launch%s\n",
            r->fit.valid ? "" : "\n", r->recommended_batch, r->max_batch, r->launches,
            r->launches == 1 ? "" : "es");
    if (r->has_prediction)
        fprintf(f, "Estimate:  %s predicted vs %s measured at batch %d (%+.1f%%)\n",
                oom_format_size(a, sizeof(a), (uint64_t)r->predicted_peak_bytes),
                oom_format_size(b, sizeof(b), (uint64_t)r->measured_peak_bytes),
                r->recommended_batch, r->prediction_error * 100.0);
    oom_free(irregular);
}

/* Saves the measured line; OOM_OK, or the error (printed) when the record was not saved. */
static int save_calibration(const struct probe_args *a, const oom_probe_result *r,
                            const char *const *cmd)
{
    oom_calibration rec = OOM_CALIBRATION_INIT;
    char workload[32] = "", *path = NULL;
    int err;

    if ((a->calibration && !strcmp(a->calibration, "off")) || !r->fit.valid || !r->gpu_name[0])
        return OOM_OK;
    if (!a->workload && a->o.seq)
        snprintf(workload, sizeof(workload), "seq=%d", a->o.seq);
    rec.gpu = (char *)r->gpu_name;
    rec.workload = a->workload ? (char *)a->workload : workload;
    rec.fit = r->fit;
    rec.recommended_batch = r->recommended_batch;
    rec.max_batch = r->max_batch;
    rec.usable_bytes = r->usable_bytes;
    rec.time = (double)time(NULL);
    if ((err = oom_calibration_command_key(&rec.command, cmd)) ||
        (err = oom_calibration_save(a->calibration, &rec))) {
        cli_fail("probe", err);
        oom_free(rec.command);
        return err;
    }
    if (!a->calibration && oom_calibration_default_path(&path) == OOM_OK)
        cli_notice("calibration saved to %s", path);
    else if (a->calibration)
        cli_notice("calibration saved to %s", a->calibration);
    oom_free(path);
    oom_free(rec.command);
    return OOM_OK;
}

static int exit_for(int err, const oom_probe_result *r)
{
    const oom_probe_trial *last = r && r->trial_count ? r->trials[r->trial_count - 1] : NULL;
    if (err == OOM_EINTERRUPTED && r && r->stop_signal)
        return 128 + r->stop_signal;
    if (err == OOM_EJOB && last && (last->exit_code == 127 || last->exit_code == 126))
        return last->exit_code; /* the command could not be run */
    return cli_exit_code(err);
}

/* The estimator's device peak at `batch` (0 when it fails). */
static double predicted_peak(oom_workload *w, int batch)
{
    oom_knobs k = OOM_KNOBS_INIT;
    oom_estimate e = OOM_ESTIMATE_INIT;
    oom_workload_get_knobs(&k, w);
    k.batch = batch;
    if (oom_workload_set_knobs(w, &k) || oom_estimate_run(&e, w))
        return 0;
    return (double)e.device_peak;
}

/* --model: the workload, and the estimator's line through batch 1 and 9 as the prediction. */
static int make_prediction(struct probe_args *a, const oom_gpu_profile *gpu)
{
    char seq[32], key[64];
    double p1, p9;
    int err, i;

    if (!a->model)
        return EXIT_OK;
    if ((err = oom_workload_create(&a->w)) || (err = oom_workload_set(a->w, "model", a->model)))
        return cli_fail("probe", err);
    for (i = 0; i < a->nsets; i++) {
        size_t n = (size_t)(strchr(a->sets[i], '=') - a->sets[i]);
        snprintf(key, sizeof(key), "%.*s", (int)(n < sizeof(key) ? n : sizeof(key) - 1),
                 a->sets[i]);
        if ((err = oom_workload_set(a->w, key, a->sets[i] + n + 1)))
            return cli_fail("probe", err);
    }
    snprintf(seq, sizeof(seq), "%d", a->o.seq);
    if ((a->o.seq && (err = oom_workload_set(a->w, "seq", seq))) ||
        (err = oom_workload_set_gpu(a->w, gpu)) || (err = oom_workload_validate(a->w)))
        return cli_fail("probe", err);
    p1 = predicted_peak(a->w, 1);
    p9 = predicted_peak(a->w, 9);
    if (p1 <= 0 || p9 <= p1)
        return cli_usage_error("probe", "the estimate for --model '%s' failed: %s", a->model,
                               oom_last_message());
    a->o.search.prediction =
        (oom_probe_fit){OOM_PROBE_FIT_VERSION, 1, 0, p1 - (p9 - p1) / 8, (p9 - p1) / 8, 0};
    return EXIT_OK;
}

/* The estimator at the recommended batch itself (its line is exact only for linear growth). */
static void exact_prediction(struct probe_args *a, oom_probe_result *r)
{
    double p;
    if (!a->w || !r->has_prediction || (p = predicted_peak(a->w, r->recommended_batch)) <= 0)
        return;
    r->predicted_peak_bytes = p;
    r->prediction_error = (p - r->measured_peak_bytes) / r->measured_peak_bytes;
}

/* The report (the JSON document `doc`, else the text) on stdout, which may not wait on a reader
 * that takes nothing (a stalled pager) for longer than `stall` seconds: made whole in memory,
 * then written as far as stdout takes it. EXIT_OK, or EXIT_ENV when it was not all written
 * (said on stderr). */
static int write_report(const char *doc, const oom_probe_result *r, char **cmd, double stall)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    int rc = EXIT_OK, e;

    if (!m) {
        fprintf(stderr, "oomless probe: cannot make the report: %s\n", strerror(errno));
        return EXIT_ENV;
    }
    if (doc)
        fprintf(m, "%s%s", doc, *doc && doc[strlen(doc) - 1] == '\n' ? "" : "\n");
    else
        print_text(m, r, cmd);
    if (fclose(m) != 0 || !text) {
        e = errno;
        free(text);
        fprintf(stderr, "oomless probe: cannot make the report: %s\n", strerror(e));
        return EXIT_ENV;
    }
    fflush(stdout);
    if (cli_write_bounded(1, text, len, stall) != 0) {
        e = errno;
        if (e == EAGAIN)
            fprintf(stderr,
                    "oomless probe: the report was not written: standard output took nothing for "
                    "%.0f s (a stalled reader or pager; --kill-grace sets how long probe waits)\n",
                    stall);
        else
            fprintf(stderr, "oomless probe: the report was not written: %s\n", strerror(e));
        rc = EXIT_ENV;
    }
    free(text);
    return rc;
}

static int run_probe(struct probe_args *a, char **cmd, oom_patterns *patterns)
{
    oom_job job = {OOM_JOB_VERSION, (const char *const *)cmd, NULL, a->json ? 2 : 1, 2};
    oom_probe_result *r = NULL;
    char *doc = NULL;
    double stall = a->o.kill_grace_s > 0 ? a->o.kill_grace_s : OOM_DEFAULT_KILL_GRACE;
    int err, rc;

    a->o.patterns = patterns;
    a->o.on_event = on_event;
    a->o.stop = &cli_stop_signal;
    a->o.relay = &cli_relay;
    a->o.foreground = 1;
    cli_supervise_signals();
    err = oom_probe(&r, &job, &a->o);
    cli_supervise_done(stall);
    if (err && !r)
        return cli_fail("probe", err);
    if (err)
        cli_fail("probe", err);
    else
        err = save_calibration(a, r, (const char *const *)cmd); /* not saved: not a success */
    exact_prediction(a, r);
    if (!r->seq && a->w) { /* no {seq}: the sequence length the estimator used (--set seq=N) */
        oom_knobs k = OOM_KNOBS_INIT;
        if (oom_workload_get_knobs(&k, a->w) == OOM_OK && k.seq_len > 0 && k.seq_len <= INT_MAX)
            r->seq = (int)k.seq_len;
    }
    if (a->json && (rc = oom_probe_to_json(&doc, r)))
        err = rc;
    else if (write_report(a->json ? doc : NULL, r, cmd, stall) != EXIT_OK && !err)
        err = OOM_EIO;
    rc = exit_for(err, r);
    oom_free(doc);
    oom_probe_result_free(r);
    return rc;
}

int cmd_probe(int argc, char **argv)
{
    struct probe_args a;
    struct cli_target t;
    oom_patterns *patterns = NULL;
    int rc, err;

    memset(&a, 0, sizeof(a));
    oom_probe_options_init(&a.o, OOM_PROBE_OPTIONS_VERSION);
    if ((rc = parse_args(&a, argc, argv)) != EXIT_OK)
        return rc < 0 ? EXIT_OK : rc;
    if ((err = oom_patterns_load(&patterns, a.patterns)))
        return cli_fail("probe", err);
    if ((rc = cli_budget_resolve(&t, "probe", &a.budget)) != EXIT_OK) {
        oom_patterns_free(patterns);
        return rc;
    }
    a.o.search.usable_bytes = t.target.budget.usable_bytes;
    a.o.safety_margin_bytes = t.target.budget.safety_margin_bytes;
    rc = make_prediction(&a, &t.target.profile);
    cli_budget_done(&t);
    if (rc != EXIT_OK) {
        oom_workload_free(a.w);
        oom_patterns_free(patterns);
        return rc;
    }
    cli_say("oomless probe: sampling GPU memory every %.0f ms\n",
            (a.o.sample_interval_s > 0 ? a.o.sample_interval_s : OOM_DEFAULT_SAMPLE_INTERVAL) *
                1000.0);
    rc = run_probe(&a, argv + optind, patterns);
    oom_workload_free(a.w);
    oom_patterns_free(patterns);
    return rc;
}
