/*
 * launch.c - one supervised launch of a job: placeholders and environment, spawn, copy its
 * output through while reading it for the error that ends the job, sample its GPU memory,
 * forward signals, enforce the timeout and the kill grace, and leave no process behind.
 */
#define _GNU_SOURCE /* F_SETPIPE_SZ */
#include "job/job.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

#define KNOWN_MAX 256

char *oomi_expand_arg(const char *t, int batch, int accum, int seq, int attempt)
{
    static const char *const names[] = {"{batch}", "{accum}", "{seq}", "{effective}", "{attempt}"};
    long vals[5];
    oomi_sb sb = OOMI_SB_INIT;
    char *text;
    size_t i;

    vals[0] = batch;
    vals[1] = accum;
    vals[2] = seq;
    vals[3] = (long)batch * accum;
    vals[4] = attempt;
    while (*t) {
        for (i = 0; i < OOMI_ARRAY_LEN(names); i++)
            if (!strncmp(t, names[i], strlen(names[i])) && (i != 2 || seq > 0))
                break;
        if (i < OOMI_ARRAY_LEN(names)) {
            oomi_sb_printf(&sb, "%ld", vals[i]);
            t += strlen(names[i]);
        } else {
            oomi_sb_putc(&sb, *t++);
        }
    }
    return oomi_sb_finish(&sb, &text) ? NULL : text;
}

static void free_vec(char **v)
{
    size_t i;
    for (i = 0; v && v[i]; i++)
        oomi_free(v[i]);
    oomi_free(v);
}

static char **build_argv(const oomi_launch *l)
{
    size_t n = 0, i;
    char **v;
    while (l->job->argv[n])
        n++;
    if (!(v = oomi_calloc(n + 1, sizeof(*v))))
        return NULL;
    for (i = 0; i < n; i++)
        if (!(v[i] = oomi_expand_arg(l->job->argv[i], l->batch, l->accum, l->seq, l->attempt))) {
            free_vec(v);
            return NULL;
        }
    return v;
}

/* 1 when `entry` ("KEY=..." or "KEY") sets the variable named by `kv` ("KEY=...") */
static int same_key(const char *entry, const char *kv)
{
    size_t k = strcspn(kv, "=");
    return !strncmp(entry, kv, k) && (entry[k] == '=' || entry[k] == '\0');
}

static char **build_env(const oomi_launch *l)
{
    char *ours[9] = {0};
    size_t n = 0, no = 0, ne = 0, i, j, k = 0;
    char **v = NULL;
    int has_unbuf = getenv("PYTHONUNBUFFERED") != NULL;

    while (l->job->env && l->job->env[ne])
        has_unbuf |= same_key(l->job->env[ne++], "PYTHONUNBUFFERED=");
    ours[no++] = oomi_asprintf("OOMLESS_BATCH_SIZE=%d", l->batch);
    ours[no++] = oomi_asprintf("OOMLESS_GRAD_ACCUM=%d", l->accum);
    ours[no++] = oomi_asprintf("OOMLESS_EFFECTIVE_BATCH=%ld", (long)l->batch * l->accum);
    ours[no++] = oomi_asprintf("OOMLESS_ATTEMPT=%d", l->attempt);
    ours[no++] = oomi_supervisor_env(); /* a nested run leaves relaunching to this one */
    if (l->seq > 0)
        ours[no++] = oomi_asprintf("OOMLESS_SEQ_LEN=%d", l->seq);
    if (l->events_path) /* where oomless.torch/hf/lightning add their oom-stop records */
        ours[no++] = oomi_asprintf("OOMLESS_RECOVERY_EVENTS=%s", l->events_path);
    if (!has_unbuf)
        ours[no++] = oomi_strdup("PYTHONUNBUFFERED=1");
    for (i = 0; i < no; i++)
        if (!ours[i])
            goto fail;
    while (environ[n])
        n++;
    if (!(v = oomi_calloc(n + ne + no + 2, sizeof(*v))))
        goto fail;
    for (i = 0; i < n; i++) { /* the inherited environment, less what we set */
        int skip = 0;
        for (j = 0; j < no; j++)
            skip |= same_key(environ[i], ours[j]);
        for (j = 0; j < ne; j++)
            skip |= same_key(environ[i], l->job->env[j]);
        if (!skip && !(v[k++] = oomi_strdup(environ[i])))
            goto fail;
    }
    for (j = 0; j < ne; j++) { /* the caller's additions, less what the launch itself sets */
        int skip = 0;
        for (i = 0; i < no; i++)
            skip |= same_key(l->job->env[j], ours[i]);
        if (!skip && !(v[k++] = oomi_strdup(l->job->env[j])))
            goto fail;
    }
    for (j = 0; j < no; j++) {
        v[k++] = ours[j];
        ours[j] = NULL;
    }
    return v;
fail:
    for (i = 0; i < no; i++)
        oomi_free(ours[i]);
    free_vec(v);
    return NULL;
}

/* ---- the running state --------------------------------------------------------------------- */

struct stream {
    int fd;           /* the job's pipe, -1 once closed */
    oomi_lines lines; /* step and recovery lines (joblines.c) */
    oomi_outq out;    /* read, not yet written to oomless's stdout/stderr */
};

struct watch {
    oomi_launch *l;
    oomi_proc p;
    struct stream s[2];
    oomi_oomscan scan; /* the error that ends the job, read from all of its output */
    pid_t known[KNOWN_MAX];
    size_t nknown;
    unsigned long long since; /* the leader's start time */
    int tty;                  /* the caller's terminal when l->foreground, else -1 */
    sig_atomic_t seen_usr1, seen_usr2, seen_tstp, seen_cont; /* relay counts passed on */
    sig_atomic_t stops_before; /* the relay's stop count when the launch started */
    double start, paused;      /* when it started; seconds spent stopped with the caller */
    double term_at;            /* when SIGTERM went (a signal, the timeout), 0 */
    double next_peer;          /* when to call l->peer_check next */
    int killed;                /* SIGKILL sent after the grace */
    int ended, status;         /* the leader ended, with this wait status (the guardian's report) */
};

static oomi_tree tree_of(const struct watch *w)
{
    oomi_tree t = {w->p.pid, w->since, w->known, w->nknown, w->p.guardian};
    return t;
}

static void send_event(const oomi_launch *l, oom_job_event_kind kind, int sig, int by_job)
{
    oom_job_event ev;
    if (!l->on_event)
        return;
    memset(&ev, 0, sizeof(ev));
    ev.version = OOM_JOB_EVENT_VERSION;
    ev.kind = kind;
    ev.time = oomi_now_unix();
    ev.pid = l->pid;
    ev.attempt = l->attempt;
    ev.batch = l->batch;
    ev.grad_accum = l->accum;
    ev.peak_bytes = l->peak_bytes;
    ev.exit_code = l->exit_code;
    ev.step = l->step;
    ev.signal = sig;
    ev.by_job = by_job;
    ev.duration_s = l->duration_s;
    if (kind == OOM_EVENT_OOM) {
        ev.rank = l->oom_rank[0] ? l->oom_rank : NULL;
        ev.reason = l->oom_reason[0] ? l->oom_reason : NULL;
    }
    l->on_event(&ev, l->user);
}

void oomi_launch_event(const oomi_launch *l, oom_job_event_kind kind)
{
    send_event(l, kind, l->stop_signal, 0);
}

int oomi_fail_tty_wait(const oomi_launch *l)
{
    return oomi_fail(OOM_EJOB,
                     "the job stopped waiting for terminal %s (%s), which oomless cannot give "
                     "it: oomless is not in its terminal's foreground, or has no terminal. Run "
                     "it in the foreground, or give the job its input from a file (< FILE)",
                     l->tty_wait == SIGTTIN ? "input" : "output or settings",
                     l->tty_wait == SIGTTIN ? "SIGTTIN" : "SIGTTOU");
}

/* Reads what the job's pipe holds, as far as the output queue has room (at most one queue's
 * worth per call, so that a job writing without pause cannot hold the loop); closes the pipe at
 * EOF. Returns the bytes read. */
static size_t pump(struct watch *w, struct stream *s)
{
    size_t total = 0, space;
    ssize_t n;
    while (s->fd >= 0 && total < OOMI_OUTQ_MAX && oomi_outq_room(&s->out) > 0) {
        const char *passed;
        char *at;
        if ((space = oomi_outq_tee(&s->out, s->fd, &passed)) > 0) {
            oomi_lines_take(&s->lines, &w->scan, s == &w->s[1], w->l, passed, space);
            total += space;
            continue;
        }
        at = oomi_outq_space(&s->out, &space);
        n = read(s->fd, at, space);
        if (n > 0) {
            oomi_lines_take(&s->lines, &w->scan, s == &w->s[1], w->l, at, (size_t)n);
            oomi_outq_commit(&s->out, (size_t)n);
            total += (size_t)n;
            continue;
        }
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        close(s->fd);
        s->fd = -1;
        oomi_lines_end(&s->lines, w->l);
    }
    return total;
}

/* The descriptors to wait on: the guardian's reports, a pipe while its queue has room, a
 * destination while it has bytes queued. */
static nfds_t poll_set(struct watch *w, struct pollfd fds[5], int *reading)
{
    nfds_t nf = 0;
    int i;
    *reading = 0;
    if (w->p.report_fd >= 0 && !w->ended) /* the leader's stops and end wake the loop */
        fds[nf++] = (struct pollfd){w->p.report_fd, POLLIN, 0};
    for (i = 0; i < 2; i++) {
        struct stream *s = &w->s[i];
        if (s->fd >= 0 && oomi_outq_room(&s->out) > 0) {
            fds[nf++] = (struct pollfd){s->fd, POLLIN, 0};
            *reading = 1;
        }
        if (s->out.len > 0)
            fds[nf++] = (struct pollfd){s->out.to, POLLOUT, 0};
    }
    return nf;
}

/* Waits up to ms for a pipe or a destination, then moves what can move. Returns the bytes
 * read plus written. */
static size_t move_output(struct watch *w, int ms, int *reading)
{
    struct pollfd fds[5];
    nfds_t nf = poll_set(w, fds, reading);
    size_t moved = 0;
    int i;
    poll(nf ? fds : NULL, nf, ms);
    for (i = 0; i < 2; i++) {
        moved += pump(w, &w->s[i]);
        moved += oomi_outq_flush(&w->s[i].out);
    }
    return moved;
}

/* Whether an NVML process is the job's; one that is, and is not the leader, is remembered (it
 * still counts after leaving the group, once reparented to us). */
static int job_process(struct watch *w, const oomi_tree *t, pid_t pid)
{
    size_t k;
    if (pid == w->p.pid)
        return 1;
    if (!oomi_proc_in_tree(pid, t))
        return 0;
    for (k = 0; k < w->nknown && w->known[k] != pid; k++)
        ;
    if (k == w->nknown && w->nknown < KNOWN_MAX)
        w->known[w->nknown++] = pid;
    return 1;
}

/* One NVML sample: the largest per-GPU sum of the job's processes' used bytes. Only the PIDs
 * NVML lists are looked up in /proc (their parent links), never the whole process table: on a
 * node with thousands of processes that scan, 20 times a second, cost half a core. */
static void sample(struct watch *w)
{
    oom_gpu_list *list = NULL;
    oomi_tree t = tree_of(w);
    size_t g, k, d;
    uint64_t best = 0, capacity = 0;
    int found = 0;

    if (!w->l->gpu || oom_gpu_sample(&list, w->l->gpu, OOM_SAMPLE_PROCESSES) != OOM_OK)
        return;
    for (g = 0; g < list->count; g++) {
        const oom_gpu_info *gi = list->gpus[g];
        uint64_t sum = 0;
        for (k = 0; k < gi->process_count; k++) {
            const oom_gpu_process *pr = gi->processes[k];
            for (d = 0; d < k && gi->processes[d]->pid != pr->pid; d++)
                ; /* a pid in both the compute and the graphics list counts once */
            if (d == k && pr->used_bytes != OOM_UNKNOWN && job_process(w, &t, (pid_t)pr->pid)) {
                sum += pr->used_bytes;
                found = 1;
            }
        }
        if (sum > best)
            best = sum, capacity = gi->total_bytes != OOM_UNKNOWN
                                       ? gi->total_bytes - oom_gpu_reserved_bytes(gi)
                                       : 0;
        /* what is not the job's on the GPU it uses: other processes and unattributed memory */
        if (sum && gi->used_bytes != OOM_UNKNOWN && gi->used_bytes > sum &&
            gi->used_bytes - sum > w->l->others_peak_bytes) {
            w->l->others_peak_bytes = gi->used_bytes - sum;
            w->l->others_gpu = g;
        }
    }
    oom_gpu_list_free(list);
    if (found && (w->l->peak_bytes == OOM_UNKNOWN || best > w->l->peak_bytes))
        w->l->peak_bytes = best, w->l->capacity_bytes = capacity;
}

int oomi_check_kill_grace(double kill_grace_s, const char *who)
{
    if (kill_grace_s >= 0 && kill_grace_s <= OOM_MAX_KILL_GRACE)
        return OOM_OK;
    return oomi_fail(OOM_EINVAL, "%s: kill grace %g s is not from 0 to %g seconds", who,
                     kill_grace_s, OOM_MAX_KILL_GRACE);
}

/* SIGTERM to the job's group (continued, so that a stopped job acts on it); the kill grace
 * starts. */
static void terminate(struct watch *w, int sig)
{
    kill(-w->p.pid, sig);
    kill(-w->p.pid, SIGCONT);
    if (w->term_at == 0)
        w->term_at = oomi_now_mono();
}

/* The stop signals the caller counted since the launch started (0 without a version-2 relay) */
static long stops_since_start(const struct watch *w)
{
    const oom_job_relay *r = w->l->relay;
    return r && r->version >= 2 ? (long)r->stops - (long)w->stops_before : 0;
}

/* Forwards a new stop signal; SIGTERM at the timeout (time spent stopped with the caller does
 * not count); SIGKILL once the grace has passed, or at once when a second stop signal comes
 * during it (a second Ctrl-C: the user will not wait). */
static void enforce(struct watch *w)
{
    oomi_launch *l = w->l;
    double now = oomi_now_mono();
    int sig = l->stop ? (int)*l->stop : 0;
    bool again = l->stop_signal && stops_since_start(w) >= 2;

    if (sig && sig != l->stop_signal) {
        l->stop_signal = sig;
        terminate(w, sig);
        oomi_launch_event(l, OOM_EVENT_SIGNAL);
    }
    if (l->timeout_s > 0 && !l->timed_out && now - w->start - w->paused >= l->timeout_s) {
        l->timed_out = 1;
        terminate(w, SIGTERM);
    }
    if (l->peer_check && !l->peer_stop && now >= w->next_peer) { /* the other nodes' word */
        w->next_peer = now + 0.1;
        if (l->peer_check(l->peer_user)) {
            l->peer_stop = 1;
            terminate(w, SIGTERM);
        }
    }
    if (w->term_at > 0 && !w->killed && (again || now - w->term_at >= l->kill_grace_s)) {
        w->killed = 1;
        kill(-w->p.pid, SIGKILL);
        oomi_launch_event(l, OOM_EVENT_KILL);
    }
}

/* ---- job control: the terminal, stops, relayed signals -------------------------------------- */

/* Gives the job the terminal when the caller holds it. 1 when the job holds it now. */
static int give_tty(struct watch *w)
{
    if (oomi_tty_is_foreground(w->tty, w->p.pid))
        return 1;
    return oomi_tty_is_foreground(w->tty, getpgrp()) &&
           oomi_tty_set_foreground(w->tty, w->p.pid) == 0;
}

/* Takes the terminal back from the job's group, when it holds it. */
static void take_tty(struct watch *w)
{
    if (oomi_tty_is_foreground(w->tty, w->p.pid))
        oomi_tty_set_foreground(w->tty, getpgrp());
}

/* A job stopped for a terminal it cannot get is ended: waiting would wait forever. */
static void end_tty_wait(struct watch *w, int sig)
{
    w->l->tty_wait = sig;
    terminate(w, SIGTERM);
}

/* The job stopped on a terminal stop signal: it stays stopped while the callback runs (a caller
 * doing job control stops itself there, and returns once continued), then goes on, with the
 * terminal when the caller holds it; one that wanted the terminal and still cannot have it is
 * ended. */
static void stopped_with_caller(struct watch *w, int sig, int by_job)
{
    double t0 = oomi_now_mono();
    take_tty(w);
    send_event(w->l, OOM_EVENT_STOP, sig, by_job);
    w->paused += oomi_now_mono() - t0;
    if (!give_tty(w) && (sig == SIGTTIN || sig == SIGTTOU)) {
        end_tty_wait(w, sig);
        return;
    }
    kill(-w->p.pid, SIGCONT);
}

/* The leader stopped on `sig`. */
static void leader_stopped(struct watch *w, int sig)
{
    if (w->l->tty_wait)
        return;
    if (sig == SIGTTIN || sig == SIGTTOU) {
        if (give_tty(w)) /* it read before the terminal was handed over, or after an fg */
            kill(-w->p.pid, SIGCONT);
        else if (w->tty < 0) /* no terminal to wait for: end it now */
            end_tty_wait(w, sig);
        else
            stopped_with_caller(w, sig, 1);
    } else if (sig == SIGTSTP) {
        stopped_with_caller(w, sig, 1);
    } else { /* SIGSTOP: left to whoever stopped it */
        send_event(w->l, OOM_EVENT_STOP, sig, 1);
    }
}

/* What the guardian saw of the leader since the last look: its stops and continuations, then
 * its end. A stop the leader no longer is in (it ended, or was continued since: oomless's own
 * relayed SIGTSTP, continued by oomless) is passed over, as waitid() would not have reported
 * it then; a guardian gone without a word (it was SIGKILLed: the leader died with it) is an
 * end by SIGKILL. */
static void check_leader(struct watch *w)
{
    oomi_guard_msg seen[32];
    size_t n = 0, i;
    int kind, value, r;

    while (n < OOMI_ARRAY_LEN(seen) && (r = oomi_proc_report(&w->p, &kind, &value)) != 0) {
        if (r < 0) {
            seen[n++] = (oomi_guard_msg){OOMI_GUARD_EXIT, SIGKILL};
            break;
        }
        seen[n++] = (oomi_guard_msg){kind, value};
        if (kind == OOMI_GUARD_EXIT)
            break;
    }
    for (i = 0; i < n && !w->ended; i++) {
        if (seen[i].kind == OOMI_GUARD_EXIT)
            w->ended = 1, w->status = seen[i].value;
        else if (seen[i].kind == OOMI_GUARD_CONT)
            send_event(w->l, OOM_EVENT_CONTINUE, SIGCONT, 0);
        else if (seen[i].kind == OOMI_GUARD_STOP && seen[n - 1].kind != OOMI_GUARD_EXIT &&
                 oomi_proc_stopped(w->p.pid))
            leader_stopped(w, seen[i].value);
    }
}

/* Passes on what the caller's handlers counted since the last look. */
static void relay_signals(struct watch *w)
{
    const oom_job_relay *r = w->l->relay;
    int tstp, cont;

    if (!r)
        return;
    if (r->usr1 != w->seen_usr1) {
        w->seen_usr1 = r->usr1;
        kill(-w->p.pid, SIGUSR1);
        send_event(w->l, OOM_EVENT_SIGNAL, SIGUSR1, 0);
    }
    if (r->usr2 != w->seen_usr2) {
        w->seen_usr2 = r->usr2;
        kill(-w->p.pid, SIGUSR2);
        send_event(w->l, OOM_EVENT_SIGNAL, SIGUSR2, 0);
    }
    tstp = r->tstp != w->seen_tstp;
    cont = r->cont != w->seen_cont;
    w->seen_tstp = r->tstp;
    w->seen_cont = r->cont;
    if (cont) { /* continued (after a stop too, if both came): the job goes on */
        give_tty(w);
        kill(-w->p.pid, SIGCONT);
    } else if (tstp && !w->l->tty_wait) {
        kill(-w->p.pid, SIGTSTP);
        stopped_with_caller(w, SIGTSTP, 0);
    }
}

static void supervise_loop(struct watch *w)
{
    oomi_launch *l = w->l;
    double next_sample = w->start;
    int status, sig;

    for (;;) {
        double now;
        int ms, reading;

        relay_signals(w);
        check_leader(w);
        enforce(w);
        if ((now = oomi_now_mono()) >= next_sample) {
            sample(w);
            next_sample = now + l->sample_interval_s;
        }
        if (w->ended)
            break;
        ms = (int)((next_sample - oomi_now_mono()) * 1000.0) + 1;
        ms = ms < 1 ? 1 : ms > 100 ? 100 : ms;
        move_output(w, ms, &reading);
    }
    sample(w); /* the last one, while the leader is a zombie (the guardian keeps it) */
    status = w->status;
    /* Ctrl-C / Ctrl-\ at the terminal the job held: the user interrupted oomless's job, as a
     * SIGINT to oomless would have */
    sig = WIFSIGNALED(status) ? WTERMSIG(status) : 0;
    if (!l->stop_signal && (sig == SIGINT || sig == SIGQUIT) &&
        oomi_tty_is_foreground(w->tty, w->p.pid))
        l->stop_signal = sig;
    take_tty(w);
    l->duration_s = oomi_now_mono() - w->start - w->paused;
    l->exit_code = oomi_proc_exit_code(status);
}

/* Whether the launch is being ended by a signal or its timeout: its output then gets only a
 * short wait for a stalled reader. */
static int ending(const oomi_launch *l)
{
    return l->stop_signal || l->timed_out || l->tty_wait || l->peer_stop || (l->stop && *l->stop);
}

/* After the leader: kill the rest, then read what the pipes still hold (for 2 s at most while
 * there is room to read into) and write out what is queued: for as long as the destination
 * takes it, but once a signal or the timeout is ending the launch, for at most 1 s without
 * progress, else for at most output_wait_s without progress (when set); what is left then is
 * dropped, and said. */
static void finish_streams(struct watch *w)
{
    double reading_for = 0, last_move, now, wait = w->l->output_wait_s;
    size_t left;
    int i, reading;
    oomi_tree t = tree_of(w);

    /* the guardian kills what is left (its group, every descendant) and ends; what it could
     * not reach (it was killed itself) is ours to kill */
    if (!oomi_proc_release(&w->p))
        oomi_proc_kill_all(&t);
    last_move = oomi_now_mono();
    while (w->s[0].fd >= 0 || w->s[1].fd >= 0 || w->s[0].out.len > 0 || w->s[1].out.len > 0) {
        double before = oomi_now_mono();
        if (move_output(w, 100, &reading) > 0)
            last_move = oomi_now_mono();
        now = oomi_now_mono();
        if (reading && (reading_for += now - before) >= 2.0)
            for (i = 0; i < 2; i++)
                if (w->s[i].fd >= 0) {
                    close(w->s[i].fd);
                    w->s[i].fd = -1;
                }
        if ((ending(w->l) && now - last_move >= 1.0) || (wait > 0 && now - last_move >= wait))
            break;
    }
    for (i = 0; i < 2; i++)
        if (w->s[i].fd >= 0)
            close(w->s[i].fd);
    if ((left = w->s[0].out.len + w->s[1].out.len) > 0 && !ending(w->l))
        oomi_notice("the job's output was not all written: its reader took nothing for %.0f s "
                    "(a stalled pipe or pager); %zu bytes dropped",
                    wait, left);
}

static int exec_failed(oomi_launch *l, int err_no)
{
    l->exec_failed = 1;
    l->exit_code = err_no == ENOENT ? 127 : 126;
    oomi_snprintf(l->message, sizeof(l->message), "%s", oom_last_message());
    return OOM_EJOB;
}

int oomi_launch_run(oomi_launch *l)
{
    struct watch *w = NULL;
    char **argv = NULL, **envp = NULL, *path = NULL;
    int err, err_no = 0, i;

    l->pid = -1;
    l->exit_code = -1;
    l->oom = l->timed_out = l->exec_failed = l->stop_signal = l->tty_wait = 0;
    l->peer_stop = l->rdzv_error = 0;
    l->peak_bytes = OOM_UNKNOWN;
    l->capacity_bytes = 0;
    l->duration_s = 0;
    l->step = -1;
    l->recovery_batch = 0;
    l->oom_rank[0] = l->oom_reason[0] = '\0';
    l->message[0] = '\0';
    if (!(argv = build_argv(l)) || !(envp = build_env(l)) || !(w = oomi_calloc(1, sizeof(*w)))) {
        err = oomi_nomem();
        goto done;
    }
    w->tty = l->foreground ? oomi_tty_open() : -1;
    if (l->relay) { /* what was caught before this launch is not passed on */
        w->seen_usr1 = l->relay->usr1;
        w->seen_usr2 = l->relay->usr2;
        w->seen_tstp = l->relay->tstp;
        w->seen_cont = l->relay->cont;
        w->stops_before = l->relay->version >= 2 ? l->relay->stops : 0;
    }
    if ((err = oomi_proc_resolve(&path, &err_no, argv[0])) ||
        (err = oomi_proc_spawn(&w->p, &err_no, path, argv, envp,
                               oomi_tty_is_foreground(w->tty, getpgrp()) ? w->tty : -1))) {
        if (err == OOM_EJOB)
            err = exec_failed(l, err_no);
        goto done;
    }
    w->l = l;
    w->start = oomi_now_mono();
    l->pid = w->p.pid;
    oomi_oomscan_init(&w->scan, l->patterns);
    w->since = oomi_proc_start_time(w->p.pid);
    w->s[0].fd = w->p.out_fd;
    w->s[1].fd = w->p.err_fd;
    for (i = 0; i < 2; i++) /* room for what a job logs between two reads (else as it is) */
        fcntl(w->s[i].fd, F_SETPIPE_SZ, OOMI_OUTQ_MAX);
    oomi_outq_init(&w->s[0].out, l->job->stdout_fd ? l->job->stdout_fd : 1);
    oomi_outq_init(&w->s[1].out, l->job->stderr_fd ? l->job->stderr_fd : 2);
    oomi_launch_event(l, OOM_EVENT_LAUNCH);
    supervise_loop(w);
    finish_streams(w);
    l->oom =
        !l->timed_out && !l->stop_signal && l->exit_code != 0 && oomi_oomscan_verdict(&w->scan);
    if (!l->timed_out && !l->stop_signal && l->exit_code != 0 && l->recovery_batch > 0)
        l->oom = 1; /* every rank stopped for a relaunch at an agreed micro-batch (exit 75, or
                       1 under torchrun): an out-of-memory error, whatever the text said */
    if (l->oom) {
        if (!l->oom_rank[0])
            oomi_snprintf(l->oom_rank, sizeof(l->oom_rank), "%s", w->scan.oom_rank);
        oomi_snprintf(l->oom_reason, sizeof(l->oom_reason), "%s", w->scan.oom_line);
    }
    oomi_launch_event(l, l->oom ? OOM_EVENT_OOM : OOM_EVENT_EXIT);
    err = OOM_OK;
done:
    if (w && w->l) /* the streams were set up */
        for (i = 0; i < 2; i++)
            oomi_outq_dispose(&w->s[i].out);
    if (w && w->tty >= 0)
        close(w->tty);
    oomi_free(path);
    free_vec(argv);
    free_vec(envp);
    oomi_free(w);
    return err;
}
