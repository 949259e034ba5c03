/*
 * watch_session.h - one running watch (watch_session.c): what cmd_watch.c (options, text and JSON
 * output) and watch_tui.c (the ncursesw view) both use. The view gets everything through this.
 */
#ifndef OOMLESS_WATCH_SESSION_H
#define OOMLESS_WATCH_SESSION_H

#include "oomless.h"
#include "watch_log.h"

#include <signal.h>
#include <stdio.h>

#define WATCH_MIN_INTERVAL 0.05
#define WATCH_MAX_INTERVAL 3600.0

/* one running watch */
struct watch_ctx {
    oom_monitor *monitor;
    oom_event_log *events; /* NULL without --events */
    struct watch_log *log; /* NULL without --log */
    double interval;       /* seconds between samples */
    long long count;       /* samples to take; 0: until stopped */
    long long taken;       /* samples taken so far */
    size_t events_added;   /* events the last step read */
    int paused;            /* the interactive view stopped sampling */
    char error[512];       /* why watch_step failed, printed once the terminal is back */
};

/* the signal that asked the watch to stop (SIGINT, SIGTERM, SIGHUP, SIGQUIT), or 0; set by the
 * handlers, which do nothing else */
extern volatile sig_atomic_t watch_stop_signal;

/* Samples once, appends the CSV rows, reads new events. Returns an exit code (EXIT_OK...);
 * on failure the message is in w->error (nothing is printed). A log that cannot be written is
 * no failure: watching goes on, and w->log->notes says so. */
int watch_step(struct watch_ctx *w);
/* Monotonic seconds. */
double watch_now(void);
/* "12:01:02  oom     pid 7 attempt 1 batch 32 peak 23.44 GiB" (absent fields left out; the
 * file's own text escaped, as oomi_shown does) */
char *watch_format_event(char *buf, size_t size, const oom_run_event *e);
/* A process's row as the text output and the view both show it (PID USER MEMORY BATCH COMMAND):
 * memory "N/A" when unknown, batch "32x4", "32" or "-", user and command "?" when unknown or
 * not readable from this PID namespace. User and command are another's text, escaped
 * (oomi_shown: no escape sequence of theirs reaches the terminal), owned by the row until
 * watch_process_row_done(). */
struct watch_process_row {
    char mem[16], batch[48];
    const char *user, *command;
    char *owned[2];
};
void watch_process_row(struct watch_process_row *row, const oom_watch_process *p);
void watch_process_row_done(struct watch_process_row *row);
/* "1h02m", "3m20s", "45s" */
char *watch_format_duration(char *buf, size_t size, double seconds);

#endif
