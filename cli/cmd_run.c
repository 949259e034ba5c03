/* cmd_run.c - `oomless run -- CMD...`: run the job; on OOM relaunch it smaller, same effective
 * batch. Signals are forwarded to the job's process group; the job's status is passed on. */
#include "cli.h"
#include "core/core.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: oomless run [OPTIONS] -- CMD [ARG...]\n\n"
    "Runs your training command in its own process group, forwards SIGINT, SIGTERM, SIGHUP and\n"
    "SIGQUIT to it, passes SIGUSR1/SIGUSR2 on (SLURM --signal, requeue handlers), and exits\n"
    "with its status (128+N for signal N). In the terminal's foreground the job gets the\n"
    "terminal while it runs (input(), breakpoint()); Ctrl-Z stops it and oomless together, fg\n"
    "continues both. When it dies of out-of-memory (the last error it printed) it is\n"
    "relaunched with the next smaller micro-batch that divides the effective batch and the\n"
    "matching larger accumulation (the same command line: resume through your own arguments).\n"
    "The batch is never raised. Placeholders {batch} {accum} {seq} {effective} {attempt} and\n"
    "OOMLESS_BATCH_SIZE, OOMLESS_GRAD_ACCUM, OOMLESS_SEQ_LEN, OOMLESS_ATTEMPT as in probe.\n"
    "Launched by another oomless ($OOMLESS_SUPERVISOR, set for every job run and probe\n"
    "launch), the job runs once and that one relaunches it.\n\n"
    "Batch (first found): --batch-size, --plan, $OOMLESS_BATCH_SIZE (+ $OOMLESS_GRAD_ACCUM),\n"
    "the calibration record of this GPU + command + workload (largest batch under the budget).\n\n"
    "Options:\n"
    "  --batch-size N                micro-batch of the first launch\n"
    "  --grad-accum N                accumulation of the first launch (default: effective/batch)\n"
    "  --target-effective-batch N    effective batch kept on relaunch (default batch x accum)\n"
    "  --plan FILE|-                 take .plan.batch_size / .plan.grad_accum from a plan JSON\n"
    "  --seq N                       value of {seq} / OOMLESS_SEQ_LEN\n"
    "  --max-restarts N              relaunches after OOM at most (default 5)\n"
    "  --min-batch-size N            never below this micro-batch (default 1)\n"
    "  --events FILE                 append JSONL events (launch, oom, restart, exit, ...)\n"
    "  --memory-history N            the job records allocation stacks (oomless.torch), at\n"
    "                                most N history entries, for the out-of-memory summary\n"
    "  --sync-dir DIR                a folder every node's 'oomless run' of one multi-node job\n"
    "                                shares (a shared filesystem): the nodes relaunch together\n"
    "                                at the batch the node that ran out of memory chose\n"
    "                                ($OOMLESS_SYNC_DIR)\n"
    "  --sync-id ID                  the job's id there (default: torchrun's --rdzv-id,\n"
    "                                $SLURM_JOB_ID, --rdzv-endpoint; $OOMLESS_SYNC_ID)\n"
    "  --sync-wait SECONDS           the longest wait for the other nodes (300, at most\n"
    "                                86400; $OOMLESS_SYNC_WAIT)\n"
    "  --kill-grace SECONDS          SIGTERM -> SIGKILL grace after a forwarded signal (10,\n"
    "                                at most 3600); a second signal (Ctrl-C) kills at once\n"
    "  --sample-interval SECONDS     NVML sampling period for peaks (default 0.05)\n"
    "  --calibration FILE|off        calibration records to take the batch from\n"
    "  --workload TEXT               workload part of the calibration key\n"
    "  --patterns FILE               OOM message patterns (default data/oom-patterns.txt)\n"
    "  --json                        print one JSON summary (the job's stdout goes to "
    "stderr)\n" CLI_BUDGET_HELP "  -h, --help                    this help\n\n"
    "Exit codes: the job's status; 1 when it does not fit even at the floor or ran out of\n"
    "restarts; 2 usage; 3 environment; 126/127 the command cannot be run.\n";

enum {
    OPT_BATCH = OPT_FIRST_FREE,
    OPT_ACCUM,
    OPT_TARGET,
    OPT_PLAN,
    OPT_SEQ,
    OPT_RESTARTS,
    OPT_MINB,
    OPT_EVENTS,
    OPT_GRACE,
    OPT_INTERVAL,
    OPT_CALIB,
    OPT_WORKLOAD,
    OPT_PATTERNS,
    OPT_HISTORY,
    OPT_SYNC_DIR,
    OPT_SYNC_ID,
    OPT_SYNC_WAIT,
    OPT_JSON
};

struct run_args {
    oom_run_options o;
    struct cli_budget budget;
    const char *plan, *calibration, *workload, *patterns;
    int json, restarts_given;
    long history; /* --memory-history: exported as OOMLESS_MEMORY_HISTORY; 0: not asked */
};

static int take_int(struct run_args *a, int opt, const char *arg)
{
    long v = 0;
    int rc;
    switch (opt) {
    case OPT_BATCH:
        rc = cli_whole_number(&v, "run", arg, 1, "--batch-size");
        a->o.batch = (int)v;
        return rc;
    case OPT_ACCUM:
        rc = cli_whole_number(&v, "run", arg, 1, "--grad-accum");
        a->o.grad_accum = (int)v;
        return rc;
    case OPT_TARGET:
        rc = cli_whole_number(&v, "run", arg, 1, "--target-effective-batch");
        a->o.target_effective = v;
        return rc;
    case OPT_SEQ:
        rc = cli_whole_number(&v, "run", arg, 1, "--seq");
        a->o.seq = (int)v;
        return rc;
    case OPT_RESTARTS:
        rc = cli_whole_number(&v, "run", arg, 0, "--max-restarts");
        a->o.max_restarts = v ? (int)v : -1;
        return rc;
    case OPT_MINB:
        rc = cli_whole_number(&v, "run", arg, 1, "--min-batch-size");
        a->o.min_batch = (int)v;
        return rc;
    case OPT_HISTORY:
        rc = cli_whole_number(&v, "run", arg, 1, "--memory-history");
        a->history = v;
        return rc;
    }
    return cli_usage_error("run", "unknown option");
}

static int take_option(struct run_args *a, int opt, const char *arg)
{
    switch (opt) {
    case OPT_PLAN:
        a->plan = arg;
        return EXIT_OK;
    case OPT_EVENTS:
        a->o.events_path = arg;
        return EXIT_OK;
    case OPT_GRACE:
        return cli_seconds(&a->o.kill_grace_s, "run", arg, "--kill-grace", 0, OOM_MAX_KILL_GRACE);
    case OPT_INTERVAL:
        return cli_seconds(&a->o.sample_interval_s, "run", arg, "--sample-interval", 0.001,
                           CLI_MAX_TIMEOUT);
    case OPT_CALIB:
        a->calibration = arg;
        return EXIT_OK;
    case OPT_WORKLOAD:
        a->workload = arg;
        return EXIT_OK;
    case OPT_PATTERNS:
        a->patterns = arg;
        return EXIT_OK;
    case OPT_JSON:
        a->json = 1;
        return EXIT_OK;
    case OPT_SYNC_DIR:
        a->o.sync_dir = arg;
        return EXIT_OK;
    case OPT_SYNC_ID:
        a->o.sync_id = arg;
        return EXIT_OK;
    case OPT_SYNC_WAIT:
        return cli_seconds(&a->o.sync_wait_s, "run", arg, "--sync-wait", 0, OOM_MAX_SYNC_WAIT);
    }
    return take_int(a, opt, arg);
}

static int take(void *ctx, int opt, const char *arg)
{
    return take_option(ctx, opt, arg);
}

static int parse_args(struct run_args *a, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"batch-size", required_argument, NULL, OPT_BATCH},
        {"grad-accum", required_argument, NULL, OPT_ACCUM},
        {"target-effective-batch", required_argument, NULL, OPT_TARGET},
        {"target_effective_batch", required_argument, NULL, OPT_TARGET},
        {"plan", required_argument, NULL, OPT_PLAN},
        {"seq", required_argument, NULL, OPT_SEQ},
        {"max-restarts", required_argument, NULL, OPT_RESTARTS},
        {"min-batch-size", required_argument, NULL, OPT_MINB},
        {"events", required_argument, NULL, OPT_EVENTS},
        {"kill-grace", required_argument, NULL, OPT_GRACE},
        {"sample-interval", required_argument, NULL, OPT_INTERVAL},
        {"calibration", required_argument, NULL, OPT_CALIB},
        {"workload", required_argument, NULL, OPT_WORKLOAD},
        {"patterns", required_argument, NULL, OPT_PATTERNS},
        {"memory-history", required_argument, NULL, OPT_HISTORY},
        {"sync-dir", required_argument, NULL, OPT_SYNC_DIR},
        {"sync-id", required_argument, NULL, OPT_SYNC_ID},
        {"sync-wait", required_argument, NULL, OPT_SYNC_WAIT},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, 'h'},
        CLI_BUDGET_LONGOPTS,
        {NULL, 0, NULL, 0}};
    return cli_parse_job_options("run", argc, argv, longopts, usage_text, &a->budget, take, a);
}

/* The sync options the command line left unset, from the environment. */
static int sync_from_env(struct run_args *a)
{
    const char *dir = getenv("OOMLESS_SYNC_DIR"), *id = getenv("OOMLESS_SYNC_ID"),
               *wait = getenv("OOMLESS_SYNC_WAIT");
    if (!a->o.sync_dir && dir && *dir)
        a->o.sync_dir = dir;
    if (!a->o.sync_id && id && *id)
        a->o.sync_id = id;
    if (!a->o.sync_wait_s && wait && *wait)
        return cli_seconds(&a->o.sync_wait_s, "run", wait, "$OOMLESS_SYNC_WAIT", 0,
                           OOM_MAX_SYNC_WAIT);
    return EXIT_OK;
}

/* ---- where the batch comes from ------------------------------------------------------------ */

static int batch_from_plan(struct run_args *a)
{
    oomi_plan_doc doc;
    int err = oomi_plan_doc_read(&doc, strcmp(a->plan, "-") ? a->plan : NULL, OOMI_PLAN_BATCH);

    if (err == OOM_ENOMEM)
        return cli_fail("run", err);
    if (err)
        return cli_usage_error("run", "%s", oom_last_message());
    a->o.batch = doc.batch_size;
    if (!a->o.grad_accum)
        a->o.grad_accum = doc.grad_accum;
    return EXIT_OK;
}

static int batch_from_env(struct run_args *a)
{
    const char *b = getenv("OOMLESS_BATCH_SIZE"), *g = getenv("OOMLESS_GRAD_ACCUM");
    long v;
    if (cli_whole_number(&v, "run", b, 1, "$OOMLESS_BATCH_SIZE") != EXIT_OK)
        return EXIT_USAGE;
    a->o.batch = (int)v;
    if (g && *g && !a->o.grad_accum) {
        if (cli_whole_number(&v, "run", g, 1, "$OOMLESS_GRAD_ACCUM") != EXIT_OK)
            return EXIT_USAGE;
        a->o.grad_accum = (int)v;
    }
    return EXIT_OK;
}

static int gpu_name(char *out, size_t size)
{
    oom_gpu_session *s = NULL;
    oom_gpu_list *list = NULL;
    int err;
    if ((err = oom_gpu_open(&s)) == OOM_OK && (err = oom_gpu_sample(&list, s, 0)) == OOM_OK &&
        list->count == 0)
        err = OOM_ENODEV;
    if (!err)
        snprintf(out, size, "%s", list->gpus[0]->name);
    oom_gpu_list_free(list);
    oom_gpu_close(s);
    return err;
}

static int batch_from_calibration(struct run_args *a, char **cmd)
{
    struct cli_target t;
    oom_calibration *rec = NULL;
    char name[96], *key = NULL;
    int err, rc, b;

    if ((err = gpu_name(name, sizeof(name))) ||
        (err = oom_calibration_command_key(&key, (const char *const *)cmd)) ||
        (err = oom_calibration_lookup(&rec, a->calibration, name, key,
                                      a->workload ? a->workload : ""))) {
        fprintf(stderr,
                "oomless run: no batch size: give --batch-size N, --plan FILE or "
                "OOMLESS_BATCH_SIZE, or run 'oomless probe' first (%s)\n",
                oom_last_message());
        oom_free(key);
        return EXIT_USAGE;
    }
    oom_free(key);
    /* the GPU's budget (the one run_budget() resolved, unless that was only the default
     * profile's) and compute capability (a traced record's CUDA context) */
    if ((rc = cli_budget_resolve(&t, "run", &a->budget)) != EXIT_OK) {
        oom_calibration_free(rec);
        return rc;
    }
    err = oom_calibration_max_batch(
        &b, rec, a->o.usable_bytes ? a->o.usable_bytes : t.target.budget.usable_bytes,
        t.target.profile.cc_major, t.target.profile.cc_minor);
    cli_budget_done(&t);
    oom_calibration_free(rec);
    if (err)
        return cli_fail("run", err);
    if (b < 1) {
        fprintf(stderr, "oomless run: the calibration record says no batch fits the budget\n");
        return EXIT_NOFIT;
    }
    cli_notice("batch %d from the calibration record for %s", b, name);
    a->o.batch = b;
    return EXIT_OK;
}

/* The run's usable budget, which restarts plan under (with what the job's error says): resolved
 * on a detected GPU, or when --vram/--gpu name one; none for the default profile a machine
 * without a GPU falls back to (it says nothing about the job's card). */
static int run_budget(struct run_args *a)
{
    struct cli_target t;
    char name[96];
    int rc;
    if (!a->budget.vram && !a->budget.gpu && gpu_name(name, sizeof(name)) != OOM_OK)
        return EXIT_OK;
    if ((rc = cli_budget_resolve(&t, "run", &a->budget)) != EXIT_OK)
        return rc;
    if (!t.target.fallback)
        a->o.usable_bytes = t.target.budget.usable_bytes;
    cli_budget_done(&t);
    return EXIT_OK;
}

static int choose_batch(struct run_args *a, char **cmd)
{
    const char *env = getenv("OOMLESS_BATCH_SIZE");
    if (a->o.batch)
        return EXIT_OK;
    if (a->plan)
        return batch_from_plan(a);
    if (env && *env)
        return batch_from_env(a);
    if (a->calibration && !strcmp(a->calibration, "off"))
        return cli_usage_error("run", "no batch size: give --batch-size N, --plan FILE or "
                                      "OOMLESS_BATCH_SIZE");
    return batch_from_calibration(a, cmd);
}

/* ---- reporting ---------------------------------------------------------------------------------
 */

static void clock_text(char *buf, size_t size, double unix_time)
{
    time_t t = (time_t)unix_time;
    struct tm tm;
    if (!localtime_r(&t, &tm) || !strftime(buf, size, "%H:%M:%S", &tm))
        snprintf(buf, size, "%.0f", unix_time);
}

/* ---- what filled the memory: the job's "oom_snapshot" events ----------------------------------
 */

/* The events file and where the current launch's lines start; the last snapshot of the run. */
struct snap_state {
    const char *path;
    off_t start;
    char *line, *detail; /* the last oom_snapshot event (JSON) and its summary */
    int shown;           /* its summary was printed */
};

static struct snap_state snap;

/* Where the next launch's lines start: the end of the file before it starts (a job may write
 * before its launch event is written). */
static void snap_mark(void)
{
    struct stat st;
    if (snap.path && stat(snap.path, &st) == 0 && S_ISREG(st.st_mode))
        snap.start = st.st_size;
}

/* Reads the oom_snapshot events the job appended since its launch (a regular file only: a FIFO
 * is the reader's); keeps the last. */
static void snap_read(void)
{
    oom_run_event ev = OOM_RUN_EVENT_INIT;
    char *buf = NULL, *p, *nl;
    size_t len = 0;
    int fd;

    if (!snap.path || oomi_open_regular(&fd, snap.path, O_RDONLY, "events file") != OOM_OK) {
        oomi_clear_error();
        return;
    }
    if (lseek(fd, snap.start, SEEK_SET) < 0 ||
        oomi_read_fd(&buf, &len, fd, snap.path, 64 * OOM_MiB) != OOM_OK) {
        oomi_clear_error();
        close(fd);
        return;
    }
    close(fd);
    for (p = buf; (nl = memchr(p, '\n', len - (size_t)(p - buf))); p = nl + 1) {
        if (oom_run_event_parse(&ev, p, (size_t)(nl - p)) != OOM_OK) {
            oomi_clear_error();
            continue;
        }
        if (strcmp(ev.name, "oom_snapshot") || !ev.detail)
            continue;
        oomi_free(snap.line);
        oomi_free(snap.detail);
        snap.line = oomi_strndup(p, (size_t)(nl - p));
        snap.detail = ev.detail;
        ev.detail = NULL;
        snap.shown = 0;
    }
    oom_run_event_dispose(&ev);
    oomi_free(buf);
}

static void snap_show(void)
{
    if (snap.detail && !snap.shown)
        cli_say("oomless run: at the out of memory, %s\n", snap.detail);
    snap.shown = 1;
}

static void on_event(const oom_job_event *ev, void *user)
{
    static int last_exit = -1; /* the exit status of a launch that ended without an OOM, else -1 */
    char peak[16] = "N/A", when[16], step[32] = "";
    (void)user;
    if (ev->kind == OOM_EVENT_EXIT || ev->kind == OOM_EVENT_OOM)
        last_exit = ev->kind == OOM_EVENT_EXIT ? ev->exit_code : -1;
    if (ev->kind == OOM_EVENT_OOM)
        snap_read();
    if (ev->peak_bytes != OOM_UNKNOWN)
        oom_format_size(peak, sizeof(peak), ev->peak_bytes);
    clock_text(when, sizeof(when), ev->time);
    if (ev->step >= 0)
        snprintf(step, sizeof(step), " at step %ld", ev->step);
    switch (ev->kind) {
    case OOM_EVENT_LAUNCH:
        cli_say("oomless run: %s attempt %d: batch %d, accumulation %d (pid %ld)\n", when,
                ev->attempt, ev->batch, ev->grad_accum, ev->pid);
        break;
    case OOM_EVENT_RESTART:
        if (last_exit >= 0) { /* another node's job ran out of memory (--sync-dir) */
            cli_say("oomless run: %s the job exited %d%s: relaunching with the other nodes, batch "
                    "%d -> %d, accumulation %d -> %d (effective %ld); %s\n",
                    when, last_exit, step, ev->previous_batch, ev->batch, ev->previous_accum,
                    ev->grad_accum, (long)ev->batch * ev->grad_accum, ev->reason ? ev->reason : "");
            snap_mark();
            break;
        }
        cli_say("oomless run: %s out of memory%s (peak %s): restarting with batch %d -> %d, "
                "accumulation %d -> %d (effective %ld)%s%s\n",
                when, step, peak, ev->previous_batch, ev->batch, ev->previous_accum, ev->grad_accum,
                (long)ev->batch * ev->grad_accum, ev->reason ? "; " : "",
                ev->reason ? ev->reason : "");
        snap_show();
        snap_mark(); /* written before the next launch: what follows is that launch's */
        break;
    case OOM_EVENT_SIGNAL:
        cli_say("oomless run: %s passing %s to the job%s\n", when, cli_signal_name(ev->signal),
                cli_again_hint(ev->signal));
        break;
    case OOM_EVENT_STOP:
        cli_say("oomless run: %s the job stopped (%s)%s\n", when, cli_signal_name(ev->signal),
                ev->signal == SIGSTOP ? ""
                : ev->signal == SIGTSTP
                    ? "; oomless stops with it (fg or SIGCONT continues both)"
                    : " waiting for the terminal; oomless stops with it until it is in the "
                      "foreground (fg)");
        cli_supervise_stopped(ev);
        break;
    case OOM_EVENT_CONTINUE:
        cli_say("oomless run: %s the job continues\n", when);
        break;
    case OOM_EVENT_KILL:
        cli_say("oomless run: %s %s: SIGKILL\n", when,
                cli_kill_reason("the job did not stop within the grace"));
        break;
    default:
        break;
    }
}

/* The run's JSON with "oom_snapshot": the last snapshot event the job wrote (null: none). */
static void print_run_json(const char *doc)
{
    json_object *o = json_tokener_parse(doc),
                *ev = snap.line ? json_tokener_parse(snap.line) : NULL;
    if (!o) {
        json_object_put(ev);
        cli_print_json(doc);
        return;
    }
    json_object_object_add(o, "oom_snapshot", ev);
    cli_print_json(
        json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(o);
}

static int finish(const struct run_args *a, int err, const oom_run_result *r)
{
    char *doc = NULL;
    int rc;
    if (err == OOM_EINTERRUPTED && r->oom) /* stopped between an OOM and the relaunch */
        rc = 128 + r->stop_signal;
    else if (err == OOM_OK || err == OOM_EINTERRUPTED)
        rc = r->exit_code;
    else if (err == OOM_EJOB && (r->exit_code == 127 || r->exit_code == 126))
        rc = r->exit_code;
    else
        rc = cli_exit_code(err);
    snap_show(); /* the last attempt's, when no restart followed it */
    if (err)
        fprintf(stderr, "oomless run: %s\n", oom_last_message());
    else
        fprintf(stderr, "oomless run: the job exited %d after %d attempt(s), %d restart(s)\n",
                r->exit_code, r->attempts, r->restarts);
    if (a->json && err != OOM_EINVAL) {
        if (oom_run_to_json(&doc, r) == OOM_OK)
            print_run_json(doc);
        oom_free(doc);
    }
    oomi_free(snap.line);
    oomi_free(snap.detail);
    return rc;
}

/* After a relaunch that then ran: the batch that ran is the limit on this GPU for this command,
 * saved as a calibration record (keyed as probe's: GPU name, command template, workload) so that
 * the next run or plan of it starts there (its max_batch caps what the record's line allows). */
static void save_limit(struct run_args *a, char **cmd, const oom_run_result *r)
{
    oom_calibration rec = OOM_CALIBRATION_INIT;
    char name[96];
    int err;

    if (r->restarts < 1 || r->oom || r->exit_code != 0 || r->batch < 1 ||
        (a->calibration && !strcmp(a->calibration, "off")) || gpu_name(name, sizeof(name)))
        return;
    rec.gpu = name;
    rec.workload = (char *)(a->workload ? a->workload : "");
    rec.fit.valid = 1; /* the peak measured at the batch that ran, taken as fixed: conservative */
    rec.fit.fixed_bytes = r->peak_bytes != OOM_UNKNOWN ? (double)r->peak_bytes : 0;
    rec.recommended_batch = r->batch;
    rec.max_batch = r->batch;
    rec.time = (double)time(NULL);
    if ((err = oom_calibration_command_key(&rec.command, (const char *const *)cmd)) ||
        (err = oom_calibration_save(a->calibration, &rec)))
        fprintf(stderr, "oomless run: the limit found (batch %d) was not saved: %s\n", r->batch,
                oom_last_message());
    else
        cli_notice("batch %d saved as this command's limit on %s", r->batch, name);
    oom_free(rec.command);
}

int cmd_run(int argc, char **argv)
{
    struct run_args a;
    oom_patterns *patterns = NULL;
    oom_run_result r = OOM_RUN_RESULT_INIT;
    oom_job job;
    char **cmd;
    int rc, err;

    memset(&a, 0, sizeof(a));
    oom_run_options_init(&a.o, OOM_RUN_OPTIONS_VERSION);
    if ((rc = parse_args(&a, argc, argv)) != EXIT_OK)
        return rc < 0 ? EXIT_OK : rc;
    cmd = argv + optind;
    if ((rc = sync_from_env(&a)) != EXIT_OK || (rc = run_budget(&a)) != EXIT_OK ||
        (rc = choose_batch(&a, cmd)) != EXIT_OK)
        return rc;
    if ((err = oom_patterns_load(&patterns, a.patterns)))
        return cli_fail("run", err);
    job = (oom_job){OOM_JOB_VERSION, (const char *const *)cmd, NULL, a.json ? 2 : 1, 2};
    a.o.patterns = patterns;
    a.o.on_event = on_event;
    a.o.stop = &cli_stop_signal;
    a.o.relay = &cli_relay;
    a.o.foreground = 1;
    snap.path = a.o.events_path;
    snap_mark();
    if (a.history) { /* read by oomless.torch in the job (its import turns the stacks on) */
        char n[24];
        snprintf(n, sizeof(n), "%ld", a.history);
        setenv("OOMLESS_MEMORY_HISTORY", n, 1);
    }
    cli_supervise_signals();
    err = oom_run(&r, &job, &a.o);
    cli_supervise_done(0);
    oom_patterns_free(patterns);
    if (err == OOM_EINVAL)
        return cli_fail("run", err);
    if (!err)
        save_limit(&a, cmd, &r);
    return finish(&a, err, &r);
}
