/* common.c - error reporting and output helpers shared by the sub-commands. */
#include "cli.h"
#include "core/core.h"

#include <errno.h>
#include <stdio.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

int cli_exit_code(int err)
{
    switch (err) {
    case OOM_OK:
        return EXIT_OK;
    case OOM_ENOFIT:
    case OOM_EJOB:
    case OOM_EREFUSED:
        return EXIT_NOFIT;
    case OOM_EINVAL:
    case OOM_EPARSE:
    case OOM_ENOTFOUND:
    case OOM_EUNSUPPORTED:
        return EXIT_USAGE;
    case OOM_EINTERRUPTED:
        return 130;
    default:
        return EXIT_ENV;
    }
}

int cli_fail(const char *cmd, int err)
{
    const char *msg = oom_last_message();
    fprintf(stderr, "oomless %s: %s\n", cmd, *msg ? msg : oom_strerror(err));
    return cli_exit_code(err);
}

int cli_whole_number(long *out, const char *cmd, const char *text, long min, const char *what)
{
    char *end;
    errno = 0;
    *out = strtol(text, &end, 10);
    if (*end && oomi_check_decimal_comma(text, what))
        return cli_usage_error(cmd, "%s", oom_last_message());
    if (errno || end == text || *end || *out < min || *out > INT_MAX)
        return cli_usage_error(cmd, "%s '%s' must be a whole number >= %ld", what, text, min);
    return EXIT_OK;
}

int cli_seconds(double *out, const char *cmd, const char *text, const char *opt, double min,
                double max)
{
    char *end;
    *out = oomi_strtod(text, &end);
    if (*end && oomi_check_decimal_comma(text, opt))
        return cli_usage_error(cmd, "%s", oom_last_message());
    if (end == text || *end || !(*out >= min && *out <= max))
        return cli_usage_error(cmd, "%s '%s' must be a number of seconds from %g to %g", opt, text,
                               min, max);
    return EXIT_OK;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "oomless %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nTry 'oomless %s --help'.\n", cmd);
    return EXIT_USAGE;
}

void cli_notice(const char *fmt, ...)
{
    va_list ap;
    fputs("oomless: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* where the library's notices go besides cli_notice(): cli_notices_to() */
static void (*notice_sink)(const char *message);

void cli_notices_to(void (*sink)(const char *message))
{
    notice_sink = sink;
}

/* The library's notices, each printed once: a command that reads the same damaged calibration
 * file for every row of a table says so one time. */
static void on_notice(const char *message, void *user)
{
    static char seen[16][256];
    static size_t n_seen;
    size_t i;

    (void)user;
    for (i = 0; i < n_seen; i++)
        if (!strncmp(seen[i], message, sizeof(seen[i]) - 1))
            return;
    if (n_seen < sizeof(seen) / sizeof(seen[0]))
        snprintf(seen[n_seen++], sizeof(seen[0]), "%s", message);
    if (notice_sink)
        notice_sink(message);
    else
        cli_notice("%s", message);
}

void cli_init_notices(void)
{
    oom_set_notice_handler(on_notice, NULL);
}

const int cli_stop_signals[CLI_STOP_SIGNALS] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

cli_signal_fn cli_set_signals(const int *sigs, size_t n, cli_signal_fn handler)
{
    struct sigaction sa, old;
    size_t i;

    memset(&sa, 0, sizeof(sa));
    memset(&old, 0, sizeof(old));
    old.sa_handler = SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sa.sa_handler = handler;
    for (i = 0; i < n; i++)
        sigaction(sigs[i], &sa, &old);
    return old.sa_handler;
}

int cli_print_json(const char *json)
{
    size_t n = strlen(json);
    if (fwrite(json, 1, n, stdout) != n || (n && json[n - 1] != '\n' && putchar('\n') == EOF))
        return EXIT_ENV;
    return fflush(stdout) ? EXIT_ENV : EXIT_OK;
}

const char *cli_format_count(char *buf, size_t n, double v)
{
    static const struct {
        double scale;
        const char *unit;
    } units[] = {{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}};
    size_t i;
    for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
        if (v >= units[i].scale) {
            snprintf(buf, n, "%.2f %s", v / units[i].scale, units[i].unit);
            return buf;
        }
    snprintf(buf, n, "%.0f", v);
    return buf;
}
