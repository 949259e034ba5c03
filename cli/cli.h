/*
 * cli.h - what the sub-command files share. Only the CLI prints or exits; the library returns
 * codes and messages, and cli_fail() turns them into a message on stderr and an exit code.
 *
 * Exit codes (documented in the README and the man page):
 *   0 success; 1 does not fit / job failed / edit refused; 2 usage (bad option, value, name or
 *   file); 3 environment (no NVML, I/O, out of memory). `run` passes the job's own status on.
 */
#ifndef OOMLESS_CLI_H
#define OOMLESS_CLI_H

#include "oomless.h"

#include <stdbool.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>

enum { EXIT_OK = 0, EXIT_NOFIT = 1, EXIT_USAGE = 2, EXIT_ENV = 3 };

/* one sub-command: its name, one line of summary, its entry point */
struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
};

/* The exit code for a library error code. */
int cli_exit_code(int oom_err);
/* Prints "oomless CMD: <library message>" to stderr and returns the exit code for `err`. */
int cli_fail(const char *cmd, int err);
/* Prints "oomless CMD: <message>" to stderr and returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prints a notice (one line) to stderr: "oomless: <message>". Never to stdout. */
void cli_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Makes the library's notices (damaged lines skipped, variables ignored) print as cli_notice
 * does, each distinct one once. */
void cli_init_notices(void);
/* Hands the library's notices (still each distinct one once) to `sink` instead (NULL: back to
 * cli_notice): a job's supervision queues them, so that a stalled stderr never holds it. */
void cli_notices_to(void (*sink)(const char *message));
/* An option's value (`what`: "--max-restarts", "$OOMLESS_BATCH_SIZE") as a whole number from
 * `min` to INT_MAX, or a usage error of `cmd` naming it. Returns an exit code. */
int cli_whole_number(long *out, const char *cmd, const char *text, long min, const char *what);
/* An option's value as a number of seconds from `min` to `max`, or a usage error naming the
 * range (or the decimal comma of "0,5"). Returns an exit code. */
int cli_seconds(double *out, const char *cmd, const char *text, const char *opt, double min,
                double max);
/* The longest --trial-timeout and --sample-interval: about 115 days, no limit in practice */
#define CLI_MAX_TIMEOUT 1e7
/* ---- the library's option and format tables as the tool shows them (cli/vocab.c) -----------
 * cli_command_bit(): the OOM_COMMAND_* bit of a command's name, 0 for another.
 * cli_print_options(): the options of the table `o` that `command` takes, as --help lists them:
 * "--NAME V1|V2|..." (its values that `command` takes, else its metavar) and its help with its
 * default, aligned; a list's values after its help.
 * cli_print_formats(): "--format FORMAT" and a line for each format `command` has;
 * cli_format_names(): their names, ", "-separated, into buf.
 * cli_usage(): prints `text`, a line "@budget" in it replaced by the budget options (those of
 * the plan table) that `command` takes.
 * cli_list(): `oomless --list-options [COMMAND]` (NAME, SYNOPSIS, COMMANDS, HELP a line, tab-
 * separated) and `oomless --list-values OPTION [COMMAND]` (VALUE, COMMANDS, HELP a line;
 * "format" lists the output formats); for the man page and the completion. argv[0] is the query. */
unsigned cli_command_bit(const char *name);
void cli_print_options(FILE *out, const oom_option *const *o, size_t n, unsigned command);
void cli_print_formats(FILE *out, unsigned command);
const char *cli_format_names(char *buf, size_t size, unsigned command);
void cli_usage(FILE *out, const char *text, unsigned command);
int cli_list(int argc, char **argv);
/* Writes a JSON document (a library-made string) to stdout with a final newline. */
int cli_print_json(const char *json);
/* A count (parameters, FLOPs) as "68.98 B", "124.44 M", "12.30 K" or "512", never in scientific
 * notation; returns buf. */
const char *cli_format_count(char *buf, size_t n, double v);

/* The one place the tool sets signal handlers: `handler` (a function, SIG_IGN or SIG_DFL) for
 * each of sigs[0..n), without SA_RESTART (a sleep, a wait, a read or a write returns early with
 * EINTR) and with nothing else blocked while it runs. Returns what the last of them had before.
 * cli_stop_signals: the signals that end a command (run, probe, watch) after it has cleaned up. */
typedef void (*cli_signal_fn)(int);
cli_signal_fn cli_set_signals(const int *sigs, size_t n, cli_signal_fn handler);
#define CLI_STOP_SIGNALS 4
extern const int cli_stop_signals[CLI_STOP_SIGNALS];

/* Sub-commands, one file each (cli/cmd_<name>.c), dispatched from the table in main.c. */
int cmd_gpus(int argc, char **argv);
int cmd_estimate(int argc, char **argv);
int cmd_plan(int argc, char **argv);
int cmd_table(int argc, char **argv);
int cmd_probe(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_watch(int argc, char **argv);
int cmd_apply(int argc, char **argv);
int cmd_trace(int argc, char **argv);

/* ---- budget options shared by every planning command (cli/budget.c) -----------------------
 *   --gpu auto|INDEX|PROFILE   --vram SIZE   --vram-safety-margin SIZE|PCT   --config FILE
 * Put CLI_BUDGET_LONGOPTS in a getopt_long table and pass unknown codes to cli_budget_option. */
struct cli_budget {
    const char *gpu, *vram, *margin, *config;
};
enum { OPT_GPU = 0x1000, OPT_VRAM, OPT_MARGIN, OPT_CONFIG, OPT_VRAM_AUTO, OPT_FIRST_FREE = 0x1100 };
/* with the underscore spellings argparse-based training scripts use (--vram_safety_margin) */
#define CLI_BUDGET_LONGOPTS                                                                        \
    {"gpu", required_argument, NULL, OPT_GPU}, {"vram", required_argument, NULL, OPT_VRAM},        \
        {"vram-safety-margin", required_argument, NULL, OPT_MARGIN},                               \
        {"vram_safety_margin", required_argument, NULL, OPT_MARGIN},                               \
        {"vram-auto", no_argument, NULL, OPT_VRAM_AUTO},                                           \
        {"vram_auto", no_argument, NULL, OPT_VRAM_AUTO},                                           \
    {                                                                                              \
        "config", required_argument, NULL, OPT_CONFIG                                              \
    }
/* in a usage text, where cli_usage() prints the budget options */
#define CLI_BUDGET_HELP "@budget\n"
/* Returns 1 when `opt` was a budget option (stored), 0 otherwise. */
int cli_budget_option(struct cli_budget *b, int opt, const char *arg);
/* Loads config + catalog and resolves the target; prints the no-GPU fallback notice to stderr.
 * On success the caller frees with cli_budget_done(). Returns an exit code. */
struct cli_target {
    oom_config *config;
    oom_catalog *catalog;
    oom_target target;
    int resolved;
};
int cli_budget_resolve(struct cli_target *out, const char *cmd, const struct cli_budget *b);
void cli_budget_done(struct cli_target *t);
/* The option loop of the commands that end in `-- CMD...` (probe, run): budget options are
 * stored, --help prints `usage` and returns -1, every other option goes to take(ctx, opt, arg);
 * a command must follow (its argv starts at optind). Returns EXIT_OK, -1 or an exit code. */
int cli_parse_job_options(const char *cmd, int argc, char **argv, const struct option *longopts,
                          const char *usage, struct cli_budget *budget,
                          int (*take)(void *ctx, int opt, const char *arg), void *ctx);

/* ---- options of the commands that plan (cli/options.c) -----------------------------------------
 * cli_option_name(): the name of "NAME" or "NAME=VALUE" (arg without its "--") into `name`, '_'
 * read as '-' (--vram_safety_margin, as argparse-based training scripts spell options); returns
 * the text after '=' or NULL.
 * cli_parse_plan_options(): plan's and table's parser. Every workload and plan option goes to
 * oom_plan_options_set; flags: --help/-h, --json (a->format = "json"), --list-models
 * (a->list_models), --allow-inexact, --[no-]allow-downscale, --vram-auto (= --vram auto); `--`
 * ends the options with the probed
 * command (its calibration record); `extra` adds the command's own value options (stored in
 * *value), or refuses one with its message. Returns an exit code. */
const char *cli_option_name(char *name, size_t size, const char *arg);
struct cli_plan_args {
    bool help;
    const char *format;
    bool list_models;
};
/* cli_list_models(): the built-in model presets (--list-models: what --model names), one a line
 * or (json) as oom_model_presets_json gives them. Returns an exit code. */
int cli_list_models(const char *cmd, bool json);
struct cli_plan_extra {
    const char *name;
    const char **value;
    const char *refuse; /* not NULL: the option is refused with this message */
};
/* cli_nccl_env(): NCCL's environment variables as the workload options that model them, given
 * to set(obj, key, value) before the command line (which overrides them): NCCL_BUFFSIZE
 * (nccl-buffsize), NCCL_MAX_NCHANNELS (nccl-channels), NCCL_NVLS_ENABLE (0: nccl-nvls no),
 * CUBLAS_WORKSPACE_CONFIG (cublas-workspace). The library never reads the environment. Returns an
 * exit code. */
int cli_nccl_env(const char *cmd, int (*set)(void *obj, const char *key, const char *value),
                 void *obj);
int cli_parse_plan_options(const char *cmd, int argc, char **argv, oom_plan_options *o,
                           struct cli_plan_args *a, const struct cli_plan_extra *extra,
                           size_t n_extra);

/* ---- while a job runs under run or probe (cli/supervise.c) -------------------------------------
 * cli_supervise_signals(): SIGINT, SIGTERM, SIGHUP and SIGQUIT set cli_stop_signal (the library
 * forwards it to the job and stops) and are counted in cli_relay.stops (a second one during the
 * kill grace: the library kills the job at once); SIGUSR1, SIGUSR2, SIGTSTP and SIGCONT are counted
 * in cli_relay (the library passes them on); SIGTTOU, SIGPIPE and SIGXFSZ are ignored; the
 * library's notices are queued as cli_say() queues them. cli_supervise_stopped(): for an
 * OOM_EVENT_STOP after a terminal stop signal, stops oomless with its job and returns once
 * continued (a SIGSTOP is left alone). cli_say(): a notice for stderr, queued and written only
 * as far as stderr takes it without blocking. cli_supervise_done(stall_s), once the library
 * returns: writes the queued notices; after a stop signal no write (these, and the stdio output
 * that follows) waits more than about a second without progress; with stall_s > 0 (probe) none
 * waits more than about stall_s for a reader that takes nothing, stop signal or not.
 * cli_write_bounded(): writes all of buf to fd unless fd takes nothing for stall_s seconds: 0,
 * or -1 with errno (EAGAIN: the reader stalled). */
extern volatile sig_atomic_t cli_stop_signal;
extern oom_job_relay cli_relay;
void cli_supervise_signals(void);
void cli_supervise_stopped(const oom_job_event *ev);
/* "SIGTSTP" for the signals oomless names, else "signal N" */
const char *cli_signal_name(int sig);
/* For the notice of a forwarded signal: " (a second one kills it at once)" after the first stop
 * signal, else "". */
const char *cli_again_hint(int sig);
/* Why a job got SIGKILL: "a second stop signal", else `grace` (the grace ran out). */
const char *cli_kill_reason(const char *grace);
void cli_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_supervise_done(double stall_s);
int cli_write_bounded(int fd, const char *buf, size_t len, double stall_s);

#endif
