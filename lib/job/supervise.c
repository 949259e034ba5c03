/*
 * supervise.c - `run`: launch the job; when it dies of out-of-memory, relaunch it with the next
 * smaller micro-batch that divides the effective batch and the matching larger accumulation.
 * Every launch, OOM, restart and exit is reported to the caller and appended to the events file.
 */
#include "job/job.h"

#include <errno.h>
#include <fcntl.h>
#include <json-c/json.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct run_ctx {
    const oom_run_options *o;
    int events_fd;
    int events_error;
    bool events_regular; /* a regular file: all-or-nothing appends; else a stream (FIFO) */
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

/* The next smaller micro-batch >= floor that divides the effective batch; 0 when none. */
static int next_smaller(int batch, long effective, int floor)
{
    int b;
    for (b = batch - 1; b >= floor && b >= 1; b--)
        if (effective % b == 0)
            return b;
    return 0;
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
    return OOM_OK;
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

/* Announces the relaunch; returns OOM_OK with the new batch, or OOM_ENOFIT. */
static int plan_restart(oomi_launch *l, oom_run_result *r, const oom_run_options *o, int floor,
                        int max_restarts)
{
    int next;
    if (r->restarts >= max_restarts)
        return oomi_fail(OOM_ENOFIT,
                         "the job ran out of memory at batch %d after %d restart(s) "
                         "(--max-restarts %d)",
                         l->batch, r->restarts, max_restarts);
    next = l->recovery_batch; /* the ranks' agreed micro-batch (oomless.torch), when it fits */
    if (next < floor || next >= l->batch || r->effective % next != 0)
        next = next_smaller(l->batch, r->effective, floor);
    if (!next)
        return oomi_fail(OOM_ENOFIT,
                         "the job does not fit: it ran out of memory at batch %d and no smaller "
                         "batch >= %d divides the effective batch %ld",
                         l->batch, floor, r->effective);
    if (l->on_event) {
        oom_job_event ev = OOM_JOB_EVENT_INIT;
        ev.kind = OOM_EVENT_RESTART;
        ev.time = oomi_now_unix();
        ev.pid = l->pid;
        ev.attempt = l->attempt + 1;
        ev.batch = next;
        ev.grad_accum = (int)(r->effective / next);
        ev.previous_batch = l->batch;
        ev.previous_accum = l->accum;
        ev.peak_bytes = l->peak_bytes;
        ev.exit_code = l->exit_code;
        ev.step = l->step;
        l->on_event(&ev, l->user);
    }
    r->restarts++;
    l->batch = next;
    l->accum = (int)(r->effective / next);
    return OOM_OK;
}

static int run_loop(oom_run_result *r, oomi_launch *l, const oom_run_options *o)
{
    int floor = o->min_batch > 0 ? o->min_batch : 1, err;
    int max_restarts = o->max_restarts == -1 ? 0 : o->max_restarts ? o->max_restarts : 5;

    for (;;) {
        l->attempt = r->attempts + 1;
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
        if (!l->oom)
            return OOM_OK;
        if ((err = plan_restart(l, r, o, floor, max_restarts)))
            return err;
        if (o->stop && *o->stop) { /* a signal while relaunching: launch nothing more */
            r->stop_signal = (int)*o->stop;
            return oomi_fail(OOM_EINTERRUPTED, "stopped by signal %d before attempt %d",
                             r->stop_signal, r->attempts + 1);
        }
    }
}

int oom_run(oom_run_result *r, const oom_job *job, const oom_run_options *o)
{
    struct run_ctx c = {o, -1, 0, false};
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
    err = run_loop(r, &l, o);
    if (!err && c.events_error)
        err = oomi_fail(OOM_EIO, "cannot write the events file '%s': %s", o->events_path,
                        c.events_error == EAGAIN ? "its reader does not keep up (waited 1 s)"
                                                 : strerror(c.events_error));
done:
    if (c.events_fd >= 0)
        close(c.events_fd);
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
    oomi_json_put(o, "effective_batch", json_object_new_int64(r->effective));
    oomi_json_put(o, "peak_bytes", oomi_json_bytes(r->peak_bytes));
    oomi_json_put(o, "oom", json_object_new_boolean(r->oom));
    oomi_json_put(o, "signal", r->stop_signal ? json_object_new_int(r->stop_signal) : NULL);
    return oomi_json_finish(out, o);
}
