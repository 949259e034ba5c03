/*
 * cmd_watch.c - `oomless watch`: live GPU and per-process memory with bands, trends and events.
 * Options and the text/JSON/CSV modes live here; the interactive view is in watch_tui.c.
 */
#include "cli.h"
#include "core/core.h"
#include "watch_session.h"
#include "watch_tui.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: oomless watch [--once] [--json] [--interval S] [--count N] [--log FILE.csv]\n"
    "                     [--events FILE] [--plan FILE] [--no-tui] [--gpu ...] [--vram SIZE]\n"
    "                     [--vram-safety-margin M]\n\n"
    "Live memory of every GPU and of the processes on it, coloured by band: safe (under the\n"
    "plan's peak), elevated (above it), warning (above 90% of the usable budget), critical\n"
    "(above the budget). Interactive on a terminal (q quit, p pause, +/- interval, arrows select\n"
    "a GPU); one text snapshot per interval otherwise.\n\n"
    "Options:\n"
    "  --once                        print one snapshot and exit\n"
    "  --json                        JSON: one document with --once, else one object per line\n"
    "  -n, --interval SECONDS        time between samples (default 1, at least 0.05)\n"
    "  --count N                     stop after N samples\n"
    "  --log FILE.csv                append one row per GPU and per process per sample\n"
    "  --events FILE                 follow the events file of 'oomless run' (OOMs, restarts)\n"
    "  --plan FILE                   plan JSON: its .memory.device_peak bounds the safe band\n"
    "  --no-tui                      text snapshots even on a terminal\n" CLI_BUDGET_HELP
    "                                (the budget applies to each GPU; default: each GPU's total\n"
    "                                minus the margin)\n"
    "  -h, --help                    this help\n\n"
    "A --log file that cannot be written (full disk) does not stop watching: it is said once\n"
    "and tried again at each sample; a log deleted or rotated away is created again.\n\n"
    "Exit codes: 0 ok, 2 usage, 3 no NVML / I/O (also: samples not written to --log),\n"
    "128+N stopped by signal N.\n";

enum {
    OPT_ONCE = OPT_FIRST_FREE,
    OPT_JSON,
    OPT_INTERVAL,
    OPT_COUNT,
    OPT_LOG,
    OPT_EVENTS,
    OPT_PLAN,
    OPT_NO_TUI,
    OPT_HELP
};

struct watch_opts {
    int once, json, no_tui;
    double interval;
    long long count;
    const char *log, *events, *plan;
    struct cli_budget budget;
};

static void on_signal(int sig)
{
    watch_stop_signal = sig;
}

/* ---- options ------------------------------------------------------------------------------- */

static int parse_count(long long *out, const char *text)
{
    char *end;
    long long v;
    errno = 0;
    v = strtoll(text, &end, 10);
    if (*end && oomi_check_decimal_comma(text, "--count"))
        return cli_usage_error("watch", "%s", oom_last_message());
    if (!*text || *end || errno || v < 1)
        return cli_usage_error("watch", "--count '%s' must be a positive integer", text);
    *out = v;
    return EXIT_OK;
}

static int parse_options(struct watch_opts *o, int argc, char **argv, int *help)
{
    static const struct option longopts[] = {{"once", no_argument, NULL, OPT_ONCE},
                                             {"json", no_argument, NULL, OPT_JSON},
                                             {"interval", required_argument, NULL, OPT_INTERVAL},
                                             {"count", required_argument, NULL, OPT_COUNT},
                                             {"log", required_argument, NULL, OPT_LOG},
                                             {"events", required_argument, NULL, OPT_EVENTS},
                                             {"plan", required_argument, NULL, OPT_PLAN},
                                             {"no-tui", no_argument, NULL, OPT_NO_TUI},
                                             {"help", no_argument, NULL, OPT_HELP},
                                             CLI_BUDGET_LONGOPTS,
                                             {NULL, 0, NULL, 0}};
    int opt, rc = EXIT_OK;

    optind = 1;
    while (rc == EXIT_OK && (opt = getopt_long(argc, argv, "hn:", longopts, NULL)) != -1) {
        if (cli_budget_option(&o->budget, opt, optarg))
            continue;
        switch (opt) {
        case OPT_ONCE:
            o->once = 1;
            break;
        case OPT_JSON:
            o->json = 1;
            break;
        case 'n':
        case OPT_INTERVAL:
            rc = cli_seconds(&o->interval, "watch", optarg, "--interval", WATCH_MIN_INTERVAL,
                             WATCH_MAX_INTERVAL);
            break;
        case OPT_COUNT:
            rc = parse_count(&o->count, optarg);
            break;
        case OPT_LOG:
            o->log = optarg;
            break;
        case OPT_EVENTS:
            o->events = optarg;
            break;
        case OPT_PLAN:
            o->plan = optarg;
            break;
        case OPT_NO_TUI:
            o->no_tui = 1;
            break;
        case 'h':
        case OPT_HELP:
            *help = 1;
            return EXIT_OK;
        default:
            return cli_usage_error("watch", "unknown option");
        }
    }
    if (rc == EXIT_OK && optind < argc)
        rc = cli_usage_error("watch", "unexpected argument '%s'", argv[optind]);
    return rc;
}

/* ---- the --log file ------------------------------------------------------------------------ */

/* Prints what the log has to say (text and JSON modes: at once; the interactive view: at the
 * end, once the terminal is back). */
static void say_log_notes(struct watch_ctx *w)
{
    if (!w->log || !w->log->notes[0])
        return;
    fputs(w->log->notes, stderr);
    fflush(stderr);
    w->log->notes[0] = '\0';
}

static int open_log(struct watch_ctx *w, struct watch_log *log, const char *path)
{
    int rc;
    if ((rc = watch_log_open(log, path)) != 0) {
        fputs(log->notes, stderr);
        return rc == -2 ? EXIT_USAGE : EXIT_ENV;
    }
    w->log = log;
    return EXIT_OK;
}

/* Closes the log; samples that could not be written make the exit status 3 (I/O). */
static int close_log(struct watch_ctx *w, int rc)
{
    if (!w->log)
        return rc;
    if (watch_log_close(w->log) != 0 && rc == EXIT_OK)
        rc = EXIT_ENV;
    if (w->log->lost_all) {
        char line[512];
        snprintf(line, sizeof(line), "oomless watch: %lld sample%s not written to '%s'\n",
                 w->log->lost_all, w->log->lost_all == 1 ? " was" : "s were", w->log->path);
        strncat(w->log->notes, line, sizeof(w->log->notes) - strlen(w->log->notes) - 1);
        if (rc == EXIT_OK)
            rc = EXIT_ENV;
    }
    say_log_notes(w);
    return rc;
}

/* ---- sampling ------------------------------------------------------------------------------ */

/* Sleeps until `deadline` (monotonic) or a signal. */
static void sleep_until(double deadline)
{
    struct timespec ts;
    ts.tv_sec = (time_t)deadline;
    ts.tv_nsec = (long)((deadline - (double)ts.tv_sec) * 1e9);
    if (ts.tv_nsec >= 1000000000L)
        ts.tv_nsec = 999999999L;
    while (!watch_stop_signal &&
           clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* ---- text output --------------------------------------------------------------------------- */

static void text_bar(char *bar, size_t width, uint64_t used, uint64_t total)
{
    size_t i, fill = total ? (size_t)((double)used / (double)total * (double)width + 0.5) : 0;
    if (fill > width)
        fill = width;
    for (i = 0; i < width; i++)
        bar[i] = i < fill ? '|' : ' ';
    bar[width] = '\0';
}

/* one line per steadily growing series: the GPU's memory, then each process's */
static void print_trend(const oom_watch_gpu *wg, const oom_trend *t, const char *who)
{
    char rate[16], when[16], lim[16];
    if (!t->growing)
        return;
    printf("        trend: %s growing %s/s", who,
           oom_format_size(rate, sizeof(rate), (uint64_t)t->slope_bytes_per_s));
    if (t->has_eta)
        printf("; budget %s %s", oom_format_size(lim, sizeof(lim), wg->budget.usable_bytes),
               t->seconds_to_limit > 0 ? "crossed in ~" : "already crossed");
    if (t->has_eta && t->seconds_to_limit > 0)
        printf("%s", watch_format_duration(when, sizeof(when), t->seconds_to_limit));
    printf("\n");
}

static void print_trends(const oom_watch_gpu *wg)
{
    char who[32];
    size_t i;
    print_trend(wg, &wg->trend, "GPU memory");
    for (i = 0; i < wg->process_count; i++) {
        snprintf(who, sizeof(who), "pid %u", (unsigned)wg->processes[i]->pid);
        print_trend(wg, &wg->processes[i]->trend, who);
    }
}

static void print_process(const oom_watch_process *p)
{
    struct watch_process_row row;
    watch_process_row(&row, p);
    printf("    %-8u %-10.10s %11s %7s  %s\n", (unsigned)p->pid, row.user, row.mem, row.batch,
           row.command);
    watch_process_row_done(&row);
}

static void print_gpu(const oom_watch_gpu *wg)
{
    const oom_gpu_info *g = wg->info;
    char used[16], total[16], usable[16], bar[31];
    size_t i;

    if (g->lost) {
        printf("GPU %d  %s  lost (the device stopped answering)\n", g->index, g->name);
        return;
    }
    text_bar(bar, 30, g->used_bytes, g->total_bytes);
    printf("GPU %d  %s  [%s] %s / %s  %s", g->index, g->name, bar,
           oom_format_size(used, sizeof(used), g->used_bytes),
           oom_format_size(total, sizeof(total), g->total_bytes), oom_band_name(wg->band));
    if (g->has_utilization)
        printf("  util %u%%", g->utilization_gpu);
    if (g->has_temperature)
        printf("  %u C", g->temperature_c);
    printf("\n        budget %s usable",
           oom_format_size(usable, sizeof(usable), wg->budget.usable_bytes));
    if (oom_gpu_reserved_bytes(g))
        printf(" (%s reserved by the driver left out)",
               oom_format_size(total, sizeof(total), oom_gpu_reserved_bytes(g)));
    printf("\n");
    print_trends(wg);
    if (wg->process_count)
        printf("    %-8s %-10s %11s %7s  %s\n", "PID", "USER", "MEMORY", "BATCH", "COMMAND");
    for (i = 0; i < wg->process_count; i++)
        print_process(wg->processes[i]);
}

static void print_events(const struct watch_ctx *w, size_t n)
{
    size_t count = oom_event_log_count(w->events), i;
    char line[512];
    if (!w->events || !n)
        return;
    printf("Events:\n");
    for (i = count > n ? count - n : 0; i < count; i++)
        printf("  %s\n", watch_format_event(line, sizeof(line), oom_event_log_at(w->events, i)));
}

static int print_text(const struct watch_ctx *w, const oom_watch_snapshot *s, size_t events)
{
    char when[32] = "";
    time_t t = (time_t)s->time;
    struct tm tm;
    size_t i;

    if (localtime_r(&t, &tm))
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
    printf("oomless watch  %s  %zu GPU%s\n", when, s->gpu_count, s->gpu_count == 1 ? "" : "s");
    for (i = 0; i < s->gpu_count; i++)
        print_gpu(s->gpus[i]);
    if (s->foreign_pids)
        printf("note: %zu process%s on the GPUs %s not exist in this PID namespace (a container "
               "without the host's PIDs?): commands and users unknown\n",
               s->foreign_pids, s->foreign_pids == 1 ? "" : "es",
               s->foreign_pids == 1 ? "does" : "do");
    print_events(w, events);
    printf("\n");
    return fflush(stdout) ? EXIT_ENV : EXIT_OK;
}

static int print_json(const oom_watch_snapshot *s, int pretty)
{
    char *doc = NULL;
    int err, rc;
    if ((err = oom_watch_to_json(&doc, s, pretty)))
        return cli_fail("watch", err);
    rc = cli_print_json(doc);
    oom_free(doc);
    return rc;
}

/* The non-interactive loop: a text snapshot or a JSON line per interval. */
static int run_loop(struct watch_ctx *w, const struct watch_opts *o)
{
    double next = watch_now();
    int rc = EXIT_OK;

    while (rc == EXIT_OK && !watch_stop_signal) {
        if ((rc = watch_step(w)))
            break;
        say_log_notes(w);
        if (o->json)
            rc = print_json(oom_monitor_snapshot(w->monitor), o->once);
        else
            rc = print_text(w, oom_monitor_snapshot(w->monitor),
                            o->once || w->taken == 1 ? 5 : w->events_added);
        if (rc || o->once || (w->count && w->taken >= w->count))
            break;
        next += w->interval;
        if (next < watch_now())
            next = watch_now(); /* fell behind: no burst of catch-up samples */
        sleep_until(next);
    }
    if (rc == EXIT_OK && watch_stop_signal)
        rc = 128 + watch_stop_signal;
    return rc;
}

/* ---- setup --------------------------------------------------------------------------------- */

static int setup_budget(struct watch_ctx *w, const struct watch_opts *o, struct cli_target *t)
{
    oomi_plan_doc plan;
    int rc, err;

    if (o->budget.gpu || o->budget.vram) { /* one budget, applied to each GPU */
        oom_budget whole;
        oom_set_notice_handler(NULL, NULL); /* the planning budget's notices are not watch's */
        rc = cli_budget_resolve(t, "watch", &o->budget);
        cli_init_notices();
        if (rc != EXIT_OK)
            return rc;
        /* watch compares all the memory in use with the budget: what others hold counts there,
         * so it is not also taken off the budget as planning commands do */
        whole = t->target.budget;
        whole.usable_bytes = whole.target_bytes - whole.safety_margin_bytes;
        err = oom_monitor_set_budget(w->monitor, -1, &whole);
    } else if ((err = oom_config_load(&t->config, o->budget.config)) == OOM_OK) {
        /* each GPU's own total minus the margin: no planning target to resolve */
        err = oom_monitor_set_margin(
            w->monitor, o->budget.margin ? o->budget.margin : oom_config_default_margin(t->config));
    }
    if (!err && o->plan && (err = oomi_plan_doc_read(&plan, o->plan, OOMI_PLAN_PEAK)) == OOM_OK)
        oom_monitor_set_plan_peak(w->monitor, plan.device_peak);
    return err ? cli_fail("watch", err) : EXIT_OK;
}

static int open_nvml(oom_gpu_session **s)
{
    int err = oom_gpu_open(s);
    if (err == OOM_OK)
        return EXIT_OK;
    fprintf(stderr,
            "oomless watch: %s\n"
            "oomless watch: watching needs the NVIDIA driver's NVML library (libnvidia-ml.so.1);\n"
            "               set OOMLESS_NVML_LIBRARY to its path if it is installed elsewhere.\n",
            oom_last_message());
    return cli_exit_code(err);
}

int cmd_watch(int argc, char **argv)
{
    struct watch_opts o = {.interval = 1.0};
    struct watch_ctx w = {0};
    struct watch_log log;
    struct cli_target t = {0};
    oom_gpu_session *s = NULL;
    int help = 0, rc, err;

    if ((rc = parse_options(&o, argc, argv, &help)) != EXIT_OK || help) {
        if (help)
            cli_usage(stdout, usage_text, OOM_COMMAND_WATCH);
        return rc;
    }
    w.interval = o.interval;
    w.count = o.count;
    if ((rc = open_nvml(&s)) != EXIT_OK)
        return rc;
    if ((err = oom_monitor_create(&w.monitor, s))) {
        rc = cli_fail("watch", err);
        goto done;
    }
    if ((rc = setup_budget(&w, &o, &t)) || (o.log && (rc = open_log(&w, &log, o.log))))
        goto done;
    if (o.events && (err = oom_event_log_open(&w.events, o.events))) {
        rc = cli_fail("watch", err);
        goto done;
    }
    /* sleeps and reads return early; Ctrl-\ too: the terminal comes back before the exit; a
     * --log file at the file size limit (RLIMIT_FSIZE): a failed write, not a dead watch */
    cli_set_signals(cli_stop_signals, CLI_STOP_SIGNALS, on_signal);
    cli_set_signals(&(const int){SIGXFSZ}, 1, SIG_IGN);
    if (!o.once && !o.json && !o.no_tui && watch_tui_available())
        rc = watch_tui_run(&w);
    else
        rc = run_loop(&w, &o);
    if (w.error[0]) /* printed here, after the interactive view gave the terminal back */
        fprintf(stderr, "oomless watch: %s\n", w.error);
done:
    rc = close_log(&w, rc);
    oom_event_log_free(w.events);
    oom_monitor_free(w.monitor);
    cli_budget_done(&t);
    oom_gpu_close(s);
    return rc;
}
