/*
 * watch_session.c - one running watch, shared by the text/JSON modes (cmd_watch.c) and the
 * interactive view (watch_tui.c): a sampling step with its CSV rows and events, and the
 * formatting both show. Neither of those files is needed here.
 */
#include "cli.h"
#include "core/core.h"
#include "watch_session.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

volatile sig_atomic_t watch_stop_signal;

double watch_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void watch_process_row(struct watch_process_row *row, const oom_watch_process *p)
{
    snprintf(row->mem, sizeof(row->mem), "N/A");
    snprintf(row->batch, sizeof(row->batch), "-");
    if (p->used_bytes != OOM_UNKNOWN)
        oom_format_size(row->mem, sizeof(row->mem), p->used_bytes);
    if (p->batch_size >= 0 && p->grad_accum >= 0)
        snprintf(row->batch, sizeof(row->batch), "%lldx%lld", (long long)p->batch_size,
                 (long long)p->grad_accum);
    else if (p->batch_size >= 0)
        snprintf(row->batch, sizeof(row->batch), "%lld", (long long)p->batch_size);
    row->user = p->local ? p->user : "?";
    row->command = p->local ? (p->command[0] ? p->command : "?") : "(not in this PID namespace)";
    /* out of memory: "?" rather than the raw text */
    row->user = (row->owned[0] = oomi_shown(row->user)) ? row->owned[0] : "?";
    row->command = (row->owned[1] = oomi_shown(row->command)) ? row->owned[1] : "?";
}

void watch_process_row_done(struct watch_process_row *row)
{
    oomi_free(row->owned[0]);
    oomi_free(row->owned[1]);
    row->owned[0] = row->owned[1] = NULL;
}

char *watch_format_duration(char *buf, size_t size, double s)
{
    long long t = (long long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, size, "%lldh%02lldm", t / 3600, t % 3600 / 60);
    else if (t >= 60)
        snprintf(buf, size, "%lldm%02llds", t / 60, t % 60);
    else
        snprintf(buf, size, "%llds", t);
    return buf;
}

static int step_fail(struct watch_ctx *w, int err)
{
    const char *msg = oom_last_message();
    snprintf(w->error, sizeof(w->error), "%s", *msg ? msg : oom_strerror(err));
    return cli_exit_code(err);
}

static int write_csv(struct watch_ctx *w, const oom_watch_snapshot *s)
{
    char *rows = NULL;
    int err;
    if (!w->log)
        return EXIT_OK;
    if ((err = oom_watch_to_csv(&rows, s)))
        return step_fail(w, err);
    watch_log_append(w->log, rows);
    oom_free(rows);
    return EXIT_OK;
}

int watch_step(struct watch_ctx *w)
{
    int err;
    if ((err = oom_monitor_sample(w->monitor)))
        return step_fail(w, err);
    w->taken++;
    w->events_added = 0;
    if (w->events && (err = oom_event_log_poll(w->events, &w->events_added)))
        return step_fail(w, err);
    return write_csv(w, oom_monitor_snapshot(w->monitor));
}

char *watch_format_event(char *buf, size_t size, const oom_run_event *e)
{
    char when[32] = "?", peak[16], *name = oomi_shown(e->name), *detail = NULL;
    time_t t = (time_t)e->time;
    struct tm tm;
    size_t n;

#define ADD(...)                                                                                   \
    do {                                                                                           \
        n = strlen(buf);                                                                           \
        snprintf(buf + n, size - n, __VA_ARGS__);                                                  \
    } while (0)
    if (localtime_r(&t, &tm))
        strftime(when, sizeof(when), "%H:%M:%S", &tm);
    snprintf(buf, size, "%s  %-7s", when, name ? name : "?");
    if (e->pid >= 0)
        ADD(" pid %lld", (long long)e->pid);
    if (e->attempt >= 0)
        ADD(" attempt %lld", (long long)e->attempt);
    if (e->batch >= 0)
        ADD(" batch %lld%s", (long long)e->batch, e->batch_changed ? " (changed)" : "");
    if (e->grad_accum >= 0)
        ADD(" grad_accum %lld", (long long)e->grad_accum);
    if (e->peak_bytes != OOM_UNKNOWN)
        ADD(" peak %s", oom_format_size(peak, sizeof(peak), e->peak_bytes));
    if (e->exit_code >= 0)
        ADD(" exit %lld", (long long)e->exit_code);
    if (e->detail)
        ADD("  %s", (detail = oomi_shown(e->detail)) ? detail : "?");
#undef ADD
    oomi_free(name);
    oomi_free(detail);
    return buf;
}
