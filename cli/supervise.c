/*
 * supervise.c - what `run` and `probe` share while a job runs under them: the signal handlers
 * (they only set flags: the library forwards the signals), and notices that never block.
 *
 * A stderr nobody reads (a full pipe, a stalled pager) must not hold the supervision loop: a
 * notice is queued and written only as far as stderr takes it without blocking; the rest goes
 * at the next notice or at the end. At the end oomless waits for its reader like any program,
 * but once a stop signal has come no write waits more than about a second without progress:
 * the queue is dropped, and stdio writes are interrupted by a repeating alarm.
 */
#include "cli.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

volatile sig_atomic_t cli_stop_signal;
static volatile sig_atomic_t final_phase; /* the job has ended: only oomless's output is left */

#define SAY_MAX 65536
static char say_queue[SAY_MAX];
static size_t say_head, say_len;

static void on_stop(int sig)
{
    cli_stop_signal = sig;
    if (final_phase)
        alarm(1);
}

static void on_alarm(int sig)
{
    (void)sig;
    if (cli_stop_signal)
        alarm(1); /* again: each blocked write is cut off within a second */
}

void cli_supervise_signals(void)
{
    static const int stops[] = {SIGINT, SIGTERM, SIGHUP};
    struct sigaction sa;
    size_t i;

    memset(&sa, 0, sizeof(sa));
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = on_stop; /* no SA_RESTART: a wait or a write is interrupted */
    for (i = 0; i < sizeof(stops) / sizeof(stops[0]); i++)
        sigaction(stops[i], &sa, NULL);
    sa.sa_handler = on_alarm;
    sigaction(SIGALRM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
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

void cli_supervise_done(void)
{
    double last = now_s();
    int r;

    final_phase = 1;
    if (cli_stop_signal)
        alarm(1);
    while (say_len > 0 && !(cli_stop_signal && now_s() - last >= 1.0)) {
        if ((r = say_write(100)) < 0)
            break;
        if (r > 0)
            last = now_s();
    }
    say_head = say_len = 0;
}
