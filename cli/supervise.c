/*
 * supervise.c - what `run` and `probe` share while a job runs under them: the signal handlers
 * (they only set flags and count: the library forwards the signals), job control (oomless stops
 * with its job and goes on with it), and notices that never block.
 *
 * Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT stop the job and oomless (a second one during
 * the kill grace kills the job at once); SIGUSR1, SIGUSR2,
 * SIGTSTP and SIGCONT are passed on to the job (the relay); SIGTTOU is ignored, so that oomless
 * may write to its terminal and take the terminal back while the job holds it; SIGPIPE is
 * ignored; SIGXFSZ is ignored, so that an append past a file-size limit (`ulimit -f`: the
 * calibration record, run's events) fails and is reported instead of killing oomless half-way
 * (the job gets the default disposition back: lib/job/proc.c).
 *
 * A stderr nobody reads (a full pipe, a stalled pager) must not hold the supervision loop: a
 * notice (oomless's own, and the library's while the job runs) is queued and written only as
 * far as stderr takes it without blocking; the rest goes at the next notice or at the end. At
 * the end `run` waits for its reader like any program, but once a stop signal has come no
 * write waits more than about a second without progress: the queue is dropped, and stdio
 * writes are interrupted by a repeating alarm. `probe` never waits on its own output past its
 * deadlines, stop signal or not: at the end the same alarm cuts any write its reader has taken
 * nothing of for about the kill grace (cli_supervise_done's stall_s), and its report goes out
 * through cli_write_bounded().
 */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t cli_stop_signal;
oom_job_relay cli_relay = OOM_JOB_RELAY_INIT;
static volatile sig_atomic_t final_phase; /* the job has ended: only oomless's output is left */
static volatile sig_atomic_t stall_alarm; /* probe's end: seconds between cuts of a blocked write */

#define SAY_MAX 65536
static char say_queue[SAY_MAX];
static size_t say_head, say_len;

/* one count more (each counter has one writer: the handler of its signal) */
static void count(volatile sig_atomic_t *c)
{
    *c = *c == SIG_ATOMIC_MAX ? 0 : *c + 1;
}

/* every stop signal is counted: a second one during the kill grace kills the job at once */
static void on_stop(int sig)
{
    cli_stop_signal = sig;
    count(&cli_relay.stops);
    if (final_phase)
        alarm(1);
}

static void on_alarm(int sig)
{
    (void)sig;
    if (cli_stop_signal)
        alarm(1); /* again: each blocked write is cut off within a second */
    else if (stall_alarm)
        alarm((unsigned)stall_alarm); /* again: within the stall bound */
}

/* The library's notices while the job runs: queued, as cli_say's (common.c's handler dedups) */
static void queue_notice(const char *message)
{
    cli_say("oomless: %s\n", message);
}

static void on_relay(int sig)
{
    if (sig == SIGUSR1)
        count(&cli_relay.usr1);
    else if (sig == SIGUSR2)
        count(&cli_relay.usr2);
    else if (sig == SIGTSTP)
        count(&cli_relay.tstp);
    else if (sig == SIGCONT)
        count(&cli_relay.cont);
}

void cli_supervise_signals(void)
{
    static const int relayed[] = {SIGUSR1, SIGUSR2, SIGTSTP, SIGCONT};
    static const int alarm_sig[] = {SIGALRM}, ignored[] = {SIGTTOU, SIGPIPE, SIGXFSZ};

    /* no SA_RESTART: a wait or a write is interrupted */
    cli_set_signals(cli_stop_signals, CLI_STOP_SIGNALS, on_stop);
    cli_set_signals(relayed, sizeof(relayed) / sizeof(relayed[0]), on_relay);
    cli_set_signals(alarm_sig, 1, on_alarm);
    cli_set_signals(ignored, sizeof(ignored) / sizeof(ignored[0]), SIG_IGN);
    cli_notices_to(queue_notice);
}

const char *cli_signal_name(int sig)
{
    static const struct {
        int sig;
        const char *name;
    } names[] = {{SIGINT, "SIGINT"},   {SIGTERM, "SIGTERM"}, {SIGHUP, "SIGHUP"},
                 {SIGQUIT, "SIGQUIT"}, {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"},
                 {SIGUSR2, "SIGUSR2"}, {SIGTSTP, "SIGTSTP"}, {SIGCONT, "SIGCONT"},
                 {SIGTTIN, "SIGTTIN"}, {SIGTTOU, "SIGTTOU"}, {SIGSTOP, "SIGSTOP"}};
    static char other[24];
    size_t i;
    for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (names[i].sig == sig)
            return names[i].name;
    snprintf(other, sizeof(other), "signal %d", sig);
    return other;
}

const char *cli_again_hint(int sig)
{
    size_t i;
    for (i = 0; i < CLI_STOP_SIGNALS; i++)
        if (cli_stop_signals[i] == sig && cli_relay.stops == 1)
            return " (a second one kills it at once)";
    return "";
}

const char *cli_kill_reason(const char *grace)
{
    return cli_relay.stops >= 2 ? "a second stop signal" : grace;
}

void cli_supervise_stopped(const oom_job_event *ev)
{
    cli_signal_fn old;
    int sig = ev->signal;

    if (sig != SIGTSTP && sig != SIGTTIN && sig != SIGTTOU)
        return; /* SIGSTOP: whoever stopped the job continues it */
    /* Stop as the terminal would have stopped us, had the job been in our group: the whole
     * group when the job stopped by itself (Ctrl-Z reached only the job's group, which held
     * the terminal), else just oomless (the SIGTSTP came to oomless). The default action for
     * the moment: our handler would only count it. Returns once continued (fg, bg, SIGCONT);
     * at once when the group is orphaned (the kernel discards the stop: nobody could continue
     * it). */
    old = cli_set_signals(&sig, 1, SIG_DFL);
    if (ev->by_job)
        kill(0, sig);
    else
        raise(sig);
    cli_set_signals(&sig, 1, old);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Writes queued notices while stderr takes them, waiting up to wait_ms for it each time.
 * Returns 1 when something was written, -1 when stderr failed (the queue is dropped). */
static int say_write(int wait_ms)
{
    struct pollfd pf = {2, POLLOUT, 0};
    ssize_t n;
    if (say_len == 0 || poll(&pf, 1, wait_ms) <= 0)
        return 0;
    n = write(2, say_queue + say_head, say_len < PIPE_BUF ? say_len : PIPE_BUF);
    if (n > 0) {
        say_head += (size_t)n;
        say_len -= (size_t)n;
        if (say_len == 0)
            say_head = 0;
        return 1;
    }
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return 0;
    say_head = say_len = 0;
    return -1;
}

void cli_say(const char *fmt, ...)
{
    char line[1024];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n >= sizeof(line))
        n = (int)sizeof(line) - 1;
    if (say_head + say_len + (size_t)n > SAY_MAX) {
        memmove(say_queue, say_queue + say_head, say_len);
        say_head = 0;
    }
    if (say_len + (size_t)n <= SAY_MAX) { /* a full queue: stderr has not been read for long */
        memcpy(say_queue + say_head + say_len, line, (size_t)n);
        say_len += (size_t)n;
    }
    while (say_write(0) > 0)
        ;
}

void cli_supervise_done(double stall_s)
{
    double last = now_s();
    int r;

    final_phase = 1;
    if (stall_s > 0) /* whole seconds (alarm), at least one */
        stall_alarm = stall_s >= 3600 ? 3600 : stall_s < 1 ? 1 : (sig_atomic_t)(stall_s + 0.5);
    if (cli_stop_signal)
        alarm(1);
    else if (stall_alarm)
        alarm((unsigned)stall_alarm);
    while (say_len > 0 && !(cli_stop_signal && now_s() - last >= 1.0) &&
           !(stall_s > 0 && now_s() - last >= stall_s)) {
        if ((r = say_write(100)) < 0)
            break;
        if (r > 0)
            last = now_s();
    }
    say_head = say_len = 0;
    cli_notices_to(NULL);
}

int cli_write_bounded(int fd, const char *buf, size_t len, double stall_s)
{
    double last = now_s();
    ssize_t n;

    while (len > 0) {
        struct pollfd pf = {fd, POLLOUT, 0};
        double left = stall_s - (now_s() - last);
        if (left <= 0) {
            errno = EAGAIN;
            return -1;
        }
        if (poll(&pf, 1, left > 0.1 ? 100 : (int)(left * 1000.0) + 1) <= 0)
            continue; /* not writable yet, or a signal (the alarm) */
        /* a pipe that polls writable takes PIPE_BUF bytes without blocking */
        n = write(fd, buf, len < PIPE_BUF ? len : PIPE_BUF);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            last = now_s();
        } else if (n < 0 && errno != EINTR && errno != EAGAIN) {
            return -1;
        }
    }
    return 0;
}
