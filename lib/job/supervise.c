/*
 * supervise.c - `run`: launch the job; when it dies of out-of-memory, relaunch it with the
 * micro-batch the measured attempts predict to fit (a line through what each needed) and the
 * matching accumulation: exact where a divisor of the effective batch keeps at least a quarter
 * of that micro-batch (EXACT_SHARE), else the nearest accumulation (inexact, said in the restart
 * event). Every launch, OOM, restart and exit is reported to the caller and appended to the
 * events file.
 */
#include "job/job.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define LADDER_POINTS   32   /* OOM attempts remembered (the latest) */
#define LADDER_HEADROOM 0.95 /* the next batch is planned to use at most this much of the GPU */

/* What the attempts that ran out of memory measured: each micro-batch, the memory it needed
 * (what the process held plus the allocation that failed, where the job's error said), its
 * attempt and the last step it printed (the data it died on); and the limits a restart plans
 * under. */
struct ladder {
    int batch[LADDER_POINTS], attempt[LADDER_POINTS];
    long step[LADDER_POINTS];
    double need[LADDER_POINTS];
    size_t n;
    double capacity; /* the GPU's memory as the job's error or NVML gave it; 0: not known */
    double allowed;  /* PyTorch's "N allowed" (set_per_process_memory_fraction); 0: none */
    double usable;   /* the run's own usable budget; 0: not known */
    double max_peak; /* the largest peak sampled */
};

struct run_ctx {
    const oom_run_options *o;
    int events_fd;
    int events_error;
    bool events_regular; /* a regular file: all-or-nothing appends; else a stream (FIFO) */
    oomi_sync *sync;     /* the other nodes' supervisors (sync_dir), or NULL */
    long supervisor;     /* the oomless that launched this run and relaunches it (0: none) */
};

/* One JSONL line: {"time", "event", "pid", "attempt", "batch", "grad_accum", "peak_bytes",
 * "exit_code"} plus "previous_batch", "previous_grad_accum", "step" (restart) or "signal"
 * (signal, kill, stop, continue). */
static void write_event(struct run_ctx *c, const oom_job_event *ev)
{
    json_object *o = json_object_new_object();
    const char *s;
    int ended = ev->kind == OOM_EVENT_EXIT || ev->kind == OOM_EVENT_OOM;

    if (!o) {
        c->events_error = ENOMEM;
        return;
    }
    oomi_json_put(o, "time", oomi_json_number(ev->time, 6));
    oomi_json_put(o, "event", json_object_new_string(oom_job_event_name(ev->kind)));
    oomi_json_put(o, "pid", ev->pid > 0 ? json_object_new_int64(ev->pid) : NULL);
    oomi_json_put(o, "attempt", json_object_new_int(ev->attempt));
    oomi_json_put(o, "batch", json_object_new_int(ev->batch));
    oomi_json_put(o, "grad_accum", json_object_new_int(ev->grad_accum));
    oomi_json_put(o, "peak_bytes", oomi_json_bytes(ev->peak_bytes));
    oomi_json_put(o, "exit_code", ended ? json_object_new_int(ev->exit_code) : NULL);
    if (ev->kind == OOM_EVENT_RESTART) {
        oomi_json_put(o, "previous_batch", json_object_new_int(ev->previous_batch));
        oomi_json_put(o, "previous_grad_accum", json_object_new_int(ev->previous_accum));
        oomi_json_put(o, "reason", ev->reason ? json_object_new_string(ev->reason) : NULL);
    }
    if (ev->kind == OOM_EVENT_RESTART || ended)
        oomi_json_put(o, "step", ev->step >= 0 ? json_object_new_int64(ev->step) : NULL);
    if (ev->kind == OOM_EVENT_OOM) { /* which rank ran out of memory, and the line that said so */
        oomi_json_put(o, "rank", ev->rank ? json_object_new_string(ev->rank) : NULL);
        oomi_json_put(o, "reason", ev->reason ? json_object_new_string(ev->reason) : NULL);
    }
    if (ev->kind == OOM_EVENT_SIGNAL || ev->kind == OOM_EVENT_KILL || ev->kind == OOM_EVENT_STOP ||
        ev->kind == OOM_EVENT_CONTINUE)
        oomi_json_put(o, "signal", json_object_new_int(ev->signal));
    s = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    if (s) {
        char *line = oomi_asprintf("%s\n", s);
        int e;
        if (!line)
            e = ENOMEM;
        else if (c->events_regular) /* the whole line or nothing (a full disk, a crash) */
            e = oomi_append_line(c->events_fd, line, strlen(line));
        else /* a FIFO whose reader may stall: wait 1 s at most, then give it up */
            e = oomi_write_bounded(c->events_fd, line, strlen(line), 1.0);
        if (e && !c->events_error)
            c->events_error = e; /* the first failure is the one to report */
        oomi_free(line);
    }
    json_object_put(o);
}

/* The events file. A regular file is opened for reading too, so that an append can see whether
 * it ends in '\n'; anything else (a FIFO that `watch` or a script reads) write-only, as a
 * stream. */
static int open_events(const char *path, bool *regular)
{
    struct stat st;
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
    *regular = false;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        *regular = true; /* read-write: a short append is truncated back (oomi_append_line) */
        return oomi_fd_above_std(fd);
    }
    if (fd >= 0)
        close(fd);
    return oomi_fd_above_std(
        open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644));
}

static void on_event(const oom_job_event *ev, void *user)
{
    struct run_ctx *c = user;
    if (c->events_fd >= 0 && !c->events_error) /* after a failure, no more attempts (or waits) */
        write_event(c, ev);
    if (c->o->on_event)
        c->o->on_event(ev, c->o->user);
}

/* The effective batch is kept exact when a divisor of it keeps at least 1/EXACT_SHARE of the
 * micro-batch that would fit: a smaller micro-batch with more accumulation costs some speed,
 * a changed effective batch changes the training. The H200 of 2026-11-28 restarted 50 at 21 x 2
 * (effective 42) under a rule of one half, where 10 x 5 kept 50; a prime effective batch (307,
 * divisors 1 and 307) still goes inexact. */
#define EXACT_SHARE 4

/* The largest micro-batch in [floor, cap] that divides the effective batch; 0 when none. */
static int divisor_at_most(int cap, long effective, int floor)
{
    int b;
    for (b = cap; b >= floor && b >= 1; b--)
        if (effective % b == 0)
            return b;
    return 0;
}

/* The size at `p` ("2.00 GiB", "512 MiB"); 0 when none. */
static double size_at(const char *p)
{
    char buf[48], *end;
    uint64_t v = 0;
    double x;
    int n = 0;
    x = oomi_strtod(p, &end);
    if (end == p || !(x >= 0))
        return 0;
    while (*end == ' ')
        end++;
    while (n < 8 && oomi_isalpha((unsigned char)end[n]))
        n++;
    oomi_snprintf(buf, sizeof(buf), "%.6f%.*s", x, n, end);
    if (oom_parse_size(&v, buf, OOM_UNIT_BYTES)) {
        oomi_clear_error();
        return 0;
    }
    return (double)v;
}

/* The size after `key` in a PyTorch out-of-memory message ("Tried to allocate 2.00 GiB", "total
 * capacity of 79.15 GiB", "this process has 77.90 GiB memory in use"); 0 when absent. */
static double message_size(const char *reason, const char *key)
{
    const char *p = reason ? strstr(reason, key) : NULL;
    return p ? size_at(p + strlen(key)) : 0;
}

/* The size before " allowed" in PyTorch's message when the process is capped with
 * torch.cuda.set_per_process_memory_fraction ("... memory in use. 24.00 GiB allowed; Of the
 * allocated memory ...": c10/cuda/CUDACachingAllocator.cpp, the allowed_info of its
 * out-of-memory message); 0 when absent. */
static double allowed_size(const char *reason)
{
    const char *key = reason ? strstr(reason, " allowed") : NULL, *p;
    if (!key)
        return 0;
    p = key;
    while (p > reason && oomi_isalpha((unsigned char)p[-1])) /* the unit */
        p--;
    while (p > reason && p[-1] == ' ')
        p--;
    while (p > reason && ((p[-1] >= '0' && p[-1] <= '9') || p[-1] == '.'))
        p--;
    return p < key ? size_at(p) : 0;
}

/* Remembers what an attempt that ran out of memory measured. */
static void ladder_add(struct ladder *d, const oomi_launch *l)
{
    double held = message_size(l->oom_reason, "this process has ");
    double tried = message_size(l->oom_reason, "Tried to allocate ");
    double cap = message_size(l->oom_reason, "total capacity of ");
    double peak = l->peak_bytes != OOM_UNKNOWN ? (double)l->peak_bytes : 0;
    if (cap > 0)
        d->capacity = cap;
    else if (l->capacity_bytes && !d->capacity)
        d->capacity = (double)l->capacity_bytes;
    d->allowed = allowed_size(l->oom_reason);
    if (peak > d->max_peak)
        d->max_peak = peak;
    if (!held && !peak)
        return; /* nothing measured */
    if (d->n == LADDER_POINTS) {
        memmove(d->batch, d->batch + 1, (LADDER_POINTS - 1) * sizeof(*d->batch));
        memmove(d->attempt, d->attempt + 1, (LADDER_POINTS - 1) * sizeof(*d->attempt));
        memmove(d->step, d->step + 1, (LADDER_POINTS - 1) * sizeof(*d->step));
        memmove(d->need, d->need + 1, (LADDER_POINTS - 1) * sizeof(*d->need));
        d->n--;
    }
    d->batch[d->n] = l->batch;
    d->attempt[d->n] = l->attempt;
    d->step[d->n] = l->step;
    d->need[d->n++] = (held > 0 ? held : peak) + tried;
}

/* The memory a restart plans under: the smallest of PyTorch's "allowed", the GPU's capacity and
 * the run's usable budget, described with each in `text`; else the largest peak seen. */
static double ladder_limit(const struct ladder *d, char *text, size_t n_text)
{
    const double v[3] = {d->allowed, d->capacity, d->usable};
    static const char *const what[3] = {"allowed by PyTorch", "total capacity", "usable budget"};
    char a[16];
    double lim = 0;
    size_t i, k = 0, len;
    for (i = 0; i < 3; i++)
        if (v[i] > 0 && (lim <= 0 || v[i] < lim))
            lim = v[i], k = i;
    if (lim <= 0) {
        oomi_snprintf(text, n_text, "%s (the largest peak seen)",
                      oom_format_size(a, sizeof(a), (uint64_t)d->max_peak));
        return d->max_peak;
    }
    oomi_snprintf(text, n_text, "%s (%s", oom_format_size(a, sizeof(a), (uint64_t)lim), what[k]);
    for (i = 0; i < 3; i++)
        if (i != k && v[i] > 0) {
            len = strlen(text);
            oomi_snprintf(text + len, n_text - len, "; %s %s",
                          oom_format_size(a, sizeof(a), (uint64_t)v[i]), what[i]);
        }
    len = strlen(text);
    oomi_snprintf(text + len, n_text - len, ")");
    return lim;
}

/* "at step 3" or "before any step" for the step an attempt died after. */
static void step_text(char *out, size_t n, long step)
{
    if (step >= 0)
        oomi_snprintf(out, n, "at step %ld", step);
    else
        oomi_snprintf(out, n, "before any step");
}

/* The largest micro-batch below `batch` the measurements predict to fit, with the basis in
 * `why`; 0 when nothing was measured. Memory is taken as a line in the micro-batch, fitted only
 * to the attempts that ran out of memory at the same step as the latest (the same data: a job
 * whose later steps take longer sequences needs more per sample there). Through those attempts
 * by least squares when they ran at two or more batches (and the slope is positive), else
 * proportional to the batch through the latest one (an optimistic guess when part of the memory
 * does not scale with the batch: the next attempt adds a point). */
static int ladder_fit(const struct ladder *d, int batch, char *why, size_t n_why)
{
    char lim_text[160], at[32], a[16], b[16], *list = NULL;
    double cap = ladder_limit(d, lim_text, sizeof(lim_text)), target = LADDER_HEADROOM * cap;
    double sb = 0, sn = 0, sbb = 0, sbn = 0, slope = 0, icpt = 0, fit, m = 0;
    size_t i, last = d->n - 1, distinct = 0;
    oomi_sb used = OOMI_SB_INIT;
    if (!d->n || cap <= 0)
        return 0; /* nothing measured (last unused) */
    for (i = 0; i < d->n; i++) {
        if (d->step[i] != d->step[last])
            continue;
        m++;
        sb += d->batch[i], sn += d->need[i];
        sbb += (double)d->batch[i] * d->batch[i], sbn += (double)d->batch[i] * d->need[i];
        distinct += d->batch[i] != d->batch[last];
        oomi_sb_printf(&used, "%s%d", m > 1 ? ", " : "", d->attempt[i]);
    }
    step_text(at, sizeof(at), d->step[last]);
    if (distinct && m * sbb - sb * sb > 0) {
        slope = (m * sbn - sb * sn) / (m * sbb - sb * sb);
        icpt = (sn - slope * sb) / m;
    }
    if (slope > 0 && oomi_sb_finish(&used, &list) == OOM_OK) {
        fit = (target - icpt) / slope;
        oomi_snprintf(why, n_why,
                      "fit of attempts %s (out of memory %s): %s + %s per sample, of %s", list, at,
                      oom_format_size(a, sizeof(a), icpt > 0 ? (uint64_t)icpt : 0),
                      oom_format_size(b, sizeof(b), (uint64_t)slope), lim_text);
    } else {
        oomi_sb_free(&used);
        fit = (double)d->batch[last] * target / d->need[last];
        oomi_snprintf(why, n_why, "attempt %d alone (out of memory %s): batch %d needed %s of %s",
                      d->attempt[last], at, d->batch[last],
                      oom_format_size(a, sizeof(a), (uint64_t)d->need[last]), lim_text);
    }
    oomi_free(list);
    if (!(fit >= 1))
        return 1;
    return fit >= batch ? batch - 1 : (int)floor(fit);
}

static int check_options(const oom_run_options *o, int *accum, long *effective)
{
    if (o->batch < 1)
        return oomi_fail(OOM_EINVAL, "run: batch size %d must be at least 1", o->batch);
    if (o->grad_accum < 0 || o->target_effective < 0 || o->min_batch < 0 || o->max_restarts < -1)
        return oomi_fail(OOM_EINVAL, "run: negative accumulation, effective batch, floor or "
                                     "restart count");
    *effective = o->target_effective;
    *accum = o->grad_accum;
    if (!*accum)
        *accum = *effective && *effective % o->batch == 0 ? (int)(*effective / o->batch) : 1;
    if (!*effective)
        *effective = (long)o->batch * *accum;
    if ((long)o->batch * *accum != *effective)
        return oomi_fail(OOM_EINVAL,
                         "run: batch %d x accumulation %d is not the effective batch %ld", o->batch,
                         *accum, *effective);
    if (o->min_batch > o->batch)
        return oomi_fail(OOM_EINVAL, "run: batch %d is below the floor %d", o->batch, o->min_batch);
    if (o->version >= 3 && !(o->sync_wait_s >= 0 && o->sync_wait_s <= OOM_MAX_SYNC_WAIT))
        return oomi_fail(OOM_EINVAL, "run: sync wait %g s is not from 0 to %g seconds",
                         o->sync_wait_s, OOM_MAX_SYNC_WAIT);
    return oomi_check_kill_grace(o->kill_grace_s, "run");
}

static void init_launch(oomi_launch *l, const oom_job *job, const oom_run_options *o,
                        struct run_ctx *c, oom_gpu_session *gpu, const oom_patterns *patterns)
{
    memset(l, 0, sizeof(*l));
    l->job = job;
    l->seq = o->seq;
    l->sample_interval_s =
        o->sample_interval_s > 0 ? o->sample_interval_s : OOM_DEFAULT_SAMPLE_INTERVAL;
    l->kill_grace_s = o->kill_grace_s > 0 ? o->kill_grace_s : OOM_DEFAULT_KILL_GRACE;
    l->gpu = gpu;
    l->patterns = patterns;
    l->stop = o->stop;
    l->relay = o->relay;
    l->foreground = o->foreground;
    l->events_path = o->events_path;
    l->on_event = on_event;
    l->user = c;
}

/* A relaunch: its micro-batch and accumulation, and why. */
struct restart {
    int batch, accum;
    char why[600];
};

static int no_restarts_left(const oomi_launch *l, const oom_run_result *r, int max_restarts)
{
    return oomi_fail(OOM_ENOFIT,
                     "the job ran out of memory at batch %d after %d restart(s) "
                     "(--max-restarts %d)",
                     l->batch, r->restarts, max_restarts);
}

/* The relaunch after an out-of-memory death: OOM_OK with *x, or OOM_ENOFIT. `supervisor`: the
 * pid of the oomless that launched this run, which relaunches instead (0: none). */
static int plan_restart(struct restart *x, oomi_launch *l, oom_run_result *r, struct ladder *d,
                        int floor, int max_restarts, long supervisor)
{
    int next = 0, fit, accum;
    char *why = x->why, basis[480] = "";
    if (supervisor)
        return oomi_fail(OOM_ENOFIT,
                         "the job ran out of memory at batch %d; the oomless (pid %ld) that "
                         "launched this run relaunches it",
                         l->batch, supervisor);
    if (r->restarts >= max_restarts)
        return no_restarts_left(l, r, max_restarts);
    why[0] = '\0';
    ladder_add(d, l);
    fit = l->batch > floor ? ladder_fit(d, l->batch, basis, sizeof(basis)) : 0;
    if (l->recovery_batch >= floor && l->recovery_batch < l->batch &&
        r->effective % l->recovery_batch == 0) { /* the ranks' agreed micro-batch (oomless.torch) */
        next = l->recovery_batch;
        oomi_snprintf(why, sizeof(x->why), "the batch the ranks agreed on");
    } else if (fit) {
        fit = fit < floor ? floor : fit;
        next = divisor_at_most(fit, r->effective, floor);
        if (!next || EXACT_SHARE * next < fit) /* a divisor too far below it: inexact */
            next = fit;
        oomi_snprintf(why, sizeof(x->why), "%s: batch %d predicted to fit", basis, fit);
    } else if (l->batch > floor) { /* nothing measured: the next divisor, or half */
        next = divisor_at_most(l->batch - 1, r->effective, floor);
        if (!next || EXACT_SHARE * next < l->batch)
            next = l->batch / 2 > floor ? l->batch / 2 : floor;
        oomi_snprintf(why, sizeof(x->why), "no peak measured");
    }
    if (!next)
        return oomi_fail(OOM_ENOFIT,
                         "the job does not fit: it ran out of memory at batch %d and no smaller "
                         "batch >= %d is left",
                         l->batch, floor);
    accum = (int)((r->effective + next / 2) / next); /* the nearest effective batch */
    accum = accum < 1 ? 1 : accum;
    if ((long)next * accum != r->effective) {
        size_t len = strlen(why);
        oomi_snprintf(why + len, sizeof(x->why) - len,
                      "; inexact accumulation: effective batch %ld instead of %ld (%+.1f%%)",
                      (long)next * accum, r->effective,
                      100.0 * ((double)next * accum - (double)r->effective) / (double)r->effective);
    }
    x->batch = next;
    x->accum = accum;
    return OOM_OK;
}

/* Announces the relaunch and makes it the next launch's. */
static void apply_restart(oomi_launch *l, oom_run_result *r, const struct restart *x)
{
    if (l->on_event) {
        oom_job_event ev = OOM_JOB_EVENT_INIT;
        ev.kind = OOM_EVENT_RESTART;
        ev.time = oomi_now_unix();
        ev.pid = l->pid;
        ev.attempt = l->attempt + 1;
        ev.batch = x->batch;
        ev.grad_accum = x->accum;
        ev.reason = x->why;
        ev.previous_batch = l->batch;
        ev.previous_accum = l->accum;
        ev.peak_bytes = l->peak_bytes;
        ev.exit_code = l->exit_code;
        ev.step = l->step;
        l->on_event(&ev, l->user);
    }
    r->restarts++;
    l->batch = x->batch;
    l->accum = x->accum;
}

/* ---- the nodes of one job (sync.c) ---------------------------------------------------------- */

/* While the job runs: whether another node decided this attempt's relaunch, or left the job. */
static int peer_check(void *user)
{
    struct run_ctx *c = user;
    oomi_sync_look k;
    if (oomi_sync_look_now(c->sync, &k)) {
        oomi_clear_error(); /* looked at again 0.1 s later, and failed on in the wait */
        return 0;
    }
    return (k.decided && strcmp(k.by, oomi_sync_node(c->sync))) || k.lost[0];
}

static int decided_or_ended(const oomi_sync_look *k)
{
    return k->decided || k->ended || k->lost[0];
}

static int all_ended(const oomi_sync_look *k)
{
    return k->ended;
}

/* Another node's decision as this node's relaunch, or why it cannot be. */
static int follow(struct restart *x, const oomi_launch *l, const oom_run_result *r,
                  const oomi_sync_look *k, int floor, int max_restarts)
{
    if (!k->batch)
        return oomi_fail(OOM_ENOFIT,
                         "node %s ran out of memory at batch %d and no smaller batch is left "
                         "there: the job does not fit",
                         k->by, k->failed_batch);
    if (r->restarts >= max_restarts)
        return no_restarts_left(l, r, max_restarts);
    if (k->batch < floor || k->batch > l->batch)
        return oomi_fail(OOM_ENOFIT,
                         "node %s relaunches at batch %d, which this node cannot (its batch %d, "
                         "floor %d): give every node the same batch options",
                         k->by, k->batch, l->batch, floor);
    x->batch = k->batch;
    x->accum = k->accum;
    oomi_snprintf(x->why, sizeof(x->why),
                  "the batch node %s chose after its job ran out of memory at batch %d", k->by,
                  k->failed_batch);
    return OOM_OK;
}

/* The relaunch every node of the job takes. A node whose job ran out of memory records the
 * batch it chose (batch 0 when it gives up) and takes the attempt's first such record, its own
 * or an earlier node's; one whose job ended otherwise records that and waits for one. When every
 * node ended the attempt without one (or the wait ran out), the job's own status ends the run:
 * *done. Before relaunching, each waits for every node's job to have ended: a new torchrun agent
 * must not meet what is left of the old rendezvous. */
static int sync_restart(struct restart *x, struct run_ctx *c, oomi_launch *l, oom_run_result *r,
                        struct ladder *d, int floor, int max_restarts, int *done)
{
    oomi_sync_look k;
    int err = OOM_OK, own, timed_out;

    *done = 0;
    if (l->oom) {
        own = plan_restart(x, l, r, d, floor, max_restarts, c->supervisor);
        if (own && own != OOM_ENOFIT)
            return own;
        if ((err = oomi_sync_oom(c->sync, l->batch, own ? 0 : x->batch, x->accum, l->step)) || own)
            return err ? err : own;
    } else if ((err = oomi_sync_end(c->sync, l->exit_code))) {
        return err;
    }
    if ((err = oomi_sync_wait(c->sync, &k, decided_or_ended, &timed_out, c->o->stop)))
        return err;
    if (!k.decided && k.lost[0] && l->peer_stop) /* this node's job was stopped for it */
        return oomi_fail(OOM_EJOB,
                         "node %s left the job (its oomless run exited %d), and the job cannot "
                         "go on without it; this node's job exited %d",
                         k.lost, k.lost_status, l->exit_code);
    if (!k.decided) { /* the job's own status, whoever left after it ended */
        if (k.lost[0] && !k.ended)
            oomi_notice("attempt %d: node %s left the job (its oomless run exited %d): no node "
                        "relaunches",
                        l->attempt, k.lost, k.lost_status);
        else if (timed_out)
            oomi_notice("attempt %d: %d other node(s) did not say within %.0f s how their job "
                        "ended; none ran out of memory so far: this node's job exited %d",
                        l->attempt, k.pending,
                        c->o->sync_wait_s > 0 ? c->o->sync_wait_s : OOM_DEFAULT_SYNC_WAIT,
                        l->exit_code);
        *done = 1;
        return OOM_OK;
    }
    if (strcmp(k.by, oomi_sync_node(c->sync)) && (err = follow(x, l, r, &k, floor, max_restarts)))
        return err;
    if ((err = oomi_sync_wait(c->sync, &k, all_ended, &timed_out, c->o->stop)))
        return err;
    if (timed_out)
        oomi_notice("attempt %d: %d other node(s) did not say within %.0f s that their job ended; "
                    "relaunching anyway",
                    l->attempt, k.pending,
                    c->o->sync_wait_s > 0 ? c->o->sync_wait_s : OOM_DEFAULT_SYNC_WAIT);
    oomi_sync_next(c->sync);
    return OOM_OK;
}

/* torchrun's agent could not gather the nodes: said, as it is the job's status that follows. */
static void rdzv_notice(const oomi_launch *l, const struct run_ctx *c)
{
    const char *hint = c->sync ? ""
                               : "; give every node's 'oomless run' the same --sync-dir, or "
                                 "supervise the whole job from one place ('oomless run -- "
                                 "srun ...' in the batch script)";
    if (l->rdzv_error == OOMI_RDZV_TIMEOUT)
        oomi_notice("attempt %d: torchrun gave up waiting for the other nodes at its rendezvous "
                    "(RendezvousTimeoutError, after its --rdzv-conf join_timeout, 600 s unless "
                    "set): %s%s",
                    l->attempt,
                    l->attempt > 1 ? "the other nodes did not relaunch with this one"
                                   : "not every node started the job",
                    l->attempt > 1 ? hint : "");
    else if (l->rdzv_error == OOMI_RDZV_CLOSED)
        oomi_notice("attempt %d: torchrun found its rendezvous closed (RendezvousClosedError): "
                    "another node's agent had ended the job%s",
                    l->attempt, l->attempt > 1 ? hint : "");
}

static int run_loop(oom_run_result *r, oomi_launch *l, struct run_ctx *c)
{
    const oom_run_options *o = c->o;
    struct restart x;
    int floor = o->min_batch > 0 ? o->min_batch : 1, err, done;
    int max_restarts = o->max_restarts == -1 ? 0 : o->max_restarts ? o->max_restarts : 5;
    struct ladder ladder;
    long supervisor;

    if (oomi_supervised(&supervisor, NULL, 1))
        oomi_notice("this run was launched by oomless (pid %ld): the job runs once here, and "
                    "after an out-of-memory that one relaunches it (relaunches at both levels "
                    "would multiply)",
                    supervisor);
    c->supervisor = supervisor;

    memset(&ladder, 0, sizeof(ladder));
    ladder.usable = o->version >= 2 ? (double)o->usable_bytes : 0;
    for (;;) {
        l->attempt = r->attempts + 1;
        if (c->sync && (err = oomi_sync_launch(c->sync, l->attempt, l->batch, l->accum)))
            return err;
        err = oomi_launch_run(l);
        r->attempts++;
        r->batch = l->batch;
        r->grad_accum = l->accum;
        r->exit_code = l->exit_code;
        r->oom = l->oom;
        r->stop_signal = l->stop_signal;
        if (l->peak_bytes != OOM_UNKNOWN &&
            (r->peak_bytes == OOM_UNKNOWN || l->peak_bytes > r->peak_bytes))
            r->peak_bytes = l->peak_bytes;
        if (err == OOM_EJOB)
            return oomi_fail(OOM_EJOB, "%s", l->message);
        if (err)
            return err;
        if (l->tty_wait)
            return oomi_fail_tty_wait(l);
        if (l->stop_signal)
            return oomi_fail(OOM_EINTERRUPTED, "stopped by signal %d; the job exited %d",
                             l->stop_signal, l->exit_code);
        rdzv_notice(l, c);
        if (!l->oom && (!c->sync || (l->exit_code == 0 && !l->peer_stop)))
            return OOM_OK;
        if (c->sync) {
            err = sync_restart(&x, c, l, r, &ladder, floor, max_restarts, &done);
            if (err == OOM_EINTERRUPTED && o->stop) /* a signal while waiting for the others */
                r->stop_signal = (int)*o->stop;
            if (err || done)
                return err;
        } else if ((err = plan_restart(&x, l, r, &ladder, floor, max_restarts, supervisor))) {
            return err;
        }
        apply_restart(l, r, &x);
        if (o->stop && *o->stop) { /* a signal while relaunching: launch nothing more */
            r->stop_signal = (int)*o->stop;
            return oomi_fail(OOM_EINTERRUPTED, "stopped by signal %d before attempt %d",
                             r->stop_signal, r->attempts + 1);
        }
    }
}

/* The sync folder the nodes of the job share; without one, the notice that one part of a job
 * spread over several nodes cannot recover on its own. */
static int start_nodes(struct run_ctx *c, oomi_launch *l, const oom_job *job)
{
    const oom_run_options *o = c->o;
    const char *dir = o->version >= 3 ? o->sync_dir : NULL;
    char what[96];
    int err;
    if (dir && *dir) {
        if ((err = oomi_sync_open(&c->sync, dir, o->sync_id, job->argv,
                                  o->sync_wait_s > 0 ? o->sync_wait_s : OOM_DEFAULT_SYNC_WAIT)))
            return err;
        l->peer_check = peer_check;
        l->peer_user = c;
        oomi_notice("the nodes of job '%s' agree on relaunches in '%s' (this one as %s)",
                    oomi_sync_job(c->sync), oomi_sync_path(c->sync), oomi_sync_node(c->sync));
    } else if (oomi_multinode(job->argv, what, sizeof(what)) && !oomi_uses_integration(job->argv)) {
        oomi_notice("this is one part of a job spread over several nodes (%s), each under its own "
                    "supervisor: when another node's job runs out of memory, this one fails "
                    "without an out-of-memory error of its own and is not relaunched, and a node "
                    "that relaunches waits at the rendezvous for nodes that do not come. To "
                    "recover, give every node's 'oomless run' the same --sync-dir on a shared "
                    "filesystem (or OOMLESS_SYNC_DIR), step through oomless.torch.TrainStep, "
                    "oomless.hf or oomless.lightning, or supervise the whole job from one place "
                    "('oomless run -- srun ...' in the batch script)",
                    what);
    }
    return OOM_OK;
}

/* The last record of this node in the sync file; a failure to write it is the run's when the
 * run had none (the other nodes cannot know it left). */
static int leave_nodes(struct run_ctx *c, const oom_run_result *r, int err)
{
    char keep[1024];
    int status = err ? (r->exit_code > 0 ? r->exit_code : 1) : r->exit_code, e;
    if (!c->sync)
        return err;
    oomi_snprintf(keep, sizeof(keep), "%s", oom_last_message());
    e = oomi_sync_exit(c->sync, status < 0 ? 1 : status);
    if (e && !err)
        return e;
    return err ? oomi_fail(err, "%s", keep) : OOM_OK;
}

int oom_run(oom_run_result *r, const oom_job *job, const oom_run_options *o)
{
    struct run_ctx c = {o, -1, 0, false, NULL, 0};
    oom_patterns *own = NULL;
    oom_gpu_session *gpu = NULL;
    oomi_launch l;
    int err, accum = 0;
    long effective = 0;

    if (!r || !job || !o || !job->argv || !job->argv[0])
        return oomi_fail(OOM_EINVAL, "run: no command given");
    if ((err = oomi_check_version(r->version, OOM_RUN_RESULT_VERSION, "oom_run_result")) ||
        (err = oomi_check_version(job->version, OOM_JOB_VERSION, "oom_job")) ||
        (err = oomi_check_version(o->version, OOM_RUN_OPTIONS_VERSION, "oom_run_options")) ||
        (o->relay &&
         (err = oomi_check_version(o->relay->version, OOM_JOB_RELAY_VERSION, "oom_job_relay"))))
        return err;
    *r = (oom_run_result){.version = r->version};
    r->peak_bytes = OOM_UNKNOWN;
    r->exit_code = -1;
    if ((err = check_options(o, &accum, &effective)))
        return err;
    r->effective = effective;
    if (!o->patterns && (err = oom_patterns_load(&own, NULL)))
        return err;
    /* non-blocking: opening a FIFO nobody reads fails at once (ENXIO) instead of waiting, and a
     * stalled reader is waited for only a bounded time (write_event); above fd 2, where a
     * caller with stderr closed copies the job's stderr */
    if (o->events_path && (c.events_fd = open_events(o->events_path, &c.events_regular)) < 0) {
        err = oomi_fail(OOM_EIO, "cannot open the events file '%s': %s", o->events_path,
                        errno == ENXIO ? "a FIFO that nobody reads" : strerror(errno));
        goto done;
    }
    if (!o->no_gpu && oom_gpu_open(&gpu) != OOM_OK)
        oomi_clear_error(); /* peaks are then unknown; the job still runs */
    init_launch(&l, job, o, &c, gpu, o->patterns ? o->patterns : own);
    l.batch = o->batch;
    l.accum = accum;
    if ((err = start_nodes(&c, &l, job)))
        goto done;
    err = leave_nodes(&c, r, run_loop(r, &l, &c));
    if (!err && c.events_error)
        err = oomi_fail(OOM_EIO, "cannot write the events file '%s': %s", o->events_path,
                        c.events_error == EAGAIN ? "its reader does not keep up (waited 1 s)"
                                                 : strerror(c.events_error));
done:
    if (c.events_fd >= 0)
        close(c.events_fd);
    oomi_sync_free(c.sync);
    oom_gpu_close(gpu);
    oom_patterns_free(own);
    return err;
}

int oom_run_to_json(char **out, const oom_run_result *r)
{
    json_object *o;
    int err;
    if (!out || !r)
        return oomi_fail(OOM_EINVAL, "run json: missing argument");
    *out = NULL;
    if ((err = oomi_check_version(r->version, OOM_RUN_RESULT_VERSION, "oom_run_result")))
        return err;
    if (!(o = json_object_new_object()))
        return oomi_nomem();
    oomi_json_put(o, "exit_code", r->exit_code >= 0 ? json_object_new_int(r->exit_code) : NULL);
    oomi_json_put(o, "attempts", json_object_new_int(r->attempts));
    oomi_json_put(o, "restarts", json_object_new_int(r->restarts));
    oomi_json_put(o, "batch", json_object_new_int(r->batch));
    oomi_json_put(o, "grad_accum", json_object_new_int(r->grad_accum));
    /* what the last launch ran (an inexact restart differs from the target it kept) */
    oomi_json_put(o, "effective_batch",
                  json_object_new_int64((int64_t)r->batch * (int64_t)r->grad_accum));
    oomi_json_put(o, "target_effective_batch", json_object_new_int64(r->effective));
    oomi_json_put(o, "peak_bytes", oomi_json_bytes(r->peak_bytes));
    oomi_json_put(o, "oom", json_object_new_boolean(r->oom));
    oomi_json_put(o, "signal", r->stop_signal ? json_object_new_int(r->stop_signal) : NULL);
    return oomi_json_finish(out, o);
}
